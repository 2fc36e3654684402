//! AlterPartition (API 56): a partition leader asks the controller to change its ISR
//! (Kafka's `ReplicationControlManager.alterPartition` and `validateAlterPartitionData`).

use crate::cluster_control::{check_broker_epoch, ClusterControl, ControllerResult};
use crate::controller::ControllerError;
use crate::image::{apply_partition_change, MetadataImage, PartitionImage, LEADER_RECOVERED, LEADER_RECOVERING};
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::HashMap;

/// An AlterPartition request (versions 2-3, the ones Kafka 4.4 has: topics by id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionInput {
    pub broker_id: i32,
    pub broker_epoch: i64,
    pub topics: Vec<AlterPartitionTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionTopic {
    pub topic_id: Uuid,
    pub partitions: Vec<AlterPartitionItem>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionItem {
    pub partition_index: i32,
    pub leader_epoch: i32,
    /// The proposed ISR with each member's broker epoch (-1: not checked; version 2
    /// sends ids only).
    pub new_isr: Vec<(i32, i64)>,
    pub leader_recovery_state: i8,
    pub partition_epoch: i32,
}

/// The answer for one topic of the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionTopicResult {
    pub topic_id: Uuid,
    pub partitions: Vec<AlterPartitionResult>,
}

/// The answer for one partition: an error, or the partition's state after the change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionResult {
    pub partition_index: i32,
    pub error: ErrorCode,
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub isr: Vec<i32>,
    pub leader_recovery_state: i8,
    pub partition_epoch: i32,
}

impl AlterPartitionResult {
    fn error(partition_index: i32, error: ErrorCode) -> AlterPartitionResult {
        AlterPartitionResult {
            partition_index,
            error,
            leader_id: -1,
            leader_epoch: -1,
            isr: Vec::new(),
            leader_recovery_state: LEADER_RECOVERED,
            partition_epoch: -1,
        }
    }

    fn state(p: &PartitionImage) -> AlterPartitionResult {
        AlterPartitionResult {
            partition_index: p.index,
            error: ErrorCode::NONE,
            leader_id: p.leader,
            leader_epoch: p.leader_epoch,
            isr: p.isr.clone(),
            leader_recovery_state: p.leader_recovery_state,
            partition_epoch: p.partition_epoch,
        }
    }
}

impl ClusterControl {
    /// Validates each partition's proposed ISR and returns the PartitionChange records
    /// with each partition's answer. A stale broker epoch fails the whole request
    /// (STALE_BROKER_EPOCH, Kafka's top-level error).
    pub fn alter_partition(
        &self,
        image: &MetadataImage,
        request: &AlterPartitionInput,
    ) -> Result<ControllerResult<Vec<AlterPartitionTopicResult>>, ControllerError> {
        check_broker_epoch(image, request.broker_id, request.broker_epoch)?;
        let mut records = Vec::new();
        // A partition named twice in one request is checked against its state after
        // the first change, not the image's (which the records have not reached yet).
        let mut changed: HashMap<(Uuid, i32), PartitionImage> = HashMap::new();
        let mut response = Vec::with_capacity(request.topics.len());
        for t in &request.topics {
            let mut results = Vec::with_capacity(t.partitions.len());
            let Some(topic) = image.topic_by_id(t.topic_id).filter(|_| t.topic_id != Uuid::default()) else {
                let error = ErrorCode::UNKNOWN_TOPIC_ID;
                results.extend(t.partitions.iter().map(|p| AlterPartitionResult::error(p.partition_index, error)));
                response.push(AlterPartitionTopicResult { topic_id: t.topic_id, partitions: results });
                continue;
            };
            let unclean = self.unclean_election_enabled(topic);
            for item in &t.partitions {
                let key = (t.topic_id, item.partition_index);
                let current =
                    changed.get(&key).cloned().or_else(|| image.partition(t.topic_id, item.partition_index).cloned());
                let Some(current) = current else {
                    results
                        .push(AlterPartitionResult::error(item.partition_index, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION));
                    continue;
                };
                let error = validate(image, request, &current, item);
                if error != ErrorCode::NONE {
                    results.push(AlterPartitionResult::error(item.partition_index, error));
                    continue;
                }
                let acceptable = |r: i32| image.broker(r).is_some_and(|b| b.is_active());
                let record = self
                    .partition_change(image, topic, &current, &acceptable)
                    .target_isr(item.new_isr.iter().map(|&(id, _)| id).collect())
                    .target_leader_recovery_state(item.leader_recovery_state)
                    .unclean_election(unclean)
                    .build();
                let mut after = current.clone();
                if let Some(record) = record {
                    apply_partition_change(&mut after, &record);
                    records.push(record);
                }
                if after.leader != request.broker_id {
                    // The leader is not the sender any more: Kafka answers
                    // NEW_LEADER_ELECTED and the broker learns the rest from metadata.
                    results.push(AlterPartitionResult::error(item.partition_index, ErrorCode::NEW_LEADER_ELECTED));
                } else {
                    results.push(AlterPartitionResult::state(&after));
                }
                changed.insert(key, after);
            }
            response.push(AlterPartitionTopicResult { topic_id: t.topic_id, partitions: results });
        }
        Ok(ControllerResult { records, response })
    }
}

