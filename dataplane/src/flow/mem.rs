//! Memory hints for the big per-worker arrays.

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
