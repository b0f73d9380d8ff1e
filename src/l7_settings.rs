//! `[l7]` (and the same command-line flags) into the L7 engine's settings:
//! one place for both the daemon and the offline commands.

use xdprobe_config::L7Settings;
use xdprobe_dataplane::l7::L7Config;

/// The engine's settings, `None` when L7 is off.
pub fn l7_config(s: &L7Settings) -> Option<L7Config> {
    s.enabled.then_some(L7Config {
        tls: s.tls,
        quic: s.quic,
        http: s.http,
        dns: s.dns,
        packets: s.packets,
        max_flows: s.max_flows,
        buffers: s.buffers,
        reassembly: s.reassembly_bytes,
        http_max_head: s.http_max_head,
        http_target_len: s.http_target_len,
        http_user_agent: s.http_user_agent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_agree_and_off_is_none() {
        assert_eq!(l7_config(&L7Settings::default()), Some(L7Config::default()));
        let off = L7Settings {
            enabled: false,
            ..L7Settings::default()
        };
        assert_eq!(l7_config(&off), None);
    }
}
