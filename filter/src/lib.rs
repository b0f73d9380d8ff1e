//! Packet filters in pcap-filter syntax (`udp dst port 7`, `host
//! 192.0.2.1 and tcp`), the language operators already write for tcpdump.
//!
//! The expression is compiled by libpcap itself (`libpcap`), so its
//! meaning is exactly tcpdump's, into classic BPF (`cbpf`). The program
//! is then checked against what xdprobe's in-kernel interpreter runs
//! (forward jumps only, a bounded length, known opcodes) and can be run
//! in user space by the same semantics (`cbpf::run`), which the tests
//! compare with libpcap's own interpreter.
//!
//! Shared by the kernel path tracer (`xdprobe trace --flow`) and the
//! file reader (`xdprobe pcap --filter`, one program per link type).

pub mod cbpf;
pub mod libpcap;

pub use cbpf::{Insn, Program};
pub use libpcap::{FilterError, LinkType, compile};
