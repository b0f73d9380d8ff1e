//! Message writer: header, template sets, data sets, into one reusable
//! buffer capped at the collector's maximum message size.
//!
//! IPFIX (RFC 7011) and NetFlow v9 (RFC 3954) differ only in the header,
//! the set IDs of template sets, what the sequence number counts and set
//! padding, so one writer serves both; `ipfix` and `nfv9` hold the
//! differences.

pub mod host;
pub mod ipfix;
pub mod l7;
pub mod nfv9;
pub mod record;
pub mod varlen;

use xdprobe_dataplane::{Dir, FlowRecord};

use crate::template::{DomainNameTemplate, FlowTemplate, Format, Mode, OptionsValues, Templates};
use record::View;

/// The record did not fit in the current message: finish it and retry in a
/// fresh one.
#[derive(Debug, PartialEq, Eq)]
pub struct NoRoom;

/// Header time fields, supplied by the caller (the encoder reads no clock).
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportClock {
    /// Unix seconds (IPFIX Export Time, v9 UNIX Secs).
    pub unix_secs: u32,
    /// Milliseconds since the exporter started (v9 sysUpTime).
    pub uptime_ms: u32,
}

/// One collector's message writer.
pub struct Encoder {
    format: Format,
    mode: Mode,
    templates: Templates,
    domain: u32,
    max_len: usize,
    buf: Vec<u8>,
    /// (set ID, offset of its header) of the set being filled.
    open_set: Option<(u16, usize)>,
    /// Data records in the message being built (IPFIX sequence counts them).
    msg_data_records: u32,
    /// v9 header Count: template + options template + data records.
    msg_v9_count: u16,
    /// IPFIX: data records sent before this message; v9: messages sent.
    seq: u32,
    clock: ExportClock,
    started: bool,
    /// observationDomainName, already cut to what fits (see
    /// `set_domain_name`); empty = not sent.
    domain_name: String,
    /// L7 templates (bit = index in `Templates::l7`) announced since the
    /// last `write_templates`: each goes out before the first record that
    /// needs it, again after each template refresh.
    announced: u16,
}

