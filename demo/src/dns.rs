//! Just enough DNS (RFC 1035 §4.1) for the demo's resolver and responder:
//! build an A query, answer a query by echoing its header and question with
//! one A record, read the answer back. Every read is bounds-checked; bad
//! input is an error, never a panic.

use std::net::Ipv4Addr;

/// RFC 1035 §4.1.1.
const HEADER_LEN: usize = 12;
/// RFC 1035 §2.3.4.
const MAX_LABEL: usize = 63;
const MAX_NAME: usize = 255;
pub const TYPE_A: u16 = 1;
pub const CLASS_IN: u16 = 1;
const FLAG_QR: u16 = 0x8000;
const FLAG_AA: u16 = 0x0400;
const FLAG_RD: u16 = 0x0100;
const OPCODE_MASK: u16 = 0x7800;
const RCODE_MASK: u16 = 0x000F;
const RCODE_NOTIMP: u16 = 4;
/// TTL of the demo's answers, seconds.
const TTL: u32 = 60;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    #[error("message shorter than its contents")]
    Truncated,
    #[error("not a query with exactly one question")]
    NotAQuery,
    #[error("bad name")]
    BadName,
    #[error("response does not match the query (id or flags)")]
    Mismatch,
    #[error("server answered with RCODE {0}")]
    Rcode(u16),
}

fn u16_at(m: &[u8], at: usize) -> Result<u16, DnsError> {
    match m.get(at..at + 2) {
        Some(&[a, b]) => Ok(u16::from_be_bytes([a, b])),
        _ => Err(DnsError::Truncated),
    }
}

/// The question of a query, borrowed from the message.
#[derive(Debug, PartialEq, Eq)]
pub struct Query<'a> {
    pub id: u16,
    pub flags: u16,
    /// QNAME in wire form, terminating zero included.
    pub qname: &'a [u8],
    pub qtype: u16,
    pub qclass: u16,
}

/// End of an uncompressed name starting at `at` (queries carry no
/// compression pointers).
fn name_end(m: &[u8], mut at: usize) -> Result<usize, DnsError> {
    let start = at;
    loop {
        let len = usize::from(*m.get(at).ok_or(DnsError::Truncated)?);
        if len == 0 {
            return Ok(at + 1);
        }
        if len > MAX_LABEL {
            return Err(DnsError::BadName);
        }
        at += 1 + len;
        if at - start >= MAX_NAME {
            return Err(DnsError::BadName);
        }
    }
}

/// Reads a query (QR = 0, QDCOUNT = 1).
pub fn parse_query(m: &[u8]) -> Result<Query<'_>, DnsError> {
    if m.len() < HEADER_LEN {
        return Err(DnsError::Truncated);
    }
    let flags = u16_at(m, 2)?;
    if flags & FLAG_QR != 0 || u16_at(m, 4)? != 1 {
        return Err(DnsError::NotAQuery);
    }
    let end = name_end(m, HEADER_LEN)?;
    Ok(Query {
        id: u16_at(m, 0)?,
        flags,
        qname: m.get(HEADER_LEN..end).ok_or(DnsError::Truncated)?,
        qtype: u16_at(m, end)?,
        qclass: u16_at(m, end + 2)?,
    })
}

