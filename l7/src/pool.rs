//! Per-worker pools with a fixed bound: the per-flow states and the
//! reassembly buffers. An item is allocated the first time the pool needs
//! it and then reused forever (a freed slot goes on a free list), so the
//! packet path allocates only while a pool grows towards its bound, and
//! never past it: a full pool is a counted refusal, never growth.

/// Bytes of one reassembly buffer: the bound on what a direction holds at
/// once (a TLS hello or server flight, an HTTP head, a DNS-over-TCP
/// message, a QUIC CRYPTO stream).
pub const BUF_BYTES: usize = 16 * 1024;

/// Slots of boxed `T`, at most `max`.
pub struct Pool<T> {
    items: Vec<Box<T>>,
    free: Vec<u32>,
    max: usize,
}

impl<T> Pool<T> {
    pub fn new(max: usize) -> Self {
        Pool {
            items: Vec::new(),
            free: Vec::new(),
            max: max.min(u32::MAX as usize - 1),
        }
    }

    /// A slot holding `make()`'s value, or `None` when all `max` are in
    /// use.
    pub fn take(&mut self, make: impl FnOnce() -> T) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            *self.items[i as usize] = make();
            return Some(i);
        }
        if self.items.len() >= self.max {
            return None;
        }
        self.items.push(Box::new(make()));
        Some((self.items.len() - 1) as u32)
    }

    pub fn give(&mut self, i: u32) {
        debug_assert!(!self.free.contains(&i));
        if (i as usize) < self.items.len() {
            self.free.push(i);
        }
    }

    pub fn get(&self, i: u32) -> Option<&T> {
        self.items.get(i as usize).map(|b| &**b)
    }

    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.items.get_mut(i as usize).map(|b| &mut **b)
    }

    /// Slots in use.
    pub fn in_use(&self) -> usize {
        self.items.len() - self.free.len()
    }

    /// Slots ever allocated (the pool's high-water mark).
    pub fn allocated(&self) -> usize {
        self.items.len()
    }
}

/// One reassembly buffer.
pub type Buf = [u8; BUF_BYTES];

/// The reassembly buffers of one worker.
pub type BufPool = Pool<Buf>;

impl BufPool {
    /// A buffer (its old content is left in place: users track lengths).
    pub fn take_buf(&mut self) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            return Some(i);
        }
        if self.items.len() >= self.max {
            return None;
        }
        self.items.push(Box::new([0; BUF_BYTES]));
        Some((self.items.len() - 1) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_reuses_and_refuses_at_the_bound() {
        let mut p: Pool<u64> = Pool::new(2);
        let a = p.take(|| 1).unwrap();
        let b = p.take(|| 2).unwrap();
        assert_eq!(p.take(|| 3), None, "bound reached");
        p.give(a);
        let c = p.take(|| 4).unwrap();
        assert_eq!(c, a, "slot reused");
        assert_eq!((p.get(c), p.get(b)), (Some(&4), Some(&2)));
        assert_eq!((p.in_use(), p.allocated()), (2, 2));
        let mut bufs = BufPool::new(1);
        let x = bufs.take_buf().unwrap();
        assert!(bufs.take_buf().is_none());
        bufs.give(x);
        assert_eq!(bufs.take_buf(), Some(x));
    }
}
