//! Partition reassignment, sans-I/O (Kafka's `ReplicationControlManager`
//! `alterPartitionReassignments`, `changePartitionReassignment`,
//! `cancelPartitionReassignment` and `listPartitionReassignments`, with
//! `PartitionReassignmentReplicas` and `PartitionReassignmentRevert`).
//!
//! **AlterPartitionReassignments (API 45).** A partition's new replica list (the
//! *target*) starts a reassignment: the replicas become the target followed by the
//! current replicas it leaves out, `adding` is target − current and `removing` is
//! current − target. The adding replicas' brokers open the partition as followers and
//! fetch; once every target replica is in the ISR (an AlterPartition expanding it, or
//! the reassignment itself when they already are), the partition change completes it
//! (`PartitionChangeBuilder`'s `complete_reassignment_if_needed`): the replicas become
//! the target, the removing replicas leave the ISR, and a removed leader is replaced
//! from the target. A null replica list cancels: the replicas and the ISR go back to
//! the original ones (the ISR keeps only replicas that were not being added; when none
//! is left, the first original replica alone, which is an unclean election and refused
//! unless the topic allows it).
//!
//! Each partition gets Kafka's answer: none; NO_REASSIGNMENT_IN_PROGRESS (cancelling
//! none); INVALID_REPLICA_ASSIGNMENT (an empty list, a broker twice, an unregistered
//! broker, or a cancel that needs an unclean election the topic does not allow);
//! INVALID_REPLICATION_FACTOR (the replica count changes while the request does not
//! allow it, v1's `allow_replication_factor_change`, KIP-860); UNKNOWN_TOPIC_OR_PARTITION.
//! Kafka's messages, word for word.
//!
//! **ListPartitionReassignments (API 46)** lists the partitions with a reassignment in
//! progress: all of them for a null topic list, else those named (unknown topics and
//! partitions, and partitions not reassigning, are left out, as Kafka does).

use crate::cluster_control::{ClusterControl, ControllerResult};
use crate::image::{apply_partition_change, MetadataImage, MetadataRecord, PartitionImage, TopicImage};
use crate::partition_change::PartitionChangeBuilder;
use osprey_protocol::ErrorCode;
use std::collections::HashMap;

/// The most partition changes one request may propose (Kafka's
/// `MAX_RECORDS_PER_USER_OP`): the request's records are one batch of the metadata log.
/// A partition whose change would pass it is answered UNKNOWN_SERVER_ERROR, as Kafka's.
pub const MAX_RECORDS_PER_USER_OP: usize = 10_000;

/// Kafka's `Errors.NO_REASSIGNMENT_IN_PROGRESS` message.
const NO_REASSIGNMENT_IN_PROGRESS_MESSAGE: &str = "No partition reassignment is in progress.";

/// One partition of the request: its new replica list, or `None` to cancel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReassignmentTarget {
    pub partition_index: i32,
    pub replicas: Option<Vec<i32>>,
}

/// One partition's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReassignmentResult {
    pub partition_index: i32,
    pub error: ErrorCode,
    /// `None` with `ErrorCode::NONE`, as Kafka's `ApiError.NONE`.
    pub message: Option<String>,
}

/// One topic's answers, in the order the request named its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicReassignmentResult {
    pub name: String,
    pub partitions: Vec<ReassignmentResult>,
}

/// A partition with a reassignment in progress, as ListPartitionReassignments shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OngoingReassignment {
    pub partition_index: i32,
    pub replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
}

/// One topic's partitions with a reassignment in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicOngoingReassignments {
    pub name: String,
    pub partitions: Vec<OngoingReassignment>,
}

/// Why a partition's reassignment was refused: the code, and the message Kafka logs
/// (see [`wire_message`] for the one it sends).
type Refusal = (ErrorCode, String);

