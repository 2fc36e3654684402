//! OffsetCommit v2-10, OffsetFetch v1-10 and OffsetDelete v0.

use super::rebalance::schedule_session;
use super::state::{CommittedOffset, Group, GroupState, TopicPartition};
use super::streams::StreamsCommitter;
use super::sync::validate_current_member;
use super::{records, GroupCoordinator, ReplyId, Response};
use osprey_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use osprey_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use osprey_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics;
use osprey_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartitions, OffsetFetchResponseTopics,
};
use osprey_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse};
use osprey_protocol::ErrorCode;

/// OffsetCommit v2-v4's `retention_time_ms` meaning "the broker's retention".
const DEFAULT_RETENTION_TIME: i64 = -1;

/// An OffsetCommit waiting for its records to be durable.
#[derive(Debug)]
pub(super) struct PendingCommit {
    group_id: String,
    reply: ReplyId,
    /// Every partition of the request, in request order, with the offset to commit or
    /// the error it already has (OFFSET_METADATA_TOO_LARGE).
    partitions: Vec<(TopicPartition, Result<CommittedOffset, ErrorCode>)>,
}

impl GroupCoordinator {
    /// An OffsetCommit request (v10: the server has filled in topic names from ids);
    /// answered later for `reply`, once the offsets are durable.
    pub fn commit_offsets(&mut self, request: &OffsetCommitRequest, api_version: i16, reply: ReplyId, now_ms: i64) {
        let partitions: Vec<(TopicPartition, Result<CommittedOffset, ErrorCode>)> = request
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t, p)))
            .map(|(t, p)| {
                let metadata = p.committed_metadata.clone().unwrap_or_default();
                let offset = if metadata.encode_utf16().count() > self.config.offset_metadata_max_bytes {
                    Err(ErrorCode::OFFSET_METADATA_TOO_LARGE)
                } else {
                    let retention = request.retention_time_ms;
                    Ok(CommittedOffset {
                        offset: p.committed_offset,
                        leader_epoch: if api_version >= 6 { p.committed_leader_epoch } else { -1 },
                        metadata,
                        commit_timestamp_ms: now_ms,
                        expire_timestamp_ms: (api_version <= 4 && retention != DEFAULT_RETENTION_TIME)
                            .then_some(now_ms.saturating_add(retention)),
                        log_sequence: 0,
                    })
                };
                ((t.name.clone(), p.partition_index), offset)
            })
            .collect();
        let mut commit = PendingCommit { group_id: request.group_id.clone(), reply, partitions };
        if let Some(error) = self.serving_error(&request.group_id) {
            return self.answer_commit(commit, Err(error));
        }
        let instance_id = if api_version >= 7 { request.group_instance_id.as_deref() } else { None };
        let streams_committer = StreamsCommitter {
            member_id: &request.member_id,
            instance_id,
            member_epoch: request.generation_id_or_member_epoch,
            transactional: false,
            api_version,
        };
        let committed =
            request.topics.iter().flat_map(|t| t.partitions.iter().map(|p| (t.name.as_str(), p.partition_index)));
        let validation = match self.validate_consumer_group_commit(request, api_version, now_ms) {
            Some(result) => result,
            None => {
                match self.validate_streams_group_commit(&request.group_id, &streams_committer, committed, now_ms) {
                    Some(result) => result,
                    None => self.validate_commit(request, instance_id, now_ms),
                }
            }
        };
        if let Err(error) = validation {
            return self.answer_commit(commit, Err(error));
        }
        let group_id = request.group_id.clone();
        let group = self.groups.get_mut(&group_id).expect("validate_commit created the group");
        let records: Vec<records::Record> = commit
            .partitions
            .iter()
            .filter_map(|(tp, offset)| offset.as_ref().ok().map(|o| records::offset_commit_record(&group_id, tp, o)))
            .collect();
        if records.is_empty() {
            // Nothing valid to write: answer with the per-partition errors.
            return self.answer_commit(commit, Ok(()));
        }
        for (tp, offset) in &commit.partitions {
            if offset.is_ok() {
                *group.pending_offset_commits.entry(tp.clone()).or_insert(0) += 1;
            }
        }
        commit.group_id = group_id.clone();
        self.persist(&group_id, records, records::Continuation::OffsetCommit(Box::new(commit)));
    }

    /// Kafka's `handleCommitOffsets` / `validateOffsetCommit`. A commit with generation -1
    /// and no member id comes from a consumer that assigns its own partitions (or an
    /// admin tool): allowed only while the group has no members, and it creates the group.
    fn validate_commit(
        &mut self,
        request: &OffsetCommitRequest,
        instance_id: Option<&str>,
        now_ms: i64,
    ) -> Result<(), ErrorCode> {
        let generation = request.generation_id_or_member_epoch;
        if !self.groups.contains_key(&request.group_id) {
            if generation >= 0 {
                return Err(ErrorCode::ILLEGAL_GENERATION);
            }
            self.groups.insert(request.group_id.clone(), Group::new(&request.group_id, now_ms));
        }
        let group = self.groups.get_mut(&request.group_id).expect("present");
        if group.is(GroupState::Dead) {
            return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
        }
        if generation >= 0 || !request.member_id.is_empty() || instance_id.is_some() {
            validate_current_member(group, &request.member_id, instance_id)?;
            if generation != group.generation_id {
                return Err(ErrorCode::ILLEGAL_GENERATION);
            }
        } else if !group.is(GroupState::Empty) {
            return Err(ErrorCode::UNKNOWN_MEMBER_ID);
        }
        match group.state {
            GroupState::CompletingRebalance => Err(ErrorCode::REBALANCE_IN_PROGRESS),
            GroupState::Stable | GroupState::PreparingRebalance => {
                // A commit counts as a heartbeat; during PreparingRebalance the member still
                // learns of the rebalance from its next heartbeat.
                if let Some(member) = group.get_mut(&request.member_id) {
                    schedule_session(member, now_ms);
                }
                Ok(())
            }
            GroupState::Empty | GroupState::Dead => Ok(()),
        }
    }

    pub(super) fn commit_persisted(&mut self, commit: PendingCommit, result: Result<(), ErrorCode>) {
        let log_sequence = self.take_log_sequence();
        if let Some(group) = self.groups.get_mut(&commit.group_id) {
            for (tp, offset) in &commit.partitions {
                let Ok(offset) = offset else { continue };
                // A partition deleted meanwhile (OffsetDelete, DeleteGroups) has no pending
                // entry any more: its commit must not come back.
                let Some(count) = group.pending_offset_commits.get_mut(tp) else { continue };
                *count -= 1;
                if *count == 0 {
                    group.pending_offset_commits.remove(tp);
                }
                if result.is_ok() {
                    group.offsets.insert(tp.clone(), CommittedOffset { log_sequence, ..offset.clone() });
                }
            }
        }
        self.answer_commit(commit, result);
    }

    /// Answers an OffsetCommit: each partition gets its own error, or `result`'s.
    fn answer_commit(&mut self, commit: PendingCommit, result: Result<(), ErrorCode>) {
        let mut topics: Vec<OffsetCommitResponseTopic> = Vec::new();
        for ((topic, partition), offset) in commit.partitions {
            let error = match (offset, result) {
                (Err(error), _) | (Ok(_), Err(error)) => error,
                (Ok(_), Ok(())) => ErrorCode::NONE,
            };
            let entry = OffsetCommitResponsePartition {
                partition_index: partition,
                error_code: error.code(),
                ..Default::default()
            };
            match topics.last_mut().filter(|t| t.name == topic) {
                Some(t) => t.partitions.push(entry),
                None => topics.push(OffsetCommitResponseTopic {
                    name: topic,
                    partitions: vec![entry],
                    ..Default::default()
                }),
            }
        }
        let response = OffsetCommitResponse { topics, ..Default::default() };
        self.respond(commit.reply, Response::OffsetCommit(response));
    }

    /// OffsetFetch for one group (v8+ shape; the server flattens it for v1-7 and maps
    /// topic names to ids for v10). `topics: None` asks for every committed offset.
    /// With `require_stable`, a partition with a commit not yet durable, or with an offset
    /// of a transaction not yet ended, gets UNSTABLE_OFFSET_COMMIT; without it such a
    /// partition shows its last committed offset. An unknown group has no offsets: -1 everywhere, no error.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<&[OffsetFetchRequestTopics]>,
        require_stable: bool,
    ) -> OffsetFetchResponseGroup {
        if let Some(error) = self.serving_error(group_id) {
            return OffsetFetchResponseGroup {
                group_id: group_id.to_string(),
                error_code: error.code(),
                ..Default::default()
            };
        }
        let group = self.groups.get(group_id).filter(|g| !g.is(GroupState::Dead));
        let wanted: Vec<TopicPartition> = match (topics, group) {
            (Some(topics), _) => {
                topics.iter().flat_map(|t| t.partition_indexes.iter().map(move |p| (t.name.clone(), *p))).collect()
            }
            (None, Some(group)) => group.offsets.keys().cloned().collect(),
            (None, None) => Vec::new(),
        };
        let mut response_topics: Vec<OffsetFetchResponseTopics> = Vec::new();
        for tp in wanted {
            let mut partition = OffsetFetchResponsePartitions {
                partition_index: tp.1,
                committed_offset: -1,
                committed_leader_epoch: -1,
                metadata: Some(String::new()),
                ..Default::default()
            };
            if let Some(group) = group {
                if require_stable && group.has_pending_offset_commit(&tp) {
                    partition.error_code = ErrorCode::UNSTABLE_OFFSET_COMMIT.code();
                } else if let Some(offset) = group.offsets.get(&tp) {
                    partition.committed_offset = offset.offset;
                    partition.committed_leader_epoch = offset.leader_epoch;
                    partition.metadata = Some(offset.metadata.clone());
                }
            }
            match response_topics.last_mut().filter(|t| t.name == tp.0) {
                Some(t) => t.partitions.push(partition),
                None => response_topics.push(OffsetFetchResponseTopics {
                    name: tp.0,
                    partitions: vec![partition],
                    ..Default::default()
                }),
            }
        }
        OffsetFetchResponseGroup { group_id: group_id.to_string(), topics: response_topics, ..Default::default() }
    }

    /// OffsetDelete: removes committed offsets of topics no member is subscribed to
    /// (GROUP_SUBSCRIBED_TO_TOPIC otherwise); answered for `reply` once the tombstones
    /// are durable.
    pub fn delete_offsets(&mut self, request: &OffsetDeleteRequest, reply: ReplyId) {
        let fail = |error: ErrorCode| OffsetDeleteResponse { error_code: error.code(), ..Default::default() };
        if let Some(error) = self.serving_error(&request.group_id) {
            return self.respond(reply, Response::OffsetDelete(fail(error)));
        }
        let Some(group) = self.groups.get_mut(&request.group_id) else {
            return self.respond(reply, Response::OffsetDelete(fail(ErrorCode::GROUP_ID_NOT_FOUND)));
        };
        match group.state {
            GroupState::Dead => {
                return self.respond(reply, Response::OffsetDelete(fail(ErrorCode::GROUP_ID_NOT_FOUND)))
            }
            GroupState::Empty => {}
            _ if group.is_consumer_group() => {}
            _ => return self.respond(reply, Response::OffsetDelete(fail(ErrorCode::NON_EMPTY_GROUP))),
        }
        let mut records = Vec::new();
        let mut topics = Vec::new();
        for topic in &request.topics {
            let subscribed = !group.is(GroupState::Empty) && group.is_subscribed_to_topic(&topic.name);
            let mut partitions = Vec::new();
            for p in &topic.partitions {
                let tp = (topic.name.clone(), p.partition_index);
                let error = if subscribed {
                    ErrorCode::GROUP_SUBSCRIBED_TO_TOPIC
                } else {
                    group.pending_offset_commits.remove(&tp);
                    if group.offsets.remove(&tp).is_some() {
                        // Kafka writes a tombstone only over a committed offset; replayed,
                        // it takes open transactions' offsets of the partition with it.
                        group.remove_pending_txn_offsets(&tp);
                        records.push(records::offset_tombstone(&request.group_id, &tp));
                    }
                    ErrorCode::NONE
                };
                partitions.push(OffsetDeleteResponsePartition {
                    partition_index: p.partition_index,
                    error_code: error.code(),
                });
            }
            topics.push(OffsetDeleteResponseTopic { name: topic.name.clone(), partitions });
        }
        let response = OffsetDeleteResponse { topics, ..Default::default() };
        if records.is_empty() {
            return self.respond(reply, Response::OffsetDelete(response));
        }
        let group_id = request.group_id.clone();
        self.persist(&group_id, records, records::Continuation::OffsetDelete { reply, response });
    }
}