/// Kafka's `validateAlterPartitionData`, in Kafka's order.
fn validate(
    image: &MetadataImage,
    request: &AlterPartitionInput,
    p: &PartitionImage,
    item: &AlterPartitionItem,
) -> ErrorCode {
    // A leader that knows newer epochs than this controller talks to a stale
    // controller: NOT_CONTROLLER sends it to look for the active one.
    if item.leader_epoch > p.leader_epoch || item.partition_epoch > p.partition_epoch {
        return ErrorCode::NOT_CONTROLLER;
    }
    if item.leader_epoch < p.leader_epoch {
        return ErrorCode::FENCED_LEADER_EPOCH;
    }
    if request.broker_id != p.leader {
        return ErrorCode::INVALID_REQUEST;
    }
    if item.partition_epoch < p.partition_epoch {
        return ErrorCode::INVALID_UPDATE_VERSION;
    }
    let new_isr: Vec<i32> = item.new_isr.iter().map(|&(id, _)| id).collect();
    if !valid_isr(&p.replicas, &new_isr) || !new_isr.contains(&p.leader) {
        return ErrorCode::INVALID_REQUEST;
    }
    if item.leader_recovery_state == LEADER_RECOVERING && new_isr.len() > 1 {
        return ErrorCode::INVALID_REQUEST;
    }
    if p.leader_recovery_state == LEADER_RECOVERED && item.leader_recovery_state == LEADER_RECOVERING {
        return ErrorCode::INVALID_REQUEST;
    }
    if item.leader_recovery_state != LEADER_RECOVERED && item.leader_recovery_state != LEADER_RECOVERING {
        return ErrorCode::INVALID_REQUEST;
    }
    let ineligible = item.new_isr.iter().any(|&(id, epoch)| match image.broker(id) {
        None => true,
        Some(b) => !b.is_active() || (epoch != -1 && epoch != b.epoch),
    });
    if ineligible {
        return ErrorCode::INELIGIBLE_REPLICA;
    }
    ErrorCode::NONE
}