impl ClusterControl {
    /// AlterPartitionReassignments: the records start, change or cancel each named
    /// partition's reassignment (or complete it at once, when the ISR already holds the
    /// target). `allow_replication_factor_change` is v1's flag (true for v0). A
    /// partition named twice is decided against its state after the first change.
    pub fn alter_partition_reassignments(
        &self,
        image: &MetadataImage,
        allow_replication_factor_change: bool,
        topics: &[(String, Vec<ReassignmentTarget>)],
    ) -> ControllerResult<Vec<TopicReassignmentResult>> {
        let mut records = Vec::new();
        let mut changed: HashMap<(String, i32), PartitionImage> = HashMap::new();
        let mut results = Vec::with_capacity(topics.len());
        for (name, targets) in topics {
            let mut partitions = Vec::with_capacity(targets.len());
            for target in targets {
                let room = records.len() < MAX_RECORDS_PER_USER_OP;
                let outcome = self.alter_one(image, name, target, allow_replication_factor_change, room, &mut changed);
                let (error, message) = match outcome {
                    Ok(record) => {
                        records.extend(record);
                        (ErrorCode::NONE, None)
                    }
                    Err((code, message)) => {
                        tracing::info!(topic = %name, partition = target.partition_index, error = code.name(), %message, "partition reassignment refused");
                        (code, wire_message(code, message))
                    }
                };
                partitions.push(ReassignmentResult { partition_index: target.partition_index, error, message });
            }
            results.push(TopicReassignmentResult { name: name.clone(), partitions });
        }
        ControllerResult { records, response: results }
    }

    /// Kafka's `alterPartitionReassignment`: one partition's record, if it changes.
    fn alter_one(
        &self,
        image: &MetadataImage,
        name: &str,
        target: &ReassignmentTarget,
        allow_replication_factor_change: bool,
        room: bool,
        changed: &mut HashMap<(String, i32), PartitionImage>,
    ) -> Result<Option<MetadataRecord>, Refusal> {
        let index = target.partition_index;
        let Some(topic) = image.topic(name) else {
            return Err((ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, format!("Unable to find a topic named {name}.")));
        };
        let key = (name.to_string(), index);
        let current = changed.get(&key).or_else(|| image.partition(topic.id, index)).cloned();
        let Some(current) = current else {
            return Err((ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, format!("Unable to find partition {name}:{index}.")));
        };
        let record = match &target.replicas {
            None => self.cancel(image, topic, &current)?,
            Some(replicas) => {
                validate_assignment(image, replicas)?;
                if !allow_replication_factor_change {
                    validate_replication_factor_unchanged(&current, replicas)?;
                }
                let acceptable = |r: i32| is_active(image, r);
                change(self.partition_change(image, topic, &current, &acceptable), &current, replicas)
            }
        };
        if let Some(record) = &record {
            if !room {
                // Kafka's BoundedList refuses the record, and the partition's answer is
                // the exception's.
                return Err((
                    ErrorCode::UNKNOWN_SERVER_ERROR,
                    format!(
                        "Cannot add another element to the list because it would exceed the maximum length of {MAX_RECORDS_PER_USER_OP}"
                    ),
                ));
            }
            let mut after = current;
            apply_partition_change(&mut after, record);
            changed.insert(key, after);
        }
        Ok(record)
    }

    /// Kafka's `cancelPartitionReassignment`: back to the original replicas, the ISR
    /// without the replicas being added.
    fn cancel(
        &self,
        image: &MetadataImage,
        topic: &TopicImage,
        p: &PartitionImage,
    ) -> Result<Option<MetadataRecord>, Refusal> {
        if !p.is_reassigning() {
            return Err((ErrorCode::NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT_IN_PROGRESS_MESSAGE.into()));
        }
        let acceptable = |r: i32| is_active(image, r);
        let revert = Revert::of(p, &acceptable)?;
        let unclean = self.unclean_election_enabled(topic);
        if revert.unclean && !unclean {
            return Err((
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                format!(
                    "Unable to revert partition assignment for {}:{} because it would require an unclean leader election.",
                    topic.name, p.index
                ),
            ));
        }
        let mut builder = self
            .partition_change(image, topic, p, &acceptable)
            .unclean_election(unclean)
            .target_isr(revert.isr)
            .target_replicas(revert.replicas)
            .target_adding(Vec::new())
            .target_removing(Vec::new());
        if revert.unclean {
            // The replica made the ISR alone may lack acknowledged records: it leads in
            // recovery, as after any unclean election (KIP-704). Kafka's revert leaves the
            // state as it was, so nothing tells its leader or an operator (found by the
            // partition replication simulation, seed 1003876).
            builder = builder.target_leader_recovery_state(crate::image::LEADER_RECOVERING);
        }
        Ok(builder.build())
    }
}

