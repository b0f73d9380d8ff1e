//! tracefs: which tracepoints the running kernel has, their event IDs and
//! their record layouts (`events/<system>/<name>/format`).
//!
//! A tracepoint's record layout is kernel ABI in the sense that the format
//! file describes it; its field offsets still move between kernels, so the
//! programs get them from here at load time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    #[error(
        "tracefs is not mounted (tried /sys/kernel/tracing and /sys/kernel/debug/tracing); as root: mount -t tracefs tracefs /sys/kernel/tracing"
    )]
    NotMounted,
    #[error(
        "tracefs is mounted at {path} but this user may not read it (permission denied; it is root's, mode {mode:o}): run as root"
    )]
    NoAccess { path: String, mode: u32 },
    #[error(
        "tracefs is not mounted (tried /sys/kernel/tracing and /sys/kernel/debug/tracing) and this user may not mount it ({source}): run as root, or as root: mount -t tracefs tracefs /sys/kernel/tracing"
    )]
    CannotMount {
        #[source]
        source: std::io::Error,
    },
    #[error("this kernel has no tracepoint {0}")]
    NoEvent(String),
    #[error("tracepoint {event} has no field {field}")]
    NoField { event: String, field: String },
    #[error("tracepoint {event} field {field} is {size} bytes, expected {want}")]
    FieldSize {
        event: String,
        field: String,
        size: u32,
        want: u32,
    },
    #[error("reading {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: malformed format file: {line}")]
    Malformed { path: String, line: String },
}

/// One field of a tracepoint record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    /// The C declaration as written (`const void * skbaddr`).
    pub decl: String,
    pub offset: u32,
    pub size: u32,
}

/// A tracepoint's ID and record layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format {
    pub event: String,
    /// The event ID (`common_type` in every record of this event).
    pub id: u16,
    /// Fields after the common header, in record order.
    pub fields: Vec<Field>,
}

impl Format {
    pub fn field(&self, name: &str) -> Result<&Field, TracefsError> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| TracefsError::NoField {
                event: self.event.clone(),
                field: name.to_owned(),
            })
    }

    /// Offset of `name`, checking its size.
    pub fn offset(&self, name: &str, size: u32) -> Result<u32, TracefsError> {
        let f = self.field(name)?;
        if f.size != size {
            return Err(TracefsError::FieldSize {
                event: self.event.clone(),
                field: name.to_owned(),
                size: f.size,
                want: size,
            });
        }
        Ok(f.offset)
    }

    /// Whether the record carries an skb pointer (`skbaddr`, `skb_addr`, `skb`).
    pub fn skb_field(&self) -> Option<&Field> {
        self.fields.iter().find(|f| {
            matches!(f.name.as_str(), "skbaddr" | "skb_addr" | "skb")
                && f.size == 8
                && f.decl.contains('*')
        })
    }
}

/// The tracefs mount.
#[derive(Clone, Debug)]
pub struct Tracefs {
    root: PathBuf,
}

