//! DescribeQuorum (55) on a broker, as `kafka-metadata-quorum.sh --bootstrap-server`
//! sends it: a broker of a cluster forwards it to the active controller (as Kafka's
//! brokers do) and returns its answer; a single node is its own quorum of one voter,
//! leading, with the offset of its metadata log as the high watermark.

use super::on_blocking_pool;
use crate::broker::{now_ms, Broker};
use crate::controller_node::describe::METADATA_TOPIC;
use crate::dispatch::Reply;
use osprey_protocol::messages::describe_quorum_response::{Node, PartitionData, ReplicaState, TopicData};
use osprey_protocol::messages::{DescribeQuorumRequest, DescribeQuorumResponse};
use osprey_protocol::{RequestBody, ResponseBody};
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: DescribeQuorumRequest, version: i16) -> Reply {
    if broker.cluster_link().is_none() {
        return Reply::Now(single_node(broker, version));
    }
    on_blocking_pool(broker, move |b| {
        let Some(link) = b.cluster_link() else { return single_node(b, version) };
        link.forward(RequestBody::DescribeQuorum(req), version, false)
    })
}

/// A single node: one voter, itself, leading since it started. Timestamps are v1+ and
/// nodes v2+ fields: older versions carry the defaults.
fn single_node(broker: &Broker, version: i16) -> ResponseBody {
    let node_id = broker.settings.node_id;
    let end = broker.image().applied as i64;
    let now = if version >= 1 { now_ms() } else { -1 };
    let me = ReplicaState {
        replica_id: node_id,
        log_end_offset: end,
        last_fetch_timestamp: now,
        last_caught_up_timestamp: now,
        ..Default::default()
    };
    let partition = PartitionData {
        leader_id: node_id,
        leader_epoch: 1,
        high_watermark: end,
        current_voters: vec![me],
        ..Default::default()
    };
    ResponseBody::DescribeQuorum(DescribeQuorumResponse {
        topics: vec![TopicData {
            topic_name: METADATA_TOPIC.into(),
            partitions: vec![partition],
            ..Default::default()
        }],
        nodes: if version >= 2 { vec![Node { node_id, ..Default::default() }] } else { Vec::new() },
        ..Default::default()
    })
}
