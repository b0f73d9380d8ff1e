//! xdprobe's configuration, in two stages (as ripgrep's lowargs → hiargs):
//! [`raw`] deserialises the TOML keeping every value's span, then
//! [`validate`] checks it and builds the typed [`Config`], collecting every
//! problem with its key path and line instead of stopping at the first.
//!
//! Collector URLs are only syntax-checked here (`scheme://host:port`); the
//! exporter crate owns their full parsing (`xdprobe_exporter::CollectorSpec`).
//!
//! Nothing here panics on any input: the loader is run on operator-written
//! files by `xdprobe check-config` and at daemon start.

mod duration;
mod env;
mod error;
mod keypath;
mod prefix;
pub mod raw;
mod settings;
pub mod strict;
pub mod validate;

use std::path::Path;

pub use duration::{DurationError, format_duration, parse_duration};
pub use env::Environment;
pub use error::{ConfigError, ConfigErrors, Location, Problem};
pub use prefix::{Prefix, PrefixError};
pub use settings::{
    Config, ExportSettings, Filter, FlowSettings, HOST_LAYERS, Handoff, HostSettings, Interface,
    L7Settings, ManagerConfig, ManagerSecurity, ManagerSettings, MetricsSettings, Mode,
    ProbeSettings, QueueBinding, XdpMode, XskBind,
};

/// Most prefixes `[filter] prefixes` may hold (sizes the XDP LPM maps).
pub const MAX_FILTER_PREFIXES: usize = 1024;
/// Most VLAN IDs `[filter] vlans` may hold.
pub const MAX_FILTER_VLANS: usize = 4095;
/// Most ports `[filter] ports` may hold.
pub const MAX_FILTER_PORTS: usize = 65535;

/// Largest config file read: 1 MiB, some twenty times a file with every
/// list at its limit. A larger one is refused before it is parsed (a
/// generated 45 MB file took 10 s and half a GiB only to be refused).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads and validates a config file, checking cores against this machine.
pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigErrors> {
    refuse_unsafe(path.as_ref())?;
    load_with(path, &Environment::detect())
}

/// `strict`: a root process refuses a config file others can change.
fn refuse_unsafe(path: &Path) -> Result<(), ConfigErrors> {
    match strict::refuse_unsafe(path) {
        None => Ok(()),
        Some(why) => Err(ConfigErrors {
            source_name: path.display().to_string(),
            errors: vec![ConfigError::Unsafe(why)],
        }),
    }
}

/// [`load`] with an explicit environment (tests, or checking a file meant
/// for another machine).
pub fn load_with(path: impl AsRef<Path>, env: &Environment) -> Result<Config, ConfigErrors> {
    let path = path.as_ref();
    let source_name = path.display().to_string();
    if let Ok(meta) = std::fs::metadata(path)
        && meta.is_file()
        && meta.len() > MAX_CONFIG_BYTES
    {
        return Err(ConfigErrors {
            source_name,
            errors: vec![ConfigError::TooLarge {
                bytes: meta.len(),
                max: MAX_CONFIG_BYTES,
            }],
        });
    }
    match std::fs::read_to_string(path) {
        Ok(text) => parse_with(&text, &source_name, env),
        Err(source) => Err(ConfigErrors {
            source_name,
            errors: vec![ConfigError::Read {
                path: path.to_owned(),
                source,
            }],
        }),
    }
}

/// Validates config text; `source_name` only labels the errors.
pub fn parse(text: &str, source_name: &str) -> Result<Config, ConfigErrors> {
    parse_with(text, source_name, &Environment::detect())
}

/// [`parse`] with an explicit environment.
pub fn parse_with(
    text: &str,
    source_name: &str,
    env: &Environment,
) -> Result<Config, ConfigErrors> {
    validate::from_text(text, env).map_err(|errors| ConfigErrors {
        source_name: source_name.to_owned(),
        errors,
    })
}

/// Reads and validates a manager's config file (`xdprobe manager -c`):
/// `[manager]`, `[export]`, `[metrics]`; other sections are checked if
/// present but not required.
pub fn load_manager(path: impl AsRef<Path>) -> Result<ManagerConfig, ConfigErrors> {
    let path = path.as_ref();
    refuse_unsafe(path)?;
    let source_name = path.display().to_string();
    let env = Environment::detect();
    match std::fs::read_to_string(path) {
        Ok(text) => validate::manager_from_text(&text, &env).map_err(|errors| ConfigErrors {
            source_name,
            errors,
        }),
        Err(source) => Err(ConfigErrors {
            source_name,
            errors: vec![ConfigError::Read {
                path: path.to_owned(),
                source,
            }],
        }),
    }
}
