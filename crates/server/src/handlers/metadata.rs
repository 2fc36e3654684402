//! Metadata: brokers, topics (by name or id), partitions with leaders and epochs; creates
//! missing topics when both the request and `auto.create.topics.enable` allow it (such a
//! request is answered from the blocking pool: `creates_topics`).

use crate::authorized_operations::{self, if_requested};
use crate::broker::Broker;
use osprey_cluster::{NewTopic, TopicImage};
use osprey_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use osprey_protocol::messages::{MetadataRequest, MetadataResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: MetadataRequest, version: i16) -> ResponseBody {
    let mut resp = topics_and_brokers(broker, &req, version);
    // v8+ (KIP-430): authorized operations when asked; the cluster's only up to v10.
    if version >= 8 {
        let topic_operations = if_requested(req.include_topic_authorized_operations, authorized_operations::TOPIC);
        for topic in &mut resp.topics {
            topic.topic_authorized_operations = topic_operations;
        }
        if version <= 10 {
            resp.cluster_authorized_operations =
                if_requested(req.include_cluster_authorized_operations, authorized_operations::CLUSTER);
        }
    }
    ResponseBody::Metadata(resp)
}

/// Whether answering `req` creates a topic (a controller write, run on the blocking pool):
/// a topic named, missing, and auto-creation allowed by both the request and the broker.
pub fn creates_topics(broker: &Broker, req: &MetadataRequest, version: i16) -> bool {
    if !(req.allow_auto_topic_creation && broker.settings.auto_create_topics) {
        return false;
    }
    let Some(requested) = req.topics.as_ref().filter(|t| !(version == 0 && t.is_empty())) else { return false };
    let image = broker.image();
    requested.iter().any(|t| t.topic_id.is_zero() && t.name.as_deref().is_some_and(|n| image.topic(n).is_none()))
}

fn topics_and_brokers(broker: &Arc<Broker>, req: &MetadataRequest, version: i16) -> MetadataResponse {
    let s = &broker.settings;
    let mut resp = MetadataResponse {
        brokers: vec![MetadataResponseBroker {
            node_id: s.node_id,
            host: s.advertised_host.clone(),
            port: s.advertised_port,
            ..Default::default()
        }],
        cluster_id: if version >= 2 { Some(broker.cluster_id.clone()) } else { None },
        controller_id: s.node_id,
        ..Default::default()
    };
    // v0: an empty list means every topic; v1+: null means every topic.
    let requested = match &req.topics {
        Some(t) if !(version == 0 && t.is_empty()) => t,
        _ => {
            resp.topics = broker.image().topics().map(|t| describe(t, version)).collect();
            return resp;
        }
    };
    let auto_create = req.allow_auto_topic_creation && s.auto_create_topics;
    for topic in requested {
        let image = broker.image();
        let found = match (&topic.name, topic.topic_id.is_zero()) {
            (_, false) => image.topic_by_id(topic.topic_id).cloned().ok_or(ErrorCode::UNKNOWN_TOPIC_ID),
            (Some(name), true) => match image.topic(name) {
                Some(t) => Ok(t.clone()),
                None if auto_create => create(broker, name),
                None => Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
            },
            (None, true) => Err(ErrorCode::INVALID_REQUEST),
        };
        resp.topics.push(match found {
            Ok(t) => describe(&t, version),
            Err(code) => {
                crate::telemetry::error_code(ApiKey::Metadata, code);
                MetadataResponseTopic {
                    error_code: code.code(),
                    // Names are nullable only from v12; earlier versions get "" for an id lookup.
                    name: topic.name.clone().or_else(|| (version < 12).then(String::new)),
                    topic_id: topic.topic_id,
                    ..Default::default()
                }
            }
        });
    }
    resp
}

fn create(broker: &Arc<Broker>, name: &str) -> Result<TopicImage, ErrorCode> {
    let topic = NewTopic { name: name.to_string(), num_partitions: -1, replication_factor: -1, ..Default::default() };
    match broker.create_topic(&topic, false) {
        Ok(t) => Ok(t),
        // Another request created it first.
        Err(e) if e.code == ErrorCode::TOPIC_ALREADY_EXISTS => {
            broker.image().topic(name).cloned().ok_or(ErrorCode::LEADER_NOT_AVAILABLE)
        }
        Err(e) => {
            tracing::debug!(topic = name, error = %e, "auto-creation refused");
            Err(e.code)
        }
    }
}

fn describe(topic: &TopicImage, version: i16) -> MetadataResponseTopic {
    MetadataResponseTopic {
        name: Some(topic.name.clone()),
        topic_id: if version >= 10 { topic.id } else { Default::default() },
        is_internal: topic.name.starts_with("__"),
        partitions: topic
            .partitions
            .iter()
            .map(|p| MetadataResponsePartition {
                partition_index: p.index,
                leader_id: p.leader,
                leader_epoch: if version >= 7 { p.leader_epoch } else { -1 },
                replica_nodes: p.replicas.clone(),
                isr_nodes: p.isr.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}