/// The response to `q`: same ID, opcode and RD; authoritative; the
/// question echoed; one A record `addr` (TTL 60 s) when it asked for A/IN,
/// none otherwise; NOTIMP for opcodes other than QUERY.
pub fn answer(q: &Query<'_>, addr: Ipv4Addr, out: &mut Vec<u8>) {
    out.clear();
    let opcode = q.flags & OPCODE_MASK;
    let rcode = if opcode == 0 { 0 } else { RCODE_NOTIMP };
    let has_a = rcode == 0 && q.qtype == TYPE_A && q.qclass == CLASS_IN;
    let flags = FLAG_QR | opcode | FLAG_AA | (q.flags & FLAG_RD) | rcode;
    for v in [q.id, flags, 1, u16::from(has_a), 0, 0] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(q.qname);
    out.extend_from_slice(&q.qtype.to_be_bytes());
    out.extend_from_slice(&q.qclass.to_be_bytes());
    if has_a {
        // NAME: a pointer to the question's name at offset 12 (§4.1.4).
        out.extend_from_slice(&(0xC000u16 | HEADER_LEN as u16).to_be_bytes());
        out.extend_from_slice(&TYPE_A.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&TTL.to_be_bytes());
        out.extend_from_slice(&4u16.to_be_bytes());
        out.extend_from_slice(&addr.octets());
    }
}

