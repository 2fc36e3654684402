//! Checking one config value against its type and validator, the way Kafka's
//! `ConfigDef` does: values are trimmed, booleans are case-insensitive, lists are
//! comma-separated.

use super::keys::ConfigType;
use super::listener::{parse_host_port, parse_listener_url, parse_protocol_map, parse_voter, split_list};

/// Allowed values of a key beyond its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validator {
    /// Anything of the right type.
    Any,
    /// An integer `>=` the bound.
    AtLeast(i64),
    /// An integer in the inclusive range.
    Between(i64, i64),
    /// `-1` (unlimited) or an integer `>=` the bound.
    UnlimitedOrAtLeast(i64),
    /// A number in `[0, 1]`.
    Fraction,
    /// `-1` or `1..=9` (`compression.gzip.level`).
    GzipLevel,
    /// One of these strings (case-sensitive, as Kafka's `ValidString`).
    OneOf(&'static [&'static str]),
    /// A list whose items are all in this set (Kafka's `ValidList`).
    EachOf(&'static [&'static str]),
    /// Non-empty text.
    NonEmpty,
    /// A list with at least one item and no empty items.
    NonEmptyList,
    /// A list of `NAME://host:port`.
    Listeners,
    /// `NAME:PROTOCOL,...`.
    ProtocolMap,
    /// A list of listener names.
    ListenerNames,
    /// One listener name.
    ListenerName,
    /// `process.roles`: `broker`, `controller` or both, each once (Kafka's `ValidList`
    /// plus its duplicate check).
    ProcessRoles,
    /// `controller.quorum.voters`: `{id}@{host}:{port},...`.
    QuorumVoters,
    /// A list of `host:port` (`controller.quorum.bootstrap.servers`).
    HostPortList,
    /// `host:port`, or empty to disable.
    HostPortOrEmpty,
}

/// A value that passed its type check.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// BOOLEAN.
    Bool(bool),
    /// INT, SHORT or LONG (already checked to fit the type's width).
    Int(i64),
    /// DOUBLE.
    Double(f64),
    /// STRING, trimmed.
    Str(String),
    /// LIST, items trimmed.
    List(Vec<String>),
}

impl Value {
    /// The value as DescribeConfigs reports it (lists joined with `,`).
    pub fn render(&self) -> String {
        match self {
            Value::Bool(b) => b.to_string(),
            Value::Int(n) => n.to_string(),
            Value::Double(d) => format!("{d:?}"),
            Value::Str(s) => s.clone(),
            Value::List(items) => items.join(","),
        }
    }
}

/// Checks `raw` against a type and validator. The error says what was expected, with the
/// specific problem where there is one.
pub(crate) fn check(config_type: ConfigType, validator: Validator, raw: &str) -> Result<Value, String> {
    let expected = || expected(config_type, validator);
    let trimmed = raw.trim();
    let value = match config_type {
        ConfigType::Boolean => match trimmed.to_ascii_lowercase().as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(expected()),
        },
        ConfigType::Int => Value::Int(trimmed.parse::<i32>().map_err(|_| expected())?.into()),
        ConfigType::Short => Value::Int(trimmed.parse::<i16>().map_err(|_| expected())?.into()),
        ConfigType::Long => Value::Int(trimmed.parse::<i64>().map_err(|_| expected())?),
        ConfigType::Double => match trimmed.parse::<f64>() {
            Ok(d) if d.is_finite() => Value::Double(d),
            _ => return Err(expected()),
        },
        ConfigType::List => Value::List(split_list(trimmed)),
        ConfigType::String | ConfigType::Password | ConfigType::Class | ConfigType::Unknown => {
            Value::Str(trimmed.to_string())
        }
    };
    validate(&value, validator).map_err(|detail| match detail {
        Some(detail) => format!("{} ({detail})", expected()),
        None => expected(),
    })?;
    Ok(value)
}

