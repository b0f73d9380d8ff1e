//! IPFIX specifics (RFC 7011 §3): 16-byte header, template set ID 2,
//! options template set ID 3, enterprise bit on field specifiers, and a
//! sequence number that counts data records.

use crate::template::{DomainNameTemplate, FlowTemplate, OptionField, OptionsTemplate, Templates};

pub const HEADER_LEN: usize = 16;
pub const VERSION: u16 = 10;
pub const SET_TEMPLATE: u16 = 2;
pub const SET_OPTIONS_TEMPLATE: u16 = 3;

/// The message header (§3.1). `seq` counts the data records sent before
/// this message in this observation domain and transport session.
pub fn header(len: usize, export_time: u32, seq: u32, domain: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..2].copy_from_slice(&VERSION.to_be_bytes());
    h[2..4].copy_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_be_bytes());
    h[4..8].copy_from_slice(&export_time.to_be_bytes());
    h[8..12].copy_from_slice(&seq.to_be_bytes());
    h[12..16].copy_from_slice(&domain.to_be_bytes());
    h
}

/// Bytes of the options template set, header included.
pub fn options_template_len(o: &OptionsTemplate) -> usize {
    4 + 6 + 4 + o.fields.iter().map(|f| f.spec_len()).sum::<usize>()
}

/// Bytes of the domain-name options template set, header included.
pub fn domain_name_template_len(_: &DomainNameTemplate) -> usize {
    4 + 6 + 4 * 2
}

fn write_template(out: &mut Vec<u8>, t: &FlowTemplate) {
    out.extend_from_slice(&t.id.to_be_bytes());
    out.extend_from_slice(
        &u16::try_from(t.fields.len())
            .unwrap_or(u16::MAX)
            .to_be_bytes(),
    );
    for f in &t.fields {
        if f.pen == 0 {
            out.extend_from_slice(&f.id.to_be_bytes());
            out.extend_from_slice(&f.len.to_be_bytes());
        } else {
            // §3.2: the high bit of the ID says an enterprise number follows.
            out.extend_from_slice(&(f.id | 0x8000).to_be_bytes());
            out.extend_from_slice(&f.len.to_be_bytes());
            out.extend_from_slice(&f.pen.to_be_bytes());
        }
    }
}

/// A template set holding `t` alone (an L7 template announced on first
/// use); returns its bytes.
pub fn write_one_template_set(out: &mut Vec<u8>, t: &FlowTemplate) -> usize {
    let start = out.len();
    out.extend_from_slice(&SET_TEMPLATE.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    write_template(out, t);
    patch_len(out, start);
    out.len() - start
}

/// The template set (both flow templates) then the options template set.
pub fn write_template_sets(out: &mut Vec<u8>, t: &Templates) {
    let start = out.len();
    out.extend_from_slice(&SET_TEMPLATE.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    write_template(out, &t.v4);
    write_template(out, &t.v6);
    patch_len(out, start);

    let o = &t.options;
    let start = out.len();
    out.extend_from_slice(&SET_OPTIONS_TEMPLATE.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&o.id.to_be_bytes());
    out.extend_from_slice(&u16::try_from(1 + o.fields.len()).unwrap_or(0).to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes()); // scope field count
    out.extend_from_slice(&o.scope.0.to_be_bytes());
    out.extend_from_slice(&o.scope.1.to_be_bytes());
    for f in &o.fields {
        if f.pen == 0 {
            out.extend_from_slice(&f.id.to_be_bytes());
            out.extend_from_slice(&OptionField::LEN.to_be_bytes());
        } else {
            out.extend_from_slice(&(f.id | 0x8000).to_be_bytes());
            out.extend_from_slice(&OptionField::LEN.to_be_bytes());
            out.extend_from_slice(&f.pen.to_be_bytes());
        }
    }
    patch_len(out, start);

    // A set of its own, so that a decoder without variable-length support
    // (the `ipfix` crate in the tests) can skip it whole by its set bounds.
    if let Some(d) = &t.domain_name {
        let start = out.len();
        out.extend_from_slice(&SET_OPTIONS_TEMPLATE.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&d.id.to_be_bytes());
        out.extend_from_slice(&2u16.to_be_bytes()); // field count
        out.extend_from_slice(&1u16.to_be_bytes()); // scope field count
        for (id, len) in [d.scope, d.name] {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&len.to_be_bytes());
        }
        patch_len(out, start);
    }
}

pub(crate) fn patch_len(out: &mut [u8], start: usize) {
    let len = u16::try_from(out.len() - start).unwrap_or(u16::MAX);
    if let Some(b) = out.get_mut(start + 2..start + 4) {
        b.copy_from_slice(&len.to_be_bytes());
    }
}
