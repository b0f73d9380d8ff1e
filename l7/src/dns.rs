//! DNS messages (RFC 1035 §4): the header, the first question's name, type
//! and class, and the first A/AAAA record of the answer section, read from
//! one message in place.
//!
//! Names may be compressed (§4.1.4). A pointer is followed only if it points
//! strictly before the place it was read from, so every hop goes backwards
//! and a chain of pointers cannot loop; a pointer to itself or forward, a
//! pointer past the message, a reserved label type (0x40, 0x80) or a name
//! longer than 255 bytes is refused with its [`NameError`]. Answer names are
//! skipped without following their pointers at all.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::text::Text;

/// DNS header length (RFC 1035 §4.1.1).
pub const HEADER_LEN: usize = 12;
/// Longest name on the wire, length octets included (RFC 1035 §2.3.4).
pub const MAX_NAME: usize = 255;
/// Pointers followed while reading one name: every hop goes backwards, so
/// this only bounds the work on a long backward chain.
const MAX_HOPS: u32 = 32;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;

/// Why a name was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameError {
    /// The name runs past the end of the message.
    Truncated,
    /// A compression pointer to its own position or forward: a loop, or a
    /// way to make one.
    PointerLoop,
    /// A compression pointer past the end of the message.
    PointerOutOfBounds,
    /// Label type 0x40 or 0x80 (reserved; RFC 6891 retired 0x40).
    BadLabel,
    /// Over 255 bytes, or more than [`MAX_HOPS`] pointers.
    TooLong,
}

/// Why a message was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsError {
    /// Shorter than the 12-byte header.
    Short,
    /// A record runs past the end of the message.
    Truncated,
    Name(NameError),
}

impl From<NameError> for DnsError {
    fn from(e: NameError) -> Self {
        DnsError::Name(e)
    }
}

/// The fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub id: u16,
    pub flags: u16,
    pub qdcount: u16,
    pub ancount: u16,
    pub nscount: u16,
    pub arcount: u16,
}

impl Header {
    pub fn parse(m: &[u8]) -> Option<Header> {
        let h = m.get(..HEADER_LEN)?;
        let w = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        Some(Header {
            id: w(0),
            flags: w(2),
            qdcount: w(4),
            ancount: w(6),
            nscount: w(8),
            arcount: w(10),
        })
    }

    /// QR: a response.
    pub fn is_response(&self) -> bool {
        self.flags & 0x8000 != 0
    }

    pub fn opcode(&self) -> u8 {
        ((self.flags >> 11) & 0xF) as u8
    }

    /// The header's 4-bit RCODE (what Wireshark shows as `dns.flags.rcode`).
    pub fn rcode(&self) -> u8 {
        (self.flags & 0xF) as u8
    }

    /// Z bit (must be zero, RFC 1035; used by no current extension).
    fn z(&self) -> bool {
        self.flags & 0x0040 != 0
    }
}

/// One message as the flow needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    pub header: Header,
    /// Type and class of the first question (its name went to the caller's
    /// buffer); `None` when the message has no question.
    pub question: Option<(u16, u16)>,
    /// The first A or AAAA record (class IN) of the answer section.
    pub first_addr: Option<IpAddr>,
    /// Every record of every section was read and the last one ends where
    /// the message does.
    pub exact: bool,
}

fn u16_at(m: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*m.get(at)?, *m.get(at + 1)?]))
}

/// Reads the name at `at` into `out` (labels joined by `.`, `<Root>` for
/// the root, as Wireshark writes names) and returns the offset just past
/// it where it was written (after its first pointer, if any).
pub fn read_name<const N: usize>(
    m: &[u8],
    at: usize,
    out: &mut Text<N>,
) -> Result<usize, NameError> {
    out.set(b"", 0);
    let mut pos = at;
    let mut end = None;
    let mut hops = 0;
    let mut wire = 0usize;
    loop {
        let &len = m.get(pos).ok_or(NameError::Truncated)?;
        match len & 0xC0 {
            0x00 if len == 0 => {
                if wire == 0 {
                    out.set(b"<Root>", N);
                }
                return Ok(end.unwrap_or(pos + 1));
            }
            0x00 => {
                let l = usize::from(len);
                let label = m.get(pos + 1..pos + 1 + l).ok_or(NameError::Truncated)?;
                wire += 1 + l;
                if wire + 1 > MAX_NAME {
                    return Err(NameError::TooLong);
                }
                if !out.is_empty() {
                    out.push(b".", N);
                }
                out.push(label, N);
                pos += 1 + l;
            }
            0xC0 => {
                let lo = *m.get(pos + 1).ok_or(NameError::Truncated)?;
                let target = usize::from(u16::from_be_bytes([len & 0x3F, lo]));
                if target >= m.len() {
                    return Err(NameError::PointerOutOfBounds);
                }
                if target >= pos {
                    return Err(NameError::PointerLoop);
                }
                hops += 1;
                if hops > MAX_HOPS {
                    return Err(NameError::TooLong);
                }
                end.get_or_insert(pos + 2);
                pos = target;
            }
            _ => return Err(NameError::BadLabel),
        }
    }
}

