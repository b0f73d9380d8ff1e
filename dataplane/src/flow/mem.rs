//! Memory of the big per-worker arrays: how much they take (for the
//! estimate made before anything is allocated), allocation that fails
//! with an error instead of aborting, and a hint for huge pages.

/// A table could not get its memory up front.
#[derive(Debug, thiserror::Error)]
#[error("cannot allocate {what} ({bytes} bytes)")]
pub struct AllocError {
    pub what: &'static str,
    pub bytes: u64,
}

/// Asks the kernel to back `[ptr, ptr + bytes)` with transparent huge pages
/// (2 MiB) where it can. The flow slab is hundreds of megabytes accessed at
/// random: on 4 KiB pages nearly every packet also misses the TLB. Only a
/// hint: with THP off, or on other systems, nothing changes.
pub fn advise_huge_pages<T>(ptr: *const T, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = (ptr as usize).next_multiple_of(HUGE);
        let end = (ptr as usize).saturating_add(bytes) & !(HUGE - 1);
        if end > start {
            // SAFETY: madvise(MADV_HUGEPAGE) only changes how the kernel backs
            // pages of a mapping this process owns (the range lies inside the
            // allocation behind `ptr`); it never changes contents or
            // validity, and an error (e.g. THP disabled) is harmless.
            let _ = unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE)
            };
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (ptr, bytes);
    }
}

/// Index size for `capacity` live entries. Twice the entries: hashbrown
/// rehashes in place (no new allocation) only while at most half its
/// capacity is used, and removals leave tombstones that count until then;
/// sized for exactly `capacity` it would grow once under churn at the limit.
pub fn index_capacity(capacity: usize) -> usize {
    capacity.saturating_mul(2).saturating_add(2)
}

/// Bytes of a hashbrown table sized `with_capacity(items)` with `entry`-byte
/// entries: buckets for a 7/8 load, rounded up to a power of two, each with
/// one control byte (plus a group of trailing control bytes).
pub fn hash_index_bytes(items: usize, entry: usize) -> u64 {
    let buckets = (items as u64)
        .saturating_mul(8)
        .div_ceil(7)
        .next_power_of_two();
    buckets.saturating_mul(entry as u64 + 1) + 16
}
