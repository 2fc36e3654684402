//! DescribeShareGroupOffsets v0-1, AlterShareGroupOffsets v0 and DeleteShareGroupOffsets
//! v0 (KIP-932; `kafka-share-groups.sh --describe`, `--reset-offsets`, `--delete-offsets`),
//! as Kafka's `GroupCoordinatorService` answers them: the group coordinator knows which
//! share partitions of a group have state (`osprey_coordinator::group::share`, its
//! ShareGroupStatePartitionMetadata record); the state itself is the share
//! coordinators', reached through `crate::share_persister`, here or on other brokers.
//!
//! - Describe reads each share partition's start offset and leader epoch; a partition
//!   whose state cannot be read, or a topic that does not exist, is answered with start
//!   offset -1, as absence of data rather than an error (as Kafka). Without topics, the
//!   group's initialized partitions are described.
//! - Alter needs an empty share group: the partitions become initializing, their state is
//!   initialized at the group epoch (which fences a share partition's leader still holding
//!   the old state) and the start offset asked, and those initialized become initialized.
//! - Delete needs an empty share group: a topic whose partitions have state moves to
//!   deleting, their state is deleted, and the topics deleted whole leave deleting.
//!
//! Where Osprey differs: DescribeShareGroupOffsets v1's lag is not computed (-1, "not
//! known", which clients print as such); Kafka 4.4 computes it from the partitions' high
//! watermarks.

use crate::broker::Broker;
use crate::dispatch::Reply;
use crate::handlers::share_state::UNKNOWN_PARTITION_MESSAGE;
use crate::share_persister;
use osprey_coordinator::group::share::{NamedTopic, ShareOffsetsStep, StateTopic};
use osprey_coordinator::group::{ReplyId, Response};
use osprey_coordinator::share_state::{ShareKey, StateSummary};
use osprey_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use osprey_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use osprey_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use osprey_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use osprey_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use osprey_protocol::messages::ListOffsetsRequest;
use osprey_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse, DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse,
};
use osprey_protocol::RequestBody;
use osprey_protocol::{ErrorCode, ResponseBody, Uuid};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Kafka's `UNINITIALIZED_START_OFFSET` and `DEFAULT_LEADER_EPOCH`: no state to show.
const NO_START_OFFSET: i64 = -1;
const NO_LEADER_EPOCH: i32 = -1;
/// Kafka's message for INVALID_GROUP_ID.
const INVALID_GROUP_ID_MESSAGE: &str = "The configured groupId is invalid.";
/// Kafka's message for a topic named in DeleteShareGroupOffsets with no state.
const NOTHING_TO_DELETE_MESSAGE: &str = "There is no offset information to delete.";

/// DescribeShareGroupOffsets: each group's share partitions' start offsets.
pub fn describe(broker: &Arc<Broker>, req: DescribeShareGroupOffsetsRequest) -> Reply {
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let mut groups = Vec::with_capacity(req.groups.len());
        for group in req.groups {
            groups.push(describe_group(&broker, group).await);
        }
        ResponseBody::DescribeShareGroupOffsets(DescribeShareGroupOffsetsResponse { groups, ..Default::default() })
    }))
}

