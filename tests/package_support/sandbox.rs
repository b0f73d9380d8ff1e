//! Starting a unit's command as systemd would, where systemd is not PID 1
//! (containers, CI): every `[Service]` directive of the unit is either
//! applied here, the way systemd applies it, or named as a lifecycle
//! setting the test exercises itself; an unknown directive fails the test,
//! so a directive added to a unit is never silently left unchecked.
//!
//! How, in the child between fork and exec: join the test's network
//! namespace, unshare the mount (and UTS, IPC) namespace, run a shell
//! script of mount(8) calls for the file-system directives, set the
//! memlock limit, the working directory and umask, install the seccomp
//! filter for the system-call directives (`seccomp`), then exec
//! `setpriv` for the user, the capabilities (ambient, inheritable,
//! bounding) and no_new_privs, and `env -i` for the environment.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use super::seccomp::{self, Cond, Filter, Rule};
use super::unit::Unit;

/// Lifecycle settings: not part of how one process starts; the test does
/// what they describe (runs ExecStartPre first, stops with KillSignal
/// within TimeoutStopSec, runs ExecReload, ...).
const LIFECYCLE: &[&str] = &[
    "Type",
    "ExecStartPre",
    "ExecStart",
    "ExecReload",
    "Restart",
    "RestartSec",
    "KillSignal",
    "TimeoutStopSec",
    "RemoveIPC",
];

pub struct Sandbox {
    pub user: Option<String>,
    setpriv: Vec<String>,
    env: Vec<String>,
    script: String,
    unshare: libc::c_int,
    /// RLIMIT_MEMLOCK to set (`RLIM_INFINITY` for infinity).
    memlock: Option<libc::rlim_t>,
    workdir: Option<CString>,
    umask: Option<libc::mode_t>,
    filter: Vec<libc::sock_filter>,
    /// One line per directive: what was applied and how.
    pub report: Vec<String>,
}

fn cap_names(words: &[String]) -> String {
    let mut s = String::from("-all");
    for w in words {
        let name = w.strip_prefix("CAP_").unwrap_or(w).to_lowercase();
        s.push_str(",+");
        s.push_str(&name);
    }
    s
}

/// `mount -o remount,bind,ro` on every mount point the filter selects
/// (mount points as /proc/self/mountinfo lists them, octal escapes undone).
fn ro_loop(select: &str) -> String {
    format!(
        "awk '{{print $5}}' /proc/self/mountinfo | sort -u | while IFS= read -r m; do\n  \
         m=$(printf '%b' \"$m\")\n  {select}\n  mount -o remount,bind,ro \"$m\"\ndone\n"
    )
}

impl Sandbox {
    /// The sandbox of `unit`. `scratch`: an empty directory for building
    /// the private /dev (mounted over by a tmpfs in the new namespace
    /// only). `netns`: the network namespace the command runs in, whose
    /// sysfs is mounted at /sys as `ip netns exec` does.
    pub fn new(unit: &Unit, scratch: &Path, netns: bool) -> Sandbox {
        let mut s = Sandbox {
            user: unit.get("User").map(str::to_owned),
            setpriv: Vec::new(),
            env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
            script: String::new(),
            unshare: libc::CLONE_NEWNS,
            memlock: None,
            workdir: None,
            umask: None,
            filter: Vec::new(),
            report: Vec::new(),
        };
        let mut f = Filter::default();
        let mut mounts = Mounts::default();
        let keys: Vec<&str> = unit.service.iter().map(|(k, _)| k.as_str()).collect();
        let mut done = std::collections::BTreeSet::new();
        for key in keys {
            if !done.insert(key) {
                continue;
            }
            let how = s.apply(unit, key, &mut f, &mut mounts);
            s.report
                .push(format!("{key}={}: {how}", unit.words(key).join(" ")));
        }
        s.script = mounts.script(scratch, netns);
        s.filter = f.program();
        s
    }

