//! Leader elections an operator asks for, and the automatic leader rebalance, sans-I/O
//! (Kafka's `ReplicationControlManager.electLeaders`, `electLeader` and
//! `maybeBalancePartitionLeaders`).
//!
//! **ElectLeaders (API 43).** A preferred election moves leadership to a partition's
//! first replica (its "preferred" replica) when that replica is in the ISR and its
//! broker is active; an unclean election gives a partition without a leader an active
//! member of its ISR or ELR (KIP-966), else its last known leader, else the first
//! active replica, from outside the ISR if need be. Each partition named gets Kafka's
//! answer: none (elected), ELECTION_NOT_NEEDED (the preferred replica already leads, or
//! the partition has a leader), PREFERRED_LEADER_NOT_AVAILABLE or
//! ELIGIBLE_LEADERS_NOT_AVAILABLE (no election possible), UNKNOWN_TOPIC_OR_PARTITION.
//! A null topic list means every partition, and then the partitions that need no
//! election are left out of the answer (their topics are still listed), as Kafka does.
//!
//! **The rebalance** (`auto.leader.rebalance.enable`): every
//! `leader.imbalance.check.interval.seconds` while some partition is led by another
//! replica than its first, the controller runs a preferred election on each such
//! partition, at most [`MAX_ELECTIONS_PER_IMBALANCE`] per pass (then the next pass
//! comes at once). Kafka's KRaft controller ignores
//! `leader.imbalance.per.broker.percentage` (it has no per-broker threshold: any
//! imbalanced partition whose preferred replica can lead is moved), and so does this.

use crate::cluster_control::{ClusterControl, ControllerResult};
use crate::controller::ControllerError;
use crate::image::{MetadataImage, MetadataRecord, PartitionImage, TopicImage, NO_LEADER};
use crate::partition_change::Election;
use osprey_protocol::ErrorCode;
use std::collections::BTreeMap;

/// The most preferred elections one rebalance pass proposes (Kafka's
/// `ReplicationControlManager.MAX_ELECTIONS_PER_IMBALANCE`): one pass is one batch of
/// the metadata log, so it is bounded; the next pass follows at once.
pub const MAX_ELECTIONS_PER_IMBALANCE: usize = 1_000;

/// Kafka's `Errors` messages, which its controller answers for these codes.
const ELECTION_NOT_NEEDED_MESSAGE: &str = "Leader election not needed for topic partition.";
const PREFERRED_LEADER_NOT_AVAILABLE_MESSAGE: &str = "The preferred leader was not available.";
const ELIGIBLE_LEADERS_NOT_AVAILABLE_MESSAGE: &str = "Eligible topic partition leaders are not available.";

/// ElectLeaders' `election_type` (Kafka's `ElectionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    Preferred,
    Unclean,
}

impl ElectionType {
    /// The wire value (0 preferred, 1 unclean); anything else is INVALID_REQUEST for the
    /// whole request, with Kafka's message.
    pub fn from_wire(value: i8) -> Result<ElectionType, ControllerError> {
        match value {
            0 => Ok(ElectionType::Preferred),
            1 => Ok(ElectionType::Unclean),
            other => Err(ControllerError::new(ErrorCode::INVALID_REQUEST, format!("Unknown election type {other}"))),
        }
    }
}

/// One partition's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionElectionResult {
    pub partition_id: i32,
    pub error: ErrorCode,
    /// `None` with `ErrorCode::NONE`, as Kafka's `ApiError.NONE`.
    pub message: Option<String>,
}

/// One topic's answers, in the order the request named its partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicElectionResult {
    pub topic: String,
    pub partitions: Vec<PartitionElectionResult>,
}

