//! The Java `.properties` format, as `java.util.Properties.load` reads it, so a Kafka
//! `server.properties` works unchanged: `#`/`!` comments, `key=value`, `key: value` and
//! `key value`, a trailing odd backslash joining the next line, and `\t \n \r \f \uXXXX`
//! escapes (any other escaped character stands for itself).

use std::fmt;

/// One `key=value` of a properties file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    /// Key, unescaped.
    pub key: String,
    /// Value, unescaped; leading whitespace removed, trailing kept (as Java does; config
    /// values are trimmed when checked).
    pub value: String,
    /// 1-based line where the entry starts.
    pub line: usize,
}

/// A line that is not valid properties syntax (only a bad `\u` escape can be).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropertiesError {
    /// 1-based line where the entry starts.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for PropertiesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Parses properties text into entries in file order (a later duplicate key wins when
/// applied, as with `Properties.load`).
pub fn parse_properties(text: &str) -> Result<Vec<Property>, PropertiesError> {
    let lines = natural_lines(text);
    let mut properties = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let line = index + 1;
        let first = trim_leading(lines[index]);
        index += 1;
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        let mut logical = first.to_string();
        while ends_with_odd_backslashes(&logical) {
            logical.pop();
            match lines.get(index) {
                Some(next) => {
                    logical.push_str(trim_leading(next));
                    index += 1;
                }
                None => break,
            }
        }
        let (key, value) = split_key_value(&logical);
        let unescape = |s: &str| unescape(s).map_err(|message| PropertiesError { line, message });
        properties.push(Property { key: unescape(key)?, value: unescape(value)?, line });
    }
    Ok(properties)
}

/// Splits on `\n`, `\r\n` and lone `\r`, as Java's line reader does.
fn natural_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        match rest.find(['\n', '\r']) {
            Some(end) => {
                lines.push(&rest[..end]);
                let skip = if rest[end..].starts_with("\r\n") { 2 } else { 1 };
                rest = &rest[end + skip..];
            }
            None => {
                lines.push(rest);
                rest = "";
            }
        }
    }
    lines
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\x0c')
}

fn trim_leading(line: &str) -> &str {
    line.trim_start_matches(is_blank)
}

fn ends_with_odd_backslashes(line: &str) -> bool {
    line.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1
}

/// The key ends at the first unescaped `=`, `:` or blank; blanks and at most one `=`/`:`
/// separate it from the value.
fn split_key_value(logical: &str) -> (&str, &str) {
    let mut escaped = false;
    let mut key_end = logical.len();
    let mut has_separator = false;
    for (i, c) in logical.char_indices() {
        if !escaped && (c == '=' || c == ':' || is_blank(c)) {
            key_end = i;
            has_separator = c != ' ' && c != '\t' && c != '\x0c';
            break;
        }
        escaped = c == '\\' && !escaped;
    }
    let mut rest = logical.get(key_end + 1..).unwrap_or("");
    loop {
        rest = trim_leading(rest);
        match rest.chars().next() {
            Some(c @ ('=' | ':')) if !has_separator => {
                has_separator = true;
                rest = &rest[c.len_utf8()..];
            }
            _ => break,
        }
    }
    (&logical[..key_end], rest)
}

/// Resolves backslash escapes; `\uXXXX` pairs of UTF-16 surrogates become one char.
fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    let mut high_surrogate: Option<u16> = None;
    while let Some(c) = chars.next() {
        let decoded = if c == '\\' {
            match chars.next() {
                Some('u') => {
                    let hex: String = chars.by_ref().take(4).collect();
                    let unit = match u16::from_str_radix(&hex, 16) {
                        Ok(unit) if hex.len() == 4 && hex.chars().all(|h| h.is_ascii_hexdigit()) => unit,
                        _ => return Err(format!("malformed \\uxxxx escape `\\u{hex}`")),
                    };
                    if let Some(high) = high_surrogate.take() {
                        let pair = char::decode_utf16([high, unit]).next().and_then(Result::ok);
                        out.push(pair.ok_or_else(|| format!("unpaired UTF-16 surrogate \\u{high:04X}"))?);
                        continue;
                    }
                    if (0xD800..0xDC00).contains(&unit) {
                        high_surrogate = Some(unit);
                        continue;
                    }
                    char::from_u32(unit.into()).ok_or_else(|| format!("unpaired UTF-16 surrogate \\u{unit:04X}"))?
                }
                Some('t') => '\t',
                Some('n') => '\n',
                Some('r') => '\r',
                Some('f') => '\x0c',
                Some(other) => other,
                // A lone trailing backslash (continuation at end of input) is dropped.
                None => break,
            }
        } else {
            c
        };
        if let Some(high) = high_surrogate.take() {
            return Err(format!("unpaired UTF-16 surrogate \\u{high:04X}"));
        }
        out.push(decoded);
    }
    if let Some(high) = high_surrogate {
        return Err(format!("unpaired UTF-16 surrogate \\u{high:04X}"));
    }
    Ok(out)
}
