//! The skip rule: a test that cannot run here (not root, a tool missing)
//! says so loudly and returns; under CI it fails instead, because there a
//! skip would hide a broken test.

use std::io::Write;
use std::process::Command;

/// `CI` set to anything but empty, `0` or `false` (what CI systems export).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// True when `cond` holds. Otherwise a loud skip naming `what`, or a panic
/// under CI.
pub fn require(cond: bool, what: &str) -> bool {
    if cond {
        return true;
    }
    if in_ci() {
        panic!("CI=true but {what}: this test must not skip in CI");
    }
    // Straight to the stderr handle: the test harness captures `eprintln!`,
    // and a skip must be seen without `--nocapture`.
    let _ = writeln!(std::io::stderr(), "\n!!!! SKIPPED: {what} !!!!\n");
    false
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `test` needs root (namespaces, XDP, BPF). Tests call it through
/// [`require_root!`](crate::require_root!), which names them.
pub fn require_root(test: &str) -> bool {
    require(
        is_root(),
        &format!("{test} needs root (network namespaces, XDP, BPF)"),
    )
}

/// Is `tool` on PATH?
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `tool` is on PATH, or a loud skip (a panic under CI).
pub fn require_tool(tool: &str) -> bool {
    require(have(tool), &format!("{tool} is not installed"))
}

/// The path of the function it is called in (`test_file::test_name`).
#[macro_export]
macro_rules! test_name {
    () => {{
        fn here() {}
        let name = ::std::any::type_name_of_val(&here);
        name.strip_suffix("::here").unwrap_or(name)
    }};
}

/// The function it is called in needs root: `if !require_root!() {
/// return; }`. A loud skip naming that function ([`test_name!`]), or a
/// panic under CI.
#[macro_export]
macro_rules! require_root {
    () => {
        $crate::require_root($crate::test_name!())
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn test_name_names_the_function_it_is_in() {
        assert_eq!(
            crate::test_name!(),
            "xdprobe_test_support::skip::tests::test_name_names_the_function_it_is_in"
        );
    }
}
