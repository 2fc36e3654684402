//! One partition's next state: a new ISR, replicas and reassignment, and, when the
//! leader is no longer acceptable (or a preferred election asks for the first replica),
//! an election (Kafka's `PartitionChangeBuilder`).
//!
//!
//! **Eligible leader replicas** (KIP-966, on when the builder is given the topic's
//! effective `min.insync.replicas`): while the target ISR is below it, every replica that
//! was in the ISR and is not in the target ISR joins the ELR, unless its broker shut down
//! uncleanly; an ISR back at the minimum clears the ELR. A replica that leaves the ISR
//! below the minimum has every committed record (the high watermark does not move while
//! the ISR is below it, KAFKA-15583), so the ISR may now become empty: the partition
//! goes offline and its ELR says who may lead it again. A clean election takes an
//! acceptable ISR member, or with the ISR empty an acceptable ELR member (which becomes
//! the ISR alone); then the last known leader (Kafka's "balanced" recovery, the last
//! leader before the partition went offline, kept in `last_known_elr`), once it is
//! acceptable; then, when the topic allows, any acceptable replica (unclean). An
//! unclean election, of either kind, clears the ELR.
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
use std::collections::BTreeSet;

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
    /// The topic's effective `min.insync.replicas` when eligible leader replicas are on.
    elr_min_isr: Option<usize>,
    target_elr: Vec<i32>,
    /// A broker that re-registered after an unclean shutdown: it joins no ELR.
    unclean_shutdown_replica: Option<i32>,
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
            elr_min_isr: None,
            target_elr: partition.elr.clone(),
            unclean_shutdown_replica: None,
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

    /// Eligible leader replicas on (`Some`, with the topic's effective
    /// `min.insync.replicas`) or off (Kafka's `setEligibleLeaderReplicasEnabled`).
    pub(crate) fn eligible_leader_replicas(mut self, min_isr: Option<usize>) -> Self {
        self.elr_min_isr = min_isr;
        self
    }

    /// The broker that shut down uncleanly (Kafka's `setUncleanShutdownReplicas`).
    pub(crate) fn unclean_shutdown_replica(mut self, broker: i32) -> Self {
        self.unclean_shutdown_replica = Some(broker);
        self
    }

    /// The PartitionChange record, or `None` when nothing changes.
    pub(crate) fn build(mut self) -> Option<MetadataRecord> {
        self.complete_reassignment_if_needed();
        let p = self.partition;
        let mut leader = p.leader;
        let mut leader_epoch = p.leader_epoch;
        let mut recovery = p.leader_recovery_state;
        self.populate_target_elr();
        let election = self.elect();
        let elected_unclean = election.leader != p.leader && election.unclean;
        if election.leader != p.leader {
            if self.target_elr.contains(&election.leader) {
                // An ELR member leads with the ISR to itself, as Kafka's `tryElection`.
                self.target_isr = vec![election.leader];
                self.target_elr.retain(|&r| r != election.leader);
            }
            leader = election.leader;
            leader_epoch = p.leader_epoch.saturating_add(1);
        } else if !p.replicas.iter().all(|r| self.target_replicas.contains(r)) {
            // A replica leaves: the leader epoch moves on, so that its fetches at the old
            // epoch are refused.
            leader_epoch = p.leader_epoch.saturating_add(1);
        }
        let elr = self.record_elr(elected_unclean);
        let isr = if elected_unclean {
            // An unclean leader may lack committed records: it is the ISR alone, and
            // recovering until it says otherwise (KIP-704).
            recovery = LEADER_RECOVERING;
            vec![election.leader]
        } else if (!self.target_isr.is_empty() || self.elr_min_isr.is_some()) && self.target_isr != p.isr {
            // Without eligible leader replicas an empty ISR is never written: the last
            // member stays, so that the partition knows which replica has everything.
            self.target_isr.clone()
        } else {
            p.isr.clone()
        };
        if !elected_unclean && self.target_leader_recovery_state != p.leader_recovery_state {
            recovery = self.target_leader_recovery_state;
        }
        let last_known_elr = self.last_known_elr(leader);
        let replicas = if self.target_replicas.is_empty() { p.replicas.clone() } else { self.target_replicas.clone() };
        let unchanged = leader == p.leader
            && leader_epoch == p.leader_epoch
            && isr == p.isr
            && elr == p.elr
            && last_known_elr == p.last_known_elr
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
            elr,
            last_known_elr,
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

    /// Kafka's `electAnyLeader`: keep a valid leader; else the first valid replica, in
    /// replica order; else the last known leader (see [`Self::last_known_leader`]);
    /// else, if unclean election is enabled, the first acceptable replica; else none.
    fn elect_any(&self) -> Elected {
        if self.partition.leader != NO_LEADER && self.is_valid_leader(self.partition.leader) {
            return Elected { leader: self.partition.leader, unclean: false };
        }
        if let Some(&r) = self.target_replicas.iter().find(|&&r| self.is_valid_leader(r)) {
            return Elected { leader: r, unclean: false };
        }
        if let Some(r) = self.last_known_leader() {
            return Elected { leader: r, unclean: true };
        }
        if self.election == Election::Unclean {
            if let Some(&r) = self.target_replicas.iter().find(|&&r| (self.is_acceptable_leader)(r)) {
                return Elected { leader: r, unclean: true };
            }
        }
        Elected { leader: NO_LEADER, unclean: false }
    }

    /// Kafka's `isValidNewLeader`: acceptable, and in the target ISR, or in the target
    /// ELR when the target ISR is empty.
    fn is_valid_leader(&self, r: i32) -> bool {
        let eligible = self.target_isr.contains(&r) || (self.target_isr.is_empty() && self.target_elr.contains(&r));
        eligible && (self.is_acceptable_leader)(r)
    }

    /// Kafka's `canElectLastKnownLeader`: with eligible leader replicas on and neither
    /// ISR nor ELR left, the partition's last leader before it went offline, if it is
    /// acceptable (KAFKA-19522: never a fenced one). It may have lost records (its broker
    /// shut down uncleanly, or it would still be in the ELR), so the election is unclean.
    fn last_known_leader(&self) -> Option<i32> {
        self.elr_min_isr?;
        if !self.target_isr.is_empty() || !self.target_elr.is_empty() {
            return None;
        }
        match self.partition.last_known_elr[..] {
            [r] if self.target_replicas.contains(&r) && (self.is_acceptable_leader)(r) => Some(r),
            _ => None,
        }
    }

    /// Kafka's `maybePopulateTargetElr`: an ISR at the effective minimum has no ELR;
    /// below it, the ELR is the current ELR and ISR without the target ISR and without
    /// a broker that shut down uncleanly. In ascending order, as Kafka's (a `HashSet` of
    /// small integers), so that the same members are the same list.
    ///
    /// Unlike Kafka's, only replicas of the target replica set stay: a replica that a
    /// completed reassignment removed from the ISR would otherwise join the ELR, where it
    /// can never lead (elections pick from the replicas) but keeps the ELR non-empty, so
    /// the partition, once offline, can never elect its last known leader (found by the
    /// partition replication simulation, seed 1000497).
    fn populate_target_elr(&mut self) {
        let Some(min_isr) = self.elr_min_isr else {
            return;
        };
        if self.target_isr.len() >= min_isr {
            self.target_elr.clear();
            return;
        }
        let candidates: BTreeSet<i32> = self.target_elr.iter().chain(&self.partition.isr).copied().collect();
        self.target_elr = candidates
            .into_iter()
            .filter(|r| {
                self.target_replicas.contains(r)
                    && !self.target_isr.contains(r)
                    && Some(*r) != self.unclean_shutdown_replica
            })
            .collect();
    }

    /// Kafka's `maybeUpdateRecordElr`: the target ELR, but none after an unclean
    /// election (its leader is the only replica known to have the log it keeps) or with
    /// eligible leader replicas off.
    fn record_elr(&self, unclean: bool) -> Vec<i32> {
        if unclean || self.elr_min_isr.is_none() {
            return Vec::new();
        }
        self.target_elr.clone()
    }

    /// Kafka's `maybeUpdateLastKnownLeader` (in its "balanced" recovery, the only one its
    /// controller uses, the last known ELR holds the last leader alone): set to the
    /// leader when the partition loses it and holds none yet, cleared once it leads
    /// again. Unchanged with eligible leader replicas off.
    ///
    /// Unlike Kafka's, it only ever holds a replica of the target replica set: a cancelled
    /// reassignment can drop the leader it was adding, which must not become the last
    /// known leader, elected later though it holds no replica (found by the partition
    /// replication simulation, seed 1012669).
    fn last_known_elr(&self, leader: i32) -> Vec<i32> {
        let p = self.partition;
        if self.elr_min_isr.is_none() {
            return p.last_known_elr.clone();
        }
        let known = if leader == NO_LEADER && p.leader != NO_LEADER && p.last_known_elr.is_empty() {
            vec![p.leader]
        } else if leader != NO_LEADER && !p.last_known_elr.is_empty() {
            Vec::new()
        } else {
            p.last_known_elr.clone()
        };
        let replicas = if self.target_replicas.is_empty() { &p.replicas } else { &self.target_replicas };
        known.into_iter().filter(|r| replicas.contains(r)).collect()
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
            last_known_elr: Vec::new(),
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

#[cfg(test)]
mod elr_tests {
    use super::*;
    use crate::image::LEADER_RECOVERED;

    /// A partition on `replicas` at leader epoch 4, partition epoch 7.
    fn partition(replicas: &[i32], isr: &[i32], elr: &[i32], leader: i32, last_known_elr: &[i32]) -> PartitionImage {
        PartitionImage {
            index: 0,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            leader_epoch: 4,
            partition_epoch: 7,
            elr: elr.to_vec(),
            last_known_elr: last_known_elr.to_vec(),
            leader_recovery_state: LEADER_RECOVERED,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    /// (leader, ISR, ELR, last known ELR, leader recovery state).
    fn fields(r: Option<MetadataRecord>) -> (i32, Vec<i32>, Vec<i32>, Vec<i32>, i8) {
        match r {
            Some(MetadataRecord::PartitionChange {
                leader, isr, elr, last_known_elr, leader_recovery_state, ..
            }) => (leader, isr, elr, last_known_elr, leader_recovery_state),
            other => panic!("not a PartitionChange: {other:?}"),
        }
    }

    fn builder<'a>(
        p: &'a PartitionImage,
        acceptable: &'a dyn Fn(i32) -> bool,
        min_isr: usize,
    ) -> PartitionChangeBuilder<'a> {
        PartitionChangeBuilder::new(Uuid([1; 16]), p, acceptable).eligible_leader_replicas(Some(min_isr))
    }

    #[test]
    fn replicas_leaving_an_isr_below_min_isr_join_the_elr() {
        let p = partition(&[1, 2, 3], &[1, 2, 3], &[], 1, &[]);
        let alive = |_: i32| true;
        let at_min = builder(&p, &alive, 2).target_isr(vec![1, 2]).build();
        assert_eq!(fields(at_min), (1, vec![1, 2], vec![], vec![], LEADER_RECOVERED), "at min ISR: no ELR");
        let below = builder(&p, &alive, 3).target_isr(vec![1]).build();
        assert_eq!(fields(below), (1, vec![1], vec![2, 3], vec![], LEADER_RECOVERED));
    }

    #[test]
    fn a_replica_a_reassignment_removes_joins_no_elr() {
        // Reassigning [1, 3] to [3, 2]: 2 is adding, 1 removing. Once 2 is in the ISR the
        // reassignment completes; the ISR left, [3, 2], is below the minimum of 3, and 1
        // left the ISR, but it is no replica any more, so it is no ELR member.
        let mut p = partition(&[3, 2, 1], &[1, 3], &[], 1, &[]);
        p.adding_replicas = vec![2];
        p.removing_replicas = vec![1];
        let alive = |_: i32| true;
        let done = builder(&p, &alive, 3).target_isr(vec![1, 3, 2]).build();
        assert_eq!(fields(done), (3, vec![3, 2], vec![], vec![], LEADER_RECOVERED));
        // An ELR member that a reassignment removes leaves the ELR with it.
        let mut p = partition(&[3, 2, 1, 4], &[3, 2], &[1], 3, &[]);
        p.adding_replicas = vec![4];
        p.removing_replicas = vec![1];
        let done = builder(&p, &alive, 4).target_isr(vec![3, 2, 4]).build();
        assert_eq!(fields(done), (3, vec![3, 2, 4], vec![], vec![], LEADER_RECOVERED));
    }

    #[test]
    fn a_leader_no_longer_a_replica_is_never_the_last_known_leader() {
        // Leader 1 was being added; the reassignment is cancelled while 2 is fenced: the
        // partition goes offline, and 1, no replica any more, is not its last known leader.
        let mut p = partition(&[2, 3, 1], &[1], &[], 1, &[]);
        p.adding_replicas = vec![1];
        let only_1 = |r: i32| r == 1;
        let cancelled =
            builder(&p, &only_1, 2).target_replicas(vec![2, 3]).target_isr(vec![2]).target_adding(Vec::new()).build();
        let (leader, _, _, last_known, _) = fields(cancelled);
        assert_eq!((leader, last_known), (NO_LEADER, vec![]));
        // One recorded before is not elected (Kafka would, without a replica), and goes.
        let p = partition(&[2, 3], &[], &[], NO_LEADER, &[1]);
        let (leader, isr, _, last_known, _) = fields(builder(&p, &only_1, 2).build());
        assert_eq!((leader, isr, last_known), (NO_LEADER, vec![], vec![]));
    }

    #[test]
    fn an_isr_back_at_min_isr_clears_the_elr() {
        let p = partition(&[1, 2, 3], &[1], &[2, 3], 1, &[]);
        let alive = |_: i32| true;
        let still_below = builder(&p, &alive, 3).target_isr(vec![1, 2]).build();
        assert_eq!(fields(still_below), (1, vec![1, 2], vec![3], vec![], LEADER_RECOVERED), "2 is in the ISR");
        let back = builder(&p, &alive, 2).target_isr(vec![1, 2]).build();
        assert_eq!(fields(back), (1, vec![1, 2], vec![], vec![], LEADER_RECOVERED));
    }

    #[test]
    fn the_last_isr_member_leaves_into_the_elr_and_is_the_last_known_leader() {
        let p = partition(&[1, 2], &[1], &[2], 1, &[]);
        let fenced = |r: i32| r != 1 && r != 2;
        let r = builder(&p, &fenced, 2).target_isr(vec![]).build();
        assert_eq!(fields(r), (NO_LEADER, vec![], vec![1, 2], vec![1], LEADER_RECOVERED));
    }

    #[test]
    fn with_the_isr_empty_an_active_elr_member_leads_and_is_the_isr_alone() {
        let p = partition(&[1, 2, 3], &[], &[1, 2], NO_LEADER, &[1]);
        let only_2 = |r: i32| r == 2;
        let r = builder(&p, &only_2, 2).build();
        assert_eq!(fields(r), (2, vec![2], vec![1], vec![], LEADER_RECOVERED), "a clean election");
        let none = |_: i32| false;
        assert!(builder(&p, &none, 2).build().is_none(), "no ELR member active: offline stays offline");
    }

    #[test]
    fn the_elr_is_not_looked_at_while_the_isr_has_members() {
        // Broker 3 is in the ISR but may not lead (in controlled shutdown, say).
        let p = partition(&[1, 2, 3], &[3], &[1], 3, &[]);
        let not_3 = |r: i32| r != 3;
        let r = builder(&p, &not_3, 2).build();
        assert_eq!(fields(r), (NO_LEADER, vec![3], vec![1], vec![3], LEADER_RECOVERED));
    }

    #[test]
    fn a_broker_back_from_an_unclean_shutdown_joins_no_elr_and_leaves_its_own() {
        let alive = |r: i32| r != 1;
        let p = partition(&[1, 2, 3], &[1, 2], &[], 2, &[]);
        let r = builder(&p, &alive, 3).target_isr(vec![2]).unclean_shutdown_replica(1).build();
        assert_eq!(fields(r), (2, vec![2], vec![], vec![], LEADER_RECOVERED));
        let p = partition(&[1, 2, 3], &[], &[1, 2], NO_LEADER, &[2]);
        let none = |_: i32| false;
        let r = builder(&p, &none, 3).unclean_shutdown_replica(1).build();
        assert_eq!(fields(r), (NO_LEADER, vec![], vec![2], vec![2], LEADER_RECOVERED));
    }

    #[test]
    fn the_last_known_leader_leads_uncleanly_once_it_is_active_again() {
        let p = partition(&[1, 2, 3], &[], &[], NO_LEADER, &[3]);
        let fenced_3 = |r: i32| r != 3;
        assert!(builder(&p, &fenced_3, 2).build().is_none(), "never a fenced last known leader (KAFKA-19522)");
        let alive = |_: i32| true;
        let r = builder(&p, &alive, 2).build();
        assert_eq!(fields(r), (3, vec![3], vec![], vec![], LEADER_RECOVERING), "before any other replica");
    }

    #[test]
    fn an_unclean_election_clears_the_elr() {
        let p = partition(&[1, 2, 3], &[], &[1], NO_LEADER, &[1]);
        let not_1 = |r: i32| r != 1;
        assert!(builder(&p, &not_1, 2).build().is_none(), "clean only: waits for 1");
        let r = builder(&p, &not_1, 2).unclean_election(true).build();
        assert_eq!(fields(r), (2, vec![2], vec![], vec![], LEADER_RECOVERING));
    }

    #[test]
    fn with_elr_off_an_elr_left_behind_is_cleared() {
        let p = partition(&[1, 2], &[1], &[2], 1, &[]);
        let alive = |_: i32| true;
        let r = PartitionChangeBuilder::new(Uuid([1; 16]), &p, &alive).build();
        assert_eq!(fields(r), (1, vec![1], vec![], vec![], LEADER_RECOVERED));
    }
}
