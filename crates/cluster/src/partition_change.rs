//! One partition's next state: a new ISR, replicas and reassignment, and, when the
//! leader is no longer acceptable (or a preferred election asks for the first replica),
//! an election (Kafka's `PartitionChangeBuilder`, without eligible leader replicas,
//! KIP-966, which Osprey's controller does not do yet).
//!
//! Every change first completes an ongoing reassignment when it can (Kafka's
//! `completeReassignmentIfNeeded`): once every replica that stays is in the target ISR,
//! the removing replicas leave the replicas and the ISR, and the election that follows
//! replaces a removed leader. So an ISR change from any source (AlterPartition, fencing,
//! controlled shutdown) finishes a reassignment, as in Kafka.
//!
//! The leader epoch is bumped at every leader change, and when the replicas lose a
//! member (Kafka's `triggerLeaderEpochBumpForReplicaReassignmentIfNeeded`, so that a
//! removed follower's fetches are fenced); the partition epoch at every change; a change
//! that changes nothing is no record.

use crate::image::{MetadataRecord, PartitionImage, LEADER_RECOVERING, NO_LEADER};
use osprey_protocol::Uuid;

pub(crate) struct PartitionChangeBuilder<'a> {
    topic_id: Uuid,
    partition: &'a PartitionImage,
    target_isr: Vec<i32>,
    target_replicas: Vec<i32>,
    target_adding: Vec<i32>,
    target_removing: Vec<i32>,
    target_leader_recovery_state: i8,
    election: Election,
    is_acceptable_leader: &'a dyn Fn(i32) -> bool,
}

/// Which leader an election looks for (Kafka's `PartitionChangeBuilder.Election`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Election {
    /// Keep an acceptable leader in the ISR, else the first acceptable ISR member.
    Online,
    /// The first replica when it is an acceptable ISR member, else as `Online`, never
    /// outside the ISR: ElectLeaders' preferred election and the leader rebalance.
    Preferred,
    /// As `Online`, else any acceptable replica outside the ISR
    /// (`unclean.leader.election.enable`, ElectLeaders' unclean election).
    Unclean,
}

/// The outcome of an election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Elected {
    leader: i32,
    unclean: bool,
}

