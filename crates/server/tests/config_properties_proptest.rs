//! Properties parsing never panics, and any key/value survives escaping and parsing.

use osprey_server::config::parse_properties;
use proptest::prelude::*;

/// Escapes as `Properties.store` would: backslash before every character that would
/// otherwise end the key, start a comment, be trimmed or break the line.
fn escape(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\x0c' => out.push_str("\\f"),
            '\\' | '=' | ':' | ' ' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC*|[\\\\=: \t\r\n#!u0-9a-fA-F]*") {
        let _ = parse_properties(&text);
    }

    // Keys are non-empty: an empty key with an empty value and a blank separator is a
    // blank line, which Java skips too.
    #[test]
    fn escaped_entries_round_trip(
        entries in prop::collection::vec(("\\PC{1,12}|[ =:\\\\#!\t\r\n\x0ca-z]{1,12}", "\\PC{0,16}|[ =:\\\\#!\t\r\n\x0ca-z]{0,16}"), 0..8),
        separator in prop::sample::select(vec!["=", ":", " ", " = ", "\t:\t"]),
    ) {
        let mut text = String::new();
        for (key, value) in &entries {
            text.push_str(&format!("{}{}{}\n", escape(key), separator, escape(value)));
        }
        let parsed = parse_properties(&text).unwrap();
        let parsed: Vec<(String, String)> = parsed.into_iter().map(|p| (p.key, p.value)).collect();
        prop_assert_eq!(parsed, entries);
    }
}
