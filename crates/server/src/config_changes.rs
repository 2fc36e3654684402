//! What one resource of AlterConfigs (33, the legacy whole-set form) or
//! IncrementalAlterConfigs (44: SET, DELETE, APPEND, SUBTRACT) asks for, as the changes
//! `TopicControl`'s `set_topic_configs` / `set_broker_configs` / `set_group_configs`
//! take (a key set `Some`, or reset `None`), with Kafka's checks and messages. Shared by
//! the single node's handler (`handlers/alter_configs.rs`) and the active controller
//! (`controller_node/decisions.rs`), which differ only in where the current values come
//! from and in which broker ids a broker resource may name.

use crate::config::keys::broker_key;
use crate::config::ConfigType;
use osprey_protocol::messages::incremental_alter_configs_request::AlterableConfig;
use osprey_protocol::ErrorCode;
use std::collections::BTreeMap;

pub use crate::handlers::describe_configs::{RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};
/// Kafka's ConfigResource types Osprey does not alter.
pub const RESOURCE_BROKER_LOGGER: i8 = 8;
pub const RESOURCE_CLIENT_METRICS: i8 = 16;

/// IncrementalAlterConfigs' operations.
pub const OP_SET: i8 = 0;
pub const OP_DELETE: i8 = 1;
pub const OP_APPEND: i8 = 2;
pub const OP_SUBTRACT: i8 = 3;

/// A resource's outcome: nothing, or Kafka's error code and message.
pub type Outcome<T = ()> = Result<T, (ErrorCode, String)>;
/// Keys set (`Some`) or reset (`None`), in request order.
pub type Changes = Vec<(String, Option<String>)>;

/// A group's configs, incrementally: SET and DELETE (none of them is a list, so APPEND
/// and SUBTRACT are INVALID_CONFIG, as Kafka answers for a non-list config).
pub fn group_changes(configs: &[AlterableConfig]) -> Outcome<Changes> {
    let mut changes = Vec::new();
    for c in configs {
        let change = match c.config_operation {
            OP_SET => c.value.clone(),
            OP_DELETE => None,
            OP_APPEND | OP_SUBTRACT => {
                return Err((
                    ErrorCode::INVALID_CONFIG,
                    format!(
                        "Config value append or subtract is not allowed for config key {}, it is not a list",
                        c.name
                    ),
                ))
            }
            other => return Err((ErrorCode::INVALID_REQUEST, format!("Unknown config operation {other}"))),
        };
        changes.push((c.name.clone(), change));
    }
    Ok(changes)
}

/// A broker resource's dynamic configs, incrementally: SET and DELETE, and APPEND and
/// SUBTRACT on list configs, to the resource's own value (`current`) else the one in
/// effect (`in_effect`). The checks and messages are Kafka's
/// `ConfigAdminManager.preprocess`; call [`check_broker_request`] first.
pub fn broker_changes(
    configs: &[AlterableConfig],
    current: Option<&BTreeMap<String, String>>,
    in_effect: impl Fn(&str) -> Option<String>,
) -> Outcome<Changes> {
    let mut changes = Vec::new();
    for c in configs {
        let change = match c.config_operation {
            OP_SET => c.value.clone(),
            OP_DELETE => None,
            OP_APPEND | OP_SUBTRACT => {
                let verb = if c.config_operation == OP_APPEND { "append" } else { "subtract" };
                match broker_key(&c.name) {
                    None => return Err((ErrorCode::INVALID_CONFIG, format!("Unknown config name: {}", c.name))),
                    Some(key) if key.config_type != ConfigType::List => {
                        return Err((
                            ErrorCode::INVALID_CONFIG,
                            format!("Config value {verb} is not allowed for config key: {}", c.name),
                        ))
                    }
                    Some(_) => {}
                }
                let base = current.and_then(|m| m.get(&c.name).cloned()).or_else(|| in_effect(&c.name));
                Some(edit_list(base, c.value.as_deref(), c.config_operation == OP_APPEND))
            }
            other => return Err((ErrorCode::INVALID_REQUEST, format!("Unknown operations type {other}"))),
        };
        changes.push((c.name.clone(), change));
    }
    Ok(changes)
}

