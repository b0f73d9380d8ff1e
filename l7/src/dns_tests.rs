use super::*;

/// A message: header fields, then raw bytes for the rest.
pub(crate) fn msg(id: u16, flags: u16, counts: [u16; 4], body: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&flags.to_be_bytes());
    for c in counts {
        m.extend_from_slice(&c.to_be_bytes());
    }
    m.extend_from_slice(body);
    m
}

pub(crate) fn name(n: &str) -> Vec<u8> {
    let mut v = Vec::new();
    for l in n.split('.').filter(|l| !l.is_empty()) {
        v.push(l.len() as u8);
        v.extend_from_slice(l.as_bytes());
    }
    v.push(0);
    v
}

/// A query for `qname` (type, class IN) and its answer with one A record.
pub(crate) fn query_and_answer(qname: &str, qtype: u16) -> (Vec<u8>, Vec<u8>) {
    let mut q = name(qname);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    let query = msg(0x1234, 0x0100, [1, 0, 0, 0], &q);
    let mut a = q.clone();
    // CNAME first, then an A, both named by a pointer to the question.
    a.extend_from_slice(&[0xC0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 2, 0xC0, 12]);
    a.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 7]);
    let answer = msg(0x1234, 0x8180, [1, 2, 0, 0], &a);
    (query, answer)
}

fn read(m: &[u8], at: usize) -> Result<(String, usize), NameError> {
    let mut t = Text::<MAX_NAME>::default();
    let end = read_name(m, at, &mut t)?;
    Ok((String::from_utf8(t.as_bytes().to_vec()).unwrap(), end))
}

#[test]
fn dns_question_answer_and_first_address() {
    let (q, a) = query_and_answer("www.example.com", 1);
    let mut n = Text::<MAX_NAME>::default();
    let m = parse(&q, &mut n).unwrap();
    assert_eq!(n.as_bytes(), b"www.example.com");
    assert_eq!(m.question, Some((1, 1)));
    assert!(!m.header.is_response() && m.exact);
    let m = parse(&a, &mut n).unwrap();
    assert_eq!((m.header.rcode(), m.header.ancount), (0, 2));
    assert_eq!(m.first_addr, Some("192.0.2.7".parse().unwrap()));
    assert!(m.exact);
    assert!(looks_like_dns(&q, false) && looks_like_dns(&a, false));
}

#[test]
fn dns_aaaa_and_nxdomain() {
    let mut q = name("v6.example");
    q.extend_from_slice(&[0, 28, 0, 1]);
    let mut a = q.clone();
    a.extend_from_slice(&[0xC0, 12, 0, 28, 0, 1, 0, 0, 0, 9, 0, 16]);
    a.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    let m = parse(
        &msg(7, 0x8180, [1, 1, 0, 0], &a),
        &mut Text::<255>::default(),
    )
    .unwrap();
    assert_eq!(m.first_addr, Some("2001:db8::1".parse().unwrap()));
    let m = parse(
        &msg(7, 0x8183, [1, 0, 0, 0], &q),
        &mut Text::<255>::default(),
    )
    .unwrap();
    assert_eq!((m.header.rcode(), m.first_addr), (3, None));
}

#[test]
fn dns_root_and_compressed_question() {
    let m = msg(1, 0x0100, [1, 0, 0, 0], &[0, 0, 2, 0, 1]);
    assert_eq!(read(&m, 12).unwrap(), ("<Root>".to_string(), 13));
    // "b" + pointer to "a.example" earlier in the message.
    let mut body = name("a.example");
    let at = 12 + body.len();
    body.extend_from_slice(&[1, b'b', 0xC0, 12]);
    let m = msg(1, 0, [0, 0, 0, 0], &body);
    assert_eq!(read(&m, at).unwrap(), ("b.a.example".to_string(), at + 4));
}

#[test]
fn dns_pointer_loops_and_bounds_are_refused() {
    // A pointer to itself.
    let m = msg(1, 0, [1, 0, 0, 0], &[0xC0, 12, 0, 1, 0, 1]);
    assert_eq!(read(&m, 12), Err(NameError::PointerLoop));
    // Two labels pointing at each other: the second hop goes forward.
    let m = msg(1, 0, [1, 0, 0, 0], &[1, b'a', 0xC0, 16, 1, b'b', 0xC0, 12]);
    assert_eq!(read(&m, 12), Err(NameError::PointerLoop));
    // Past the end.
    let m = msg(1, 0, [1, 0, 0, 0], &[0xC1, 0x00]);
    assert_eq!(read(&m, 12), Err(NameError::PointerOutOfBounds));
    assert_eq!(
        parse(&m, &mut Text::<255>::default()),
        Err(DnsError::Name(NameError::PointerOutOfBounds))
    );
    // Reserved label type.
    let m = msg(1, 0, [1, 0, 0, 0], &[0x41, 0]);
    assert_eq!(read(&m, 12), Err(NameError::BadLabel));
    // Cut in the middle of a label.
    let m = msg(1, 0, [1, 0, 0, 0], &[5, b'a']);
    assert_eq!(read(&m, 12), Err(NameError::Truncated));
}

#[test]
fn dns_names_over_255_bytes_are_refused() {
    let label = [63u8; 64];
    let mut body = Vec::new();
    for _ in 0..4 {
        body.push(63);
        body.extend_from_slice(&label[1..]);
    }
    body.push(0);
    let m = msg(1, 0, [1, 0, 0, 0], &body);
    assert_eq!(read(&m, 12), Err(NameError::TooLong));
    // A long backward chain of pointers: bounded by the hop count.
    let mut body = vec![1, b'x', 0];
    for i in 0..40u16 {
        let target = 12 + if i == 0 { 0 } else { 3 + 2 * (i - 1) };
        body.extend_from_slice(&(0xC000 | target).to_be_bytes());
    }
    let m = msg(1, 0, [1, 0, 0, 0], &body);
    assert_eq!(read(&m, m.len() - 2), Err(NameError::TooLong));
}

#[test]
fn dns_detection_needs_a_question_and_port_breaks_ties() {
    // The bench file's DNS payloads are zeros: no question, not DNS.
    assert!(!looks_like_dns(&[0u8; 40], true));
    let (q, a) = query_and_answer("example.org", 1);
    // Trailing junk: not exact, DNS only with the port.
    let mut junk = q.clone();
    junk.extend_from_slice(b"xx");
    assert!(!looks_like_dns(&junk, false) && looks_like_dns(&junk, true));
    // A response cut by the snap length.
    let cut = &a[..a.len() - 3];
    assert!(!looks_like_dns(cut, false) && looks_like_dns(cut, true));
    // A query claiming answers is not a plausible query.
    let mut bad = q.clone();
    bad[7] = 1;
    assert!(!looks_like_dns(&bad, true));
}