/// ListPartitionReassignments: `topics` names topics and partition indexes, or is `None`
/// for every partition being reassigned (topics in name order). A read of the image: the
/// active controller answers it from its own, a single node from its own.
pub fn list_partition_reassignments(
    image: &MetadataImage,
    topics: Option<&[(String, Vec<i32>)]>,
) -> Vec<TopicOngoingReassignments> {
    let listed = |topic: &TopicImage, indexes: &mut dyn Iterator<Item = i32>| {
        let partitions: Vec<OngoingReassignment> = indexes
            .filter_map(|i| usize::try_from(i).ok().and_then(|i| topic.partitions.get(i)))
            .filter(|p| p.is_reassigning())
            .map(|p| OngoingReassignment {
                partition_index: p.index,
                replicas: p.replicas.clone(),
                adding_replicas: p.adding_replicas.clone(),
                removing_replicas: p.removing_replicas.clone(),
            })
            .collect();
        (!partitions.is_empty()).then(|| TopicOngoingReassignments { name: topic.name.clone(), partitions })
    };
    match topics {
        None => image.topics().filter_map(|t| listed(t, &mut t.partitions.iter().map(|p| p.index))).collect(),
        Some(named) => named
            .iter()
            .filter_map(|(name, indexes)| image.topic(name).and_then(|t| listed(t, &mut indexes.iter().copied())))
            .collect(),
    }
}

/// Kafka's `changePartitionReassignment` once the target is valid: the replicas become
/// the target followed by the current replicas it leaves out; adding and removing are
/// the differences (in id order, as Kafka's sets), and the builder completes the
/// reassignment at once if the ISR already allows it. As in Kafka, "current" is the
/// replica list with an ongoing reassignment's adding and removing replicas in it, and
/// an empty difference leaves the partition's adding or removing list as it was: a
/// target naming exactly the current replicas keeps the ongoing reassignment going.
/// The builder comes from [`ClusterControl::partition_change`], with the topic's eligible
/// leader replicas settings, as every partition decision (else the change would drop the
/// ELR, found by the partition replication simulation).
fn change(mut builder: PartitionChangeBuilder<'_>, p: &PartitionImage, target: &[i32]) -> Option<MetadataRecord> {
    let removing = sorted_difference(&p.replicas, target);
    let adding = sorted_difference(target, &p.replicas);
    let mut replicas = target.to_vec();
    replicas.extend(&removing);
    if replicas != p.replicas {
        builder = builder.target_replicas(replicas);
    }
    if !removing.is_empty() {
        builder = builder.target_removing(removing);
    }
    if !adding.is_empty() {
        builder = builder.target_adding(adding);
    }
    builder.build()
}

/// The message a refusal carries on the wire: Kafka's `ApiError.fromThrowable` sends none
/// for UNKNOWN_SERVER_ERROR, nor one that is only the error's default message.
fn wire_message(code: ErrorCode, message: String) -> Option<String> {
    let default = code == ErrorCode::NO_REASSIGNMENT_IN_PROGRESS && message == NO_REASSIGNMENT_IN_PROGRESS_MESSAGE;
    (code != ErrorCode::UNKNOWN_SERVER_ERROR && !default).then_some(message)
}

/// Kafka's `validateManualPartitionAssignment`, in Kafka's order: not empty, then each
/// broker in id order registered and named once.
fn validate_assignment(image: &MetadataImage, replicas: &[i32]) -> Result<(), Refusal> {
    if replicas.is_empty() {
        return Err((
            ErrorCode::INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.".into(),
        ));
    }
    let mut sorted = replicas.to_vec();
    sorted.sort_unstable();
    let mut previous = None;
    for &broker in &sorted {
        if image.broker(broker).is_none() {
            return Err((
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                format!("The manual partition assignment includes broker {broker}, but no such broker is registered."),
            ));
        }
        if previous == Some(broker) {
            return Err((
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                format!("The manual partition assignment includes the broker {broker} more than once."),
            ));
        }
        previous = Some(broker);
    }
    Ok(())
}

