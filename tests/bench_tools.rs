//! The benchmark scripts' own inputs stay usable: every `benches/*.sh`
//! parses, and `benches/l7_floor.patch` (the floor build of
//! `FLOOR=1 benches/l7_cost.sh`, `benches/LOG.md` "The floor under the L7
//! parsers") still applies to the sources it patches. Benchmarks are not
//! run by the tests; a script or patch that rotted would only be found the
//! next time someone measured.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `program` can be run, or the test is skipped loudly (never under CI).
fn have(program: &str) -> bool {
    let ok = Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{program} is missing under CI: .ci/run installs it"
        );
        eprintln!("SKIPPED: {program} is not installed");
    }
    ok
}

#[test]
fn bench_scripts_parse() {
    if !have("bash") {
        return;
    }
    let mut scripts: Vec<_> = std::fs::read_dir(root().join("benches"))
        .expect("benches/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sh"))
        .collect();
    scripts.sort();
    assert!(
        scripts.iter().any(|p| p.ends_with("l7_cost.sh")),
        "benches/l7_cost.sh among {scripts:?}"
    );
    for s in &scripts {
        let out = Command::new("bash")
            .arg("-n")
            .arg(s)
            .output()
            .expect("bash");
        assert!(
            out.status.success(),
            "{} does not parse: {}",
            s.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn l7_floor_patch_applies_to_the_sources() {
    if !have("git") {
        return;
    }
    let patch = root().join("benches/l7_floor.patch");
    let text = std::fs::read_to_string(&patch).expect("benches/l7_floor.patch");
    // It doubles exactly the work the floor is about, and nothing else.
    for file in ["l7/src/tls/mod.rs", "l7/src/quic/mod.rs"] {
        assert!(text.contains(&format!("+++ b/{file}")), "patches {file}");
    }
    assert_eq!(text.matches("\n+++ ").count(), 2, "two files patched");
    // `git apply --check` works in a checkout and in a plain source tree.
    let out = Command::new("git")
        .args(["apply", "--check", "-v"])
        .arg(&patch)
        .current_dir(root())
        .output()
        .expect("git apply");
    assert!(
        out.status.success(),
        "benches/l7_floor.patch no longer applies; update it to the sources \
         (the calls it doubles: fingerprint::ja3/ja4, client_initial_keys, \
         open_copy): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