impl Tracefs {
    /// Finds tracefs; as root, mounts it at `/sys/kernel/tracing` when it
    /// is not mounted yet (a freshly booted minimal system often has none).
    pub fn open() -> Result<Tracefs, TracefsError> {
        const PLACES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
        for p in PLACES {
            match std::fs::metadata(Path::new(p).join("events")) {
                Ok(m) if m.is_dir() => return Ok(Tracefs { root: p.into() }),
                Ok(_) => {}
                // Mounted, but only root may enter it (mode 0700): saying
                // "not mounted" would send the user the wrong way.
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    use std::os::unix::fs::PermissionsExt;
                    let mode = std::fs::metadata(p).map_or(0, |m| m.permissions().mode() & 0o7777);
                    return Err(TracefsError::NoAccess {
                        path: p.to_owned(),
                        mode,
                    });
                }
                Err(_) => {}
            }
        }
        if let Some(p) = mounted_at().filter(|p| PLACES.contains(&p.as_str())) {
            // Mounted where we looked, yet `events` was not there to see.
            let mode = {
                use std::os::unix::fs::PermissionsExt;
                std::fs::metadata(&p).map_or(0, |m| m.permissions().mode() & 0o7777)
            };
            return Err(TracefsError::NoAccess { path: p, mode });
        }
        let target = c"/sys/kernel/tracing";
        // SAFETY: mount(2) with NUL-terminated strings that outlive the call.
        let rc = unsafe {
            libc::mount(
                c"tracefs".as_ptr(),
                target.as_ptr(),
                c"tracefs".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc == 0 && Path::new("/sys/kernel/tracing/events").is_dir() {
            return Ok(Tracefs {
                root: "/sys/kernel/tracing".into(),
            });
        }
        let e = std::io::Error::last_os_error();
        if rc != 0 && matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) {
            return Err(TracefsError::CannotMount { source: e });
        }
        Err(TracefsError::NotMounted)
    }

