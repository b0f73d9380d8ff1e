//! A timing probe's payload (`xdprobe_common::sync` has the layout), as
//! the manager writes and reads it. No I/O here.

use xdprobe_common::sync::{
    PROBE_FLAG_ANSWERED, PROBE_FLAGS, PROBE_LEN, PROBE_MAGIC, PROBE_MAGIC_OFF, PROBE_SEQ,
    PROBE_SESSION, PROBE_T1, PROBE_T2, PROBE_T3, PROBE_VERSION, PROBE_VERSION_1,
};

/// What a probe carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub session: u32,
    pub seq: u32,
    /// The manager's send time (its clock).
    pub t1: u64,
    /// The responder's receive and transmit times (the agent's clock); 0
    /// on the way out.
    pub t2: u64,
    pub t3: u64,
    pub answered: bool,
}

fn be_u64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_be_bytes(a)
}

fn be_u32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_be_bytes(a)
}

fn be_u16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

impl Probe {
    /// The outgoing probe.
    pub fn request(session: u32, seq: u32, t1: u64) -> Probe {
        Probe {
            session,
            seq,
            t1,
            t2: 0,
            t3: 0,
            answered: false,
        }
    }

    pub fn encode(&self) -> [u8; PROBE_LEN] {
        let mut b = [0u8; PROBE_LEN];
        b[PROBE_MAGIC_OFF..PROBE_MAGIC_OFF + 4].copy_from_slice(&PROBE_MAGIC.to_be_bytes());
        b[PROBE_VERSION..PROBE_VERSION + 2].copy_from_slice(&PROBE_VERSION_1.to_be_bytes());
        let flags = if self.answered {
            PROBE_FLAG_ANSWERED
        } else {
            0
        };
        b[PROBE_FLAGS..PROBE_FLAGS + 2].copy_from_slice(&flags.to_be_bytes());
        b[PROBE_SEQ..PROBE_SEQ + 4].copy_from_slice(&self.seq.to_be_bytes());
        b[PROBE_SESSION..PROBE_SESSION + 4].copy_from_slice(&self.session.to_be_bytes());
        b[PROBE_T1..PROBE_T1 + 8].copy_from_slice(&self.t1.to_be_bytes());
        b[PROBE_T2..PROBE_T2 + 8].copy_from_slice(&self.t2.to_be_bytes());
        b[PROBE_T3..PROBE_T3 + 8].copy_from_slice(&self.t3.to_be_bytes());
        b
    }

    /// `None` unless `b` is exactly one version-1 probe.
    pub fn decode(b: &[u8]) -> Option<Probe> {
        if b.len() != PROBE_LEN
            || be_u32(b, PROBE_MAGIC_OFF) != PROBE_MAGIC
            || be_u16(b, PROBE_VERSION) != PROBE_VERSION_1
        {
            return None;
        }
        Some(Probe {
            session: be_u32(b, PROBE_SESSION),
            seq: be_u32(b, PROBE_SEQ),
            t1: be_u64(b, PROBE_T1),
            t2: be_u64(b, PROBE_T2),
            t3: be_u64(b, PROBE_T3),
            answered: be_u16(b, PROBE_FLAGS) & PROBE_FLAG_ANSWERED != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_layout() {
        let p = Probe {
            session: 0xdead_beef,
            seq: 7,
            t1: 0x0102_0304_0506_0708,
            t2: 9,
            t3: 10,
            answered: true,
        };
        let b = p.encode();
        assert_eq!(&b[..4], b"xdcs");
        assert_eq!(&b[4..8], &[0, 1, 0, 1]);
        assert_eq!(&b[16..24], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Probe::decode(&b), Some(p));
    }

    #[test]
    fn refuses_anything_else() {
        let b = Probe::request(1, 2, 3).encode();
        assert!(Probe::decode(&b[..39]).is_none());
        let mut long = b.to_vec();
        long.push(0);
        assert!(Probe::decode(&long).is_none());
        let mut bad = b;
        bad[0] = b'X';
        assert!(Probe::decode(&bad).is_none());
        let mut v2 = b;
        v2[5] = 2;
        assert!(Probe::decode(&v2).is_none());
    }
}
