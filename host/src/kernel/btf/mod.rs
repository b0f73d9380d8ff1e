//! A small reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`): struct
//! member offsets and sizes, tracepoint prototypes, function names.
//!
//! Only what the loader needs, so the tracing programs can take their
//! struct layouts from the running kernel instead of being compiled for
//! one (no CO-RE relocations: aya 0.14 applies those only to its own
//! object's BTF). Written here rather than taken from a crate: aya-obj
//! keeps member iteration private, and the BTF crate of the retis project
//! is LGPL, which would bind an appliance build to relinking terms.
//!
//! Format: `Documentation/bpf/btf.rst` — a header, a type section of
//! variable-length records (type IDs count from 1; 0 is `void`), and a
//! string section.

use std::collections::HashMap;
use std::path::Path;

mod query;

/// Where the running kernel publishes its own BTF.
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("reading {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("BTF data is malformed: {0}")]
    Malformed(&'static str),
    #[error("the kernel's BTF has no struct {0}")]
    NoStruct(String),
    #[error("the kernel's BTF has no member {member} in struct {strukt}")]
    NoMember { strukt: String, member: String },
    #[error("struct {strukt} member {member} is a bitfield")]
    Bitfield { strukt: String, member: String },
}

const MAGIC: u16 = 0xeb9f;

/// BTF kinds (`BTF_KIND_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Int = 1,
    Ptr = 2,
    Array = 3,
    Struct = 4,
    Union = 5,
    Enum = 6,
    Fwd = 7,
    Typedef = 8,
    Volatile = 9,
    Const = 10,
    Restrict = 11,
    Func = 12,
    FuncProto = 13,
    Var = 14,
    Datasec = 15,
    Float = 16,
    DeclTag = 17,
    TypeTag = 18,
    Enum64 = 19,
}

impl Kind {
    fn from_u8(k: u8) -> Option<Kind> {
        use Kind::*;
        Some(match k {
            1 => Int,
            2 => Ptr,
            3 => Array,
            4 => Struct,
            5 => Union,
            6 => Enum,
            7 => Fwd,
            8 => Typedef,
            9 => Volatile,
            10 => Const,
            11 => Restrict,
            12 => Func,
            13 => FuncProto,
            14 => Var,
            15 => Datasec,
            16 => Float,
            17 => DeclTag,
            18 => TypeTag,
            19 => Enum64,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug)]
struct TypeRec {
    kind: Kind,
    name_off: u32,
    vlen: u16,
    kind_flag: bool,
    /// `size` for sized kinds, `type` for reference kinds.
    size_or_type: u32,
    /// Byte offset of the kind-specific data that follows the record.
    extra: usize,
}

/// A struct member as the loader hands it to the programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// Byte offset from the start of the outermost struct asked for.
    pub offset: u32,
    /// Size in bytes of the member's type.
    pub size: u32,
}

/// Parsed BTF: the type records and the string table, by reference into
/// the raw bytes.
pub struct Btf {
    data: Vec<u8>,
    str_start: usize,
    str_len: usize,
    /// Index = type ID; entry 0 is a placeholder for `void`.
    types: Vec<TypeRec>,
    /// Named structs and unions → IDs (several when the name repeats).
    by_name: HashMap<String, Vec<u32>>,
}

impl std::fmt::Debug for Btf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Btf")
            .field("types", &self.types.len())
            .finish()
    }
}

