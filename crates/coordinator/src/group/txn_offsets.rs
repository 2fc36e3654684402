//! TxnOffsetCommit v0-5 and the end of the transactions that committed offsets.
//!
//! Kafka's `OffsetMetadataManager.commitTransactionalOffset` /
//! `replayEndTransactionMarker`: a transactional offset commit is written as the
//! producer's transactional batch; once durable its offsets are pending for the producer
//! (OffsetFetch does not show them, and with `require_stable` answers
//! UNSTABLE_OFFSET_COMMIT) until the producer's COMMIT marker makes them the committed
//! offsets or its ABORT marker drops them.

use super::state::{CommittedOffset, Group, GroupState, TopicPartition};
use super::streams::StreamsCommitter;
use super::sync::validate_current_member;
use super::{records, GroupCoordinator, ReplyId, Response};
use osprey_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use osprey_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use osprey_protocol::ErrorCode;

/// A TxnOffsetCommit waiting for its records to be durable.
#[derive(Debug)]
pub(super) struct PendingTxnCommit {
    group_id: String,
    reply: ReplyId,
    producer_id: i64,
    /// The request's topics in request order, each partition with the offset to commit or
    /// the error it already has (OFFSET_METADATA_TOO_LARGE).
    topics: Vec<(String, Vec<PartitionCommit>)>,
}

/// A partition's index and the offset to commit there, or its error.
type PartitionCommit = (i32, Result<CommittedOffset, ErrorCode>);

impl PendingTxnCommit {
    fn offsets(&self) -> impl Iterator<Item = (TopicPartition, &CommittedOffset)> {
        self.topics.iter().flat_map(|(topic, partitions)| {
            partitions.iter().filter_map(move |(p, offset)| offset.as_ref().ok().map(|o| ((topic.clone(), *p), o)))
        })
    }
}

/// Who a TxnOffsetCommit says it comes from (v3+, KIP-447); older versions name nobody.
struct Committer<'a> {
    generation_id: i32,
    member_id: &'a str,
    instance_id: Option<&'a str>,
}

