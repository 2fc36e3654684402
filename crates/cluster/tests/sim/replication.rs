//! The partition-replication model the replication simulations share
//! (`partition_replication_simulation.rs`, `cluster_simulation.rs`): a broker's model log
//! of one partition ([`Disk`]) and the steps of follower fetching between a leader's and
//! a follower's [`ReplicaState`], as the server's fetcher and Fetch handler take them.
//!
//! The simulations keep their own worlds (who hosts what, the network, the clock) and
//! call these with the replica state machine and the log of one partition on one broker.

use osprey_cluster::replica::fetch::{self, EpochEnd, FetchDecision, FollowerFetch};
use osprey_cluster::replica::{AckLevel, Assignment, LocalLog, ReplicaConfig, ReplicaState};
use osprey_protocol::ErrorCode;
use osprey_storage::epoch::LeaderEpochCache;

/// For step-by-step tests: broker `id`'s replica of a partition of three replicas (1, 2,
/// 3), one in-sync replica enough, fsync before every acknowledgement.
pub fn three_replica_config(id: i32) -> ReplicaConfig {
    ReplicaConfig { local_id: id, replica_lag_time_max_ms: 10_000, min_insync_replicas: 1, fsync_before_ack: true }
}

/// For step-by-step tests: the assignment of a partition of replicas 1, 2 and 3 led by
/// `leader` at `epoch` (the partition epoch too) with `isr`.
pub fn three_replica_assignment(leader: i32, epoch: i32, isr: &[i32]) -> Assignment {
    Assignment { leader, leader_epoch: epoch, partition_epoch: epoch, replicas: vec![1, 2, 3], isr: isr.to_vec() }
}

/// One record of a model log; its offset is its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub leader_epoch: i32,
    pub write_id: u64,
}

/// One partition's log on one broker: what survives a crash is the durable prefix, the
/// epoch cache (written through, cut to the log on recovery, as the storage crate's
/// loader does) and the checkpointed high watermark.
#[derive(Debug, Clone, Default)]
pub struct Disk {
    pub entries: Vec<Entry>,
    pub durable: i64,
    pub epochs: LeaderEpochCache,
    pub checkpointed_high_watermark: i64,
}

impl Disk {
    pub fn end(&self) -> i64 {
        self.entries.len() as i64
    }

    pub fn end_offset_for(&self, epoch: i32) -> (i32, i64) {
        self.epochs.end_offset_for(epoch, self.end())
    }

    pub fn last_epoch(&self) -> i32 {
        self.epochs.latest_epoch().unwrap_or(-1)
    }

    pub fn append(&mut self, entry: Entry) {
        self.epochs.assign(entry.leader_epoch, self.end());
        self.entries.push(entry);
    }

    pub fn truncate_to(&mut self, offset: i64) {
        let offset = offset.clamp(0, self.end());
        self.entries.truncate(offset as usize);
        self.durable = self.durable.min(offset);
        self.epochs.truncate_from_end(offset);
        self.checkpointed_high_watermark = self.checkpointed_high_watermark.min(offset);
    }

    /// What a crash leaves: the durable prefix.
    pub fn crash(&mut self) {
        self.truncate_to(self.durable);
    }

    pub fn local_log(&self) -> LocalLog {
        LocalLog { log_end_offset: self.end(), durable_end_offset: self.durable, first_unstable_offset: None }
    }

    pub fn at(&self, offset: i64) -> Option<Entry> {
        usize::try_from(offset).ok().and_then(|i| self.entries.get(i)).copied()
    }

    /// The first offset below `below` where this log and `other` differ.
    pub fn first_difference(&self, other: &Disk, below: i64) -> Option<i64> {
        let below = usize::try_from(below).unwrap_or(0);
        let (mine, theirs) =
            (&self.entries[..below.min(self.entries.len())], &other.entries[..below.min(other.entries.len())]);
        // The slices compared whole first: the simulations ask at every step.
        if mine == theirs {
            return None;
        }
        let same = mine.iter().zip(theirs).take_while(|(a, b)| a == b).count();
        Some(same as i64)
    }

    /// Everything up to `to` becomes durable, and the high watermark is checkpointed
    /// with it (never past what is durable). The replica learns of it; its outputs are
    /// the caller's to carry out.
    pub fn make_durable(&mut self, to: i64, replica: Option<&mut ReplicaState>, now_ms: i64) {
        self.durable = to.clamp(self.durable, self.end());
        if let Some(replica) = replica {
            replica.local_log_changed(self.local_log(), now_ms);
            self.checkpointed_high_watermark = replica.high_watermark().min(self.durable);
        }
    }
}

/// A leader's answer to a follower's fetch.
#[derive(Debug, Clone)]
pub enum FetchAnswer {
    Failed { error: ErrorCode, high_watermark: i64 },
    Diverging { diverging: EpochEnd },
    Records { from: i64, entries: Vec<Entry>, high_watermark: i64 },
}

/// What applying a fetch answer did to the follower's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchApplied {
    Nothing,
    /// Truncated to the leader's high watermark (OFFSET_OUT_OF_RANGE).
    TruncatedToHighWatermark(i64),
    /// Truncated where the leader said the logs diverge.
    TruncatedDiverging(i64),
    Appended,
}

