//! `ssl.principal.mapping.rules`: from a client certificate's distinguished name to the
//! name of its principal (`User:<name>`), as Kafka's `SslPrincipalMapper` does it.
//!
//! The rules are a comma-separated list of `DEFAULT` (the distinguished name unchanged)
//! and `RULE:pattern/replacement/` with an optional `L` or `U` after the last `/` to
//! lower- or upper-case the result. The first rule whose pattern matches the whole name
//! gives the principal; a name no rule matches fails the connection. The splitting and
//! parsing regexes are Kafka's, so a rule Kafka accepts parses the same way here.

use regex::Regex;
use std::fmt;
use std::sync::OnceLock;

/// Kafka's `RULE_PATTERN`: `DEFAULT`, a `RULE:` with `\`-escapes allowed in its pattern
/// and replacement, or anything else (caught as invalid by the length check).
const RULE_PATTERN: &str = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)";

/// The parsed rules; compares equal when the text it was parsed from is equal.
#[derive(Debug, Clone)]
pub struct PrincipalMapping {
    source: String,
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace {
        /// The pattern, anchored at both ends: the rule applies only if it matches the
        /// whole name (Java's `Matcher.matches`).
        whole: Regex,
        /// The pattern as written, for the replacement (Java's `replaceAll`).
        pattern: Regex,
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

impl PartialEq for PrincipalMapping {
    fn eq(&self, other: &PrincipalMapping) -> bool {
        self.source == other.source
    }
}

/// No rule matched the distinguished name (the connection is refused, as in Kafka).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoMatchingRule {
    pub distinguished_name: String,
}

impl fmt::Display for NoMatchingRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no ssl.principal.mapping.rules rule applies to `{}`", self.distinguished_name)
    }
}

impl PrincipalMapping {
    /// Parses the rules; the error says which rule is invalid and why.
    pub fn parse(rules: &str) -> Result<PrincipalMapping, String> {
        let parsed = split_rules(rules).iter().map(|r| parse_rule(r)).collect::<Result<Vec<_>, _>>()?;
        Ok(PrincipalMapping { source: rules.to_string(), rules: parsed.into_iter().flatten().collect() })
    }

    /// The principal's name for a certificate subject (RFC 2253 form).
    pub fn name(&self, distinguished_name: &str) -> Result<String, NoMatchingRule> {
        self.rules
            .iter()
            .find_map(|rule| rule.apply(distinguished_name))
            .ok_or_else(|| NoMatchingRule { distinguished_name: distinguished_name.to_string() })
    }
}

impl Default for PrincipalMapping {
    fn default() -> PrincipalMapping {
        PrincipalMapping { source: "DEFAULT".into(), rules: vec![Rule::Default] }
    }
}

impl Rule {
    fn apply(&self, name: &str) -> Option<String> {
        match self {
            Rule::Default => Some(name.to_string()),
            Rule::Replace { whole, pattern, replacement, case } => {
                if !whole.is_match(name) {
                    return None;
                }
                let replaced = pattern.replace_all(name, replacement.as_str()).into_owned();
                Some(match case {
                    Case::Keep => replaced,
                    Case::Lower => replaced.to_lowercase(),
                    Case::Upper => replaced.to_uppercase(),
                })
            }
        }
    }
}

fn rule_parser() -> &'static Regex {
    static PARSER: OnceLock<Regex> = OnceLock::new();
    PARSER.get_or_init(|| Regex::new(&format!("^(?:{RULE_PATTERN})")).expect("Kafka's rule pattern is valid"))
}

/// Kafka's `RULE_SPLITTER`: each rule, with the commas between rules (and the spaces
/// around them) dropped. A comma inside a rule's pattern stays in the rule.
fn split_rules(rules: &str) -> Vec<String> {
    static SPLITTER: OnceLock<Regex> = OnceLock::new();
    let splitter = SPLITTER
        .get_or_init(|| Regex::new(&format!(r"\s*({RULE_PATTERN})\s*(?:,\s*|$)")).expect("Kafka's splitter is valid"));
    let trimmed = rules.trim();
    let mut out = Vec::new();
    let mut at = 0;
    // Java's `find` loop: each match starts where the last ended; an empty match at the
    // end stops it.
    while at <= trimmed.len() {
        let Some(c) = splitter.captures_at(trimmed, at) else { break };
        let whole = c.get(0).expect("group 0 is the match");
        out.push(c.get(1).map_or("", |m| m.as_str()).to_string());
        if whole.end() == trimmed.len() {
            break;
        }
        at = if whole.end() > at { whole.end() } else { at + 1 };
    }
    out
}