impl GroupCoordinator {
    /// A TxnOffsetCommit request; answered later for `reply`, once its records are
    /// durable (or failed). The records come out as an [`super::Output::Persist`] with
    /// `producer: Some((producer_id, producer_epoch))`. Its offsets stay pending until
    /// [`GroupCoordinator::complete_txn`].
    pub fn txn_commit_offsets(
        &mut self,
        request: &TxnOffsetCommitRequest,
        api_version: i16,
        reply: ReplyId,
        now_ms: i64,
    ) {
        let topics = request
            .topics
            .iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let metadata = p.committed_metadata.clone().unwrap_or_default();
                        let offset = if metadata.encode_utf16().count() > self.config.offset_metadata_max_bytes {
                            Err(ErrorCode::OFFSET_METADATA_TOO_LARGE)
                        } else {
                            Ok(CommittedOffset {
                                offset: p.committed_offset,
                                leader_epoch: if api_version >= 2 { p.committed_leader_epoch } else { -1 },
                                metadata,
                                commit_timestamp_ms: now_ms,
                                expire_timestamp_ms: None,
                                log_sequence: 0,
                            })
                        };
                        (p.partition_index, offset)
                    })
                    .collect();
                (t.name.clone(), partitions)
            })
            .collect();
        let commit =
            PendingTxnCommit { group_id: request.group_id.clone(), reply, producer_id: request.producer_id, topics };
        let committer = if api_version >= 3 {
            Committer {
                generation_id: request.generation_id,
                member_id: &request.member_id,
                instance_id: request.group_instance_id.as_deref(),
            }
        } else {
            Committer { generation_id: -1, member_id: "", instance_id: None }
        };
        let committed: Vec<(&str, i32)> = request
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.name.as_str(), p.partition_index)))
            .collect();
        if let Err(error) = self.validate_txn_commit(&request.group_id, &committer, &committed, now_ms) {
            return self.answer_txn_commit(commit, Err(error));
        }
        let group_id = request.group_id.clone();
        let records: Vec<records::Record> =
            commit.offsets().map(|(tp, offset)| records::offset_commit_record(&group_id, &tp, offset)).collect();
        if records.is_empty() {
            // Nothing valid to write: answer with the per-partition errors.
            return self.answer_txn_commit(commit, Ok(()));
        }
        let group = self.groups.get_mut(&group_id).expect("validate_txn_commit created the group");
        for (tp, _) in commit.offsets() {
            *group.pending_offset_commits.entry(tp).or_insert(0) += 1;
        }
        let producer = Some((request.producer_id, request.producer_epoch));
        self.persist_as(&group_id, records, records::Continuation::TxnOffsetCommit(Box::new(commit)), producer);
    }

    /// The producer `producer_id`'s COMMIT (`committed`) or ABORT marker is durable in
    /// `__consumer_offsets` partition `partition` (of `num_partitions`): the pending
    /// offsets of that producer in the groups of that partition become committed offsets
    /// (each unless a plain commit written after it is already committed) or are dropped.
    /// Nothing is written: the marker already is.
    pub fn complete_txn(
        &mut self,
        producer_id: i64,
        committed: bool,
        partition: i32,
        num_partitions: i32,
        _now_ms: i64,
    ) {
        for (group_id, group) in &mut self.groups {
            if group.is(GroupState::Dead) || !group.pending_txn_offsets.contains_key(&producer_id) {
                continue;
            }
            if super::partition_for(group_id, num_partitions) != partition {
                continue;
            }
            let offsets = group.pending_txn_offsets.remove(&producer_id).expect("checked");
            if committed {
                records::merge_committed_txn_offsets(&mut group.offsets, offsets);
            }
        }
    }

    /// Kafka's `validateTransactionalOffsetCommit`: an unknown group is created (a simple
    /// group) only for a commit without a generation, else ILLEGAL_GENERATION; then the
    /// group's own checks. Unlike OffsetCommit, a transactional commit needs no member of
    /// a non-empty group when it names none (TxnOffsetCommit v0-2 cannot), is not refused
    /// during CompletingRebalance and does not count as a heartbeat.
    fn validate_txn_commit(
        &mut self,
        group_id: &str,
        committer: &Committer,
        committed: &[(&str, i32)],
        now_ms: i64,
    ) -> Result<(), ErrorCode> {
        // Kafka's `isValidGroupId` for TxnOffsetCommit: the group id may not be empty.
        if group_id.is_empty() {
            return Err(ErrorCode::INVALID_GROUP_ID);
        }
        if let Some(error) = self.serving_error(group_id) {
            return Err(error);
        }
        if let Some(result) = self.validate_consumer_group_txn_commit(group_id, committer, now_ms) {
            return result;
        }
        let streams_committer = StreamsCommitter {
            member_id: committer.member_id,
            instance_id: committer.instance_id,
            member_epoch: committer.generation_id,
            transactional: true,
            api_version: 0,
        };
        if let Some(result) =
            self.validate_streams_group_commit(group_id, &streams_committer, committed.iter().copied(), now_ms)
        {
            return result;
        }
        if !self.groups.contains_key(group_id) {
            if committer.generation_id >= 0 {
                return Err(ErrorCode::ILLEGAL_GENERATION);
            }
            self.groups.insert(group_id.to_string(), Group::new(group_id, now_ms));
        }
        let group = self.groups.get(group_id).expect("present");
        validate_classic_txn_commit(group, committer)
    }

    /// A KIP-848 consumer group (Kafka's `ConsumerGroup.validateOffsetCommit` with
    /// `isTransactional`): a commit without an epoch into a group without members, or one
    /// naming nobody at all, is accepted; otherwise the member must exist
    /// (UNKNOWN_MEMBER_ID) at that epoch (ILLEGAL_GENERATION: TxnOffsetCommit turns
    /// STALE_MEMBER_EPOCH into it). `None` when `group_id` is no consumer group.
    fn validate_consumer_group_txn_commit(
        &mut self,
        group_id: &str,
        committer: &Committer,
        now_ms: i64,
    ) -> Option<Result<(), ErrorCode>> {
        let group = self.consumer_groups.get(group_id)?;
        let epoch = committer.generation_id;
        let names_nobody = epoch == -1 && committer.member_id.is_empty() && committer.instance_id.is_none();
        let result = if (epoch < 0 && group.members.is_empty()) || names_nobody {
            Ok(())
        } else {
            match group.members.get(committer.member_id) {
                None => Err(ErrorCode::UNKNOWN_MEMBER_ID),
                Some(member) if member.member_epoch != epoch => Err(ErrorCode::ILLEGAL_GENERATION),
                Some(_) => Ok(()),
            }
        };
        if result.is_ok() && !self.groups.contains_key(group_id) {
            // The consumer group's committed offsets live in an offsets-only group entry.
            self.groups.insert(group_id.to_string(), Group::new(group_id, now_ms));
        }
        Some(result)
    }

    pub(super) fn txn_commit_persisted(&mut self, commit: PendingTxnCommit, result: Result<(), ErrorCode>) {
        let log_sequence = self.take_log_sequence();
        if let Some(group) = self.groups.get_mut(&commit.group_id) {
            for (tp, offset) in commit.offsets() {
                // A partition deleted meanwhile (OffsetDelete, DeleteGroups) has no pending
                // entry any more: its offset must not come back.
                let Some(count) = group.pending_offset_commits.get_mut(&tp) else { continue };
                *count -= 1;
                if *count == 0 {
                    group.pending_offset_commits.remove(&tp);
                }
                if result.is_ok() {
                    let pending = group.pending_txn_offsets.entry(commit.producer_id).or_default();
                    pending.insert(tp, CommittedOffset { log_sequence, ..offset.clone() });
                }
            }
        }
        self.answer_txn_commit(commit, result);
    }

    /// Answers a TxnOffsetCommit in the request's shape: each partition gets its own
    /// error, or `result`'s.
    fn answer_txn_commit(&mut self, commit: PendingTxnCommit, result: Result<(), ErrorCode>) {
        let topics = commit
            .topics
            .into_iter()
            .map(|(name, partitions)| TxnOffsetCommitResponseTopic {
                name,
                partitions: partitions
                    .into_iter()
                    .map(|(partition_index, offset)| {
                        let error = match (offset, result) {
                            (Err(error), _) | (Ok(_), Err(error)) => error,
                            (Ok(_), Ok(())) => ErrorCode::NONE,
                        };
                        TxnOffsetCommitResponsePartition {
                            partition_index,
                            error_code: error.code(),
                            ..Default::default()
                        }
                    })
                    .collect(),
                ..Default::default()
            })
            .collect();
        let response = TxnOffsetCommitResponse { topics, ..Default::default() };
        self.respond(commit.reply, Response::TxnOffsetCommit(response));
    }
}

/// Kafka's `ClassicGroup.validateOffsetCommit` with `isTransactional`.
fn validate_classic_txn_commit(group: &Group, committer: &Committer) -> Result<(), ErrorCode> {
    if group.is(GroupState::Dead) {
        return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
    }
    if committer.generation_id < 0 && group.is(GroupState::Empty) {
        return Ok(());
    }
    if committer.generation_id >= 0 || !committer.member_id.is_empty() || committer.instance_id.is_some() {
        validate_current_member(group, committer.member_id, committer.instance_id)?;
        if committer.generation_id != group.generation_id {
            return Err(ErrorCode::ILLEGAL_GENERATION);
        }
    }
    Ok(())
}