/// A recursion-desired A/IN query for `name` ("www.example.com").
pub fn build_query(id: u16, name: &str, out: &mut Vec<u8>) -> Result<(), DnsError> {
    out.clear();
    for v in [id, FLAG_RD, 1, 0, 0, 0] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    for label in name.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > MAX_LABEL {
            return Err(DnsError::BadName);
        }
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    if out.len() - HEADER_LEN > MAX_NAME {
        return Err(DnsError::BadName);
    }
    out.extend_from_slice(&TYPE_A.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(())
}

/// Skips a possibly compressed name in a response.
fn skip_name(m: &[u8], mut at: usize) -> Result<usize, DnsError> {
    for _ in 0..MAX_NAME {
        let len = *m.get(at).ok_or(DnsError::Truncated)?;
        match len {
            0 => return Ok(at + 1),
            l if l & 0xC0 == 0xC0 => return Ok(at + 2),
            l if usize::from(l) <= MAX_LABEL => at += 1 + usize::from(l),
            _ => return Err(DnsError::BadName),
        }
    }
    Err(DnsError::BadName)
}

/// The first A record of the response to query `id`, `None` when it has
/// none.
pub fn parse_answer(m: &[u8], id: u16) -> Result<Option<Ipv4Addr>, DnsError> {
    if m.len() < HEADER_LEN {
        return Err(DnsError::Truncated);
    }
    let flags = u16_at(m, 2)?;
    if u16_at(m, 0)? != id || flags & FLAG_QR == 0 {
        return Err(DnsError::Mismatch);
    }
    if flags & RCODE_MASK != 0 {
        return Err(DnsError::Rcode(flags & RCODE_MASK));
    }
    let (qd, an) = (u16_at(m, 4)?, u16_at(m, 6)?);
    let mut at = HEADER_LEN;
    for _ in 0..qd {
        at = skip_name(m, at)? + 4;
    }
    for _ in 0..an {
        at = skip_name(m, at)?;
        let (rtype, class, rdlen) = (u16_at(m, at)?, u16_at(m, at + 2)?, u16_at(m, at + 8)?);
        let rdata = m
            .get(at + 10..at + 10 + usize::from(rdlen))
            .ok_or(DnsError::Truncated)?;
        if let (TYPE_A, CLASS_IN, &[a, b, c, d]) = (rtype, class, rdata) {
            return Ok(Some(Ipv4Addr::new(a, b, c, d)));
        }
        at += 10 + usize::from(rdlen);
    }
    Ok(None)
}

/// A stable documentation address (192.0.2.10–209) for a name, so each
/// demo name resolves to the same host every run.
pub fn address_for(qname: &[u8]) -> Ipv4Addr {
    // FNV-1a, 32 bit.
    let h = qname.iter().fold(0x811C_9DC5u32, |h, &b| {
        (h ^ u32::from(b.to_ascii_lowercase())).wrapping_mul(0x0100_0193)
    });
    Ipv4Addr::new(192, 0, 2, 10 + (h % 200) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for "a.example" type A, RD set, written out by hand from
    /// RFC 1035 §4.1.1–4.1.2.
    const QUERY: [u8; 27] = [
        0x12, 0x34, // ID
        0x01, 0x00, // QR=0 opcode=0 RD=1
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // QD=1 AN=NS=AR=0
        1, b'a', 7, b'e', b'x', b'a', b'm', b'p', b'l', b'e', 0, // QNAME
        0x00, 0x01, // QTYPE A
        0x00, 0x01, // QCLASS IN
    ];

    #[test]
    fn builds_the_query_byte_for_byte() {
        let mut out = Vec::new();
        build_query(0x1234, "a.example.", &mut out).unwrap();
        assert_eq!(out, QUERY);
    }

    #[test]
    fn answers_with_the_header_and_question_echoed_and_one_a_record() {
        let q = parse_query(&QUERY).unwrap();
        assert_eq!((q.id, q.qtype, q.qclass), (0x1234, TYPE_A, CLASS_IN));
        let mut out = Vec::new();
        answer(&q, Ipv4Addr::new(192, 0, 2, 7), &mut out);
        let mut want = vec![
            0x12, 0x34, // same ID
            0x85, 0x00, // QR=1 AA=1 RD=1 RA=0 RCODE=0
            0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
        ];
        want.extend_from_slice(&QUERY[12..]);
        want.extend_from_slice(&[
            0xC0, 0x0C, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 60, 0x00, 0x04, 192, 0, 2, 7,
        ]);
        assert_eq!(out, want);
        assert_eq!(
            parse_answer(&out, 0x1234),
            Ok(Some(Ipv4Addr::new(192, 0, 2, 7)))
        );
        assert_eq!(parse_answer(&out, 0x1235), Err(DnsError::Mismatch));
    }

    #[test]
    fn other_types_get_no_data_and_other_opcodes_notimp() {
        let mut aaaa = QUERY;
        aaaa[24] = 28;
        let mut out = Vec::new();
        answer(&parse_query(&aaaa).unwrap(), Ipv4Addr::LOCALHOST, &mut out);
        assert_eq!(&out[6..8], &[0, 0], "ANCOUNT 0");
        assert_eq!(parse_answer(&out, 0x1234), Ok(None));
        let mut status = QUERY;
        status[2] |= 2 << 3; // opcode 2 (STATUS)
        answer(
            &parse_query(&status).unwrap(),
            Ipv4Addr::LOCALHOST,
            &mut out,
        );
        assert_eq!(parse_answer(&out, 0x1234), Err(DnsError::Rcode(4)));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        for cut in 0..QUERY.len() {
            assert!(parse_query(&QUERY[..cut]).is_err(), "cut at {cut}");
        }
        let mut resp = QUERY;
        resp[2] |= 0x80;
        assert_eq!(parse_query(&resp), Err(DnsError::NotAQuery));
        let mut long_label = QUERY;
        long_label[12] = 64;
        assert_eq!(parse_query(&long_label), Err(DnsError::BadName));
        let mut out = Vec::new();
        answer(&parse_query(&QUERY).unwrap(), Ipv4Addr::LOCALHOST, &mut out);
        for cut in 12..out.len() {
            assert!(parse_answer(&out[..cut], 0x1234).is_err(), "cut at {cut}");
        }
        // A pointer loop cannot hang the reader.
        let mut looped = out.clone();
        looped[12] = 0xC0;
        looped[13] = 12;
        let _ = parse_answer(&looped, 0x1234);
        assert_eq!(
            build_query(1, &"x".repeat(64), &mut out),
            Err(DnsError::BadName)
        );
        assert_eq!(build_query(1, "a..b", &mut out), Err(DnsError::BadName));
    }

    #[test]
    fn names_map_to_documentation_addresses() {
        let a = address_for(b"\x03www\x07example\x03com\x00");
        assert_eq!(a, address_for(b"\x03WWW\x07example\x03com\x00"));
        assert!((10..210).contains(&a.octets()[3]));
        assert_eq!(&a.octets()[..3], &[192, 0, 2]);
    }
}
