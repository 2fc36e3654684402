//! AlterPartitionReassignments (45) and ListPartitionReassignments (46), as
//! `kafka-reassign-partitions.sh` sends them. The controller decides
//! (crates/cluster/src/reassignment.rs): a broker of a cluster forwards both to the
//! active controller, as Kafka's brokers do, and answers an Alter once its own image has
//! the change; a single node decides on its own controller, where it is the only broker.
//!
//! The conversions between the wire messages and the controller's types are here, for
//! the broker and the active controller (`controller_node/decisions.rs`) alike.

use super::on_blocking_pool;
use crate::broker::Broker;
use crate::dispatch::Reply;
use osprey_cluster::reassignment::{
    list_partition_reassignments, ReassignmentTarget, TopicOngoingReassignments, TopicReassignmentResult,
};
use osprey_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use osprey_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use osprey_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
};
use osprey_protocol::{RequestBody, ResponseBody};
use std::sync::Arc;

pub fn alter(broker: &Arc<Broker>, req: AlterPartitionReassignmentsRequest, version: i16) -> Reply {
    on_blocking_pool(broker, move |b| match b.cluster_link() {
        Some(link) => link.forward(RequestBody::AlterPartitionReassignments(req), version, true),
        None => {
            let node_id = b.settings.node_id;
            let allow = req.allow_replication_factor_change;
            let decided = b.with_controller(|c| c.alter_partition_reassignments(node_id, allow, &targets(&req)));
            match decided {
                Ok(results) => alter_response(&req, results),
                Err(e) => crate::controller_node::failed_response(
                    &RequestBody::AlterPartitionReassignments(req),
                    version,
                    e.code,
                    &e.message,
                ),
            }
        }
    })
}

pub fn list(broker: &Arc<Broker>, req: ListPartitionReassignmentsRequest, version: i16) -> Reply {
    on_blocking_pool(broker, move |b| match b.cluster_link() {
        Some(link) => link.forward(RequestBody::ListPartitionReassignments(req), version, false),
        None => {
            let named = named(&req);
            list_response(list_partition_reassignments(&b.image(), named.as_deref()))
        }
    })
}

/// The request's partitions and their targets (`None`: cancel).
pub fn targets(req: &AlterPartitionReassignmentsRequest) -> Vec<(String, Vec<ReassignmentTarget>)> {
    req.topics
        .iter()
        .map(|t| {
            let targets = t
                .partitions
                .iter()
                .map(|p| ReassignmentTarget { partition_index: p.partition_index, replicas: p.replicas.clone() })
                .collect();
            (t.name.clone(), targets)
        })
        .collect()
}

/// Kafka's answer: the request's `allow_replication_factor_change` echoed, and each
/// partition's error and message.
pub fn alter_response(req: &AlterPartitionReassignmentsRequest, results: Vec<TopicReassignmentResult>) -> ResponseBody {
    ResponseBody::AlterPartitionReassignments(AlterPartitionReassignmentsResponse {
        allow_replication_factor_change: req.allow_replication_factor_change,
        responses: results
            .into_iter()
            .map(|t| ReassignableTopicResponse {
                name: t.name,
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| ReassignablePartitionResponse {
                        partition_index: p.partition_index,
                        error_code: p.error.code(),
                        error_message: p.message,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

/// The topics and partition indexes a List names (`None`: all).
pub fn named(req: &ListPartitionReassignmentsRequest) -> Option<Vec<(String, Vec<i32>)>> {
    req.topics.as_ref().map(|topics| topics.iter().map(|t| (t.name.clone(), t.partition_indexes.clone())).collect())
}

pub fn list_response(topics: Vec<TopicOngoingReassignments>) -> ResponseBody {
    ResponseBody::ListPartitionReassignments(ListPartitionReassignmentsResponse {
        topics: topics
            .into_iter()
            .map(|t| OngoingTopicReassignment {
                name: t.name,
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| OngoingPartitionReassignment {
                        partition_index: p.partition_index,
                        replicas: p.replicas,
                        adding_replicas: p.adding_replicas,
                        removing_replicas: p.removing_replicas,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}
