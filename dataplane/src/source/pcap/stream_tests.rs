//! The stream reader against the mapped one: on whole, cut and randomly
//! damaged files, read in chunks of every size, both hand out the same
//! packets and end in the same error at the same offset.

use std::io::Read;

use super::damage_tests::pcapng_sample;
use super::testutil::{self as tu, Order};
use super::*;

/// Gives at most `step` bytes per read (cycling through sizes from 1 up),
/// as a pipe does.
struct Chunked<'a> {
    data: &'a [u8],
    step: usize,
    turn: usize,
}

impl Read for Chunked<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        self.turn += 1;
        let n = (1 + self.turn % self.step)
            .min(out.len())
            .min(self.data.len());
        out[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

type Outcome = (Vec<(u64, Vec<u8>, u32, u32)>, Option<String>, u64);

fn mapped(buf: &[u8]) -> Result<Outcome, String> {
    let mut r = PcapReader::from_bytes(buf).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    loop {
        let mut batch = [Frame::default(); 16];
        match r.next_batch(&mut batch) {
            Ok(0) => return Ok((out, None, r.offset())),
            Ok(n) => out.extend(
                batch[..n]
                    .iter()
                    .map(|p| (p.ts.0, p.data.to_vec(), p.wire_len, p.interface)),
            ),
            Err(e) => return Ok((out, Some(e.to_string()), r.offset())),
        }
    }
}

fn streamed(buf: &[u8], step: usize) -> Result<Outcome, String> {
    let input = Chunked {
        data: buf,
        step,
        turn: 0,
    };
    let mut r = StreamReader::new(input).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for _ in 0..=buf.len() + 1 {
        let mut batch = [Frame::default(); 16];
        match r.next_batch(&mut batch) {
            Ok(0) => return Ok((out, None, r.offset())),
            Ok(n) => out.extend(
                batch[..n]
                    .iter()
                    .map(|p| (p.ts.0, p.data.to_vec(), p.wire_len, p.interface)),
            ),
            Err(e) => return Ok((out, Some(e.to_string()), r.offset())),
        }
    }
    panic!("stream reader neither ended nor failed");
}

fn samples() -> Vec<Vec<u8>> {
    let classic = |o| {
        [
            tu::pcap_header(o, false, 65535, 1),
            tu::pcap_record(o, 1, 2, &tu::frame(1, 21), 21),
            tu::pcap_record(o, 3, 4, &[], 60),
            tu::pcap_record(o, 5, 6, &tu::frame(2, 300), 300),
        ]
        .concat()
    };
    vec![classic(Order::Le), classic(Order::Be), pcapng_sample().1]
}

#[test]
fn same_packets_and_errors_as_the_mapped_reader() {
    for full in samples() {
        for n in 0..=full.len() {
            let cut = &full[..n];
            let want = mapped(cut);
            for step in [1, 3, 7, 64, 4096] {
                assert_eq!(streamed(cut, step), want, "prefix {n}, reads of <= {step}");
            }
        }
    }
}

#[test]
fn same_outcome_on_random_damage() {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for good in samples() {
        for _ in 0..600 {
            let mut b = good.clone();
            for _ in 0..(next() % 4 + 1) {
                let i = (next() % b.len() as u64) as usize;
                b[i] = next() as u8;
            }
            let step = (next() % 200 + 1) as usize;
            assert_eq!(
                streamed(&b, step),
                mapped(&b),
                "reads of <= {step}: {b:02x?}"
            );
        }
    }
}

#[test]
fn a_block_too_large_to_buffer_is_an_error_not_an_allocation() {
    // A custom block claiming 1 GiB, and more than 16 MiB after it: the
    // stream will not buffer it. (Cut short, it is truncated, as when mapped.)
    let mut b = tu::shb(Order::Le);
    let at = b.len();
    b.extend_from_slice(&0x0000_0bad_u32.to_le_bytes());
    b.extend_from_slice(&(1u32 << 30).to_le_bytes());
    b.resize(at + STREAM_MAX_BLOCK + 64, 0);
    let e = streamed(&b, 1 << 20).unwrap().1.unwrap();
    assert_eq!(
        e,
        format!(
            "pcapng block at byte {at} (type 0xbad): 1073741824 bytes is more than the 16777216 bytes a stream is buffered to"
        )
    );
    b.truncate(at + 4096);
    assert_eq!(streamed(&b, 4096), mapped(&b));
}
