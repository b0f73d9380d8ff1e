//! Template layouts: one flow template per address family, chosen by the
//! collector's format (IPFIX / NetFlow v9), mode (biflow / uniflow) and
//! profile (xdprobe / ntop), plus the exporter-statistics options template
//! and, in IPFIX, the options template that names the observation domain.
//!
//! Every collector has its own encoder and therefore its own template IDs
//! space; the IDs below are per transport session.

use crate::ie::{
    Field, NPM_ELEMENTS, Npm, PEN_NTOP, PEN_REVERSE, Side, V9_PRIVATE_BASE, VARLEN, Value, iana,
    ntop, probe,
};

/// Wire format of one collector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// IPFIX, RFC 7011.
    Ipfix,
    /// NetFlow version 9, RFC 3954.
    NetflowV9,
}

/// How a connection becomes records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// One RFC 5103 biflow record per connection (reverse counters under
    /// PEN 29305 in IPFIX, OUT_BYTES/OUT_PKTS in v9).
    Biflow,
    /// One record per direction that carried packets, each with the NPM
    /// fields, for collectors that do not understand biflows.
    Uniflow,
}

/// Which extra elements the collector's users expect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Profile {
    /// Standard IANA elements + xdprobe's NPM elements under the PEN.
    Xdprobe,
    /// Additionally the nProbe elements ntopng/nProbe users know.
    Ntop,
}

pub const TEMPLATE_ID_V4: u16 = 256;
pub const TEMPLATE_ID_V6: u16 = 257;
pub const TEMPLATE_ID_OPTIONS: u16 = 258;
pub const TEMPLATE_ID_DOMAIN_NAME: u16 = 259;

/// A data template: its ID, fields and the fixed length of one record.
#[derive(Clone, Debug)]
pub struct FlowTemplate {
    pub id: u16,
    pub fields: Vec<Field>,
    pub record_len: usize,
}

impl FlowTemplate {
    /// `record_len` counts the fixed-length fields: a variable-length one
    /// adds its value's own length per record (`encode::l7`).
    pub fn new(id: u16, fields: Vec<Field>) -> Self {
        let record_len = fields
            .iter()
            .filter(|f| f.len != VARLEN)
            .map(|f| usize::from(f.len))
            .sum();
        FlowTemplate {
            id,
            fields,
            record_len,
        }
    }

    /// Bytes of the template record (header + specifiers).
    pub fn spec_len(&self) -> usize {
        4 + self.fields.iter().map(Field::spec_len).sum::<usize>()
    }
}

/// Values of the exporter-statistics options record (RFC 7011 §4.1 and
/// §4.3 templates, merged into one record), plus the probe's own
/// resource counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptionsValues {
    pub observation_domain: u32,
    pub exported_messages: u64,
    pub exported_records: u64,
    pub exported_octets: u64,
    pub ignored_packets: u64,
    pub not_sent_records: u64,
    /// Flows ended early because a flow table was full.
    pub flows_evicted: u64,
    /// Remembered first fragments pushed out of a full fragment table.
    pub fragments_evicted: u64,
}

/// Which value an options field carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionValue {
    ExportedMessages,
    ExportedRecords,
    ExportedOctets,
    IgnoredPackets,
    NotSentRecords,
    FlowsEvicted,
    FragmentsEvicted,
}

impl OptionsValues {
    pub fn get(&self, v: OptionValue) -> u64 {
        match v {
            OptionValue::ExportedMessages => self.exported_messages,
            OptionValue::ExportedRecords => self.exported_records,
            OptionValue::ExportedOctets => self.exported_octets,
            OptionValue::IgnoredPackets => self.ignored_packets,
            OptionValue::NotSentRecords => self.not_sent_records,
            OptionValue::FlowsEvicted => self.flows_evicted,
            OptionValue::FragmentsEvicted => self.fragments_evicted,
        }
    }
}

/// One counter of the options template: 8 bytes, IANA (`pen` 0) or an
/// enterprise element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionField {
    pub id: u16,
    pub pen: u32,
    pub value: OptionValue,
}

impl OptionField {
    /// Every counter is an unsigned64.
    pub const LEN: u16 = 8;

    /// Bytes of this field's specifier in a template record.
    pub fn spec_len(&self) -> usize {
        if self.pen == 0 { 4 } else { 8 }
    }
}

/// The options template: one scope field, then the counters.
#[derive(Clone, Debug)]
pub struct OptionsTemplate {
    pub id: u16,
    /// (id, len) of the scope field.
    pub scope: (u16, u16),
    pub fields: Vec<OptionField>,
}