fn u16_at(d: &[u8], off: usize) -> Result<u16, BtfError> {
    d.get(off..off + 2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .ok_or(BtfError::Malformed("truncated"))
}

fn u32_at(d: &[u8], off: usize) -> Result<u32, BtfError> {
    d.get(off..off + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or(BtfError::Malformed("truncated"))
}

impl Btf {
    /// Reads and parses a BTF file (the kernel's, by default [`VMLINUX`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Btf, BtfError> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|source| BtfError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Btf::parse(data)
    }

    /// Parses raw BTF (little-endian, as every kernel this runs on writes it).
    pub fn parse(data: Vec<u8>) -> Result<Btf, BtfError> {
        if u16_at(&data, 0)? != MAGIC {
            return Err(BtfError::Malformed("bad magic (not little-endian BTF?)"));
        }
        let hdr_len = u32_at(&data, 4)? as usize;
        let type_off = u32_at(&data, 8)? as usize;
        let type_len = u32_at(&data, 12)? as usize;
        let str_off = u32_at(&data, 16)? as usize;
        let str_len = u32_at(&data, 20)? as usize;
        let t_start = hdr_len
            .checked_add(type_off)
            .ok_or(BtfError::Malformed("type offset"))?;
        let t_end = t_start
            .checked_add(type_len)
            .filter(|&e| e <= data.len())
            .ok_or(BtfError::Malformed("type section past the end"))?;
        let str_start = hdr_len
            .checked_add(str_off)
            .ok_or(BtfError::Malformed("string offset"))?;
        if str_start
            .checked_add(str_len)
            .is_none_or(|e| e > data.len())
        {
            return Err(BtfError::Malformed("string section past the end"));
        }

        let mut types = vec![TypeRec {
            kind: Kind::Int,
            name_off: 0,
            vlen: 0,
            kind_flag: false,
            size_or_type: 0,
            extra: 0,
        }];
        let mut pos = t_start;
        while pos < t_end {
            let name_off = u32_at(&data, pos)?;
            let info = u32_at(&data, pos + 4)?;
            let size_or_type = u32_at(&data, pos + 8)?;
            let vlen = (info & 0xffff) as u16;
            let kind = Kind::from_u8(((info >> 24) & 0x1f) as u8)
                .ok_or(BtfError::Malformed("unknown type kind"))?;
            let kind_flag = info >> 31 == 1;
            let extra = pos + 12;
            let n = usize::from(vlen);
            let extra_len = match kind {
                Kind::Int | Kind::Var | Kind::DeclTag => 4,
                Kind::Array => 12,
                Kind::Struct | Kind::Union => 12 * n,
                Kind::Enum => 8 * n,
                Kind::FuncProto => 8 * n,
                Kind::Datasec => 12 * n,
                Kind::Enum64 => 12 * n,
                _ => 0,
            };
            types.push(TypeRec {
                kind,
                name_off,
                vlen,
                kind_flag,
                size_or_type,
                extra,
            });
            pos = extra + extra_len;
        }
        if pos != t_end {
            return Err(BtfError::Malformed("type section ends inside a record"));
        }
        let mut btf = Btf {
            data,
            str_start,
            str_len,
            types,
            by_name: HashMap::new(),
        };
        for id in 1..btf.types.len() {
            let t = btf.types[id];
            if matches!(t.kind, Kind::Struct | Kind::Union) && t.name_off != 0 {
                let name = btf.str_at(t.name_off).to_owned();
                btf.by_name.entry(name).or_default().push(id as u32);
            }
        }
        Ok(btf)
    }

    /// The number of types (IDs 1..=n).
    pub fn len(&self) -> usize {
        self.types.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn str_at(&self, off: u32) -> &str {
        let start = self.str_start + off as usize;
        let end = self.str_start + self.str_len;
        let Some(bytes) = self.data.get(start..end) else {
            return "";
        };
        let n = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        std::str::from_utf8(&bytes[..n]).unwrap_or("")
    }

    fn rec(&self, id: u32) -> Option<&TypeRec> {
        if id == 0 {
            None
        } else {
            self.types.get(id as usize)
        }
    }

    /// Name of a type record, "" when anonymous.
    pub fn name_of(&self, id: u32) -> &str {
        self.rec(id).map_or("", |t| self.str_at(t.name_off))
    }

    /// Skips typedefs and qualifiers.
    fn resolve(&self, mut id: u32) -> u32 {
        for _ in 0..32 {
            match self.rec(id) {
                Some(t)
                    if matches!(
                        t.kind,
                        Kind::Typedef
                            | Kind::Volatile
                            | Kind::Const
                            | Kind::Restrict
                            | Kind::TypeTag
                    ) =>
                {
                    id = t.size_or_type
                }
                _ => break,
            }
        }
        id
    }

    /// Size in bytes of a type (pointers: 8).
    pub fn size_of(&self, id: u32) -> Option<u32> {
        let id = self.resolve(id);
        let t = self.rec(id)?;
        match t.kind {
            Kind::Int | Kind::Struct | Kind::Union | Kind::Enum | Kind::Enum64 | Kind::Float => {
                Some(t.size_or_type)
            }
            Kind::Ptr => Some(8),
            Kind::Array => {
                let elem = u32_at(&self.data, t.extra).ok()?;
                let n = u32_at(&self.data, t.extra + 8).ok()?;
                self.size_of(elem)?.checked_mul(n)
            }
            _ => None,
        }
    }

    /// (name, type id, bit offset, bitfield size) of each member.
    fn members(&self, id: u32) -> Vec<(&str, u32, u32, u32)> {
        let Some(t) = self.rec(id) else {
            return Vec::new();
        };
        if !matches!(t.kind, Kind::Struct | Kind::Union) {
            return Vec::new();
        }
        (0..usize::from(t.vlen))
            .filter_map(|i| {
                let at = t.extra + 12 * i;
                let name_off = u32_at(&self.data, at).ok()?;
                let ty = u32_at(&self.data, at + 4).ok()?;
                let off = u32_at(&self.data, at + 8).ok()?;
                let (bits, bf) = if t.kind_flag {
                    (off & 0x00ff_ffff, off >> 24)
                } else {
                    (off, 0)
                };
                Some((self.str_at(name_off), ty, bits, bf))
            })
            .collect()
    }

    /// Finds `name` among `id`'s members, looking through anonymous
    /// structs and unions (C11 anonymous members, `struct_group`).
    /// Returns (bit offset from `id`'s start, type, bitfield size).
    fn find_member(&self, id: u32, name: &str, depth: u32) -> Option<(u32, u32, u32)> {
        if depth > 8 {
            return None;
        }
        let members = self.members(self.resolve(id));
        if let Some(&(_, ty, bits, bf)) = members.iter().find(|m| m.0 == name) {
            return Some((bits, ty, bf));
        }
        members
            .iter()
            .filter(|m| m.0.is_empty())
            .find_map(|&(_, ty, bits, _)| {
                self.find_member(ty, name, depth + 1)
                    .map(|(b, t, bf)| (bits + b, t, bf))
            })
    }

    /// The struct (or union) named `name`, preferring a definition with
    /// members over a same-named empty one.
    pub fn struct_id(&self, name: &str) -> Option<u32> {
        let ids = self.by_name.get(name)?;
        ids.iter()
            .copied()
            .find(|&id| self.rec(id).is_some_and(|t| t.vlen > 0))
            .or_else(|| ids.first().copied())
    }
}

#[cfg(test)]
mod tests;
