//! docs/exporter.md lists every L7 element the encoder sends, with the ID,
//! place (IANA or the PEN), type and JSON name the code uses.

use xdprobe_exporter::ie_l7::L7_ELEMENTS;

#[test]
fn the_exporter_doc_names_every_l7_element() {
    let doc = include_str!("../../docs/exporter.md");
    for e in L7_ELEMENTS {
        let row = doc
            .lines()
            .find(|l| l.contains(&format!("| `{}` |", e.name)))
            .unwrap_or_else(|| panic!("{} is not in docs/exporter.md", e.name));
        let cols: Vec<&str> = row.split('|').map(str::trim).collect();
        let place = if e.enterprise { "PEN" } else { "IANA" };
        assert_eq!(cols[1], e.id.to_string(), "{row}");
        assert_eq!(cols[2], place, "{row}");
        assert_eq!(cols[4], e.data_type, "{row}");
        assert_eq!(cols[5], format!("`{}`", e.primitive), "{row}");
    }
}
