//! The spec format of `protocol-specs/`, and its parser.
//!
//! ```text
//! # comment
//! message ProduceRequest kind=request api=0 versions=0-13 flexible=9+
//!   transactional_id string 3+ nullable=3+ default=null
//!   topic_data []TopicProduceData
//!     name string 0-12
//!     topic_id uuid 13+
//!   struct SharedStruct
//!     field int32
//! ```
//! A field line is `name type [versions] [nullable=R] [tag=N tagged=R] [default=V]
//! [ignorable] [flexible=none]`; versions default to `0+`. Children indented under a
//! struct-typed field define that struct; a `struct` line declares one used elsewhere.

use crate::versions::Versions;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Response,
    Header,
    Data,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    Uint16,
    Uint32,
    Float64,
    String,
    Bytes,
    Uuid,
    Records,
    Struct(String),
    Array(Box<Type>),
}

impl Type {
    fn parse(text: &str) -> Result<Type, String> {
        if let Some(inner) = text.strip_prefix("[]") {
            let inner = Type::parse(inner)?;
            if matches!(inner, Type::Array(_)) {
                return Err(format!("nested arrays are not supported: {text}"));
            }
            return Ok(Type::Array(Box::new(inner)));
        }
        Ok(match text {
            "bool" => Type::Bool,
            "int8" => Type::Int8,
            "int16" => Type::Int16,
            "int32" => Type::Int32,
            "int64" => Type::Int64,
            "uint16" => Type::Uint16,
            "uint32" => Type::Uint32,
            "float64" => Type::Float64,
            "string" => Type::String,
            "bytes" => Type::Bytes,
            "uuid" => Type::Uuid,
            "records" => Type::Records,
            s if s.starts_with(|c: char| c.is_ascii_uppercase()) && s.chars().all(|c| c.is_ascii_alphanumeric()) => {
                Type::Struct(s.to_string())
            }
            other => return Err(format!("unknown type {other:?}")),
        })
    }

    pub fn struct_name(&self) -> Option<&str> {
        match self {
            Type::Struct(s) => Some(s),
            Type::Array(inner) => inner.struct_name(),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    pub ty: Type,
    pub versions: Versions,
    pub nullable: Versions,
    pub tag: Option<u32>,
    pub tagged: Versions,
    pub default: Option<String>,
    pub ignorable: bool,
    /// `flexible=none`: always the classic encoding (the request header's client id).
    pub never_compact: bool,
    pub line: usize,
}

impl Field {
    pub fn is_nullable(&self) -> bool {
        self.nullable != Versions::None
    }
}

#[derive(Debug, Clone)]
pub struct Struct {
    pub name: String,
    pub fields: Vec<Field>,
}

#[derive(Debug, Clone)]
pub struct Message {
    pub file: String,
    pub name: String,
    pub kind: Kind,
    pub api_key: Option<i16>,
    pub versions: (i16, i16),
    pub flexible: Versions,
    pub fields: Vec<Field>,
    /// Every struct of the message (inline and declared), by name.
    pub structs: BTreeMap<String, Struct>,
}

struct Line<'a> {
    number: usize,
    depth: usize,
    words: Vec<&'a str>,
}

/// Parses one spec file into its messages.
pub fn parse(file: &str, text: &str) -> Result<Vec<Message>, String> {
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_end();
        let content = trimmed.trim_start();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        let indent = trimmed.len() - content.len();
        if indent % 2 != 0 || raw.contains('\t') {
            return Err(format!("{file}:{}: indent with two spaces per level", i + 1));
        }
        lines.push(Line { number: i + 1, depth: indent / 2, words: content.split_whitespace().collect() });
    }
    let mut messages = Vec::new();
    let mut pos = 0;
    while pos < lines.len() {
        let line = &lines[pos];
        let at = |msg: String| format!("{file}:{}: {msg}", line.number);
        if line.depth != 0 || line.words[0] != "message" {
            return Err(at("expected `message Name kind=... versions=... flexible=...`".into()));
        }
        let mut msg = parse_message_head(file, line).map_err(at)?;
        pos += 1;
        let mut structs = BTreeMap::new();
        msg.fields = parse_fields(file, &lines, &mut pos, 1, &mut structs)?;
        while pos < lines.len() && lines[pos].depth == 1 && lines[pos].words[0] == "struct" {
            let l = &lines[pos];
            let name = l.words.get(1).ok_or_else(|| format!("{file}:{}: struct needs a name", l.number))?;
            pos += 1;
            let fields = parse_fields(file, &lines, &mut pos, 2, &mut structs)?;
            if structs.insert(name.to_string(), Struct { name: name.to_string(), fields }).is_some() {
                return Err(format!("{file}:{}: struct {name} defined twice", l.number));
            }
        }
        if pos < lines.len() && lines[pos].depth != 0 {
            return Err(format!("{file}:{}: unexpected indentation", lines[pos].number));
        }
        msg.structs = structs;
        validate(&msg)?;
        messages.push(msg);
    }
    Ok(messages)
}

