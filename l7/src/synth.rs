//! Synthetic protocol messages, for tests (here and in the data plane) and
//! fuzz seeds: TLS records and hellos, certificates are in
//! `tls::cert::tests`. Built the way the RFCs lay them out, independently
//! of the parsers.

/// A TLS record.
pub fn record(ctype: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![ctype, 3, 1];
    v.extend_from_slice(&(body.len() as u16).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// A handshake message (type, 3-byte length, body).
pub fn handshake(typ: u8, body: &[u8]) -> Vec<u8> {
    let n = body.len() as u32;
    let mut v = vec![typ, (n >> 16) as u8, (n >> 8) as u8, n as u8];
    v.extend_from_slice(body);
    v
}

fn vec16(b: &[u8]) -> Vec<u8> {
    let mut v = (b.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(b);
    v
}

fn u16s(vals: &[u16]) -> Vec<u8> {
    vals.iter().flat_map(|v| v.to_be_bytes()).collect()
}

/// server_name with one host_name.
pub fn ext_sni(name: &[u8]) -> (u16, Vec<u8>) {
    let mut entry = vec![0];
    entry.extend(vec16(name));
    (0, vec16(&entry))
}

/// application_layer_protocol_negotiation.
pub fn ext_alpn(protocols: &[&[u8]]) -> (u16, Vec<u8>) {
    let list: Vec<u8> = protocols
        .iter()
        .flat_map(|p| std::iter::once(p.len() as u8).chain(p.iter().copied()))
        .collect();
    (16, vec16(&list))
}

/// supported_versions (ClientHello form).
pub fn ext_versions(v: &[u16]) -> (u16, Vec<u8>) {
    let l = u16s(v);
    let mut d = vec![l.len() as u8];
    d.extend(l);
    (43, d)
}

pub fn ext_groups(v: &[u16]) -> (u16, Vec<u8>) {
    (10, vec16(&u16s(v)))
}

pub fn ext_points(v: &[u8]) -> (u16, Vec<u8>) {
    let mut d = vec![v.len() as u8];
    d.extend_from_slice(v);
    (11, d)
}

pub fn ext_sigalgs(v: &[u16]) -> (u16, Vec<u8>) {
    (13, vec16(&u16s(v)))
}

/// A ClientHello handshake message.
pub fn client_hello(version: u16, ciphers: &[u16], exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut b = version.to_be_bytes().to_vec();
    b.extend([0x11; 32]);
    b.push(32);
    b.extend([0x22; 32]);
    b.extend(vec16(&u16s(ciphers)));
    b.extend([1, 0]);
    let e: Vec<u8> = exts
        .iter()
        .flat_map(|(t, d)| t.to_be_bytes().into_iter().chain(vec16(d)))
        .collect();
    b.extend(vec16(&e));
    handshake(1, &b)
}

/// A ServerHello handshake message; `selected`: supported_versions.
pub fn server_hello(
    version: u16,
    cipher: u16,
    selected: Option<u16>,
    alpn: Option<&[u8]>,
) -> Vec<u8> {
    let mut b = version.to_be_bytes().to_vec();
    b.extend([0x33; 32]);
    b.push(0);
    b.extend(cipher.to_be_bytes());
    b.push(0);
    let mut e = Vec::new();
    if let Some(v) = selected {
        e.extend([0, 43, 0, 2]);
        e.extend(v.to_be_bytes());
    }
    if let Some(a) = alpn {
        e.extend([0, 16]);
        let mut list = vec![a.len() as u8];
        list.extend_from_slice(a);
        e.extend(vec16(&vec16(&list)));
    }
    b.extend(vec16(&e));
    handshake(2, &b)
}

/// A Certificate handshake message (TLS 1.2 form) with these DER
/// certificates.
pub fn certificate(ders: &[&[u8]]) -> Vec<u8> {
    let u24 = |n: usize| [(n >> 16) as u8, (n >> 8) as u8, n as u8];
    let mut list = Vec::new();
    for d in ders {
        list.extend(u24(d.len()));
        list.extend_from_slice(d);
    }
    let mut b = u24(list.len()).to_vec();
    b.extend(list);
    handshake(11, &b)
}

/// The ClientHello of FoxIO's JA4 specification example
/// (`t13d1516h2_8daaf6152771_e5627efa2ab1`), with SNI `sni`.
pub fn ja4_example_hello(sni: &[u8]) -> Vec<u8> {
    let ciphers = [
        0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014,
        0x009c, 0x009d, 0x002f, 0x0035,
    ];
    let order = [
        0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002d, 0x000d, 0x0005, 0x0023, 0x0012,
        0x002b, 0xff01, 0x000b, 0x000a, 0x0015,
    ];
    let exts: Vec<(u16, Vec<u8>)> = order
        .iter()
        .map(|t| match t {
            0x0000 => ext_sni(sni),
            0x0010 => ext_alpn(&[b"h2", b"http/1.1"]),
            0x002b => ext_versions(&[0x0a0a, 0x0304, 0x0303]),
            0x000d => ext_sigalgs(&[
                0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
            ]),
            0x000a => ext_groups(&[0x1a1a, 0x001d, 0x0017, 0x0018]),
            0x000b => ext_points(&[0]),
            t => (*t, vec![]),
        })
        .collect();
    let mut with_grease = vec![(0x2a2a, vec![])];
    with_grease.extend(exts);
    let mut c = vec![0x3a3a];
    c.extend(ciphers);
    client_hello(0x0303, &c, &with_grease)
}
