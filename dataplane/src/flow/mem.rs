//! Memory for the big per-worker arrays: hints, and lazily zeroed columns.

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

/// A column of `n` timestamp-RTT entries, all zero, from one zeroed
/// allocation: for a size like this the allocator maps fresh pages, which
/// the kernel zeroes only when first written, so slots whose flows never
/// carry the option cost no memory. An all-zero `TsRtt` is its default (an
/// empty state: the TCP tracker starts it before use anyway).
pub fn zeroed_column(n: usize) -> Vec<crate::metrics::tsrtt::TsRtt> {
    use crate::metrics::tsrtt::TsRtt;
    use std::alloc::{Layout, alloc_zeroed, handle_alloc_error};
    let Ok(layout) = Layout::array::<TsRtt>(n) else {
        // Not reachable with a u32 flow capacity; the feature is off then.
        tracing::warn!(n, "timestamp-RTT column too large: timestamp RTT off");
        return Vec::new();
    };
    if layout.size() == 0 {
        return Vec::new();
    }
    // SAFETY: the layout has a non-zero size (checked above).
    let ptr = unsafe { alloc_zeroed(layout) }.cast::<TsRtt>();
    if ptr.is_null() {
        handle_alloc_error(layout);
    }
    advise_huge_pages(ptr, layout.size());
    // SAFETY: `ptr` comes from the global allocator with the layout of `n`
    // `TsRtt`s (so capacity `n` is right), and all `n` are initialised:
    // `TsRtt` holds only integers, for which all-zero bytes are valid.
    unsafe { Vec::from_raw_parts(ptr, n, n) }
}
