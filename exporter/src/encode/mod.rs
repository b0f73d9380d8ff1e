//! Message writer: header, template sets, data sets, into one reusable
//! buffer capped at the collector's maximum message size.
//!
//! IPFIX (RFC 7011) and NetFlow v9 (RFC 3954) differ only in the header,
//! the set IDs of template sets, what the sequence number counts and set
//! padding, so one writer serves both; `ipfix` and `nfv9` hold the
//! differences.

pub mod ipfix;
pub mod nfv9;
pub mod record;

use xdprobe_dataplane::{Dir, FlowRecord};

use crate::template::{FlowTemplate, Format, Mode, OptionsValues, Templates};
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
        };
        let needed = e.header_len() + e.template_sets_len() + 4 + e.templates.v6.record_len * 2 + 4;
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

    /// Bytes of the template set plus the options template set.
    pub fn template_sets_len(&self) -> usize {
        let t = &self.templates;
        let opt_spec = match self.format {
            Format::Ipfix => ipfix::options_template_len(&t.options),
            Format::NetflowV9 => nfv9::options_template_len(&t.options),
        };
        4 + t.v4.spec_len() + t.v6.spec_len() + opt_spec
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
        Ok(())
    }

    /// Add one flow record (two in uniflow mode: each direction that
    /// carried packets, client→server first).
    pub fn write_record(&mut self, r: &FlowRecord, clock: ExportClock) -> Result<(), NoRoom> {
        self.ensure_started(clock);
        let t = if r.is_ipv6() {
            &self.templates.v6
        } else {
            &self.templates.v4
        };
        let (id, len) = (t.id, t.record_len);
        match self.mode {
            Mode::Biflow => {
                self.open(id, len)?;
                write_view(
                    &mut self.buf,
                    pick(&self.templates, r),
                    &View::new(r, Dir::C2S),
                );
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
                        write_view(&mut self.buf, pick(&self.templates, r), &View::new(r, d));
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
        let o = &self.templates.options;
        self.buf
            .extend_from_slice(&v.observation_domain.to_be_bytes());
        for (x, _) in [
            v.exported_messages,
            v.exported_records,
            v.exported_octets,
            v.ignored_packets,
            v.not_sent_records,
        ]
        .iter()
        .zip(o.fields.iter())
        {
            self.buf.extend_from_slice(&x.to_be_bytes());
        }
        self.count_data(1);
        Ok(())
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

fn pick<'t>(t: &'t Templates, r: &FlowRecord) -> &'t FlowTemplate {
    if r.is_ipv6() { &t.v6 } else { &t.v4 }
}

fn write_view(out: &mut Vec<u8>, t: &FlowTemplate, v: &View<'_>) {
    record::write_record(out, t, v);
}
