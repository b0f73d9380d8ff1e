//! docs/host-crosshost.md lists every host-stack element the encoder
//! sends, with the ID the code uses.

use xdprobe_exporter::ie::host;

#[test]
fn the_guide_names_every_host_element_with_its_id() {
    let doc = include_str!("../../docs/host-crosshost.md");
    let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| 1")).collect();
    let elements = host::elements();
    assert_eq!(elements.len(), 8 * 5 + 6);
    for (id, name, data_type, _) in &elements {
        let row = rows
            .iter()
            .find(|r| r.contains(&format!("`{name}`")))
            .unwrap_or_else(|| panic!("{name} ({id}) is not in the guide's table"));
        // The row's IDs and names are in the same order.
        let cols: Vec<&str> = row.split('|').collect();
        let ids: Vec<&str> = cols[1].split(',').map(str::trim).collect();
        let names: Vec<&str> = cols[2]
            .split(',')
            .map(|n| n.trim().trim_matches('`'))
            .collect();
        let at = names.iter().position(|n| n == name).unwrap();
        assert_eq!(
            ids.get(at),
            Some(&id.to_string().as_str()),
            "{name}: the code says {id}"
        );
        assert!(row.contains(data_type), "{name}: type {data_type}");
    }
}
