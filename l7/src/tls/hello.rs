//! ClientHello and ServerHello bodies (RFC 8446 §4.1.2–§4.1.3, RFC 5246
//! §7.4.1), read in place: every length is checked against what contains
//! it, nothing is copied, and the result borrows the message.

/// Extension types read here (IANA TLS ExtensionType registry).
pub const EXT_SERVER_NAME: u16 = 0;
pub const EXT_SUPPORTED_GROUPS: u16 = 10;
pub const EXT_EC_POINT_FORMATS: u16 = 11;
pub const EXT_SIGNATURE_ALGORITHMS: u16 = 13;
pub const EXT_ALPN: u16 = 16;
pub const EXT_SUPPORTED_VERSIONS: u16 = 43;

/// ServerHello.random of a HelloRetryRequest (RFC 8446 §4.1.3).
const HRR_RANDOM: [u8; 32] = [
    0xCF, 0x21, 0xAD, 0x74, 0xE5, 0x9A, 0x61, 0x11, 0xBE, 0x1D, 0x8C, 0x02, 0x1E, 0x65, 0xB8, 0x91,
    0xC2, 0xA2, 0x11, 0x16, 0x7A, 0xBB, 0x8C, 0x5E, 0x07, 0x9E, 0x09, 0xE2, 0xC8, 0xA8, 0x33, 0x9C,
];

/// Why a hello was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloError {
    /// A length runs past what contains it.
    Truncated,
    /// A field that must be even-length or non-empty is not.
    Malformed,
}

/// A GREASE value (RFC 8701): 0x?A?A with both bytes equal.
pub fn is_grease(v: u16) -> bool {
    v & 0x0F0F == 0x0A0A && v >> 8 == v & 0xFF
}

/// A cursor over one length-delimited field.
#[derive(Clone, Copy)]
pub(crate) struct Rd<'a>(pub &'a [u8]);

impl<'a> Rd<'a> {
    pub fn u8(&mut self) -> Result<u8, HelloError> {
        let (&b, rest) = self.0.split_first().ok_or(HelloError::Truncated)?;
        self.0 = rest;
        Ok(b)
    }

    pub fn u16(&mut self) -> Result<u16, HelloError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn u24(&mut self) -> Result<usize, HelloError> {
        let b = self.take(3)?;
        Ok(usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]))
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], HelloError> {
        if self.0.len() < n {
            return Err(HelloError::Truncated);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    /// A field with a 1-byte length.
    pub fn vec8(&mut self) -> Result<&'a [u8], HelloError> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }

    /// A field with a 2-byte length.
    pub fn vec16(&mut self) -> Result<&'a [u8], HelloError> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

/// The u16 values of a list (pairs of bytes; an odd trailing byte is
/// ignored: the parser refused odd lists where they matter).
pub fn u16s(list: &[u8]) -> impl Iterator<Item = u16> + '_ {
    list.chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
}

/// (type, data) of each extension of an extensions block that parsed.
pub fn extensions(block: &[u8]) -> impl Iterator<Item = (u16, &[u8])> + '_ {
    let mut rd = Rd(block);
    std::iter::from_fn(move || {
        let t = rd.u16().ok()?;
        let d = rd.vec16().ok()?;
        Some((t, d))
    })
}

/// What the record needs of a ClientHello.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientHello<'a> {
    pub legacy_version: u16,
    /// The cipher suite list (pairs).
    pub ciphers: &'a [u8],
    /// The extensions block (empty when the hello has none).
    pub extensions: &'a [u8],
    /// Extension 0 present (JA4's `d`), whatever it holds.
    pub sni_present: bool,
    /// The host name, when the list holds exactly one (RFC 6066 §3 allows
    /// one name per type, and host_name is the only type).
    pub sni: Option<&'a [u8]>,
    /// The list held more than one name: refused, counted.
    pub sni_refused: bool,
    /// ProtocolNameList without its length (each entry 1-byte length).
    pub alpn: Option<&'a [u8]>,
    /// supported_versions' list (pairs) without its length.
    pub versions: Option<&'a [u8]>,
    pub groups: &'a [u8],
    pub point_formats: &'a [u8],
    pub sigalgs: &'a [u8],
}