fn parse_message_head(file: &str, line: &Line) -> Result<Message, String> {
    let name = line.words.get(1).ok_or("message needs a name")?.to_string();
    let (mut kind, mut api_key, mut versions, mut flexible) = (None, None, None, None);
    for word in &line.words[2..] {
        let (k, v) = word.split_once('=').ok_or_else(|| format!("expected key=value, got {word:?}"))?;
        match k {
            "kind" => {
                kind = Some(match v {
                    "request" => Kind::Request,
                    "response" => Kind::Response,
                    "header" => Kind::Header,
                    "data" => Kind::Data,
                    _ => return Err(format!("unknown kind {v:?}")),
                })
            }
            "api" => api_key = Some(v.parse::<i16>().map_err(|_| format!("bad api key {v:?}"))?),
            "versions" => versions = Some(Versions::parse(v)?),
            "flexible" => flexible = Some(Versions::parse(v)?),
            _ => return Err(format!("unknown message attribute {k:?}")),
        }
    }
    let kind = kind.ok_or("message needs kind=")?;
    let versions = match versions.ok_or("message needs versions=")? {
        Versions::Range { min, max: Some(max) } => (min, max),
        other => return Err(format!("message versions must be a closed range, got {other}")),
    };
    if matches!(kind, Kind::Request | Kind::Response) != api_key.is_some() {
        return Err("requests and responses, and only they, carry api=".into());
    }
    Ok(Message {
        file: file.to_string(),
        name,
        kind,
        api_key,
        versions,
        flexible: flexible.ok_or("message needs flexible=")?,
        fields: Vec::new(),
        structs: BTreeMap::new(),
    })
}

fn parse_fields(
    file: &str,
    lines: &[Line],
    pos: &mut usize,
    depth: usize,
    structs: &mut BTreeMap<String, Struct>,
) -> Result<Vec<Field>, String> {
    let mut fields = Vec::new();
    while *pos < lines.len() && lines[*pos].depth >= depth {
        let line = &lines[*pos];
        if line.depth > depth {
            return Err(format!("{file}:{}: indented under a field that is not a struct", line.number));
        }
        if line.words[0] == "struct" {
            break;
        }
        let field = parse_field(line).map_err(|e| format!("{file}:{}: {e}", line.number))?;
        *pos += 1;
        if *pos < lines.len() && lines[*pos].depth > depth {
            let name = field
                .ty
                .struct_name()
                .ok_or_else(|| format!("{file}:{}: only struct-typed fields have children", line.number))?
                .to_string();
            let children = parse_fields(file, lines, pos, depth + 1, structs)?;
            if structs.insert(name.clone(), Struct { name: name.clone(), fields: children }).is_some() {
                return Err(format!("{file}:{}: struct {name} defined twice", line.number));
            }
        }
        fields.push(field);
    }
    Ok(fields)
}