/// Kafka 4.4's `validatePartitionReplicationFactorUnchanged` (KIP-860): the partition's
/// replication factor (during a reassignment, its replicas without the removing ones)
/// must be the target's length.
fn validate_replication_factor_unchanged(p: &PartitionImage, target: &[i32]) -> Result<(), Refusal> {
    let current = p.replicas.iter().filter(|r| !p.removing_replicas.contains(r)).count();
    if current != target.len() {
        return Err((
            ErrorCode::INVALID_REPLICATION_FACTOR,
            format!("The replication factor is changed from {current} to {}", target.len()),
        ));
    }
    Ok(())
}

/// Kafka's `PartitionReassignmentRevert`: the replicas and ISR a cancel goes back to.
struct Revert {
    replicas: Vec<i32>,
    isr: Vec<i32>,
    /// The ISR held only adding replicas: the first original replica is the ISR alone.
    unclean: bool,
}

impl Revert {
    /// Unlike Kafka's, an ISR that is empty while an active original replica is an
    /// eligible leader replica (KIP-966) stays empty, and that replica is elected, cleanly:
    /// Kafka's revert predates the ELR and would make the first original replica the ISR
    /// alone, an unclean choice when a clean one exists (found by the partition
    /// replication simulation, seed 1003562, where that replica had lost its disk). An
    /// ELR member that is not active does not count: the cancel would leave the partition
    /// without a leader, its current one dropped (seed 1004257).
    fn of(p: &PartitionImage, acceptable: &dyn Fn(i32) -> bool) -> Result<Revert, Refusal> {
        let replicas: Vec<i32> = p.replicas.iter().copied().filter(|r| !p.adding_replicas.contains(r)).collect();
        let isr: Vec<i32> = p.isr.iter().copied().filter(|r| !p.adding_replicas.contains(r)).collect();
        let eligible = p.elr.iter().any(|&r| replicas.contains(&r) && acceptable(r));
        if !isr.is_empty() || eligible {
            return Ok(Revert { replicas, isr, unclean: false });
        }
        // Unreachable unless the partition had no replicas before the reassignment.
        let Some(&first) = replicas.first() else {
            return Err((
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                "Invalid replica assignment: addingReplicas contains all replicas.".into(),
            ));
        };
        Ok(Revert { replicas, isr: vec![first], unclean: true })
    }
}

/// The members of `a` not in `b`, in id order (Kafka's `calculateDifference`, a TreeSet).
fn sorted_difference(a: &[i32], b: &[i32]) -> Vec<i32> {
    let mut difference: Vec<i32> = a.iter().copied().filter(|r| !b.contains(r)).collect();
    difference.sort_unstable();
    difference.dedup();
    difference
}

