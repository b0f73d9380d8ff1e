//! One module per subcommand.

pub mod agent;
pub mod check_config;
pub mod connlat;
pub mod demo;
pub mod generate;
pub mod host;
pub mod manager;
pub mod pcap;
mod pcap_filter;
mod pcap_progress;
pub mod run;
pub mod trace;

/// A duration option (`30s`, `2m`, `100ms`) as the config file writes
/// durations, for clap's `value_parser`.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    xdprobe_config::parse_duration(s).map_err(|e| e.to_string())
}
