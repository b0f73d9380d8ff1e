//! Facts about the machine that validation checks against, injectable so
//! tests do not depend on the host they run on.

/// What validation may assume about the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    /// Online CPU IDs, sorted. `None`: skip the core-exists check (checking a
    /// file destined for another machine).
    pub online_cores: Option<Vec<usize>>,
}

impl Environment {
    /// Reads `/sys/devices/system/cpu/online`; falls back to
    /// `available_parallelism` (cores 0..n), then to no check.
    pub fn detect() -> Environment {
        let from_sysfs = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|s| parse_cpu_list(&s));
        let cores = from_sysfs.or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| (0..n.get()).collect())
        });
        Environment {
            online_cores: cores,
        }
    }

    /// A machine with cores `0..count`.
    pub fn with_cores(count: usize) -> Environment {
        Environment {
            online_cores: Some((0..count).collect()),
        }
    }

    /// No machine checks.
    pub fn unchecked() -> Environment {
        Environment { online_cores: None }
    }
}

/// Parses the kernel's CPU list format (`0-3,6,8-9`). `None` on anything odd.
pub(crate) fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                // Bounded: a corrupt range must not allocate gigabytes.
                if b < a || b - a > 65_536 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-3,6"), Some(vec![0, 2, 3, 6]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn detect_matches_kernel() {
        // Independent reference: the kernel's own count of online CPUs.
        let env = Environment::detect();
        let n = std::thread::available_parallelism().map_or(0, |n| n.get());
        let cores = env.online_cores.expect("a Linux host exposes its CPUs");
        assert!(cores.len() >= n, "{cores:?} vs available_parallelism {n}");
    }
}
