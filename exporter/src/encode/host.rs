//! IPFIX messages of host stack-layer records (`xdprobe manager`): one
//! flow direction's segments T1…T8 with the 5-tuple the wire records
//! carry, so a collector can put the two side by side. IPFIX only (the
//! agent names are variable-length strings, which NetFlow v9 lacks).
//!
//! Element IDs: `crate::ie::host`. Templates 320 (IPv4) and 321 (IPv6).

use std::net::IpAddr;

use xdprobe_dataplane::time::Timestamp;

use super::ipfix::{self, HEADER_LEN, SET_TEMPLATE, patch_len};
use super::record::ntp_micros;
use super::varlen;
use crate::ie::{NOT_MEASURED, VARLEN, host, iana};

pub const TEMPLATE_ID_HOST_V4: u16 = 320;
pub const TEMPLATE_ID_HOST_V6: u16 = 321;
/// The flowRecordSequence element the flow templates use too.
const SEQ_IN_FLOW: u16 = 1031;

/// One segment's statistics, nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentStats {
    pub min_ns: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// One flow direction's host report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostRecord {
    /// The data's sender and receiver.
    pub src: Option<IpAddr>,
    pub sport: u16,
    pub dst: Option<IpAddr>,
    pub dport: u16,
    /// Unix µs.
    pub start_us: u64,
    pub end_us: u64,
    /// IANA flowEndReason: 1 idle, 2 active (periodic), 3 end, 4 forced.
    pub end_reason: u8,
    pub record_seq: u32,
    /// T1…T8 (index 0 = T1); a merged segment under its first part.
    pub segments: [Option<SegmentStats>; 8],
    pub complete: u64,
    pub incomplete: u64,
    pub clock_uncertainty_ns: Option<u64>,
    /// `host::FLAGS` bits.
    pub flags: u8,
    pub sender_agent: String,
    pub receiver_agent: String,
}

impl HostRecord {
    fn is_v6(&self) -> bool {
        matches!(self.src, Some(IpAddr::V6(_))) || matches!(self.dst, Some(IpAddr::V6(_)))
    }
}

/// (ID, length, enterprise?) of every field of a template, in order.
fn fields(v6: bool) -> Vec<(u16, u16, bool)> {
    let (a, l) = if v6 {
        (
            [iana::SOURCE_IPV6_ADDRESS, iana::DESTINATION_IPV6_ADDRESS],
            16,
        )
    } else {
        (
            [iana::SOURCE_IPV4_ADDRESS, iana::DESTINATION_IPV4_ADDRESS],
            4,
        )
    };
    let mut f = vec![
        (a[0], l, false),
        (a[1], l, false),
        (iana::SOURCE_TRANSPORT_PORT, 2, false),
        (iana::DESTINATION_TRANSPORT_PORT, 2, false),
        (iana::PROTOCOL_IDENTIFIER, 1, false),
        (iana::FLOW_START_MICROSECONDS, 8, false),
        (iana::FLOW_END_MICROSECONDS, 8, false),
        (iana::FLOW_END_REASON, 1, false),
        (SEQ_IN_FLOW, 4, true),
    ];
    for k in 1..=8u8 {
        for s in host::Stat::ALL {
            f.push((host::segment(k, s), 4, true));
        }
    }
    f.extend([
        (host::COMPLETE, 4, true),
        (host::INCOMPLETE, 4, true),
        (host::CLOCK_UNCERTAINTY, 4, true),
        (host::FLAGS, 1, true),
        (host::SENDER_AGENT, VARLEN, true),
        (host::RECEIVER_AGENT, VARLEN, true),
    ]);
    f
}

fn u32_sat(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX - 1).min(u32::MAX - 1)
}

/// Writes host-record messages for one collector (one transport session).
pub struct HostEncoder {
    pen: u32,
    domain: u32,
    max_len: usize,
    /// Data records sent before the next message.
    seq: u32,
}

impl HostEncoder {
    /// `max_len`: the largest message (UDP: path MTU minus IP/UDP headers).
    pub fn new(pen: u32, domain: u32, max_len: usize) -> HostEncoder {
        HostEncoder {
            pen,
            domain,
            max_len: max_len.clamp(512, usize::from(u16::MAX)),
            seq: 0,
        }
    }