/// A topic's configs, incrementally: APPEND and SUBTRACT edit the topic's own value,
/// else its default (`default`).
pub fn topic_changes(
    configs: &[AlterableConfig],
    topic_configs: &BTreeMap<String, String>,
    default: impl Fn(&str) -> Option<String>,
) -> Outcome<Changes> {
    let mut changes = Vec::new();
    for c in configs {
        let change = match c.config_operation {
            OP_SET => c.value.clone(),
            OP_DELETE => None,
            OP_APPEND | OP_SUBTRACT => {
                let base = topic_configs.get(&c.name).cloned().or_else(|| default(&c.name));
                Some(edit_list(base, c.value.as_deref(), c.config_operation == OP_APPEND))
            }
            other => return Err((ErrorCode::INVALID_REQUEST, format!("Unknown config operation {other}"))),
        };
        changes.push((c.name.clone(), change));
    }
    Ok(changes)
}

/// The legacy form: `configs` replaces the resource's whole set, so every key of
/// `current` it does not give is reset.
pub fn whole_set_changes(current: Option<&BTreeMap<String, String>>, configs: &[(&str, Option<&str>)]) -> Changes {
    let mut changes: Changes = current
        .into_iter()
        .flat_map(|m| m.keys())
        .filter(|k| !configs.iter().any(|(name, _)| name == k))
        .map(|k| (k.clone(), None))
        .collect();
    changes.extend(configs.iter().map(|(k, v)| (k.to_string(), v.map(str::to_string))));
    changes
}

/// Kafka's checks before a broker resource's configs are looked at: no key twice, no
/// null value where one is needed (`needs_value(i)` for the i-th config), and a name
/// that is empty (the cluster-wide default) or a broker id. A broker (`this_node:
/// Some`) takes only its own id, with `ConfigAdminManager`'s messages; the controller
/// (`None`) any broker's, with `ControllerConfigurationValidator`'s.
pub fn check_broker_request(
    name: &str,
    configs: &[(&str, Option<&str>)],
    needs_value: impl Fn(usize) -> bool,
    this_node: Option<i32>,
) -> Outcome {
    if configs.iter().enumerate().any(|(i, (k, _))| configs[..i].iter().any(|(other, _)| other == k)) {
        return Err((ErrorCode::INVALID_REQUEST, "Error due to duplicate config keys".into()));
    }
    let nulls: Vec<&str> =
        configs.iter().enumerate().filter(|(i, (_, v))| v.is_none() && needs_value(*i)).map(|(_, (k, _))| *k).collect();
    if !nulls.is_empty() {
        return Err((ErrorCode::INVALID_REQUEST, format!("Null value not supported for : {}", nulls.join(", "))));
    }
    if name.is_empty() {
        return Ok(());
    }
    let invalid = |m: String| Err((ErrorCode::INVALID_REQUEST, m));
    match (name.parse::<i32>(), this_node) {
        (Err(_), Some(_)) => invalid(format!("Node id must be an integer, but it is: {name}")),
        (Ok(id), Some(node_id)) if id != node_id => {
            invalid(format!("Unexpected broker id, expected {node_id}, but received {name}"))
        }
        (Err(_), None) => invalid("Unable to parse broker name as a base 10 number.".into()),
        (Ok(id), None) if id < 0 => invalid("Invalid negative broker ID.".into()),
        (Ok(_), _) => Ok(()),
    }
}

/// The legacy AlterConfigs serves topics here (brokers separately); anything else is
/// refused per resource.
pub fn check_legacy_resource(resource_type: i8) -> Outcome {
    match resource_type {
        RESOURCE_TOPIC => Ok(()),
        RESOURCE_GROUP => Err((
            ErrorCode::INVALID_REQUEST,
            "Group configs are altered with IncrementalAlterConfigs, not the legacy AlterConfigs".into(),
        )),
        other => Err((ErrorCode::INVALID_REQUEST, format!("Unsupported resource type {other}"))),
    }
}

