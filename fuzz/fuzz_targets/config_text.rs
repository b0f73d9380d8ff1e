//! Arbitrary text through the config loader (both stages): it returns a
//! config or errors, each with a location inside the text, and never panics
//! or takes longer than linear time (libFuzzer's per-input timeout).
#![no_main]

use libfuzzer_sys::fuzz_target;
use xdprobe_config::{ConfigError, Environment, parse_with};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = text.matches('\n').count() + 1;
    for env in [Environment::unchecked(), Environment::with_cores(2)] {
        if let Err(e) = parse_with(text, "fuzz.toml", &env) {
            assert!(!e.errors.is_empty());
            assert!(e.errors.len() <= xdprobe_config::validate::MAX_ERRORS + 1);
            for err in &e.errors {
                if let Some(at) = err.location() {
                    assert!(at.line >= 1 && at.line <= lines, "{err}");
                }
                assert!(!matches!(err, ConfigError::Read { .. }));
                let _ = err.to_string();
            }
        }
    }
});
