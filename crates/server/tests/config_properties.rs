//! The Java properties syntax, case by case, as `java.util.Properties.load` reads it.

use osprey_server::config::{parse_properties, Property};

fn pairs(text: &str) -> Vec<(String, String)> {
    parse_properties(text).unwrap().into_iter().map(|p| (p.key, p.value)).collect()
}

fn pair(key: &str, value: &str) -> (String, String) {
    (key.to_string(), value.to_string())
}

#[test]
fn equals_colon_and_whitespace_all_separate_key_from_value() {
    assert_eq!(
        pairs("a=1\nb: 2\nc 3\nd\t=\t4\ne :5\nf = = 6\n"),
        vec![pair("a", "1"), pair("b", "2"), pair("c", "3"), pair("d", "4"), pair("e", "5"), pair("f", "= 6")]
    );
}

#[test]
fn hash_and_bang_lines_are_comments_but_not_mid_line() {
    assert_eq!(pairs("# c\n  ! c\na=1 # not a comment\n"), vec![pair("a", "1 # not a comment")]);
}

#[test]
fn blank_lines_and_leading_whitespace_are_ignored() {
    assert_eq!(pairs("\n   \n\t  key=value\n\x0c\n"), vec![pair("key", "value")]);
}

#[test]
fn key_without_value_has_empty_value() {
    assert_eq!(pairs("lonely\nalso=\n"), vec![pair("lonely", ""), pair("also", "")]);
}

#[test]
fn trailing_backslash_joins_the_next_line_without_its_leading_whitespace() {
    let text = "listeners=PLAINTEXT://127.0.0.1:9092,\\\n    CONTROLLER://127.0.0.1:9093\nnext=1\n";
    assert_eq!(
        pairs(text),
        vec![pair("listeners", "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"), pair("next", "1")]
    );
}

#[test]
fn an_even_number_of_trailing_backslashes_is_an_escaped_backslash_not_a_continuation() {
    assert_eq!(pairs("path=C:\\\\dir\\\\\nnext=1\n"), vec![pair("path", "C:\\dir\\"), pair("next", "1")]);
}

#[test]
fn continuation_at_end_of_input_is_dropped() {
    assert_eq!(pairs("a=1\\"), vec![pair("a", "1")]);
}

#[test]
fn a_continued_line_starting_with_hash_is_part_of_the_value() {
    assert_eq!(pairs("a=1\\\n#2\n"), vec![pair("a", "1#2")]);
}

#[test]
fn a_comment_ending_in_backslash_does_not_swallow_the_next_line() {
    assert_eq!(pairs("# comment \\\na=1\n"), vec![pair("a", "1")]);
}

#[test]
fn escapes_in_keys_and_values() {
    assert_eq!(pairs("my\\ key\\=x=tab\\there\\nnl \\u00e9\\q\n"), vec![pair("my key=x", "tab\there\nnl \u{e9}q")]);
}

#[test]
fn surrogate_pairs_combine() {
    assert_eq!(pairs("emoji=\\uD83D\\uDE00\n"), vec![pair("emoji", "\u{1F600}")]);
}

#[test]
fn malformed_unicode_escape_is_an_error_with_its_line() {
    let err = parse_properties("a=1\nb=\\u12G4\n").unwrap_err();
    assert_eq!(err.line, 2);
    assert!(err.message.contains("\\u"), "{}", err.message);
    assert!(parse_properties("a=\\uD83D\n").is_err(), "an unpaired surrogate is an error");
}

#[test]
fn crlf_and_lone_cr_line_endings() {
    assert_eq!(pairs("a=1\r\nb=2\rc=3"), vec![pair("a", "1"), pair("b", "2"), pair("c", "3")]);
}

#[test]
fn trailing_whitespace_of_a_value_is_kept_by_the_parser() {
    assert_eq!(pairs("a=1  \n"), vec![pair("a", "1  ")]);
}

#[test]
fn line_numbers_point_at_where_an_entry_starts() {
    let parsed = parse_properties("# header\n\na=1\\\n  2\nb=3\n").unwrap();
    assert_eq!(
        parsed,
        vec![
            Property { key: "a".into(), value: "12".into(), line: 3 },
            Property { key: "b".into(), value: "3".into(), line: 5 }
        ]
    );
}
