//! What each API asks the authorizer, and how a refusal is answered: Kafka's `KafkaApis`
//! checks, applied before a request reaches its handler (`handlers::handle`), only when
//! `authorizer.class.name` is set.
//!
//! A request is refused whole (answered here with Kafka's error in every error field),
//! or narrowed to the resources the client may use, in which case the handler answers
//! for those and the refused ones are added to its answer with their error, as Kafka
//! answers them side by side. Read-only answers that list resources (Metadata without
//! topics, ListGroups, OffsetFetch of all topics) are filtered after the handler, and the
//! KIP-430 `authorized_operations` fields filled in from the authorizer.

use crate::access::{kind, op, Access};
use crate::authorized_operations;
use crate::handlers::share_group_offsets::RefusedWhole;
use crate::handlers::share_state::StateRequest;
use osprey_cluster::MetadataImage;
use osprey_protocol::messages::*;
use osprey_protocol::{ErrorCode, RequestBody, ResponseBody, Uuid};
use std::collections::BTreeSet;

/// Turns the handler's answer into the client's: adds the refused resources, drops
/// what the client may not see.
pub type Finish = Box<dyn FnOnce(ResponseBody) -> ResponseBody + Send>;

/// What happens to a request once the authorizer has been asked.
// One per request, moved straight into the handler or the answer: boxing the request
// would add an allocation to every request for nothing.
#[allow(clippy::large_enum_variant)]
pub enum Gate {
    /// Refused whole: send this.
    Refuse(ResponseBody),
    /// Handle this request (perhaps narrowed), then apply `Finish` to the answer.
    Handle(RequestBody, Option<Finish>),
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gate::Refuse(body) => f.debug_tuple("Refuse").field(body).finish(),
            Gate::Handle(body, finish) => f.debug_tuple("Handle").field(body).field(&finish.is_some()).finish(),
        }
    }
}

/// Kafka's messages for the authorization errors (`Errors.*.message()`).
const TOPIC_DENIED: &str = "Topic authorization failed.";
const CLUSTER_DENIED: &str = "Cluster authorization failed.";
const GROUP_DENIED: &str = "Group authorization failed.";

/// Kafka's `ConfigResource.Type` codes.
const CONFIG_TOPIC: i8 = 2;
const CONFIG_BROKER: i8 = 4;
const CONFIG_BROKER_LOGGER: i8 = 8;
const CONFIG_GROUP: i8 = 32;

/// The checks of one request, read at `version`, by the client `access` describes.
pub fn gate(access: &Access, body: RequestBody, version: i16) -> Gate {
    use RequestBody as R;
    match body {
        R::Produce(r) => produce(access, r),
        R::Fetch(r) => fetch(access, r),
        R::ListOffsets(r) => list_offsets(access, r),
        R::OffsetForLeaderEpoch(r) => offset_for_leader_epoch(access, r),
        R::Metadata(r) => metadata(access, r, version),
        R::JoinGroup(r) => match access.allows(kind::GROUP, &r.group_id, op::READ) {
            true => Gate::Handle(R::JoinGroup(r), None),
            false => Gate::Refuse(ResponseBody::JoinGroup(JoinGroupResponse {
                error_code: group_denied(),
                generation_id: -1,
                member_id: r.member_id,
                ..Default::default()
            })),
        },
        R::SyncGroup(r) => match access.allows(kind::GROUP, &r.group_id, op::READ) {
            true => Gate::Handle(R::SyncGroup(r), None),
            false => Gate::Refuse(ResponseBody::SyncGroup(SyncGroupResponse {
                error_code: group_denied(),
                ..Default::default()
            })),
        },
        R::Heartbeat(r) => match access.allows(kind::GROUP, &r.group_id, op::READ) {
            true => Gate::Handle(R::Heartbeat(r), None),
            false => {
                refuse(ResponseBody::Heartbeat(HeartbeatResponse { error_code: group_denied(), ..Default::default() }))
            }
        },
        R::LeaveGroup(r) => match access.allows(kind::GROUP, &r.group_id, op::READ) {
            true => Gate::Handle(R::LeaveGroup(r), None),
            false => refuse(ResponseBody::LeaveGroup(LeaveGroupResponse {
                error_code: group_denied(),
                ..Default::default()
            })),
        },
        R::ConsumerGroupHeartbeat(r) => consumer_group_heartbeat(access, r),
        R::ShareGroupHeartbeat(r) => share_group_heartbeat(access, r),
        R::StreamsGroupHeartbeat(r) => streams_group_heartbeat(access, r),
        R::OffsetCommit(r) => offset_commit(access, r),
        R::OffsetFetch(r) => offset_fetch(access, r, version),
        R::OffsetDelete(r) => offset_delete(access, r),
        R::FindCoordinator(r) => find_coordinator(access, r, version),
        R::DescribeGroups(r) => describe_groups(access, r),
        R::ConsumerGroupDescribe(r) => {
            let operations = r.include_authorized_operations;
            describe_modern_groups(access, R::ConsumerGroupDescribe(r), operations, |answer| match answer {
                ResponseBody::ConsumerGroupDescribe(a) => Some(&mut a.groups),
                _ => None,
            })
        }
        R::ShareGroupDescribe(r) => {
            let operations = r.include_authorized_operations;
            describe_modern_groups(access, R::ShareGroupDescribe(r), operations, |answer| match answer {
                ResponseBody::ShareGroupDescribe(a) => Some(&mut a.groups),
                _ => None,
            })
        }
        R::StreamsGroupDescribe(r) => {
            let operations = r.include_authorized_operations;
            describe_modern_groups(access, R::StreamsGroupDescribe(r), operations, |answer| match answer {
                ResponseBody::StreamsGroupDescribe(a) => Some(&mut a.groups),
                _ => None,
            })
        }
        R::ListGroups(r) => list_groups(access, r),
        R::DescribeShareGroupOffsets(r) => describe_share_group_offsets(access, r),
        R::AlterShareGroupOffsets(r) => alter_share_group_offsets(access, r),
        R::DeleteShareGroupOffsets(r) => delete_share_group_offsets(access, r),
        R::DeleteGroups(r) => delete_groups(access, r),
        R::InitProducerId(r) => init_producer_id(access, r),
        R::AddPartitionsToTxn(r) => add_partitions_to_txn(access, r, version),
        R::AddOffsetsToTxn(r) => {
            let code = if !access.allows(kind::TRANSACTIONAL_ID, &r.transactional_id, op::WRITE) {
                ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            } else if !access.allows(kind::GROUP, &r.group_id, op::READ) {
                ErrorCode::GROUP_AUTHORIZATION_FAILED
            } else {
                return Gate::Handle(R::AddOffsetsToTxn(r), None);
            };
            refuse(ResponseBody::AddOffsetsToTxn(AddOffsetsToTxnResponse {
                error_code: code.code(),
                ..Default::default()
            }))
        }
        R::EndTxn(r) => match access.allows(kind::TRANSACTIONAL_ID, &r.transactional_id, op::WRITE) {
            true => Gate::Handle(R::EndTxn(r), None),
            false => refuse(ResponseBody::EndTxn(EndTxnResponse {
                error_code: ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code(),
                producer_id: -1,
                producer_epoch: -1,
                ..Default::default()
            })),
        },
        R::TxnOffsetCommit(r) => txn_offset_commit(access, r),
        R::WriteTxnMarkers(r) => write_txn_markers(access, r),
        R::CreateTopics(r) => create_topics(access, r, version),
        R::DeleteTopics(r) => delete_topics(access, r),
        R::CreatePartitions(r) => create_partitions(access, r),
        R::DeleteRecords(r) => delete_records(access, r),
        R::DescribeConfigs(r) => describe_configs(access, r),
        R::AlterConfigs(r) => alter_configs(access, r),
        R::IncrementalAlterConfigs(r) => incremental_alter_configs(access, r),
        R::DescribeCluster(r) => describe_cluster(access, r),
        R::ElectLeaders(r) => on_cluster(access, op::ALTER, r, R::ElectLeaders, |r| {
            let code = ErrorCode::CLUSTER_AUTHORIZATION_FAILED;
            let mut refused = crate::handlers::elect_leaders::failed(r, code, Some(CLUSTER_DENIED.into()));
            if version == 0 {
                // v0 has no top-level error: the partitions carry it.
                refused.error_code = 0;
            }
            ResponseBody::ElectLeaders(refused)
        }),
        R::AlterPartitionReassignments(r) => on_cluster(access, op::ALTER, r, R::AlterPartitionReassignments, |_| {
            ResponseBody::AlterPartitionReassignments(AlterPartitionReassignmentsResponse {
                error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code(),
                error_message: Some(CLUSTER_DENIED.into()),
                ..Default::default()
            })
        }),
        R::ListPartitionReassignments(r) => on_cluster(access, op::DESCRIBE, r, R::ListPartitionReassignments, |_| {
            ResponseBody::ListPartitionReassignments(ListPartitionReassignmentsResponse {
                error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code(),
                error_message: Some(CLUSTER_DENIED.into()),
                ..Default::default()
            })
        }),
        R::DescribeLogDirs(r) => on_cluster(access, op::DESCRIBE, r, R::DescribeLogDirs, |_| {
            ResponseBody::DescribeLogDirs(DescribeLogDirsResponse {
                error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code(),
                ..Default::default()
            })
        }),
        R::DescribeQuorum(r) => on_cluster(access, op::DESCRIBE, r, R::DescribeQuorum, |_| {
            ResponseBody::DescribeQuorum(DescribeQuorumResponse {
                error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code(),
                error_message: Some(CLUSTER_DENIED.into()),
                ..Default::default()
            })
        }),
        R::DescribeUserScramCredentials(r) => {
            on_cluster(access, op::DESCRIBE, r, R::DescribeUserScramCredentials, |_| {
                ResponseBody::DescribeUserScramCredentials(DescribeUserScramCredentialsResponse {
                    error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code(),
                    error_message: Some(CLUSTER_DENIED.into()),
                    ..Default::default()
                })
            })
        }
        R::AlterUserScramCredentials(r) => on_cluster(access, op::ALTER, r, R::AlterUserScramCredentials, |r| {
            let refused =
                crate::handlers::scram_credentials::failed(r, ErrorCode::CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED);
            ResponseBody::AlterUserScramCredentials(refused)
        }),
        R::DescribeTopicPartitions(r) => describe_topic_partitions(access, r),
        R::InitializeShareGroupState(r) => share_state_request(access, r, R::InitializeShareGroupState),
        R::ReadShareGroupState(r) => share_state_request(access, r, R::ReadShareGroupState),
        R::WriteShareGroupState(r) => share_state_request(access, r, R::WriteShareGroupState),
        R::DeleteShareGroupState(r) => share_state_request(access, r, R::DeleteShareGroupState),
        R::ReadShareGroupStateSummary(r) => share_state_request(access, r, R::ReadShareGroupStateSummary),
        R::DescribeProducers(r) => describe_producers(access, r),
        R::DescribeTransactions(r) => describe_transactions(access, r),
        R::ListTransactions(r) => list_transactions(access, r),
        // CreateAcls and DeleteAcls: ALTER on the cluster, on a broker and on a
        // controller's listener alike (DescribeAcls answers its refusal in its handler).
        R::CreateAcls(r) => on_cluster(access, op::ALTER, r, R::CreateAcls, |r| {
            let refused =
                crate::handlers::acls::create_failed(r, ErrorCode::CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED);
            ResponseBody::CreateAcls(refused)
        }),
        R::DeleteAcls(r) => on_cluster(access, op::ALTER, r, R::DeleteAcls, |r| {
            let refused =
                crate::handlers::acls::delete_failed(r, ErrorCode::CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED);
            ResponseBody::DeleteAcls(refused)
        }),
        // ApiVersions, SASL, telemetry: open to every client, as in Kafka.
        other => Gate::Handle(other, None),
    }
}

fn refuse(body: ResponseBody) -> Gate {
    Gate::Refuse(body)
}

/// A request that needs `operation` on the cluster, whole: handled as it came (`body`
/// puts it back in its enum), or refused with what `refused` answers it.
fn on_cluster<T>(
    access: &Access,
    operation: i8,
    request: T,
    body: fn(T) -> RequestBody,
    refused: impl FnOnce(&T) -> ResponseBody,
) -> Gate {
    if access.allows_cluster(operation) {
        Gate::Handle(body(request), None)
    } else {
        refuse(refused(&request))
    }
}