/// One rule; `None` for an empty one (ignored, as Kafka ignores it).
fn parse_rule(rule: &str) -> Result<Option<Rule>, String> {
    let c = rule_parser().captures(rule).ok_or_else(|| format!("invalid rule `{rule}`"))?;
    let end = c.get(0).map_or(0, |m| m.end());
    if end != rule.len() {
        return Err(format!("invalid rule `{rule}`: unmatched `{}`", &rule[end..]));
    }
    if c.get(1).is_some() {
        return Ok(Some(Rule::Default));
    }
    let Some(pattern) = c.get(2) else {
        return if rule.is_empty() {
            Ok(None)
        } else {
            Err(format!("invalid rule `{rule}` (RULE:pattern/replacement/[LU] or DEFAULT)"))
        };
    };
    let replacement = c.get(3).map_or("", |m| m.as_str());
    let case = match c.get(4).map_or("", |m| m.as_str()) {
        "L" => Case::Lower,
        "U" => Case::Upper,
        _ => Case::Keep,
    };
    let compile = |p: &str| Regex::new(p).map_err(|e| format!("invalid pattern in rule `{rule}`: {e}"));
    Ok(Some(Rule::Replace {
        whole: compile(&format!("^(?:{})$", pattern.as_str()))?,
        pattern: compile(pattern.as_str())?,
        replacement: java_replacement(replacement),
        case,
    }))
}

/// Java's replacement syntax (`$1`, `\$` for a literal dollar) in the regex crate's
/// (`${1}`, `$$`): a group number is braced so that `$1a` means group 1 then `a`, as in
/// Java, not a group named `1a`.
fn java_replacement(replacement: &str) -> String {
    let mut out = String::new();
    let mut chars = replacement.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => {}
            },
            '$' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                if digits.is_empty() {
                    out.push_str("$$");
                } else {
                    out.push_str(&format!("${{{digits}}}"));
                }
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(rules: &str, dn: &str) -> Result<String, NoMatchingRule> {
        PrincipalMapping::parse(rules).unwrap().name(dn)
    }

    #[test]
    fn default_rule_keeps_the_distinguished_name() {
        assert_eq!(map("DEFAULT", "CN=client,O=Org,C=US").unwrap(), "CN=client,O=Org,C=US");
    }

    #[test]
    fn kafka_doc_rules_map_the_common_name() {
        // The examples of Kafka's docs (security.html, "Customizing SSL User Name").
        let rules = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT";
        let mapping = PrincipalMapping::parse(rules).unwrap();
        assert_eq!(
            mapping.name("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown").unwrap(),
            "serviceuser"
        );
        assert_eq!(
            mapping.name("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown").unwrap(),
            "adminuser@admin"
        );
        assert_eq!(mapping.name("CN=Client1,O=Org").unwrap(), "client1");
        assert_eq!(mapping.name("O=NoCommonName").unwrap(), "O=NoCommonName");
    }

    #[test]
    fn upper_case_flag_and_first_matching_rule_win() {
        assert_eq!(map("RULE:^CN=([^,]*),.*$/$1/U,DEFAULT", "CN=alice,O=x").unwrap(), "ALICE");
        assert_eq!(map("RULE:^CN=([^,]*)$/$1/, RULE:^CN=(.*)$/other/", "CN=bob").unwrap(), "bob");
    }

    #[test]
    fn a_name_no_rule_matches_is_refused() {
        let err = map("RULE:^CN=(.*),OU=Kafka$/$1/", "CN=eve,OU=Other").unwrap_err();
        assert_eq!(err.distinguished_name, "CN=eve,OU=Other");
    }

    #[test]
    fn a_rule_must_match_the_whole_name() {
        // Java's Matcher.matches: `CN=(\w+)` matches a prefix only, so the rule does not apply.
        assert!(map(r"RULE:CN=(\w+)/$1/", "CN=carol,O=x").is_err());
        assert_eq!(map(r"RULE:CN=(\w+).*/$1/", "CN=carol,O=x").unwrap(), "carol");
    }

    #[test]
    fn escaped_slash_in_a_pattern_and_literal_text_after_a_group() {
        assert_eq!(map(r"RULE:^CN=a\/b,(.*)$/x$1y/", "CN=a/b,O=z").unwrap(), "xO=zy");
    }

    #[test]
    fn invalid_rules_are_refused_naming_them() {
        let err = PrincipalMapping::parse("RULE:^CN=(.*)$/$1/X").unwrap_err();
        assert!(err.contains("RULE:^CN=(.*)$/$1/X"), "{err}");
        assert!(PrincipalMapping::parse("NOTARULE").is_err());
        assert!(PrincipalMapping::parse("RULE:^CN=(.*$/$1/").is_err());
    }
}
