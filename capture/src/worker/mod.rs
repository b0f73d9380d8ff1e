//! The worker threads, one adapter per source: `queue` drains one AF_XDP
//! socket per thread (pinned, ticking on the wall clock); `file` runs
//! `xdprobe pcap --workers N`, whose threads take turns at reading the
//! capture file. Both feed the same batched `xdprobe_dataplane::Worker`.

pub mod file;
pub mod queue;
