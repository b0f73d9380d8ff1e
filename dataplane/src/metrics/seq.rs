//! TCP sequence numbers as a wrap-aware newtype (RFC 9293 §3.4: sequence
//! space is arithmetic modulo 2^32).
//!
//! Comparisons go through `wrapping_sub` interpreted as a signed distance,
//! as smoltcp's `SeqNumber` does, but nothing here can panic: a passive probe
//! sees arbitrary (even hostile) numbers, so there is no debug assertion on
//! the distance and no overflowing `+`.

/// A 32-bit TCP sequence or acknowledgement number.
///
/// Deliberately not `Ord`: modular order is not transitive across more than
/// half the space, so only the explicit, documented comparisons exist.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SeqNumber(pub u32);

impl SeqNumber {
    /// `self + n` modulo 2^32.
    #[inline]
    pub const fn add(self, n: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(n))
    }

    /// `self - n` modulo 2^32.
    #[inline]
    pub const fn sub(self, n: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_sub(n))
    }

    /// Signed distance `self - other`, in (-2^31, 2^31].
    #[inline]
    pub const fn distance(self, other: SeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// `self < other` in sequence space.
    #[inline]
    pub const fn before(self, other: SeqNumber) -> bool {
        self.distance(other) < 0
    }

    /// `self <= other` in sequence space.
    #[inline]
    pub const fn at_or_before(self, other: SeqNumber) -> bool {
        self.distance(other) <= 0
    }

    /// `self > other` in sequence space.
    #[inline]
    pub const fn after(self, other: SeqNumber) -> bool {
        self.distance(other) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::SeqNumber;

    #[test]
    fn metrics_seq_compares_across_wrap() {
        let near_top = SeqNumber(u32::MAX - 10);
        let wrapped = near_top.add(100);
        assert_eq!(wrapped, SeqNumber(89));
        assert!(near_top.before(wrapped));
        assert!(wrapped.after(near_top));
        assert!(!wrapped.before(near_top));
        assert_eq!(wrapped.distance(near_top), 100);
        assert_eq!(near_top.distance(wrapped), -100);
        assert_eq!(wrapped.sub(100), near_top);
        assert!(near_top.at_or_before(near_top));
    }

    #[test]
    fn metrics_seq_extreme_distances_do_not_panic() {
        let a = SeqNumber(0);
        let b = SeqNumber(0x8000_0000);
        // Exactly half the space apart: the signed distance saturates the
        // i32 range without overflow; the answer is arbitrary but defined.
        assert_eq!(a.distance(b), i32::MIN);
        assert_eq!(b.distance(a), i32::MIN);
        assert_eq!(SeqNumber(u32::MAX).add(u32::MAX), SeqNumber(u32::MAX - 1));
        assert_eq!(SeqNumber(0).sub(1), SeqNumber(u32::MAX));
    }
}