    /// One directive; returns how it was applied.
    fn apply(&mut self, u: &Unit, key: &str, f: &mut Filter, m: &mut Mounts) -> &'static str {
        if LIFECYCLE.contains(&key) {
            return "lifecycle: exercised by the test itself";
        }
        if let Some(how) = self.apply_process(u, key) {
            return how;
        }
        if let Some(how) = self.apply_files(u, key, f, m) {
            return how;
        }
        self.apply_seccomp(u, key, f)
    }

    /// The process's identity, capabilities, limits and environment.
    fn apply_process(&mut self, u: &Unit, key: &str) -> Option<&'static str> {
        let words = u.words(key);
        Some(match key {
            "User" => {
                let user = u.get("User").expect("User").to_owned();
                self.setpriv
                    .extend([format!("--reuid={user}"), "--init-groups".into()]);
                self.env.extend([
                    format!("USER={user}"),
                    format!("LOGNAME={user}"),
                    "HOME=/nonexistent".into(),
                    "SHELL=/usr/sbin/nologin".into(),
                ]);
                "setpriv --reuid --init-groups"
            }
            "Group" => {
                self.setpriv
                    .push(format!("--regid={}", u.get("Group").expect("Group")));
                "setpriv --regid"
            }
            "AmbientCapabilities" => {
                let caps = cap_names(&words);
                self.setpriv.extend([
                    format!("--inh-caps={caps}"),
                    format!("--ambient-caps={caps}"),
                ]);
                "setpriv --inh-caps --ambient-caps"
            }
            "CapabilityBoundingSet" => {
                self.setpriv
                    .push(format!("--bounding-set={}", cap_names(&words)));
                "setpriv --bounding-set"
            }
            "NoNewPrivileges" => {
                assert!(u.yes(key));
                self.setpriv.push("--no-new-privs".into());
                "setpriv --no-new-privs"
            }
            "LimitMEMLOCK" => {
                assert_eq!(u.get(key), Some("infinity"), "only infinity is emulated");
                if can_raise_limits() {
                    self.memlock = Some(libc::RLIM_INFINITY);
                    "setrlimit(RLIMIT_MEMLOCK, infinity)"
                } else {
                    self.memlock = Some(memlock_hard());
                    "NOT infinity: this machine withholds CAP_SYS_RESOURCE even from root, \
                     so RLIMIT_MEMLOCK goes only up to its hard limit (memlock_limit())"
                }
            }
            "Environment" => {
                self.env.extend(words);
                "env -i with systemd's base environment"
            }
            "WorkingDirectory" => {
                self.workdir = Some(CString::new(u.get(key).expect("dir")).expect("path"));
                "chdir before exec"
            }
            "UMask" => {
                let v = u.get(key).expect("umask");
                self.umask = Some(libc::mode_t::from_str_radix(v, 8).expect("octal umask"));
                "umask before exec"
            }
            _ => return None,
        })
    }

    /// The file-system directives (and their system-call parts).
    fn apply_files(
        &mut self,
        u: &Unit,
        key: &str,
        f: &mut Filter,
        m: &mut Mounts,
    ) -> Option<&'static str> {
        let words = u.words(key);
        let eperm = libc::EPERM;
        let rule = |syscall, cond| Rule {
            syscall,
            cond,
            errno: eperm,
        };
        Some(match key {
            "StateDirectory" | "LogsDirectory" => {
                let base = if key == "StateDirectory" {
                    "/var/lib"
                } else {
                    "/var/log"
                };
                for w in words {
                    m.rw_dirs.push(format!("{base}/{w}"));
                }
                m.owner = self.user.clone();
                "created owned by User=, bind-mounted writable"
            }
            "ProtectSystem" => {
                assert_eq!(u.get(key), Some("strict"), "only strict is emulated");
                m.strict = true;
                "every mount read-only but /dev, /proc, /sys and the directories"
            }
            "ProtectHome" => {
                assert!(u.yes(key));
                m.home = true;
                "/home, /root, /run/user: empty, mode 000, read-only"
            }
            "PrivateTmp" => {
                assert!(u.yes(key));
                m.tmp = true;
                "fresh tmpfs on /tmp and /var/tmp"
            }
            "PrivateDevices" => {
                assert!(u.yes(key));
                m.devices = true;
                for sc in ["ioperm", "iopl"] {
                    f.rules.push(rule(sc, Cond::Always));
                }
                "/dev: null zero full random urandom tty shm only; @raw-io refused"
            }
            "PrivateMounts" => "the private mount namespace every mount here is made in",
            "PrivateIPC" => {
                self.unshare |= libc::CLONE_NEWIPC;
                "unshare(CLONE_NEWIPC)"
            }
            "ProtectKernelTunables" => {
                m.tunables = true;
                "/proc/sys, /proc/sysrq-trigger, /proc/irq, ... and /sys read-only"
            }
            "ProtectKernelModules" => {
                m.modules = true;
                for sc in ["init_module", "finit_module", "delete_module"] {
                    f.rules.push(rule(sc, Cond::Always));
                }
                "/lib/modules inaccessible; module syscalls refused"
            }
            "ProtectKernelLogs" => {
                m.kmsg = true;
                f.rules.push(rule("syslog", Cond::Always));
                "/proc/kmsg inaccessible; syslog(2) refused"
            }
            "ProtectControlGroups" => {
                m.cgroups = true;
                "/sys/fs/cgroup read-only"
            }
            "ProtectClock" => {
                for sc in ["settimeofday", "clock_settime", "clock_adjtime", "adjtimex"] {
                    f.rules.push(rule(sc, Cond::Always));
                }
                "@clock refused"
            }
            "ProtectHostname" => {
                self.unshare |= libc::CLONE_NEWUTS;
                for sc in ["sethostname", "setdomainname"] {
                    f.rules.push(rule(sc, Cond::Always));
                }
                "unshare(CLONE_NEWUTS); sethostname refused"
            }
            _ => return None,
        })
    }

    /// The directives that are only system-call rules.
    fn apply_seccomp(&mut self, u: &Unit, key: &str, f: &mut Filter) -> &'static str {
        let words = u.words(key);
        let rule = |syscall, cond, errno| Rule {
            syscall,
            cond,
            errno,
        };
        let eperm = libc::EPERM;
        match key {
            "RestrictNamespaces" => {
                assert!(u.yes(key));
                let ns = (libc::CLONE_NEWNS
                    | libc::CLONE_NEWCGROUP
                    | libc::CLONE_NEWUTS
                    | libc::CLONE_NEWIPC
                    | libc::CLONE_NEWUSER
                    | libc::CLONE_NEWPID
                    | libc::CLONE_NEWNET
                    | 0x80) as u32; // CLONE_NEWTIME
                f.rules.push(rule("unshare", Cond::AnyBit(0, ns), eperm));
                f.rules.push(rule("clone", Cond::AnyBit(0, ns), eperm));
                f.rules.push(rule("setns", Cond::Always, eperm));
                // As systemd: clone3's flags are behind a pointer, so it is
                // refused with ENOSYS and glibc falls back to clone.
                f.rules.push(rule("clone3", Cond::Always, libc::ENOSYS));
                "unshare/clone with CLONE_NEW*, setns refused; clone3 ENOSYS"
            }
            "RestrictRealtime" => {
                // SCHED_FIFO, SCHED_RR, SCHED_DEADLINE; SCHED_RESET_ON_FORK masked.
                let cond = Cond::In(1, !0x4000_0000, vec![1, 2, 6]);
                f.rules.push(rule("sched_setscheduler", cond, eperm));
                "sched_setscheduler to a realtime policy refused (sched_setattr not)"
            }
            "RestrictSUIDSGID" => {
                let bits = libc::S_ISUID | libc::S_ISGID;
                f.rules.push(rule("chmod", Cond::AnyBit(1, bits), eperm));
                f.rules.push(rule("fchmod", Cond::AnyBit(1, bits), eperm));
                f.rules.push(rule("fchmodat", Cond::AnyBit(2, bits), eperm));
                "chmod family with S_ISUID/S_ISGID refused (not open/creat modes)"
            }
            "LockPersonality" => {
                let cond = Cond::NotIn(0, vec![0, 0xffff_ffff]);
                f.rules.push(rule("personality", cond, eperm));
                "personality() other than PER_LINUX refused"
            }
            "MemoryDenyWriteExecute" => {
                let (w, x) = (libc::PROT_WRITE as u32, libc::PROT_EXEC as u32);
                f.rules.push(rule("mmap", Cond::AllBits(2, w | x), eperm));
                f.rules.push(rule("mprotect", Cond::AnyBit(2, x), eperm));
                f.rules
                    .push(rule("pkey_mprotect", Cond::AnyBit(2, x), eperm));
                f.rules
                    .push(rule("shmat", Cond::AnyBit(2, 0o100_000), eperm));
                "W+X mmap, mprotect(PROT_EXEC), shmat(SHM_EXEC) refused"
            }
            "SystemCallArchitectures" => {
                assert_eq!(u.get(key), Some("native"));
                "non-native and x32 calls refused (every filter checks the arch)"
            }
            "RestrictAddressFamilies" => {
                let fams = words.iter().map(|w| family(w)).collect();
                f.rules
                    .push(rule("socket", Cond::NotIn(0, fams), libc::EAFNOSUPPORT));
                "socket() of other families: EAFNOSUPPORT"
            }
            "SystemCallFilter" => {
                let deny = words.first().is_some_and(|w| w.starts_with('~'));
                let names: Vec<String> = words
                    .iter()
                    .map(|w| w.trim_start_matches('~').to_owned())
                    .collect();
                f.list = Some((deny, seccomp::expand(&names)));
                "groups expanded by systemd-analyze; others kill with SIGSYS"
            }
            other => panic!(
                "{key}= in the unit is neither emulated nor a lifecycle setting: \
                 teach tests/package_support/sandbox.rs how systemd applies it ({other})"
            ),
        }
    }

    /// The command `argv` in this sandbox; `netns`: a network namespace
    /// file (/run/netns/NAME) to run it in.
    pub fn command(&self, argv: &[String], netns: Option<&Path>) -> Command {
        let mut c = Command::new("/usr/bin/setpriv");
        c.args(&self.setpriv)
            .arg("--")
            .args(["/usr/bin/env", "-i"])
            .args(&self.env)
            .args(argv);
        let net = netns.map(|p| File::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())));
        let sh = CString::new("/bin/sh").expect("c");
        let dash_c = CString::new("-c").expect("c");
        let script = CString::new(self.script.as_str()).expect("script");
        let path = CString::new("PATH=/usr/sbin:/usr/bin:/sbin:/bin").expect("c");
        let (flags, memlock, umask) = (self.unshare, self.memlock, self.umask);
        let workdir = self.workdir.clone();
        let filter = self.filter.clone();
        // A failed mount script comes back from spawn() as this errno (std
        // passes the child's errors as numbers, without text).
        let script_failed = || std::io::Error::from_raw_os_error(libc::ENOTRECOVERABLE);
        // SAFETY: the closure runs in the child between fork and exec and
        // only makes system calls on data prepared before the fork (no
        // allocation: errors are bare errno values).
        unsafe {
            c.pre_exec(move || {
                if let Some(f) = &net
                    && libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::unshare(flags) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let argv = [
                    sh.as_ptr(),
                    dash_c.as_ptr(),
                    script.as_ptr(),
                    std::ptr::null(),
                ];
                let envp = [path.as_ptr(), std::ptr::null()];
                let pid = libc::fork();
                if pid == 0 {
                    libc::execve(sh.as_ptr(), argv.as_ptr(), envp.as_ptr());
                    libc::_exit(127);
                }
                let mut status = 0;
                if pid < 0 || libc::waitpid(pid, &raw mut status, 0) != pid {
                    return Err(std::io::Error::last_os_error());
                }
                if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
                    return Err(script_failed());
                }
                if let Some(l) = memlock {
                    let lim = libc::rlimit {
                        rlim_cur: l,
                        rlim_max: l,
                    };
                    if libc::setrlimit(libc::RLIMIT_MEMLOCK, &raw const lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some(d) = &workdir
                    && libc::chdir(d.as_ptr()) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(m) = umask {
                    libc::umask(m);
                }
                seccomp::install(&filter)
            });
        }
        c
    }
}