impl Encoder {
    /// `max_len` is the largest message (for UDP: MTU minus IP/UDP headers).
    /// Fails if the templates alone would not fit.
    pub fn new(
        format: Format,
        mode: Mode,
        templates: Templates,
        domain: u32,
        max_len: usize,
    ) -> Result<Self, usize> {
        let max_len = max_len.min(usize::from(u16::MAX));
        let e = Encoder {
            format,
            mode,
            templates,
            domain,
            max_len,
            buf: Vec::with_capacity(max_len),
            open_set: None,
            msg_data_records: 0,
            msg_v9_count: 0,
            seq: 0,
            clock: ExportClock::default(),
            started: false,
            domain_name: String::new(),
            announced: 0,
        };
        // The templates must fit in one message, and so must the largest
        // data set a record makes (uniflow: two records at once). A record
        // that does not fit after the templates goes in the next message
        // (`link::build`); the biflow record fits with them at the
        // default MTU, the uniflow pair (ntop profile, IPv6) does not.
        let per_record = match mode {
            Mode::Biflow => 1,
            Mode::Uniflow => 2,
        };
        let templates = e.header_len() + e.template_sets_len() + 4;
        let data = e.header_len() + 4 + e.templates.v6.record_len * per_record + 4;
        // Each L7 template fits a message of its own, and so does its
        // largest record (every string at its longest).
        let l7 = e
            .templates
            .l7
            .iter()
            .map(|t| {
                let set = e.header_len() + e.one_template_set_len(t);
                let rec = e.header_len() + 4 + l7::max_record_len(t) * per_record + 4;
                set.max(rec)
            })
            .max()
            .unwrap_or(0);
        let needed = templates.max(data).max(l7);
        if needed > max_len { Err(needed) } else { Ok(e) }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn templates(&self) -> &Templates {
        &self.templates
    }

    fn header_len(&self) -> usize {
        match self.format {
            Format::Ipfix => ipfix::HEADER_LEN,
            Format::NetflowV9 => nfv9::HEADER_LEN,
        }
    }

    fn one_template_set_len(&self, t: &FlowTemplate) -> usize {
        match self.format {
            Format::Ipfix => 4 + t.spec_len(),
            Format::NetflowV9 => nfv9::one_template_set_len(t),
        }
    }

    /// Bytes of the template set plus the options template set.
    pub fn template_sets_len(&self) -> usize {
        let t = &self.templates;
        let opt_spec = match self.format {
            Format::Ipfix => {
                ipfix::options_template_len(&t.options)
                    + t.domain_name
                        .as_ref()
                        .map_or(0, ipfix::domain_name_template_len)
            }
            // v9 never announces the domain-name template (no varlen).
            Format::NetflowV9 => nfv9::options_template_len(&t.options),
        };
        4 + t.v4.spec_len() + t.v6.spec_len() + opt_spec
    }

    /// Set the observationDomainName sent after every template (re)send
    /// (IPFIX only; an empty name, or NetFlow v9, sends nothing). The name
    /// is cut, on a character boundary, so that the templates and the name
    /// record always fit in one message together. Returns the name kept.
    pub fn set_domain_name(&mut self, name: &str) -> &str {
        self.domain_name.clear();
        self.templates.domain_name = None;
        if self.format != Format::Ipfix || name.is_empty() {
            return &self.domain_name;
        }
        let t = DomainNameTemplate::new();
        self.templates.domain_name = Some(t);
        // A fresh message: header, templates, one data set holding the record.
        let room = self
            .max_len
            .saturating_sub(self.header_len() + self.template_sets_len() + 4 + t.fixed_len());
        let kept = varlen::truncate_utf8(name, varlen::fit(name.len(), room));
        if kept.is_empty() {
            // Not even one character fits next to the templates.
            self.templates.domain_name = None;
        }
        self.domain_name.push_str(kept);
        &self.domain_name
    }

    /// The name `write_domain_name` sends (empty: none).
    pub fn domain_name(&self) -> &str {
        &self.domain_name
    }

    /// Restart the sequence (a new transport session, e.g. TCP reconnect).
    pub fn reset_session(&mut self) {
        self.seq = 0;
        self.clear();
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.open_set = None;
        self.msg_data_records = 0;
        self.msg_v9_count = 0;
        self.started = false;
    }

    /// True when no set has been added to the current message.
    pub fn is_empty(&self) -> bool {
        !self.started || self.buf.len() <= self.header_len()
    }

    /// Data records in the current (unfinished) message.
    pub fn pending_records(&self) -> u32 {
        self.msg_data_records
    }

    fn ensure_started(&mut self, clock: ExportClock) {
        if !self.started {
            self.buf.clear();
            self.buf.resize(self.header_len(), 0);
            self.clock = clock;
            self.started = true;
        }
    }

    fn close_set(&mut self) {
        if let Some((_, start)) = self.open_set.take() {
            if self.format == Format::NetflowV9 {
                // RFC 3954 §5.3: pad so the next FlowSet is 4-byte aligned.
                while !(self.buf.len() - start).is_multiple_of(4) {
                    self.buf.push(0);
                }
            }
            let len = u16::try_from(self.buf.len() - start).unwrap_or(u16::MAX);
            if let Some(b) = self.buf.get_mut(start + 2..start + 4) {
                b.copy_from_slice(&len.to_be_bytes());
            }
        }
    }

    /// Make `set_id` the open set if `extra` more bytes fit (counting its
    /// header and v9 padding if a new set must be opened).
    fn open(&mut self, set_id: u16, extra: usize) -> Result<(), NoRoom> {
        let pad = if self.format == Format::NetflowV9 {
            3
        } else {
            0
        };
        match self.open_set {
            Some((id, _)) if id == set_id => {
                if self.buf.len() + extra + pad > self.max_len {
                    return Err(NoRoom);
                }
            }
            _ => {
                // Closing the current set may add up to 3 pad bytes (v9).
                if self.buf.len() + pad + 4 + extra + pad > self.max_len {
                    return Err(NoRoom);
                }
                self.close_set();
                let start = self.buf.len();
                self.buf.extend_from_slice(&set_id.to_be_bytes());
                self.buf.extend_from_slice(&[0, 0]);
                self.open_set = Some((set_id, start));
            }
        }
        Ok(())
    }

    /// Add the template set and options template set.
    pub fn write_templates(&mut self, clock: ExportClock) -> Result<(), NoRoom> {
        self.ensure_started(clock);
        let pad = if self.format == Format::NetflowV9 {
            6
        } else {
            0
        };
        if self.buf.len() + 3 + self.template_sets_len() + pad > self.max_len {
            return Err(NoRoom);
        }
        self.close_set();
        match self.format {
            Format::Ipfix => ipfix::write_template_sets(&mut self.buf, &self.templates),
            Format::NetflowV9 => nfv9::write_template_sets(&mut self.buf, &self.templates),
        }
        self.msg_v9_count = self.msg_v9_count.saturating_add(3);
        self.announced = 0;
        Ok(())
    }

    /// Announces L7 template `i` in this message if it was not since the
    /// last refresh; `NoRoom` when its set does not fit here.
    fn announce(&mut self, i: usize) -> Result<(), NoRoom> {
        let bit = 1u16 << i;
        if self.announced & bit != 0 {
            return Ok(());
        }
        let Some(len) = self
            .templates
            .l7
            .get(i)
            .map(|t| self.one_template_set_len(t))
        else {
            return Ok(());
        };
        let pad = if self.format == Format::NetflowV9 {
            3
        } else {
            0
        };
        if self.buf.len() + pad + len > self.max_len {
            return Err(NoRoom);
        }
        self.close_set();
        let t = &self.templates.l7[i];
        match self.format {
            Format::Ipfix => ipfix::write_one_template_set(&mut self.buf, t),
            Format::NetflowV9 => nfv9::write_one_template_set(&mut self.buf, t),
        };
        self.msg_v9_count = self.msg_v9_count.saturating_add(1);
        self.announced |= bit;
        Ok(())
    }

    /// Add one flow record (two in uniflow mode: each direction that
    /// carried packets, client→server first).
    pub fn write_record(&mut self, r: &FlowRecord, clock: ExportClock) -> Result<(), NoRoom> {
        self.ensure_started(clock);
        let l7 = crate::template_l7::L7Kind::of(r).map(|k| k.index(r.is_ipv6()));
        if let Some(i) = l7 {
            self.announce(i)?;
        }
        let t = pick(&self.templates, r);
        let per_record = match self.mode {
            Mode::Biflow => 1,
            Mode::Uniflow => 2,
        };
        // The longest string cap with which the record fits a message.
        let room = self.max_len.saturating_sub(self.header_len() + 8) / per_record;
        let (len, cap) = match l7 {
            Some(_) => l7::TEXT_CAPS
                .iter()
                .map(|&c| (l7::record_len(t, r, c), c))
                .find(|(n, _)| *n <= room)
                .unwrap_or((l7::record_len(t, r, 0), 0)),
            None => (t.record_len, l7::MAX_TEXT),
        };
        let id = t.id;
        let view = |d| View {
            text_cap: cap,
            ..View::new(r, d)
        };
        match self.mode {
            Mode::Biflow => {
                self.open(id, len)?;
                write_view(&mut self.buf, pick(&self.templates, r), &view(Dir::C2S));
                self.count_data(1);
            }
            Mode::Uniflow => {
                // A direction without packets gets no record (a collector
                // would count it as a flow), unless neither has any.
                let c2s = r.c2s.packets > 0 || r.s2c.packets == 0;
                let s2c = r.s2c.packets > 0;
                let n = usize::from(c2s) + usize::from(s2c);
                self.open(id, len * n)?;
                for (on, d) in [(c2s, Dir::C2S), (s2c, Dir::S2C)] {
                    if on {
                        write_view(&mut self.buf, pick(&self.templates, r), &view(d));
                    }
                }
                self.count_data(n as u32);
            }
        }
        Ok(())
    }

    /// Add one exporter-statistics options record.
    pub fn write_options(&mut self, v: &OptionsValues, clock: ExportClock) -> Result<(), NoRoom> {
        self.ensure_started(clock);
        let len = self.templates.options.record_len();
        self.open(self.templates.options.id, len)?;
        self.buf
            .extend_from_slice(&v.observation_domain.to_be_bytes());
        for f in &self.templates.options.fields {
            self.buf.extend_from_slice(&v.get(f.value).to_be_bytes());
        }
        self.count_data(1);
        Ok(())
    }

    /// Add the observation-domain-name options record (template
    /// [`TEMPLATE_ID_DOMAIN_NAME`](crate::template::TEMPLATE_ID_DOMAIN_NAME)),
    /// if a name is set. Ok(true) if a record was written.
    pub fn write_domain_name(&mut self, clock: ExportClock) -> Result<bool, NoRoom> {
        let Some(t) = self.templates.domain_name else {
            return Ok(false);
        };
        self.ensure_started(clock);
        let len = t.fixed_len() + varlen::encoded_len(self.domain_name.len());
        self.open(t.id, len)?;
        self.buf.extend_from_slice(&self.domain.to_be_bytes());
        varlen::write(&mut self.buf, self.domain_name.as_bytes());
        self.count_data(1);
        Ok(true)
    }

    fn count_data(&mut self, n: u32) {
        self.msg_data_records += n;
        self.msg_v9_count = self
            .msg_v9_count
            .saturating_add(u16::try_from(n).unwrap_or(u16::MAX));
    }

    /// Close the message: patch the header and return its bytes (None if
    /// nothing was added). The next write starts a new message.
    pub fn finish(&mut self) -> Option<&[u8]> {
        if self.is_empty() {
            self.clear();
            return None;
        }
        self.close_set();
        let len = self.buf.len();
        match self.format {
            Format::Ipfix => {
                let h = ipfix::header(len, self.clock.unix_secs, self.seq, self.domain);
                if let Some(b) = self.buf.get_mut(..h.len()) {
                    b.copy_from_slice(&h);
                }
            }
            Format::NetflowV9 => {
                let h = nfv9::header(self.msg_v9_count, self.clock, self.seq, self.domain);
                if let Some(b) = self.buf.get_mut(..h.len()) {
                    b.copy_from_slice(&h);
                }
            }
        }
        self.seq = match self.format {
            Format::Ipfix => self.seq.wrapping_add(self.msg_data_records),
            Format::NetflowV9 => self.seq.wrapping_add(1),
        };
        self.started = false;
        self.open_set = None;
        self.msg_data_records = 0;
        self.msg_v9_count = 0;
        Some(&self.buf)
    }
}

/// The template a record is written with: the flow template, or the L7
/// template of its kind of fields.
fn pick<'t>(t: &'t Templates, r: &FlowRecord) -> &'t FlowTemplate {
    let l7 = crate::template_l7::L7Kind::of(r).and_then(|k| t.l7.get(k.index(r.is_ipv6())));
    match l7 {
        Some(l7) => l7,
        None if r.is_ipv6() => &t.v6,
        None => &t.v4,
    }
}

