//! Memory of the big per-worker arrays: how much they take (for the
//! estimate made before anything is allocated), allocation that fails
//! with an error instead of aborting, a hint for huge pages, the side
//! columns that hold state only some flows need (DNS, IPv6 addresses), and
//! lazily zeroed arrays (the timestamp-RTT column, the flow index).

use crate::metrics::tsrtt::TsRtt;

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

/// A pre-sized slab of state only some flows need (the TCP or the DNS
/// tracker), indexed from the flow entry: a flow takes a slot when it is
/// created and gives it back when it ends. It is reserved for the flow
/// table's capacity, so it can never run out (at most `capacity` flows are
/// live, each holding at most one slot) and never allocates after
/// construction; its pages are touched only as slots are first used, so
/// the resident size follows the most flows of that kind held at once.
pub struct Column<T> {
    items: Vec<T>,
    free: Vec<u32>,
}

impl<T> Column<T> {
    pub fn try_new(capacity: usize, what: &'static str) -> Result<Self, AllocError> {
        let fail = || AllocError {
            what,
            bytes: Self::memory_bytes(capacity),
        };
        let mut items = Vec::new();
        items.try_reserve_exact(capacity).map_err(|_| fail())?;
        advise_huge_pages(items.as_ptr(), capacity.saturating_mul(size_of::<T>()));
        let mut free = Vec::new();
        free.try_reserve_exact(capacity).map_err(|_| fail())?;
        Ok(Column { items, free })
    }

    /// Bytes reserved for `capacity` slots (the state and the free list).
    pub fn memory_bytes(capacity: usize) -> u64 {
        (capacity as u64).saturating_mul((size_of::<T>() + size_of::<u32>()) as u64)
    }

    /// Takes a slot for `v`. Never allocates while no more than the
    /// capacity are taken at once (the flow table's invariant).
    #[inline]
    pub fn alloc(&mut self, v: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = v;
                i
            }
            None => {
                debug_assert!(self.items.len() < self.items.capacity());
                self.items.push(v);
                (self.items.len() - 1) as u32
            }
        }
    }

    /// Gives slot `i` back (its value stays until the slot is taken again).
    #[inline]
    pub fn release(&mut self, i: u32) {
        self.free.push(i);
    }

    #[inline]
    pub fn get(&self, i: u32) -> Option<&T> {
        self.items.get(i as usize)
    }

    #[inline]
    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.items.get_mut(i as usize)
    }

    /// Slots reserved (the most ever in use at once, without allocating).
    pub fn capacity(&self) -> usize {
        self.items.capacity()
    }

    /// Slots in use.
    pub fn len(&self) -> usize {
        self.items.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Types whose all-zero bytes are a valid value (plain integers and
/// arrays of them), so a [`Zeroed`] array of them may start as the
/// kernel's zero pages.
///
/// # Safety
/// An implementor must be valid when every byte is 0 and must not need
/// `Drop`.
pub unsafe trait ZeroValid: Sized {}

// SAFETY: `TsRtt` holds only integers and arrays of integers (all its
// types derive `Default` as zeros; `TsRtt::start` is how an entry begins).
unsafe impl ZeroValid for TsRtt {}

/// `n` values in anonymous memory from `mmap`, which the kernel backs with
/// zeroed pages only when first written, so slots never written cost no
/// memory. (A zeroed heap allocation would not do: for an alignment above
/// 16 the allocator writes the zeros itself, touching every page up
/// front.) Used for the timestamp-RTT column (an all-zero `TsRtt` is an
/// empty state; the TCP tracker starts an entry before using it anyway)
/// and for the flow index's buckets.
pub struct Zeroed<T: ZeroValid> {
    map: Option<memmap2::MmapMut>,
    len: usize,
    _values: std::marker::PhantomData<T>,
}

/// The timestamp-RTT column, by TCP slot.
pub type TsColumn = Zeroed<TsRtt>;

impl<T: ZeroValid> Zeroed<T> {
    /// No array.
    pub fn empty() -> Self {
        Zeroed {
            map: None,
            len: 0,
            _values: std::marker::PhantomData,
        }
    }

    /// An array of `n` zero values, advised onto huge pages; an error if
    /// the kernel refuses the mapping.
    pub fn try_new(n: usize) -> std::io::Result<Self> {
        let Some(bytes) = n.checked_mul(size_of::<T>()).filter(|&b| b > 0) else {
            return Ok(Self::empty());
        };
        let map = memmap2::MmapMut::map_anon(bytes)?;
        advise_huge_pages(map.as_ptr(), bytes);
        Ok(Zeroed {
            map: Some(map),
            len: n,
            _values: std::marker::PhantomData,
        })
    }

    #[inline]
    pub fn as_slice(&self) -> &[T] {
        match &self.map {
            // SAFETY: the mapping is page-aligned (more than any `T`
            // here), `len * size_of::<T>()` bytes long, and every byte is
            // initialised (zero, or written through `as_mut_slice`); all-zero
            // bytes are a valid `T` (`ZeroValid`). The slice borrows
            // `self`, which owns the mapping.
            Some(m) => unsafe { std::slice::from_raw_parts(m.as_ptr().cast::<T>(), self.len) },
            None => &[],
        }
    }

    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        match &mut self.map {
            // SAFETY: as in `as_slice`; the mutable borrow of `self` makes
            // this the only reference into the mapping.
            Some(m) => unsafe {
                std::slice::from_raw_parts_mut(m.as_mut_ptr().cast::<T>(), self.len)
            },
            None => &mut [],
        }
    }

    #[inline]
    pub fn get(&self, i: u32) -> Option<&T> {
        self.as_slice().get(i as usize)
    }

    #[inline]
    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.as_mut_slice().get_mut(i as usize)
    }

    /// Bytes mapped for `n` values (backed only where written).
    pub fn memory_bytes(n: usize) -> u64 {
        (n as u64).saturating_mul(size_of::<T>() as u64)
    }
}

impl Zeroed<TsRtt> {
    /// A column of `n` entries; empty (the feature off, logged) if the
    /// kernel refuses the mapping.
    pub fn new(n: usize) -> Self {
        Self::try_new(n).unwrap_or_else(|e| {
            let bytes = Self::memory_bytes(n);
            tracing::warn!(error = %e, bytes, "no memory for timestamp RTT: it is off");
            Self::empty()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Column, TsColumn};

    #[test]
    fn column_reuses_released_slots() {
        let mut c: Column<u64> = Column::try_new(3, "test").unwrap();
        let (a, b) = (c.alloc(1), c.alloc(2));
        assert_eq!((a, b, c.len()), (0, 1, 2));
        c.release(a);
        assert_eq!(c.alloc(7), a);
        assert_eq!((c.get(a), c.get(b), c.get(2)), (Some(&7), Some(&2), None));
        *c.get_mut(b).unwrap() = 9;
        c.release(b);
        c.release(a);
        assert!(c.is_empty());
        assert_eq!(Column::<u64>::memory_bytes(10), 120);
    }

    #[test]
    fn ts_column_is_zeroed_and_writable() {
        let mut c = TsColumn::new(1000);
        assert!(c.get(999).is_some() && c.get(1000).is_none());
        let fresh = c.get(500).unwrap().record();
        assert_eq!(fresh.server.count, 0);
        c.get_mut(500).unwrap().reset_interval();
        assert!(TsColumn::empty().get(0).is_none());
        assert!(TsColumn::new(0).get(0).is_none());
    }
}