/// The offset just past the name at `at`, without following pointers.
pub fn skip_name(m: &[u8], at: usize) -> Result<usize, NameError> {
    let mut pos = at;
    loop {
        let &len = m.get(pos).ok_or(NameError::Truncated)?;
        match len & 0xC0 {
            0x00 if len == 0 => return Ok(pos + 1),
            0x00 => pos += 1 + usize::from(len),
            0xC0 => {
                let lo = *m.get(pos + 1).ok_or(NameError::Truncated)?;
                let target = usize::from(u16::from_be_bytes([len & 0x3F, lo]));
                if target >= m.len() {
                    return Err(NameError::PointerOutOfBounds);
                }
                return Ok(pos + 2);
            }
            _ => return Err(NameError::BadLabel),
        }
        if pos - at > MAX_NAME {
            return Err(NameError::TooLong);
        }
    }
}

/// Reads a message: the header, the first question (its name into
/// `qname`), and the records as far as they go, noting the first A/AAAA
/// answer. Errors only when the header or the first question cannot be
/// read; a later record that does not parse ends the walk (`exact` false).
pub fn parse<const N: usize>(m: &[u8], qname: &mut Text<N>) -> Result<Message, DnsError> {
    let header = Header::parse(m).ok_or(DnsError::Short)?;
    let mut pos = HEADER_LEN;
    let mut question = None;
    for i in 0..header.qdcount {
        let end = if i == 0 {
            read_name(m, pos, qname)?
        } else {
            match skip_name(m, pos) {
                Ok(e) => e,
                Err(_) => return Ok(partial(header, question)),
            }
        };
        let (Some(t), Some(c)) = (u16_at(m, end), u16_at(m, end + 2)) else {
            if i == 0 {
                return Err(DnsError::Truncated);
            }
            return Ok(partial(header, question));
        };
        question.get_or_insert((t, c));
        pos = end + 4;
    }
    let mut first_addr = None;
    let records = u32::from(header.ancount) + u32::from(header.nscount) + u32::from(header.arcount);
    for i in 0..records {
        let Some((next, addr)) = record(m, pos) else {
            return Ok(Message {
                header,
                question,
                first_addr,
                exact: false,
            });
        };
        if i < u32::from(header.ancount) && first_addr.is_none() {
            first_addr = addr;
        }
        pos = next;
    }
    Ok(Message {
        header,
        question,
        first_addr,
        exact: pos == m.len(),
    })
}

fn partial(header: Header, question: Option<(u16, u16)>) -> Message {
    Message {
        header,
        question,
        first_addr: None,
        exact: false,
    }
}

/// One resource record at `pos`: the offset after it, and its address if
/// it is an A/AAAA record of class IN.
fn record(m: &[u8], pos: usize) -> Option<(usize, Option<IpAddr>)> {
    let p = skip_name(m, pos).ok()?;
    let rtype = u16_at(m, p)?;
    let class = u16_at(m, p + 2)?;
    let rdlen = usize::from(u16_at(m, p + 8)?);
    let rdata = m.get(p + 10..p + 10 + rdlen)?;
    let addr = match (rtype, class, rdata.len()) {
        (TYPE_A, CLASS_IN, 4) => {
            let b: [u8; 4] = rdata.try_into().ok()?;
            Some(IpAddr::V4(Ipv4Addr::from(b)))
        }
        (TYPE_AAAA, CLASS_IN, 16) => {
            let b: [u8; 16] = rdata.try_into().ok()?;
            Some(IpAddr::V6(Ipv6Addr::from(b)))
        }
        _ => None,
    };
    Some((p + 10 + rdlen, addr))
}

/// Whether `m` reads as a DNS message strictly enough to call a flow DNS
/// from its payload: opcode 0–6 without the Z bit, exactly one question
/// whose name and type/class parse, a query with no answers, and records
/// that end where the message ends. `port_53` (either side on port 53,
/// 5353 or 5355) is the tie-breaker: with it, a question that parses is
/// enough (a response cut by the snap length still counts).
pub fn looks_like_dns(m: &[u8], port_53: bool) -> bool {
    let Some(h) = Header::parse(m) else {
        return false;
    };
    if h.qdcount != 1 || h.opcode() > 6 || h.z() {
        return false;
    }
    if !h.is_response() && h.ancount != 0 {
        return false;
    }
    let mut name = Text::<MAX_NAME>::default();
    match parse(m, &mut name) {
        Ok(msg) => msg.question.is_some() && (port_53 || msg.exact),
        Err(_) => false,
    }
}

#[cfg(test)]
#[path = "dns_tests.rs"]
pub(crate) mod tests;