fn write_view(out: &mut Vec<u8>, t: &FlowTemplate, v: &View<'_>) {
    record::write_record(out, t, v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ie::PEN_DOCUMENTATION;
    use crate::template::{Profile, TEMPLATE_ID_DOMAIN_NAME};

    const CLOCK: ExportClock = ExportClock {
        unix_secs: 1_709_300_000,
        uptime_ms: 1,
    };

    fn encoder(format: Format, max_len: usize) -> Encoder {
        let t = Templates::new(format, Mode::Biflow, Profile::Xdprobe, PEN_DOCUMENTATION);
        Encoder::new(format, Mode::Biflow, t, 0x0102_0304, max_len).unwrap()
    }

    /// (set ID, set body) of every set of an IPFIX message.
    fn sets(m: &[u8]) -> Vec<(u16, &[u8])> {
        let mut out = Vec::new();
        let mut off = ipfix::HEADER_LEN;
        while off + 4 <= m.len() {
            let id = u16::from_be_bytes([m[off], m[off + 1]]);
            let len = usize::from(u16::from_be_bytes([m[off + 2], m[off + 3]]));
            assert!(
                len >= 4 && off + len <= m.len(),
                "set length {len} at {off}"
            );
            out.push((id, &m[off + 4..off + len]));
            off += len;
        }
        assert_eq!(off, m.len(), "sets fill the message exactly");
        out
    }

    /// Templates + name record; returns the message.
    fn first_message(e: &mut Encoder) -> Vec<u8> {
        e.write_templates(CLOCK).unwrap();
        e.write_domain_name(CLOCK).unwrap();
        e.finish().unwrap().to_vec()
    }

    #[test]
    fn domain_name_template_announces_a_variable_length_string() {
        let mut e = encoder(Format::Ipfix, 1452);
        e.set_domain_name("xdprobe test");
        let m = first_message(&mut e);
        let opt: Vec<&[u8]> = sets(&m)
            .into_iter()
            .filter(|(id, _)| *id == ipfix::SET_OPTIONS_TEMPLATE)
            .map(|(_, b)| b)
            .collect();
        assert_eq!(opt.len(), 2, "statistics, then domain-name template set");
        // ID 259, 2 fields, 1 scope; 149 len 4; 300 len 65535 (RFC 7011 §7).
        assert_eq!(
            opt[1],
            &[1, 3, 0, 2, 0, 1, 0, 149, 0, 4, 1, 44, 0xFF, 0xFF][..]
        );
    }

    #[test]
    fn domain_name_record_uses_short_and_long_length_forms() {
        for (n, prefix) in [
            (1usize, vec![1u8]),
            (254, vec![254]),
            (255, vec![255, 0, 255]),
            (256, vec![255, 1, 0]),
            (1000, vec![255, 3, 232]),
        ] {
            let name: String = (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            let mut e = encoder(Format::Ipfix, 9000);
            assert_eq!(e.set_domain_name(&name), name, "{n} bytes fit");
            let m = first_message(&mut e);
            let data: Vec<&[u8]> = sets(&m)
                .into_iter()
                .filter(|(id, _)| *id == TEMPLATE_ID_DOMAIN_NAME)
                .map(|(_, b)| b)
                .collect();
            assert_eq!(data.len(), 1, "one name record");
            let mut want = vec![1, 2, 3, 4];
            want.extend_from_slice(&prefix);
            want.extend_from_slice(name.as_bytes());
            assert_eq!(data[0], &want[..], "{n}-byte name");
        }
    }

    #[test]
    fn oversized_name_is_cut_to_the_message_cap_on_a_char_boundary() {
        // 70 000 bytes: over the 16-bit length and over any message.
        let name = format!("xdprobe {}", "é".repeat(35_000));
        for max in [1452usize, 9000, 65_535] {
            let mut e = encoder(Format::Ipfix, max);
            let kept = e.set_domain_name(&name).to_string();
            assert!(name.starts_with(&kept) && kept.len() < name.len());
            let m = first_message(&mut e);
            assert!(m.len() <= max, "{} bytes over the {max} cap", m.len());
            // Tight: at most one byte lost to the character boundary.
            assert!(m.len() + 1 >= max, "{} bytes, cap {max}", m.len());
            assert!(
                sets(&m)
                    .iter()
                    .any(|(id, _)| *id == TEMPLATE_ID_DOMAIN_NAME)
            );
        }
    }

    #[test]
    fn default_mtu_leaves_room_for_a_long_name() {
        // Largest templates (ntop profile, biflow), tightest cap (TCP/IPv6
        // at MTU 1500): the measured room was 665 bytes before the window
        // and table-eviction elements, 585 with them, less 2 x 96 bytes for
        // the 12 timestamp-RTT elements. A name must fit whole up to the
        // longest DNS name (253 bytes).
        let t = Templates::new(
            Format::Ipfix,
            Mode::Biflow,
            Profile::Ntop,
            PEN_DOCUMENTATION,
        );
        let mut e = Encoder::new(Format::Ipfix, Mode::Biflow, t, 1, 1428).unwrap();
        let n = e.set_domain_name(&"a".repeat(5000)).len();
        assert!(n >= 253, "room for the name: {n} bytes");
    }

    #[test]
    fn nfv9_and_empty_names_send_nothing() {
        let mut v9 = encoder(Format::NetflowV9, 1452);
        let before = v9.template_sets_len();
        assert_eq!(v9.set_domain_name("xdprobe test"), "");
        assert_eq!(v9.template_sets_len(), before);
        assert_eq!(v9.write_domain_name(CLOCK), Ok(false));

        let mut e = encoder(Format::Ipfix, 1452);
        let before = e.template_sets_len();
        e.set_domain_name("x");
        assert_eq!(e.template_sets_len(), before + 18);
        e.set_domain_name("");
        assert_eq!(e.template_sets_len(), before);
        let m = first_message(&mut e);
        assert_eq!(sets(&m).len(), 2, "template set and statistics only");
    }

    #[test]
    fn name_record_counts_in_the_sequence_number() {
        let mut e = encoder(Format::Ipfix, 1452);
        e.set_domain_name("xdprobe test");
        first_message(&mut e);
        e.write_options(&OptionsValues::default(), CLOCK).unwrap();
        let m = e.finish().unwrap();
        assert_eq!(u32::from_be_bytes([m[8], m[9], m[10], m[11]]), 1);
    }
}