impl Sandbox {
    /// The memlock limit the command gets, in bytes (`None`: infinity).
    pub fn memlock_limit(&self) -> Option<u64> {
        self.memlock.filter(|&l| l != libc::RLIM_INFINITY)
    }
}

/// Whether this process may raise hard resource limits (CAP_SYS_RESOURCE,
/// which systemd as PID 1 has).
fn can_raise_limits() -> bool {
    let s = std::fs::read_to_string("/proc/self/status").expect("status");
    let eff = s
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    eff & (1 << 24) != 0 // CAP_SYS_RESOURCE
}

/// This process's hard RLIMIT_MEMLOCK.
fn memlock_hard() -> libc::rlim_t {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct we pass.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &raw mut r) };
    assert_eq!(rc, 0, "getrlimit");
    r.rlim_max
}

/// `AF_XDP` → its number.
fn family(name: &str) -> u32 {
    let n = match name {
        "AF_UNIX" => libc::AF_UNIX,
        "AF_INET" => libc::AF_INET,
        "AF_INET6" => libc::AF_INET6,
        "AF_NETLINK" => libc::AF_NETLINK,
        "AF_PACKET" => libc::AF_PACKET,
        "AF_XDP" => libc::AF_XDP,
        other => panic!("address family {other} not known to the emulation"),
    };
    n as u32
}

