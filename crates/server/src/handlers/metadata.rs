//! Metadata: live brokers, topics (by name or id), partitions with leaders and epochs,
//! as the metadata image has them (`metadata_cache`); creates
//! missing topics when both the request and `auto.create.topics.enable` allow it (such a
//! request is answered from the blocking pool: `creates_topics`), a coordinator's
//! internal topic as its coordinator does (`find_coordinator::ensure_of_internal_topic`).

use crate::authorized_operations::{self, if_requested};
use crate::broker::Broker;
use crate::metadata_cache::{MetadataCache, NoLeader};
use osprey_cluster::controller::validate_topic_name;
use osprey_cluster::image::NO_LEADER;
use osprey_cluster::{NewTopic, PartitionImage, TopicImage};
use osprey_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use osprey_protocol::messages::{MetadataRequest, MetadataResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::sync::Arc;

/// Metadata as seen by a client connected on `listener`: brokers at their endpoints on
/// it, leaders without one answered LISTENER_NOT_FOUND.
pub fn handle(broker: &Arc<Broker>, req: MetadataRequest, version: i16, listener: &str) -> ResponseBody {
    let mut resp = topics_and_brokers(broker, &req, version, listener);
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

fn topics_and_brokers(broker: &Arc<Broker>, req: &MetadataRequest, version: i16, listener: &str) -> MetadataResponse {
    let s = &broker.settings;
    let cache = MetadataCache::for_listener(broker, listener);
    let mut resp = MetadataResponse {
        cluster_id: if version >= 2 { Some(broker.cluster_id.clone()) } else { None },
        controller_id: cache.controller_id_for_clients(),
        ..Default::default()
    };
    // v0: an empty list means every topic; v1+: null means every topic.
    let requested = match &req.topics {
        Some(t) if !(version == 0 && t.is_empty()) => t,
        _ => {
            resp.topics = cache.image().topics().map(|t| describe(&cache, t, version)).collect();
            resp.brokers = brokers(&cache);
            return resp;
        }
    };
    let auto_create = req.allow_auto_topic_creation && s.auto_create_topics;
    let mut cache = cache;
    for topic in requested {
        let found = match (&topic.name, topic.topic_id.is_zero()) {
            (_, false) => cache.image().topic_by_id(topic.topic_id).cloned().ok_or(ErrorCode::UNKNOWN_TOPIC_ID),
            (Some(name), true) => match cache.image().topic(name) {
                Some(t) => Ok(t.clone()),
                None if auto_create => {
                    let created = create(broker, name);
                    // The new topic's partitions are described from the image that has them.
                    cache = MetadataCache::for_listener(broker, listener);
                    created
                }
                // As Kafka: a name that could never be a topic is INVALID_TOPIC_EXCEPTION.
                None => match validate_topic_name(name) {
                    Ok(()) => Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                    Err(e) => Err(e.code),
                },
            },
            (None, true) => Err(ErrorCode::INVALID_REQUEST),
        };
        resp.topics.push(match found {
            Ok(t) => describe(&cache, &t, version),
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
    resp.brokers = brokers(&cache);
    resp
}

/// Every live broker on the client's listener, with its rack.
fn brokers(cache: &MetadataCache) -> Vec<MetadataResponseBroker> {
    cache
        .alive_brokers()
        .into_iter()
        .map(|e| MetadataResponseBroker {
            node_id: e.node_id,
            host: e.host,
            port: e.port,
            rack: e.rack,
            ..Default::default()
        })
        .collect()
}

fn create(broker: &Arc<Broker>, name: &str) -> Result<TopicImage, ErrorCode> {
    // A coordinator's topic is created as the coordinator needs it, as Kafka's
    // AutoTopicCreationManager does: with the broker's topic defaults (one partition),
    // every key hashing to another partition would have no coordinator, for good.
    if let Some(ensure) = super::find_coordinator::ensure_of_internal_topic(name) {
        // A failure is logged by `ensure`; the client asks again.
        ensure(broker).map_err(|_| ErrorCode::LEADER_NOT_AVAILABLE)?;
        return broker.image().topic(name).cloned().ok_or(ErrorCode::LEADER_NOT_AVAILABLE);
    }
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

/// A topic's partitions as Kafka's `KRaftMetadataCache.getPartitionMetadata` gives them:
/// leader, epoch, replicas, ISR and offline replicas from the image; a partition whose
/// leader is missing or unregistered answers LEADER_NOT_AVAILABLE with leader -1, one
/// whose leader lacks the client's listener LISTENER_NOT_FOUND (v6+). v0 lists only the
/// live replicas and answers REPLICA_NOT_AVAILABLE when some are not.
fn describe(cache: &MetadataCache, topic: &TopicImage, version: i16) -> MetadataResponseTopic {
    MetadataResponseTopic {
        name: Some(topic.name.clone()),
        topic_id: if version >= 10 { topic.id } else { Default::default() },
        is_internal: topic.name.starts_with("__"),
        partitions: topic.partitions.iter().map(|p| describe_partition(cache, p, version)).collect(),
        ..Default::default()
    }
}

fn describe_partition(cache: &MetadataCache, p: &PartitionImage, version: i16) -> MetadataResponsePartition {
    let (replica_nodes, isr_nodes) = if version == 0 {
        (cache.online_replicas(&p.replicas), cache.online_replicas(&p.isr))
    } else {
        (p.replicas.clone(), p.isr.clone())
    };
    let (leader_id, error) = match cache.leader(p) {
        Ok(_) if replica_nodes.len() < p.replicas.len() || isr_nodes.len() < p.isr.len() => {
            (p.leader, ErrorCode::REPLICA_NOT_AVAILABLE)
        }
        Ok(leader) => (leader.node_id, ErrorCode::NONE),
        Err(NoLeader::ListenerNotFound) if version >= 6 => (NO_LEADER, ErrorCode::LISTENER_NOT_FOUND),
        Err(_) => (NO_LEADER, ErrorCode::LEADER_NOT_AVAILABLE),
    };
    if error != ErrorCode::NONE {
        crate::telemetry::error_code(ApiKey::Metadata, error);
    }
    MetadataResponsePartition {
        error_code: error.code(),
        partition_index: p.index,
        leader_id,
        leader_epoch: if version >= 7 { p.leader_epoch } else { -1 },
        replica_nodes,
        isr_nodes,
        offline_replicas: cache.offline_replicas(&p.replicas),
        ..Default::default()
    }
}