/// `Err(None)`: out of range; `Err(Some(why))`: malformed, with the reason.
fn validate(value: &Value, validator: Validator) -> Result<(), Option<String>> {
    let ok = |good: bool| if good { Ok(()) } else { Err(None) };
    match (validator, value) {
        (Validator::Any, _) => Ok(()),
        (Validator::AtLeast(min), Value::Int(n)) => ok(*n >= min),
        (Validator::Between(lo, hi), Value::Int(n)) => ok((lo..=hi).contains(n)),
        (Validator::UnlimitedOrAtLeast(min), Value::Int(n)) => ok(*n == -1 || *n >= min),
        (Validator::GzipLevel, Value::Int(n)) => ok(*n == -1 || (1..=9).contains(n)),
        (Validator::Fraction, Value::Double(d)) => ok((0.0..=1.0).contains(d)),
        (Validator::OneOf(allowed), Value::Str(s)) => ok(allowed.contains(&s.as_str())),
        (Validator::EachOf(allowed), Value::List(items)) => ok(items.iter().all(|i| allowed.contains(&i.as_str()))),
        (Validator::NonEmpty, Value::Str(s)) => ok(!s.is_empty()),
        (Validator::NonEmptyList, Value::List(items)) => ok(!items.is_empty() && items.iter().all(|i| !i.is_empty())),
        (Validator::Listeners, Value::List(items)) => {
            items.iter().try_for_each(|url| parse_listener_url(url).map(drop).map_err(Some))
        }
        (Validator::ProtocolMap, Value::Str(s)) => parse_protocol_map(s).map(drop).map_err(Some),
        (Validator::ListenerNames, Value::Str(s)) => ok(split_list(s).iter().all(|n| is_listener_name(n))),
        (Validator::ListenerName, Value::Str(s)) => ok(is_listener_name(s)),
        (Validator::ProcessRoles, Value::List(items)) => {
            if let Some(bad) = items.iter().find(|r| *r != "broker" && *r != "controller") {
                return Err(Some(format!("`{bad}` is not a role")));
            }
            if items.len() == 2 && items[0] == items[1] {
                return Err(Some(format!("`{}` is listed twice", items[0])));
            }
            ok(!items.is_empty() && items.len() <= 2)
        }
        (Validator::QuorumVoters, Value::List(items)) => {
            items.iter().try_for_each(|v| parse_voter(v).map(drop).map_err(Some))
        }
        (Validator::HostPortList, Value::List(items)) => {
            items.iter().try_for_each(|a| parse_host_port(a).map(drop).map_err(|e| Some(format!("`{a}`: {e}"))))
        }
        (Validator::HostPortOrEmpty, Value::Str(s)) => {
            let address = s.strip_prefix("http://").unwrap_or(s);
            if address.is_empty() {
                Ok(())
            } else {
                parse_host_port(address).map(drop).map_err(Some)
            }
        }
        // A validator paired with the wrong type is a mistake in the key table; the
        // table test checks every default, so this is unreachable from real input.
        _ => Err(Some("Osprey's key table pairs this validator with another type".into())),
    }
}

