//! The group coordinator's part of DescribeShareGroupOffsets, AlterShareGroupOffsets
//! and DeleteShareGroupOffsets (Kafka's `GroupMetadataManager.initializedShareGroupPartitions`,
//! `completeAlterShareGroupOffsets`, `sharePartitionsEligibleForOffsetDeletion` and
//! `completeDeleteShareGroupOffsets`): which share partitions of a group have state, kept
//! in its ShareGroupStatePartitionMetadata record. The share partitions' state itself is
//! the share coordinator's; the server reads, initialises and deletes it between the
//! steps here.
//!
//! Each step that changes the group's state metadata answers for its [`ReplyId`] with
//! [`Response::ShareGroupOffsets`] once its record is durable (a [`ShareOffsetsStep`]),
//! or at once when it refuses or changes nothing.

use super::{ShareGroupState, StateTopic};
use crate::group::consumer::heartbeat::{reject, Rejection};
use crate::group::records::Continuation;
use crate::group::{GroupCoordinator, ReplyId, Response};
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::{BTreeMap, BTreeSet};

/// What a step of the share-group offsets APIs answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareOffsetsStep {
    /// Refused for the whole group: the error and its message.
    Refused { code: ErrorCode, message: String },
    /// AlterShareGroupOffsets may initialise the partitions' state, at this state epoch
    /// (the group epoch, as Kafka's `buildInitializeShareGroupState`).
    AlterBegun { state_epoch: i32 },
    /// DeleteShareGroupOffsets may delete these partitions' state, by topic id; the
    /// topics named by these names have none to delete.
    DeleteBegun { delete: BTreeMap<Uuid, BTreeSet<i32>>, nothing_to_delete: Vec<String> },
    /// The last step's record is durable.
    Done,
}

/// A topic named in DeleteShareGroupOffsets, as the metadata knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedTopic {
    pub name: String,
    pub topic_id: Uuid,
    pub num_partitions: i32,
}

impl GroupCoordinator {
    /// DescribeShareGroupOffsets of every topic: the share partitions of `group_id` whose
    /// state is initialized, by topic id, with the topic's name (none for a group this
    /// coordinator does not know, as Kafka). The error when the group is not served here.
    pub fn share_group_initialized_partitions(&self, group_id: &str) -> Result<BTreeMap<Uuid, StateTopic>, ErrorCode> {
        if let Some(error) = self.serving_error(group_id) {
            return Err(error);
        }
        Ok(self.share_groups.get(group_id).map(|g| g.state_metadata.initialized.clone()).unwrap_or_default())
    }

    /// AlterShareGroupOffsets, first step: `group_id` must be an empty share group; the
    /// partitions of `topics` (by topic id: the name and the partitions that exist)
    /// become initializing. Answers [`ShareOffsetsStep::AlterBegun`].
    pub fn begin_share_group_offsets_alter(
        &mut self,
        group_id: &str,
        topics: &BTreeMap<Uuid, StateTopic>,
        reply: ReplyId,
    ) {
        // A group id no group uses yet becomes an empty share group, as Kafka's
        // `getOrMaybeCreatePersistedShareGroup` makes it: offsets may be set before the
        // first member joins (kafka-share-groups.sh --reset-offsets on a new group).
        let unused = !self.share_groups.contains_key(group_id)
            && !self.groups.contains_key(group_id)
            && !self.consumer_groups.contains_key(group_id);
        if unused && self.serving_error(group_id).is_none() {
            self.share_groups.insert(group_id.to_string(), super::ShareGroup::new(group_id));
        }
        let group = match self.empty_share_group(group_id) {
            Ok(group) => group,
            Err(rejected) => return self.refuse_share_offsets(reply, rejected),
        };
        let state_epoch = group.group_epoch;
        let mut metadata = group.state_metadata.clone();
        for (topic_id, topic) in topics.iter().filter(|(_, t)| !t.partitions.is_empty()) {
            let initializing = metadata
                .initializing
                .entry(*topic_id)
                .or_insert_with(|| StateTopic { name: topic.name.clone(), partitions: BTreeSet::new() });
            initializing.partitions.extend(topic.partitions.iter().copied());
        }
        self.set_share_state_metadata(group_id, metadata, reply, ShareOffsetsStep::AlterBegun { state_epoch });
    }

    /// AlterShareGroupOffsets, last step: the partitions of `topics` whose state the
    /// share coordinators initialized move from initializing to initialized (Kafka's
    /// `handlePersisterInitializeResponse`). Answers [`ShareOffsetsStep::Done`].
    pub fn share_group_partitions_initialized(
        &mut self,
        group_id: &str,
        topics: &BTreeMap<Uuid, StateTopic>,
        reply: ReplyId,
    ) {
        let Some(group) = self.share_groups.get(group_id) else {
            return self.respond(reply, Response::ShareGroupOffsets(ShareOffsetsStep::Done));
        };
        let mut metadata = group.state_metadata.clone();
        for (topic_id, topic) in topics.iter().filter(|(_, t)| !t.partitions.is_empty()) {
            if let Some(initializing) = metadata.initializing.get_mut(topic_id) {
                initializing.partitions.retain(|p| !topic.partitions.contains(p));
                if initializing.partitions.is_empty() {
                    metadata.initializing.remove(topic_id);
                }
            }
            let initialized = metadata
                .initialized
                .entry(*topic_id)
                .or_insert_with(|| StateTopic { name: topic.name.clone(), partitions: BTreeSet::new() });
            initialized.partitions.extend(topic.partitions.iter().copied());
        }
        self.set_share_state_metadata(group_id, metadata, reply, ShareOffsetsStep::Done);
    }

