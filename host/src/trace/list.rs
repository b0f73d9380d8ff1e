//! `xdprobe trace list`: what this kernel lets you instrument.
//!
//! Tracepoints come from tracefs (`events/SYS/NAME/format`); each carries
//! an skb when its record has an skb pointer field. Functions are the
//! text symbols of `/proc/kallsyms`; BTF says which take a `struct
//! sk_buff *` (and as which argument); they are attachable only where the
//! kernel has kprobes or fentry, and then only those listed in
//! `available_filter_functions`. On a kernel without either, functions
//! are still listed, marked not attachable, with the reason once.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

use crate::kernel::{Kernel, tracefs::TracefsError};
use crate::trace::points::{FunctionSupport, glob};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Tracepoint,
    Function,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Tracepoint => "tracepoint",
            EntryKind::Function => "function",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub kind: EntryKind,
    /// `sys:name` for tracepoints, the symbol for functions.
    pub name: String,
    /// Where the skb is: the record field (`skbaddr`) or the argument
    /// (`arg0`); `None` when it carries none.
    pub skb: Option<String>,
    /// Whether `xdprobe trace run` can attach to it on this kernel.
    pub attachable: bool,
}

/// The listing and its totals (over everything, not just the matches).
#[derive(Clone, Debug)]
pub struct Listing {
    pub entries: Vec<Entry>,
    pub tracepoints: usize,
    pub tracepoints_skb: usize,
    pub functions: usize,
    pub functions_skb: usize,
    pub function_support: FunctionSupport,
}

fn matches(patterns: &[String], kind: EntryKind, name: &str) -> bool {
    if patterns.is_empty() {
        return true;
    }
    patterns.iter().any(|p| match kind {
        EntryKind::Tracepoint if p.contains(':') => glob(p, name),
        EntryKind::Tracepoint => glob(p, name.split_once(':').map_or(name, |(_, n)| n)),
        EntryKind::Function => !p.contains(':') && glob(p, name),
    })
}

/// Builds the listing from the kernel and its symbol table, keeping the
/// entries whose names match one of `patterns` (all when empty).
pub fn list(
    kernel: &Kernel,
    symbols: &BTreeSet<String>,
    patterns: &[String],
) -> Result<Listing, TracefsError> {
    let mut entries = Vec::new();
    let events = kernel.tracefs.events()?;
    let mut tracepoints_skb = 0;
    for e in &events {
        // An unreadable or odd format is listed without an skb.
        let skb = kernel
            .tracefs
            .format(e)
            .ok()
            .and_then(|f| f.skb_field().map(|f| f.name.clone()));
        if skb.is_some() {
            tracepoints_skb += 1;
        }
        if matches(patterns, EntryKind::Tracepoint, e) {
            entries.push(Entry {
                kind: EntryKind::Tracepoint,
                name: e.clone(),
                attachable: skb.is_some(),
                skb,
            });
        }
    }
    let support = FunctionSupport::probe(kernel);
    let with_skb: HashMap<&str, usize> = kernel.btf.functions_with_ptr_arg("sk_buff");
    let mut functions_skb = 0;
    for s in symbols {
        // BTF names functions without the compiler's suffixes.
        let base = s.split('.').next().unwrap_or(s);
        let arg = with_skb.get(base).copied();
        if arg.is_some() {
            functions_skb += 1;
        }
        if matches(patterns, EntryKind::Function, s) {
            entries.push(Entry {
                kind: EntryKind::Function,
                name: s.clone(),
                skb: arg.map(|i| format!("arg{i}")),
                // No kernel-function program yet, whatever the kernel offers.
                attachable: false,
            });
        }
    }
    Ok(Listing {
        entries,
        tracepoints: events.len(),
        tracepoints_skb,
        functions: symbols.len(),
        functions_skb,
        function_support: support,
    })
}

impl Listing {
    /// The one-paragraph summary printed after the list.
    pub fn summary(&self) -> String {
        let f = match &self.function_support {
            FunctionSupport::Available(set) => format!(
                "kprobe/fentry: the kernel offers {} functions (available_filter_functions), but `trace run` attaches to tracepoints only",
                set.len()
            ),
            FunctionSupport::Unavailable(why) => {
                format!("kprobe/fentry: not available on this kernel ({why})")
            }
        };
        format!(
            "{} tracepoints ({} carry an skb, attachable); {} function symbols ({} take an skb); {f}",
            self.tracepoints, self.tracepoints_skb, self.functions, self.functions_skb
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_pick_kinds() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(matches(&[], EntryKind::Function, "ip_rcv"));
        assert!(matches(
            &p(&["net:*"]),
            EntryKind::Tracepoint,
            "net:netif_rx"
        ));
        assert!(!matches(
            &p(&["net:*"]),
            EntryKind::Function,
            "net_rx_action"
        ));
        assert!(matches(&p(&["ip_*"]), EntryKind::Function, "ip_rcv"));
        assert!(matches(
            &p(&["netif_*"]),
            EntryKind::Tracepoint,
            "net:netif_rx"
        ));
        assert!(!matches(
            &p(&["tcp_*"]),
            EntryKind::Tracepoint,
            "net:netif_rx"
        ));
    }
}
