//! DescribeTopicPartitions (KIP-966): topics and partitions with a cursor, for admin
//! clients describing large topics.

use crate::authorized_operations;
use crate::broker::Broker;
use crate::metadata_cache::MetadataCache;
use osprey_cluster::image::NO_LEADER;
use osprey_cluster::TopicImage;
use osprey_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use osprey_protocol::messages::{DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse};
use osprey_protocol::{ErrorCode, ResponseBody};
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: DescribeTopicPartitionsRequest, listener: &str) -> ResponseBody {
    let cache = MetadataCache::for_listener(broker, listener);
    let image = cache.image();
    let mut names: Vec<String> = if req.topics.is_empty() {
        image.topics().map(|t| t.name.clone()).collect()
    } else {
        req.topics.iter().map(|t| t.name.clone()).collect()
    };
    names.sort();
    let (start_topic, start_partition) =
        req.cursor.as_ref().map_or((String::new(), 0), |c| (c.topic_name.clone(), c.partition_index));
    let mut budget = req.response_partition_limit.max(1) as usize;
    let mut resp = DescribeTopicPartitionsResponse::default();
    for name in names.into_iter().filter(|n| *n >= start_topic) {
        let Some(topic) = image.topic(&name) else {
            resp.topics.push(DescribeTopicPartitionsResponseTopic {
                error_code: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code(),
                name: Some(name),
                topic_authorized_operations: authorized_operations::TOPIC,
                ..Default::default()
            });
            continue;
        };
        let first = if name == start_topic { start_partition } else { 0 };
        let (described, next) = describe(&cache, topic, first, budget);
        budget -= described.partitions.len();
        resp.topics.push(described);
        if let Some(partition_index) = next {
            resp.next_cursor = Some(Cursor { topic_name: name, partition_index, ..Default::default() });
            break;
        }
    }
    ResponseBody::DescribeTopicPartitions(resp)
}

/// The topic's partitions from `first`, at most `budget`; the next index if cut short.
/// As Kafka's `getPartitionMetadataForDescribeTopicResponse`: leader -1 when it is not
/// registered on the client's listener (no error code: this response has none per
/// partition), and the replicas on fenced or unregistered brokers as offline.
fn describe(
    cache: &MetadataCache,
    topic: &TopicImage,
    first: i32,
    budget: usize,
) -> (DescribeTopicPartitionsResponseTopic, Option<i32>) {
    let partitions: Vec<_> = topic.partitions.iter().filter(|p| p.index >= first).collect();
    let next = partitions.get(budget).map(|p| p.index);
    let out = DescribeTopicPartitionsResponseTopic {
        name: Some(topic.name.clone()),
        topic_id: topic.id,
        is_internal: topic.name.starts_with("__"),
        // No request flag here: Kafka always reports them (KIP-966).
        topic_authorized_operations: authorized_operations::TOPIC,
        partitions: partitions
            .into_iter()
            .take(budget)
            .map(|p| DescribeTopicPartitionsResponsePartition {
                partition_index: p.index,
                leader_id: cache.leader(p).map_or(NO_LEADER, |leader| leader.node_id),
                leader_epoch: p.leader_epoch,
                replica_nodes: p.replicas.clone(),
                isr_nodes: p.isr.clone(),
                offline_replicas: cache.offline_replicas(&p.replicas),
                eligible_leader_replicas: Some(p.elr.clone()),
                last_known_elr: Some(p.last_known_elr.clone()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    (out, next)
}
