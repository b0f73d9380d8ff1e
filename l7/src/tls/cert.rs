//! The server certificate's name (TLS 1.2 and earlier send it in clear):
//! the subject's first commonName, or, without one, the first dNSName of
//! the subjectAltName extension. A minimal DER walk (X.690) over the
//! certificate in place: definite lengths only, every length checked, no
//! allocation.

/// id-at-commonName (2.5.4.3).
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
/// id-ce-subjectAltName (2.5.29.17).
const OID_SAN: &[u8] = &[0x55, 0x1D, 0x11];

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
const BOOLEAN: u8 = 0x01;
/// [0] EXPLICIT (version), [3] EXPLICIT (extensions).
const CTX0: u8 = 0xA0;
const CTX3: u8 = 0xA3;
/// GeneralName dNSName: [2] IMPLICIT IA5String.
const DNS_NAME: u8 = 0x82;

/// One TLV: tag, contents, and the rest after it.
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&l0, rest) = rest.split_first()?;
    let (len, rest) = if l0 < 0x80 {
        (usize::from(l0), rest)
    } else {
        let n = usize::from(l0 & 0x7F);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, b| a << 8 | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// The contents of a TLV with tag `want`, and the rest.
fn expect(b: &[u8], want: u8) -> Option<(&[u8], &[u8])> {
    let (t, c, r) = tlv(b)?;
    (t == want).then_some((c, r))
}

/// What the certificate names: (first subject CN, first SAN dNSName).
pub fn names(der: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    let Some(tbs) = tbs(der) else {
        return (None, None);
    };
    (subject_cn(tbs.0), tbs.1.and_then(first_dns_name))
}

/// (subject Name contents, extensions contents) of the TBSCertificate.
fn tbs(der: &[u8]) -> Option<(&[u8], Option<&[u8]>)> {
    let (cert, _) = expect(der, SEQUENCE)?;
    let (mut tbs, _) = expect(cert, SEQUENCE)?;
    if tbs.first() == Some(&CTX0) {
        tbs = tlv(tbs)?.2;
    }
    // serialNumber, signature, issuer, validity.
    for _ in 0..4 {
        tbs = tlv(tbs)?.2;
    }
    let (subject, mut rest) = expect(tbs, SEQUENCE)?;
    let mut exts = None;
    while let Some((t, c, r)) = tlv(rest) {
        if t == CTX3 {
            exts = expect(c, SEQUENCE).map(|e| e.0);
        }
        rest = r;
    }
    Some((subject, exts))
}

/// The value of the first commonName attribute of a Name.
fn subject_cn(mut name: &[u8]) -> Option<&[u8]> {
    while let Some((rdn, rest)) = expect(name, SET) {
        let mut atvs = rdn;
        while let Some((atv, more)) = expect(atvs, SEQUENCE) {
            if let Some((oid, v)) = expect(atv, OID)
                && oid == OID_CN
            {
                return tlv(v).map(|(_, value, _)| value);
            }
            atvs = more;
        }
        name = rest;
    }
    None
}

/// The first dNSName of the subjectAltName extension.
fn first_dns_name(mut exts: &[u8]) -> Option<&[u8]> {
    while let Some((ext, rest)) = expect(exts, SEQUENCE) {
        if let Some((oid, mut v)) = expect(ext, OID)
            && oid == OID_SAN
        {
            if v.first() == Some(&BOOLEAN) {
                v = tlv(v)?.2;
            }
            let (value, _) = expect(v, OCTET_STRING)?;
            let (mut names, _) = expect(value, SEQUENCE)?;
            while let Some((t, c, r)) = tlv(names) {
                if t == DNS_NAME {
                    return Some(c);
                }
                names = r;
            }
            return None;
        }
        exts = rest;
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn wrap(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        let n = content.len();
        if n < 0x80 {
            v.push(n as u8);
        } else if n < 0x100 {
            v.extend_from_slice(&[0x81, n as u8]);
        } else {
            v.extend_from_slice(&[0x82, (n >> 8) as u8, n as u8]);
        }
        v.extend_from_slice(content);
        v
    }

    fn rdn(oid: &[u8], value_tag: u8, value: &str) -> Vec<u8> {
        let atv = [wrap(OID, oid), wrap(value_tag, value.as_bytes())].concat();
        wrap(SET, &wrap(SEQUENCE, &atv))
    }

    /// A certificate with the given subject CN and SAN dNSNames (the other
    /// fields are placeholders of the right shape).
    pub(crate) fn cert(cn: Option<&str>, sans: &[&str]) -> Vec<u8> {
        let mut subject = rdn(&[0x55, 4, 6], 0x13, "US");
        if let Some(cn) = cn {
            subject.extend(rdn(OID_CN, 0x0C, cn));
        }
        let alg = wrap(SEQUENCE, &wrap(OID, &[0x2A, 0x86, 0x48]));
        let mut tbs = wrap(CTX0, &wrap(0x02, &[2]));
        tbs.extend(wrap(0x02, &[1, 2, 3]));
        tbs.extend(&alg);
        tbs.extend(wrap(SEQUENCE, &rdn(OID_CN, 0x0C, "Issuer CA")));
        tbs.extend(wrap(SEQUENCE, &[0x17, 1, b'0', 0x17, 1, b'1']));
        tbs.extend(wrap(SEQUENCE, &subject));
        tbs.extend(wrap(SEQUENCE, &[alg.clone(), wrap(0x03, &[0, 1])].concat()));
        if !sans.is_empty() {
            let gn: Vec<u8> = sans
                .iter()
                .flat_map(|s| wrap(DNS_NAME, s.as_bytes()))
                .collect();
            let mut ext = wrap(OID, OID_SAN);
            ext.extend(wrap(OCTET_STRING, &wrap(SEQUENCE, &gn)));
            let other = wrap(
                SEQUENCE,
                &[
                    wrap(OID, &[0x55, 0x1D, 0x0F]),
                    wrap(BOOLEAN, &[0xFF]),
                    wrap(OCTET_STRING, &[3, 2, 5, 0xA0]),
                ]
                .concat(),
            );
            let exts = [other, wrap(SEQUENCE, &ext)].concat();
            tbs.extend(wrap(CTX3, &wrap(SEQUENCE, &exts)));
        }
        wrap(
            SEQUENCE,
            &[wrap(SEQUENCE, &tbs), alg, wrap(0x03, &[0, 9])].concat(),
        )
    }

    #[test]
    fn cert_cn_and_first_san() {
        let c = cert(Some("www.example.com"), &["example.com", "www.example.com"]);
        assert_eq!(
            names(&c),
            (Some(&b"www.example.com"[..]), Some(&b"example.com"[..]))
        );
        let c = cert(None, &["only-san.example"]);
        assert_eq!(names(&c), (None, Some(&b"only-san.example"[..])));
        let c = cert(Some("x"), &[]);
        assert_eq!(names(&c), (Some(&b"x"[..]), None));
    }

    #[test]
    fn cert_garbage_and_truncation_give_nothing() {
        let c = cert(Some("www.example.com"), &["a.example"]);
        for n in 0..c.len() {
            let (cn, _) = names(&c[..n]);
            assert_eq!(cn, None, "cut at {n}");
        }
        assert_eq!(names(&[0x30, 0x84, 0xFF, 0xFF, 0xFF, 0xFF]), (None, None));
        assert_eq!(names(&[]), (None, None));
    }
}