fn parse_field(line: &Line) -> Result<Field, String> {
    let name = line.words[0];
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return Err(format!("field names are snake_case, got {name:?}"));
    }
    let ty = Type::parse(line.words.get(1).ok_or("field needs a type")?)?;
    let mut field = Field {
        name: name.to_string(),
        ty,
        versions: Versions::ALL,
        nullable: Versions::None,
        tag: None,
        tagged: Versions::None,
        default: None,
        ignorable: false,
        never_compact: false,
        line: line.number,
    };
    for (i, word) in line.words[2..].iter().enumerate() {
        match word.split_once('=') {
            None if *word == "ignorable" => field.ignorable = true,
            None if i == 0 => field.versions = Versions::parse(word)?,
            None => return Err(format!("unexpected {word:?}")),
            Some(("nullable", v)) => field.nullable = Versions::parse(v)?,
            Some(("tag", v)) => field.tag = Some(v.parse().map_err(|_| format!("bad tag {v:?}"))?),
            Some(("tagged", v)) => field.tagged = Versions::parse(v)?,
            Some(("default", v)) => field.default = Some(v.to_string()),
            Some(("flexible", "none")) => field.never_compact = true,
            Some((k, _)) => return Err(format!("unknown field attribute {k:?}")),
        }
    }
    if field.tag.is_some() != (field.tagged != Versions::None) {
        return Err("tag= and tagged= go together".into());
    }
    Ok(field)
}

fn validate(msg: &Message) -> Result<(), String> {
    let mut referenced = BTreeSet::new();
    check_fields(msg, &msg.fields, &mut referenced)?;
    for s in msg.structs.values() {
        check_fields(msg, &s.fields, &mut referenced)?;
    }
    for name in msg.structs.keys() {
        if !referenced.contains(name) {
            return Err(format!("{}: struct {name} of {} is never used", msg.file, msg.name));
        }
    }
    for f in msg.fields.iter().chain(msg.structs.values().flat_map(|s| &s.fields)) {
        // A tagged field is encoded into a scratch buffer and then copied into the message,
        // so a records field inside one would be left out of a response
        // (`frame::encode_response_leaving_out`) at a position in the scratch buffer, not in
        // the response. No Kafka spec tags records; refuse one rather than misplace them.
        if f.tag.is_some() && reaches_records(msg, &f.ty, &mut BTreeSet::new()) {
            return Err(format!(
                "{}:{}: {}.{}: records cannot be tagged or inside a tagged field",
                msg.file, f.line, msg.name, f.name
            ));
        }
    }
    Ok(())
}

/// Whether a value of `ty` holds a records field, directly or in a struct it contains.
fn reaches_records<'m>(msg: &'m Message, ty: &'m Type, seen: &mut BTreeSet<&'m str>) -> bool {
    match ty {
        Type::Records => true,
        Type::Array(inner) => reaches_records(msg, inner, seen),
        Type::Struct(name) => {
            seen.insert(name)
                && msg.structs.get(name).is_some_and(|s| s.fields.iter().any(|f| reaches_records(msg, &f.ty, seen)))
        }
        _ => false,
    }
}

fn check_fields(msg: &Message, fields: &[Field], referenced: &mut BTreeSet<String>) -> Result<(), String> {
    let at = |f: &Field, e: &str| format!("{}:{}: {}.{}: {e}", msg.file, f.line, msg.name, f.name);
    let mut names = BTreeSet::new();
    let mut tags = BTreeSet::new();
    for f in fields {
        if !names.insert(&f.name) {
            return Err(at(f, "duplicate field name"));
        }
        if let Some(tag) = f.tag {
            if !tags.insert(tag) {
                return Err(at(f, "duplicate tag"));
            }
            if let Some((lo, hi)) = f.tagged.clamp(msg.versions) {
                if !(lo..=hi).all(|v| msg.flexible.contains(v)) {
                    return Err(at(f, "tagged in a version that is not flexible"));
                }
            }
        }
        if let Some(s) = f.ty.struct_name() {
            if !msg.structs.contains_key(s) {
                return Err(at(f, &format!("struct {s} is not defined")));
            }
            referenced.insert(s.to_string());
        }
        if f.is_nullable()
            && !matches!(f.ty, Type::String | Type::Bytes | Type::Records | Type::Array(_) | Type::Struct(_))
        {
            return Err(at(f, "only strings, bytes, records, arrays and structs can be nullable"));
        }
        if let Some(d) = &f.default {
            check_default(&f.ty, d, f.is_nullable()).map_err(|e| at(f, &e))?;
        }
    }
    Ok(())
}