    /// A tracefs tree at another place (tests).
    pub fn at(root: impl Into<PathBuf>) -> Tracefs {
        Tracefs { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn event_dir(&self, event: &str) -> Result<PathBuf, TracefsError> {
        let (sys, name) = event
            .split_once(':')
            .ok_or_else(|| TracefsError::NoEvent(event.to_owned()))?;
        if sys.contains('/') || name.contains('/') || sys.starts_with('.') || name.starts_with('.')
        {
            return Err(TracefsError::NoEvent(event.to_owned()));
        }
        let d = self.root.join("events").join(sys).join(name);
        if d.join("format").is_file() {
            Ok(d)
        } else {
            Err(TracefsError::NoEvent(event.to_owned()))
        }
    }

    pub fn has(&self, event: &str) -> bool {
        self.event_dir(event).is_ok()
    }

    /// The record layout of `event` (`"sys:name"`).
    pub fn format(&self, event: &str) -> Result<Format, TracefsError> {
        let dir = self.event_dir(event)?;
        let path = dir.join("format");
        let text = std::fs::read_to_string(&path).map_err(|source| TracefsError::Read {
            path: path.display().to_string(),
            source,
        })?;
        parse_format(event, &text).map_err(|line| TracefsError::Malformed {
            path: path.display().to_string(),
            line,
        })
    }

    /// Every tracepoint, as `"sys:name"`, sorted.
    pub fn events(&self) -> Result<Vec<String>, TracefsError> {
        let events = self.root.join("events");
        let rd = |p: &Path| {
            std::fs::read_dir(p).map_err(|source| TracefsError::Read {
                path: p.display().to_string(),
                source,
            })
        };
        let mut out = BTreeMap::new();
        for sys in rd(&events)? {
            let Ok(sys) = sys else { continue };
            if !sys.path().is_dir() {
                continue;
            }
            let Ok(names) = std::fs::read_dir(sys.path()) else {
                continue;
            };
            for n in names.flatten() {
                if n.path().join("format").is_file() {
                    let e = format!(
                        "{}:{}",
                        sys.file_name().to_string_lossy(),
                        n.file_name().to_string_lossy()
                    );
                    out.insert(e, ());
                }
            }
        }
        Ok(out.into_keys().collect())
    }

    /// Function names kprobes and fentry may attach to
    /// (`available_filter_functions`), without module suffixes.
    pub fn filter_functions(&self) -> Result<Vec<String>, TracefsError> {
        let path = self.root.join("available_filter_functions");
        let text = std::fs::read_to_string(&path).map_err(|source| TracefsError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Ok(text
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_owned)
            .collect())
    }
}

/// Parses a format file. Fields before the first blank line are the common
/// header (`common_type`, …); the event's own follow.
fn parse_format(event: &str, text: &str) -> Result<Format, String> {
    let mut id = None;
    let mut fields = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if let Some(v) = l.strip_prefix("ID:") {
            id = v.trim().parse::<u16>().ok();
            if id.is_none() {
                return Err(line.to_owned());
            }
            continue;
        }
        let Some(rest) = l.strip_prefix("field:") else {
            continue;
        };
        let mut decl = None;
        let mut offset = None;
        let mut size = None;
        for (i, part) in rest.split(';').enumerate() {
            let part = part.trim();
            if i == 0 {
                decl = Some(part.to_owned());
            } else if let Some(v) = part.strip_prefix("offset:") {
                offset = v.parse::<u32>().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.parse::<u32>().ok();
            }
        }
        let (Some(decl), Some(offset), Some(size)) = (decl, offset, size) else {
            return Err(line.to_owned());
        };
        let name = field_name(&decl).ok_or_else(|| line.to_owned())?;
        if name.starts_with("common_") {
            continue;
        }
        fields.push(Field {
            name,
            decl,
            offset,
            size,
        });
    }
    Ok(Format {
        event: event.to_owned(),
        id: id.ok_or_else(|| "no ID line".to_owned())?,
        fields,
    })
}

/// `"const void * skbaddr"` → `skbaddr`; `"__u8 saddr[28]"` → `saddr`.
fn field_name(decl: &str) -> Option<String> {
    let last = decl.split_whitespace().last()?;
    let last = last.trim_start_matches('*');
    let name = last.split('[').next()?;
    if name.is_empty() {
        None
    } else {
        Some(name.to_owned())
    }
}

/// Where `/proc/self/mounts` says a tracefs is mounted (the first one).
fn mounted_at() -> Option<String> {
    let m = std::fs::read_to_string("/proc/self/mounts").ok()?;
    m.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, at, kind) = (f.next()?, f.next()?, f.next()?);
        (kind == "tracefs").then(|| at.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET_DEV_XMIT: &str = "name: net_dev_xmit
ID: 1570
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:void * skbaddr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:unsigned int len;\toffset:16;\tsize:4;\tsigned:0;
\tfield:int rc;\toffset:20;\tsize:4;\tsigned:1;
\tfield:__data_loc char[] name;\toffset:24;\tsize:4;\tsigned:0;
\tfield:__u8 saddr_v6[16];\toffset:28;\tsize:16;\tsigned:0;

print fmt: \"dev=%s skbaddr=%p len=%u rc=%d\", __get_str(name), REC->skbaddr, REC->len, REC->rc
";

    #[test]
    fn parses_fields_and_id() {
        let f = parse_format("net:net_dev_xmit", NET_DEV_XMIT).unwrap();
        assert_eq!(f.id, 1570);
        let names: Vec<_> = f.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["skbaddr", "len", "rc", "name", "saddr_v6"]);
        assert_eq!(f.offset("skbaddr", 8).unwrap(), 8);
        assert_eq!(f.offset("rc", 4).unwrap(), 20);
        assert!(f.skb_field().is_some());
        let e = f.offset("len", 8).unwrap_err().to_string();
        assert!(e.contains("len") && e.contains("4 bytes"), "{e}");
        let e = f.offset("nope", 8).unwrap_err().to_string();
        assert!(e.contains("net:net_dev_xmit") && e.contains("nope"), "{e}");
    }

    #[test]
    fn malformed_formats_are_errors() {
        assert!(parse_format("a:b", "ID: x\n").is_err());
        assert!(parse_format("a:b", "field:int a;\toffset:zz;\tsize:4;\n").is_err());
        assert!(parse_format("a:b", "format:\n").is_err(), "no ID");
    }

    #[test]
    fn event_names_cannot_escape_the_tree() {
        let t = Tracefs::at("/sys/kernel/tracing");
        assert!(!t.has("../..:x"));
        assert!(!t.has("net/../..:x"));
        assert!(!t.has("no_colon"));
    }
}