    /// A message holding both templates.
    pub fn templates(&self, export_time: u32) -> Vec<u8> {
        let mut out = vec![0u8; HEADER_LEN];
        let start = out.len();
        out.extend_from_slice(&SET_TEMPLATE.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        for (id, v6) in [(TEMPLATE_ID_HOST_V4, false), (TEMPLATE_ID_HOST_V6, true)] {
            let f = fields(v6);
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&u16::try_from(f.len()).unwrap_or(0).to_be_bytes());
            for (fid, len, ent) in f {
                if ent {
                    // RFC 7011 §3.2: the enterprise bit, then the number.
                    out.extend_from_slice(&(fid | 0x8000).to_be_bytes());
                    out.extend_from_slice(&len.to_be_bytes());
                    out.extend_from_slice(&self.pen.to_be_bytes());
                } else {
                    out.extend_from_slice(&fid.to_be_bytes());
                    out.extend_from_slice(&len.to_be_bytes());
                }
            }
        }
        patch_len(&mut out, start);
        self.finish(out, export_time, self.seq)
    }

    fn finish(&self, mut msg: Vec<u8>, export_time: u32, seq: u32) -> Vec<u8> {
        let h = ipfix::header(msg.len(), export_time, seq, self.domain);
        msg[..HEADER_LEN].copy_from_slice(&h);
        msg
    }

    /// The records, in as few messages as fit: IPv4 ones first, then IPv6
    /// (one data set each per message). A record too long for any message
    /// (agent names of kilobytes) has its names cut.
    pub fn records(&mut self, recs: &[HostRecord], export_time: u32) -> Vec<Vec<u8>> {
        let mut msgs = Vec::new();
        let mut msg: Vec<u8> = Vec::new();
        let mut open: Option<(u16, usize)> = None;
        let mut in_msg = 0u32;
        let mut first_seq = self.seq;
        let by_family = recs
            .iter()
            .filter(|r| !r.is_v6())
            .chain(recs.iter().filter(|r| r.is_v6()));
        for r in by_family {
            let id = if r.is_v6() {
                TEMPLATE_ID_HOST_V6
            } else {
                TEMPLATE_ID_HOST_V4
            };
            let mut body = Vec::with_capacity(320);
            // Room for the names: what a fresh message leaves.
            let fixed = record_fixed_len(r.is_v6());
            let room = self.max_len.saturating_sub(HEADER_LEN + 4 + fixed) / 2;
            write_record(&mut body, r, room);
            let need = body.len()
                + if open.is_some_and(|(o, _)| o == id) {
                    0
                } else {
                    4
                };
            if !msg.is_empty() && msg.len() + need > self.max_len {
                close(&mut msg, &mut open);
                msgs.push(self.finish(std::mem::take(&mut msg), export_time, first_seq));
                first_seq = self.seq;
                in_msg = 0;
            }
            if msg.is_empty() {
                msg.resize(HEADER_LEN, 0);
            }
            if open.is_none_or(|(o, _)| o != id) {
                close(&mut msg, &mut open);
                open = Some((id, msg.len()));
                msg.extend_from_slice(&id.to_be_bytes());
                msg.extend_from_slice(&[0, 0]);
            }
            msg.extend_from_slice(&body);
            in_msg += 1;
            self.seq = self.seq.wrapping_add(1);
        }
        if in_msg > 0 {
            close(&mut msg, &mut open);
            msgs.push(self.finish(msg, export_time, first_seq));
        }
        msgs
    }
}

fn close(msg: &mut [u8], open: &mut Option<(u16, usize)>) {
    if let Some((_, start)) = open.take() {
        patch_len(msg, start);
    }
}

fn record_fixed_len(v6: bool) -> usize {
    fields(v6)
        .iter()
        .filter(|f| f.1 != VARLEN)
        .map(|f| usize::from(f.1))
        .sum()
}

fn addr(out: &mut Vec<u8>, a: Option<IpAddr>, v6: bool) {
    match (a, v6) {
        (Some(IpAddr::V4(a)), false) => out.extend_from_slice(&a.octets()),
        (Some(IpAddr::V6(a)), true) => out.extend_from_slice(&a.octets()),
        (Some(IpAddr::V4(a)), true) => out.extend_from_slice(&a.to_ipv6_mapped().octets()),
        (_, false) => out.extend_from_slice(&[0; 4]),
        (_, true) => out.extend_from_slice(&[0; 16]),
    }
}

