//! Choosing the points to trace: name patterns (`net:*`, `skb:kfree_skb`,
//! `qdisc:qdisc_*`) and files of names, resolved against what the running
//! kernel has, each with where its record keeps the skb.
//!
//! Only classic tracepoints are traced: one program serves them all by
//! the event ID every record starts with. Kernel functions (kprobe,
//! fentry) are recognised and refused with the reason — this kernel has
//! neither, and the tracer has no program for them yet.

use std::collections::BTreeSet;
use std::path::Path;

use xdprobe_common::trace::{
    POINT_AFTER, POINT_ARM, POINT_DROP, POINT_FREE, POINT_NO_START, TRACE_MAX_POINTS,
};

use crate::kernel::{Kernel, tracefs::TracefsError};

#[derive(Debug, thiserror::Error)]
pub enum PointError {
    #[error("point {0:?}: no tracepoint matches it (see `xdprobe trace list`)")]
    NoMatch(String),
    #[error("point {0:?}: the tracepoint carries no skb")]
    NoSkb(String),
    #[error(
        "point {spec:?}: kernel functions need {kind}, which this kernel does not offer ({why}); use tracepoints (SYSTEM:NAME)"
    )]
    FunctionsUnavailable {
        spec: String,
        kind: &'static str,
        why: String,
    },
    #[error(
        "point {0:?}: kernel functions (kprobe/fentry) are not traced yet; use tracepoints (SYSTEM:NAME)"
    )]
    FunctionsUnsupported(String),
    #[error("no points chosen")]
    Empty,
    #[error("net:net_dev_xmit is matched to the net:net_dev_start_xmit before it: trace both")]
    XmitWithoutStart,
    #[error("{n} points chosen; at most {max} per run")]
    TooMany { n: usize, max: u32 },
    #[error("{path}:{line}: {source}")]
    File {
        path: String,
        line: usize,
        #[source]
        source: Box<PointError>,
    },
    #[error("reading {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
}

/// A tracepoint the run attaches to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Point {
    /// `sys:name`.
    pub name: String,
    /// The tracefs event ID (`common_type`).
    pub event_id: u16,
    pub skb_off: u16,
    pub reason_off: u16,
    /// `POINT_*` bits.
    pub flags: u16,
}

/// The kernel's answer to "can kernel functions be traced here?".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FunctionSupport {
    /// kprobes (or fentry) exist and the attachable list was read.
    Available(BTreeSet<String>),
    /// Why not.
    Unavailable(String),
}

impl FunctionSupport {
    /// kprobes need the kprobe PMU or tracefs `kprobe_events`; fentry
    /// needs BTF and a kernel that permits it. Both attach only to
    /// functions in `available_filter_functions`.
    pub fn probe(kernel: &Kernel) -> FunctionSupport {
        if !kernel.has_kprobes() {
            let aff = match kernel.tracefs.filter_functions() {
                Ok(_) => String::new(),
                Err(e) => format!("; {}", error_chain(&e)),
            };
            return FunctionSupport::Unavailable(format!(
                "no kprobe PMU and no tracefs kprobe_events{aff}"
            ));
        }
        match kernel.tracefs.filter_functions() {
            Ok(f) => FunctionSupport::Available(f.into_iter().collect()),
            Err(e) => FunctionSupport::Unavailable(error_chain(&e)),
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s += &format!(": {x}");
        src = x.source();
    }
    s
}

/// Shell-style match: `*` any run, `?` one character.
pub fn glob(pat: &str, s: &str) -> bool {
    let (p, s) = (pat.as_bytes(), s.as_bytes());
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

fn is_pattern(s: &str) -> bool {
    s.contains(['*', '?'])
}

/// How a point behaves, from its name: frees end trails; `net_dev_xmit`
/// fires after the driver owns (and may have freed) the skb, and is
/// matched to the `net_dev_start_xmit` before it.
pub fn point_flags(name: &str) -> u16 {
    match name {
        "skb:consume_skb" => POINT_FREE | POINT_NO_START,
        "skb:kfree_skb" => POINT_FREE | POINT_DROP | POINT_NO_START,
        "net:net_dev_start_xmit" => POINT_ARM,
        "net:net_dev_xmit" => POINT_AFTER | POINT_NO_START,
        _ => 0,
    }
}

/// One spec as the user wrote it: a tracepoint pattern, or a function.
enum Spec<'a> {
    Tracepoint(&'a str),
    Function { kind: &'static str },
}

fn parse_spec(s: &str) -> Spec<'_> {
    if s.starts_with("kprobe:") {
        return Spec::Function { kind: "kprobes" };
    }
    if s.starts_with("fentry:") {
        return Spec::Function { kind: "fentry" };
    }
    let t = s
        .strip_prefix("tracepoint:")
        .or_else(|| s.strip_prefix("tp:"))
        .unwrap_or(s);
    if t.contains(':') {
        Spec::Tracepoint(t)
    } else {
        Spec::Function {
            kind: "kprobes or fentry",
        }
    }
}

/// Resolves specs (each a pattern or a name) to tracepoints that carry
/// an skb, in the order given, without duplicates. A pattern that
/// matches nothing, or a name without an skb, is an error; a pattern
/// quietly skips the matches that carry none.
pub fn resolve(kernel: &Kernel, specs: &[String]) -> Result<Vec<Point>, PointError> {
    let events = kernel.tracefs.events()?;
    let mut out: Vec<Point> = Vec::new();
    for spec in specs {
        let spec = spec.trim();
        if spec.is_empty() {
            continue;
        }
        let pat = match parse_spec(spec) {
            Spec::Function { kind } => {
                return Err(match FunctionSupport::probe(kernel) {
                    FunctionSupport::Unavailable(why) => PointError::FunctionsUnavailable {
                        spec: spec.to_owned(),
                        kind,
                        why,
                    },
                    FunctionSupport::Available(_) => {
                        PointError::FunctionsUnsupported(spec.to_owned())
                    }
                });
            }
            Spec::Tracepoint(t) => t,
        };
        let names: Vec<&String> = if is_pattern(pat) {
            events.iter().filter(|e| glob(pat, e)).collect()
        } else {
            events.iter().filter(|e| *e == pat).collect()
        };
        if names.is_empty() {
            return Err(PointError::NoMatch(spec.to_owned()));
        }
        let mut any = false;
        for name in names {
            let f = kernel.tracefs.format(name)?;
            let Some(skb) = f.skb_field() else {
                if !is_pattern(pat) {
                    return Err(PointError::NoSkb(spec.to_owned()));
                }
                continue;
            };
            any = true;
            if out.iter().any(|p| &p.name == name) {
                continue;
            }
            let flags = point_flags(name);
            let reason_off = if flags & POINT_DROP != 0 {
                f.offset("reason", 4)? as u16
            } else {
                0
            };
            out.push(Point {
                name: name.clone(),
                event_id: f.id,
                skb_off: skb.offset as u16,
                reason_off,
                flags,
            });
        }
        if !any {
            return Err(PointError::NoSkb(spec.to_owned()));
        }
    }
    if out.is_empty() {
        return Err(PointError::Empty);
    }
    let has = |n: &str| out.iter().any(|p| p.name == n);
    if has("net:net_dev_xmit") && !has("net:net_dev_start_xmit") {
        return Err(PointError::XmitWithoutStart);
    }
    if out.len() > TRACE_MAX_POINTS as usize {
        return Err(PointError::TooMany {
            n: out.len(),
            max: TRACE_MAX_POINTS,
        });
    }
    Ok(out)
}

/// Specs from a file: one per line, `#` starts a comment.
pub fn read_file(path: &Path) -> Result<Vec<(usize, String)>, PointError> {
    let text = std::fs::read_to_string(path).map_err(|source| PointError::Read {
        path: path.display().to_string(),
        source,
    })?;
    Ok(text
        .lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let l = l.split('#').next().unwrap_or("").trim();
            (!l.is_empty()).then(|| (i + 1, l.to_owned()))
        })
        .collect())
}

