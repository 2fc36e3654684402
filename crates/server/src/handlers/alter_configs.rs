//! AlterConfigs (the legacy, whole-set form) and IncrementalAlterConfigs (SET, DELETE,
//! APPEND, SUBTRACT). Topic configs are validated, made durable in the metadata log, and
//! applied to the topic's partition logs at once. Group configs (IncrementalAlterConfigs
//! only, as in Kafka) are validated against the broker's bounds and made durable the
//! same way. Broker configs are static in Osprey.

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
        let outcome = check_resource(broker, r.resource_type, &r.resource_name).and_then(|()| {
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
            apply(broker, &r.resource_name, &changes, req.validate_only)
        });
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

pub fn handle_incremental(broker: &Arc<Broker>, req: IncrementalAlterConfigsRequest) -> ResponseBody {
    let mut resp = IncrementalAlterConfigsResponse::default();
    for r in req.resources {
        let outcome = if r.resource_type == RESOURCE_GROUP {
            alter_group(broker, &r, req.validate_only)
        } else {
            alter_topic(broker, &r, req.validate_only)
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

fn alter_topic(broker: &Arc<Broker>, r: &AlterConfigsResource, validate_only: bool) -> Outcome {
    check_resource(broker, r.resource_type, &r.resource_name).and_then(|()| {
        let image = broker.image();
        let topic = image.topic(&r.resource_name).ok_or_else(|| unknown(&r.resource_name))?;
        let mut changes = Vec::new();
        for c in &r.configs {
            let current = topic.configs.get(&c.name).cloned();
            let change = match c.config_operation {
                OP_SET => c.value.clone(),
                OP_DELETE => None,
                OP_APPEND | OP_SUBTRACT => {
                    let mut items: Vec<String> = current
                        .or_else(|| broker.settings.topic_defaults.get(&c.name).cloned())
                        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect())
                        .unwrap_or_default();
                    for v in c.value.iter().flat_map(|v| v.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
                        if c.config_operation == OP_APPEND && !items.iter().any(|i| i == v) {
                            items.push(v.to_string());
                        } else if c.config_operation == OP_SUBTRACT {
                            items.retain(|i| i != v);
                        }
                    }
                    Some(items.join(","))
                }
                other => return Err((ErrorCode::INVALID_REQUEST, format!("Unknown config operation {other}"))),
            };
            changes.push((c.name.clone(), change));
        }
        apply(broker, &r.resource_name, &changes, validate_only)
    })
}

fn check_resource(broker: &Broker, resource_type: i8, _name: &str) -> Outcome {
    match resource_type {
        RESOURCE_TOPIC => Ok(()),
        RESOURCE_GROUP => Err((
            ErrorCode::INVALID_REQUEST,
            "Group configs are altered with IncrementalAlterConfigs, not the legacy AlterConfigs".into(),
        )),
        RESOURCE_BROKER => Err((
            ErrorCode::INVALID_REQUEST,
            format!(
                "Broker {} configs are static in osprey: set them in server.properties or with --override and restart",
                broker.settings.node_id
            ),
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