/// Kafka's `Replicas.validateIsr`: every member a replica, none twice.
fn valid_isr(replicas: &[i32], isr: &[i32]) -> bool {
    isr.iter().enumerate().all(|(i, r)| replicas.contains(r) && !isr[..i].contains(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{TestCluster, TOPIC};
    use std::collections::BTreeMap;

    /// Brokers 1-3 unfenced, one partition on [1, 2, 3] led by 1; broker epochs.
    fn cluster() -> (TestCluster, [i64; 3]) {
        let mut c = TestCluster::new();
        let epochs = [c.add_broker(1, 0), c.add_broker(2, 0), c.add_broker(3, 0)];
        c.add_topic(vec![vec![1, 2, 3]], BTreeMap::new());
        (c, epochs)
    }

    fn request(c: &TestCluster, epoch: i64, isr: &[(i32, i64)]) -> AlterPartitionInput {
        let p = c.partition(0);
        AlterPartitionInput {
            broker_id: 1,
            broker_epoch: epoch,
            topics: vec![AlterPartitionTopic {
                topic_id: Uuid(TOPIC),
                partitions: vec![AlterPartitionItem {
                    partition_index: 0,
                    leader_epoch: p.leader_epoch,
                    new_isr: isr.to_vec(),
                    leader_recovery_state: LEADER_RECOVERED,
                    partition_epoch: p.partition_epoch,
                }],
            }],
        }
    }

    fn answer(c: &mut TestCluster, request: &AlterPartitionInput) -> AlterPartitionResult {
        let result = c.control.alter_partition(&c.image, request).unwrap();
        c.commit(result)[0].partitions[0].clone()
    }

    fn item(r: &mut AlterPartitionInput) -> &mut AlterPartitionItem {
        &mut r.topics[0].partitions[0]
    }

    #[test]
    fn accepted_shrink_and_expand_bump_the_partition_epoch_only() {
        let (mut c, e) = cluster();
        let shrink = request(&c, e[0], &[(1, e[0]), (2, e[1])]);
        let a = answer(&mut c, &shrink);
        assert_eq!(
            (a.error, a.leader_id, a.isr.clone(), a.leader_epoch, a.partition_epoch),
            (ErrorCode::NONE, 1, vec![1, 2], 0, 1)
        );
        assert_eq!(c.partition(0).isr, vec![1, 2]);
        let expand = request(&c, e[0], &[(1, -1), (2, -1), (3, -1)]);
        let a = answer(&mut c, &expand);
        assert_eq!((a.isr, a.partition_epoch), (vec![1, 2, 3], 2));
    }

    #[test]
    fn kafkas_validation_errors() {
        let (mut c, e) = cluster();
        let ok = request(&c, e[0], &[(1, e[0]), (2, e[1])]);
        type Change = Box<dyn Fn(&mut AlterPartitionInput)>;
        let cases: Vec<(&str, ErrorCode, Change)> = vec![
            ("older partition epoch", ErrorCode::INVALID_UPDATE_VERSION, Box::new(|r| item(r).partition_epoch = -1)),
            ("older leader epoch", ErrorCode::FENCED_LEADER_EPOCH, Box::new(|r| item(r).leader_epoch = -1)),
            ("newer leader epoch", ErrorCode::NOT_CONTROLLER, Box::new(|r| item(r).leader_epoch = 5)),
            ("newer partition epoch", ErrorCode::NOT_CONTROLLER, Box::new(|r| item(r).partition_epoch = 5)),
            (
                "not the leader",
                ErrorCode::INVALID_REQUEST,
                Box::new(move |r| (r.broker_id, r.broker_epoch) = (2, e[1])),
            ),
            ("ISR without the leader", ErrorCode::INVALID_REQUEST, Box::new(|r| item(r).new_isr = vec![(2, -1)])),
            ("member not a replica", ErrorCode::INVALID_REQUEST, Box::new(|r| item(r).new_isr.push((9, -1)))),
            ("member twice", ErrorCode::INVALID_REQUEST, Box::new(|r| item(r).new_isr.push((2, -1)))),
            (
                "recovering with two members",
                ErrorCode::INVALID_REQUEST,
                Box::new(|r| item(r).leader_recovery_state = 1),
            ),
            ("member's broker epoch stale", ErrorCode::INELIGIBLE_REPLICA, Box::new(|r| item(r).new_isr[1].1 = 1234)),
            ("unknown partition", ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, Box::new(|r| item(r).partition_index = 3)),
            ("unknown topic", ErrorCode::UNKNOWN_TOPIC_ID, Box::new(|r| r.topics[0].topic_id = Uuid([9; 16]))),
        ];
        for (why, code, change) in cases {
            let mut r = ok.clone();
            change(&mut r);
            let result = c.control.alter_partition(&c.image, &r).unwrap();
            assert!(result.records.is_empty(), "{why}: refused, nothing written");
            assert_eq!(result.response[0].partitions[0].error, code, "{why}");
        }
        let mut stale = ok.clone();
        stale.broker_epoch += 1;
        assert_eq!(c.control.alter_partition(&c.image, &stale).unwrap_err().code, ErrorCode::STALE_BROKER_EPOCH);
        assert_eq!(answer(&mut c, &ok).error, ErrorCode::NONE, "the unchanged request is accepted");
    }

    #[test]
    fn shutting_down_or_fenced_members_are_ineligible() {
        let mut c = TestCluster::new();
        let e = [c.add_broker(1, 0), c.add_broker(2, 0), c.add_broker(3, 0)];
        c.add_topic(vec![vec![1, 2, 3], vec![3, 1, 2]], BTreeMap::new());
        let reply = c.heartbeat(3, e[2], 10, true);
        assert!(reply.in_controlled_shutdown && !reply.should_shut_down, "it led partition 1");
        assert_eq!(c.partition(0).isr, vec![1, 2], "it left the ISRs");
        let r = request(&c, e[0], &[(1, e[0]), (2, e[1]), (3, e[2])]);
        assert_eq!(answer(&mut c, &r).error, ErrorCode::INELIGIBLE_REPLICA);
        c.heartbeat(1, e[0], 20, false);
        c.heartbeat(2, e[1], 20, false);
        // Its own offset counts as of its previous heartbeat (Kafka decides before it
        // records the heartbeat), so the grant comes one heartbeat later.
        let reply = c.heartbeat(3, e[2], 30, true);
        assert!(reply.in_controlled_shutdown && !reply.should_shut_down);
        let reply = c.heartbeat(3, e[2], 40, true);
        assert!(reply.should_shut_down && reply.is_fenced);
        let r = request(&c, e[0], &[(1, e[0]), (2, e[1]), (3, e[2])]);
        assert_eq!(answer(&mut c, &r).error, ErrorCode::INELIGIBLE_REPLICA, "fenced");
        let without = request(&c, e[0], &[(1, e[0])]);
        assert_eq!(answer(&mut c, &without).error, ErrorCode::NONE);
    }

    #[test]
    fn a_partition_named_twice_is_checked_against_its_first_change() {
        let (c, e) = cluster();
        let mut r = request(&c, e[0], &[(1, -1), (2, -1)]);
        let second = item(&mut r).clone();
        r.topics[0].partitions.push(second);
        let result = c.control.alter_partition(&c.image, &r).unwrap();
        assert_eq!(result.records.len(), 1);
        let answers = &result.response[0].partitions;
        assert_eq!((answers[0].error, answers[1].error), (ErrorCode::NONE, ErrorCode::INVALID_UPDATE_VERSION));
    }
}
