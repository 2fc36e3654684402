//! AlterConfigs (the legacy, whole-set form) and IncrementalAlterConfigs (SET, DELETE,
//! APPEND, SUBTRACT). Topic configs are validated, made durable in the metadata log, and
//! applied to the topic's partition logs at once. Group configs (IncrementalAlterConfigs
//! only, as in Kafka) are validated against the broker's bounds and made durable the
//! same way. Broker configs (the cluster-wide default, empty name, and this broker's id)
//! accept Kafka's dynamic keys that Osprey applies live, are made durable in the metadata
//! log and applied at once; every other key is refused as Kafka refuses a static one.

use crate::broker::Broker;
use crate::config_changes::{
    broker_changes, check_broker_request, check_legacy_resource, group_changes, topic_changes, unknown_topic,
    whole_set_changes, Outcome, OP_DELETE,
};
use crate::handlers::describe_configs::{RESOURCE_BROKER, RESOURCE_GROUP};
use osprey_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use osprey_protocol::messages::incremental_alter_configs_response as incremental;
use osprey_protocol::messages::{
    alter_configs_response, AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use osprey_protocol::ResponseBody;
use std::sync::Arc;

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
    check_legacy_resource(r.resource_type)?;
    let image = broker.image();
    let topic = image.topic(&r.resource_name).ok_or_else(|| unknown_topic(&r.resource_name))?;
    let configs: Vec<(&str, Option<&str>)> = r.configs.iter().map(|c| (c.name.as_str(), c.value.as_deref())).collect();
    apply(broker, &r.resource_name, &whole_set_changes(Some(&topic.configs), &configs), validate_only)
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
    let changes = group_changes(&r.configs)?;
    broker.set_group_configs(&r.resource_name, &changes, validate_only).map_err(|e| (e.code, e.message))
}

/// A broker resource's dynamic configs, incrementally: SET and DELETE, and APPEND and
/// SUBTRACT on list configs (to the resource's own value, else the one in effect). The
/// checks and messages are Kafka's `ConfigAdminManager.preprocess`.
fn alter_broker(broker: &Broker, r: &AlterConfigsResource, validate_only: bool) -> Outcome {
    let requested: Vec<(&str, Option<&str>)> =
        r.configs.iter().map(|c| (c.name.as_str(), c.value.as_deref())).collect();
    let node_id = Some(broker.settings.node_id);
    check_broker_request(&r.resource_name, &requested, |i| r.configs[i].config_operation != OP_DELETE, node_id)?;
    let image = broker.image();
    let config = broker.config();
    let changes = broker_changes(&r.configs, image.broker_configs(&r.resource_name), |k| config.value(k))?;
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
    check_broker_request(name, configs, |_| true, Some(broker.settings.node_id))?;
    let changes = whole_set_changes(broker.image().broker_configs(name), configs);
    broker.set_broker_configs(name, &changes, validate_only).map_err(|e| (e.code, e.message))
}

fn alter_topic(broker: &Arc<Broker>, r: &AlterConfigsResource, validate_only: bool) -> Outcome {
    check_legacy_resource(r.resource_type)?;
    let image = broker.image();
    let topic = image.topic(&r.resource_name).ok_or_else(|| unknown_topic(&r.resource_name))?;
    let defaults = broker.topic_defaults();
    let changes = topic_changes(&r.configs, &topic.configs, |k| defaults.get(k).cloned())?;
    apply(broker, &r.resource_name, &changes, validate_only)
}

fn apply(broker: &Broker, topic: &str, changes: &[(String, Option<String>)], validate_only: bool) -> Outcome {
    broker.set_topic_configs(topic, changes, validate_only).map_err(|e| (e.code, e.message))
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