/// The share-group state APIs, which only brokers send: CLUSTER_ACTION, else every share
/// partition CLUSTER_AUTHORIZATION_FAILED (Kafka's `toGlobalErrorResponse`).
fn share_state_request<R: StateRequest>(access: &Access, r: R, body: fn(R) -> RequestBody) -> Gate {
    on_cluster(access, op::CLUSTER_ACTION, r, body, |r| {
        r.failed(ErrorCode::CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
    })
}

fn group_denied() -> i16 {
    ErrorCode::GROUP_AUTHORIZATION_FAILED.code()
}

/// The topic's name: the one given, else the one the image has for its id (`None` for
/// an unknown id, which the handler answers for).
fn topic_name(image: &MetadataImage, name: &str, id: Uuid) -> Option<String> {
    if !name.is_empty() {
        return Some(name.to_string());
    }
    image.topic_by_id(id).map(|t| t.name.clone())
}

/// Splits `items` into those `allowed` (or whose topic is unknown) and those refused.
fn split<T>(items: Vec<T>, mut allowed: impl FnMut(&T) -> bool) -> (Vec<T>, Vec<T>) {
    items.into_iter().partition(|item| allowed(item))
}

fn finish(f: impl FnOnce(ResponseBody) -> ResponseBody + Send + 'static) -> Option<Finish> {
    Some(Box::new(f))
}

fn produce(access: &Access, mut r: ProduceRequest) -> Gate {
    use produce_response::{PartitionProduceResponse, TopicProduceResponse};
    let refused_topic = |t: &produce_request::TopicProduceData, code: ErrorCode| TopicProduceResponse {
        name: t.name.clone(),
        topic_id: t.topic_id,
        partition_responses: t
            .partition_data
            .iter()
            .map(|p| PartitionProduceResponse {
                index: p.index,
                error_code: code.code(),
                base_offset: -1,
                log_append_time_ms: -1,
                log_start_offset: -1,
                error_message: None,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    if let Some(id) = &r.transactional_id {
        if !access.allows(kind::TRANSACTIONAL_ID, id, op::WRITE) {
            let code = ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
            let responses = r.topic_data.iter().map(|t| refused_topic(t, code)).collect();
            return refuse(ResponseBody::Produce(ProduceResponse { responses, ..Default::default() }));
        }
    }
    let image = access.image();
    let (kept, refused) = split(std::mem::take(&mut r.topic_data), |t| {
        topic_name(image, &t.name, t.topic_id).is_none_or(|name| access.allows(kind::TOPIC, &name, op::WRITE))
    });
    r.topic_data = kept;
    if refused.is_empty() {
        return Gate::Handle(RequestBody::Produce(r), None);
    }
    let refused: Vec<_> = refused.iter().map(|t| refused_topic(t, ErrorCode::TOPIC_AUTHORIZATION_FAILED)).collect();
    Gate::Handle(
        RequestBody::Produce(r),
        finish(move |answer| match answer {
            ResponseBody::Produce(mut a) => {
                a.responses.extend(refused);
                ResponseBody::Produce(a)
            }
            other => other,
        }),
    )
}

fn fetch_refused(t: &fetch_request::FetchTopic, code: ErrorCode) -> fetch_response::FetchableTopicResponse {
    fetch_response::FetchableTopicResponse {
        topic: t.topic.clone(),
        topic_id: t.topic_id,
        partitions: t
            .partitions
            .iter()
            .map(|p| fetch_response::PartitionData {
                partition_index: p.partition,
                error_code: code.code(),
                high_watermark: -1,
                last_stable_offset: -1,
                log_start_offset: -1,
                aborted_transactions: None,
                preferred_read_replica: -1,
                records: None,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// Fetch: a follower (replica id set) needs CLUSTER_ACTION, refused as
/// TOPIC_AUTHORIZATION_FAILED on every partition as Kafka does; a consumer needs READ on
/// each topic of the request. The partitions an incremental fetch session carries from
/// an earlier request are checked by the fetch handler, on every fetch.
fn fetch(access: &Access, mut r: FetchRequest) -> Gate {
    let follower = r.replica_id >= 0 || r.replica_state.replica_id >= 0;
    if follower {
        if access.allows_cluster(op::CLUSTER_ACTION) {
            return Gate::Handle(RequestBody::Fetch(r), None);
        }
        let code = ErrorCode::TOPIC_AUTHORIZATION_FAILED;
        let responses = r.topics.iter().map(|t| fetch_refused(t, code)).collect();
        return refuse(ResponseBody::Fetch(FetchResponse { responses, ..Default::default() }));
    }
    let image = access.image();
    let (kept, refused) = split(std::mem::take(&mut r.topics), |t| {
        topic_name(image, &t.topic, t.topic_id).is_none_or(|name| access.allows(kind::TOPIC, &name, op::READ))
    });
    r.topics = kept;
    if refused.is_empty() {
        return Gate::Handle(RequestBody::Fetch(r), None);
    }
    let refused: Vec<_> = refused.iter().map(|t| fetch_refused(t, ErrorCode::TOPIC_AUTHORIZATION_FAILED)).collect();
    Gate::Handle(
        RequestBody::Fetch(r),
        finish(move |answer| match answer {
            ResponseBody::Fetch(mut a) => {
                a.responses.extend(refused);
                ResponseBody::Fetch(a)
            }
            other => other,
        }),
    )
}

fn list_offsets(access: &Access, mut r: ListOffsetsRequest) -> Gate {
    use list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
    let (kept, refused) = split(std::mem::take(&mut r.topics), |t| access.allows(kind::TOPIC, &t.name, op::DESCRIBE));
    r.topics = kept;
    if refused.is_empty() {
        return Gate::Handle(RequestBody::ListOffsets(r), None);
    }
    let refused: Vec<_> = refused
        .iter()
        .map(|t| ListOffsetsTopicResponse {
            name: t.name.clone(),
            partitions: t
                .partitions
                .iter()
                .map(|p| ListOffsetsPartitionResponse {
                    partition_index: p.partition_index,
                    error_code: ErrorCode::TOPIC_AUTHORIZATION_FAILED.code(),
                    timestamp: -1,
                    offset: -1,
                    leader_epoch: -1,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    Gate::Handle(
        RequestBody::ListOffsets(r),
        finish(move |answer| match answer {
            ResponseBody::ListOffsets(mut a) => {
                a.topics.extend(refused);
                ResponseBody::ListOffsets(a)
            }
            other => other,
        }),
    )
}

/// OffsetForLeaderEpoch: CLUSTER_ACTION (a follower), or DESCRIBE on each topic.
fn offset_for_leader_epoch(access: &Access, mut r: OffsetForLeaderEpochRequest) -> Gate {
    use offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
    if access.allows_quietly(kind::CLUSTER, osprey_cluster::acl::CLUSTER_NAME, op::CLUSTER_ACTION) {
        return Gate::Handle(RequestBody::OffsetForLeaderEpoch(r), None);
    }
    let (kept, refused) = split(std::mem::take(&mut r.topics), |t| access.allows(kind::TOPIC, &t.topic, op::DESCRIBE));
    r.topics = kept;
    if refused.is_empty() {
        return Gate::Handle(RequestBody::OffsetForLeaderEpoch(r), None);
    }
    let refused: Vec<_> = refused
        .iter()
        .map(|t| OffsetForLeaderTopicResult {
            topic: t.topic.clone(),
            partitions: t
                .partitions
                .iter()
                .map(|p| EpochEndOffset {
                    error_code: ErrorCode::TOPIC_AUTHORIZATION_FAILED.code(),
                    partition: p.partition,
                    leader_epoch: -1,
                    end_offset: -1,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    Gate::Handle(
        RequestBody::OffsetForLeaderEpoch(r),
        finish(move |answer| match answer {
            ResponseBody::OffsetForLeaderEpoch(mut a) => {
                a.topics.extend(refused);
                ResponseBody::OffsetForLeaderEpoch(a)
            }
            other => other,
        }),
    )
}

/// Metadata: topics named that the client may not DESCRIBE are answered
/// TOPIC_AUTHORIZATION_FAILED, and so are missing ones it may not CREATE (on the
/// cluster or the topic) when they would be created; a request for all topics lists
/// only those it may DESCRIBE. `authorized_operations` come from the authorizer.
fn metadata(access: &Access, mut r: MetadataRequest, version: i16) -> Gate {
    use metadata_response::MetadataResponseTopic;
    let image = access.image();
    let mut refused: Vec<MetadataResponseTopic> = Vec::new();
    let may_create = access.allows_quietly(kind::CLUSTER, osprey_cluster::acl::CLUSTER_NAME, op::CREATE);
    if let Some(topics) = r.topics.take() {
        let (kept, denied) = split(topics, |t| {
            let Some(name) = t.name.clone().or_else(|| image.topic_by_id(t.topic_id).map(|x| x.name.clone())) else {
                return true;
            };
            if !access.allows(kind::TOPIC, &name, op::DESCRIBE) {
                return false;
            }
            let created = r.allow_auto_topic_creation && access.auto_create_topics() && image.topic(&name).is_none();
            !created || may_create || access.allows(kind::TOPIC, &name, op::CREATE)
        });
        refused = denied
            .into_iter()
            .map(|t| MetadataResponseTopic {
                error_code: ErrorCode::TOPIC_AUTHORIZATION_FAILED.code(),
                name: t.name,
                topic_id: t.topic_id,
                is_internal: false,
                partitions: Vec::new(),
                topic_authorized_operations: authorized_operations::NOT_REQUESTED,
                ..Default::default()
            })
            .collect();
        r.topics = Some(kept);
    }
    // v0 asks for every topic with an empty list, later versions with none.
    let listing_all = r.topics.as_ref().is_none_or(|t| version == 0 && t.is_empty());
    let topic_operations = r.include_topic_authorized_operations;
    let cluster_operations = r.include_cluster_authorized_operations;
    let access = access.clone();
    Gate::Handle(
        RequestBody::Metadata(r),
        finish(move |answer| match answer {
            ResponseBody::Metadata(mut a) => {
                if listing_all {
                    a.topics.retain(|t| {
                        t.name.as_deref().is_some_and(|name| access.allows(kind::TOPIC, name, op::DESCRIBE))
                    });
                }
                if topic_operations {
                    for t in a.topics.iter_mut().filter(|t| t.error_code == 0) {
                        let name = t.name.as_deref().unwrap_or_default();
                        t.topic_authorized_operations =
                            access.authorized_operations(kind::TOPIC, name, authorized_operations::TOPIC);
                    }
                }
                if cluster_operations {
                    a.cluster_authorized_operations = access.authorized_operations(
                        kind::CLUSTER,
                        osprey_cluster::acl::CLUSTER_NAME,
                        authorized_operations::CLUSTER,
                    );
                }
                a.topics.extend(refused);
                ResponseBody::Metadata(a)
            }
            other => other,
        }),
    )
}

/// OffsetCommit: READ on the group (else every partition GROUP_AUTHORIZATION_FAILED),
/// then READ on each topic.
fn offset_commit(access: &Access, mut r: OffsetCommitRequest) -> Gate {
    use offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
    let answer_for = |topics: &[offset_commit_request::OffsetCommitRequestTopic], code: ErrorCode| -> Vec<_> {
        topics
            .iter()
            .map(|t| OffsetCommitResponseTopic {
                name: t.name.clone(),
                topic_id: t.topic_id,
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| OffsetCommitResponsePartition {
                        partition_index: p.partition_index,
                        error_code: code.code(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect()
    };
    if !access.allows(kind::GROUP, &r.group_id, op::READ) {
        let topics = answer_for(&r.topics, ErrorCode::GROUP_AUTHORIZATION_FAILED);
        return refuse(ResponseBody::OffsetCommit(OffsetCommitResponse { topics, ..Default::default() }));
    }
    let image = access.image();
    let (kept, refused) = split(std::mem::take(&mut r.topics), |t| {
        topic_name(image, &t.name, t.topic_id).is_none_or(|name| access.allows(kind::TOPIC, &name, op::READ))
    });
    r.topics = kept;
    if refused.is_empty() {
        return Gate::Handle(RequestBody::OffsetCommit(r), None);
    }
    let refused = answer_for(&refused, ErrorCode::TOPIC_AUTHORIZATION_FAILED);
    Gate::Handle(
        RequestBody::OffsetCommit(r),
        finish(move |answer| match answer {
            ResponseBody::OffsetCommit(mut a) => {
                a.topics.extend(refused);
                ResponseBody::OffsetCommit(a)
            }
            other => other,
        }),
    )
}

/// Why a member's heartbeat (ConsumerGroupHeartbeat, ShareGroupHeartbeat) is refused, if
/// it is: READ on the group, and DESCRIBE on every subscribed topic named (else
/// TOPIC_AUTHORIZATION_FAILED, as Kafka answers a member subscribing to a topic it may
/// not see).
fn heartbeat_refusal(access: &Access, group_id: &str, subscribed_topic_names: Option<&[String]>) -> Option<ErrorCode> {
    if !access.allows(kind::GROUP, group_id, op::READ) {
        Some(ErrorCode::GROUP_AUTHORIZATION_FAILED)
    } else if subscribed_topic_names.into_iter().flatten().any(|t| !access.allows(kind::TOPIC, t, op::DESCRIBE)) {
        Some(ErrorCode::TOPIC_AUTHORIZATION_FAILED)
    } else {
        None
    }
}

fn consumer_group_heartbeat(access: &Access, r: ConsumerGroupHeartbeatRequest) -> Gate {
    let Some(code) = heartbeat_refusal(access, &r.group_id, r.subscribed_topic_names.as_deref()) else {
        return Gate::Handle(RequestBody::ConsumerGroupHeartbeat(r), None);
    };
    refuse(ResponseBody::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse {
        error_code: code.code(),
        error_message: None,
        member_id: None,
        member_epoch: -1,
        assignment: None,
        ..Default::default()
    }))
}

/// ShareGroupHeartbeat: as [`heartbeat_refusal`]; the refusal carries only its error
/// code, as Kafka's.
fn share_group_heartbeat(access: &Access, r: ShareGroupHeartbeatRequest) -> Gate {
    let Some(code) = heartbeat_refusal(access, &r.group_id, r.subscribed_topic_names.as_deref()) else {
        return Gate::Handle(RequestBody::ShareGroupHeartbeat(r), None);
    };
    refuse(ResponseBody::ShareGroupHeartbeat(ShareGroupHeartbeatResponse {
        error_code: code.code(),
        ..Default::default()
    }))
}

/// StreamsGroupHeartbeat (Kafka's `handleStreamsGroupHeartbeat`): READ on the group, and
/// DESCRIBE on every topic a joining member's topology names (its source, repartition
/// and changelog topics), else TOPIC_AUTHORIZATION_FAILED. The refusal carries only its
/// error code, as Kafka's.
fn streams_group_heartbeat(access: &Access, r: StreamsGroupHeartbeatRequest) -> Gate {
    let code = if !access.allows(kind::GROUP, &r.group_id, op::READ) {
        ErrorCode::GROUP_AUTHORIZATION_FAILED
    } else if crate::handlers::streams_groups::topology_topics(&r).any(|t| !access.allows(kind::TOPIC, t, op::DESCRIBE))
    {
        ErrorCode::TOPIC_AUTHORIZATION_FAILED
    } else {
        return Gate::Handle(RequestBody::StreamsGroupHeartbeat(r), None);
    };
    refuse(ResponseBody::StreamsGroupHeartbeat(StreamsGroupHeartbeatResponse {
        error_code: code.code(),
        ..Default::default()
    }))
}

/// OffsetDelete: DELETE on the group (GROUP_AUTHORIZATION_FAILED), READ on each topic.
fn offset_delete(access: &Access, mut r: OffsetDeleteRequest) -> Gate {
    use offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
    if !access.allows(kind::GROUP, &r.group_id, op::DELETE) {
        return refuse(ResponseBody::OffsetDelete(OffsetDeleteResponse {
            error_code: group_denied(),
            ..Default::default()
        }));
    }
    let (kept, refused) = split(std::mem::take(&mut r.topics), |t| access.allows(kind::TOPIC, &t.name, op::READ));
    r.topics = kept;
    if refused.is_empty() {
        return Gate::Handle(RequestBody::OffsetDelete(r), None);
    }
    let refused: Vec<_> = refused
        .into_iter()
        .map(|t| OffsetDeleteResponseTopic {
            name: t.name,
            partitions: t
                .partitions
                .iter()
                .map(|p| OffsetDeleteResponsePartition {
                    partition_index: p.partition_index,
                    error_code: ErrorCode::TOPIC_AUTHORIZATION_FAILED.code(),
                })
                .collect(),
        })
        .collect();
    Gate::Handle(
        RequestBody::OffsetDelete(r),
        finish(move |answer| match answer {
            ResponseBody::OffsetDelete(mut a) => {
                a.topics.extend(refused);
                ResponseBody::OffsetDelete(a)
            }
            other => other,
        }),
    )
}

/// OffsetFetch: DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED), and of the topics
/// answered only those the client may DESCRIBE: a topic it named is answered
/// TOPIC_AUTHORIZATION_FAILED, one it did not name (all topics) is left out.
fn offset_fetch(access: &Access, mut r: OffsetFetchRequest, version: i16) -> Gate {
    if version < 8 {
        if !access.allows(kind::GROUP, &r.group_id, op::DESCRIBE) {
            return refuse(ResponseBody::OffsetFetch(OffsetFetchResponse {
                error_code: group_denied(),
                ..Default::default()
            }));
        }
        let named = r.topics.is_some();
        let access = access.clone();
        return Gate::Handle(
            RequestBody::OffsetFetch(r),
            finish(move |answer| match answer {
                ResponseBody::OffsetFetch(mut a) => {
                    a.topics.retain_mut(|t| {
                        if access.allows(kind::TOPIC, &t.name, op::DESCRIBE) {
                            return true;
                        }
                        for p in &mut t.partitions {
                            p.error_code = ErrorCode::TOPIC_AUTHORIZATION_FAILED.code();
                            p.committed_offset = -1;
                        }
                        named
                    });
                    ResponseBody::OffsetFetch(a)
                }
                other => other,
            }),
        );
    }
    use offset_fetch_response::OffsetFetchResponseGroup;
    let (kept, refused) =
        split(std::mem::take(&mut r.groups), |g| access.allows(kind::GROUP, &g.group_id, op::DESCRIBE));
    let refused: Vec<OffsetFetchResponseGroup> = refused
        .into_iter()
        .map(|g| OffsetFetchResponseGroup { group_id: g.group_id, error_code: group_denied(), ..Default::default() })
        .collect();
    if kept.is_empty() {
        return refuse(ResponseBody::OffsetFetch(OffsetFetchResponse { groups: refused, ..Default::default() }));
    }
    let named: BTreeSet<String> = kept.iter().filter(|g| g.topics.is_some()).map(|g| g.group_id.clone()).collect();
    r.groups = kept;
    let access = access.clone();
    Gate::Handle(
        RequestBody::OffsetFetch(r),
        finish(move |answer| match answer {
            ResponseBody::OffsetFetch(mut a) => {
                let image = access.image().clone();
                for g in &mut a.groups {
                    let named = named.contains(&g.group_id);
                    g.topics.retain_mut(|t| {
                        let name = topic_name(&image, &t.name, t.topic_id).unwrap_or_default();
                        if access.allows(kind::TOPIC, &name, op::DESCRIBE) {
                            return true;
                        }
                        for p in &mut t.partitions {
                            p.error_code = ErrorCode::TOPIC_AUTHORIZATION_FAILED.code();
                            p.committed_offset = -1;
                        }
                        named
                    });
                }
                a.groups.extend(refused);
                ResponseBody::OffsetFetch(a)
            }
            other => other,
        }),
    )
}

/// FindCoordinator: DESCRIBE on the group (key type 0) or the transactional id (1).
/// Share coordinators (2), which brokers look up for their share partitions, need
/// CLUSTER_ACTION: without it the whole request is answered CLUSTER_AUTHORIZATION_FAILED,
/// as Kafka's `authorizeClusterOperation` throws (before v6 the handler answers them
/// INVALID_REQUEST, unasked, as Kafka does).
fn find_coordinator(access: &Access, mut r: FindCoordinatorRequest, version: i16) -> Gate {
    use crate::handlers::find_coordinator::{FIRST_SHARE_VERSION, KEY_TYPE_SHARE};
    if r.key_type == KEY_TYPE_SHARE {
        if version < FIRST_SHARE_VERSION || r.coordinator_keys.is_empty() || access.allows_cluster(op::CLUSTER_ACTION) {
            return Gate::Handle(RequestBody::FindCoordinator(r), None);
        }
        let coordinators = r
            .coordinator_keys
            .into_iter()
            .map(|key| find_coordinator_response::Coordinator {
                key,
                node_id: -1,
                port: -1,
                error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code(),
                error_message: Some(CLUSTER_DENIED.into()),
                ..Default::default()
            })
            .collect();
        return refuse(ResponseBody::FindCoordinator(FindCoordinatorResponse { coordinators, ..Default::default() }));
    }
    let (resource_type, code) = match r.key_type {
        1 => (kind::TRANSACTIONAL_ID, ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        _ => (kind::GROUP, ErrorCode::GROUP_AUTHORIZATION_FAILED),
    };
    if version < 4 {
        if access.allows(resource_type, &r.key, op::DESCRIBE) {
            return Gate::Handle(RequestBody::FindCoordinator(r), None);
        }
        return refuse(ResponseBody::FindCoordinator(FindCoordinatorResponse {
            error_code: code.code(),
            error_message: None,
            node_id: -1,
            host: String::new(),
            port: -1,
            ..Default::default()
        }));
    }
    let (kept, refused) =
        split(std::mem::take(&mut r.coordinator_keys), |key| access.allows(resource_type, key, op::DESCRIBE));
    let refused: Vec<find_coordinator_response::Coordinator> = refused
        .into_iter()
        .map(|key| find_coordinator_response::Coordinator {
            key,
            node_id: -1,
            host: String::new(),
            port: -1,
            error_code: code.code(),
            error_message: None,
            ..Default::default()
        })
        .collect();
    if kept.is_empty() {
        return refuse(ResponseBody::FindCoordinator(FindCoordinatorResponse {
            coordinators: refused,
            ..Default::default()
        }));
    }
    r.coordinator_keys = kept;
    Gate::Handle(
        RequestBody::FindCoordinator(r),
        finish(move |answer| match answer {
            ResponseBody::FindCoordinator(mut a) => {
                a.coordinators.extend(refused);
                ResponseBody::FindCoordinator(a)
            }
            other => other,
        }),
    )
}

/// DescribeGroups: DESCRIBE on each group, answered GROUP_AUTHORIZATION_FAILED in its
/// place; `authorized_operations` from the authorizer.
fn describe_groups(access: &Access, r: DescribeGroupsRequest) -> Gate {
    let access = access.clone();
    let operations = r.include_authorized_operations;
    Gate::Handle(
        RequestBody::DescribeGroups(r),
        finish(move |answer| match answer {
            ResponseBody::DescribeGroups(mut a) => {
                for g in &mut a.groups {
                    if !access.allows(kind::GROUP, &g.group_id, op::DESCRIBE) {
                        *g = describe_groups_response::DescribedGroup {
                            group_id: std::mem::take(&mut g.group_id),
                            error_code: group_denied(),
                            error_message: None,
                            authorized_operations: authorized_operations::NOT_REQUESTED,
                            ..Default::default()
                        };
                    } else if operations {
                        g.authorized_operations =
                            access.authorized_operations(kind::GROUP, &g.group_id, authorized_operations::GROUP);
                    }
                }
                ResponseBody::DescribeGroups(a)
            }
            other => other,
        }),
    )
}

/// ConsumerGroupDescribe and ShareGroupDescribe: DESCRIBE on each group, answered
/// GROUP_AUTHORIZATION_FAILED in its place; `authorized_operations` from the authorizer;
/// and a group whose members are assigned a topic the client may not DESCRIBE is
/// answered TOPIC_AUTHORIZATION_FAILED without its members, as Kafka hides topics from
/// clients not allowed to see them.
fn described_modern_groups<G: DescribedModernGroup>(access: &Access, groups: &mut [G], operations: bool) {
    for g in groups {
        if !access.allows(kind::GROUP, g.group_id(), op::DESCRIBE) {
            *g = G::refused(g.group_id().to_string(), ErrorCode::GROUP_AUTHORIZATION_FAILED, None);
            continue;
        }
        if g.error_code() != ErrorCode::NONE.code() {
            continue;
        }
        if g.assigned_topic_names().any(|t| !access.allows(kind::TOPIC, t, op::DESCRIBE)) {
            let message = G::UNAUTHORIZED_TOPICS;
            *g = G::refused(g.group_id().to_string(), ErrorCode::TOPIC_AUTHORIZATION_FAILED, Some(message.into()));
        } else if operations {
            let all = authorized_operations::GROUP;
            g.set_authorized_operations(access.authorized_operations(kind::GROUP, g.group_id(), all));
        }
    }
}

/// A group of a ConsumerGroupDescribe or ShareGroupDescribe answer, as
/// [`described_modern_groups`] reads and rewrites it.
trait DescribedModernGroup: authorized_operations::DescribedGroup {
    /// Kafka's message for a group using a topic the client may not describe.
    const UNAUTHORIZED_TOPICS: &'static str =
        "The group has described topic(s) that the client is not authorized to describe.";
    /// The topics of the members' assignments (current and target); a streams group's
    /// are its topology's.
    fn assigned_topic_names(&self) -> impl Iterator<Item = &str>;
    /// The group answered with only its id and this error.
    fn refused(group_id: String, code: ErrorCode, message: Option<String>) -> Self;
}

macro_rules! described_modern_group {
    ($module:ident, [$($assignment:ident),+]) => {
        impl DescribedModernGroup for $module::DescribedGroup {
            fn assigned_topic_names(&self) -> impl Iterator<Item = &str> {
                self.members
                    .iter()
                    .flat_map(|m| [$(&m.$assignment),+])
                    .flat_map(|a| a.topic_partitions.iter().map(|tp| tp.topic_name.as_str()))
            }
            fn refused(group_id: String, code: ErrorCode, error_message: Option<String>) -> Self {
                $module::DescribedGroup {
                    group_id,
                    error_code: code.code(),
                    error_message,
                    authorized_operations: authorized_operations::NOT_REQUESTED,
                    ..Default::default()
                }
            }
        }
    };
}
described_modern_group!(consumer_group_describe_response, [assignment, target_assignment]);
described_modern_group!(share_group_describe_response, [assignment]);

impl DescribedModernGroup for streams_group_describe_response::DescribedGroup {
    const UNAUTHORIZED_TOPICS: &'static str =
        "The described group uses topics that the client is not authorized to describe.";
    fn assigned_topic_names(&self) -> impl Iterator<Item = &str> {
        self.topology.iter().flat_map(|t| t.subtopologies.iter().flatten()).flat_map(|s| {
            let sinks = s.repartition_sink_topics.iter().map(String::as_str);
            let internal = s.repartition_source_topics.iter().chain(&s.state_changelog_topics).map(|t| t.name.as_str());
            s.source_topics.iter().map(String::as_str).chain(sinks).chain(internal)
        })
    }
    fn refused(group_id: String, code: ErrorCode, error_message: Option<String>) -> Self {
        streams_group_describe_response::DescribedGroup {
            group_id,
            error_code: code.code(),
            error_message,
            authorized_operations: authorized_operations::NOT_REQUESTED,
            ..Default::default()
        }
    }
}

/// `request` (a ConsumerGroupDescribe or ShareGroupDescribe asking for authorized
/// operations or not), its answer's `groups` finished by [`described_modern_groups`].
fn describe_modern_groups<G: DescribedModernGroup + 'static>(
    access: &Access,
    request: RequestBody,
    operations: bool,
    groups: fn(&mut ResponseBody) -> Option<&mut Vec<G>>,
) -> Gate {
    let access = access.clone();
    Gate::Handle(
        request,
        finish(move |mut answer| {
            if let Some(groups) = groups(&mut answer) {
                described_modern_groups(&access, groups, operations);
            }
            answer
        }),
    )
}

/// DescribeShareGroupOffsets: DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED in its
/// place); of a group's topics, one named that the client may not DESCRIBE is answered
/// TOPIC_AUTHORIZATION_FAILED with start offset -1, and of all a group's topics only those
/// it may DESCRIBE are listed, as Kafka.
fn describe_share_group_offsets(access: &Access, mut r: DescribeShareGroupOffsetsRequest) -> Gate {
    use describe_share_group_offsets_response::{
        DescribeShareGroupOffsetsResponseGroup as Group, DescribeShareGroupOffsetsResponsePartition as Partition,
        DescribeShareGroupOffsetsResponseTopic as Topic,
    };
    let (mut kept, refused) =
        split(std::mem::take(&mut r.groups), |g| access.allows(kind::GROUP, &g.group_id, op::DESCRIBE));
    let refused: Vec<Group> = refused
        .into_iter()
        .map(|g| Group { group_id: g.group_id, error_code: group_denied(), ..Default::default() })
        .collect();
    let mut refused_topics: Vec<(String, Vec<Topic>)> = Vec::new();
    let mut listing_all = BTreeSet::new();
    for g in &mut kept {
        let Some(topics) = &mut g.topics else {
            listing_all.insert(g.group_id.clone());
            continue;
        };
        let (allowed, denied) =
            split(std::mem::take(topics), |t| access.allows(kind::TOPIC, &t.topic_name, op::DESCRIBE));
        *topics = allowed;
        let denied: Vec<Topic> = denied
            .into_iter()
            .map(|t| Topic {
                topic_name: t.topic_name,
                partitions: t
                    .partitions
                    .iter()
                    .map(|&partition_index| Partition {
                        partition_index,
                        start_offset: -1,
                        error_code: ErrorCode::TOPIC_AUTHORIZATION_FAILED.code(),
                        error_message: Some(TOPIC_DENIED.into()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect();
        if !denied.is_empty() {
            refused_topics.push((g.group_id.clone(), denied));
        }
    }
    r.groups = kept;
    if refused.is_empty() && refused_topics.is_empty() && listing_all.is_empty() {
        return Gate::Handle(RequestBody::DescribeShareGroupOffsets(r), None);
    }
    let access = access.clone();
    Gate::Handle(
        RequestBody::DescribeShareGroupOffsets(r),
        finish(move |answer| match answer {
            ResponseBody::DescribeShareGroupOffsets(mut a) => {
                for g in &mut a.groups {
                    if listing_all.contains(&g.group_id) {
                        g.topics.retain(|t| access.allows_quietly(kind::TOPIC, &t.topic_name, op::DESCRIBE));
                    }
                    if g.error_code != ErrorCode::NONE.code() {
                        continue;
                    }
                    if let Some(i) = refused_topics.iter().position(|(id, _)| *id == g.group_id) {
                        g.topics.extend(refused_topics.swap_remove(i).1);
                    }
                }
                a.groups.extend(refused);
                ResponseBody::DescribeShareGroupOffsets(a)
            }
            other => other,
        }),
    )
}

/// AlterShareGroupOffsets: READ on the group, else refused whole; a topic the client may
/// not READ is answered TOPIC_AUTHORIZATION_FAILED on each of its partitions, beside
/// the others unless the group's answer is an error, as Kafka.
fn alter_share_group_offsets(access: &Access, mut r: AlterShareGroupOffsetsRequest) -> Gate {
    use alter_share_group_offsets_response::{
        AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
    };
    if !access.allows(kind::GROUP, &r.group_id, op::READ) {
        let refused = AlterShareGroupOffsetsResponse::refused(ErrorCode::GROUP_AUTHORIZATION_FAILED, GROUP_DENIED);
        return refuse(ResponseBody::AlterShareGroupOffsets(refused));
    }
    let (kept, refused) = split(std::mem::take(&mut r.topics), |t| access.allows(kind::TOPIC, &t.topic_name, op::READ));
    r.topics = kept;
    let refused: Vec<AlterShareGroupOffsetsResponseTopic> = refused
        .into_iter()
        .map(|t| AlterShareGroupOffsetsResponseTopic {
            topic_id: access.image().topic(&t.topic_name).map_or(Uuid::ZERO, |i| i.id),
            partitions: t
                .partitions
                .iter()
                .map(|p| AlterShareGroupOffsetsResponsePartition {
                    partition_index: p.partition_index,
                    error_code: ErrorCode::TOPIC_AUTHORIZATION_FAILED.code(),
                    error_message: Some(TOPIC_DENIED.into()),
                    ..Default::default()
                })
                .collect(),
            topic_name: t.topic_name,
            ..Default::default()
        })
        .collect();
    handle_adding_refused(RequestBody::AlterShareGroupOffsets(r), refused, |answer, refused| {
        if let ResponseBody::AlterShareGroupOffsets(a) = answer {
            if a.error_code == ErrorCode::NONE.code() {
                a.responses.extend(refused);
            }
        }
    })
}

/// DeleteShareGroupOffsets: DELETE on the group, else refused whole; a topic the client
/// may not READ is answered TOPIC_AUTHORIZATION_FAILED, beside the others unless the
/// group's answer is an error, as Kafka.
fn delete_share_group_offsets(access: &Access, mut r: DeleteShareGroupOffsetsRequest) -> Gate {
    use delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
    if !access.allows(kind::GROUP, &r.group_id, op::DELETE) {
        let refused = DeleteShareGroupOffsetsResponse::refused(ErrorCode::GROUP_AUTHORIZATION_FAILED, GROUP_DENIED);
        return refuse(ResponseBody::DeleteShareGroupOffsets(refused));
    }
    let (kept, refused) = split(std::mem::take(&mut r.topics), |t| access.allows(kind::TOPIC, &t.topic_name, op::READ));
    r.topics = kept;
    let refused: Vec<DeleteShareGroupOffsetsResponseTopic> = refused
        .into_iter()
        .map(|t| DeleteShareGroupOffsetsResponseTopic {
            topic_name: t.topic_name,
            error_code: ErrorCode::TOPIC_AUTHORIZATION_FAILED.code(),
            error_message: Some(TOPIC_DENIED.into()),
            ..Default::default()
        })
        .collect();
    handle_adding_refused(RequestBody::DeleteShareGroupOffsets(r), refused, |answer, refused| {
        if let ResponseBody::DeleteShareGroupOffsets(a) = answer {
            if a.error_code == ErrorCode::NONE.code() {
                a.responses.splice(0..0, refused);
            }
        }
    })
}

/// `request` handled, and unless `refused` is empty, `add` puts the refused resources'
/// answers into its answer.
fn handle_adding_refused<T: Send + 'static>(
    request: RequestBody,
    refused: Vec<T>,
    add: fn(&mut ResponseBody, Vec<T>),
) -> Gate {
    if refused.is_empty() {
        return Gate::Handle(request, None);
    }
    Gate::Handle(
        request,
        finish(move |mut answer| {
            add(&mut answer, refused);
            answer
        }),
    )
}

/// ListGroups: every group with DESCRIBE on the cluster, else those the client may
/// DESCRIBE (Kafka asks quietly, so these are not counted as refusals).
fn list_groups(access: &Access, r: ListGroupsRequest) -> Gate {
    if access.allows_quietly(kind::CLUSTER, osprey_cluster::acl::CLUSTER_NAME, op::DESCRIBE) {
        return Gate::Handle(RequestBody::ListGroups(r), None);
    }
    let access = access.clone();
    Gate::Handle(
        RequestBody::ListGroups(r),
        finish(move |answer| match answer {
            ResponseBody::ListGroups(mut a) => {
                a.groups.retain(|g| access.allows_quietly(kind::GROUP, &g.group_id, op::DESCRIBE));
                ResponseBody::ListGroups(a)
            }
            other => other,
        }),
    )
}

fn delete_groups(access: &Access, mut r: DeleteGroupsRequest) -> Gate {
    use delete_groups_response::DeletableGroupResult;
    let (kept, refused) = split(std::mem::take(&mut r.groups_names), |g| access.allows(kind::GROUP, g, op::DELETE));
    r.groups_names = kept;
    if refused.is_empty() {
        return Gate::Handle(RequestBody::DeleteGroups(r), None);
    }
    let refused: Vec<_> = refused
        .into_iter()
        .map(|group_id| DeletableGroupResult { group_id, error_code: group_denied(), ..Default::default() })
        .collect();
    if r.groups_names.is_empty() {
        return refuse(ResponseBody::DeleteGroups(DeleteGroupsResponse { results: refused, ..Default::default() }));
    }
    Gate::Handle(
        RequestBody::DeleteGroups(r),
        finish(move |answer| match answer {
            ResponseBody::DeleteGroups(mut a) => {
                a.results.extend(refused);
                ResponseBody::DeleteGroups(a)
            }
            other => other,
        }),
    )
}

/// InitProducerId: WRITE on the transactional id; without one (an idempotent
/// producer), IDEMPOTENT_WRITE on the cluster or WRITE on some topic (Kafka 3+).
fn init_producer_id(access: &Access, r: InitProducerIdRequest) -> Gate {
    let code = match &r.transactional_id {
        Some(id) if !access.allows(kind::TRANSACTIONAL_ID, id, op::WRITE) => {
            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        }
        Some(_) => return Gate::Handle(RequestBody::InitProducerId(r), None),
        None if access.allows_any_quietly(kind::TOPIC, op::WRITE) || access.allows_cluster(op::IDEMPOTENT_WRITE) => {
            return Gate::Handle(RequestBody::InitProducerId(r), None)
        }
        None => ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
    };
    refuse(ResponseBody::InitProducerId(InitProducerIdResponse {
        error_code: code.code(),
        producer_id: -1,
        producer_epoch: -1,
        ..Default::default()
    }))
}

/// AddPartitionsToTxn: from a client (v3 and below), WRITE on the transactional id and
/// on each topic (a refused topic fails the whole request: its partitions
/// TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED); from a broker (v4+,
/// batched), CLUSTER_ACTION.
fn add_partitions_to_txn(access: &Access, r: AddPartitionsToTxnRequest, version: i16) -> Gate {
    use add_partitions_to_txn_response::{AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult};
    if version >= 4 {
        if access.allows_cluster(op::CLUSTER_ACTION) {
            return Gate::Handle(RequestBody::AddPartitionsToTxn(r), None);
        }
        return refuse(ResponseBody::AddPartitionsToTxn(AddPartitionsToTxnResponse {
            error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code(),
            ..Default::default()
        }));
    }
    let txn_allowed = access.allows(kind::TRANSACTIONAL_ID, &r.v3_and_below_transactional_id, op::WRITE);
    let refused_topics: BTreeSet<&str> = if txn_allowed {
        let topics = r.v3_and_below_topics.iter().map(|t| t.name.as_str());
        topics.filter(|name| !access.allows(kind::TOPIC, name, op::WRITE)).collect()
    } else {
        BTreeSet::new()
    };
    if txn_allowed && refused_topics.is_empty() {
        return Gate::Handle(RequestBody::AddPartitionsToTxn(r), None);
    }
    let code_for = |topic: &str| match () {
        _ if !txn_allowed => ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        _ if refused_topics.contains(topic) => ErrorCode::TOPIC_AUTHORIZATION_FAILED,
        _ => ErrorCode::OPERATION_NOT_ATTEMPTED,
    };
    let results = r
        .v3_and_below_topics
        .iter()
        .map(|t| AddPartitionsToTxnTopicResult {
            name: t.name.clone(),
            results_by_partition: t
                .partitions
                .iter()
                .map(|&partition_index| AddPartitionsToTxnPartitionResult {
                    partition_index,
                    partition_error_code: code_for(&t.name).code(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    refuse(ResponseBody::AddPartitionsToTxn(AddPartitionsToTxnResponse {
        results_by_topic_v3_and_below: results,
        ..Default::default()
    }))
}

/// TxnOffsetCommit: WRITE on the transactional id and READ on the group (else every
/// partition fails with that error), then READ on each topic.
fn txn_offset_commit(access: &Access, mut r: TxnOffsetCommitRequest) -> Gate {
    use txn_offset_commit_response::{TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic};
    let answer_for = |topics: &[txn_offset_commit_request::TxnOffsetCommitRequestTopic], code: ErrorCode| -> Vec<_> {
        topics
            .iter()
            .map(|t| TxnOffsetCommitResponseTopic {
                name: t.name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| TxnOffsetCommitResponsePartition {
                        partition_index: p.partition_index,
                        error_code: code.code(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect()
    };
    let whole = if !access.allows(kind::TRANSACTIONAL_ID, &r.transactional_id, op::WRITE) {
        Some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    } else if !access.allows(kind::GROUP, &r.group_id, op::READ) {
        Some(ErrorCode::GROUP_AUTHORIZATION_FAILED)
    } else {
        None
    };
    if let Some(code) = whole {
        let topics = answer_for(&r.topics, code);
        return refuse(ResponseBody::TxnOffsetCommit(TxnOffsetCommitResponse { topics, ..Default::default() }));
    }
    let (kept, refused) = split(std::mem::take(&mut r.topics), |t| access.allows(kind::TOPIC, &t.name, op::READ));
    r.topics = kept;
    if refused.is_empty() {
        return Gate::Handle(RequestBody::TxnOffsetCommit(r), None);
    }
    let refused = answer_for(&refused, ErrorCode::TOPIC_AUTHORIZATION_FAILED);
    Gate::Handle(
        RequestBody::TxnOffsetCommit(r),
        finish(move |answer| match answer {
            ResponseBody::TxnOffsetCommit(mut a) => {
                a.topics.extend(refused);
                ResponseBody::TxnOffsetCommit(a)
            }
            other => other,
        }),
    )
}

/// WriteTxnMarkers, an inter-broker API: CLUSTER_ACTION, else every partition
/// CLUSTER_AUTHORIZATION_FAILED.
fn write_txn_markers(access: &Access, r: WriteTxnMarkersRequest) -> Gate {
    use write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };
    if access.allows_cluster(op::CLUSTER_ACTION) {
        return Gate::Handle(RequestBody::WriteTxnMarkers(r), None);
    }
    let markers = r
        .markers
        .iter()
        .map(|m| WritableTxnMarkerResult {
            producer_id: m.producer_id,
            topics: m
                .topics
                .iter()
                .map(|t| WritableTxnMarkerTopicResult {
                    name: t.name.clone(),
                    partitions: t
                        .partition_indexes
                        .iter()
                        .map(|&partition_index| WritableTxnMarkerPartitionResult {
                            partition_index,
                            error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    refuse(ResponseBody::WriteTxnMarkers(WriteTxnMarkersResponse { markers, ..Default::default() }))
}

/// CreateTopics: CREATE on the cluster, else on each topic. From v5 the answer carries
/// each new topic's configs: only with DESCRIBE_CONFIGS on it, else its
/// `topic_config_error_code` is TOPIC_AUTHORIZATION_FAILED, as in Kafka.
fn create_topics(access: &Access, mut r: CreateTopicsRequest, version: i16) -> Gate {
    use create_topics_response::CreatableTopicResult;
    let (kept, refused) = if access.allows_quietly(kind::CLUSTER, osprey_cluster::acl::CLUSTER_NAME, op::CREATE) {
        (std::mem::take(&mut r.topics), Vec::new())
    } else {
        split(std::mem::take(&mut r.topics), |t| access.allows(kind::TOPIC, &t.name, op::CREATE))
    };
    r.topics = kept;
    if refused.is_empty() && version < 5 {
        return Gate::Handle(RequestBody::CreateTopics(r), None);
    }
    let refused: Vec<_> = refused
        .into_iter()
        .map(|t| CreatableTopicResult {
            name: t.name,
            error_code: ErrorCode::TOPIC_AUTHORIZATION_FAILED.code(),
            error_message: Some("Authorization failed.".into()),
            num_partitions: -1,
            replication_factor: -1,
            configs: None,
            ..Default::default()
        })
        .collect();
    let access = access.clone();
    Gate::Handle(
        RequestBody::CreateTopics(r),
        finish(move |answer| match answer {
            ResponseBody::CreateTopics(mut a) => {
                if version >= 5 {
                    for t in a.topics.iter_mut().filter(|t| t.error_code == 0) {
                        if !access.allows_quietly(kind::TOPIC, &t.name, op::DESCRIBE_CONFIGS) {
                            t.topic_config_error_code = ErrorCode::TOPIC_AUTHORIZATION_FAILED.code();
                            t.configs = None;
                        }
                    }
                }
                a.topics.extend(refused);
                ResponseBody::CreateTopics(a)
            }
            other => other,
        }),
    )
}

/// DeleteTopics: DELETE on each topic (by name, or by id through the image).
fn delete_topics(access: &Access, mut r: DeleteTopicsRequest) -> Gate {
    use delete_topics_response::DeletableTopicResult;
    let image = access.image();
    let denied = |name: Option<String>, topic_id: Uuid| DeletableTopicResult {
        name,
        topic_id,
        error_code: ErrorCode::TOPIC_AUTHORIZATION_FAILED.code(),
        error_message: Some(TOPIC_DENIED.into()),
        ..Default::default()
    };
    let (kept_names, refused_names) =
        split(std::mem::take(&mut r.topic_names), |name| access.allows(kind::TOPIC, name, op::DELETE));
    let (kept_states, refused_states) = split(std::mem::take(&mut r.topics), |t| {
        let name = topic_name(image, t.name.as_deref().unwrap_or_default(), t.topic_id);
        name.is_none_or(|name| access.allows(kind::TOPIC, &name, op::DELETE))
    });
    r.topic_names = kept_names;
    r.topics = kept_states;
    let refused: Vec<_> = refused_names
        .into_iter()
        .map(|name| denied(Some(name), Uuid::default()))
        .chain(refused_states.into_iter().map(|t| denied(t.name, t.topic_id)))
        .collect();
    if refused.is_empty() {
        return Gate::Handle(RequestBody::DeleteTopics(r), None);
    }
    Gate::Handle(
        RequestBody::DeleteTopics(r),
        finish(move |answer| match answer {
            ResponseBody::DeleteTopics(mut a) => {
                a.responses.extend(refused);
                ResponseBody::DeleteTopics(a)
            }
            other => other,
        }),
    )
}

fn create_partitions(access: &Access, mut r: CreatePartitionsRequest) -> Gate {
    use create_partitions_response::CreatePartitionsTopicResult;
    let (kept, refused) = split(std::mem::take(&mut r.topics), |t| access.allows(kind::TOPIC, &t.name, op::ALTER));
    r.topics = kept;
    if refused.is_empty() {
        return Gate::Handle(RequestBody::CreatePartitions(r), None);
    }
    let refused: Vec<_> = refused
        .into_iter()
        .map(|t| CreatePartitionsTopicResult {
            name: t.name,
            error_code: ErrorCode::TOPIC_AUTHORIZATION_FAILED.code(),
            error_message: Some(TOPIC_DENIED.into()),
            ..Default::default()
        })
        .collect();
    Gate::Handle(
        RequestBody::CreatePartitions(r),
        finish(move |answer| match answer {
            ResponseBody::CreatePartitions(mut a) => {
                a.results.extend(refused);
                ResponseBody::CreatePartitions(a)
            }
            other => other,
        }),
    )
}

fn delete_records(access: &Access, mut r: DeleteRecordsRequest) -> Gate {
    use delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
    let (kept, refused) = split(std::mem::take(&mut r.topics), |t| access.allows(kind::TOPIC, &t.name, op::DELETE));
    r.topics = kept;
    if refused.is_empty() {
        return Gate::Handle(RequestBody::DeleteRecords(r), None);
    }
    let refused: Vec<_> = refused
        .into_iter()
        .map(|t| DeleteRecordsTopicResult {
            name: t.name,
            partitions: t
                .partitions
                .iter()
                .map(|p| DeleteRecordsPartitionResult {
                    partition_index: p.partition_index,
                    low_watermark: -1,
                    error_code: ErrorCode::TOPIC_AUTHORIZATION_FAILED.code(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    Gate::Handle(
        RequestBody::DeleteRecords(r),
        finish(move |answer| match answer {
            ResponseBody::DeleteRecords(mut a) => {
                a.topics.extend(refused);
                ResponseBody::DeleteRecords(a)
            }
            other => other,
        }),
    )
}

/// The resource a config request names, as the authorizer sees it, and the error a
/// refusal is answered with; `None` for types the authorizer does not guard here.
fn config_resource(resource_type: i8, name: &str) -> Option<(i8, String, ErrorCode)> {
    match resource_type {
        CONFIG_TOPIC => Some((kind::TOPIC, name.to_string(), ErrorCode::TOPIC_AUTHORIZATION_FAILED)),
        CONFIG_BROKER | CONFIG_BROKER_LOGGER => Some((
            kind::CLUSTER,
            osprey_cluster::acl::CLUSTER_NAME.to_string(),
            ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
        )),
        CONFIG_GROUP => Some((kind::GROUP, name.to_string(), ErrorCode::GROUP_AUTHORIZATION_FAILED)),
        _ => None,
    }
}

/// Whether `op` is allowed on a config resource, and the error if not.
fn config_check(access: &Access, resource_type: i8, name: &str, op: i8) -> Result<(), ErrorCode> {
    match config_resource(resource_type, name) {
        Some((kind, name, code)) if !access.allows(kind, &name, op) => Err(code),
        _ => Ok(()),
    }
}

/// DescribeConfigs: DESCRIBE_CONFIGS on the topic, the group, or the cluster (brokers),
/// each refused resource answered with its error and no configs.
fn describe_configs(access: &Access, r: DescribeConfigsRequest) -> Gate {
    let access = access.clone();
    Gate::Handle(
        RequestBody::DescribeConfigs(r),
        finish(move |answer| match answer {
            ResponseBody::DescribeConfigs(mut a) => {
                for res in &mut a.results {
                    if let Err(code) =
                        config_check(&access, res.resource_type, &res.resource_name, op::DESCRIBE_CONFIGS)
                    {
                        res.error_code = code.code();
                        res.error_message = None;
                        res.configs.clear();
                    }
                }
                ResponseBody::DescribeConfigs(a)
            }
            other => other,
        }),
    )
}

fn alter_configs(access: &Access, mut r: AlterConfigsRequest) -> Gate {
    use alter_configs_response::AlterConfigsResourceResponse;
    let mut refused = Vec::new();
    r.resources.retain(|res| match config_check(access, res.resource_type, &res.resource_name, op::ALTER_CONFIGS) {
        Ok(()) => true,
        Err(code) => {
            refused.push(AlterConfigsResourceResponse {
                error_code: code.code(),
                error_message: None,
                resource_type: res.resource_type,
                resource_name: res.resource_name.clone(),
                ..Default::default()
            });
            false
        }
    });
    if refused.is_empty() {
        return Gate::Handle(RequestBody::AlterConfigs(r), None);
    }
    Gate::Handle(
        RequestBody::AlterConfigs(r),
        finish(move |answer| match answer {
            ResponseBody::AlterConfigs(mut a) => {
                a.responses.extend(refused);
                ResponseBody::AlterConfigs(a)
            }
            other => other,
        }),
    )
}

fn incremental_alter_configs(access: &Access, mut r: IncrementalAlterConfigsRequest) -> Gate {
    use incremental_alter_configs_response::AlterConfigsResourceResponse;
    let mut refused = Vec::new();
    r.resources.retain(|res| match config_check(access, res.resource_type, &res.resource_name, op::ALTER_CONFIGS) {
        Ok(()) => true,
        Err(code) => {
            refused.push(AlterConfigsResourceResponse {
                error_code: code.code(),
                error_message: None,
                resource_type: res.resource_type,
                resource_name: res.resource_name.clone(),
                ..Default::default()
            });
            false
        }
    });
    if refused.is_empty() {
        return Gate::Handle(RequestBody::IncrementalAlterConfigs(r), None);
    }
    Gate::Handle(
        RequestBody::IncrementalAlterConfigs(r),
        finish(move |answer| match answer {
            ResponseBody::IncrementalAlterConfigs(mut a) => {
                a.responses.extend(refused);
                ResponseBody::IncrementalAlterConfigs(a)
            }
            other => other,
        }),
    )
}

/// DescribeCluster: DESCRIBE on the cluster; `cluster_authorized_operations` from the
/// authorizer.
fn describe_cluster(access: &Access, r: DescribeClusterRequest) -> Gate {
    if !access.allows_cluster(op::DESCRIBE) {
        return refuse(ResponseBody::DescribeCluster(DescribeClusterResponse {
            error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code(),
            error_message: Some(CLUSTER_DENIED.into()),
            controller_id: -1,
            cluster_authorized_operations: authorized_operations::NOT_REQUESTED,
            ..Default::default()
        }));
    }
    if !r.include_cluster_authorized_operations {
        return Gate::Handle(RequestBody::DescribeCluster(r), None);
    }
    let access = access.clone();
    Gate::Handle(
        RequestBody::DescribeCluster(r),
        finish(move |answer| match answer {
            ResponseBody::DescribeCluster(mut a) => {
                a.cluster_authorized_operations = access.authorized_operations(
                    kind::CLUSTER,
                    osprey_cluster::acl::CLUSTER_NAME,
                    authorized_operations::CLUSTER,
                );
                ResponseBody::DescribeCluster(a)
            }
            other => other,
        }),
    )
}

/// DescribeTopicPartitions: DESCRIBE on each topic: a topic named is answered
/// TOPIC_AUTHORIZATION_FAILED, one listed (no names) is left out; `authorized_operations`
/// from the authorizer.
fn describe_topic_partitions(access: &Access, r: DescribeTopicPartitionsRequest) -> Gate {
    let named = !r.topics.is_empty();
    let access = access.clone();
    Gate::Handle(
        RequestBody::DescribeTopicPartitions(r),
        finish(move |answer| match answer {
            ResponseBody::DescribeTopicPartitions(mut a) => {
                a.topics.retain_mut(|t| {
                    let name = t.name.clone().unwrap_or_default();
                    if access.allows(kind::TOPIC, &name, op::DESCRIBE) {
                        t.topic_authorized_operations =
                            access.authorized_operations(kind::TOPIC, &name, authorized_operations::TOPIC);
                        return true;
                    }
                    t.error_code = ErrorCode::TOPIC_AUTHORIZATION_FAILED.code();
                    t.partitions.clear();
                    t.topic_authorized_operations = authorized_operations::NOT_REQUESTED;
                    named
                });
                ResponseBody::DescribeTopicPartitions(a)
            }
            other => other,
        }),
    )
}

/// DescribeProducers: READ on each topic, else its partitions TOPIC_AUTHORIZATION_FAILED.
fn describe_producers(access: &Access, r: DescribeProducersRequest) -> Gate {
    let access = access.clone();
    Gate::Handle(
        RequestBody::DescribeProducers(r),
        finish(move |answer| match answer {
            ResponseBody::DescribeProducers(mut a) => {
                for t in a.topics.iter_mut().filter(|t| !access.allows(kind::TOPIC, &t.name, op::READ)) {
                    for p in &mut t.partitions {
                        p.error_code = ErrorCode::TOPIC_AUTHORIZATION_FAILED.code();
                        p.error_message = None;
                        p.active_producers.clear();
                    }
                }
                ResponseBody::DescribeProducers(a)
            }
            other => other,
        }),
    )
}

/// DescribeTransactions: DESCRIBE on each transactional id, else
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED in its place.
fn describe_transactions(access: &Access, r: DescribeTransactionsRequest) -> Gate {
    let access = access.clone();
    Gate::Handle(
        RequestBody::DescribeTransactions(r),
        finish(move |answer| match answer {
            ResponseBody::DescribeTransactions(mut a) => {
                for t in &mut a.transaction_states {
                    if !access.allows(kind::TRANSACTIONAL_ID, &t.transactional_id, op::DESCRIBE) {
                        *t = describe_transactions_response::TransactionState {
                            error_code: ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code(),
                            transactional_id: std::mem::take(&mut t.transactional_id),
                            producer_id: -1,
                            producer_epoch: -1,
                            ..Default::default()
                        };
                    }
                }
                ResponseBody::DescribeTransactions(a)
            }
            other => other,
        }),
    )
}

/// ListTransactions: the transactional ids the principal may DESCRIBE (asked quietly,
/// as Kafka filters them).
fn list_transactions(access: &Access, r: ListTransactionsRequest) -> Gate {
    let access = access.clone();
    Gate::Handle(
        RequestBody::ListTransactions(r),
        finish(move |answer| match answer {
            ResponseBody::ListTransactions(mut a) => {
                a.transaction_states
                    .retain(|t| access.allows_quietly(kind::TRANSACTIONAL_ID, &t.transactional_id, op::DESCRIBE));
                ResponseBody::ListTransactions(a)
            }
            other => other,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authorizer::{Authorizer, STANDARD_AUTHORIZER};
    use osprey_cluster::acl::{pattern_type, permission_type, AclEntry};
    use osprey_cluster::MetadataRecord;

    /// An image with topics `a` and `b` and `acls`, seen by `principal`.
    fn access(principal: &str, acls: &[(i8, &str, i8)]) -> Access {
        let mut image = MetadataImage::default();
        for (i, name) in ["a", "b"].iter().enumerate() {
            image.apply(&MetadataRecord::CreateTopic {
                name: name.to_string(),
                id: [i as u8 + 1; 16],
                replicas: vec![vec![1]],
                configs: Default::default(),
                isrs: None,
            });
        }
        for (i, &(resource_type, name, operation)) in acls.iter().enumerate() {
            let acl = AclEntry {
                resource_type,
                resource_name: name.into(),
                pattern_type: pattern_type::LITERAL,
                principal: "User:alice".into(),
                host: "*".into(),
                operation,
                permission_type: permission_type::ALLOW,
            };
            image.apply(&MetadataRecord::AccessControlEntry { id: [i as u8 + 100; 16], acl });
        }
        let authorizer = Authorizer::from_config(STANDARD_AUTHORIZER, "User:admin", false);
        Access::for_test(authorizer, image, principal, "127.0.0.1")
    }

    fn produce_request(transactional_id: Option<&str>) -> RequestBody {
        let topic = |name: &str| produce_request::TopicProduceData {
            name: name.into(),
            partition_data: vec![produce_request::PartitionProduceData { index: 0, ..Default::default() }],
            ..Default::default()
        };
        RequestBody::Produce(ProduceRequest {
            transactional_id: transactional_id.map(str::to_string),
            topic_data: vec![topic("a"), topic("b")],
            ..Default::default()
        })
    }

    fn produce_codes(answer: &ResponseBody) -> Vec<(String, i16)> {
        let ResponseBody::Produce(a) = answer else { panic!("{answer:?}") };
        a.responses.iter().map(|t| (t.name.clone(), t.partition_responses[0].error_code)).collect()
    }

    #[test]
    fn produce_is_narrowed_to_the_writable_topics_and_the_others_answered_topic_authorization_failed() {
        let alice = access("User:alice", &[(kind::TOPIC, "a", op::WRITE)]);
        let Gate::Handle(RequestBody::Produce(narrowed), Some(finish)) = gate(&alice, produce_request(None), 9) else {
            panic!()
        };
        let names: Vec<&str> = narrowed.topic_data.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a"]);
        let answer = finish(ResponseBody::Produce(ProduceResponse::default()));
        assert_eq!(produce_codes(&answer), [("b".to_string(), ErrorCode::TOPIC_AUTHORIZATION_FAILED.code())]);
        // A super user is not narrowed.
        let admin = access("User:admin", &[]);
        assert!(matches!(gate(&admin, produce_request(None), 9), Gate::Handle(_, None)));
    }

    #[test]
    fn transactional_produce_needs_write_on_the_transactional_id() {
        let alice = access("User:alice", &[(kind::TOPIC, "a", op::WRITE), (kind::TOPIC, "b", op::WRITE)]);
        let Gate::Refuse(answer) = gate(&alice, produce_request(Some("tx")), 9) else { panic!() };
        let code = ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code();
        assert_eq!(produce_codes(&answer), [("a".to_string(), code), ("b".to_string(), code)]);
        let allowed = access(
            "User:alice",
            &[(kind::TOPIC, "a", op::WRITE), (kind::TOPIC, "b", op::WRITE), (kind::TRANSACTIONAL_ID, "tx", op::WRITE)],
        );
        assert!(matches!(gate(&allowed, produce_request(Some("tx")), 9), Gate::Handle(_, None)));
    }

    #[test]
    fn a_follower_fetch_needs_cluster_action() {
        let fetch = |replica_id: i32| {
            RequestBody::Fetch(FetchRequest {
                replica_id,
                replica_state: fetch_request::ReplicaState { replica_id: -1, ..Default::default() },
                topics: vec![fetch_request::FetchTopic {
                    topic: "a".into(),
                    partitions: vec![Default::default()],
                    ..Default::default()
                }],
                ..Default::default()
            })
        };
        let reader = access("User:alice", &[(kind::TOPIC, "a", op::READ)]);
        assert!(matches!(gate(&reader, fetch(-1), 12), Gate::Handle(_, None)));
        let Gate::Refuse(ResponseBody::Fetch(refused)) = gate(&reader, fetch(2), 12) else { panic!() };
        assert_eq!(refused.responses[0].partitions[0].error_code, ErrorCode::TOPIC_AUTHORIZATION_FAILED.code());
        let broker = access("User:alice", &[(kind::CLUSTER, osprey_cluster::acl::CLUSTER_NAME, op::CLUSTER_ACTION)]);
        assert!(matches!(gate(&broker, fetch(2), 12), Gate::Handle(_, None)));
    }

    #[test]
    fn an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic() {
        let init =
            || RequestBody::InitProducerId(InitProducerIdRequest { transactional_id: None, ..Default::default() });
        let Gate::Refuse(ResponseBody::InitProducerId(refused)) = gate(&access("User:alice", &[]), init(), 4) else {
            panic!()
        };
        assert_eq!(refused.error_code, ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code());
        assert_eq!(refused.producer_id, -1);
        let writer = access("User:alice", &[(kind::TOPIC, "b", op::WRITE)]);
        assert!(matches!(gate(&writer, init(), 4), Gate::Handle(_, None)));
        let idempotent =
            access("User:alice", &[(kind::CLUSTER, osprey_cluster::acl::CLUSTER_NAME, op::IDEMPOTENT_WRITE)]);
        assert!(matches!(gate(&idempotent, init(), 4), Gate::Handle(_, None)));
    }

    #[test]
    fn metadata_hides_topics_not_described_and_refuses_named_ones() {
        let alice = access("User:alice", &[(kind::TOPIC, "a", op::READ)]);
        let topic =
            |name: &str| metadata_response::MetadataResponseTopic { name: Some(name.into()), ..Default::default() };
        let all = RequestBody::Metadata(MetadataRequest { topics: None, ..Default::default() });
        let Gate::Handle(_, Some(finish)) = gate(&alice, all, 12) else { panic!() };
        let answer = finish(ResponseBody::Metadata(MetadataResponse {
            topics: vec![topic("a"), topic("b")],
            ..Default::default()
        }));
        let ResponseBody::Metadata(answer) = answer else { panic!() };
        let listed: Vec<_> = answer.topics.iter().map(|t| (t.name.clone().unwrap(), t.error_code)).collect();
        assert_eq!(listed, [("a".to_string(), 0)]);

        let named =
            |name: &str| metadata_request::MetadataRequestTopic { name: Some(name.into()), ..Default::default() };
        let request = MetadataRequest {
            topics: Some(vec![named("a"), named("b"), named("new")]),
            allow_auto_topic_creation: true,
            ..Default::default()
        };
        let Gate::Handle(RequestBody::Metadata(narrowed), Some(finish)) =
            gate(&alice, RequestBody::Metadata(request), 12)
        else {
            panic!()
        };
        let asked: Vec<_> = narrowed.topics.unwrap().into_iter().map(|t| t.name.unwrap()).collect();
        assert_eq!(asked, ["a"]);
        let ResponseBody::Metadata(answer) = finish(ResponseBody::Metadata(MetadataResponse::default())) else {
            panic!()
        };
        let refused: Vec<_> = answer.topics.iter().map(|t| (t.name.clone().unwrap(), t.error_code)).collect();
        let code = ErrorCode::TOPIC_AUTHORIZATION_FAILED.code();
        assert_eq!(refused, [("b".to_string(), code), ("new".to_string(), code)]);
    }

    #[test]
    fn group_and_cluster_apis_are_refused_with_their_errors() {
        let alice = access("User:alice", &[]);
        let join = RequestBody::JoinGroup(JoinGroupRequest { group_id: "g".into(), ..Default::default() });
        let Gate::Refuse(ResponseBody::JoinGroup(refused)) = gate(&alice, join, 5) else { panic!() };
        assert_eq!(refused.error_code, ErrorCode::GROUP_AUTHORIZATION_FAILED.code());
        let elect = RequestBody::ElectLeaders(ElectLeadersRequest::default());
        let Gate::Refuse(ResponseBody::ElectLeaders(refused)) = gate(&alice, elect, 2) else { panic!() };
        assert_eq!(refused.error_code, ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code());
        let markers = RequestBody::WriteTxnMarkers(WriteTxnMarkersRequest::default());
        assert!(matches!(gate(&alice, markers, 1), Gate::Refuse(_)));
        let reader = access("User:alice", &[(kind::GROUP, "g", op::READ)]);
        let join = RequestBody::JoinGroup(JoinGroupRequest { group_id: "g".into(), ..Default::default() });
        assert!(matches!(gate(&reader, join, 5), Gate::Handle(_, None)));
    }

    /// Share coordinators are the brokers' to look up: CLUSTER_ACTION from v6, where the
    /// key type exists; the handler answers older versions.
    #[test]
    fn share_coordinator_lookups_need_cluster_action() {
        let find = || {
            RequestBody::FindCoordinator(FindCoordinatorRequest {
                key_type: 2,
                coordinator_keys: vec!["g:AAAAAAAAAAAAAAAAAAAAAA:0".into(), "h:AAAAAAAAAAAAAAAAAAAAAA:1".into()],
                ..Default::default()
            })
        };
        let alice = access("User:alice", &[(kind::GROUP, "g", op::ALL)]);
        let Gate::Refuse(ResponseBody::FindCoordinator(refused)) = gate(&alice, find(), 6) else { panic!() };
        let codes: Vec<_> = refused.coordinators.iter().map(|c| (c.key.as_str(), c.error_code, c.node_id)).collect();
        let denied = ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code();
        assert_eq!(codes, [("g:AAAAAAAAAAAAAAAAAAAAAA:0", denied, -1), ("h:AAAAAAAAAAAAAAAAAAAAAA:1", denied, -1)]);
        assert!(matches!(gate(&alice, find(), 5), Gate::Handle(_, None)), "INVALID_REQUEST, the handler's");
        let broker = access("User:alice", &[(kind::CLUSTER, osprey_cluster::acl::CLUSTER_NAME, op::CLUSTER_ACTION)]);
        assert!(matches!(gate(&broker, find(), 6), Gate::Handle(_, None)));
    }

    /// The share-group state APIs are the brokers': CLUSTER_ACTION, else every share
    /// partition CLUSTER_AUTHORIZATION_FAILED with Kafka's message.
    #[test]
    fn share_state_requests_need_cluster_action() {
        use write_share_group_state_request::{PartitionData, WriteStateData};
        let write = || {
            let partitions = vec![
                PartitionData { partition: 0, ..Default::default() },
                PartitionData { partition: 1, ..Default::default() },
            ];
            RequestBody::WriteShareGroupState(WriteShareGroupStateRequest {
                group_id: "g".into(),
                topics: vec![WriteStateData { topic_id: Uuid([1; 16]), partitions, ..Default::default() }],
                ..Default::default()
            })
        };
        let alice = access("User:alice", &[(kind::GROUP, "g", op::ALL)]);
        let Gate::Refuse(ResponseBody::WriteShareGroupState(refused)) = gate(&alice, write(), 1) else { panic!() };
        let answered: Vec<_> = refused.results[0]
            .partitions
            .iter()
            .map(|p| (p.partition, p.error_code, p.error_message.as_deref()))
            .collect();
        let denied = ErrorCode::CLUSTER_AUTHORIZATION_FAILED.code();
        assert_eq!(answered, [(0, denied, Some(CLUSTER_DENIED)), (1, denied, Some(CLUSTER_DENIED))]);
        let broker = access("User:alice", &[(kind::CLUSTER, osprey_cluster::acl::CLUSTER_NAME, op::CLUSTER_ACTION)]);
        assert!(matches!(gate(&broker, write(), 1), Gate::Handle(_, None)));
    }

    /// DescribeShareGroupOffsets: a group the client may not describe is refused in its
    /// place, a topic it names but may not describe is answered TOPIC_AUTHORIZATION_FAILED
    /// beside the others, and of all a group's topics only the describable are listed.
    #[test]
    fn share_group_offsets_show_only_what_the_client_may_describe() {
        use describe_share_group_offsets_request::{
            DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic,
        };
        use describe_share_group_offsets_response::{
            DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponseTopic,
        };
        let alice = access(
            "User:alice",
            &[
                (kind::GROUP, "named", op::DESCRIBE),
                (kind::GROUP, "all", op::DESCRIBE),
                (kind::TOPIC, "a", op::DESCRIBE),
            ],
        );
        let topic = |name: &str| DescribeShareGroupOffsetsRequestTopic {
            topic_name: name.into(),
            partitions: vec![0],
            ..Default::default()
        };
        let group = |id: &str, topics: Option<Vec<DescribeShareGroupOffsetsRequestTopic>>| {
            DescribeShareGroupOffsetsRequestGroup { group_id: id.into(), topics, ..Default::default() }
        };
        let req = DescribeShareGroupOffsetsRequest {
            groups: vec![group("named", Some(vec![topic("a"), topic("b")])), group("all", None), group("theirs", None)],
            ..Default::default()
        };
        let Gate::Handle(RequestBody::DescribeShareGroupOffsets(narrowed), Some(finish)) =
            gate(&alice, RequestBody::DescribeShareGroupOffsets(req), 1)
        else {
            panic!()
        };
        let asked: Vec<_> =
            narrowed.groups.iter().map(|g| (g.group_id.as_str(), g.topics.as_ref().map(Vec::len))).collect();
        assert_eq!(asked, [("named", Some(1)), ("all", None)]);
        let described =
            |name: &str| DescribeShareGroupOffsetsResponseTopic { topic_name: name.into(), ..Default::default() };
        let answered = |id: &str, topics: Vec<DescribeShareGroupOffsetsResponseTopic>| {
            DescribeShareGroupOffsetsResponseGroup { group_id: id.into(), topics, ..Default::default() }
        };
        let answer = finish(ResponseBody::DescribeShareGroupOffsets(DescribeShareGroupOffsetsResponse {
            groups: vec![
                answered("named", vec![described("a")]),
                answered("all", vec![described("a"), described("b")]),
            ],
            ..Default::default()
        }));
        let ResponseBody::DescribeShareGroupOffsets(answer) = answer else { panic!() };
        let seen: Vec<_> = answer
            .groups
            .iter()
            .map(|g| {
                let topics: Vec<_> = g
                    .topics
                    .iter()
                    .map(|t| (t.topic_name.as_str(), t.partitions.first().map(|p| p.error_code)))
                    .collect();
                (g.group_id.as_str(), g.error_code, topics)
            })
            .collect();
        let denied = ErrorCode::TOPIC_AUTHORIZATION_FAILED.code();
        assert_eq!(
            seen,
            [
                ("named", 0, vec![("a", None), ("b", Some(denied))]),
                ("all", 0, vec![("a", None)]),
                ("theirs", group_denied(), vec![]),
            ]
        );
    }

    /// Alter needs READ on the group (else refused whole), Delete DELETE; a topic the
    /// client may not READ is answered TOPIC_AUTHORIZATION_FAILED unless the answer is a
    /// group error.
    #[test]
    fn altering_and_deleting_share_group_offsets_need_the_group_and_its_topics() {
        use alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic;
        use delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
        let alter = || {
            let topic =
                |name: &str| AlterShareGroupOffsetsRequestTopic { topic_name: name.into(), ..Default::default() };
            RequestBody::AlterShareGroupOffsets(AlterShareGroupOffsetsRequest {
                group_id: "g".into(),
                topics: vec![topic("a"), topic("b")],
                ..Default::default()
            })
        };
        let delete = || {
            let topic =
                |name: &str| DeleteShareGroupOffsetsRequestTopic { topic_name: name.into(), ..Default::default() };
            RequestBody::DeleteShareGroupOffsets(DeleteShareGroupOffsetsRequest {
                group_id: "g".into(),
                topics: vec![topic("a"), topic("b")],
                ..Default::default()
            })
        };
        let reader = access("User:alice", &[(kind::GROUP, "g", op::READ), (kind::TOPIC, "a", op::READ)]);
        let Gate::Refuse(ResponseBody::DeleteShareGroupOffsets(refused)) = gate(&reader, delete(), 0) else { panic!() };
        assert_eq!((refused.error_code, refused.error_message.as_deref()), (group_denied(), Some(GROUP_DENIED)));
        let Gate::Handle(RequestBody::AlterShareGroupOffsets(narrowed), Some(finish)) = gate(&reader, alter(), 0)
        else {
            panic!()
        };
        assert_eq!(narrowed.topics.len(), 1);
        let ResponseBody::AlterShareGroupOffsets(answer) =
            finish(ResponseBody::AlterShareGroupOffsets(Default::default()))
        else {
            panic!()
        };
        assert_eq!(answer.responses[0].topic_name, "b");
        assert_eq!(answer.responses[0].topic_id, Uuid([2; 16]), "the topic's id, as the metadata has it");

        let deleter = access("User:alice", &[(kind::GROUP, "g", op::DELETE), (kind::TOPIC, "a", op::READ)]);
        let Gate::Handle(_, Some(finish)) = gate(&deleter, delete(), 0) else { panic!() };
        let ResponseBody::DeleteShareGroupOffsets(answer) =
            finish(ResponseBody::DeleteShareGroupOffsets(Default::default()))
        else {
            panic!()
        };
        let codes: Vec<_> = answer.responses.iter().map(|t| (t.topic_name.as_str(), t.error_code)).collect();
        assert_eq!(codes, [("b", ErrorCode::TOPIC_AUTHORIZATION_FAILED.code())]);
        let Gate::Handle(_, Some(finish)) = gate(&deleter, delete(), 0) else { panic!() };
        let non_empty =
            DeleteShareGroupOffsetsResponse { error_code: ErrorCode::NON_EMPTY_GROUP.code(), ..Default::default() };
        let ResponseBody::DeleteShareGroupOffsets(answer) = finish(ResponseBody::DeleteShareGroupOffsets(non_empty))
        else {
            panic!()
        };
        assert!(answer.responses.is_empty(), "a group error is the whole answer, as Kafka's");
    }

    #[test]
    fn a_share_member_needs_read_on_its_group_and_describe_on_its_topics() {
        let heartbeat = |topics: &[&str]| {
            RequestBody::ShareGroupHeartbeat(ShareGroupHeartbeatRequest {
                group_id: "g".into(),
                member_id: "m".into(),
                subscribed_topic_names: Some(topics.iter().map(|t| t.to_string()).collect()),
                ..Default::default()
            })
        };
        let refusal = |alice: &Access, topics: &[&str]| match gate(alice, heartbeat(topics), 1) {
            Gate::Refuse(ResponseBody::ShareGroupHeartbeat(r)) => Some(r),
            Gate::Handle(RequestBody::ShareGroupHeartbeat(_), None) => None,
            other => panic!("{other:?}"),
        };
        let nobody = access("User:alice", &[(kind::TOPIC, "a", op::DESCRIBE)]);
        let refused = refusal(&nobody, &["a"]).unwrap();
        // Only the error code, as Kafka's getErrorResponse.
        let expected = ShareGroupHeartbeatResponse { error_code: group_denied(), ..Default::default() };
        assert_eq!(refused, expected);
        let member = access("User:alice", &[(kind::GROUP, "g", op::READ), (kind::TOPIC, "a", op::DESCRIBE)]);
        let refused = refusal(&member, &["a", "b"]).unwrap();
        assert_eq!(refused.error_code, ErrorCode::TOPIC_AUTHORIZATION_FAILED.code());
        assert!(refusal(&member, &["a"]).is_none());
    }

    /// A streams member needs READ on its group and DESCRIBE on every topic its topology
    /// names (source, repartition and changelog topics); a described streams group whose
    /// topology uses a topic the client may not DESCRIBE is answered without it.
    #[test]
    fn a_streams_member_needs_read_on_its_group_and_describe_on_its_topology() {
        use streams_group_heartbeat_request::{Subtopology, TopicInfo, Topology};
        let heartbeat = |changelog: &str| {
            RequestBody::StreamsGroupHeartbeat(StreamsGroupHeartbeatRequest {
                group_id: "app".into(),
                member_id: "m".into(),
                topology: Some(Topology {
                    subtopologies: vec![Subtopology {
                        source_topics: vec!["a".into()],
                        state_changelog_topics: vec![TopicInfo { name: changelog.into(), ..Default::default() }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        let refusal = |alice: &Access, changelog: &str| match gate(alice, heartbeat(changelog), 1) {
            Gate::Refuse(ResponseBody::StreamsGroupHeartbeat(r)) => Some(r.error_code),
            Gate::Handle(RequestBody::StreamsGroupHeartbeat(_), None) => None,
            other => panic!("{other:?}"),
        };
        let reader = [(kind::GROUP, "app", op::READ), (kind::TOPIC, "a", op::DESCRIBE)];
        assert_eq!(refusal(&access("User:alice", &reader[1..]), "a"), Some(group_denied()));
        let alice = access("User:alice", &reader);
        assert_eq!(refusal(&alice, "b"), Some(ErrorCode::TOPIC_AUTHORIZATION_FAILED.code()));
        assert_eq!(refusal(&alice, "a"), None);

        use streams_group_describe_response::{
            DescribedGroup, Subtopology as Described, Topology as DescribedTopology,
        };
        let group = |id: &str, topic: &str| DescribedGroup {
            group_id: id.into(),
            topology: Some(DescribedTopology {
                subtopologies: Some(vec![Described { source_topics: vec![topic.into()], ..Default::default() }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let alice = access("User:alice", &[(kind::GROUP, "app", op::DESCRIBE), (kind::TOPIC, "a", op::DESCRIBE)]);
        let request = StreamsGroupDescribeRequest { group_ids: vec!["app".into()], ..Default::default() };
        let Gate::Handle(_, Some(finish)) = gate(&alice, RequestBody::StreamsGroupDescribe(request), 1) else {
            panic!()
        };
        let answer = StreamsGroupDescribeResponse { groups: vec![group("app", "b")], ..Default::default() };
        let ResponseBody::StreamsGroupDescribe(answer) = finish(ResponseBody::StreamsGroupDescribe(answer)) else {
            panic!()
        };
        assert_eq!(answer.groups[0].error_code, ErrorCode::TOPIC_AUTHORIZATION_FAILED.code());
        assert_eq!(
            answer.groups[0].error_message.as_deref(),
            Some("The described group uses topics that the client is not authorized to describe.")
        );
        assert_eq!(answer.groups[0].topology, None);
    }

    /// A group the client may not DESCRIBE is refused in its place; one whose members are
    /// assigned a topic it may not DESCRIBE is answered without them; the rest get their
    /// authorized operations. The same for consumer groups, whose target assignments count.
    #[test]
    fn described_share_and_consumer_groups_hide_groups_and_topics_the_client_may_not_see() {
        let alice = access(
            "User:alice",
            &[(kind::GROUP, "mine", op::READ), (kind::GROUP, "hiding", op::DESCRIBE), (kind::TOPIC, "a", op::READ)],
        );
        let request = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect::<Vec<_>>();
        let share = RequestBody::ShareGroupDescribe(ShareGroupDescribeRequest {
            group_ids: request(&["mine", "hiding", "theirs"]),
            include_authorized_operations: true,
            ..Default::default()
        });
        let Gate::Handle(_, Some(finish)) = gate(&alice, share, 1) else { panic!() };
        let share_group = |id: &str, topic: &str| {
            use share_group_describe_response::{Assignment, DescribedGroup, Member, TopicPartitions};
            let tp = TopicPartitions { topic_name: topic.into(), partitions: vec![0], ..Default::default() };
            let member = Member {
                assignment: Assignment { topic_partitions: vec![tp], ..Default::default() },
                ..Default::default()
            };
            DescribedGroup {
                group_id: id.into(),
                group_state: "Stable".into(),
                members: vec![member],
                ..Default::default()
            }
        };
        let answer = finish(ResponseBody::ShareGroupDescribe(ShareGroupDescribeResponse {
            groups: vec![share_group("mine", "a"), share_group("hiding", "b"), share_group("theirs", "a")],
            ..Default::default()
        }));
        let ResponseBody::ShareGroupDescribe(answer) = answer else { panic!() };
        let seen: Vec<_> = answer
            .groups
            .iter()
            .map(|g| (g.group_id.as_str(), g.error_code, g.members.len(), g.authorized_operations))
            .collect();
        let topic_denied = ErrorCode::TOPIC_AUTHORIZATION_FAILED.code();
        let not_requested = authorized_operations::NOT_REQUESTED;
        let read_describe = (1 << op::READ) | (1 << op::DESCRIBE);
        assert_eq!(
            seen,
            [
                ("mine", 0, 1, read_describe),
                ("hiding", topic_denied, 0, not_requested),
                ("theirs", group_denied(), 0, not_requested)
            ]
        );
        assert_eq!(
            answer.groups[1].error_message.as_deref(),
            Some("The group has described topic(s) that the client is not authorized to describe.")
        );

        let consumer = RequestBody::ConsumerGroupDescribe(ConsumerGroupDescribeRequest {
            group_ids: request(&["mine"]),
            ..Default::default()
        });
        let Gate::Handle(_, Some(finish)) = gate(&alice, consumer, 1) else { panic!() };
        use consumer_group_describe_response::{Assignment, DescribedGroup, Member, TopicPartitions};
        let tp = TopicPartitions { topic_name: "b".into(), partitions: vec![0], ..Default::default() };
        let target = Assignment { topic_partitions: vec![tp], ..Default::default() };
        let member = Member { target_assignment: target, ..Default::default() };
        let answer = finish(ResponseBody::ConsumerGroupDescribe(ConsumerGroupDescribeResponse {
            groups: vec![DescribedGroup { group_id: "mine".into(), members: vec![member], ..Default::default() }],
            ..Default::default()
        }));
        let ResponseBody::ConsumerGroupDescribe(answer) = answer else { panic!() };
        assert_eq!((answer.groups[0].error_code, answer.groups[0].members.len()), (topic_denied, 0));
    }

    #[test]
    fn describe_transactions_answers_refused_ids_in_their_place() {
        let alice = access("User:alice", &[(kind::TRANSACTIONAL_ID, "mine", op::WRITE)]);
        let Gate::Handle(_, Some(finish)) = gate(&alice, RequestBody::DescribeTransactions(Default::default()), 0)
        else {
            panic!()
        };
        let state = |id: &str| describe_transactions_response::TransactionState {
            transactional_id: id.into(),
            transaction_state: "Ongoing".into(),
            ..Default::default()
        };
        let answer = finish(ResponseBody::DescribeTransactions(DescribeTransactionsResponse {
            transaction_states: vec![state("mine"), state("theirs")],
            ..Default::default()
        }));
        let ResponseBody::DescribeTransactions(answer) = answer else { panic!() };
        let codes: Vec<_> =
            answer.transaction_states.iter().map(|t| (t.transactional_id.as_str(), t.error_code)).collect();
        assert_eq!(codes, [("mine", 0), ("theirs", ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code())]);
        assert_eq!(answer.transaction_states[1].transaction_state, "");
    }

    /// Every refusal, narrowed request and finished answer encodes at every advertised
    /// version: a field set that the version lacks, or a null it does not allow, would
    /// fail the answer instead of refusing.
    #[test]
    fn refusals_and_narrowed_requests_encode_at_every_advertised_version() {
        use osprey_protocol::wire::TestRng;
        let everyone = [access("User:alice", &[]), access("User:alice", &[(kind::TOPIC, "a", op::ALL)])];
        let mut rng = TestRng::new(7);
        for &(key, min, max) in crate::supported::ADVERTISED {
            for version in min..=max {
                for seed in 0..20 {
                    let alice = &everyone[seed % 2];
                    let request = RequestBody::random(key, &mut rng, version);
                    let mut buf = bytes::BytesMut::new();
                    match gate(alice, request, version) {
                        Gate::Refuse(answer) => answer
                            .encode(&mut buf, version)
                            .unwrap_or_else(|e| panic!("{} v{version} refusal: {e:?}", key.name())),
                        Gate::Handle(narrowed, finish) => {
                            narrowed
                                .encode(&mut buf, version)
                                .unwrap_or_else(|e| panic!("{} v{version} narrowed: {e:?}", key.name()));
                            if let Some(finish) = finish {
                                let answer = finish(ResponseBody::random(key, &mut rng, version));
                                answer
                                    .encode(&mut buf, version)
                                    .unwrap_or_else(|e| panic!("{} v{version} finished: {e:?}", key.name()));
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn created_topics_show_their_configs_only_with_describe_configs() {
        let cluster = osprey_cluster::acl::CLUSTER_NAME;
        let alice =
            access("User:alice", &[(kind::CLUSTER, cluster, op::CREATE), (kind::TOPIC, "b", op::ALTER_CONFIGS)]);
        let request = |name: &str| create_topics_request::CreatableTopic { name: name.into(), ..Default::default() };
        let body = RequestBody::CreateTopics(CreateTopicsRequest {
            topics: vec![request("a"), request("b")],
            ..Default::default()
        });
        let Gate::Handle(_, Some(finish)) = gate(&alice, body, 7) else { panic!() };
        let result = |name: &str| create_topics_response::CreatableTopicResult {
            name: name.into(),
            configs: Some(Vec::new()),
            ..Default::default()
        };
        let answer = finish(ResponseBody::CreateTopics(CreateTopicsResponse {
            topics: vec![result("a"), result("b")],
            ..Default::default()
        }));
        let ResponseBody::CreateTopics(answer) = answer else { panic!() };
        let seen: Vec<_> =
            answer.topics.iter().map(|t| (t.name.as_str(), t.topic_config_error_code, t.configs.is_some())).collect();
        let code = ErrorCode::TOPIC_AUTHORIZATION_FAILED.code();
        assert_eq!(seen, [("a", code, false), ("b", 0, true)]);
    }

    #[test]
    fn list_groups_without_describe_on_the_cluster_lists_the_describable_groups() {
        let alice = access("User:alice", &[(kind::GROUP, "mine", op::READ)]);
        let Gate::Handle(_, Some(finish)) = gate(&alice, RequestBody::ListGroups(Default::default()), 4) else {
            panic!()
        };
        let group = |id: &str| list_groups_response::ListedGroup { group_id: id.into(), ..Default::default() };
        let answer = finish(ResponseBody::ListGroups(ListGroupsResponse {
            groups: vec![group("mine"), group("theirs")],
            ..Default::default()
        }));
        let ResponseBody::ListGroups(answer) = answer else { panic!() };
        let ids: Vec<_> = answer.groups.iter().map(|g| g.group_id.as_str()).collect();
        assert_eq!(ids, ["mine"]);
    }
}
