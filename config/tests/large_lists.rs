//! Robustness finding 4: a huge list costs one error and no per-entry work,
//! and no file yields more than `MAX_ERRORS` listed problems. (How long
//! `check-config` takes on such files is measured, not asserted: see
//! BENCHMARKS.md.)

use xdprobe_config::{ConfigError, Environment, parse_with, validate::MAX_ERRORS};

const IFACE: &str = "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = 0, core = 0 }]\n";

fn errors(text: &str) -> Vec<ConfigError> {
    match parse_with(text, "t.toml", &Environment::unchecked()) {
        Ok(_) => panic!("config should be refused"),
        Err(e) => e.errors,
    }
}

fn prefixes(n: usize, each: impl Fn(usize) -> String) -> String {
    let list: Vec<String> = (0..n).map(|i| format!("\"{}\"", each(i))).collect();
    format!("{IFACE}[filter]\nprefixes = [\n{}\n]\n", list.join(",\n"))
}

#[test]
fn an_over_long_list_is_one_error_and_its_entries_are_not_checked() {
    // 40 000 entries, every one of them also invalid and duplicated: only
    // the length is reported.
    let e = errors(&prefixes(40_000, |_| "not-a-prefix".to_owned()));
    assert_eq!(e.len(), 1, "{:#?}", &e[..e.len().min(3)]);
    assert_eq!(e[0].key(), Some("filter.prefixes"));
    assert!(
        e[0].message()
            .contains("too many entries: 40000 (at most 1024)")
    );
    assert_eq!(e[0].line(), Some(6));

    let vlans: Vec<String> = (0..5000).map(|i| (i % 7000).to_string()).collect();
    let e = errors(&format!(
        "{IFACE}[filter]\nvlans = [{}]\n",
        vlans.join(", ")
    ));
    assert_eq!(e.len(), 1);
    assert!(
        e[0].message()
            .contains("too many entries: 5000 (at most 4095)")
    );
}

#[test]
fn problems_beyond_the_cap_are_counted_not_listed() {
    let e = errors(&prefixes(1000, |i| format!("192.0.2.{i}/40")));
    assert_eq!(e.len(), MAX_ERRORS + 1);
    let last = e.last().unwrap();
    assert!(matches!(last, ConfigError::More { more: 900 }), "{last}");
    // The listed ones are the first ones, in file order, with their lines.
    assert_eq!(e[0].key(), Some("filter.prefixes[0]"));
    assert_eq!(e[0].line(), Some(6));
    assert_eq!(e[99].line(), Some(105));
}

#[test]
fn lines_and_columns_are_right_far_into_a_file() {
    // Multi-byte characters before the error on its own line.
    let mut text = String::from(IFACE);
    text.push_str("[filter]\n");
    for _ in 0..3000 {
        text.push_str("# ünïcödé comment line\n");
    }
    text.push_str("prefixes = [\"198.51.100.0/24\", \"è\"]\n");
    let e = errors(&text);
    assert_eq!(e.len(), 1, "{e:#?}");
    let at = e[0].location().unwrap();
    assert_eq!((at.line, at.column), (3005, 32), "{}", e[0]);
}

#[test]
fn a_file_over_the_size_limit_is_refused_unread() {
    let dir = std::env::temp_dir().join(format!("xdprobe-config-big-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.toml");
    let mut text = String::from(IFACE);
    text.push_str("[filter]\nprefixes = [\n");
    while text.len() as u64 <= xdprobe_config::MAX_CONFIG_BYTES {
        text.push_str("\"198.51.100.0/24\",\n");
    }
    text.push_str("]\n");
    std::fs::write(&big, &text).unwrap();
    let e = xdprobe_config::load_with(&big, &Environment::unchecked()).unwrap_err();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(e.errors.len(), 1);
    assert!(matches!(e.errors[0], ConfigError::TooLarge { .. }), "{e}");
    assert!(
        e.to_string().contains("a config file is at most 1048576"),
        "{e}"
    );
}