impl OptionsTemplate {
    /// IPFIX also carries the probe's eviction counters as enterprise
    /// elements under `pen` (`ie::probe`); NetFlow v9 has no enterprise
    /// numbers, so its template stops at the standard counters.
    pub fn new(format: Format, pen: u32) -> Self {
        let iana = |id, value| OptionField { id, pen: 0, value };
        let scope = match format {
            Format::Ipfix => (iana::OBSERVATION_DOMAIN_ID, 4),
            Format::NetflowV9 => (iana::NF9_SCOPE_SYSTEM, 4),
        };
        let mut fields = vec![
            iana(
                iana::EXPORTED_MESSAGE_TOTAL_COUNT,
                OptionValue::ExportedMessages,
            ),
            iana(
                iana::EXPORTED_FLOW_RECORD_TOTAL_COUNT,
                OptionValue::ExportedRecords,
            ),
            iana(
                iana::EXPORTED_OCTET_TOTAL_COUNT,
                OptionValue::ExportedOctets,
            ),
            iana(
                iana::IGNORED_PACKET_TOTAL_COUNT,
                OptionValue::IgnoredPackets,
            ),
            iana(iana::NOT_SENT_FLOW_TOTAL_COUNT, OptionValue::NotSentRecords),
        ];
        if format == Format::Ipfix {
            for (id, value) in [
                (probe::FLOW_TABLE_EVICTIONS, OptionValue::FlowsEvicted),
                (
                    probe::FRAGMENT_TABLE_EVICTIONS,
                    OptionValue::FragmentsEvicted,
                ),
            ] {
                fields.push(OptionField { id, pen, value });
            }
        }
        OptionsTemplate {
            id: TEMPLATE_ID_OPTIONS,
            scope,
            fields,
        }
    }

    pub fn record_len(&self) -> usize {
        usize::from(self.scope.1) + self.fields.len() * usize::from(OptionField::LEN)
    }
}

/// The options template that labels the observation domain for the
/// collector's users: scope observationDomainId, then observationDomainName
/// as a variable-length string (RFC 7011 §7). IPFIX only: NetFlow v9 has
/// no variable-length fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DomainNameTemplate {
    pub id: u16,
    /// (id, len) of the scope field.
    pub scope: (u16, u16),
    /// (id, len) of the name: len is always [`VARLEN`].
    pub name: (u16, u16),
}

impl DomainNameTemplate {
    pub const fn new() -> Self {
        DomainNameTemplate {
            id: TEMPLATE_ID_DOMAIN_NAME,
            scope: (iana::OBSERVATION_DOMAIN_ID, 4),
            name: (iana::OBSERVATION_DOMAIN_NAME, VARLEN),
        }
    }

    /// Bytes of the record before the name's length prefix.
    pub fn fixed_len(&self) -> usize {
        usize::from(self.scope.1)
    }
}

impl Default for DomainNameTemplate {
    fn default() -> Self {
        Self::new()
    }
}

/// Everything one collector's encoder announces.
#[derive(Clone, Debug)]
pub struct Templates {
    pub v4: FlowTemplate,
    pub v6: FlowTemplate,
    pub options: OptionsTemplate,
    /// Announced only when the encoder has a name to send (IPFIX, non-empty
    /// name): see `Encoder::set_domain_name`.
    pub domain_name: Option<DomainNameTemplate>,
    /// The flow templates with each kind of L7 field set
    /// (`template_l7`), announced when a record first needs one.
    pub l7: Vec<FlowTemplate>,
}

impl Templates {
    pub fn new(format: Format, mode: Mode, profile: Profile, pen: u32) -> Self {
        let v4 = FlowTemplate::new(
            TEMPLATE_ID_V4,
            flow_fields(false, format, mode, profile, pen),
        );
        let v6 = FlowTemplate::new(
            TEMPLATE_ID_V6,
            flow_fields(true, format, mode, profile, pen),
        );
        let l7 = crate::template_l7::l7_templates(&v4, &v6, format, profile, pen);
        Templates {
            v4,
            v6,
            options: OptionsTemplate::new(format, pen),
            domain_name: None,
            l7,
        }
    }
}

impl Templates {
    /// The flow templates with the local process elements appended
    /// ([`ie::process`](crate::ie::process)).
    pub fn with_process(mut self, format: Format, pen: u32) -> Self {
        use crate::ie::process::*;
        for t in [&mut self.v4, &mut self.v6]
            .into_iter()
            .chain(self.l7.iter_mut())
        {
            let mut fields = std::mem::take(&mut t.fields);
            for (id, len, v) in [
                (PROCESS_ID, 4, Value::ProcessId),
                (PROCESS_NAME, 16, Value::ProcessName),
                (CONNECT_LATENCY_US, 4, Value::ConnectUs),
            ] {
                fields.push(match format {
                    Format::Ipfix => Field::enterprise(pen, id, len, v),
                    Format::NetflowV9 => Field::iana(V9_PRIVATE_BASE + id, len, v),
                });
            }
            *t = FlowTemplate::new(t.id, fields);
        }
        self
    }
}

