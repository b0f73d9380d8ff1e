//! Where flows live: two slabs, each a dense array of hot entries with a
//! parallel array of cold ones and a free list, and the side columns.
//! A flow's id (what the index, the lists and a batch's candidates hold)
//! is its slot, with [`TCP`] set for the TCP slab. Both slabs are
//! reserved for the table's capacity up front and filled from the bottom
//! (freed slots first), so their resident size follows the flows of each
//! kind held at once, and nothing allocates after construction.

use super::super::key::{Addr, CompactKey, FlowKey};
use super::super::lru::{LISTS, Link, Linked, ListId, ON_MASK};
use super::super::mem::{AllocError, Column, advise_huge_pages};
use super::entry::{Cold, Head, Hot1, Hot2, Kind, TcpColdEntry};
use crate::metrics::dns::DnsTracker;
use crate::time::Timestamp;

/// The id bit of a flow in the TCP slab.
pub(super) const TCP: u32 = 1 << 31;

/// Hot entries `H`, cold entries `C` at the same index, and the free slots.
pub(super) struct Slab<H, C> {
    pub hot: Vec<H>,
    pub cold: Vec<C>,
    free: Vec<u32>,
}

impl<H, C> Slab<H, C> {
    pub fn try_new(capacity: usize, what: &'static str) -> Result<Self, AllocError> {
        let fail = || AllocError {
            what,
            bytes: Self::memory_bytes(capacity),
        };
        let mut hot = Vec::new();
        hot.try_reserve_exact(capacity).map_err(|_| fail())?;
        advise_huge_pages(hot.as_ptr(), capacity.saturating_mul(size_of::<H>()));
        let mut cold = Vec::new();
        cold.try_reserve_exact(capacity).map_err(|_| fail())?;
        advise_huge_pages(cold.as_ptr(), capacity.saturating_mul(size_of::<C>()));
        let mut free = Vec::new();
        free.try_reserve_exact(capacity).map_err(|_| fail())?;
        Ok(Slab { hot, cold, free })
    }

    /// Bytes reserved for `capacity` slots: hot, cold and the free list.
    pub fn memory_bytes(capacity: usize) -> u64 {
        (capacity as u64).saturating_mul((size_of::<H>() + size_of::<C>() + 4) as u64)
    }

    /// Takes a slot for a new flow. Never allocates while no more than the
    /// capacity are taken at once (the flow table's invariant).
    #[inline]
    pub fn alloc(&mut self, hot: H, cold: C) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.hot[i as usize] = hot;
                self.cold[i as usize] = cold;
                i
            }
            None => {
                debug_assert!(self.hot.len() < self.hot.capacity());
                self.hot.push(hot);
                self.cold.push(cold);
                (self.hot.len() - 1) as u32
            }
        }
    }

    /// The slot the next [`alloc`](Self::alloc) takes (for a prefetch).
    #[inline]
    pub fn next_free(&self) -> usize {
        self.free.last().map_or(self.hot.len(), |&i| i as usize)
    }

    /// Gives slot `i` back (its entries stay until the slot is taken again).
    #[inline]
    pub fn release(&mut self, i: u32) {
        self.free.push(i);
    }

    /// Slots reserved (the most ever in use at once, without allocating).
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.hot.capacity()
    }

    /// Slots in use.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.hot.len() - self.free.len()
    }
}

/// Both slabs and the side columns.
pub(super) struct Slabs {
    /// Flows without TCP state: one hot line each.
    pub one: Slab<Hot1, Cold>,
    /// TCP flows: two hot lines each.
    pub tcp: Slab<Hot2, TcpColdEntry>,
    pub dns: Column<DnsTracker>,
    /// The addresses of IPv6 flows, at their compact key's slot.
    pub v6: Column<[Addr; 2]>,
}

impl Slabs {
    #[inline]
    pub fn head(&self, id: u32) -> Option<&Head> {
        let i = (id & !TCP) as usize;
        if id & TCP != 0 {
            self.tcp.hot.get(i).map(|h| &h.head)
        } else {
            self.one.hot.get(i).map(|h| &h.head)
        }
    }