/// `--points` plus `--from FILE`, resolved; errors in the file name its line.
pub fn choose(
    kernel: &Kernel,
    points: &[String],
    from: Option<&Path>,
) -> Result<Vec<Point>, PointError> {
    let mut specs: Vec<String> = points
        .iter()
        .flat_map(|p| p.split(','))
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(path) = from {
        for (line, spec) in read_file(path)? {
            // Each line on its own first, so an error names its line.
            resolve(kernel, std::slice::from_ref(&spec)).map_err(|e| PointError::File {
                path: path.display().to_string(),
                line,
                source: Box::new(e),
            })?;
            specs.push(spec);
        }
    }
    resolve(kernel, &specs)
}

/// The points traced when none are named: the device, qdisc and skb
/// tracepoints every packet passes on its way in and out.
pub const DEFAULT_POINTS: &str = "net:*,qdisc:qdisc_enqueue,qdisc:qdisc_dequeue,skb:*";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_like_the_shell() {
        assert!(glob("net:*", "net:net_dev_queue"));
        assert!(glob("*", ""));
        assert!(glob("ip_*rcv*", "ip_rcv"));
        assert!(glob("ip_*rcv*", "ip_local_deliver_rcv_x"));
        assert!(glob("qdisc:qdisc_?equeue", "qdisc:qdisc_dequeue"));
        assert!(!glob("net:*", "skb:consume_skb"));
        assert!(!glob("tcp_*", "udp_rcv"));
        assert!(!glob("a?c", "ac"));
        assert!(glob("a*b*c", "aXXbYYc"));
        assert!(!glob("a*b*c", "aXXbYY"));
    }

    #[test]
    fn specs_are_told_apart() {
        assert!(matches!(parse_spec("net:*"), Spec::Tracepoint("net:*")));
        assert!(matches!(
            parse_spec("tracepoint:skb:kfree_skb"),
            Spec::Tracepoint("skb:kfree_skb")
        ));
        assert!(matches!(
            parse_spec("kprobe:ip_rcv"),
            Spec::Function { kind: "kprobes" }
        ));
        assert!(matches!(parse_spec("tcp_*"), Spec::Function { .. }));
    }

    #[test]
    fn point_files_skip_comments_and_blanks_and_keep_line_numbers() {
        let dir = std::env::temp_dir().join(format!("xdprobe-points-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("p");
        std::fs::write(&f, "# header\n\nnet:*\n  skb:kfree_skb  # drops\n").unwrap();
        let got = read_file(&f).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            got,
            [(3, "net:*".to_owned()), (4, "skb:kfree_skb".to_owned())]
        );
        assert!(read_file(Path::new("/nonexistent/points")).is_err());
    }

    #[test]
    fn free_and_after_points_are_flagged() {
        assert_eq!(
            point_flags("skb:kfree_skb") & (POINT_FREE | POINT_DROP),
            POINT_FREE | POINT_DROP
        );
        assert_ne!(point_flags("net:net_dev_xmit") & POINT_AFTER, 0);
        assert_eq!(point_flags("net:netif_receive_skb"), 0);
    }
}
