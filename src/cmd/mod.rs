//! One module per subcommand.

pub mod check_config;
pub mod connlat;
pub mod demo;
pub mod host;
pub mod pcap;
pub mod run;
pub mod trace;