async fn describe_group(
    broker: &Arc<Broker>,
    req: DescribeShareGroupOffsetsRequestGroup,
) -> DescribeShareGroupOffsetsResponseGroup {
    let group_id = req.group_id;
    let mut answer = DescribeShareGroupOffsetsResponseGroup { group_id: group_id.clone(), ..Default::default() };
    // The topics to read: named ones as the metadata knows them, else the group's
    // initialized partitions (of topics that still exist).
    let image = broker.image();
    let asked: Vec<(String, Option<Uuid>, Vec<i32>)> = match req.topics {
        Some(topics) => topics
            .into_iter()
            .map(|t| (t.topic_name.clone(), image.topic(&t.topic_name).map(|i| i.id), t.partitions))
            .collect(),
        None => match broker.groups.call(broker, |c, _| c.share_group_initialized_partitions(&group_id)) {
            Ok(initialized) => initialized
                .into_iter()
                .filter_map(|(id, t)| {
                    let name = image.topic_by_id(id)?.name.clone();
                    Some((name, Some(id), t.partitions.into_iter().collect()))
                })
                .collect(),
            Err(code) => {
                answer.error_code = code.code();
                answer.error_message = Some(format!("{}: this broker does not coordinate the group now", code.name()));
                return answer;
            }
        },
    };
    let mut reads = Vec::new();
    for (topic_name, topic_id, partitions) in asked {
        let Some(topic_id) = topic_id else {
            // Kafka: absence of data, not an error.
            let partitions = partitions
                .into_iter()
                .map(|partition_index| DescribeShareGroupOffsetsResponsePartition {
                    partition_index,
                    start_offset: NO_START_OFFSET,
                    ..Default::default()
                })
                .collect();
            answer.topics.push(DescribeShareGroupOffsetsResponseTopic { topic_name, partitions, ..Default::default() });
            continue;
        };
        let keys = partitions.into_iter().map(|partition| ShareKey { group_id: group_id.clone(), topic_id, partition });
        let summaries = keys
            .map(|key| {
                let broker = broker.clone();
                tokio::spawn(async move {
                    let summary = share_persister::read_summary(&broker, &key, 0).await;
                    let lag = match &summary {
                        Ok(s) => lag(&broker, &key, s).await,
                        Err(_) => Ok(NO_LAG),
                    };
                    (key.partition, summary, lag)
                })
            })
            .collect::<Vec<_>>();
        reads.push((topic_name, topic_id, summaries));
    }
    for (topic_name, topic_id, summaries) in reads {
        let mut partitions = Vec::with_capacity(summaries.len());
        for summary in summaries {
            let Ok((partition_index, summary, lag)) = summary.await else { continue };
            let (start_offset, leader_epoch) = match summary {
                Ok(s) => (s.start_offset, s.leader_epoch),
                Err(_) => (NO_START_OFFSET, NO_LEADER_EPOCH),
            };
            let mut partition = DescribeShareGroupOffsetsResponsePartition {
                partition_index,
                start_offset,
                leader_epoch,
                ..Default::default()
            };
            match lag {
                Ok(lag) => partition.lag = lag,
                // Kafka answers the partition with the error of its offset lookup.
                Err(code) => {
                    partition.error_code = code.code();
                    partition.error_message = Some(code.name().to_string());
                }
            }
            partitions.push(partition);
        }
        answer.topics.push(DescribeShareGroupOffsetsResponseTopic {
            topic_name,
            topic_id,
            partitions,
            ..Default::default()
        });
    }
    answer
}

/// DescribeShareGroupOffsets v1's `Lag` when not known.
const NO_LAG: i64 = -1;

/// A share partition's lag as Kafka 4.4 computes it (KIP-1226): the partition's latest
/// offset (its high watermark) less the start offset, less the records at or after it that
/// are done with (`DeliveryCompleteCount`); not known (-1) without a start offset or that
/// count. The high watermark is this broker's when it leads the partition, else its
/// leader's (ListOffsets, latest).
async fn lag(broker: &Arc<Broker>, key: &ShareKey, s: &StateSummary) -> Result<i64, ErrorCode> {
    if s.start_offset == NO_START_OFFSET || s.delivery_complete_count == -1 {
        return Ok(NO_LAG);
    }
    let latest = latest_offset(broker, key.topic_id, key.partition).await?;
    Ok(latest - s.start_offset - i64::from(s.delivery_complete_count))
}

