//! DescribeQuorum (55) and DescribeCluster (60) as a controller answers them, from the
//! quorum's state: what `kafka-metadata-quorum.sh --bootstrap-controller H:P describe
//! --status` and `--replication` need (KIP-595, KIP-853, KIP-919).
//!
//! An admin client bootstrapped with controllers finds the cluster with DescribeCluster
//! (endpoint type 2, controllers: KIP-919) instead of Metadata, and sends DescribeQuorum
//! to the active controller it names. Offsets are the metadata log's entry indexes (one
//! entry is one batch); the high watermark is the end of what this member applied.

use super::progress::now_ms;
use super::NodeState;
use osprey_cluster::quorum::ReplicaKey;
use osprey_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use osprey_protocol::messages::describe_quorum_response::{Listener, Node, PartitionData, ReplicaState, TopicData};
use osprey_protocol::messages::{DescribeClusterRequest, DescribeClusterResponse, DescribeQuorumResponse};
use osprey_protocol::{ErrorCode, ResponseBody, Uuid};
use std::collections::BTreeSet;

/// Kafka's name of the metadata log's topic.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

/// DescribeCluster's `endpoint_type` for controllers (KIP-919).
const ENDPOINT_TYPE_CONTROLLER: i8 = 2;

/// DescribeQuorum: the leader answers with every voter and observer; another member
/// answers NOT_LEADER_OR_FOLLOWER for the partition, as Kafka's, and the admin client
/// asks the active controller again.
pub fn quorum(node: &NodeState) -> ResponseBody {
    let quorum = &node.quorum;
    let partition = if quorum.is_leader() {
        leader_view(node, quorum)
    } else {
        PartitionData {
            error_code: ErrorCode::NOT_LEADER_OR_FOLLOWER.code(),
            leader_id: quorum.leader().map_or(-1, |(k, _)| k.node_id),
            leader_epoch: quorum.term() as i32,
            high_watermark: -1,
            ..Default::default()
        }
    };
    let nodes = if partition.error_code == 0 { nodes(node) } else { Vec::new() };
    ResponseBody::DescribeQuorum(DescribeQuorumResponse {
        topics: vec![TopicData {
            topic_name: METADATA_TOPIC.into(),
            partitions: vec![partition],
            ..Default::default()
        }],
        nodes,
        ..Default::default()
    })
}

fn leader_view(node: &NodeState, quorum: &osprey_cluster::quorum::Quorum) -> PartitionData {
    let metrics = quorum.metrics().borrow().clone();
    let me = quorum.replica();
    let leader_end = metrics.last_log_index.map_or(0, |i| i + 1) as i64;
    let now = now_ms();
    let voters: BTreeSet<ReplicaKey> = quorum.voters();
    let state = |key: ReplicaKey| {
        if key == me {
            return ReplicaState {
                replica_id: key.node_id,
                replica_directory_id: Uuid(key.directory_id),
                log_end_offset: leader_end,
                last_fetch_timestamp: now,
                last_caught_up_timestamp: now,
                ..Default::default()
            };
        }
        let matched = metrics.replication.as_ref().and_then(|r| r.get(&key).cloned());
        let log_end_offset = match matched {
            Some(Some(log_id)) => log_id.index as i64 + 1,
            Some(None) => 0,
            None => -1,
        };
        let progress = node.progress.get(key);
        ReplicaState {
            replica_id: key.node_id,
            replica_directory_id: Uuid(key.directory_id),
            log_end_offset,
            last_fetch_timestamp: progress.map_or(-1, |p| p.last_fetch_ms),
            last_caught_up_timestamp: progress.and_then(|p| p.last_caught_up_ms).unwrap_or(-1),
            ..Default::default()
        }
    };
    let observers = quorum.members().into_keys().filter(|k| !voters.contains(k)).map(state).collect();
    PartitionData {
        partition_index: 0,
        leader_id: me.node_id,
        leader_epoch: metrics.current_term as i32,
        high_watermark: metrics.last_applied.map_or(0, |l| l.index as i64 + 1),
        current_voters: voters.iter().copied().map(state).collect(),
        observers,
        ..Default::default()
    }
}

/// Every member with its controller listener (v2's nodes).
fn nodes(node: &NodeState) -> Vec<Node> {
    let quorum = &node.quorum;
    let mut out: Vec<Node> = Vec::new();
    for (key, endpoint) in quorum.members() {
        // A node that replaced its disk is two members for a while: list it once.
        if out.iter().any(|n| n.node_id == key.node_id) {
            continue;
        }
        out.push(Node {
            node_id: key.node_id,
            listeners: vec![Listener {
                name: node.listener_name.clone(),
                host: endpoint.host.clone(),
                port: endpoint.port,
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    out
}

/// DescribeCluster on a controller: the controllers (voters) and the active one. Asked
/// for brokers, a controller answers UNSUPPORTED_ENDPOINT_TYPE, as Kafka's.
pub fn cluster(node: &NodeState, request: &DescribeClusterRequest) -> ResponseBody {
    if request.endpoint_type != ENDPOINT_TYPE_CONTROLLER {
        return ResponseBody::DescribeCluster(DescribeClusterResponse {
            error_code: ErrorCode::UNSUPPORTED_ENDPOINT_TYPE.code(),
            error_message: Some("the controller listener lists controllers only (endpoint type 2)".into()),
            endpoint_type: request.endpoint_type,
            controller_id: -1,
            ..Default::default()
        });
    }
    let quorum = &node.quorum;
    let leader = quorum.leader().map(|(k, _)| k.node_id);
    if leader.is_none() {
        // During an election. An admin client bootstrapped with controllers takes the
        // controller id as the node to send DescribeQuorum to, and with -1 it waits for
        // its next metadata refresh (minutes); a retriable error makes it ask again
        // after its back-off.
        return ResponseBody::DescribeCluster(DescribeClusterResponse {
            error_code: ErrorCode::NOT_CONTROLLER.code(),
            error_message: Some("no active controller yet: an election is in progress".into()),
            endpoint_type: ENDPOINT_TYPE_CONTROLLER,
            controller_id: -1,
            ..Default::default()
        });
    }
    let mut brokers: Vec<DescribeClusterBroker> = Vec::new();
    let voters = quorum.voters();
    for (key, endpoint) in quorum.members().into_iter().filter(|(k, _)| voters.contains(k)) {
        if brokers.iter().any(|b| b.broker_id == key.node_id) {
            continue;
        }
        brokers.push(DescribeClusterBroker {
            broker_id: key.node_id,
            host: endpoint.host,
            port: i32::from(endpoint.port),
            ..Default::default()
        });
    }
    ResponseBody::DescribeCluster(DescribeClusterResponse {
        endpoint_type: ENDPOINT_TYPE_CONTROLLER,
        cluster_id: quorum
            .with_applied(|a| a.image.cluster_id.clone())
            .or_else(|| node.cluster_id())
            .unwrap_or_default(),
        controller_id: leader.unwrap_or(-1),
        brokers,
        ..Default::default()
    })
}