/// Kafka's `ClusterControlManager.isActive`: registered, unfenced, not shutting down.
fn is_active(image: &MetadataImage, broker_id: i32) -> bool {
    image.broker(broker_id).is_some_and(|b| b.is_active())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alter_partition::{AlterPartitionInput, AlterPartitionItem, AlterPartitionTopic};
    use crate::cluster_control::UNCLEAN_LEADER_ELECTION_ENABLE;
    use crate::test_support::{TestCluster, TOPIC};
    use osprey_protocol::Uuid;
    use std::collections::BTreeMap;

    /// Brokers 1-4 unfenced (their epochs); topic "t" with these replica lists.
    fn cluster(replicas: Vec<Vec<i32>>) -> (TestCluster, BTreeMap<i32, i64>) {
        cluster_with(replicas, BTreeMap::new())
    }

    fn cluster_with(replicas: Vec<Vec<i32>>, configs: BTreeMap<String, String>) -> (TestCluster, BTreeMap<i32, i64>) {
        let mut c = TestCluster::new();
        let epochs = (1..=4).map(|id| (id, c.add_broker(id, 0))).collect();
        c.add_topic(replicas, configs);
        (c, epochs)
    }

    type Request = Vec<(String, Vec<ReassignmentTarget>)>;

    fn target(partition_index: i32, replicas: Option<&[i32]>) -> Request {
        vec![("t".into(), vec![ReassignmentTarget { partition_index, replicas: replicas.map(<[i32]>::to_vec) }])]
    }

    /// Reassigns partition 0 and commits; its answer.
    fn reassign(c: &mut TestCluster, replicas: Option<&[i32]>, allow_rf_change: bool) -> ReassignmentResult {
        let result = c.control.alter_partition_reassignments(&c.image, allow_rf_change, &target(0, replicas));
        c.commit(result)[0].partitions[0].clone()
    }

    /// The leader of partition 0 proposes this ISR; the answer's error.
    fn alter_isr(c: &mut TestCluster, epochs: &BTreeMap<i32, i64>, isr: &[i32]) -> ErrorCode {
        let p = c.partition(0).clone();
        let request = AlterPartitionInput {
            broker_id: p.leader,
            broker_epoch: epochs[&p.leader],
            topics: vec![AlterPartitionTopic {
                topic_id: Uuid(TOPIC),
                partitions: vec![AlterPartitionItem {
                    partition_index: 0,
                    leader_epoch: p.leader_epoch,
                    new_isr: isr.iter().map(|&r| (r, epochs[&r])).collect(),
                    leader_recovery_state: p.leader_recovery_state,
                    partition_epoch: p.partition_epoch,
                }],
            }],
        };
        let result = c.control.alter_partition(&c.image, &request).unwrap();
        c.commit(result)[0].partitions[0].error
    }

    fn state(p: &PartitionImage) -> (Vec<i32>, Vec<i32>, i32, Vec<i32>, Vec<i32>) {
        (p.replicas.clone(), p.isr.clone(), p.leader, p.adding_replicas.clone(), p.removing_replicas.clone())
    }

    #[test]
    fn a_move_adds_the_targets_then_completes_once_they_are_all_in_the_isr() {
        let (mut c, epochs) = cluster(vec![vec![1]]);
        assert_eq!(reassign(&mut c, Some(&[2, 3]), true).error, ErrorCode::NONE);
        let p = c.partition(0).clone();
        assert_eq!(state(&p), (vec![2, 3, 1], vec![1], 1, vec![2, 3], vec![1]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (0, 1), "no replica left yet: same leader epoch");
        assert!(list_partition_reassignments(&c.image, None)[0].partitions[0].adding_replicas == [2, 3]);

        assert_eq!(alter_isr(&mut c, &epochs, &[1, 2]), ErrorCode::NONE);
        assert_eq!(state(c.partition(0)), (vec![2, 3, 1], vec![1, 2], 1, vec![2, 3], vec![1]), "3 is not in yet");

        let code = alter_isr(&mut c, &epochs, &[1, 2, 3]);
        assert_eq!(code, ErrorCode::NEW_LEADER_ELECTED, "the sender was removed: it leads no more");
        let p = c.partition(0).clone();
        assert_eq!(state(&p), (vec![2, 3], vec![2, 3], 2, vec![], vec![]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 3));
        assert!(list_partition_reassignments(&c.image, None).is_empty(), "nothing in progress");
    }

    #[test]
    fn a_target_already_in_the_isr_completes_at_once() {
        let (mut c, _) = cluster(vec![vec![1, 2, 3]]);
        assert_eq!(reassign(&mut c, Some(&[3, 2]), true).error, ErrorCode::NONE);
        let p = c.partition(0).clone();
        assert_eq!(state(&p), (vec![3, 2], vec![2, 3], 3, vec![], vec![]), "a removed leader is replaced");
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 1), "one record");
    }

    #[test]
    fn reordering_the_replicas_keeps_the_leader_and_its_epoch() {
        let (mut c, _) = cluster(vec![vec![1, 2, 3]]);
        assert_eq!(reassign(&mut c, Some(&[3, 1, 2]), true).error, ErrorCode::NONE);
        let p = c.partition(0).clone();
        assert_eq!(state(&p), (vec![3, 1, 2], vec![1, 2, 3], 1, vec![], vec![]));
        assert_eq!((p.leader_epoch, p.partition_epoch), (0, 1));
        let same = c.control.alter_partition_reassignments(&c.image, true, &target(0, Some(&[3, 1, 2])));
        assert!(same.records.is_empty(), "the same target again changes nothing");
        assert_eq!(same.response[0].partitions[0].error, ErrorCode::NONE);
    }

    #[test]
    fn a_removed_follower_leaves_with_a_leader_epoch_bump() {
        let (mut c, _) = cluster(vec![vec![1, 2, 3]]);
        assert_eq!(reassign(&mut c, Some(&[1, 2]), true).error, ErrorCode::NONE);
        let p = c.partition(0).clone();
        assert_eq!(state(&p), (vec![1, 2], vec![1, 2], 1, vec![], vec![]));
        assert_eq!(p.leader_epoch, 1, "the removed follower's fetches are fenced");
    }

    #[test]
    fn refusals_carry_kafkas_codes_and_messages() {
        let (c, _) = cluster(vec![vec![1]]);
        let cases: Vec<(Request, ErrorCode, &str)> = vec![
            (
                vec![("nope".into(), vec![ReassignmentTarget { partition_index: 0, replicas: Some(vec![1]) }])],
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                "Unable to find a topic named nope.",
            ),
            (target(5, Some(&[1])), ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:5."),
            (
                target(0, Some(&[])),
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.",
            ),
            (
                target(0, Some(&[9, 2, 2])),
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes the broker 2 more than once.",
            ),
            (
                target(0, Some(&[2, 9])),
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes broker 9, but no such broker is registered.",
            ),
        ];
        for (request, code, message) in cases {
            let result = c.control.alter_partition_reassignments(&c.image, true, &request);
            assert!(result.records.is_empty(), "{message}: nothing written");
            let answer = &result.response[0].partitions[0];
            assert_eq!((answer.error, answer.message.as_deref()), (code, Some(message)));
        }
        // Kafka sends no message that is only the error's default one.
        let none = c.control.alter_partition_reassignments(&c.image, true, &target(0, None));
        let answer = &none.response[0].partitions[0];
        assert_eq!((answer.error, answer.message.as_deref()), (ErrorCode::NO_REASSIGNMENT_IN_PROGRESS, None));
        let ok = c.control.alter_partition_reassignments(&c.image, true, &target(0, Some(&[2])));
        assert_eq!((ok.records.len(), ok.response[0].partitions[0].message.clone()), (1, None));
    }

    #[test]
    fn a_replication_factor_change_is_refused_unless_allowed() {
        let (mut c, _) = cluster(vec![vec![1]]);
        let refused = c.control.alter_partition_reassignments(&c.image, false, &target(0, Some(&[2, 3])));
        assert!(refused.records.is_empty());
        let answer = &refused.response[0].partitions[0];
        assert_eq!(
            (answer.error, answer.message.as_deref()),
            (ErrorCode::INVALID_REPLICATION_FACTOR, Some("The replication factor is changed from 1 to 2"))
        );
        assert_eq!(reassign(&mut c, Some(&[2, 3]), true).error, ErrorCode::NONE);
        // During the reassignment the factor is the replicas without the removing ones.
        assert_eq!(reassign(&mut c, Some(&[3, 4]), false).error, ErrorCode::NONE);
        assert_eq!(state(c.partition(0)), (vec![3, 4, 1, 2], vec![1], 1, vec![4], vec![1, 2]));
    }

    #[test]
    fn a_cancel_goes_back_to_the_original_replicas() {
        let (mut c, epochs) = cluster(vec![vec![1]]);
        reassign(&mut c, Some(&[2, 3]), true);
        alter_isr(&mut c, &epochs, &[1, 2]);
        let epoch = c.partition(0).leader_epoch;
        assert_eq!(reassign(&mut c, None, true).error, ErrorCode::NONE);
        let p = c.partition(0).clone();
        assert_eq!(state(&p), (vec![1], vec![1], 1, vec![], vec![]));
        assert_eq!(p.leader_epoch, epoch + 1, "the added replicas' fetches are fenced");
        assert_eq!(reassign(&mut c, None, true).error, ErrorCode::NO_REASSIGNMENT_IN_PROGRESS);
    }

    /// Partition 0 set to this leader, ISR, ELR, replicas, adding and removing.
    fn set_partition(c: &mut TestCluster, leader: i32, isr: &[i32], elr: &[i32], replicas: &[i32], adding: &[i32]) {
        let p = c.partition(0).clone();
        c.image.apply(&MetadataRecord::PartitionChange {
            topic_id: TOPIC,
            partition: 0,
            leader,
            isr: isr.to_vec(),
            elr: elr.to_vec(),
            leader_epoch: p.leader_epoch + 1,
            partition_epoch: p.partition_epoch + 1,
            replicas: replicas.to_vec(),
            leader_recovery_state: 0,
            last_known_elr: Vec::new(),
            adding_replicas: adding.to_vec(),
            removing_replicas: Vec::new(),
        });
    }

    #[test]
    fn reassignments_keep_the_eligible_leader_replicas_and_a_cancel_elects_from_them() {
        let configs = BTreeMap::from([("min.insync.replicas".to_string(), "3".to_string())]);
        let (mut c, _) = cluster_with(vec![vec![1, 2, 3]], configs);
        // 1 leads alone; 2 and 3 left the ISR below min.insync.replicas, so they stay
        // eligible (KIP-966). A reassignment must not drop them.
        set_partition(&mut c, 1, &[1], &[2, 3], &[1, 2, 3], &[]);
        assert_eq!(reassign(&mut c, Some(&[1, 2, 3, 4]), true).error, ErrorCode::NONE);
        let p = c.partition(0);
        assert_eq!(
            (p.replicas.clone(), p.adding_replicas.clone(), p.elr.clone()),
            (vec![1, 2, 3, 4], vec![4], vec![2, 3])
        );

        // The ISR empties with 2 still eligible; cancelling elects 2, cleanly, as the
        // replication would without the reassignment. (Kafka's revert would make 1 the
        // ISR alone, an unclean choice, and refuse it with unclean election off.)
        set_partition(&mut c, crate::image::NO_LEADER, &[], &[2], &[1, 2, 3, 4], &[4]);
        assert_eq!(reassign(&mut c, None, true).error, ErrorCode::NONE);
        let p = c.partition(0);
        assert_eq!((p.leader, p.isr.clone(), p.elr.clone(), p.replicas.clone()), (2, vec![2], vec![], vec![1, 2, 3]));
        assert_eq!(p.leader_recovery_state, 0, "a clean election");
    }

    /// Partition 0 on [2, 1] with 2 being added, 1 removed, and only 2 in the ISR.
    fn only_added_replicas_in_the_isr(c: &mut TestCluster) {
        let p = c.partition(0).clone();
        c.image.apply(&MetadataRecord::PartitionChange {
            topic_id: TOPIC,
            partition: 0,
            leader: 2,
            isr: vec![2],
            elr: vec![],
            leader_epoch: p.leader_epoch + 1,
            partition_epoch: p.partition_epoch + 1,
            replicas: vec![2, 1],
            leader_recovery_state: 0,
            last_known_elr: Vec::new(),
            adding_replicas: vec![2],
            removing_replicas: vec![1],
        });
    }

    #[test]
    fn a_cancel_that_needs_an_unclean_election_is_refused_unless_the_topic_allows_it() {
        let (mut c, _) = cluster(vec![vec![1]]);
        only_added_replicas_in_the_isr(&mut c);
        let refused = c.control.alter_partition_reassignments(&c.image, true, &target(0, None));
        assert!(refused.records.is_empty());
        let answer = &refused.response[0].partitions[0];
        assert_eq!(
            (answer.error, answer.message.as_deref()),
            (
                ErrorCode::INVALID_REPLICA_ASSIGNMENT,
                Some("Unable to revert partition assignment for t:0 because it would require an unclean leader election.")
            )
        );

        let configs = BTreeMap::from([(UNCLEAN_LEADER_ELECTION_ENABLE.to_string(), "true".to_string())]);
        let (mut c, _) = cluster_with(vec![vec![1]], configs);
        only_added_replicas_in_the_isr(&mut c);
        assert_eq!(reassign(&mut c, None, true).error, ErrorCode::NONE);
        assert_eq!(state(c.partition(0)), (vec![1], vec![1], 1, vec![], vec![]));
        assert_eq!(
            c.partition(0).leader_recovery_state,
            crate::image::LEADER_RECOVERING,
            "an unclean revert's leader may lack records: it leads in recovery"
        );
    }

    #[test]
    fn list_shows_reassigning_partitions_all_or_named() {
        let (mut c, _) = cluster(vec![vec![1], vec![1], vec![1]]);
        let request = vec![(
            "t".to_string(),
            vec![
                ReassignmentTarget { partition_index: 0, replicas: Some(vec![2]) },
                ReassignmentTarget { partition_index: 2, replicas: Some(vec![1, 3]) },
            ],
        )];
        let result = c.control.alter_partition_reassignments(&c.image, true, &request);
        c.commit(result);
        let ongoing = |index, replicas: Vec<i32>, adding: Vec<i32>, removing: Vec<i32>| OngoingReassignment {
            partition_index: index,
            replicas,
            adding_replicas: adding,
            removing_replicas: removing,
        };
        let all = list_partition_reassignments(&c.image, None);
        assert_eq!(
            all,
            vec![TopicOngoingReassignments {
                name: "t".into(),
                partitions: vec![ongoing(0, vec![2, 1], vec![2], vec![1]), ongoing(2, vec![1, 3], vec![3], vec![])],
            }]
        );
        let named = vec![("t".to_string(), vec![1, 2, 7]), ("nope".to_string(), vec![0])];
        let listed = list_partition_reassignments(&c.image, Some(&named));
        assert_eq!(listed.len(), 1, "unknown topics are left out");
        assert_eq!(listed[0].partitions, vec![ongoing(2, vec![1, 3], vec![3], vec![])]);
        let none = vec![("t".to_string(), vec![1])];
        assert!(list_partition_reassignments(&c.image, Some(&none)).is_empty(), "no partition, no topic");
    }

    #[test]
    fn a_target_of_exactly_the_current_replicas_keeps_the_ongoing_reassignment_as_kafka_does() {
        let (mut c, _) = cluster(vec![vec![1]]);
        reassign(&mut c, Some(&[2, 3]), true);
        assert_eq!(reassign(&mut c, Some(&[1, 2, 3]), true).error, ErrorCode::NONE);
        assert_eq!(state(c.partition(0)), (vec![1, 2, 3], vec![1], 1, vec![2, 3], vec![1]), "still moving off 1");
    }

    #[test]
    fn at_most_ten_thousand_partitions_change_in_one_request() {
        let partitions = MAX_RECORDS_PER_USER_OP + 1;
        let (c, _) = cluster(vec![vec![1]; partitions + 1]);
        let mut targets: Vec<ReassignmentTarget> = (0..partitions as i32)
            .map(|partition_index| ReassignmentTarget { partition_index, replicas: Some(vec![2]) })
            .collect();
        // Asking for what a partition already has changes nothing: answered NONE.
        targets.push(ReassignmentTarget { partition_index: partitions as i32, replicas: Some(vec![1]) });
        let result = c.control.alter_partition_reassignments(&c.image, true, &[("t".to_string(), targets)]);
        assert_eq!(result.records.len(), MAX_RECORDS_PER_USER_OP);
        let answers = &result.response[0].partitions;
        assert!(answers[..MAX_RECORDS_PER_USER_OP].iter().all(|a| a.error == ErrorCode::NONE));
        let over = &answers[MAX_RECORDS_PER_USER_OP];
        assert_eq!((over.error, over.message.as_deref()), (ErrorCode::UNKNOWN_SERVER_ERROR, None));
        assert_eq!(answers[partitions].error, ErrorCode::NONE);
    }

    #[test]
    fn a_partition_named_twice_is_decided_on_its_first_change() {
        let (c, _) = cluster(vec![vec![1]]);
        let twice = vec![(
            "t".to_string(),
            vec![
                ReassignmentTarget { partition_index: 0, replicas: Some(vec![2]) },
                ReassignmentTarget { partition_index: 0, replicas: None },
            ],
        )];
        let result = c.control.alter_partition_reassignments(&c.image, true, &twice);
        assert_eq!(result.records.len(), 2, "started, then cancelled");
        let mut image = c.image.clone();
        for r in &result.records {
            image.apply(r);
        }
        assert_eq!(state(image.partition(Uuid(TOPIC), 0).unwrap()), (vec![1], vec![1], 1, vec![], vec![]));
    }
}