/// The field list of one flow template.
pub fn flow_fields(
    ipv6: bool,
    format: Format,
    mode: Mode,
    profile: Profile,
    pen: u32,
) -> Vec<Field> {
    use iana::*;
    let ipfix = format == Format::Ipfix;
    let mut f = Vec::with_capacity(64);
    if ipv6 {
        f.push(Field::iana(SOURCE_IPV6_ADDRESS, 16, Value::SrcV6));
        f.push(Field::iana(DESTINATION_IPV6_ADDRESS, 16, Value::DstV6));
    } else {
        f.push(Field::iana(SOURCE_IPV4_ADDRESS, 4, Value::SrcV4));
        f.push(Field::iana(DESTINATION_IPV4_ADDRESS, 4, Value::DstV4));
    }
    f.push(Field::iana(SOURCE_TRANSPORT_PORT, 2, Value::SrcPort));
    f.push(Field::iana(DESTINATION_TRANSPORT_PORT, 2, Value::DstPort));
    f.push(Field::iana(PROTOCOL_IDENTIFIER, 1, Value::Proto));
    f.push(Field::iana(IP_CLASS_OF_SERVICE, 1, Value::Tos));
    f.push(Field::iana(VLAN_ID, 2, Value::Vlan));
    // nfdump reads only the millisecond pair; the microsecond pair carries
    // the probe's full precision for collectors that read it.
    f.push(Field::iana(FLOW_START_MILLISECONDS, 8, Value::StartMs));
    f.push(Field::iana(FLOW_END_MILLISECONDS, 8, Value::EndMs));
    if ipfix {
        f.push(Field::iana(FLOW_START_MICROSECONDS, 8, Value::StartUs));
        f.push(Field::iana(FLOW_END_MICROSECONDS, 8, Value::EndUs));
    }
    f.push(Field::iana(OCTET_DELTA_COUNT, 8, Value::Octets(Side::Fwd)));
    f.push(Field::iana(
        PACKET_DELTA_COUNT,
        8,
        Value::Packets(Side::Fwd),
    ));
    // RFC 7125 makes tcpControlBits 16 bits; v9 collectors expect one byte.
    let flags_len = if ipfix { 2 } else { 1 };
    f.push(Field::iana(
        TCP_CONTROL_BITS,
        flags_len,
        Value::TcpFlags(Side::Fwd),
    ));
    f.push(Field::iana(FLOW_END_REASON, 1, Value::EndReason));
    f.push(Field::iana(BIFLOW_DIRECTION, 1, Value::BiflowDirection));
    if mode == Mode::Biflow {
        if ipfix {
            f.push(Field::enterprise(
                PEN_REVERSE,
                OCTET_DELTA_COUNT,
                8,
                Value::Octets(Side::Rev),
            ));
            f.push(Field::enterprise(
                PEN_REVERSE,
                PACKET_DELTA_COUNT,
                8,
                Value::Packets(Side::Rev),
            ));
            f.push(Field::enterprise(
                PEN_REVERSE,
                TCP_CONTROL_BITS,
                2,
                Value::TcpFlags(Side::Rev),
            ));
        } else {
            f.push(Field::iana(NF9_OUT_BYTES, 8, Value::Octets(Side::Rev)));
            f.push(Field::iana(NF9_OUT_PKTS, 8, Value::Packets(Side::Rev)));
        }
    }
    if ipfix {
        for e in NPM_ELEMENTS {
            f.push(Field::enterprise(pen, e.id, e.len, Value::Npm(e.value)));
        }
    } else {
        // v9 has no enterprise numbers: the nProbe latency pair nfdump maps
        // to its latency columns stands in for the NPM block.
        for (id, v) in [
            (
                ntop::NF9_CLIENT_NW_DELAY_SEC,
                Value::Nf9ClientDelay { usec: false },
            ),
            (
                ntop::NF9_CLIENT_NW_DELAY_USEC,
                Value::Nf9ClientDelay { usec: true },
            ),
            (
                ntop::NF9_SERVER_NW_DELAY_SEC,
                Value::Nf9ServerDelay { usec: false },
            ),
            (
                ntop::NF9_SERVER_NW_DELAY_USEC,
                Value::Nf9ServerDelay { usec: true },
            ),
            (
                ntop::NF9_APPL_LATENCY_SEC,
                Value::Nf9ApplLatency { usec: false },
            ),
            (
                ntop::NF9_APPL_LATENCY_USEC,
                Value::Nf9ApplLatency { usec: true },
            ),
        ] {
            f.push(Field::iana(id, 4, v));
        }
        // The receive-window events and timestamp RTT, under their private v9 types.
        for e in NPM_ELEMENTS.iter().filter(|e| is_v9_npm(e.value)) {
            f.push(Field::iana(
                V9_PRIVATE_BASE + e.id,
                e.len,
                Value::Npm(e.value),
            ));
        }
    }
    if profile == Profile::Ntop {
        for (id, v) in [
            (ntop::CLIENT_NW_LATENCY_MS, Value::NtopClientNwMs),
            (ntop::SERVER_NW_LATENCY_MS, Value::NtopServerNwMs),
            (ntop::APPL_LATENCY_MS, Value::NtopApplMs),
            (ntop::RETRANSMITTED_IN_PKTS, Value::NtopRetrans(Side::Fwd)),
            (ntop::RETRANSMITTED_OUT_PKTS, Value::NtopRetrans(Side::Rev)),
            (ntop::OOORDER_IN_PKTS, Value::NtopOoo(Side::Fwd)),
            (ntop::OOORDER_OUT_PKTS, Value::NtopOoo(Side::Rev)),
        ] {
            f.push(if ipfix {
                Field::enterprise(PEN_NTOP, id, 4, v)
            } else {
                Field::iana(ntop::V9_BASE + id, 4, v)
            });
        }
    }
    f
}

