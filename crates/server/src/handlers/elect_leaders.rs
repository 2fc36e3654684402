//! ElectLeaders (43), as `kafka-leader-election.sh` sends it: a preferred election moves
//! a partition's leadership back to its first replica, an unclean one gives a partition
//! without a leader any live replica. In a cluster the broker forwards the request to the
//! active controller, as Kafka's brokers do, and answers once its own image shows the
//! new leaders. A single node leads every partition it has, so there every partition
//! named gets ELECTION_NOT_NEEDED (or UNKNOWN_TOPIC_OR_PARTITION), from the same
//! decision the controller makes.

use super::on_blocking_pool;
use crate::broker::Broker;
use crate::dispatch::Reply;
use osprey_cluster::elect_leaders::{ElectionType, TopicElectionResult};
use osprey_cluster::ControllerError;
use osprey_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use osprey_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};
use osprey_protocol::{ApiKey, ErrorCode, RequestBody, ResponseBody};
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: ElectLeadersRequest, version: i16) -> Reply {
    on_blocking_pool(broker, move |b| {
        if let Some(link) = b.cluster_link() {
            return link.forward(RequestBody::ElectLeaders(req), version, true);
        }
        let answer = parse(&req).and_then(|(election, named)| b.elect_leaders(election, named.as_deref()));
        let response = match answer {
            Ok(results) => response(results),
            Err(e) => {
                crate::telemetry::error_code(ApiKey::ElectLeaders, e.code);
                failed(&req, e.code, Some(e.message))
            }
        };
        ResponseBody::ElectLeaders(response)
    })
}

/// The election type and the partitions named (`None`: every partition).
pub type ParsedElection = (ElectionType, Option<Vec<(String, Vec<i32>)>>);

/// The request's election type (an unknown one is INVALID_REQUEST for the whole
/// request) and the partitions it names.
pub fn parse(r: &ElectLeadersRequest) -> Result<ParsedElection, ControllerError> {
    let election = ElectionType::from_wire(r.election_type)?;
    let named =
        r.topic_partitions.as_ref().map(|ts| ts.iter().map(|t| (t.topic.clone(), t.partitions.clone())).collect());
    Ok((election, named))
}

/// The controller's per-partition answers on the wire.
pub fn response(results: Vec<TopicElectionResult>) -> ElectLeadersResponse {
    let replica_election_results = results
        .into_iter()
        .map(|t| ReplicaElectionResult {
            topic: t.topic,
            partition_result: t
                .partitions
                .into_iter()
                .map(|p| PartitionResult {
                    partition_id: p.partition_id,
                    error_code: p.error.code(),
                    error_message: p.message,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    ElectLeadersResponse { replica_election_results, ..Default::default() }
}

/// Kafka's `ElectLeadersRequest.getErrorResponse`: the code at the top (v1+) and on every
/// partition named.
pub fn failed(r: &ElectLeadersRequest, code: ErrorCode, message: Option<String>) -> ElectLeadersResponse {
    let replica_election_results = r
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| ReplicaElectionResult {
            topic: t.topic.clone(),
            partition_result: t
                .partitions
                .iter()
                .map(|&partition_id| PartitionResult {
                    partition_id,
                    error_code: code.code(),
                    error_message: message.clone(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    ElectLeadersResponse { error_code: code.code(), replica_election_results, ..Default::default() }
}