    /// DeleteShareGroupOffsets, first step: `group_id` must be an empty share group. Of
    /// `topics` (the names the metadata knows), an initialized one moves to deleting and
    /// its initialized partitions are to be deleted; one already deleting has all its
    /// partitions deleted again; any other has nothing to delete. Answers
    /// [`ShareOffsetsStep::DeleteBegun`].
    pub fn begin_share_group_offsets_delete(&mut self, group_id: &str, topics: &[NamedTopic], reply: ReplyId) {
        let group = match self.empty_share_group(group_id) {
            Ok(group) => group,
            Err(rejected) => return self.refuse_share_offsets(reply, rejected),
        };
        let mut metadata = group.state_metadata.clone();
        let mut delete = BTreeMap::new();
        let mut nothing_to_delete = Vec::new();
        for topic in topics {
            if let Some(initialized) = metadata.initialized.remove(&topic.topic_id) {
                delete.insert(topic.topic_id, initialized.partitions);
                metadata.deleting.insert(topic.topic_id, topic.name.clone());
            } else if metadata.deleting.contains_key(&topic.topic_id) {
                delete.insert(topic.topic_id, (0..topic.num_partitions).collect());
            } else {
                nothing_to_delete.push(topic.name.clone());
            }
        }
        let step = ShareOffsetsStep::DeleteBegun { delete, nothing_to_delete };
        self.set_share_state_metadata(group_id, metadata, reply, step);
    }

    /// DeleteShareGroupOffsets, last step: the topics whose share partitions' state was
    /// deleted leave deleting. Answers [`ShareOffsetsStep::Done`].
    pub fn share_group_offsets_deleted(&mut self, group_id: &str, topic_ids: &BTreeSet<Uuid>, reply: ReplyId) {
        let Some(group) = self.share_groups.get(group_id) else {
            return self.respond(reply, Response::ShareGroupOffsets(ShareOffsetsStep::Done));
        };
        let mut metadata = group.state_metadata.clone();
        metadata.deleting.retain(|id, _| !topic_ids.contains(id));
        self.set_share_state_metadata(group_id, metadata, reply, ShareOffsetsStep::Done);
    }

    /// `group_id` as an empty share group (Kafka's `shareGroup` and
    /// `validateEmptyGroup`): NOT_COORDINATOR and the like when it is not served here,
    /// GROUP_ID_NOT_FOUND when it is no share group, NON_EMPTY_GROUP with members.
    fn empty_share_group(&self, group_id: &str) -> Result<&super::ShareGroup, Rejection> {
        if let Some(error) = self.serving_error(group_id) {
            return Err(reject(error, format!("{}: this broker does not coordinate the group now", error.name())));
        }
        let Some(group) = self.share_groups.get(group_id) else {
            return Err(self.not_a_share_group(group_id, &format!("Group {group_id} not found.")));
        };
        if group.state() != ShareGroupState::Empty {
            return Err(reject(ErrorCode::NON_EMPTY_GROUP, "The group is not empty."));
        }
        Ok(group)
    }

    fn refuse_share_offsets(&mut self, reply: ReplyId, rejected: Rejection) {
        let code = ErrorCode::from_code(rejected.code).unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR);
        let step = ShareOffsetsStep::Refused { code, message: rejected.message };
        self.respond(reply, Response::ShareGroupOffsets(step));
    }

    /// Makes `metadata` the group's, and answers `step` once its record is durable (at
    /// once when nothing changed).
    fn set_share_state_metadata(
        &mut self,
        group_id: &str,
        metadata: super::StatePartitionMetadata,
        reply: ReplyId,
        step: ShareOffsetsStep,
    ) {
        let group = self.share_groups.get_mut(group_id).expect("checked by the caller");
        if metadata == group.state_metadata {
            return self.respond(reply, Response::ShareGroupOffsets(step));
        }
        let record = super::records::state_partition_metadata_record(group_id, &metadata);
        group.state_metadata = metadata;
        self.persist(group_id, vec![record], Continuation::ShareGroupOffsets { reply, step });
    }

    /// The record of a share-group offsets step is durable, or failed with `result`'s
    /// error.
    pub(in crate::group) fn share_offsets_persisted(
        &mut self,
        reply: ReplyId,
        step: ShareOffsetsStep,
        result: Result<(), ErrorCode>,
    ) {
        let step = match result {
            Ok(()) => step,
            Err(code) => ShareOffsetsStep::Refused {
                code,
                message: format!("{}: the group's record was not written", code.name()),
            },
        };
        self.respond(reply, Response::ShareGroupOffsets(step));
    }
}
