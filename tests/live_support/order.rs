//! Whether a capture's timestamps go back, and by how much against the
//! probe's time-order window: the capture rig decides from it whether to
//! capture again, the oracle whether tshark reads a sorted copy.

use std::path::Path;

use xdprobe_dataplane::source::{pcap::PcapReader, reorder::WINDOW_NS};

/// (some timestamp goes back by at most the window, some by more); an
/// unreadable file is an error that names it.
pub fn inversions(file: &Path) -> Result<(bool, bool), String> {
    let mut r = PcapReader::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let (mut newest, mut within, mut late) = (0u64, false, false);
    while let Ok(Some(p)) = r.next_packet() {
        let t = p.ts.as_nanos();
        if t < newest {
            if t.saturating_add(WINDOW_NS) < newest {
                late = true;
            } else {
                within = true;
            }
        }
        newest = newest.max(t);
    }
    Ok((within, late))
}