/// The file-system directives, as one script of mount(8) calls.
#[derive(Default)]
struct Mounts {
    rw_dirs: Vec<String>,
    owner: Option<String>,
    strict: bool,
    home: bool,
    tmp: bool,
    devices: bool,
    tunables: bool,
    modules: bool,
    kmsg: bool,
    cgroups: bool,
}

impl Mounts {
    fn script(&self, scratch: &Path, netns: bool) -> String {
        let mut s = String::from("set -eu\n");
        // Never touch the test's own mount namespace.
        let mine = std::fs::read_link("/proc/self/ns/mnt").expect("own mount namespace");
        s += &format!(
            "[ \"$(readlink /proc/self/ns/mnt)\" != '{}' ] || {{ echo 'sandbox: no new mount namespace' >&2; exit 1; }}\n",
            mine.display()
        );
        s += "mount --make-rprivate /\n";
        if netns {
            s += "umount -l /sys\nmount -t sysfs -o nosuid,nodev,noexec sysfs /sys\n";
        }
        let t = scratch.display();
        s += &format!("mount -t tmpfs -o mode=0700 sandbox {t}\n");
        let owner = self.owner.as_deref().unwrap_or("root");
        for d in &self.rw_dirs {
            s += &format!("install -d -o {owner} -g {owner} -m 0755 {d}\nmount --bind {d} {d}\n");
        }
        if self.devices {
            s += &format!(
                "mkdir {t}/dev\nmount -t tmpfs -o mode=0755,nosuid,noexec dev {t}/dev\n\
                 for n in null zero full random urandom tty; do touch {t}/dev/$n; mount --bind /dev/$n {t}/dev/$n; done\n\
                 mkdir {t}/dev/shm {t}/dev/pts\nmount -t tmpfs -o mode=1777,nosuid,nodev shm {t}/dev/shm\n\
                 ln -s /proc/self/fd {t}/dev/fd\nln -s /proc/self/fd/0 {t}/dev/stdin\n\
                 ln -s /proc/self/fd/1 {t}/dev/stdout\nln -s /proc/self/fd/2 {t}/dev/stderr\n\
                 mount --move {t}/dev /dev\n"
            );
        }
        if self.kmsg {
            s += &format!(
                "touch {t}/inaccessible\nchmod 000 {t}/inaccessible\nmount --bind {t}/inaccessible /proc/kmsg\n"
            );
        }
        s += &format!("umount -l {t}\n");
        if self.strict {
            let rw: Vec<&str> = self.rw_dirs.iter().map(String::as_str).collect();
            let skip = format!(
                "case \"$m\" in /dev|/dev/*|/proc|/proc/*|/sys|/sys/*) continue ;; esac\n  \
                 case ' {} ' in *\" $m \"*) continue ;; esac",
                rw.join(" ")
            );
            s += &ro_loop(&skip);
        }
        let hide = |s: &mut String, dirs: &[&str]| {
            for d in dirs {
                *s += &format!("[ ! -d {d} ] || mount -t tmpfs -o ro,mode=000 inaccessible {d}\n");
            }
        };
        if self.home {
            hide(&mut s, &["/home", "/root", "/run/user"]);
        }
        if self.tmp {
            s += "mount -t tmpfs -o mode=1777,nosuid,nodev tmp /tmp\n\
                  mount -t tmpfs -o mode=1777,nosuid,nodev tmp /var/tmp\n";
        }
        if self.tunables {
            for p in [
                "/proc/sys",
                "/proc/sysrq-trigger",
                "/proc/irq",
                "/proc/bus",
                "/proc/fs",
                "/proc/acpi",
                "/proc/latency_stats",
                "/proc/timer_list",
                "/proc/scsi",
            ] {
                s += &format!(
                    "[ ! -e {p} ] || {{ mount --bind {p} {p}; mount -o remount,bind,ro {p}; }}\n"
                );
            }
            s += &ro_loop("case \"$m\" in /sys|/sys/*) ;; *) continue ;; esac");
        }
        if self.modules {
            hide(&mut s, &["/lib/modules", "/usr/lib/modules"]);
        }
        if self.cgroups {
            s += "mountpoint -q /sys/fs/cgroup || mount --bind /sys/fs/cgroup /sys/fs/cgroup\n";
            s += &ro_loop("case \"$m\" in /sys/fs/cgroup|/sys/fs/cgroup/*) ;; *) continue ;; esac");
        }
        s
    }
}