/// True if no enterprise element of `t` shares its ID with a reverse
/// element of the same template (the pmacct pitfall, see `ie`).
pub fn enterprise_ids_distinct_from_reverse(t: &FlowTemplate) -> bool {
    let rev: Vec<u16> = t
        .fields
        .iter()
        .filter(|f| f.pen == PEN_REVERSE)
        .map(|f| f.id)
        .collect();
    t.fields
        .iter()
        .filter(|f| f.pen != 0 && f.pen != PEN_REVERSE)
        .all(|f| !rev.contains(&f.id))
}

/// The NPM elements NetFlow v9 records carry too (as
/// `V9_PRIVATE_BASE + id`).
pub fn is_v9_npm(n: Npm) -> bool {
    matches!(n, Npm::ZeroWindow(_) | Npm::WindowFull(_) | Npm::TsRtt(..))
}

/// Whether a field is one of the per-flow NPM metrics (used by docs/tests).
pub fn is_npm(v: Value) -> bool {
    matches!(v, Value::Npm(n) if n != Npm::SeqInFlow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ie::PEN_DOCUMENTATION;

    #[test]
    fn no_enterprise_id_equals_a_reverse_id() {
        for profile in [Profile::Xdprobe, Profile::Ntop] {
            let t = Templates::new(Format::Ipfix, Mode::Biflow, profile, PEN_DOCUMENTATION);
            assert!(enterprise_ids_distinct_from_reverse(&t.v4));
            assert!(enterprise_ids_distinct_from_reverse(&t.v6));
        }
    }

    #[test]
    fn process_elements_end_both_templates() {
        for (format, ids) in [
            (Format::Ipfix, [1300, 1301, 1302]),
            (Format::NetflowV9, [34068, 34069, 34070]),
        ] {
            let plain = Templates::new(format, Mode::Biflow, Profile::Xdprobe, PEN_DOCUMENTATION);
            let t = plain.clone().with_process(format, PEN_DOCUMENTATION);
            for (p, t) in [(&plain.v4, &t.v4), (&plain.v6, &t.v6)] {
                let tail: Vec<u16> = t.fields[p.fields.len()..].iter().map(|f| f.id).collect();
                assert_eq!(tail, ids, "{format:?}");
                assert_eq!(t.record_len, p.record_len + 24);
            }
        }
    }

    #[test]
    fn uniflow_has_no_reverse_elements() {
        let t = Templates::new(
            Format::Ipfix,
            Mode::Uniflow,
            Profile::Ntop,
            PEN_DOCUMENTATION,
        );
        assert!(t.v4.fields.iter().all(|f| f.pen != PEN_REVERSE));
        assert!(t.v4.fields.iter().filter(|f| is_npm(f.value)).count() >= 20);
    }

    #[test]
    fn v9_has_nfdump_latency_ids_and_no_enterprise() {
        let t = Templates::new(
            Format::NetflowV9,
            Mode::Biflow,
            Profile::Xdprobe,
            PEN_DOCUMENTATION,
        );
        let ids: Vec<u16> = t.v4.fields.iter().map(|f| f.id).collect();
        for id in 57554..=57559 {
            assert!(ids.contains(&id), "{id}");
        }
        // Zero window / window full per direction: 32768 + 1060..=1063;
        // timestamp RTT: 32768 + 1040..=1051.
        for id in (33828..=33831).chain(33808..=33819) {
            assert!(ids.contains(&id), "{id}");
        }
        assert!(t.v4.fields.iter().all(|f| f.pen == 0));
    }
}
