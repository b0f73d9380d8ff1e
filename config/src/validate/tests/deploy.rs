//! The shipped files: deploy/probe.toml states every default and survives
//! damage; deploy/manager.toml (the Debian package's) is a manager config.

use super::*;

const DEPLOY_EXAMPLE: &str = include_str!("../../../../deploy/probe.toml");

/// deploy/probe.toml promises to state every default: it must parse to the
/// same settings as a file that states none (apart from its example
/// interface queues and collector).
#[test]
fn deploy_example_states_the_defaults() {
    let example = ok(DEPLOY_EXAMPLE);
    let defaults = ok(IFACE);
    assert_eq!(example.probe, defaults.probe);
    assert_eq!(example.flow, defaults.flow);
    assert_eq!(example.filter, defaults.filter);
    assert_eq!(example.metrics, defaults.metrics);
    assert_eq!(example.host, defaults.host);
    assert_eq!(example.host, crate::HostSettings::default());
    let mut export = example.export.clone();
    assert_eq!(export.collectors, ["udp://127.0.0.1:4739"]);
    export.collectors.clear();
    assert_eq!(export, defaults.export);
    let mut iface = example.interfaces[0].clone();
    assert_eq!(iface.queues.len(), 2);
    iface.queues.truncate(1);
    assert_eq!(iface, defaults.interfaces[0]);
    // [manager] states its defaults too, and the manager reads the file.
    assert_eq!(defaults.manager, None);
    // ...but for the TLS files, which have no default.
    let stated = crate::settings::ManagerSettings {
        security: crate::settings::ManagerSecurity::Tls {
            cert: "/etc/xdprobe/fleet/manager.pem".into(),
            key: "/etc/xdprobe/fleet/manager.key".into(),
            ca: Some("/etc/xdprobe/fleet/ca.pem".into()),
            pinned: Vec::new(),
        },
        ..crate::settings::ManagerSettings::default()
    };
    assert_eq!(example.manager.as_ref(), Some(&stated));
    let m = manager_from_text(DEPLOY_EXAMPLE, &env()).expect("a manager reads it");
    assert_eq!(m.manager, stated);
    assert_eq!(m.export, example.export);
}

/// The loader runs on operator-written files: no input may panic it. Every
/// prefix of the example, and the example with each line's first character
/// replaced, must give Ok or errors, never a panic.
#[test]
fn never_panics_on_damaged_input() {
    let text = DEPLOY_EXAMPLE;
    let mut cut = 0;
    while cut <= text.len() {
        if text.is_char_boundary(cut) {
            let _ = from_text(&text[..cut], &env());
        }
        cut += 7;
    }
    let lines: Vec<&str> = text.lines().collect();
    for i in 0..lines.len() {
        for junk in ["=", "[", "\"", "x = -9999999999999999999", "\u{fffd}"] {
            let mut damaged = lines.clone();
            damaged[i] = junk;
            if let Err(errors) = from_text(&damaged.join("\n"), &env()) {
                assert!(errors.iter().all(|e| e.line().is_some_and(|l| l >= 1)));
            }
        }
    }
}

/// The package's manager.toml: what `xdprobe manager --check` reads under
/// the unit, TLS with the postinst's files, the manager's defaults besides.
#[test]
fn packaged_manager_toml_is_a_tls_manager() {
    let text = include_str!("../../../../deploy/manager.toml");
    let m = manager_from_text(text, &env()).expect("the packaged manager.toml");
    assert_eq!(
        m.manager.security,
        crate::settings::ManagerSecurity::Tls {
            cert: "/etc/xdprobe/fleet/manager.pem".into(),
            key: "/etc/xdprobe/fleet/manager.key".into(),
            ca: Some("/etc/xdprobe/fleet/ca.pem".into()),
            pinned: Vec::new(),
        }
    );
    assert_eq!(m.manager.user, None);
    assert_eq!(m.metrics.listen.port(), 9465);
}