fn is_listener_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// What a valid value looks like, for error messages and `--help`.
pub(crate) fn expected(config_type: ConfigType, validator: Validator) -> String {
    let kind = match config_type {
        ConfigType::Boolean => return "true or false".into(),
        ConfigType::Int => "a 32-bit integer",
        ConfigType::Short => "a 16-bit integer",
        ConfigType::Long => "a 64-bit integer",
        ConfigType::Double => "a number",
        ConfigType::List => "a comma-separated list",
        _ => "text",
    };
    match validator {
        Validator::Any => kind.into(),
        Validator::AtLeast(min) => format!("{kind} >= {min}"),
        Validator::Between(lo, hi) => format!("{kind} from {lo} to {hi}"),
        Validator::UnlimitedOrAtLeast(min) => format!("-1 (unlimited) or {kind} >= {min}"),
        Validator::Fraction => "a number from 0 to 1".into(),
        Validator::GzipLevel => "-1 (codec default) or an integer from 1 to 9".into(),
        Validator::OneOf(allowed) => format!("one of {}", allowed.join(", ")),
        Validator::EachOf(allowed) => format!("a comma-separated list of {}", allowed.join(", ")),
        Validator::NonEmpty => "a non-empty path".into(),
        Validator::NonEmptyList => "a comma-separated list of non-empty paths".into(),
        Validator::Listeners => "a comma-separated list of NAME://host:port".into(),
        Validator::ProtocolMap => {
            "a comma-separated list of NAME:PROTOCOL with PROTOCOL one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
                .into()
        }
        Validator::ListenerNames => "a comma-separated list of listener names".into(),
        Validator::ListenerName => "one listener name".into(),
        Validator::ProcessRoles => "broker, controller, or broker,controller".into(),
        Validator::QuorumVoters => "a comma-separated list of {id}@{host}:{port}, or empty".into(),
        Validator::HostPortList => "a comma-separated list of {host}:{port}, or empty".into(),
        Validator::HostPortOrEmpty => "host:port, or empty to disable".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_trimmed_and_booleans_case_insensitive() {
        assert_eq!(check(ConfigType::Boolean, Validator::Any, " TRUE "), Ok(Value::Bool(true)));
        assert_eq!(check(ConfigType::Int, Validator::AtLeast(1), " 7\t"), Ok(Value::Int(7)));
        assert_eq!(check(ConfigType::List, Validator::Any, " a , b "), Ok(Value::List(vec!["a".into(), "b".into()])));
        assert_eq!(check(ConfigType::List, Validator::Any, "  "), Ok(Value::List(vec![])));
    }

    #[test]
    fn integer_width_follows_the_type() {
        assert!(check(ConfigType::Int, Validator::Any, "2147483648").is_err());
        assert!(check(ConfigType::Short, Validator::Any, "40000").is_err());
        assert!(check(ConfigType::Long, Validator::Any, "2147483648").is_ok());
    }

    #[test]
    fn doubles_must_be_finite_and_in_range() {
        assert!(check(ConfigType::Double, Validator::Fraction, "NaN").is_err());
        assert!(check(ConfigType::Double, Validator::Fraction, "1.5").is_err());
        assert_eq!(check(ConfigType::Double, Validator::Fraction, "0.25"), Ok(Value::Double(0.25)));
    }

    #[test]
    fn process_roles_are_broker_controller_or_both_each_once() {
        for ok in ["controller,broker", "broker,controller", "broker", "controller"] {
            assert!(check(ConfigType::List, Validator::ProcessRoles, ok).is_ok(), "{ok}");
        }
        for bad in ["", "broker,broker", "zookeeper", "broker,controller,broker", "broker,"] {
            assert!(check(ConfigType::List, Validator::ProcessRoles, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quorum_voters_are_id_at_host_port() {
        assert!(check(ConfigType::List, Validator::QuorumVoters, "").is_ok());
        assert!(check(ConfigType::List, Validator::QuorumVoters, "1@127.0.0.1:19093, 2@[::1]:2,3@host-c:3").is_ok());
        for bad in
            ["1@host", "x@host:1", "1host:1", "1@host:1@x", "1@:1", "1@host:70000", "-1@host:1", "1@host:1:dirid"]
        {
            let err = check(ConfigType::List, Validator::QuorumVoters, bad).unwrap_err();
            assert!(err.contains("{id}@{host}:{port}"), "{bad}: {err}");
        }
    }

    #[test]
    fn bootstrap_servers_are_host_port() {
        assert!(check(ConfigType::List, Validator::HostPortList, "a:1,[::1]:2").is_ok());
        assert!(check(ConfigType::List, Validator::HostPortList, "a").is_err());
    }
}
