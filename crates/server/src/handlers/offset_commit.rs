//! OffsetCommit (v2-10): the group coordinator validates member and generation and makes
//! the offsets durable before answering. Partitions of topics this broker does not have
//! are refused here (UNKNOWN_TOPIC_OR_PARTITION; UNKNOWN_TOPIC_ID at v10, which names
//! topics by id: names are filled in for the coordinator and ids mapped back).

use crate::broker::Broker;
use crate::dispatch::Reply;
use osprey_coordinator::group::Response;
use osprey_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use osprey_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};
use osprey_protocol::{ErrorCode, ResponseBody, Uuid};
use std::collections::HashMap;
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, mut req: OffsetCommitRequest, version: i16) -> Reply {
    let image = broker.image();
    let unknown = if version >= 10 { ErrorCode::UNKNOWN_TOPIC_ID } else { ErrorCode::UNKNOWN_TOPIC_OR_PARTITION };
    let mut refused: Vec<OffsetCommitResponseTopic> = Vec::new();
    let mut ids: HashMap<String, Uuid> = HashMap::new();
    for t in &mut req.topics {
        let topic = if version >= 10 { image.topic_by_id(t.topic_id) } else { image.topic(&t.name) };
        let partitions = topic.map_or(0, |t| t.partitions.len() as i32);
        if let Some(topic) = topic {
            t.name = topic.name.clone();
            ids.insert(topic.name.clone(), topic.id);
        }
        let (keep, bad): (Vec<_>, Vec<_>) =
            t.partitions.drain(..).partition(|p| (0..partitions).contains(&p.partition_index));
        t.partitions = keep;
        if !bad.is_empty() {
            refused.push(OffsetCommitResponseTopic {
                name: t.name.clone(),
                topic_id: t.topic_id,
                partitions: bad
                    .iter()
                    .map(|p| OffsetCommitResponsePartition {
                        partition_index: p.partition_index,
                        error_code: unknown.code(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            });
        }
    }
    req.topics.retain(|t| !t.partitions.is_empty());
    let finish = move |mut resp: OffsetCommitResponse| {
        if version >= 10 {
            for t in &mut resp.topics {
                t.topic_id = ids.get(&t.name).copied().unwrap_or_default();
            }
        }
        resp.topics.extend(refused);
        ResponseBody::OffsetCommit(resp)
    };
    if req.topics.is_empty() {
        return Reply::Now(finish(OffsetCommitResponse::default()));
    }
    let rx = broker.groups.call_later(broker, |c, reply, now| c.commit_offsets(&req, version, reply, now));
    Reply::Later(Box::pin(async move {
        // Until the commit is durable: the request's remote time.
        match crate::telemetry::stages::remote_wait(rx).await {
            Ok(Response::OffsetCommit(resp)) => finish(resp),
            _ => {
                let mut resp = OffsetCommitResponse::default();
                for t in &req.topics {
                    resp.topics.push(OffsetCommitResponseTopic {
                        name: t.name.clone(),
                        partitions: t
                            .partitions
                            .iter()
                            .map(|p| OffsetCommitResponsePartition {
                                partition_index: p.partition_index,
                                error_code: ErrorCode::COORDINATOR_NOT_AVAILABLE.code(),
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    });
                }
                finish(resp)
            }
        }
    }))
}
