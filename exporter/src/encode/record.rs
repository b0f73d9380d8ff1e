//! One flow record → field values, big-endian, into the message buffer.
//! This is the hot path: no allocation (the buffer's capacity is reserved
//! by the caller), one `match` per field.

use std::net::IpAddr;

use xdprobe_dataplane::{Dir, FlowRecord, Timestamp};

use crate::ie::{NOT_MEASURED, Npm, Side, TsLeg, TsStat, Value};
use crate::template::FlowTemplate;

/// Seconds from the NTP epoch (1900-01-01) to the Unix epoch.
pub const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// A record seen from one direction: `fwd` is the direction whose sender is
/// the exported source.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub r: &'a FlowRecord,
    pub fwd: Dir,
    /// RFC 5103 biflowDirection: 0 arbitrary (roles guessed), 1 initiator,
    /// 2 reverseInitiator.
    pub biflow_direction: u8,
    /// Longest variable-length string value written (`encode::l7`).
    pub text_cap: usize,
}

impl<'a> View<'a> {
    pub fn new(r: &'a FlowRecord, fwd: Dir) -> Self {
        let biflow_direction = match (r.direction_guessed, fwd) {
            (true, _) => 0,
            (false, Dir::C2S) => 1,
            (false, Dir::S2C) => 2,
        };
        View {
            r,
            fwd,
            biflow_direction,
            text_cap: super::l7::MAX_TEXT,
        }
    }

    fn dir(&self, side: Side) -> Dir {
        match side {
            Side::Fwd => self.fwd,
            Side::Rev => self.fwd.reverse(),
        }
    }

    fn src(&self) -> (IpAddr, u16) {
        match self.fwd {
            Dir::C2S => (self.r.client_addr, self.r.client_port),
            Dir::S2C => (self.r.server_addr, self.r.server_port),
        }
    }

    fn dst(&self) -> (IpAddr, u16) {
        match self.fwd {
            Dir::C2S => (self.r.server_addr, self.r.server_port),
            Dir::S2C => (self.r.client_addr, self.r.client_port),
        }
    }
}

/// RFC 7011 §6.1.9 dateTimeMicroseconds: NTP seconds (era 0, wraps in
/// 2036 as the format does) and a fraction whose 11 low bits are zero. The
/// fraction is rounded *up* to the 2^-21 s grid so that reading it back
/// (`frac * 10^6 / 2^32`, truncated) gives exactly the microsecond we meant.
pub fn ntp_micros(ts: Timestamp) -> u64 {
    let us = ts.as_micros();
    let secs = (us / 1_000_000 + NTP_UNIX_OFFSET) & 0xFFFF_FFFF;
    let frac_us = us % 1_000_000;
    let frac = (frac_us << 21).div_ceil(1_000_000) << 11;
    (secs << 32) | frac
}

fn opt(v: Option<u32>) -> u32 {
    v.unwrap_or(NOT_MEASURED)
}

/// nProbe's latency elements are half a round trip (“RTT/2 client <->
/// nprobe”); not measured is 0 there.
fn half_us(v: Option<u32>) -> u32 {
    v.map_or(0, |us| us / 2)
}

fn us_to_ms(us: u32) -> u32 {
    us.saturating_add(500) / 1_000
}