/// A comma-separated list with `items` appended (each once) or subtracted.
pub fn edit_list(base: Option<String>, items: Option<&str>, append: bool) -> String {
    let mut list: Vec<String> =
        base.iter().flat_map(|v| v.split(',')).map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
    for v in items.iter().flat_map(|v| v.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
        if append && !list.iter().any(|i| i == v) {
            list.push(v.to_string());
        } else if !append {
            list.retain(|i| i != v);
        }
    }
    list.join(",")
}

/// UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist.
pub fn unknown_topic(name: &str) -> (ErrorCode, String) {
    (ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, format!("Topic '{name}' does not exist."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str, operation: i8, value: Option<&str>) -> AlterableConfig {
        AlterableConfig {
            name: name.into(),
            config_operation: operation,
            value: value.map(String::from),
            ..Default::default()
        }
    }

    #[test]
    fn lists_are_appended_once_and_subtracted() {
        assert_eq!(edit_list(Some("a,b".into()), Some("b,c"), true), "a,b,c");
        assert_eq!(edit_list(Some("a, b ,c".into()), Some("b"), false), "a,c");
        assert_eq!(edit_list(None, Some("x"), true), "x");
    }

    #[test]
    fn a_broker_takes_its_own_id_and_the_controller_any_broker_id() {
        let none: &[(&str, Option<&str>)] = &[];
        assert!(check_broker_request("", none, |_| true, Some(1)).is_ok());
        assert!(check_broker_request("1", none, |_| true, Some(1)).is_ok());
        let other = check_broker_request("2", none, |_| true, Some(1)).unwrap_err();
        assert_eq!(other.1, "Unexpected broker id, expected 1, but received 2");
        assert!(check_broker_request("2", none, |_| true, None).is_ok());
        assert_eq!(check_broker_request("-2", none, |_| true, None).unwrap_err().1, "Invalid negative broker ID.");
        let word = check_broker_request("b", none, |_| true, None).unwrap_err();
        assert_eq!(word, (ErrorCode::INVALID_REQUEST, "Unable to parse broker name as a base 10 number.".into()));
        let twice = check_broker_request("", &[("k", Some("1")), ("k", Some("2"))], |_| true, None).unwrap_err();
        assert_eq!(twice.1, "Error due to duplicate config keys");
        let null = check_broker_request("", &[("k", None)], |_| true, None).unwrap_err();
        assert_eq!(null.1, "Null value not supported for : k");
    }

    #[test]
    fn incremental_operations_become_changes_with_kafkas_refusals() {
        let topic: BTreeMap<String, String> = [("cleanup.policy".to_string(), "delete".to_string())].into();
        let changes = topic_changes(
            &[op("cleanup.policy", OP_APPEND, Some("compact")), op("retention.ms", OP_DELETE, None)],
            &topic,
            |_| None,
        )
        .unwrap();
        assert_eq!(
            changes,
            vec![("cleanup.policy".into(), Some("delete,compact".into())), ("retention.ms".into(), None)]
        );
        let group = group_changes(&[op("consumer.session.timeout.ms", OP_APPEND, Some("1"))]).unwrap_err();
        assert_eq!(group.0, ErrorCode::INVALID_CONFIG);
        let not_a_list = broker_changes(&[op("log.retention.ms", OP_APPEND, Some("1"))], None, |_| None);
        assert_eq!(not_a_list.unwrap_err().0, ErrorCode::INVALID_CONFIG);
        assert_eq!(topic_changes(&[op("x", 9, None)], &topic, |_| None).unwrap_err().0, ErrorCode::INVALID_REQUEST);
    }

    #[test]
    fn the_legacy_form_resets_what_it_does_not_name() {
        let current: BTreeMap<String, String> = [("a".to_string(), "1".to_string()), ("b".into(), "2".into())].into();
        let changes = whole_set_changes(Some(&current), &[("b", Some("3"))]);
        assert_eq!(changes, vec![("a".into(), None), ("b".into(), Some("3".into()))]);
    }
}
