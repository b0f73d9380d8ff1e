//! A systemd unit file as the emulation needs it: the `[Service]`
//! assignments in order, list settings with systemd's reset rule (an empty
//! assignment empties the list), command lines split into words.

use std::path::{Path, PathBuf};

pub struct Unit {
    pub path: PathBuf,
    /// `[Service]` assignments, in file order.
    pub service: Vec<(String, String)>,
}

impl Unit {
    pub fn load(path: &Path) -> Unit {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let mut section = String::new();
        let mut service = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(s) = line.strip_prefix('[') {
                section = s.trim_end_matches(']').to_owned();
                continue;
            }
            assert!(!line.ends_with('\\'), "continuation lines: {line}");
            let (k, v) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("{}: not an assignment: {line}", path.display()));
            if section == "Service" {
                service.push((k.trim().to_owned(), v.trim().to_owned()));
            }
        }
        Unit {
            path: path.to_owned(),
            service,
        }
    }

    /// The last value of a single-valued setting.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.service
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every assignment of a setting, in order (command lines).
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.service
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A list setting's words, every assignment added, an empty one
    /// starting over (`CapabilityBoundingSet=` is the empty set).
    pub fn words(&self, key: &str) -> Vec<String> {
        let mut out = Vec::new();
        for v in self.all(key) {
            if v.is_empty() {
                out.clear();
            }
            out.extend(v.split_whitespace().map(str::to_owned));
        }
        out
    }

    /// Whether a boolean setting is on (yes, true, on, 1).
    pub fn yes(&self, key: &str) -> bool {
        matches!(self.get(key), Some("yes" | "true" | "on" | "1"))
    }

    /// `ExecStart=`'s command (exactly one).
    pub fn exec_start(&self) -> Vec<String> {
        let all = self.all("ExecStart");
        assert_eq!(all.len(), 1, "{}: one ExecStart", self.path.display());
        command(all[0], None)
    }
}

/// A command line's words, `$MAINPID` replaced. The units use no quoting
/// and no special prefix (`+`, `-`, `!`, `@`): refused rather than half
/// understood.
pub fn command(line: &str, mainpid: Option<u32>) -> Vec<String> {
    assert!(
        !line.contains(['"', '\'', '\\']),
        "quoting is not emulated: {line}"
    );
    let words: Vec<String> = line
        .split_whitespace()
        .map(|w| match (w, mainpid) {
            ("$MAINPID", Some(p)) => p.to_string(),
            _ => w.to_owned(),
        })
        .collect();
    let first = words.first().expect("empty command line");
    assert!(
        first.starts_with('/'),
        "prefixes and relative paths are not emulated: {line}"
    );
    words
}