fn npm_value(v: &View<'_>, n: Npm) -> u32 {
    let r = v.r;
    let d = |d: Dir| r.dir(d);
    match n {
        Npm::Rtt => opt(r.npm.rtt_us),
        Npm::ClientNet => opt(r.npm.client_net_us),
        Npm::ServerNet => opt(r.npm.server_net_us),
        Npm::Srt => opt(r.npm.srt_us),
        Npm::SrtCount => r.npm.srt_count,
        Npm::SrtMin => opt(r.npm.srt_min_us),
        Npm::SrtMean => opt(r.npm.srt_mean_us),
        Npm::SrtMax => opt(r.npm.srt_max_us),
        Npm::Retrans(x) => d(x).retrans,
        Npm::RetransFast(x) => d(x).retrans_fast,
        Npm::RetransSpurious(x) => d(x).retrans_spurious,
        Npm::RetransOther(x) => d(x).retrans_other,
        Npm::Ooo(x) => d(x).ooo,
        Npm::Keepalive(x) => d(x).keepalive,
        Npm::DupAck(x) => d(x).dup_ack,
        Npm::ZeroWindow(x) => d(x).zero_window,
        Npm::WindowFull(x) => d(x).window_full,
        Npm::Flags => u32::from(r.direction_guessed) | (u32::from(r.npm.tls) << 1),
        Npm::SeqInFlow => r.seq_in_flow,
        // Not measured, the count included, when the flow had no option.
        Npm::TsRtt(leg, stat) => r.npm.ts_rtt.map_or(NOT_MEASURED, |t| {
            let l = match leg {
                TsLeg::Server => &t.server,
                TsLeg::Client => &t.client,
            };
            match stat {
                TsStat::Count => l.count,
                TsStat::Min => opt(l.min_us),
                TsStat::Mean => opt(l.mean_us),
                TsStat::Max => opt(l.max_us),
                TsStat::P50 => opt(l.p50_us),
                TsStat::P90 => opt(l.p90_us),
            }
        }),
    }
}

fn split_sec_usec(us: u32, usec: bool) -> u32 {
    if usec { us % 1_000_000 } else { us / 1_000_000 }
}

