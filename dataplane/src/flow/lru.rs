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

#[derive(Clone, Copy, Debug)]
pub struct Links {
    pub prev: [u32; LISTS],
    pub next: [u32; LISTS],
    on: u8,
}

impl Default for Links {
    fn default() -> Self {
        Links {
            prev: [NIL; LISTS],
            next: [NIL; LISTS],
            on: 0,
        }
    }
}

impl Links {
    pub fn is_on(&self, l: ListId) -> bool {
        self.on & (1 << l as u8) != 0
    }
}

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

/// Anything that stores [`Links`] per slot.
pub trait Linked {
    fn links(&mut self, idx: u32) -> &mut Links;
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
            let n = slab.links(idx);
            debug_assert!(!n.is_on(l));
            n.prev[li] = tail;
            n.next[li] = NIL;
            n.on |= 1 << li;
        }
        if tail == NIL {
            self.head[li] = idx;
        } else {
            slab.links(tail).next[li] = idx;
        }
        self.tail[li] = idx;
    }

    pub fn remove<S: Linked>(&mut self, slab: &mut S, l: ListId, idx: u32) {
        let li = l as usize;
        let (prev, next) = {
            let n = slab.links(idx);
            if !n.is_on(l) {
                return;
            }
            n.on &= !(1 << li);
            let pn = (n.prev[li], n.next[li]);
            n.prev[li] = NIL;
            n.next[li] = NIL;
            pn
        };
        if prev == NIL {
            self.head[li] = next;
        } else {
            slab.links(prev).next[li] = next;
        }
        if next == NIL {
            self.tail[li] = prev;
        } else {
            slab.links(next).prev[li] = prev;
        }
    }

    pub fn move_to_back<S: Linked>(&mut self, slab: &mut S, l: ListId, idx: u32) {
        if self.tail[l as usize] == idx {
            return;
        }
        self.remove(slab, l, idx);
        self.push_back(slab, l, idx);
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

    struct V(Vec<Links>);
    impl Linked for V {
        fn links(&mut self, idx: u32) -> &mut Links {
            &mut self.0[idx as usize]
        }
    }

    fn walk(h: &Heads, v: &V, l: ListId) -> Vec<u32> {
        let mut out = vec![];
        let mut cur = h.head[l as usize];
        while cur != NIL {
            out.push(cur);
            cur = v.0[cur as usize].next[l as usize];
        }
        out
    }

    #[test]
    fn push_remove_move() {
        let mut v = V(vec![Links::default(); 4]);
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
        h.remove_all(&mut v, 3);
        assert_eq!(walk(&h, &v, ListId::Lru), [2]);
        assert_eq!(h.head(ListId::Active), None);
        assert_eq!(h.tail[0], 2);
    }
}