fn write_record(out: &mut Vec<u8>, r: &HostRecord, name_room: usize) {
    let v6 = r.is_v6();
    addr(out, r.src, v6);
    addr(out, r.dst, v6);
    out.extend_from_slice(&r.sport.to_be_bytes());
    out.extend_from_slice(&r.dport.to_be_bytes());
    out.push(6);
    for us in [r.start_us, r.end_us] {
        out.extend_from_slice(&ntp_micros(Timestamp::from_micros(us)).to_be_bytes());
    }
    out.push(r.end_reason);
    out.extend_from_slice(&r.record_seq.to_be_bytes());
    for s in &r.segments {
        let vals = match s {
            Some(s) => [s.min_ns, s.mean_ns, s.p50_ns, s.p99_ns, s.max_ns].map(u32_sat),
            None => [NOT_MEASURED; 5],
        };
        for v in vals {
            out.extend_from_slice(&v.to_be_bytes());
        }
    }
    out.extend_from_slice(&u32_sat(r.complete).to_be_bytes());
    out.extend_from_slice(&u32_sat(r.incomplete).to_be_bytes());
    let u = r.clock_uncertainty_ns.map_or(NOT_MEASURED, u32_sat);
    out.extend_from_slice(&u.to_be_bytes());
    out.push(r.flags);
    for name in [&r.sender_agent, &r.receiver_agent] {
        let kept = varlen::truncate_utf8(name, varlen::fit(name.len(), name_room));
        varlen::write(out, kept.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(v6: bool, i: u16) -> HostRecord {
        let (src, dst): (IpAddr, IpAddr) = if v6 {
            (
                "2001:db8:1::1".parse().unwrap(),
                "2001:db8:1::2".parse().unwrap(),
            )
        } else {
            (
                "198.51.100.1".parse().unwrap(),
                "198.51.100.2".parse().unwrap(),
            )
        };
        let mut segments = [None; 8];
        segments[3] = Some(SegmentStats {
            min_ns: 5_000_000,
            mean_ns: 5_010_000,
            p50_ns: 5_008_000,
            p99_ns: 5_090_000,
            max_ns: 9_000_000_000,
        });
        HostRecord {
            src: Some(src),
            sport: 40000 + i,
            dst: Some(dst),
            dport: 5201,
            start_us: 1_700_000_000_000_000,
            end_us: 1_700_000_001_000_000,
            end_reason: 3,
            record_seq: 0,
            segments,
            complete: 100,
            incomplete: 2,
            clock_uncertainty_ns: Some(7_000),
            flags: 0b111,
            sender_agent: "a".into(),
            receiver_agent: "b".into(),
        }
    }

    fn be32(b: &[u8], off: usize) -> u32 {
        u32::from_be_bytes(b[off..off + 4].try_into().unwrap())
    }

    #[test]
    fn records_fit_the_message_cap_and_count_in_the_sequence() {
        let mut e = HostEncoder::new(32473, 9, 1400);
        let recs: Vec<HostRecord> = (0..20).map(|i| rec(i % 3 == 0, i)).collect();
        let msgs = e.records(&recs, 1_700_000_000);
        assert!(msgs.len() > 1);
        let mut seq = 0;
        for m in &msgs {
            assert!(m.len() <= 1400);
            assert_eq!(u16::from_be_bytes([m[0], m[1]]), 10);
            assert_eq!(usize::from(u16::from_be_bytes([m[2], m[3]])), m.len());
            assert_eq!(be32(m, 8), seq, "sequence counts the records before");
            assert_eq!(be32(m, 12), 9);
            // Sets fill the message exactly; count the records in them.
            let mut off = HEADER_LEN;
            while off < m.len() {
                let len = usize::from(u16::from_be_bytes([m[off + 2], m[off + 3]]));
                let id = u16::from_be_bytes([m[off], m[off + 1]]);
                let rl = record_fixed_len(id == TEMPLATE_ID_HOST_V6) + 4;
                seq += ((len - 4) / rl) as u32;
                off += len;
            }
            assert_eq!(off, m.len());
        }
        assert_eq!(seq, 20);
    }

    #[test]
    fn long_agent_names_are_cut_to_fit() {
        let mut e = HostEncoder::new(32473, 1, 600);
        let mut r = rec(true, 1);
        r.sender_agent = "x".repeat(5000);
        let m = e.records(&[r], 1);
        assert_eq!(m.len(), 1);
        assert!(m[0].len() <= 600, "{}", m[0].len());
    }

    #[test]
    fn templates_announce_enterprise_fields_and_varlen_names() {
        let e = HostEncoder::new(32473, 1, 1400);
        let m = e.templates(1);
        assert_eq!(usize::from(u16::from_be_bytes([m[2], m[3]])), m.len());
        // Set 2, then template 320 with its field count.
        assert_eq!(&m[16..18], &[0, 2]);
        assert_eq!(u16::from_be_bytes([m[20], m[21]]), TEMPLATE_ID_HOST_V4);
        assert_eq!(
            usize::from(u16::from_be_bytes([m[22], m[23]])),
            fields(false).len()
        );
        assert!(
            m.windows(2).any(|w| w == [0xFF, 0xFF]),
            "a variable-length field"
        );
    }
}