/// Append one record laid out as `t` to `out`. The caller has checked that
/// `t.record_len` bytes fit.
pub fn write_record(out: &mut Vec<u8>, t: &FlowTemplate, v: &View<'_>) {
    let r = v.r;
    for f in &t.fields {
        match f.value {
            Value::SrcV4 | Value::DstV4 => {
                let (a, _) = if f.value == Value::SrcV4 {
                    v.src()
                } else {
                    v.dst()
                };
                let b = match a {
                    IpAddr::V4(a) => a.octets(),
                    IpAddr::V6(a) => a.to_ipv4_mapped().map_or([0; 4], |a| a.octets()),
                };
                out.extend_from_slice(&b);
            }
            Value::SrcV6 | Value::DstV6 => {
                let (a, _) = if f.value == Value::SrcV6 {
                    v.src()
                } else {
                    v.dst()
                };
                let b = match a {
                    IpAddr::V6(a) => a.octets(),
                    IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                };
                out.extend_from_slice(&b);
            }
            Value::SrcPort => out.extend_from_slice(&v.src().1.to_be_bytes()),
            Value::DstPort => out.extend_from_slice(&v.dst().1.to_be_bytes()),
            Value::Proto => out.push(r.proto),
            Value::Tos => out.push(r.tos),
            Value::Vlan => out.extend_from_slice(&r.vlan.unwrap_or(0).to_be_bytes()),
            // From the rounded microsecond, so the ms agrees with the JSON output.
            Value::StartMs => out.extend_from_slice(&(r.start.as_micros() / 1_000).to_be_bytes()),
            Value::EndMs => out.extend_from_slice(&(r.end.as_micros() / 1_000).to_be_bytes()),
            Value::StartUs => out.extend_from_slice(&ntp_micros(r.start).to_be_bytes()),
            Value::EndUs => out.extend_from_slice(&ntp_micros(r.end).to_be_bytes()),
            Value::Octets(s) => out.extend_from_slice(&r.dir(v.dir(s)).bytes.to_be_bytes()),
            Value::Packets(s) => out.extend_from_slice(&r.dir(v.dir(s)).packets.to_be_bytes()),
            Value::TcpFlags(s) => {
                let flags = r.dir(v.dir(s)).tcp_flags;
                if f.len == 1 {
                    out.push(flags);
                } else {
                    out.extend_from_slice(&u16::from(flags).to_be_bytes());
                }
            }
            Value::EndReason => out.push(r.end_reason.ipfix_code()),
            Value::BiflowDirection => out.push(v.biflow_direction),
            Value::Npm(n) => {
                let x = npm_value(v, n);
                if f.len == 1 {
                    out.push(u8::try_from(x).unwrap_or(u8::MAX));
                } else {
                    out.extend_from_slice(&x.to_be_bytes());
                }
            }
            Value::L7(x) => super::l7::write(out, f, x, r, v.text_cap),
            Value::ProcessId => {
                out.extend_from_slice(&r.process.map_or(0, |p| p.pid).to_be_bytes())
            }
            Value::ProcessName => out.extend_from_slice(&r.process.map_or([0; 16], |p| p.comm)),
            Value::ConnectUs => {
                out.extend_from_slice(&r.process.map_or(u32::MAX, |p| p.connect_us).to_be_bytes())
            }
            Value::NtopClientNwMs => {
                out.extend_from_slice(&us_to_ms(half_us(r.npm.client_net_us)).to_be_bytes())
            }
            Value::NtopServerNwMs => {
                out.extend_from_slice(&us_to_ms(half_us(r.npm.server_net_us)).to_be_bytes())
            }
            Value::NtopApplMs => {
                out.extend_from_slice(&us_to_ms(r.npm.srt_us.unwrap_or(0)).to_be_bytes())
            }
            Value::NtopRetrans(s) => out.extend_from_slice(&r.dir(v.dir(s)).retrans.to_be_bytes()),
            Value::NtopOoo(s) => out.extend_from_slice(&r.dir(v.dir(s)).ooo.to_be_bytes()),
            Value::Nf9ClientDelay { usec } => out.extend_from_slice(
                &split_sec_usec(half_us(r.npm.client_net_us), usec).to_be_bytes(),
            ),
            Value::Nf9ServerDelay { usec } => out.extend_from_slice(
                &split_sec_usec(half_us(r.npm.server_net_us), usec).to_be_bytes(),
            ),
            Value::Nf9ApplLatency { usec } => out
                .extend_from_slice(&split_sec_usec(r.npm.srt_us.unwrap_or(0), usec).to_be_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ntp_micros_round_trips_every_microsecond_edge() {
        for us in [0u64, 1, 2, 499_999, 500_000, 999_998, 999_999] {
            let ts = Timestamp::from_micros(1_700_000_000_000_000 + us);
            let v = ntp_micros(ts);
            let secs = v >> 32;
            let frac = v & 0xFFFF_FFFF;
            assert_eq!(frac & 0x7FF, 0, "low 11 bits must be zero");
            assert_eq!(secs, 1_700_000_000 + NTP_UNIX_OFFSET);
            assert_eq!((frac * 1_000_000) >> 32, us, "fraction of {us} µs");
        }
    }

    /// The extremes of the accepted capture range (1970 and 2262, see
    /// `xdprobe_dataplane::time`) encode without overflow: milliseconds
    /// exactly, NTP microseconds modulo the era (RFC 5905: 2036-02-07 starts
    /// era 1, seconds restart at 0), never a panic or a saturated sentinel.
    #[test]
    fn extreme_capture_times_encode_without_overflow() {
        assert_eq!(ntp_micros(Timestamp::ZERO), NTP_UNIX_OFFSET << 32);
        let max = Timestamp::MAX;
        let us = max.as_micros();
        assert_eq!(us / 1_000, 9_223_372_036_854, "flowEndMilliseconds");
        let v = ntp_micros(max);
        assert_eq!(v >> 32, (us / 1_000_000 + NTP_UNIX_OFFSET) % (1 << 32));
        assert_eq!(((v & 0xFFFF_FFFF) * 1_000_000) >> 32, us % 1_000_000);
        // The first second of NTP era 1.
        let era1 = Timestamp::from_micros(((1u64 << 32) - NTP_UNIX_OFFSET) * 1_000_000 + 7);
        assert_eq!(ntp_micros(era1) >> 32, 0);
        assert_eq!(((ntp_micros(era1) & 0xFFFF_FFFF) * 1_000_000) >> 32, 7);
        // Out-of-range values never reach the encoder (the worker drops
        // them), but would not panic either.
        let _ = ntp_micros(Timestamp::OUT_OF_RANGE);
    }

    #[test]
    fn ntp_epoch_offset_is_70_years_with_17_leap_days() {
        assert_eq!(NTP_UNIX_OFFSET, (70 * 365 + 17) * 86_400);
    }
}
