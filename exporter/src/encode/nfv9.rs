//! NetFlow v9 specifics (RFC 3954 §5): 20-byte header whose Count is the
//! number of records (template and data) in the packet, template FlowSet
//! ID 0, options template FlowSet ID 1, no enterprise numbers, a sequence
//! number that counts export packets, and FlowSets padded to 4 bytes.

use super::ExportClock;
use super::ipfix::patch_len;
use crate::template::{FlowTemplate, OptionField, OptionsTemplate, Templates};

pub const HEADER_LEN: usize = 20;
pub const VERSION: u16 = 9;
pub const SET_TEMPLATE: u16 = 0;
pub const SET_OPTIONS_TEMPLATE: u16 = 1;

pub fn header(count: u16, clock: ExportClock, seq: u32, source_id: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..2].copy_from_slice(&VERSION.to_be_bytes());
    h[2..4].copy_from_slice(&count.to_be_bytes());
    h[4..8].copy_from_slice(&clock.uptime_ms.to_be_bytes());
    h[8..12].copy_from_slice(&clock.unix_secs.to_be_bytes());
    h[12..16].copy_from_slice(&seq.to_be_bytes());
    h[16..20].copy_from_slice(&source_id.to_be_bytes());
    h
}

/// Bytes of the options template FlowSet, header and padding included.
pub fn options_template_len(o: &OptionsTemplate) -> usize {
    (4 + 6 + 4 * (1 + o.fields.len())).next_multiple_of(4)
}

fn write_template(out: &mut Vec<u8>, t: &FlowTemplate) {
    out.extend_from_slice(&t.id.to_be_bytes());
    out.extend_from_slice(
        &u16::try_from(t.fields.len())
            .unwrap_or(u16::MAX)
            .to_be_bytes(),
    );
    for f in &t.fields {
        // v9 templates are built without enterprise fields (see template.rs).
        out.extend_from_slice(&f.id.to_be_bytes());
        out.extend_from_slice(&f.len.to_be_bytes());
    }
}

fn pad4(out: &mut Vec<u8>, start: usize) {
    while !(out.len() - start).is_multiple_of(4) {
        out.push(0);
    }
}

/// A template FlowSet holding `t` alone, padded; returns its bytes.
pub fn write_one_template_set(out: &mut Vec<u8>, t: &FlowTemplate) -> usize {
    let start = out.len();
    out.extend_from_slice(&SET_TEMPLATE.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    write_template(out, t);
    pad4(out, start);
    patch_len(out, start);
    out.len() - start
}

/// Bytes of [`write_one_template_set`]'s FlowSet.
pub fn one_template_set_len(t: &FlowTemplate) -> usize {
    (4 + 4 + 4 * t.fields.len()).next_multiple_of(4)
}

pub fn write_template_sets(out: &mut Vec<u8>, t: &Templates) {
    let start = out.len();
    out.extend_from_slice(&SET_TEMPLATE.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    write_template(out, &t.v4);
    write_template(out, &t.v6);
    pad4(out, start);
    patch_len(out, start);

    let o = &t.options;
    let start = out.len();
    out.extend_from_slice(&SET_OPTIONS_TEMPLATE.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&o.id.to_be_bytes());
    out.extend_from_slice(&4u16.to_be_bytes()); // scope length, bytes
    out.extend_from_slice(&u16::try_from(4 * o.fields.len()).unwrap_or(0).to_be_bytes());
    out.extend_from_slice(&o.scope.0.to_be_bytes());
    out.extend_from_slice(&o.scope.1.to_be_bytes());
    // v9 options templates are built without enterprise fields.
    for f in &o.fields {
        out.extend_from_slice(&f.id.to_be_bytes());
        out.extend_from_slice(&OptionField::LEN.to_be_bytes());
    }
    pad4(out, start);
    patch_len(out, start);
}