/// Opens the partition's replica state machine from the log and its checkpointed high
/// watermark, or hands the existing one the assignment (the server's
/// `Partition::apply_assignment`). A broker that becomes leader records where its epoch
/// starts (`assign_epoch_start`); the answer is that epoch.
pub fn apply_assignment(
    slot: &mut Option<ReplicaState>,
    disk: &mut Disk,
    config: ReplicaConfig,
    assignment: Assignment,
    now_ms: i64,
) -> Option<i32> {
    let before = slot.as_ref().and_then(|r| r.is_leader().then(|| r.leader_epoch()));
    let replica = match slot {
        Some(replica) => {
            replica.apply_assignment(assignment, now_ms);
            replica
        }
        None => slot.insert(ReplicaState::new(
            config,
            assignment,
            disk.local_log(),
            disk.checkpointed_high_watermark,
            now_ms,
        )),
    };
    let after = replica.is_leader().then(|| replica.leader_epoch());
    let epoch = after.filter(|_| after != before)?;
    disk.epochs.assign(epoch, disk.end());
    Some(epoch)
}

/// A client's acks=all produce on the leader: the writes appended in its epoch, and the
/// request waiting for them. The answer is the first offset.
pub fn append_writes(
    replica: &mut ReplicaState,
    disk: &mut Disk,
    write_ids: &[u64],
    request_id: u64,
    now_ms: i64,
) -> i64 {
    let first_offset = disk.end();
    let leader_epoch = replica.leader_epoch();
    for &write_id in write_ids {
        disk.append(Entry { leader_epoch, write_id });
    }
    let local = disk.local_log();
    replica.local_log_changed(local, now_ms);
    replica.await_ack(request_id, local.log_end_offset, AckLevel::All, now_ms);
    first_offset
}

/// The follower's fetch: its log is made durable first, so the fetch offset is also its
/// durable end.
pub fn follower_fetch(
    replica: &mut ReplicaState,
    disk: &mut Disk,
    replica_id: i32,
    current_leader_epoch: i32,
    now_ms: i64,
) -> FollowerFetch {
    disk.durable = disk.end();
    replica.local_log_changed(disk.local_log(), now_ms);
    FollowerFetch {
        replica_id,
        current_leader_epoch,
        fetch_offset: disk.end(),
        durable_end_offset: disk.end(),
        last_fetched_epoch: disk.last_epoch(),
    }
}

/// The leader's Fetch handler for a follower: the checks and the position through the
/// replica state machine, then up to `max_entries()` records from the fetch offset
/// (asked only when records are read).
pub fn answer_fetch(
    replica: &mut ReplicaState,
    disk: &Disk,
    fetch: &FollowerFetch,
    max_entries: impl FnOnce() -> usize,
    now_ms: i64,
) -> FetchAnswer {
    let decision = replica.follower_fetch(fetch, 0, |e| disk.end_offset_for(e), now_ms);
    let hw = replica.high_watermark();
    match decision {
        Err(error) => {
            // The server's answer carries the high watermark once past the epoch check.
            let high_watermark = if error == ErrorCode::OFFSET_OUT_OF_RANGE { hw } else { -1 };
            FetchAnswer::Failed { error, high_watermark }
        }
        Ok(FetchDecision::Diverging(diverging)) => FetchAnswer::Diverging { diverging },
        Ok(FetchDecision::Read) => {
            let from = fetch.fetch_offset;
            let entries = disk.entries.iter().skip(from.max(0) as usize).take(max_entries()).copied().collect();
            FetchAnswer::Records { from, entries, high_watermark: hw }
        }
    }
}

/// The follower applies the leader's answer (the server's fetcher `apply`): truncates to
/// the leader's high watermark on OFFSET_OUT_OF_RANGE, where the logs diverge, or
/// appends the records if its log still ends where the fetch started.
pub fn apply_fetch_answer(
    replica: &mut ReplicaState,
    disk: &mut Disk,
    answer: FetchAnswer,
    now_ms: i64,
) -> FetchApplied {
    match answer {
        FetchAnswer::Failed { error: ErrorCode::OFFSET_OUT_OF_RANGE, high_watermark }
            if high_watermark >= 0 && disk.end() > high_watermark =>
        {
            truncate(replica, disk, high_watermark);
            FetchApplied::TruncatedToHighWatermark(high_watermark)
        }
        FetchAnswer::Failed { .. } => FetchApplied::Nothing,
        FetchAnswer::Diverging { diverging } => {
            let hw = replica.high_watermark();
            let to = fetch::truncation_offset(diverging, hw, disk.end(), |e| disk.end_offset_for(e));
            truncate(replica, disk, to);
            FetchApplied::TruncatedDiverging(to)
        }
        // The log changed since the fetch was sent (a truncation): the next fetch asks
        // again.
        FetchAnswer::Records { from, .. } if from != disk.end() => FetchApplied::Nothing,
        FetchAnswer::Records { entries, high_watermark, .. } => {
            for entry in entries {
                disk.append(entry);
            }
            replica.local_log_changed(disk.local_log(), now_ms);
            replica.leader_high_watermark(high_watermark);
            FetchApplied::Appended
        }
    }
}

/// Truncates the log and tells the replica; the checkpoint never passes the log.
pub fn truncate(replica: &mut ReplicaState, disk: &mut Disk, offset: i64) {
    disk.truncate_to(offset);
    replica.local_log_truncated(disk.local_log());
    disk.checkpointed_high_watermark = disk.checkpointed_high_watermark.min(replica.high_watermark());
}
