//! The test bed (`xdprobe-testbed`, which the demo builds its network
//! with too) for tests: the same namespaces, veth pairs, addresses and
//! neighbours, panicking with the failed command's stderr instead of
//! returning it. Namespaces are still deleted on drop, so a failing test
//! leaves none behind.

use std::ops::Deref;
use std::process::{Command, Output};

use xdprobe_testbed as bed;

pub use bed::{VethOpts, unique};

fn ok<T>(r: Result<T, bed::CmdError>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a command, panicking with its stderr when it fails.
pub fn sh(args: &[&str]) -> Output {
    ok(bed::run(args))
}

/// Runs a command, ignoring failure (clean-up paths, optional tuning).
pub fn sh_quiet(args: &[&str]) {
    bed::run_quiet(args)
}

/// A network namespace named after its prefix, this process and a counter,
/// deleted on drop (which also deletes every veth end inside it).
pub struct NetNs(bed::NetNs);

impl Deref for NetNs {
    type Target = bed::NetNs;
    fn deref(&self) -> &bed::NetNs {
        &self.0
    }
}

impl NetNs {
    pub fn new(prefix: &str) -> NetNs {
        NetNs(ok(bed::NetNs::add(unique(prefix))))
    }

    /// Runs a command inside the namespace; panics on failure.
    pub fn exec(&self, args: &[&str]) -> Output {
        ok(self.0.exec(args))
    }

    /// A `Command` that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        self.0.command(program)
    }

    /// Runs `f` on a thread that has joined this namespace.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        ok(self.0.run(f))
    }

    /// Moves the current thread into the namespace for good.
    pub fn enter_current_thread(&self) {
        ok(self.0.enter_current_thread())
    }

    pub fn mac(&self, dev: &str) -> String {
        ok(self.0.mac(dev))
    }
}

/// Moves the calling thread into the namespace named `name`.
pub fn enter_netns(name: &str) {
    ok(bed::enter_netns(name))
}

/// Creates veth `a_dev` in `a` and `b_dev` in `b`, offloads off, both up.
pub fn veth(a: &NetNs, a_dev: &str, b: &NetNs, b_dev: &str, opts: VethOpts) {
    ok(bed::veth(a, a_dev, b, b_dev, opts))
}

/// Assigns `cidr` to `dev` in `ns`.
pub fn addr(ns: &NetNs, dev: &str, cidr: &str) {
    ok(bed::addr(ns, dev, cidr))
}

/// A permanent neighbour entry for `ip` on `dev` in `ns`.
pub fn neigh(ns: &NetNs, dev: &str, ip: &str, mac: &str) {
    ok(bed::neigh(ns, dev, ip, mac))
}

/// Each end of a link knows the other's MAC (`neigh` both ways): `a_dev`
/// in `a` has `a_ip`, `b_dev` in `b` has `b_ip`.
pub fn neigh_both(a: &NetNs, a_dev: &str, a_ip: &str, b: &NetNs, b_dev: &str, b_ip: &str) {
    neigh(a, a_dev, b_ip, &b.mac(b_dev));
    neigh(b, b_dev, a_ip, &a.mac(a_dev));
}

/// `rx_packets` of `dev` as the kernel counts it.
pub fn rx_packets(ns: &NetNs, dev: &str) -> u64 {
    ok(bed::rx_packets(ns, dev))
}
