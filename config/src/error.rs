//! Config errors: every one names the key path and the line.

use std::fmt;
use std::path::PathBuf;

use crate::duration::DurationError;
use crate::prefix::PrefixError;

/// 1-based line and column (columns count characters, not bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

impl Location {
    /// Where byte `offset` of `text` is. Offsets past the end or inside a
    /// UTF-8 sequence are clamped rather than trusted.
    pub fn of_offset(text: &str, offset: usize) -> Location {
        let mut end = offset.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let before = text.get(..end).unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
        Location { line, column }
    }
}

/// Where each line of a text starts, so a location costs a binary search
/// instead of a scan from the top of the file (the validator looks up one
/// per list entry; scanning made `check-config` quadratic in list length).
#[derive(Debug, Clone)]
pub(crate) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    /// 1-based line of byte `offset` (clamped to the text).
    pub(crate) fn line(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset).max(1)
    }

    /// Same as [`Location::of_offset`], scanning only the offset's own line.
    pub(crate) fn locate(&self, text: &str, offset: usize) -> Location {
        let mut end = offset.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let line = self.line(end);
        let start = self.starts.get(line - 1).copied().unwrap_or(0).min(end);
        let column = text.get(start..end).map_or(0, |s| s.chars().count()) + 1;
        Location { line, column }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// One problem in a config file. `Display` is `LINE:COL: key: message`, so
/// prefixing the file name gives the compiler-style `FILE:LINE:COL: ...`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Larger than [`crate::MAX_CONFIG_BYTES`]: not read.
    #[error("the file is {bytes} bytes; a config file is at most {max} (is this the right file?)")]
    TooLarge { bytes: u64, max: u64 },
    /// Not valid TOML at all.
    #[error("{at}: TOML syntax error: {message}")]
    Syntax { at: Location, message: String },
    /// Valid TOML, wrong shape: unknown key, wrong type, missing key.
    #[error("{at}: {key}: {message}")]
    Schema {
        key: String,
        at: Location,
        message: String,
    },
    /// Right shape, value refused by validation.
    #[error("{at}: {key}: {problem}")]
    Invalid {
        key: String,
        at: Location,
        #[source]
        problem: Problem,
    },
    /// More problems than are worth listing: the first
    /// `validate::MAX_ERRORS` are, this says how many more there are.
    #[error("{more} more problem(s) not shown; fix the ones above first")]
    More { more: usize },
    /// Run as root with a file others can change (`strict`).
    #[error("{0}")]
    Unsafe(String),
}

impl ConfigError {
    /// The dotted key path (`interface[0].queues[1].core`), if the error has one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Schema { key, .. } | ConfigError::Invalid { key, .. } => Some(key),
            ConfigError::Read { .. }
            | ConfigError::TooLarge { .. }
            | ConfigError::Syntax { .. }
            | ConfigError::Unsafe(_)
            | ConfigError::More { .. } => None,
        }
    }

    pub fn location(&self) -> Option<Location> {
        match self {
            ConfigError::Syntax { at, .. }
            | ConfigError::Schema { at, .. }
            | ConfigError::Invalid { at, .. } => Some(*at),
            ConfigError::Read { .. }
            | ConfigError::TooLarge { .. }
            | ConfigError::More { .. }
            | ConfigError::Unsafe(_) => None,
        }
    }

    /// The line, for tests and tools.
    pub fn line(&self) -> Option<usize> {
        self.location().map(|l| l.line)
    }

    /// The reason alone, without location or key.
    pub fn message(&self) -> String {
        match self {
            ConfigError::Read { source, .. } => source.to_string(),
            ConfigError::TooLarge { .. } => self.to_string(),
            ConfigError::Syntax { message, .. } | ConfigError::Schema { message, .. } => {
                message.clone()
            }
            ConfigError::Invalid { problem, .. } => problem.to_string(),
            ConfigError::More { .. } | ConfigError::Unsafe(_) => self.to_string(),
        }
    }
}

/// Why validation refused a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error(transparent)]
    Duration(#[from] DurationError),
    #[error(transparent)]
    Prefix(#[from] PrefixError),
    #[error("expected a duration string with a unit (like \"30s\"), found {0}")]
    DurationType(String),
    #[error("{name} must be a power of two (got {value})")]
    NotPowerOfTwo { name: &'static str, value: i64 },
    #[error("{name} must be between {min} and {max} (got {value})")]
    OutOfRange {
        name: &'static str,
        value: i64,
        min: i64,
        max: i64,
    },
    #[error("{name} must be greater than zero")]
    Zero { name: &'static str },
    #[error("{value:?} is not one of: {}", allowed.join(", "))]
    NotOneOf {
        value: String,
        allowed: &'static [&'static str],
    },
    #[error("core {core} does not exist on this machine ({count} cores)")]
    NoSuchCore { core: i64, count: usize },
    #[error("core {core} is already used by {other} (one worker per core)")]
    CoreTaken { core: i64, other: String },
    #[error("{what} listed twice (first at line {first_line})")]
    Duplicate { what: String, first_line: usize },
    #[error("{0}")]
    Inconsistent(String),
    #[error("interface name {0:?} is invalid (1 to 15 bytes, no '/', ':' or whitespace)")]
    InterfaceName(String),
    #[error("user name {0:?} is invalid")]
    UserName(String),
    #[error("collector {url:?}: {reason}")]
    Collector { url: String, reason: String },
    #[error("{0:?} is not an IP address and port (like \"127.0.0.1:9464\" or \"[::1]:9464\")")]
    SocketAddr(String),
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("at least one [[interface]] is required")]
    NoInterface,
    #[error("at least one queue is required (like queues = [{{ queue = 0, core = 1 }}])")]
    NoQueue,
    #[error("too many entries: {count} (at most {max})")]
    TooMany { count: usize, max: usize },
}

/// All the errors of one file, for `?` in the daemon: `Display` prints one
/// `SOURCE:LINE:COL: key: message` line per error.
#[derive(Debug, thiserror::Error)]
pub struct ConfigErrors {
    pub source_name: String,
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            match e {
                ConfigError::Read { .. } | ConfigError::Unsafe(_) => write!(f, "{e}")?,
                ConfigError::More { .. } | ConfigError::TooLarge { .. } => {
                    write!(f, "{}: {e}", self.source_name)?
                }
                _ => write!(f, "{}:{e}", self.source_name)?,
            }
        }
        Ok(())
    }
}