/// The high watermark of a topic partition, from its leader.
async fn latest_offset(broker: &Arc<Broker>, topic_id: Uuid, partition: i32) -> Result<i64, ErrorCode> {
    if let Some(p) = broker.replica_manager.partition(topic_id, partition) {
        return Ok(p.snapshot().high_watermark);
    }
    let image = broker.image();
    let topic = image.topic_by_id(topic_id).ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
    let leader = image.partition(topic_id, partition).ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?.leader;
    let address =
        crate::txn_interbroker::inter_broker_address(broker, &image, leader).ok_or(ErrorCode::LEADER_NOT_AVAILABLE)?;
    let request = ListOffsetsRequest {
        replica_id: -1,
        topics: vec![ListOffsetsTopic {
            name: topic.name.clone(),
            partitions: vec![ListOffsetsPartition { partition_index: partition, timestamp: -1, ..Default::default() }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let client = broker.share_partitions.persister_clients().client(broker, leader, address);
    let response = client.send(RequestBody::ListOffsets(request)).await.map_err(|_| ErrorCode::NETWORK_EXCEPTION)?;
    let ResponseBody::ListOffsets(r) = response.body else { return Err(ErrorCode::UNKNOWN_SERVER_ERROR) };
    let p = r.topics.into_iter().flat_map(|t| t.partitions).find(|p| p.partition_index == partition);
    let p = p.ok_or(ErrorCode::UNKNOWN_SERVER_ERROR)?;
    match ErrorCode::from_code(p.error_code).unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR) {
        ErrorCode::NONE => Ok(p.offset),
        code => Err(code),
    }
}

/// AlterShareGroupOffsets: the start offsets of an empty share group's partitions set.
pub fn alter(broker: &Arc<Broker>, req: AlterShareGroupOffsetsRequest) -> Reply {
    let broker = broker.clone();
    let group_id = req.group_id.clone();
    for_group(&group_id, ResponseBody::AlterShareGroupOffsets, async move {
        let refused = AlterShareGroupOffsetsResponse::refused;
        // What exists of each topic asked: the coordinator initializes those partitions.
        let image = broker.image();
        let mut responses = Vec::new();
        let mut altered: BTreeMap<Uuid, StateTopic> = BTreeMap::new();
        let mut start_offsets: BTreeMap<(Uuid, i32), i64> = BTreeMap::new();
        for topic in &req.topics {
            let info = image.topic(&topic.topic_name);
            let mut response = AlterShareGroupOffsetsResponseTopic {
                topic_name: topic.topic_name.clone(),
                topic_id: info.map_or(Uuid::ZERO, |i| i.id),
                ..Default::default()
            };
            for p in &topic.partitions {
                let known = info.filter(|i| usize::try_from(p.partition_index).is_ok_and(|n| n < i.partitions.len()));
                let (error_code, error_message) = match known {
                    Some(info) => {
                        let name = || StateTopic { name: topic.topic_name.clone(), ..Default::default() };
                        altered.entry(info.id).or_insert_with(name).partitions.insert(p.partition_index);
                        start_offsets.insert((info.id, p.partition_index), p.start_offset);
                        (ErrorCode::NONE.code(), None)
                    }
                    None => (ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code(), Some(UNKNOWN_PARTITION_MESSAGE.to_string())),
                };
                response.partitions.push(AlterShareGroupOffsetsResponsePartition {
                    partition_index: p.partition_index,
                    error_code,
                    error_message,
                    ..Default::default()
                });
            }
            responses.push(response);
        }
        let group_id = req.group_id;
        let begun = step(&broker, |c, reply| c.begin_share_group_offsets_alter(&group_id, &altered, reply)).await;
        let state_epoch = match begun {
            ShareOffsetsStep::AlterBegun { state_epoch } => state_epoch,
            ShareOffsetsStep::Refused { code, message } => {
                return ResponseBody::AlterShareGroupOffsets(refused(code, &message))
            }
            other => unreachable!("{other:?} answers no alter"),
        };
        // Each partition's state made fresh at its new start offset, on its share
        // coordinator; those done become initialized, the others keep their error.
        let inits: Vec<_> = start_offsets
            .into_iter()
            .map(|((topic_id, partition), start_offset)| {
                let broker = broker.clone();
                let key = ShareKey { group_id: group_id.clone(), topic_id, partition };
                tokio::spawn(async move {
                    let result = share_persister::initialize(&broker, &key, state_epoch, start_offset).await;
                    (key, result)
                })
            })
            .collect();
        let mut initialized: BTreeMap<Uuid, StateTopic> = BTreeMap::new();
        let mut failed = BTreeMap::new();
        for init in inits {
            let Ok((key, result)) = init.await else { continue };
            match result {
                Ok(()) => {
                    let name = altered.get(&key.topic_id).map(|t| t.name.clone()).unwrap_or_default();
                    let topic =
                        initialized.entry(key.topic_id).or_insert_with(|| StateTopic { name, ..Default::default() });
                    topic.partitions.insert(key.partition);
                }
                Err(e) => {
                    failed.insert((key.topic_id, key.partition), e);
                }
            }
        }
        if let ShareOffsetsStep::Refused { code, message } =
            step(&broker, |c, reply| c.share_group_partitions_initialized(&group_id, &initialized, reply)).await
        {
            return ResponseBody::AlterShareGroupOffsets(refused(code, &message));
        }
        for topic in &mut responses {
            for p in &mut topic.partitions {
                if let Some(e) = failed.remove(&(topic.topic_id, p.partition_index)) {
                    p.error_code = e.code.code();
                    p.error_message = Some(e.message);
                }
            }
        }
        ResponseBody::AlterShareGroupOffsets(AlterShareGroupOffsetsResponse { responses, ..Default::default() })
    })
}

/// DeleteShareGroupOffsets: the state of an empty share group's partitions of the topics
/// named deleted.
pub fn delete(broker: &Arc<Broker>, req: DeleteShareGroupOffsetsRequest) -> Reply {
    let broker = broker.clone();
    let group_id = req.group_id.clone();
    for_group(&group_id, ResponseBody::DeleteShareGroupOffsets, async move {
        let refused = DeleteShareGroupOffsetsResponse::refused;
        let image = broker.image();
        let mut responses = Vec::new();
        let mut named = Vec::new();
        for topic in &req.topics {
            match image.topic(&topic.topic_name) {
                Some(info) => named.push(NamedTopic {
                    name: topic.topic_name.clone(),
                    topic_id: info.id,
                    num_partitions: i32::try_from(info.partitions.len()).unwrap_or(i32::MAX),
                }),
                None => responses.push(topic_error(
                    &topic.topic_name,
                    Uuid::ZERO,
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    UNKNOWN_PARTITION_MESSAGE,
                )),
            }
        }
        let group_id = req.group_id;
        let (delete, nothing_to_delete) =
            match step(&broker, |c, reply| c.begin_share_group_offsets_delete(&group_id, &named, reply)).await {
                ShareOffsetsStep::DeleteBegun { delete, nothing_to_delete } => (delete, nothing_to_delete),
                ShareOffsetsStep::Refused { code, message } => {
                    return ResponseBody::DeleteShareGroupOffsets(refused(code, &message))
                }
                other => unreachable!("{other:?} answers no delete"),
            };
        for name in nothing_to_delete {
            let topic_id = image.topic(&name).map_or(Uuid::ZERO, |t| t.id);
            responses.push(topic_error(
                &name,
                topic_id,
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                NOTHING_TO_DELETE_MESSAGE,
            ));
        }
        // Each topic's partitions deleted on their share coordinators; a topic with a
        // failed partition is answered with that error and stays deleting.
        let deletes: Vec<_> = delete
            .into_iter()
            .map(|(topic_id, partitions)| {
                let tasks: Vec<_> = partitions
                    .into_iter()
                    .map(|partition| {
                        let broker = broker.clone();
                        let key = ShareKey { group_id: group_id.clone(), topic_id, partition };
                        tokio::spawn(async move { share_persister::delete(&broker, &key).await })
                    })
                    .collect();
                (topic_id, tasks)
            })
            .collect();
        let mut deleted = BTreeSet::new();
        for (topic_id, tasks) in deletes {
            let mut error = None;
            for task in tasks {
                let result = task.await.unwrap_or_else(|_| {
                    Err(osprey_coordinator::share_state::StateError {
                        code: ErrorCode::UNKNOWN_SERVER_ERROR,
                        message: "the deletion did not finish".into(),
                    })
                });
                if let Err(e) = result {
                    error.get_or_insert(e);
                }
            }
            let name = named.iter().find(|t| t.topic_id == topic_id).map(|t| t.name.clone()).unwrap_or_default();
            match error {
                Some(e) => responses.push(topic_error(&name, topic_id, e.code, &e.message)),
                None => {
                    deleted.insert(topic_id);
                    responses.push(DeleteShareGroupOffsetsResponseTopic {
                        topic_name: name,
                        topic_id,
                        ..Default::default()
                    });
                }
            }
        }
        if !deleted.is_empty() {
            if let ShareOffsetsStep::Refused { code, message } =
                step(&broker, |c, reply| c.share_group_offsets_deleted(&group_id, &deleted, reply)).await
            {
                return ResponseBody::DeleteShareGroupOffsets(refused(code, &message));
            }
        }
        ResponseBody::DeleteShareGroupOffsets(DeleteShareGroupOffsetsResponse { responses, ..Default::default() })
    })
}

/// `work`'s answer, once it comes; INVALID_GROUP_ID at once for an empty group id, as
/// Kafka's `GroupCoordinatorService` answers it.
fn for_group<R: RefusedWhole>(
    group_id: &str,
    body: fn(R) -> ResponseBody,
    work: impl std::future::Future<Output = ResponseBody> + Send + 'static,
) -> Reply {
    if group_id.is_empty() {
        return Reply::Now(body(R::refused(ErrorCode::INVALID_GROUP_ID, INVALID_GROUP_ID_MESSAGE)));
    }
    Reply::Later(Box::pin(work))
}

/// AlterShareGroupOffsets' and DeleteShareGroupOffsets' answers refused whole: the
/// group's error and its message, nothing else (Kafka's `getErrorResponse`).
pub trait RefusedWhole {
    fn refused(code: ErrorCode, message: &str) -> Self;
}

macro_rules! refused_whole {
    ($($response:ty),+) => {$(
        impl RefusedWhole for $response {
            fn refused(code: ErrorCode, message: &str) -> Self {
                Self { error_code: code.code(), error_message: Some(message.to_string()), ..Default::default() }
            }
        }
    )+};
}
refused_whole!(AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsResponse);

fn topic_error(name: &str, topic_id: Uuid, code: ErrorCode, message: &str) -> DeleteShareGroupOffsetsResponseTopic {
    DeleteShareGroupOffsetsResponseTopic {
        topic_name: name.to_string(),
        topic_id,
        error_code: code.code(),
        error_message: Some(message.to_string()),
        ..Default::default()
    }
}

/// One step on the group coordinator, its answer once its record is durable.
async fn step(
    broker: &Arc<Broker>,
    op: impl FnOnce(&mut osprey_coordinator::group::GroupCoordinator, ReplyId),
) -> ShareOffsetsStep {
    let rx = broker.groups.call_later(broker, |c, reply, _| op(c, reply));
    match crate::telemetry::stages::remote_wait(rx).await {
        Ok(Response::ShareGroupOffsets(step)) => step,
        // The coordinator dropped the reply, or answered something else (a bug): the
        // client must still get an answer.
        _ => ShareOffsetsStep::Refused {
            code: ErrorCode::COORDINATOR_NOT_AVAILABLE,
            message: "the group coordinator did not answer".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{answer, broker_with_config};
    use osprey_cluster::NewTopic;
    use osprey_protocol::messages::{
        alter_share_group_offsets_request as alter_req, delete_share_group_offsets_request as delete_req,
        describe_share_group_offsets_request as describe_req, ShareGroupHeartbeatRequest,
    };
    use osprey_protocol::{ApiKey, RequestBody};
    use std::path::PathBuf;

    const UNKNOWN: i16 = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION as i16;

    /// A single node with share groups on, a topic `t` of two partitions, the share
    /// coordinator's topic, and member `m` of share group `queue` subscribed to `t`.
    async fn broker(name: &str) -> (Arc<Broker>, PathBuf, Uuid) {
        let (broker, dir) = broker_with_config(name, |c| c.share_version = 1);
        let b = broker.clone();
        let t = tokio::task::spawn_blocking(move || {
            let topic = NewTopic { name: "t".into(), num_partitions: 2, replication_factor: 1, ..Default::default() };
            let t = b.create_topic(&topic, false).unwrap().id;
            crate::share_states::ensure_share_state_topic(&b).unwrap();
            t
        })
        .await
        .unwrap();
        assert_eq!(heartbeat(&broker, 0, Some(vec!["t".into()])).await, 0);
        (broker, dir, t)
    }

    async fn heartbeat(broker: &Arc<Broker>, member_epoch: i32, topics: Option<Vec<String>>) -> i16 {
        let req = ShareGroupHeartbeatRequest {
            group_id: "queue".into(),
            member_id: "m".into(),
            member_epoch,
            subscribed_topic_names: topics,
            ..Default::default()
        };
        match answer(broker, ApiKey::ShareGroupHeartbeat, 1, RequestBody::ShareGroupHeartbeat(req)).await {
            ResponseBody::ShareGroupHeartbeat(r) => r.error_code,
            other => panic!("{other:?}"),
        }
    }

    /// Each topic described, with (partition, start offset, error) of its partitions.
    async fn describe(broker: &Arc<Broker>, topics: Option<&[(&str, &[i32])]>) -> Vec<(String, Vec<(i32, i64, i16)>)> {
        let topics = topics.map(|ts| {
            ts.iter()
                .map(|(name, ps)| describe_req::DescribeShareGroupOffsetsRequestTopic {
                    topic_name: name.to_string(),
                    partitions: ps.to_vec(),
                    ..Default::default()
                })
                .collect()
        });
        let group = DescribeShareGroupOffsetsRequestGroup { group_id: "queue".into(), topics, ..Default::default() };
        let req = DescribeShareGroupOffsetsRequest { groups: vec![group], ..Default::default() };
        let body =
            answer(broker, ApiKey::DescribeShareGroupOffsets, 1, RequestBody::DescribeShareGroupOffsets(req)).await;
        let ResponseBody::DescribeShareGroupOffsets(mut resp) = body else { panic!("{body:?}") };
        let group = resp.groups.remove(0);
        assert_eq!(group.error_code, 0);
        group
            .topics
            .into_iter()
            .map(|t| {
                (t.topic_name, t.partitions.iter().map(|p| (p.partition_index, p.start_offset, p.error_code)).collect())
            })
            .collect()
    }

    async fn alter(broker: &Arc<Broker>, partitions: &[(i32, i64)]) -> AlterShareGroupOffsetsResponse {
        let partitions = partitions
            .iter()
            .map(|&(partition_index, start_offset)| alter_req::AlterShareGroupOffsetsRequestPartition {
                partition_index,
                start_offset,
                ..Default::default()
            })
            .collect();
        let topics = vec![alter_req::AlterShareGroupOffsetsRequestTopic {
            topic_name: "t".into(),
            partitions,
            ..Default::default()
        }];
        let req = AlterShareGroupOffsetsRequest { group_id: "queue".into(), topics, ..Default::default() };
        match answer(broker, ApiKey::AlterShareGroupOffsets, 0, RequestBody::AlterShareGroupOffsets(req)).await {
            ResponseBody::AlterShareGroupOffsets(r) => r,
            other => panic!("{other:?}"),
        }
    }

    async fn delete(broker: &Arc<Broker>, topics: &[&str]) -> DeleteShareGroupOffsetsResponse {
        let topics = topics
            .iter()
            .map(|name| delete_req::DeleteShareGroupOffsetsRequestTopic {
                topic_name: name.to_string(),
                ..Default::default()
            })
            .collect();
        let req = DeleteShareGroupOffsetsRequest { group_id: "queue".into(), topics, ..Default::default() };
        match answer(broker, ApiKey::DeleteShareGroupOffsets, 0, RequestBody::DeleteShareGroupOffsets(req)).await {
            ResponseBody::DeleteShareGroupOffsets(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// What `kafka-share-groups.sh` does: describe a group's start offsets, reset them once
    /// it is empty, delete them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_share_groups_offsets_are_described_reset_and_deleted() {
        let (broker, dir, t) = broker("share-group-offsets").await;
        let key = ShareKey { group_id: "queue".into(), topic_id: t, partition: 0 };
        share_persister::initialize(&broker, &key, 0, 5).await.unwrap();
        // All the group's partitions; one without state yet is -1, as a missing topic.
        let all = describe(&broker, None).await;
        assert_eq!(all, [("t".to_string(), vec![(0, 5, 0), (1, -1, 0)])]);
        let named = describe(&broker, Some(&[("t", &[0]), ("gone", &[3])])).await;
        // Missing topics first, then those read, as Kafka lists them.
        assert_eq!(named, [("gone".to_string(), vec![(3, -1, 0)]), ("t".to_string(), vec![(0, 5, 0)])]);

        // Reset: refused while the member is there.
        let refused = alter(&broker, &[(0, 2)]).await;
        assert_eq!(refused.error_code, ErrorCode::NON_EMPTY_GROUP.code());
        assert_eq!(heartbeat(&broker, -1, None).await, 0);
        let altered = alter(&broker, &[(0, 2), (7, 0)]).await;
        let codes: Vec<_> = altered.responses[0].partitions.iter().map(|p| (p.partition_index, p.error_code)).collect();
        assert_eq!((altered.error_code, altered.responses[0].topic_id, codes), (0, t, vec![(0, 0), (7, UNKNOWN)]));
        assert_eq!(describe(&broker, Some(&[("t", &[0])])).await, [("t".to_string(), vec![(0, 2, 0)])]);
        let summary = share_persister::read_summary(&broker, &key, 0).await.unwrap();
        let group_epoch = broker.groups.call(&broker, |c, _| c.share_group("queue").unwrap().group_epoch);
        assert_eq!(summary.state_epoch, group_epoch, "initialised at the group epoch, fencing an old leader");

        // Delete: the topic's state goes; a missing topic and one without state are errors.
        let deleted = delete(&broker, &["t", "gone"]).await;
        let codes: Vec<_> = deleted.responses.iter().map(|t| (t.topic_name.as_str(), t.error_code)).collect();
        assert_eq!((deleted.error_code, codes), (0, vec![("gone", UNKNOWN), ("t", 0)]));
        assert_eq!(describe(&broker, Some(&[("t", &[0])])).await, [("t".to_string(), vec![(0, -1, 0)])]);
        let again = delete(&broker, &["t"]).await;
        assert_eq!(again.responses[0].error_message.as_deref(), Some(NOTHING_TO_DELETE_MESSAGE));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// DeleteGroups of an empty share group deletes its share partitions' state first, as
    /// Kafka does: a group of the same name later starts afresh, not where this one stopped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deleting_a_share_group_deletes_its_share_state() {
        let (broker, dir, t) = broker("share-group-delete").await;
        let key = ShareKey { group_id: "queue".into(), topic_id: t, partition: 0 };
        share_persister::initialize(&broker, &key, 0, 5).await.unwrap();
        let delete_group = || {
            let req = osprey_protocol::messages::DeleteGroupsRequest {
                groups_names: vec!["queue".into()],
                ..Default::default()
            };
            answer(&broker, ApiKey::DeleteGroups, 2, RequestBody::DeleteGroups(req))
        };
        let ResponseBody::DeleteGroups(refused) = delete_group().await else { panic!() };
        assert_eq!(refused.results[0].error_code, ErrorCode::NON_EMPTY_GROUP.code(), "{refused:?}");
        assert_eq!(share_persister::read_summary(&broker, &key, 0).await.unwrap().start_offset, 5, "kept");
        assert_eq!(heartbeat(&broker, -1, None).await, 0);
        let ResponseBody::DeleteGroups(deleted) = delete_group().await else { panic!() };
        assert_eq!(deleted.results[0].error_code, 0, "{deleted:?}");
        assert_eq!(share_persister::read_summary(&broker, &key, 0).await.unwrap().start_offset, -1, "deleted");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `share.version` 0: Kafka's UNSUPPORTED_VERSION, per group for Describe.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn share_group_offsets_are_unsupported_while_share_version_is_0() {
        let (broker, dir) = broker_with_config("share-group-offsets-off", |c| c.share_version = 0);
        let unsupported = ErrorCode::UNSUPPORTED_VERSION.code();
        let group = DescribeShareGroupOffsetsRequestGroup { group_id: "queue".into(), ..Default::default() };
        let req = DescribeShareGroupOffsetsRequest { groups: vec![group], ..Default::default() };
        let body =
            answer(&broker, ApiKey::DescribeShareGroupOffsets, 1, RequestBody::DescribeShareGroupOffsets(req)).await;
        let ResponseBody::DescribeShareGroupOffsets(described) = body else { panic!() };
        assert_eq!(described.groups[0].error_code, unsupported);
        assert_eq!(alter(&broker, &[(0, 0)]).await.error_code, unsupported);
        assert_eq!(delete(&broker, &["t"]).await.error_code, unsupported);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