impl ClusterControl {
    /// ElectLeaders: `topics` names topics and their partitions, or is `None` for every
    /// partition of every topic. The records elect the new leaders; a partition named
    /// twice is elected once and answered the same both times.
    pub fn elect_leaders(
        &self,
        image: &MetadataImage,
        election: ElectionType,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> ControllerResult<Vec<TopicElectionResult>> {
        let mut records = Vec::new();
        let mut results = Vec::new();
        match topics {
            None => {
                for topic in image.topics() {
                    let partitions = topic
                        .partitions
                        .iter()
                        .map(|p| (p.index, self.elect_partition(image, topic, p, election, &mut records)))
                        // Every partition, so those already led as asked are left out.
                        .filter(|(_, (error, _))| *error != ErrorCode::ELECTION_NOT_NEEDED)
                        .map(|(partition_id, (error, message))| PartitionElectionResult {
                            partition_id,
                            error,
                            message,
                        })
                        .collect();
                    results.push(TopicElectionResult { topic: topic.name.clone(), partitions });
                }
            }
            Some(named) => {
                let mut answered: BTreeMap<(&str, i32), (ErrorCode, Option<String>)> = BTreeMap::new();
                for (name, partition_ids) in named {
                    let mut partitions = Vec::with_capacity(partition_ids.len());
                    for &partition_id in partition_ids {
                        let (error, message) = answered
                            .entry((name.as_str(), partition_id))
                            .or_insert_with(|| self.elect_named(image, name, partition_id, election, &mut records))
                            .clone();
                        partitions.push(PartitionElectionResult { partition_id, error, message });
                    }
                    results.push(TopicElectionResult { topic: name.clone(), partitions });
                }
            }
        }
        ControllerResult { records, response: results }
    }

    /// Kafka's `maybeBalancePartitionLeaders`: a preferred election for every partition
    /// whose leader is not its first replica, at most [`MAX_ELECTIONS_PER_IMBALANCE`]
    /// of them. The answer is whether the cap cut the pass short (run the next at once).
    pub fn balance_partition_leaders(&self, image: &MetadataImage) -> ControllerResult<bool> {
        let acceptable = |r: i32| is_active(image, r);
        let mut records = Vec::new();
        for topic in image.topics() {
            for p in topic.partitions.iter().filter(|p| !has_preferred_leader(p)) {
                if records.len() >= MAX_ELECTIONS_PER_IMBALANCE {
                    return ControllerResult { records, response: true };
                }
                let change = self.partition_change(image, topic, p, &acceptable).election(Election::Preferred).build();
                records.extend(change);
            }
        }
        ControllerResult { records, response: false }
    }
}

/// Kafka's `arePartitionLeadersImbalanced`: some partition is not led by its first
/// replica (an offline partition counts, as in Kafka's `imbalancedPartitions`).
pub fn partition_leaders_imbalanced(image: &MetadataImage) -> bool {
    image.topics().flat_map(|t| &t.partitions).any(|p| !has_preferred_leader(p))
}

impl ClusterControl {
    /// Kafka's `electLeader` for a partition named in the request.
    fn elect_named(
        &self,
        image: &MetadataImage,
        name: &str,
        partition_id: i32,
        election: ElectionType,
        records: &mut Vec<MetadataRecord>,
    ) -> (ErrorCode, Option<String>) {
        let Some(topic) = image.topic(name) else {
            return (ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, Some(format!("No such topic as {name}")));
        };
        let Some(p) = topic.partitions.iter().find(|p| p.index == partition_id) else {
            return (
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                Some(format!("No such partition as {name}-{partition_id}")),
            );
        };
        self.elect_partition(image, topic, p, election, records)
    }