impl<'a> ClientHello<'a> {
    /// Reads a ClientHello body (after the 4-byte handshake header).
    pub fn parse(body: &'a [u8]) -> Result<Self, HelloError> {
        let mut rd = Rd(body);
        let legacy_version = rd.u16()?;
        rd.take(32)?;
        let sid = rd.vec8()?;
        if sid.len() > 32 {
            return Err(HelloError::Malformed);
        }
        let ciphers = rd.vec16()?;
        if ciphers.len() % 2 != 0 {
            return Err(HelloError::Malformed);
        }
        rd.vec8()?; // compression methods
        let mut h = ClientHello {
            legacy_version,
            ciphers,
            ..ClientHello::default()
        };
        if rd.0.is_empty() {
            return Ok(h);
        }
        h.extensions = rd.vec16()?;
        let mut walk = Rd(h.extensions);
        while !walk.0.is_empty() {
            let t = walk.u16()?;
            let d = walk.vec16()?;
            h.extension(t, d)?;
        }
        Ok(h)
    }

    fn extension(&mut self, t: u16, d: &'a [u8]) -> Result<(), HelloError> {
        match t {
            EXT_SERVER_NAME => {
                self.sni_present = true;
                if d.is_empty() {
                    return Ok(());
                }
                let mut list = Rd(Rd(d).vec16()?);
                let name_type = list.u8()?;
                let name = list.vec16()?;
                if !list.0.is_empty() {
                    self.sni_refused = true;
                } else if name_type == 0 {
                    self.sni = Some(name);
                }
            }
            EXT_ALPN => self.alpn = Some(Rd(d).vec16()?),
            EXT_SUPPORTED_VERSIONS => self.versions = Some(Rd(d).vec8()?),
            EXT_SUPPORTED_GROUPS => self.groups = Rd(d).vec16()?,
            EXT_EC_POINT_FORMATS => self.point_formats = Rd(d).vec8()?,
            EXT_SIGNATURE_ALGORITHMS => self.sigalgs = Rd(d).vec16()?,
            _ => {}
        }
        Ok(())
    }

    /// The first ALPN protocol offered.
    pub fn first_alpn(&self) -> Option<&'a [u8]> {
        self.alpn.and_then(|l| Rd(l).vec8().ok())
    }

    /// The highest non-GREASE version in supported_versions, else the
    /// legacy version.
    pub fn max_version(&self) -> u16 {
        self.versions
            .and_then(|v| u16s(v).filter(|v| !is_grease(*v)).max())
            .unwrap_or(self.legacy_version)
    }
}

/// What the record needs of a ServerHello.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerHello<'a> {
    pub legacy_version: u16,
    pub cipher: u16,
    /// supported_versions' selected version (TLS 1.3).
    pub selected_version: Option<u16>,
    /// The ALPN protocol the server selected.
    pub alpn: Option<&'a [u8]>,
    /// A HelloRetryRequest (its random is the RFC's constant).
    pub hrr: bool,
}

impl<'a> ServerHello<'a> {
    pub fn parse(body: &'a [u8]) -> Result<Self, HelloError> {
        let mut rd = Rd(body);
        let legacy_version = rd.u16()?;
        let random = rd.take(32)?;
        let sid = rd.vec8()?;
        if sid.len() > 32 {
            return Err(HelloError::Malformed);
        }
        let cipher = rd.u16()?;
        rd.u8()?; // compression method
        let mut h = ServerHello {
            legacy_version,
            cipher,
            hrr: random == HRR_RANDOM,
            ..ServerHello::default()
        };
        if rd.0.is_empty() {
            return Ok(h);
        }
        let mut walk = Rd(rd.vec16()?);
        while !walk.0.is_empty() {
            let t = walk.u16()?;
            let d = walk.vec16()?;
            match t {
                EXT_SUPPORTED_VERSIONS => h.selected_version = Some(Rd(d).u16()?),
                EXT_ALPN => h.alpn = Some(Rd(Rd(d).vec16()?).vec8()?),
                _ => {}
            }
        }
        Ok(h)
    }

    /// The negotiated version: supported_versions' choice, else the legacy
    /// field.
    pub fn version(&self) -> u16 {
        self.selected_version.unwrap_or(self.legacy_version)
    }
}

#[cfg(test)]
#[path = "hello_tests.rs"]
mod tests;
