//! Intrusive doubly-linked lists over the flow slab, by slot index.
//!
//! Expiry never scans the table: each list is kept in time order, so the
//! flows to expire are always at its head (retina's and ipfixprobe's
//! approach, without a timer wheel's granularity).

pub const NIL: u32 = u32::MAX;

/// The lists a flow can be on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListId {
    /// Ordered by last packet time: idle expiry and eviction.
    Lru = 0,
    /// Ordered by start of the current reporting interval: active timeout.
    Active = 1,
    /// Ordered by close deadline: TCP FIN/RST linger.
    Closing = 2,
}

pub const LISTS: usize = 3;

/// A slot's place on one list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    pub prev: u32,
    pub next: u32,
}

impl Default for Link {
    fn default() -> Self {
        Link {
            prev: NIL,
            next: NIL,
        }
    }
}

/// The bit of `l` in a slot's list membership byte ([`Linked::on`]).
#[inline]
pub const fn bit(l: ListId) -> u8 {
    1 << l as u8
}

/// Mask of the membership bits in [`Linked::on`]'s byte (the others are
/// the slot owner's).
pub const ON_MASK: u8 = (1 << LISTS) - 1;

#[derive(Clone, Copy, Debug)]
pub struct Heads {
    head: [u32; LISTS],
    tail: [u32; LISTS],
}

impl Default for Heads {
    fn default() -> Self {
        Heads {
            head: [NIL; LISTS],
            tail: [NIL; LISTS],
        }
    }
}

/// Anything that stores a [`Link`] per list and slot, and a byte whose low
/// [`LISTS`] bits say which lists the slot is on. The links of one list
/// need not live beside the others' (the flow table keeps the closing
/// list's in the TCP state, as only TCP flows close).
pub trait Linked {
    fn link(&mut self, l: ListId, idx: u32) -> &mut Link;
    fn on(&mut self, idx: u32) -> &mut u8;
}

impl Heads {
    pub fn head(&self, l: ListId) -> Option<u32> {
        let h = self.head[l as usize];
        (h != NIL).then_some(h)
    }

    pub fn push_back<S: Linked>(&mut self, slab: &mut S, l: ListId, idx: u32) {
        let li = l as usize;
        let tail = self.tail[li];
        {
            let on = slab.on(idx);
            debug_assert!(*on & bit(l) == 0);
            *on |= bit(l);
            *slab.link(l, idx) = Link {
                prev: tail,
                next: NIL,
            };
        }
        if tail == NIL {
            self.head[li] = idx;
        } else {
            slab.link(l, tail).next = idx;
        }
        self.tail[li] = idx;
    }

    pub fn remove<S: Linked>(&mut self, slab: &mut S, l: ListId, idx: u32) {
        let li = l as usize;
        let Link { prev, next } = {
            let on = slab.on(idx);
            if *on & bit(l) == 0 {
                return;
            }
            *on &= !bit(l);
            std::mem::take(slab.link(l, idx))
        };
        if prev == NIL {
            self.head[li] = next;
        } else {
            slab.link(l, prev).next = next;
        }
        if next == NIL {
            self.tail[li] = prev;
        } else {
            slab.link(l, next).prev = prev;
        }
    }

    pub fn move_to_back<S: Linked>(&mut self, slab: &mut S, l: ListId, idx: u32) {
        if self.tail[l as usize] == idx {
            return;
        }
        self.remove(slab, l, idx);
        self.push_back(slab, l, idx);
    }

    /// Puts slot `new` where slot `old` is on every list `old` is on
    /// (`new` already holds `old`'s links and membership byte: the entry
    /// moved). `old` is on no list afterwards, as far as the lists go.
    pub fn replace<S: Linked>(&mut self, slab: &mut S, old: u32, new: u32) {
        let on = *slab.on(new);
        for l in [ListId::Lru, ListId::Active, ListId::Closing] {
            if on & bit(l) == 0 {
                continue;
            }
            let li = l as usize;
            let Link { prev, next } = *slab.link(l, new);
            if prev == NIL {
                self.head[li] = new;
            } else {
                slab.link(l, prev).next = new;
            }
            if next == NIL {
                self.tail[li] = new;
            } else {
                slab.link(l, next).prev = new;
            }
            debug_assert!(prev != old && next != old);
        }
    }

    pub fn remove_all<S: Linked>(&mut self, slab: &mut S, idx: u32) {
        for l in [ListId::Lru, ListId::Active, ListId::Closing] {
            self.remove(slab, l, idx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct V(Vec<([Link; LISTS], u8)>);
    impl Linked for V {
        fn link(&mut self, l: ListId, idx: u32) -> &mut Link {
            &mut self.0[idx as usize].0[l as usize]
        }
        fn on(&mut self, idx: u32) -> &mut u8 {
            &mut self.0[idx as usize].1
        }
    }

    fn walk(h: &Heads, v: &V, l: ListId) -> Vec<u32> {
        let mut out = vec![];
        let mut cur = h.head[l as usize];
        while cur != NIL {
            out.push(cur);
            cur = v.0[cur as usize].0[l as usize].next;
        }
        out
    }

    #[test]
    fn push_remove_move() {
        let mut v = V(vec![([Link::default(); LISTS], 0); 4]);
        let mut h = Heads::default();
        for i in 0..4 {
            h.push_back(&mut v, ListId::Lru, i);
        }
        h.move_to_back(&mut v, ListId::Lru, 1);
        assert_eq!(walk(&h, &v, ListId::Lru), [0, 2, 3, 1]);
        h.remove(&mut v, ListId::Lru, 0);
        h.remove(&mut v, ListId::Lru, 1);
        assert_eq!(walk(&h, &v, ListId::Lru), [2, 3]);
        h.remove(&mut v, ListId::Lru, 1); // not on the list: no-op
        h.push_back(&mut v, ListId::Active, 3);
        // Slot 3 moves to slot 1 (free now): the lists follow.
        v.0[1] = v.0[3];
        h.replace(&mut v, 3, 1);
        assert_eq!(walk(&h, &v, ListId::Lru), [2, 1]);
        assert_eq!(h.head(ListId::Active), Some(1));
        h.remove_all(&mut v, 1);
        assert_eq!(walk(&h, &v, ListId::Lru), [2]);
        assert_eq!(h.head(ListId::Active), None);
        assert_eq!(h.tail[0], 2);
    }
}