    /// Kafka's `electLeader` once the partition is found: no election when the partition
    /// already has what was asked for; else the election's record, or why there is none.
    fn elect_partition(
        &self,
        image: &MetadataImage,
        topic: &TopicImage,
        p: &PartitionImage,
        election: ElectionType,
        records: &mut Vec<MetadataRecord>,
    ) -> (ErrorCode, Option<String>) {
        let not_needed = match election {
            ElectionType::Preferred => has_preferred_leader(p),
            ElectionType::Unclean => p.leader != NO_LEADER,
        };
        if not_needed {
            return (ErrorCode::ELECTION_NOT_NEEDED, Some(ELECTION_NOT_NEEDED_MESSAGE.into()));
        }
        let acceptable = |r: i32| is_active(image, r);
        let builder = self.partition_change(image, topic, p, &acceptable);
        let change = match election {
            ElectionType::Preferred => builder.election(Election::Preferred).build(),
            ElectionType::Unclean => builder.election(Election::Unclean).build(),
        };
        match (change, election) {
            (Some(record), _) => {
                records.push(record);
                (ErrorCode::NONE, None)
            }
            (None, ElectionType::Preferred) => {
                (ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE, Some(PREFERRED_LEADER_NOT_AVAILABLE_MESSAGE.into()))
            }
            (None, ElectionType::Unclean) => {
                (ErrorCode::ELIGIBLE_LEADERS_NOT_AVAILABLE, Some(ELIGIBLE_LEADERS_NOT_AVAILABLE_MESSAGE.into()))
            }
        }
    }
}

/// Kafka's `PartitionRegistration.hasPreferredLeader`: led by its first replica.
fn has_preferred_leader(p: &PartitionImage) -> bool {
    p.leader != NO_LEADER && p.replicas.first() == Some(&p.leader)
}

/// Kafka's `ClusterControlManager.isActive`: registered, unfenced, not shutting down.
fn is_active(image: &MetadataImage, broker_id: i32) -> bool {
    image.broker(broker_id).is_some_and(|b| b.is_active())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::LEADER_RECOVERING;
    use crate::test_support::{TestCluster, SESSION_MS, TOPIC};
    use std::collections::BTreeMap;

    /// Brokers 1-3 unfenced; topic "t" with these replica lists, led by `leaders`.
    fn cluster(replicas: Vec<Vec<i32>>, leaders: &[i32]) -> TestCluster {
        let mut c = TestCluster::new();
        for id in 1..=3 {
            c.add_broker(id, 0);
        }
        c.add_topic(replicas, BTreeMap::new());
        for (index, &leader) in leaders.iter().enumerate() {
            let p = c.partition(index as i32).clone();
            set(&mut c, index as i32, leader, p.isr.clone());
        }
        c
    }

    fn set(c: &mut TestCluster, index: i32, leader: i32, isr: Vec<i32>) {
        let p = c.partition(index).clone();
        c.image.apply(&MetadataRecord::PartitionChange {
            topic_id: TOPIC,
            partition: index,
            leader,
            isr,
            elr: vec![],
            last_known_elr: Vec::new(),
            leader_epoch: p.leader_epoch + 1,
            partition_epoch: p.partition_epoch + 1,
            replicas: p.replicas.clone(),
            leader_recovery_state: p.leader_recovery_state,
            adding_replicas: vec![],
            removing_replicas: vec![],
        });
    }

    fn named(partitions: &[i32]) -> Vec<(String, Vec<i32>)> {
        vec![("t".to_string(), partitions.to_vec())]
    }

    fn codes(results: &[TopicElectionResult]) -> Vec<(i32, ErrorCode)> {
        results.iter().flat_map(|t| &t.partitions).map(|p| (p.partition_id, p.error)).collect()
    }

    #[test]
    fn preferred_election_moves_leadership_back_to_the_first_replica() {
        let mut c = cluster(vec![vec![1, 2, 3]], &[2]);
        let epoch = c.partition(0).leader_epoch;
        let result = c.control.elect_leaders(&c.image, ElectionType::Preferred, Some(&named(&[0])));
        assert_eq!(
            result.response[0].partitions[0],
            PartitionElectionResult { partition_id: 0, error: ErrorCode::NONE, message: None }
        );
        c.commit(result);
        assert_eq!((c.partition(0).leader, c.partition(0).leader_epoch), (1, epoch + 1));
        let again = c.control.elect_leaders(&c.image, ElectionType::Preferred, Some(&named(&[0])));
        assert!(again.records.is_empty());
        let p = &again.response[0].partitions[0];
        assert_eq!(p.error, ErrorCode::ELECTION_NOT_NEEDED);
        assert_eq!(p.message.as_deref(), Some("Leader election not needed for topic partition."));
    }

    #[test]
    fn preferred_replica_outside_the_isr_or_fenced_is_not_available() {
        let mut c = cluster(vec![vec![1, 2, 3], vec![1, 2, 3]], &[2, 2]);
        set(&mut c, 0, 2, vec![2, 3]);
        c.heartbeat(2, c.image.broker(2).unwrap().epoch, SESSION_MS, false);
        c.heartbeat(3, c.image.broker(3).unwrap().epoch, SESSION_MS, false);
        let fenced = c.control.tick(&c.image, SESSION_MS + 1);
        assert_eq!(fenced.response, Some(1));
        c.commit(fenced);
        let result = c.control.elect_leaders(&c.image, ElectionType::Preferred, Some(&named(&[0, 1])));
        assert!(result.records.is_empty());
        assert_eq!(
            codes(&result.response),
            vec![(0, ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE), (1, ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE)]
        );
        assert_eq!(
            result.response[0].partitions[0].message.as_deref(),
            Some("The preferred leader was not available.")
        );
    }

    #[test]
    fn unknown_topics_and_partitions_are_answered_per_partition() {
        let c = cluster(vec![vec![1, 2, 3]], &[1]);
        let request = vec![("t".to_string(), vec![7]), ("nope".to_string(), vec![0])];
        let result = c.control.elect_leaders(&c.image, ElectionType::Preferred, Some(&request));
        let answers: Vec<_> = result
            .response
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.topic.as_str(), p.error, p.message.clone().unwrap())))
            .collect();
        assert_eq!(
            answers,
            vec![
                ("t", ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-7".to_string()),
                ("nope", ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, "No such topic as nope".to_string()),
            ]
        );
    }

    #[test]
    fn all_partitions_leave_out_those_that_need_no_election() {
        let c = cluster(vec![vec![1, 2, 3], vec![2, 3, 1], vec![3, 1, 2]], &[1, 3, 3]);
        let result = c.control.elect_leaders(&c.image, ElectionType::Preferred, None);
        assert_eq!(result.response.len(), 1, "the topic is listed");
        assert_eq!(codes(&result.response), vec![(1, ErrorCode::NONE)]);
        assert_eq!(result.records.len(), 1);
        let balanced = cluster(vec![vec![1, 2, 3]], &[1]);
        let result = balanced.control.elect_leaders(&balanced.image, ElectionType::Preferred, None);
        assert_eq!(result.response, vec![TopicElectionResult { topic: "t".into(), partitions: vec![] }]);
    }

    #[test]
    fn a_partition_named_twice_is_elected_once() {
        let c = cluster(vec![vec![1, 2, 3]], &[2]);
        let result = c.control.elect_leaders(&c.image, ElectionType::Preferred, Some(&named(&[0, 0])));
        assert_eq!(result.records.len(), 1);
        assert_eq!(codes(&result.response), vec![(0, ErrorCode::NONE), (0, ErrorCode::NONE)]);
    }

    #[test]
    fn unclean_election_leads_an_offline_partition_from_outside_the_isr() {
        let mut c = cluster(vec![vec![1, 2]], &[1]);
        set(&mut c, 0, NO_LEADER, vec![3]);
        let result = c.control.elect_leaders(&c.image, ElectionType::Unclean, Some(&named(&[0])));
        assert_eq!(codes(&result.response), vec![(0, ErrorCode::NONE)]);
        c.commit(result);
        let p = c.partition(0);
        assert_eq!((p.leader, p.isr.clone(), p.leader_recovery_state), (1, vec![1], LEADER_RECOVERING));
        let again = c.control.elect_leaders(&c.image, ElectionType::Unclean, Some(&named(&[0])));
        assert_eq!(codes(&again.response), vec![(0, ErrorCode::ELECTION_NOT_NEEDED)], "it has a leader now");
    }

    #[test]
    fn unclean_election_takes_an_active_elr_member_first_and_cleanly() {
        let mut c = cluster(vec![vec![1, 2, 3]], &[1]);
        let p = c.partition(0).clone();
        c.image.apply(&MetadataRecord::PartitionChange {
            topic_id: TOPIC,
            partition: 0,
            leader: NO_LEADER,
            isr: vec![],
            elr: vec![3],
            last_known_elr: vec![1],
            leader_epoch: p.leader_epoch + 1,
            partition_epoch: p.partition_epoch + 1,
            replicas: p.replicas.clone(),
            leader_recovery_state: p.leader_recovery_state,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        });
        let result = c.control.elect_leaders(&c.image, ElectionType::Unclean, Some(&named(&[0])));
        assert_eq!(codes(&result.response), vec![(0, ErrorCode::NONE)]);
        c.commit(result);
        let p = c.partition(0);
        assert_eq!((p.leader, p.isr.clone(), p.elr.clone()), (3, vec![3], vec![]));
        assert_eq!(p.leader_recovery_state, crate::image::LEADER_RECOVERED, "not replica 1, not unclean");
        assert!(p.last_known_elr.is_empty());
    }

    #[test]
    fn unclean_election_without_a_live_replica_is_eligible_leaders_not_available() {
        let mut c = TestCluster::new();
        c.add_broker(1, 0);
        c.add_topic(vec![vec![2]], BTreeMap::new());
        set(&mut c, 0, NO_LEADER, vec![2]);
        let result = c.control.elect_leaders(&c.image, ElectionType::Unclean, Some(&named(&[0])));
        assert!(result.records.is_empty());
        assert_eq!(codes(&result.response), vec![(0, ErrorCode::ELIGIBLE_LEADERS_NOT_AVAILABLE)]);
        assert_eq!(
            result.response[0].partitions[0].message.as_deref(),
            Some("Eligible topic partition leaders are not available.")
        );
    }

    #[test]
    fn unknown_election_type_is_invalid_request() {
        assert_eq!(ElectionType::from_wire(0), Ok(ElectionType::Preferred));
        assert_eq!(ElectionType::from_wire(1), Ok(ElectionType::Unclean));
        let err = ElectionType::from_wire(2).unwrap_err();
        assert_eq!((err.code, err.message.as_str()), (ErrorCode::INVALID_REQUEST, "Unknown election type 2"));
    }

    #[test]
    fn rebalance_moves_every_partition_whose_preferred_replica_can_lead() {
        let mut c = cluster(vec![vec![1, 2, 3], vec![2, 3, 1], vec![3, 1, 2]], &[2, 3, 3]);
        set(&mut c, 1, 3, vec![3, 1]);
        assert!(partition_leaders_imbalanced(&c.image));
        let result = c.control.balance_partition_leaders(&c.image);
        assert!(!result.response, "not cut short");
        c.commit(result);
        let leaders: Vec<i32> = (0..3).map(|i| c.partition(i).leader).collect();
        assert_eq!(leaders, vec![1, 3, 3], "partition 1's preferred replica is not in the ISR yet");
        assert!(partition_leaders_imbalanced(&c.image));
        set(&mut c, 1, 3, vec![3, 1, 2]);
        let result = c.control.balance_partition_leaders(&c.image);
        c.commit(result);
        assert_eq!(c.partition(1).leader, 2);
        assert!(!partition_leaders_imbalanced(&c.image));
        assert!(c.control.balance_partition_leaders(&c.image).records.is_empty());
    }

    #[test]
    fn rebalance_proposes_at_most_a_thousand_elections_a_pass() {
        let mut c = cluster(vec![], &[]);
        let partitions = MAX_ELECTIONS_PER_IMBALANCE + 1;
        c.image.apply(&MetadataRecord::CreateTopic {
            name: "many".into(),
            id: [9; 16],
            replicas: vec![vec![1, 2]; partitions],
            configs: BTreeMap::new(),
            isrs: None,
        });
        for index in 0..partitions as i32 {
            c.image.apply(&MetadataRecord::PartitionChange {
                topic_id: [9; 16],
                partition: index,
                leader: 2,
                isr: vec![2, 1],
                elr: vec![],
                last_known_elr: Vec::new(),
                leader_epoch: 1,
                partition_epoch: 1,
                replicas: vec![1, 2],
                leader_recovery_state: 0,
                adding_replicas: vec![],
                removing_replicas: vec![],
            });
        }
        let first = c.control.balance_partition_leaders(&c.image);
        assert!(first.response, "cut short");
        assert_eq!(first.records.len(), MAX_ELECTIONS_PER_IMBALANCE);
        c.commit(first);
        let second = c.control.balance_partition_leaders(&c.image);
        assert!(!second.response);
        assert_eq!(second.records.len(), 1);
        c.commit(second);
        assert!(c.image.topic("many").unwrap().partitions.iter().all(|p| p.leader == 1));
    }
}
