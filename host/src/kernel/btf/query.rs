//! What the loaders ask of the kernel's BTF: member offsets by path,
//! type names, tracepoint and function prototypes, enum values.

use std::collections::HashMap;

use super::{Btf, BtfError, Kind, Member, u32_at};

impl Btf {
    /// Offset and size of `path` (members separated by dots, e.g.
    /// `"nd_net.net"` or `"ns.inum"`) inside struct `strukt`.
    pub fn member(&self, strukt: &str, path: &str) -> Result<Member, BtfError> {
        let no_member = || BtfError::NoMember {
            strukt: strukt.to_owned(),
            member: path.to_owned(),
        };
        let mut id = self
            .struct_id(strukt)
            .ok_or_else(|| BtfError::NoStruct(strukt.to_owned()))?;
        let mut bits = 0u32;
        for part in path.split('.') {
            let (b, ty, bf) = self.find_member(id, part, 0).ok_or_else(no_member)?;
            if bf != 0 {
                return Err(BtfError::Bitfield {
                    strukt: strukt.to_owned(),
                    member: path.to_owned(),
                });
            }
            bits += b;
            id = ty;
        }
        if !bits.is_multiple_of(8) {
            return Err(BtfError::Bitfield {
                strukt: strukt.to_owned(),
                member: path.to_owned(),
            });
        }
        let size = self.size_of(id).ok_or_else(no_member)?;
        Ok(Member {
            offset: bits / 8,
            size,
        })
    }

    /// A C-like spelling of a type, for messages and checks
    /// (`"struct sock *"`, `"int"`).
    pub fn type_name(&self, id: u32) -> String {
        let mut id = id;
        let mut stars = 0;
        for _ in 0..32 {
            let r = self.resolve(id);
            match self.rec(r) {
                Some(t) if t.kind == Kind::Ptr => {
                    stars += 1;
                    id = t.size_or_type;
                }
                _ => {
                    id = r;
                    break;
                }
            }
        }
        let base = match self.rec(id) {
            None => "void".to_owned(),
            Some(t) => {
                let n = self.str_at(t.name_off);
                match t.kind {
                    Kind::Struct => format!("struct {n}"),
                    Kind::Union => format!("union {n}"),
                    Kind::Enum | Kind::Enum64 => format!("enum {n}"),
                    _ => n.to_owned(),
                }
            }
        };
        if stars == 0 {
            base
        } else {
            format!("{base} {}", "*".repeat(stars))
        }
    }

    /// The argument types of tracepoint `name` as BPF programs of the raw
    /// and BTF kinds receive them (its `TP_PROTO`), from the kernel's
    /// `btf_trace_<name>` typedef. `None` when the kernel does not describe
    /// the tracepoint.
    pub fn tracepoint_args(&self, name: &str) -> Option<Vec<String>> {
        let want = format!("btf_trace_{name}");
        let id = (1..self.types.len() as u32).find(|&id| {
            self.rec(id)
                .is_some_and(|t| t.kind == Kind::Typedef && self.str_at(t.name_off) == want)
        })?;
        let ptr = self.rec(id)?.size_or_type;
        let proto_id = self.rec(ptr).filter(|t| t.kind == Kind::Ptr)?.size_or_type;
        let proto = self.rec(proto_id).filter(|t| t.kind == Kind::FuncProto)?;
        let args = (0..usize::from(proto.vlen))
            .filter_map(|i| u32_at(&self.data, proto.extra + 8 * i + 4).ok())
            .map(|ty| self.type_name(ty))
            .collect::<Vec<_>>();
        // The first parameter is the tracepoint's private `void *__data`.
        Some(args.into_iter().skip(1).collect())
    }

    /// The argument types of kernel function `name` (`BTF_KIND_FUNC`), as
    /// kprobes and fentry see them. `None` when BTF does not describe it.
    pub fn func_args(&self, name: &str) -> Option<Vec<String>> {
        let id = (1..self.types.len() as u32).find(|&id| {
            self.rec(id)
                .is_some_and(|t| t.kind == Kind::Func && self.str_at(t.name_off) == name)
        })?;
        let proto = self
            .rec(self.rec(id)?.size_or_type)
            .filter(|t| t.kind == Kind::FuncProto)?;
        Some(
            (0..usize::from(proto.vlen))
                .filter_map(|i| u32_at(&self.data, proto.extra + 8 * i + 4).ok())
                .map(|ty| self.type_name(ty))
                .collect(),
        )
    }

    /// Functions taking a `struct <strukt> *` argument, with the
    /// position of the first such argument (what a kprobe or fentry
    /// program would read it from).
    pub fn functions_with_ptr_arg(&self, strukt: &str) -> HashMap<&str, usize> {
        let is_target = |ty: u32| {
            let p = self.resolve(ty);
            self.rec(p).is_some_and(|t| {
                t.kind == Kind::Ptr && {
                    let s = self.resolve(t.size_or_type);
                    self.rec(s).is_some_and(|st| {
                        st.kind == Kind::Struct && self.str_at(st.name_off) == strukt
                    })
                }
            })
        };
        let mut out = HashMap::new();
        for t in self.types.iter().skip(1).filter(|t| t.kind == Kind::Func) {
            let Some(proto) = self
                .rec(t.size_or_type)
                .filter(|p| p.kind == Kind::FuncProto)
            else {
                continue;
            };
            let pos = (0..usize::from(proto.vlen))
                .find(|&i| u32_at(&self.data, proto.extra + 8 * i + 4).is_ok_and(is_target));
            if let Some(i) = pos {
                out.insert(self.str_at(t.name_off), i);
            }
        }
        out
    }

    /// The values of enum `name` (`BTF_KIND_ENUM`, 32-bit), by value.
    pub fn enum_values(&self, name: &str) -> Option<HashMap<u32, &str>> {
        let t = self
            .types
            .iter()
            .skip(1)
            .find(|t| t.kind == Kind::Enum && self.str_at(t.name_off) == name)?;
        let mut out = HashMap::new();
        for i in 0..usize::from(t.vlen) {
            let at = t.extra + 8 * i;
            let n = u32_at(&self.data, at).ok()?;
            let v = u32_at(&self.data, at + 4).ok()?;
            out.insert(v, self.str_at(n));
        }
        Some(out)
    }

    /// Names of all functions (`BTF_KIND_FUNC`): what fentry could attach to.
    pub fn functions(&self) -> impl Iterator<Item = &str> {
        self.types
            .iter()
            .skip(1)
            .filter(|t| t.kind == Kind::Func)
            .map(|t| self.str_at(t.name_off))
    }
}
