//! OffsetFetch (v1-10): committed offsets per group, one group (v1-7) or many (v8+);
//! `require_stable` (v7+) reports UNSTABLE_OFFSET_COMMIT for commits not yet durable.

use crate::broker::Broker;
use osprey_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics;
use osprey_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use osprey_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse};
use osprey_protocol::{ErrorCode, ResponseBody};
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: OffsetFetchRequest, version: i16) -> ResponseBody {
    if version < 8 {
        let topics: Option<Vec<OffsetFetchRequestTopics>> = req.topics.map(|ts| {
            ts.into_iter()
                .map(|t| OffsetFetchRequestTopics {
                    name: t.name,
                    partition_indexes: t.partition_indexes,
                    ..Default::default()
                })
                .collect()
        });
        let mut group = fetch(broker, &req.group_id, topics.clone(), req.require_stable);
        if version < 2 && group.error_code != 0 {
            group.topics = error_on_every_partition(topics.as_deref().unwrap_or_default(), group.error_code);
        }
        return ResponseBody::OffsetFetch(flatten(group, version));
    }
    let mut resp = OffsetFetchResponse::default();
    for g in req.groups {
        let by_id = version >= 10;
        let image = broker.image();
        let topics = g.topics.map(|ts| {
            ts.into_iter()
                .map(|mut t| {
                    if by_id {
                        t.name = image.topic_by_id(t.topic_id).map(|x| x.name.clone()).unwrap_or_default();
                    }
                    t
                })
                .collect::<Vec<_>>()
        });
        // Members of a consumer group (KIP-848) fetch with their member epoch (v9+).
        let member_check = if version >= 9 {
            broker
                .groups
                .call(broker, |c, _| c.validate_offset_fetch(&g.group_id, g.member_id.as_deref(), g.member_epoch))
        } else {
            Ok(())
        };
        if let Err(code) = member_check {
            resp.groups.push(OffsetFetchResponseGroup {
                group_id: g.group_id,
                error_code: code.code(),
                ..Default::default()
            });
            continue;
        }
        let mut group = fetch(broker, &g.group_id, topics, req.require_stable);
        if by_id {
            for t in &mut group.topics {
                match image.topic(&t.name) {
                    Some(topic) => t.topic_id = topic.id,
                    None => {
                        for p in &mut t.partitions {
                            p.error_code = ErrorCode::UNKNOWN_TOPIC_ID.code();
                        }
                    }
                }
            }
        }
        resp.groups.push(group);
    }
    ResponseBody::OffsetFetch(resp)
}

fn fetch(
    broker: &Arc<Broker>,
    group_id: &str,
    topics: Option<Vec<OffsetFetchRequestTopics>>,
    require_stable: bool,
) -> OffsetFetchResponseGroup {
    let (group, loaded) = broker.groups.call(broker, |c, _| {
        (c.fetch_offsets(group_id, topics.as_deref(), require_stable), c.loaded_partition_of(group_id))
    });
    match loaded {
        Some((index, epoch)) if group.error_code == 0 => {
            match crate::groups::confirm_offsets_read(broker, index, epoch) {
                Ok(()) => group,
                Err(code) => OffsetFetchResponseGroup {
                    group_id: group_id.to_string(),
                    error_code: code.code(),
                    ..Default::default()
                },
            }
        }
        _ => group,
    }
}

/// v0-1 have no group-level error: Kafka puts the group's (NOT_COORDINATOR,
/// COORDINATOR_LOAD_IN_PROGRESS...) on every requested partition, with no offset, so
/// that an old client retries rather than take "no committed offset" for an answer.
fn error_on_every_partition(requested: &[OffsetFetchRequestTopics], error_code: i16) -> Vec<OffsetFetchResponseTopics> {
    requested
        .iter()
        .map(|t| OffsetFetchResponseTopics {
            name: t.name.clone(),
            partitions: t
                .partition_indexes
                .iter()
                .map(|&partition_index| OffsetFetchResponsePartitions {
                    partition_index,
                    committed_offset: -1,
                    committed_leader_epoch: -1,
                    metadata: Some(String::new()),
                    error_code,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect()
}

/// The v1-7 shape: one group's topics at the top level, its error code there from v2.
fn flatten(group: OffsetFetchResponseGroup, version: i16) -> OffsetFetchResponse {
    OffsetFetchResponse {
        topics: group
            .topics
            .into_iter()
            .map(|t| OffsetFetchResponseTopic {
                name: t.name,
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| OffsetFetchResponsePartition {
                        partition_index: p.partition_index,
                        committed_offset: p.committed_offset,
                        committed_leader_epoch: if version >= 5 { p.committed_leader_epoch } else { -1 },
                        metadata: p.metadata,
                        error_code: p.error_code,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        error_code: if version >= 2 { group.error_code } else { 0 },
        ..Default::default()
    }
}
