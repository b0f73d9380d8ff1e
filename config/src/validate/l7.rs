//! `[l7]`: what each flow is (docs/l7.md). Defaults are `L7Settings`'s,
//! which `deploy/probe.toml` states.

use super::{IntRule, Validator};
use crate::raw::{RawL7, S};
use crate::settings::L7Settings;

fn rule(name: &'static str, default: i64, min: i64, max: i64) -> IntRule {
    IntRule {
        name,
        default,
        min,
        max,
        power_of_two: false,
    }
}

fn flag(v: &Option<S<bool>>, default: bool) -> bool {
    v.as_ref().map_or(default, |b| *b.get_ref())
}

impl Validator<'_> {
    pub(super) fn l7(&mut self, raw: RawL7) -> L7Settings {
        let d = L7Settings::default();
        let mut int = |key: &str, v: &Option<S<i64>>, r: IntRule| {
            usize::try_from(self.int(key, v.as_ref(), r)).unwrap_or_default()
        };
        let packets = int("l7.packets", &raw.packets, rule("packets", 8, 1, 255));
        let max_flows = int(
            "l7.max_flows",
            &raw.max_flows,
            rule("max_flows", 16_384, 1, 1 << 24),
        );
        let buffers = int("l7.buffers", &raw.buffers, rule("buffers", 1024, 0, 65_536));
        let reassembly_bytes = int(
            "l7.reassembly_bytes",
            &raw.reassembly_bytes,
            rule("reassembly_bytes", 16_384, 256, 16_384),
        );
        let http_max_head = int(
            "l7.http_max_head",
            &raw.http_max_head,
            rule("http_max_head", 8192, 256, 16_384),
        );
        let http_target_len = int(
            "l7.http_target_len",
            &raw.http_target_len,
            rule("http_target_len", 256, 0, 1024),
        );
        L7Settings {
            enabled: flag(&raw.enabled, d.enabled),
            tls: flag(&raw.tls, d.tls),
            quic: flag(&raw.quic, d.quic),
            http: flag(&raw.http, d.http),
            dns: flag(&raw.dns, d.dns),
            packets: u8::try_from(packets).unwrap_or(d.packets),
            max_flows,
            buffers,
            reassembly_bytes,
            http_max_head,
            http_target_len,
            http_user_agent: flag(&raw.http_user_agent, d.http_user_agent),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::Environment;
    use crate::validate::from_text;

    const IFACE: &str = "[[interface]]\nname = \"eth1\"\nqueues = [{ queue = 0, core = 0 }]\n";

    fn env() -> Environment {
        Environment::with_cores(2)
    }

    #[test]
    fn l7_defaults_and_the_deploy_example_agree() {
        let c = from_text(IFACE, &env()).unwrap();
        assert_eq!(c.l7, L7Settings::default());
        let example = from_text(include_str!("../../../deploy/probe.toml"), &env()).unwrap();
        assert_eq!(example.l7, L7Settings::default());
        let c = from_text(
            &format!("{IFACE}[l7]\nhttp = false\npackets = 3\nhttp_user_agent = true\n"),
            &env(),
        )
        .unwrap();
        assert!(!c.l7.http && c.l7.tls && c.l7.http_user_agent);
        assert_eq!(c.l7.packets, 3);
    }

    #[test]
    fn l7_values_are_checked_with_their_line() {
        let e = from_text(&format!("{IFACE}[l7]\npackets = 0\nreassembly_bytes = 70000\nhttp_target_len = -1\nbogus = 1\n"), &env()).unwrap_err();
        let keys: Vec<_> = e
            .iter()
            .map(|e| (e.key().map(str::to_string), e.line()))
            .collect();
        // An unknown key is a schema error: the section is refused whole.
        assert_eq!(
            keys,
            vec![(Some("l7.bogus".to_string()), Some(8))],
            "{e:#?}"
        );
        let e = from_text(
            &format!("{IFACE}[l7]\npackets = 0\nreassembly_bytes = 70000\nhttp_target_len = -1\n"),
            &env(),
        )
        .unwrap_err();
        let keys: Vec<_> = e
            .iter()
            .map(|e| (e.key().unwrap().to_string(), e.line().unwrap()))
            .collect();
        assert_eq!(
            keys,
            [
                ("l7.packets", 5),
                ("l7.reassembly_bytes", 6),
                ("l7.http_target_len", 7)
            ]
            .map(|(k, l)| (k.to_string(), l))
        );
        assert!(e[1].message().contains("16384"), "{}", e[1]);
    }
}
