//! AlterConfigs (the legacy, whole-set form) and IncrementalAlterConfigs (SET, DELETE,
//! APPEND, SUBTRACT). Topic configs are validated, made durable in the metadata log, and
//! applied to the topic's partition logs at once. Group configs (IncrementalAlterConfigs
//! only, as in Kafka) are validated against the broker's bounds and made durable the
//! same way. Broker configs (the cluster-wide default, empty name, and this broker's id)
//! accept Kafka's dynamic keys that Osprey applies live, are made durable in the metadata
//! log and applied at once; every other key is refused as Kafka refuses a static one.

use crate::broker::Broker;
use crate::handlers::describe_configs::{RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};
use osprey_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use osprey_protocol::messages::incremental_alter_configs_response as incremental;
use osprey_protocol::messages::{
    alter_configs_response, AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use osprey_protocol::{ErrorCode, ResponseBody};
use std::sync::Arc;

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

type Outcome = Result<(), (ErrorCode, String)>;

pub fn handle_alter(broker: &Arc<Broker>, req: AlterConfigsRequest) -> ResponseBody {
    let mut resp = AlterConfigsResponse::default();
    for r in req.resources {
        let outcome = if r.resource_type == RESOURCE_BROKER {
            let configs: Vec<(&str, Option<&str>)> =
                r.configs.iter().map(|c| (c.name.as_str(), c.value.as_deref())).collect();
            alter_broker_whole_set(broker, &r.resource_name, &configs, req.validate_only)
        } else {
            alter_topic_whole_set(broker, &r, req.validate_only)
        };
        let (error_code, error_message) = split(outcome);
        resp.responses.push(alter_configs_response::AlterConfigsResourceResponse {
            error_code,
            error_message,
            resource_type: r.resource_type,
            resource_name: r.resource_name,
            ..Default::default()
        });
    }
    ResponseBody::AlterConfigs(resp)
}

/// A topic's configs, the legacy way: the request's set replaces the topic's whole set.
fn alter_topic_whole_set(
    broker: &Broker,
    r: &osprey_protocol::messages::alter_configs_request::AlterConfigsResource,
    validate_only: bool,
) -> Outcome {
    check_resource(r.resource_type).and_then(|()| {
        let image = broker.image();
        let topic = image.topic(&r.resource_name).ok_or_else(|| unknown(&r.resource_name))?;
        // The legacy form replaces the topic's whole set: unset what is not given.
        let mut changes: Vec<(String, Option<String>)> = topic
            .configs
            .keys()
            .filter(|k| !r.configs.iter().any(|c| &c.name == *k))
            .map(|k| (k.clone(), None))
            .collect();
        for c in &r.configs {
            changes.push((c.name.clone(), c.value.clone()));
        }
        apply(broker, &r.resource_name, &changes, validate_only)
    })
}

pub fn handle_incremental(broker: &Arc<Broker>, req: IncrementalAlterConfigsRequest) -> ResponseBody {
    let mut resp = IncrementalAlterConfigsResponse::default();
    for r in req.resources {
        let outcome = match r.resource_type {
            RESOURCE_GROUP => alter_group(broker, &r, req.validate_only),
            RESOURCE_BROKER => alter_broker(broker, &r, req.validate_only),
            _ => alter_topic(broker, &r, req.validate_only),
        };
        let (error_code, error_message) = split(outcome);
        resp.responses.push(incremental::AlterConfigsResourceResponse {
            error_code,
            error_message,
            resource_type: r.resource_type,
            resource_name: r.resource_name,
            ..Default::default()
        });
    }
    ResponseBody::IncrementalAlterConfigs(resp)
}

/// A group's configs: SET and DELETE (none of them is a list, so APPEND and SUBTRACT are
/// INVALID_CONFIG, as Kafka answers for a non-list config).
fn alter_group(broker: &Broker, r: &AlterConfigsResource, validate_only: bool) -> Outcome {
    let mut changes = Vec::new();
    for c in &r.configs {
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
    broker.set_group_configs(&r.resource_name, &changes, validate_only).map_err(|e| (e.code, e.message))
}

/// A broker resource's dynamic configs, incrementally: SET and DELETE, and APPEND and
/// SUBTRACT on list configs (to the resource's own value, else the one in effect). The
/// checks and messages are Kafka's `ConfigAdminManager.preprocess`.
fn alter_broker(broker: &Broker, r: &AlterConfigsResource, validate_only: bool) -> Outcome {
    let requested: Vec<(&str, Option<&str>)> =
        r.configs.iter().map(|c| (c.name.as_str(), c.value.as_deref())).collect();
    check_broker_request(broker, &r.resource_name, &requested, |i| r.configs[i].config_operation != OP_DELETE)?;
    let image = broker.image();
    let current = image.broker_configs(&r.resource_name);
    let mut changes = Vec::new();
    for c in &r.configs {
        let change = match c.config_operation {
            OP_SET => c.value.clone(),
            OP_DELETE => None,
            OP_APPEND | OP_SUBTRACT => {
                let verb = if c.config_operation == OP_APPEND { "append" } else { "subtract" };
                match crate::config::keys::broker_key(&c.name) {
                    None => return Err((ErrorCode::INVALID_CONFIG, format!("Unknown config name: {}", c.name))),
                    Some(key) if key.config_type != crate::config::ConfigType::List => {
                        return Err((
                            ErrorCode::INVALID_CONFIG,
                            format!("Config value {verb} is not allowed for config key: {}", c.name),
                        ))
                    }
                    Some(_) => {}
                }
                let base = current.and_then(|m| m.get(&c.name).cloned()).or_else(|| broker.config().value(&c.name));
                Some(edit_list(base, c.value.as_deref(), c.config_operation == OP_APPEND))
            }
            other => return Err((ErrorCode::INVALID_REQUEST, format!("Unknown operations type {other}"))),
        };
        changes.push((c.name.clone(), change));
    }
    broker.set_broker_configs(&r.resource_name, &changes, validate_only).map_err(|e| (e.code, e.message))
}

/// A broker resource's dynamic configs, the legacy way: the request's set replaces the
/// resource's whole set.
fn alter_broker_whole_set(
    broker: &Broker,
    name: &str,
    configs: &[(&str, Option<&str>)],
    validate_only: bool,
) -> Outcome {
    check_broker_request(broker, name, configs, |_| true)?;
    let image = broker.image();
    let mut changes: Vec<(String, Option<String>)> = image
        .broker_configs(name)
        .into_iter()
        .flat_map(|m| m.keys())
        .filter(|k| !configs.iter().any(|(name, _)| name == k))
        .map(|k| (k.clone(), None))
        .collect();
    changes.extend(configs.iter().map(|(k, v)| (k.to_string(), v.map(str::to_string))));
    broker.set_broker_configs(name, &changes, validate_only).map_err(|e| (e.code, e.message))
}

/// Kafka's checks before a broker resource's configs are looked at: the name is empty
/// (the cluster-wide default) or this broker's id, no key twice, and no null value where
/// one is needed (`needs_value(i)` for the i-th config).
fn check_broker_request(
    broker: &Broker,
    name: &str,
    configs: &[(&str, Option<&str>)],
    needs_value: impl Fn(usize) -> bool,
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
    let node_id = broker.settings.node_id;
    match name.parse::<i32>() {
        Err(_) => Err((ErrorCode::INVALID_REQUEST, format!("Node id must be an integer, but it is: {name}"))),
        Ok(id) if id != node_id => {
            Err((ErrorCode::INVALID_REQUEST, format!("Unexpected broker id, expected {node_id}, but received {name}")))
        }
        Ok(_) => Ok(()),
    }
}

/// A comma-separated list with `items` appended (each once) or subtracted.
fn edit_list(base: Option<String>, items: Option<&str>, append: bool) -> String {
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

fn alter_topic(broker: &Arc<Broker>, r: &AlterConfigsResource, validate_only: bool) -> Outcome {
    check_resource(r.resource_type).and_then(|()| {
        let image = broker.image();
        let topic = image.topic(&r.resource_name).ok_or_else(|| unknown(&r.resource_name))?;
        let mut changes = Vec::new();
        for c in &r.configs {
            let current = topic.configs.get(&c.name).cloned();
            let change = match c.config_operation {
                OP_SET => c.value.clone(),
                OP_DELETE => None,
                OP_APPEND | OP_SUBTRACT => {
                    let base = current.or_else(|| broker.topic_defaults().get(&c.name).cloned());
                    Some(edit_list(base, c.value.as_deref(), c.config_operation == OP_APPEND))
                }
                other => return Err((ErrorCode::INVALID_REQUEST, format!("Unknown config operation {other}"))),
            };
            changes.push((c.name.clone(), change));
        }
        apply(broker, &r.resource_name, &changes, validate_only)
    })
}

fn check_resource(resource_type: i8) -> Outcome {
    match resource_type {
        RESOURCE_TOPIC => Ok(()),
        RESOURCE_GROUP => Err((
            ErrorCode::INVALID_REQUEST,
            "Group configs are altered with IncrementalAlterConfigs, not the legacy AlterConfigs".into(),
        )),
        other => Err((ErrorCode::INVALID_REQUEST, format!("Unsupported resource type {other}"))),
    }
}

fn apply(broker: &Broker, topic: &str, changes: &[(String, Option<String>)], validate_only: bool) -> Outcome {
    broker.set_topic_configs(topic, changes, validate_only).map_err(|e| (e.code, e.message))
}

fn unknown(name: &str) -> (ErrorCode, String) {
    (ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, format!("Topic '{name}' does not exist."))
}

fn split(outcome: Outcome) -> (i16, Option<String>) {
    match outcome {
        Ok(()) => (0, None),
        Err((code, message)) => {
            crate::telemetry::error_code(osprey_protocol::ApiKey::IncrementalAlterConfigs, code);
            (code.code(), Some(message))
        }
    }
}
