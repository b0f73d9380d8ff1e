//! The shipped collector definitions (deploy/collectors/) describe exactly
//! the enterprise elements the exporter sends: same IDs, names, lengths.

use std::path::Path;

use xdprobe_exporter::ie::{NPM_ELEMENTS, PEN_DOCUMENTATION};
use xdprobe_exporter::ie_l7::{L7_ELEMENTS, L7Value};

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)).unwrap()
}

#[test]
fn pmacct_primitives_match_the_element_table() {
    let text = read("deploy/collectors/pmacct/aggregate_primitives");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("name=")).collect();
    assert_eq!(lines.len(), NPM_ELEMENTS.len());
    let kv = |l: &str, k: &str| {
        l.split_whitespace()
            .find_map(|t| t.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("{k} missing in {l}"))
            .to_string()
    };
    for (l, e) in lines.iter().zip(NPM_ELEMENTS) {
        assert_eq!(kv(l, "name"), e.primitive);
        assert_eq!(kv(l, "field_type"), format!("{PEN_DOCUMENTATION}:{}", e.id));
        assert_eq!(kv(l, "len"), e.len.to_string());
        assert_eq!(kv(l, "semantics"), "u_int");
    }
    let text = read("deploy/collectors/pmacct/aggregate_primitives_l7");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("name=")).collect();
    // Every L7 element but applicationName (IANA 96), which nfacctd does
    // not fill through a custom primitive (the file says so).
    let l7: Vec<_> = L7_ELEMENTS
        .iter()
        .filter(|e| e.value != L7Value::App)
        .collect();
    assert_eq!(lines.len(), l7.len());
    for (l, e) in lines.iter().zip(l7) {
        assert_eq!(kv(l, "name"), e.primitive);
        let ft = if e.enterprise {
            format!("{PEN_DOCUMENTATION}:{}", e.id)
        } else {
            e.id.to_string()
        };
        assert_eq!(kv(l, "field_type"), ft, "{l}");
        let (len, sem) = match (e.data_type, e.value) {
            ("string", L7Value::Ja4) => ("36", "str"),
            ("string", _) => ("vlen", "str"),
            ("octetArray", _) => ("16", "raw"),
            ("ipv4Address", _) => ("4", "ip"),
            ("ipv6Address", _) => ("16", "ip"),
            ("unsigned8", _) => ("1", "u_int"),
            ("unsigned16", _) => ("2", "u_int"),
            _ => ("4", "u_int"),
        };
        assert_eq!(
            (kv(l, "len"), kv(l, "semantics")),
            (len.to_string(), sem.to_string()),
            "{l}"
        );
    }
}

#[test]
fn ipfixcol2_elements_match_the_element_table() {
    let text = read("deploy/collectors/ipfixcol2/xdprobe.xml");
    assert!(text.contains(&format!("<pen>{PEN_DOCUMENTATION}</pen>")));
    let blocks: Vec<&str> = text.split("<element>").skip(1).collect();
    assert_eq!(blocks.len(), NPM_ELEMENTS.len());
    let tag = |b: &str, t: &str| -> String {
        let open = format!("<{t}>");
        let s = b.find(&open).unwrap() + open.len();
        let e = b[s..].find('<').unwrap();
        b[s..s + e].to_string()
    };
    for (b, e) in blocks.iter().zip(NPM_ELEMENTS) {
        assert_eq!(tag(b, "id"), e.id.to_string());
        assert_eq!(tag(b, "name"), e.name);
        assert_eq!(tag(b, "dataType"), e.data_type);
        let len = if e.data_type == "unsigned8" { 1 } else { 4 };
        assert_eq!(e.len, len);
    }
}
