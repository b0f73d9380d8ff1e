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