fn check_default(ty: &Type, d: &str, nullable: bool) -> Result<(), String> {
    if d == "null" {
        return if nullable { Ok(()) } else { Err("default=null on a field that is never nullable".into()) };
    }
    let ok = match ty {
        Type::Bool => d == "true" || d == "false",
        Type::Int8 | Type::Int16 | Type::Int32 | Type::Int64 | Type::Uint16 | Type::Uint32 => {
            let digits = d.strip_prefix('-').unwrap_or(d);
            match digits.strip_prefix("0x") {
                Some(hex) => i128::from_str_radix(hex, 16).is_ok(),
                None => digits.parse::<i128>().is_ok(),
            }
        }
        Type::Float64 => d.parse::<f64>().is_ok(),
        Type::String => true,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("default {d:?} does not suit the field's type"))
    }
}

/// Checks across files: one request and one response per API key, same versions.
pub fn validate_set(messages: &[Message]) -> Result<(), String> {
    let mut names = BTreeSet::new();
    let mut by_key: BTreeMap<i16, Vec<&Message>> = BTreeMap::new();
    for m in messages {
        if !names.insert(&m.name) {
            return Err(format!("{}: message {} is defined twice", m.file, m.name));
        }
        if let Some(k) = m.api_key {
            by_key.entry(k).or_default().push(m);
        }
    }
    for (key, ms) in by_key {
        let req = ms.iter().filter(|m| m.kind == Kind::Request).count();
        let resp = ms.iter().filter(|m| m.kind == Kind::Response).count();
        if req != 1 || resp != 1 {
            return Err(format!("api key {key}: expected one request and one response"));
        }
        if ms[0].versions != ms[1].versions || ms[0].flexible != ms[1].flexible {
            return Err(format!("api key {key}: request and response disagree on versions or flexible"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
# sample
message FooRequest kind=request api=7 versions=0-3 flexible=2+
  name string 1+ nullable=2+ default=null
  items []Item
    id int32
    tagged_thing int64 2+ tag=0 tagged=2+ default=-1
  shared Shared 3+
  struct Shared
    x bool
";

    #[test]
    fn parses_nested_and_declared_structs() {
        let ms = parse("t.spec", SAMPLE).unwrap();
        assert_eq!(ms.len(), 1);
        let m = &ms[0];
        assert_eq!(m.api_key, Some(7));
        assert_eq!(m.versions, (0, 3));
        assert_eq!(m.fields.len(), 3);
        assert_eq!(m.structs["Item"].fields[1].tag, Some(0));
        assert!(m.structs.contains_key("Shared"));
        assert_eq!(m.fields[0].default.as_deref(), Some("null"));
    }

    #[test]
    fn rejects_tag_in_non_flexible_version() {
        let bad = SAMPLE.replace("tagged=2+", "tagged=1+");
        let err = parse("t.spec", &bad).unwrap_err();
        assert!(err.contains("not flexible"), "{err}");
    }

    #[test]
    fn rejects_undefined_struct_and_odd_indent() {
        let err = parse("t.spec", &SAMPLE.replace("shared Shared 3+", "shared Missing 3+")).unwrap_err();
        assert!(err.contains("Missing"), "{err}");
        let err = parse("t.spec", &SAMPLE.replace("  name string", "   name string")).unwrap_err();
        assert!(err.contains("two spaces"), "{err}");
    }

    #[test]
    fn rejects_records_inside_a_tagged_field() {
        let tagged_records =
            SAMPLE.replace("tagged_thing int64 2+ tag=0 tagged=2+ default=-1", "blob records 2+ tag=0 tagged=2+");
        let err = parse("t.spec", &tagged_records).unwrap_err();
        assert!(err.contains("FooRequest.blob: records cannot be tagged"), "{err}");
        let records_in_tagged_struct = SAMPLE
            .replace("shared Shared 3+", "shared Shared 3+ tag=1 tagged=3+")
            .replace("    x bool", "    x bool\n    blob records");
        let err = parse("t.spec", &records_in_tagged_struct).unwrap_err();
        assert!(err.contains("FooRequest.shared: records cannot be tagged"), "{err}");
    }

    #[test]
    fn error_names_file_and_line() {
        let err = parse("x/y.spec", &SAMPLE.replace("int32", "int33")).unwrap_err();
        assert!(err.starts_with("x/y.spec:5:"), "{err}");
    }
}
