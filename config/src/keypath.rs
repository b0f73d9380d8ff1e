//! Maps a byte offset back to the dotted key path that holds it.
//!
//! serde's errors from `toml` carry a span but not (publicly) the key, and
//! the house rule is that every error names its key. Walking the parsed
//! document once, on the error path only, recovers it.

use std::ops::Range;

use toml_edit::{ImDocument, Item, Table, Value};

/// The deepest key path (`interface[0].queues[1].core`) whose key or value
/// covers byte `pos`, or `None` if `pos` is outside every key (comments,
/// blank lines).
pub(crate) fn key_path_at(text: &str, pos: usize) -> Option<String> {
    let doc = ImDocument::parse(text).ok()?;
    in_table(doc.as_table(), "", pos)
}

fn covers(span: Option<Range<usize>>, pos: usize) -> bool {
    span.is_some_and(|s| s.contains(&pos) || (s.is_empty() && s.start == pos))
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

fn in_table(table: &Table, prefix: &str, pos: usize) -> Option<String> {
    for (key, item) in table.iter() {
        let path = join(prefix, key);
        if let Some(found) = in_item(item, &path, pos) {
            return Some(found);
        }
        if covers(table.key(key).and_then(|k| k.span()), pos) {
            return Some(path);
        }
    }
    None
}

fn in_item(item: &Item, path: &str, pos: usize) -> Option<String> {
    match item {
        Item::None => None,
        Item::Value(v) => in_value(v, path, pos),
        // A `[table]`'s children live after its header, outside its own span,
        // so look inside first whatever the header span says.
        Item::Table(t) => {
            in_table(t, path, pos).or_else(|| covers(t.span(), pos).then(|| path.to_owned()))
        }
        Item::ArrayOfTables(a) => a.iter().enumerate().find_map(|(i, t)| {
            let p = format!("{path}[{i}]");
            in_table(t, &p, pos).or_else(|| covers(t.span(), pos).then_some(p))
        }),
    }
}

fn in_value(value: &Value, path: &str, pos: usize) -> Option<String> {
    if !covers(value.span(), pos) {
        return None;
    }
    let deeper = match value {
        Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, v)| in_value(v, &format!("{path}[{i}]"), pos)),
        Value::InlineTable(t) => t.iter().find_map(|(k, v)| {
            let p = join(path, k);
            in_value(v, &p, pos)
                .or_else(|| covers(t.key(k).and_then(|k| k.span()), pos).then_some(p))
        }),
        _ => None,
    };
    Some(deeper.unwrap_or_else(|| path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str, needle: &str) -> Option<String> {
        key_path_at(text, text.find(needle).expect("needle in text"))
    }

    #[test]
    fn finds_nested_paths() {
        let text = "[flow]\ncapacity = 5\n\n[[interface]]\nname = \"a\"\n\n[[interface]]\nname = \"b\"\nqueues = [{ queue = 0, core = 1 }, { queue = 1, kore = 2 }]\n";
        assert_eq!(at(text, "5").as_deref(), Some("flow.capacity"));
        assert_eq!(at(text, "\"b\"").as_deref(), Some("interface[1].name"));
        assert_eq!(
            at(text, "kore").as_deref(),
            Some("interface[1].queues[1].kore")
        );
        assert_eq!(
            at(text, "core = 1").as_deref(),
            Some("interface[1].queues[0].core")
        );
        assert_eq!(at(text, "\n\n[[").as_deref(), None);
    }
}