impl<'a> PartitionChangeBuilder<'a> {
    /// A builder that changes nothing yet: the target ISR is the current one.
    pub(crate) fn new(
        topic_id: Uuid,
        partition: &'a PartitionImage,
        is_acceptable_leader: &'a dyn Fn(i32) -> bool,
    ) -> PartitionChangeBuilder<'a> {
        PartitionChangeBuilder {
            topic_id,
            partition,
            target_isr: partition.isr.clone(),
            target_replicas: partition.replicas.clone(),
            target_adding: partition.adding_replicas.clone(),
            target_removing: partition.removing_replicas.clone(),
            target_leader_recovery_state: partition.leader_recovery_state,
            election: Election::Online,
            is_acceptable_leader,
        }
    }

    pub(crate) fn target_isr(mut self, isr: Vec<i32>) -> Self {
        self.target_isr = isr;
        self
    }

    pub(crate) fn target_replicas(mut self, replicas: Vec<i32>) -> Self {
        self.target_replicas = replicas;
        self
    }

    pub(crate) fn target_adding(mut self, adding: Vec<i32>) -> Self {
        self.target_adding = adding;
        self
    }

    pub(crate) fn target_removing(mut self, removing: Vec<i32>) -> Self {
        self.target_removing = removing;
        self
    }

    pub(crate) fn target_leader_recovery_state(mut self, state: i8) -> Self {
        self.target_leader_recovery_state = state;
        self
    }

    /// `Unclean` when enabled, else `Online`.
    pub(crate) fn unclean_election(self, enabled: bool) -> Self {
        self.election(if enabled { Election::Unclean } else { Election::Online })
    }

    pub(crate) fn election(mut self, election: Election) -> Self {
        self.election = election;
        self
    }

    /// The PartitionChange record, or `None` when nothing changes.
    pub(crate) fn build(mut self) -> Option<MetadataRecord> {
        self.complete_reassignment_if_needed();
        let p = self.partition;
        let mut leader = p.leader;
        let mut leader_epoch = p.leader_epoch;
        let mut isr = p.isr.clone();
        let mut recovery = p.leader_recovery_state;
        let mut isr_set_by_election = false;
        let election = self.elect();
        if election.leader != p.leader {
            leader = election.leader;
            leader_epoch = p.leader_epoch.saturating_add(1);
            if election.unclean {
                // An unclean leader may lack committed records: it is the ISR alone, and
                // recovering until it says otherwise (KIP-704).
                isr = vec![election.leader];
                recovery = LEADER_RECOVERING;
                isr_set_by_election = true;
            }
        } else if !p.replicas.iter().all(|r| self.target_replicas.contains(r)) {
            // A replica leaves: the leader epoch moves on, so that its fetches at the old
            // epoch are refused.
            leader_epoch = p.leader_epoch.saturating_add(1);
        }
        // An empty ISR is never written (without KIP-966's ELR): the last member stays,
        // so that the partition knows which replica has everything when it comes back.
        if !isr_set_by_election && !self.target_isr.is_empty() && self.target_isr != p.isr {
            isr = self.target_isr.clone();
        }
        if !isr_set_by_election && self.target_leader_recovery_state != p.leader_recovery_state {
            recovery = self.target_leader_recovery_state;
        }
        let replicas = if self.target_replicas.is_empty() { p.replicas.clone() } else { self.target_replicas };
        let unchanged = leader_epoch == p.leader_epoch
            && isr == p.isr
            && recovery == p.leader_recovery_state
            && replicas == p.replicas
            && self.target_adding == p.adding_replicas
            && self.target_removing == p.removing_replicas;
        if unchanged {
            return None;
        }
        Some(MetadataRecord::PartitionChange {
            topic_id: self.topic_id.0,
            partition: p.index,
            leader,
            isr,
            elr: p.elr.clone(),
            leader_epoch,
            partition_epoch: p.partition_epoch.saturating_add(1),
            replicas,
            leader_recovery_state: recovery,
            adding_replicas: self.target_adding,
            removing_replicas: self.target_removing,
        })
    }

    /// Kafka's `completeReassignmentIfNeeded`: a reassignment in progress completes
    /// when every replica it keeps is in the target ISR (with at least one ISR member
    /// left once the removing replicas are out); then the replicas and the ISR lose the
    /// removing replicas, and nothing is adding or removing any more.
    fn complete_reassignment_if_needed(&mut self) {
        if self.target_adding.is_empty() && self.target_removing.is_empty() {
            return;
        }
        let removing = &self.target_removing;
        let isr: Vec<i32> = self.target_isr.iter().copied().filter(|r| !removing.contains(r)).collect();
        let replicas: Vec<i32> = self.target_replicas.iter().copied().filter(|r| !removing.contains(r)).collect();
        if isr.is_empty() || replicas.is_empty() || !replicas.iter().all(|r| isr.contains(r)) {
            return;
        }
        self.target_isr = isr;
        self.target_replicas = replicas;
        self.target_adding.clear();
        self.target_removing.clear();
    }

    /// Kafka's `electLeader`: a preferred election takes the first replica if it is a
    /// valid leader (in the target ISR and acceptable), and otherwise elects as any
    /// other; see [`Self::elect_any`].
    fn elect(&self) -> Elected {
        if self.election == Election::Preferred {
            if let Some(&preferred) = self.target_replicas.first() {
                if self.is_valid_leader(preferred) {
                    return Elected { leader: preferred, unclean: false };
                }
            }
        }
        self.elect_any()
    }

    /// Kafka's `electAnyLeader`: keep an acceptable leader that stays in the ISR; else
    /// the first replica, in replica order, that is in the target ISR and acceptable;
    /// else, if unclean election is enabled, the first acceptable replica; else none.
    fn elect_any(&self) -> Elected {
        if self.partition.leader != NO_LEADER && self.is_valid_leader(self.partition.leader) {
            return Elected { leader: self.partition.leader, unclean: false };
        }
        if let Some(&r) = self.target_replicas.iter().find(|&&r| self.is_valid_leader(r)) {
            return Elected { leader: r, unclean: false };
        }
        if self.election == Election::Unclean {
            if let Some(&r) = self.target_replicas.iter().find(|&&r| (self.is_acceptable_leader)(r)) {
                return Elected { leader: r, unclean: true };
            }
        }
        Elected { leader: NO_LEADER, unclean: false }
    }

    fn is_valid_leader(&self, r: i32) -> bool {
        self.target_isr.contains(&r) && (self.is_acceptable_leader)(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::LEADER_RECOVERED;

    fn partition(replicas: &[i32], isr: &[i32], leader: i32) -> PartitionImage {
        PartitionImage {
            index: 0,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            leader_epoch: 4,
            partition_epoch: 7,
            elr: Vec::new(),
            leader_recovery_state: LEADER_RECOVERED,
            adding_replicas: vec![],
            removing_replicas: vec![],
        }
    }

    fn fields(r: MetadataRecord) -> (i32, Vec<i32>, i32, i32, i8) {
        match r {
            MetadataRecord::PartitionChange {
                leader,
                isr,
                leader_epoch,
                partition_epoch,
                leader_recovery_state,
                ..
            } => (leader, isr, leader_epoch, partition_epoch, leader_recovery_state),
            other => panic!("not a PartitionChange: {other:?}"),
        }
    }

    #[test]
    fn removing_the_leader_elects_the_next_isr_member_in_replica_order() {
        let p = partition(&[1, 2, 3], &[3, 1, 2], 1);
        let alive = |r: i32| r != 1;
        let r = PartitionChangeBuilder::new(Uuid([1; 16]), &p, &alive).target_isr(vec![3, 2]).build().unwrap();
        assert_eq!(fields(r), (2, vec![3, 2], 5, 8, LEADER_RECOVERED));
    }

    #[test]
    fn isr_shrink_keeps_leader_and_leader_epoch() {
        let p = partition(&[1, 2, 3], &[1, 2, 3], 1);
        let alive = |_: i32| true;
        let r = PartitionChangeBuilder::new(Uuid([1; 16]), &p, &alive).target_isr(vec![1, 2]).build().unwrap();
        assert_eq!(fields(r), (1, vec![1, 2], 4, 8, LEADER_RECOVERED));
    }

    #[test]
    fn last_isr_member_stays_and_partition_goes_offline() {
        let p = partition(&[1, 2], &[1], 1);
        let alive = |r: i32| r != 1;
        let r = PartitionChangeBuilder::new(Uuid([1; 16]), &p, &alive).target_isr(vec![]).build().unwrap();
        assert_eq!(fields(r), (NO_LEADER, vec![1], 5, 8, LEADER_RECOVERED));
    }

    #[test]
    fn unclean_election_picks_a_live_replica_and_marks_it_recovering() {
        let p = partition(&[1, 2], &[1], 1);
        let alive = |r: i32| r != 1;
        let r = PartitionChangeBuilder::new(Uuid([1; 16]), &p, &alive)
            .target_isr(vec![])
            .unclean_election(true)
            .build()
            .unwrap();
        assert_eq!(fields(r), (2, vec![2], 5, 8, LEADER_RECOVERING));
    }

    #[test]
    fn preferred_election_moves_leadership_to_the_first_replica_in_the_isr() {
        let p = partition(&[1, 2, 3], &[2, 3, 1], 2);
        let alive = |_: i32| true;
        let r = PartitionChangeBuilder::new(Uuid([1; 16]), &p, &alive).election(Election::Preferred).build().unwrap();
        assert_eq!(fields(r), (1, vec![2, 3, 1], 5, 8, LEADER_RECOVERED));
        let online = PartitionChangeBuilder::new(Uuid([1; 16]), &p, &alive).build();
        assert!(online.is_none(), "an online election keeps a valid leader");
    }

    #[test]
    fn preferred_election_keeps_the_leader_when_the_first_replica_is_not_valid() {
        let p = partition(&[1, 2, 3], &[2, 3], 2);
        let alive = |_: i32| true;
        let outside_isr = PartitionChangeBuilder::new(Uuid([1; 16]), &p, &alive).election(Election::Preferred);
        assert!(outside_isr.build().is_none(), "replica 1 is not in the ISR");
        let p = partition(&[1, 2, 3], &[1, 2, 3], 2);
        let fenced = |r: i32| r != 1;
        let not_acceptable = PartitionChangeBuilder::new(Uuid([1; 16]), &p, &fenced).election(Election::Preferred);
        assert!(not_acceptable.build().is_none(), "replica 1 is fenced");
    }

    #[test]
    fn preferred_election_never_elects_outside_the_isr() {
        let p = partition(&[1, 2], &[1], NO_LEADER);
        let alive = |r: i32| r != 1;
        let r = PartitionChangeBuilder::new(Uuid([1; 16]), &p, &alive).election(Election::Preferred).build();
        assert!(r.is_none(), "offline stays offline: {r:?}");
    }

    #[test]
    fn no_change_is_no_record() {
        let p = partition(&[1, 2], &[1, 2], 1);
        let alive = |_: i32| true;
        assert!(PartitionChangeBuilder::new(Uuid([1; 16]), &p, &alive).build().is_none());
    }
}