    #[inline]
    pub fn head_ref(&self, id: u32) -> &Head {
        let i = (id & !TCP) as usize;
        if id & TCP != 0 {
            &self.tcp.hot[i].head
        } else {
            &self.one.hot[i].head
        }
    }

    #[inline]
    pub fn head_mut(&mut self, id: u32) -> &mut Head {
        let i = (id & !TCP) as usize;
        if id & TCP != 0 {
            &mut self.tcp.hot[i].head
        } else {
            &mut self.one.hot[i].head
        }
    }

    #[inline]
    pub fn cold(&self, id: u32) -> &Cold {
        let i = (id & !TCP) as usize;
        if id & TCP != 0 {
            &self.tcp.cold[i].cold
        } else {
            &self.one.cold[i]
        }
    }

    #[inline]
    pub fn cold_mut(&mut self, id: u32) -> &mut Cold {
        let i = (id & !TCP) as usize;
        if id & TCP != 0 {
            &mut self.tcp.cold[i].cold
        } else {
            &mut self.one.cold[i]
        }
    }

    /// The hot line(s) of flow `id`: its address and length.
    #[inline]
    pub fn hot_lines(&self, id: u32) -> Option<(*const u8, usize)> {
        let i = (id & !TCP) as usize;
        if id & TCP != 0 {
            let h = self.tcp.hot.get(i)?;
            Some((std::ptr::from_ref(h).cast(), size_of::<Hot2>()))
        } else {
            let h = self.one.hot.get(i)?;
            Some((std::ptr::from_ref(h).cast(), size_of::<Hot1>()))
        }
    }

    /// Whether flow `id` is live and has the key `probe` (the compact form
    /// of `key`).
    #[inline]
    pub fn matches(&self, id: u32, key: &FlowKey, probe: &CompactKey) -> bool {
        let Some(h) = self.head(id) else {
            return false;
        };
        h.live()
            && h.key.matches(probe)
            && (!probe.is_v6() || self.v6.get(h.key.v6_slot()) == Some(&key.addrs()))
    }

    /// Flow `id`'s full key.
    pub fn key(&self, id: u32) -> FlowKey {
        let Some(h) = self.head(id) else {
            return FlowKey::ZERO;
        };
        let v6 = if h.key.is_v6() {
            self.v6.get(h.key.v6_slot()).copied()
        } else {
            None
        };
        FlowKey::expand(&h.key, v6.unwrap_or_default())
    }

    /// When closing flow `id` ends (only TCP flows close; a flow without
    /// TCP state, which cannot be on the closing list, would end at once).
    #[inline]
    pub fn close_deadline(&self, id: u32) -> Timestamp {
        debug_assert!(id & TCP != 0);
        if id & TCP == 0 {
            return Timestamp::ZERO;
        }
        self.tcp
            .cold
            .get((id & !TCP) as usize)
            .map_or(Timestamp::ZERO, |c| c.close_deadline)
    }

    /// Frees flow `id`'s side state and slot; it is dead from now on.
    pub fn release(&mut self, id: u32) {
        let h = self.head_mut(id);
        let (kind, side, key) = (h.kind, h.side, h.key);
        h.set_dead();
        if kind == Kind::Dns {
            self.dns.release(side);
        }
        if key.is_v6() {
            self.v6.release(key.v6_slot());
        }
        if id & TCP != 0 {
            self.tcp.release(id & !TCP);
        } else {
            self.one.release(id);
        }
    }
}

const _: () = assert!(LISTS <= 8 && ON_MASK == 0b111);

impl Linked for Slabs {
    #[inline]
    fn link(&mut self, l: ListId, id: u32) -> &mut Link {
        if l == ListId::Closing {
            // Only TCP flows close (`FlowTable::process_prepared`).
            debug_assert!(id & TCP != 0);
            return &mut self.tcp.cold[(id & !TCP) as usize].closing;
        }
        &mut self.cold_mut(id).links[l as usize]
    }

    #[inline]
    fn on(&mut self, id: u32) -> &mut u8 {
        &mut self.head_mut(id).on
    }
}
