//! One partition's replication state on this broker, as Kafka's `kafka.cluster.Partition`
//! keeps it: the leader epoch and partition epoch, this broker's role, the replicas and
//! the ISR, each follower's position and when it last caught up, the high watermark and
//! the last stable offset. It is the only owner of those facts; the server asks it.
//!
//! No I/O, no clock, no tokio, like the coordinators: every input takes `now_ms`, and
//! what the caller must do comes out of [`ReplicaState::poll_output`]. The inputs are a
//! change of the local log (appended, made durable), a follower's fetch position, a
//! metadata change (leader, epochs, replicas, ISR), time ([`ReplicaState::tick`]), and
//! produce requests waiting for their acknowledgement. The outputs are a new high
//! watermark, an ISR change to send to the controller (AlterPartition), and requests to
//! complete.
//!
//! The high watermark follows Kafka's `maybeIncrementLeaderHW`: the smallest end offset
//! over the maximal ISR (the committed ISR plus members an AlterPartition in flight adds,
//! KIP-497) and over followers caught up enough to join it, and it does not move while
//! the ISR is below the effective `min.insync.replicas` (KAFKA-15583). Under Osprey's
//! default flush policy (`fsync_before_ack`) each replica counts only what it has made
//! durable; with `flush.messages` / `flush.ms` relaxed it counts its log end offset, as
//! Kafka does. A single node is the case ISR = {self}.

use std::collections::{BTreeMap, VecDeque};

use osprey_protocol::ErrorCode;

pub mod fetch;

use fetch::{FetchDecision, FollowerFetch};

/// The partition as the controller's metadata describes it (Kafka's
/// `PartitionRegistration`, as a broker applies it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The leader's broker id; -1 when the partition has none.
    pub leader: i32,
    /// Bumped by the controller at every leader change.
    pub leader_epoch: i32,
    /// Bumped by the controller at every change of the partition (ISR, replicas).
    pub partition_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

impl From<&crate::image::PartitionImage> for Assignment {
    fn from(p: &crate::image::PartitionImage) -> Assignment {
        Assignment {
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
        }
    }
}

/// The settings the state machine needs, from the broker and topic configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// This broker's id (`node.id`).
    pub local_id: i32,
    /// `replica.lag.time.max.ms`: an ISR follower not caught up for this long is dropped.
    pub replica_lag_time_max_ms: i64,
    /// `min.insync.replicas`, as set; the effective value is capped at the replica count.
    pub min_insync_replicas: usize,
    /// Osprey's default flush policy: a replica's data counts toward the high watermark
    /// (and acknowledgements) only once durable. False when `flush.messages` /
    /// `flush.ms` relax it, as in Kafka.
    pub fsync_before_ack: bool,
}

/// The local log's offsets, as the log reports them at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalLog {
    pub log_end_offset: i64,
    /// Offsets below this are durable (fsynced).
    pub durable_end_offset: i64,
    /// The first offset of the oldest transaction still open in the log, if any.
    pub first_unstable_offset: Option<i64>,
}

/// This broker's part in the partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    /// Following `leader` (-1: the partition has no leader now).
    Follower {
        leader: i32,
    },
}

/// What a produce request waits for before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckLevel {
    /// acks=1: the leader has the batch (durable, under `fsync_before_ack`).
    Leader,
    /// acks=all: the high watermark has passed the batch.
    All,
}

/// Why an append is refused before anything is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendRefused {
    NotLeader,
    /// acks=all with the ISR below the effective `min.insync.replicas`.
    NotEnoughReplicas {
        isr: usize,
        min_isr: usize,
    },
}

impl AppendRefused {
    pub fn code(&self) -> ErrorCode {
        match self {
            AppendRefused::NotLeader => ErrorCode::NOT_LEADER_OR_FOLLOWER,
            AppendRefused::NotEnoughReplicas { .. } => ErrorCode::NOT_ENOUGH_REPLICAS,
        }
    }
}

impl std::fmt::Display for AppendRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppendRefused::NotLeader => write!(f, "This broker is not the leader of the partition"),
            // Kafka's own wording, which operators search for.
            AppendRefused::NotEnoughReplicas { isr, min_isr } => write!(
                f,
                "The size of the current ISR {isr} is insufficient to satisfy the min.isr requirement of {min_isr}"
            ),
        }
    }
}

/// An ISR change for the controller (AlterPartition's contents for one partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChange {
    pub leader_epoch: i32,
    /// The partition epoch the change is based on: the controller refuses it if the
    /// partition has changed since (INVALID_UPDATE_VERSION).
    pub partition_epoch: i32,
    pub new_isr: Vec<i32>,
}

/// What the caller must do, drained with [`ReplicaState::poll_output`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// The high watermark moved to this offset: publish it (log, long-polling fetches).
    HighWatermark(i64),
    /// Send this ISR change to the controller (AlterPartition).
    AlterPartition(IsrChange),
    /// Answer this waiting request: acknowledged, or the error to return.
    Completed { request_id: u64, result: Result<(), ErrorCode> },
}

/// The offsets a reader needs, taken together so that they agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub leader_epoch: i32,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
}

/// A follower's position, as the leader learns it from its fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Follower {
    /// The follower's log end offset (its fetch offset); -1 until it fetches in this
    /// leader epoch.
    log_end_offset: i64,
    /// What it has made durable; -1 until it reports.
    durable_end_offset: i64,
    /// The last time it was caught up (Kafka's `lastCaughtUpTimeMs`).
    last_caught_up_ms: i64,
    /// The leader's log end offset and the time of its previous fetch: reaching that
    /// offset now means it was caught up then.
    last_fetch_leader_end_offset: i64,
    last_fetch_ms: i64,
}

impl Follower {
    fn reset(now_ms: i64, in_isr: bool) -> Follower {
        Follower {
            log_end_offset: -1,
            durable_end_offset: -1,
            // An ISR member keeps a full lag window to show it is still caught up.
            last_caught_up_ms: if in_isr { now_ms } else { i64::MIN },
            last_fetch_leader_end_offset: -1,
            last_fetch_ms: i64::MIN,
        }
    }
}

/// A request waiting for its acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Waiting {
    /// Answered once the acknowledged end passes this (the batch's last offset + 1).
    required_offset: i64,
    level: AckLevel,
}

/// An AlterPartition sent and not yet answered (Kafka's `PendingPartitionChange`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct PendingIsr {
    change: IsrChange,
    /// The larger of the committed and the proposed ISR: the high watermark waits for
    /// all of it until the controller decides (KIP-497).
    maximal_isr: Vec<i32>,
}

/// One partition's replication state on this broker. See the module documentation.
#[derive(Debug)]
pub struct ReplicaState {
    config: ReplicaConfig,
    role: Role,
    leader_epoch: i32,
    partition_epoch: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    pending_isr: Option<PendingIsr>,
    followers: BTreeMap<i32, Follower>,
    local: LocalLog,
    /// The local log end offset when this broker became leader in this epoch: a
    /// follower joins the ISR only once it has everything written before that.
    leader_epoch_start_offset: i64,
    /// Replicas that may not join the ISR now (Kafka's `isReplicaIsrEligible`): their
    /// brokers are fenced, shutting down or unregistered. Sorted.
    ineligible: Vec<i32>,
    high_watermark: i64,
    waiting: BTreeMap<u64, Waiting>,
    outputs: VecDeque<Output>,
}

impl ReplicaState {
    /// The state of a partition as its log was opened: `high_watermark` is the log's
    /// checkpointed one (kept within the log).
    pub fn new(
        config: ReplicaConfig,
        assignment: Assignment,
        local: LocalLog,
        high_watermark: i64,
        now_ms: i64,
    ) -> ReplicaState {
        let mut state = ReplicaState {
            config,
            role: Role::Follower { leader: -1 },
            leader_epoch: -1,
            partition_epoch: -1,
            replicas: Vec::new(),
            isr: Vec::new(),
            pending_isr: None,
            followers: BTreeMap::new(),
            local,
            leader_epoch_start_offset: local.log_end_offset,
            ineligible: Vec::new(),
            high_watermark: high_watermark.clamp(0, local.log_end_offset.max(0)),
            waiting: BTreeMap::new(),
            outputs: VecDeque::new(),
        };
        state.apply_assignment(assignment, now_ms);
        state
    }

    // ----- what readers ask --------------------------------------------------------

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn is_leader(&self) -> bool {
        self.role == Role::Leader
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    pub fn replicas(&self) -> &[i32] {
        &self.replicas
    }

    /// The ISR the controller committed.
    pub fn isr(&self) -> &[i32] {
        &self.isr
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// min(first unstable offset, high watermark): read_committed consumers stop here.
    pub fn last_stable_offset(&self) -> i64 {
        self.local.first_unstable_offset.map_or(self.high_watermark, |first| first.min(self.high_watermark))
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            leader_epoch: self.leader_epoch,
            high_watermark: self.high_watermark,
            last_stable_offset: self.last_stable_offset(),
        }
    }

    pub fn config(&self) -> ReplicaConfig {
        self.config
    }

    pub fn fsync_before_ack(&self) -> bool {
        self.config.fsync_before_ack
    }

    /// min(`min.insync.replicas`, replica count), as Kafka since 3.7 (KAFKA-15583): a
    /// one-replica topic with `min.insync.replicas=2` still takes acks=all.
    pub fn effective_min_insync_replicas(&self) -> usize {
        self.config.min_insync_replicas.min(self.replicas.len()).max(1)
    }

    /// Whether an append with `level` may be written now (Kafka's checks in
    /// `appendRecordsToLeader`): only on the leader, and acks=all only with the ISR at
    /// least the effective `min.insync.replicas`.
    pub fn check_append(&self, level: AckLevel) -> Result<(), AppendRefused> {
        if !self.is_leader() {
            return Err(AppendRefused::NotLeader);
        }
        let min_isr = self.effective_min_insync_replicas();
        if level == AckLevel::All && self.isr.len() < min_isr {
            return Err(AppendRefused::NotEnoughReplicas { isr: self.isr.len(), min_isr });
        }
        Ok(())
    }

    /// The earliest time [`tick`](Self::tick) may change something: when an ISR
    /// follower's lag window ends.
    pub fn next_deadline(&self) -> Option<i64> {
        if !self.is_leader() || self.pending_isr.is_some() {
            return None;
        }
        self.isr
            .iter()
            .filter_map(|id| self.followers.get(id))
            .map(|f| f.last_caught_up_ms.saturating_add(self.config.replica_lag_time_max_ms).saturating_add(1))
            .min()
    }

    /// The next thing the caller must do, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    // ----- inputs ------------------------------------------------------------------

    /// Applies changed settings (a topic config change).
    pub fn set_config(&mut self, config: ReplicaConfig, now_ms: i64) {
        self.config = ReplicaConfig { local_id: self.config.local_id, ..config };
        self.update(now_ms);
    }

    /// The local log changed: appended, made durable, a transaction opened or ended.
    /// Offsets only move forward here (reports may arrive out of order); the first
    /// unstable offset is taken as reported, so the caller reports it under the same
    /// lock as it reads it.
    pub fn local_log_changed(&mut self, local: LocalLog, now_ms: i64) {
        self.local = LocalLog {
            log_end_offset: self.local.log_end_offset.max(local.log_end_offset),
            durable_end_offset: self.local.durable_end_offset.max(local.durable_end_offset),
            first_unstable_offset: local.first_unstable_offset,
        };
        self.update(now_ms);
    }

    /// As a follower: the local log was truncated (it diverged from the new leader's), so
    /// unlike [`local_log_changed`](Self::local_log_changed) its offsets go back. The
    /// high watermark is cut back with it if it passed the new end: only after an
    /// unclean election does a follower lose offsets below its high watermark. A leader
    /// never truncates; the call is ignored there.
    pub fn local_log_truncated(&mut self, local: LocalLog) {
        if self.is_leader() {
            return;
        }
        self.local = local;
        self.high_watermark = self.high_watermark.min(local.log_end_offset.max(0));
    }

    /// A follower's Fetch, checked in Kafka's order (`Partition.fetchRecords`): this
    /// broker leads, the follower's leader epoch is this one (FENCED_LEADER_EPOCH if
    /// older, UNKNOWN_LEADER_EPOCH if newer), the replica is one of the partition's, and
    /// its log does not diverge from this one ([`fetch::diverging_epoch`] over this log's
    /// `end_offset_for`). Only then is its position taken ([`follower_fetched`]): a
    /// diverging follower's fetch offset names offsets of another leader's log, and
    /// counting it would move the high watermark over records it does not have.
    ///
    /// [`follower_fetched`]: Self::follower_fetched
    pub fn follower_fetch(
        &mut self,
        fetch: &FollowerFetch,
        log_start_offset: i64,
        end_offset_for: impl FnOnce(i32) -> (i32, i64),
        now_ms: i64,
    ) -> Result<FetchDecision, ErrorCode> {
        if !self.is_leader() {
            return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        }
        let epoch = fetch.current_leader_epoch;
        if epoch >= 0 && epoch < self.leader_epoch {
            return Err(ErrorCode::FENCED_LEADER_EPOCH);
        }
        if epoch > self.leader_epoch {
            return Err(ErrorCode::UNKNOWN_LEADER_EPOCH);
        }
        if !self.followers.contains_key(&fetch.replica_id) {
            return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        }
        let diverging =
            fetch::diverging_epoch(fetch.last_fetched_epoch, fetch.fetch_offset, log_start_offset, end_offset_for)?;
        if let Some(diverging) = diverging {
            return Ok(FetchDecision::Diverging(diverging));
        }
        self.follower_fetched(fetch.replica_id, fetch.fetch_offset, fetch.durable_end_offset, now_ms)?;
        Ok(FetchDecision::Read)
    }

    /// A follower fetched from `fetch_offset` (its log end offset), having made
    /// everything below `durable_end_offset` durable (Kafka's `updateFollowerFetchState`).
    /// Fails with NOT_LEADER_OR_FOLLOWER if this broker does not lead, or the replica is
    /// not one of the partition's.
    pub fn follower_fetched(
        &mut self,
        replica_id: i32,
        fetch_offset: i64,
        durable_end_offset: i64,
        now_ms: i64,
    ) -> Result<(), ErrorCode> {
        if !self.is_leader() {
            return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        }
        let leader_end = self.local.log_end_offset;
        let Some(follower) = self.followers.get_mut(&replica_id) else {
            return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        };
        if fetch_offset >= leader_end {
            follower.last_caught_up_ms = follower.last_caught_up_ms.max(now_ms);
        } else if fetch_offset >= follower.last_fetch_leader_end_offset {
            follower.last_caught_up_ms = follower.last_caught_up_ms.max(follower.last_fetch_ms);
        }
        follower.log_end_offset = fetch_offset;
        follower.durable_end_offset = durable_end_offset.min(fetch_offset);
        follower.last_fetch_leader_end_offset = leader_end;
        follower.last_fetch_ms = now_ms;
        self.maybe_expand_isr(replica_id);
        self.update(now_ms);
        Ok(())
    }

    /// The controller's metadata for the partition changed (a leader change, an ISR
    /// change, a reassignment), or answered an AlterPartition. Older news (a smaller
    /// leader epoch, or a smaller partition epoch in the same leader epoch) is ignored,
    /// and so is the state this machine already has (the same epochs): the metadata
    /// record of an ISR change the AlterPartition answer brought first must not drop a
    /// proposal made since, or the high watermark would stop waiting for a member the
    /// controller is about to add (KIP-497).
    pub fn apply_assignment(&mut self, assignment: Assignment, now_ms: i64) {
        let newer_leader_epoch = assignment.leader_epoch > self.leader_epoch;
        if !newer_leader_epoch
            && (assignment.leader_epoch < self.leader_epoch || assignment.partition_epoch <= self.partition_epoch)
        {
            return;
        }
        let was_leader = self.is_leader();
        self.leader_epoch = assignment.leader_epoch;
        self.partition_epoch = assignment.partition_epoch;
        self.replicas = assignment.replicas;
        self.isr = assignment.isr;
        self.pending_isr = None;
        if assignment.leader == self.config.local_id {
            self.role = Role::Leader;
            if !was_leader || newer_leader_epoch {
                // Followers' positions from another epoch mean nothing in this one.
                self.leader_epoch_start_offset = self.local.log_end_offset;
                self.followers.clear();
            }
            let local_id = self.config.local_id;
            let (replicas, isr) = (&self.replicas, &self.isr);
            self.followers.retain(|id, _| *id != local_id && replicas.contains(id));
            for &id in replicas.iter().filter(|id| **id != local_id) {
                self.followers.entry(id).or_insert_with(|| Follower::reset(now_ms, isr.contains(&id)));
            }
        } else {
            self.role = Role::Follower { leader: assignment.leader };
            self.followers.clear();
            // Kafka's DelayedProduce answers NOT_LEADER_OR_FOLLOWER once leadership is gone.
            let waiting = std::mem::take(&mut self.waiting);
            for request_id in waiting.into_keys() {
                self.complete(request_id, Err(ErrorCode::NOT_LEADER_OR_FOLLOWER));
            }
        }
        self.update(now_ms);
    }

    /// The controller accepted an ISR change and answered with the partition's state
    /// (Kafka's `handleAlterPartitionUpdate`): applied as the metadata would be, but only
    /// at this machine's leader epoch. An answer at another leader epoch comes from a
    /// change that also moved the epoch (it completed a reassignment that removed a
    /// replica): it lacks the new replica list, and applying it would make the metadata
    /// record that carries that list look old. The proposal stays in flight until that
    /// record arrives.
    pub fn isr_change_accepted(&mut self, assignment: Assignment, now_ms: i64) {
        if assignment.leader_epoch != self.leader_epoch {
            return;
        }
        self.apply_assignment(assignment, now_ms);
    }

    /// The controller answered `change` with `error` (Kafka's `handleAlterPartitionError`).
    /// Only INELIGIBLE_REPLICA and OPERATION_NOT_ATTEMPTED say the change was not made:
    /// the proposal is forgotten, so that a later one can be made from the metadata as
    /// it is. Any other refusal may answer a retry of a change the controller already
    /// committed (INVALID_UPDATE_VERSION: its first attempt bumped the partition epoch):
    /// the proposal stays in flight until the metadata brings the partition's new state,
    /// or the high watermark would stop waiting for a member the controller added.
    /// The refusal of another change than the one in flight (an older proposal's retry)
    /// changes nothing.
    pub fn isr_change_refused(&mut self, change: &IsrChange, error: ErrorCode, now_ms: i64) {
        let not_made = matches!(error, ErrorCode::INELIGIBLE_REPLICA | ErrorCode::OPERATION_NOT_ATTEMPTED);
        if not_made && self.pending_isr.as_ref().is_some_and(|p| p.change == *change) {
            self.pending_isr = None;
        }
        self.update(now_ms);
    }

    /// The cluster metadata says which of the partition's replicas may not join the ISR
    /// now: their brokers are fenced, shutting down or gone. The high watermark stops
    /// waiting for such a replica to join, and none is proposed for the ISR (Kafka's
    /// `isReplicaIsrEligible`). Without this a broker that died while caught up, and
    /// that the controller fenced out of the ISR, held every acks=all write for
    /// `replica.lag.time.max.ms` after its death.
    pub fn set_ineligible_replicas(&mut self, mut ineligible: Vec<i32>, now_ms: i64) {
        ineligible.sort_unstable();
        ineligible.dedup();
        if ineligible != self.ineligible {
            self.ineligible = ineligible;
            self.update(now_ms);
        }
    }

    /// As a follower: the leader's high watermark, from a fetch response. A follower's
    /// high watermark never passes what it has itself.
    pub fn leader_high_watermark(&mut self, high_watermark: i64) {
        if self.is_leader() {
            return;
        }
        let hw = high_watermark.min(self.local.log_end_offset);
        if hw > self.high_watermark {
            self.high_watermark = hw;
            self.outputs.push_back(Output::HighWatermark(hw));
        }
    }

    /// Time passed: drops from the ISR the followers that have not caught up for
    /// `replica.lag.time.max.ms` (Kafka's `maybeShrinkIsr`).
    pub fn tick(&mut self, now_ms: i64) {
        if self.is_leader() && self.pending_isr.is_none() {
            let leader_end = self.local.log_end_offset;
            let lag = self.config.replica_lag_time_max_ms;
            let out_of_sync: Vec<i32> = self
                .isr
                .iter()
                .copied()
                .filter(|id| {
                    self.followers.get(id).is_some_and(|f| {
                        f.log_end_offset != leader_end && now_ms.saturating_sub(f.last_caught_up_ms) > lag
                    })
                })
                .collect();
            if !out_of_sync.is_empty() {
                let new_isr: Vec<i32> = self.isr.iter().copied().filter(|id| !out_of_sync.contains(id)).collect();
                // Until the controller commits the shrink, the high watermark still waits
                // for the whole current ISR.
                self.propose_isr(new_isr, self.isr.clone());
            }
        }
        self.update(now_ms);
    }

    /// Answers `request_id` once `required_offset` (the batch's last offset + 1) is
    /// acknowledged at `level`, through an [`Output::Completed`]; at once if it already
    /// is. The request must have passed [`check_append`](Self::check_append).
    pub fn await_ack(&mut self, request_id: u64, required_offset: i64, level: AckLevel, now_ms: i64) {
        if !self.is_leader() {
            self.complete(request_id, Err(ErrorCode::NOT_LEADER_OR_FOLLOWER));
            return;
        }
        self.waiting.insert(request_id, Waiting { required_offset, level });
        self.update(now_ms);
    }

    /// Stops waiting for `request_id` (it failed elsewhere, e.g. its fsync, or timed
    /// out). Returns whether it was waiting.
    pub fn cancel(&mut self, request_id: u64) -> bool {
        self.waiting.remove(&request_id).is_some()
    }

    /// As the leader: the most offsets a follower's log end is behind this log's (a
    /// follower that has not fetched in this epoch counts from 0); 0 on a follower.
    pub fn max_follower_lag(&self) -> i64 {
        let leader_end = self.local.log_end_offset;
        self.followers.values().map(|f| (leader_end - f.log_end_offset.max(0)).max(0)).max().unwrap_or(0)
    }

    /// Requests waiting for their acknowledgement.
    pub fn waiting_count(&self) -> usize {
        self.waiting.len()
    }

    // ----- internals ---------------------------------------------------------------

    /// What a replica's data counts for under the flush policy.
    fn counted_end(&self, log_end_offset: i64, durable_end_offset: i64) -> i64 {
        if self.config.fsync_before_ack {
            durable_end_offset.min(log_end_offset)
        } else {
            log_end_offset
        }
    }

    fn local_counted_end(&self) -> i64 {
        self.counted_end(self.local.log_end_offset, self.local.durable_end_offset)
    }

    fn is_ineligible(&self, replica_id: i32) -> bool {
        self.ineligible.binary_search(&replica_id).is_ok()
    }

    fn maximal_isr(&self) -> &[i32] {
        self.pending_isr.as_ref().map_or(&self.isr, |p| &p.maximal_isr)
    }

    /// Kafka's `isFollowerInSync` for expansion: a replica outside the ISR joins once it
    /// has reached the high watermark (durably, under `fsync_before_ack`) and everything
    /// this leader's epoch started from.
    fn maybe_expand_isr(&mut self, replica_id: i32) {
        if self.pending_isr.is_some() || self.isr.contains(&replica_id) || self.is_ineligible(replica_id) {
            return;
        }
        let Some(f) = self.followers.get(&replica_id) else { return };
        // Under `fsync_before_ack` a member must hold the high watermark durably, or the
        // high watermark would already pass what it made durable.
        let counted_end = self.counted_end(f.log_end_offset, f.durable_end_offset);
        if counted_end >= self.high_watermark && f.log_end_offset >= self.leader_epoch_start_offset {
            let mut new_isr = self.isr.clone();
            new_isr.push(replica_id);
            // Adding a member makes the high watermark wait for it at once: safe
            // whatever the controller decides (KIP-497).
            self.propose_isr(new_isr.clone(), new_isr);
        }
    }

    fn propose_isr(&mut self, new_isr: Vec<i32>, maximal_isr: Vec<i32>) {
        let change = IsrChange { leader_epoch: self.leader_epoch, partition_epoch: self.partition_epoch, new_isr };
        self.outputs.push_back(Output::AlterPartition(change.clone()));
        self.pending_isr = Some(PendingIsr { change, maximal_isr });
    }

    /// After every input: move the high watermark if it may, then answer the requests
    /// it (or an ISR change) decides.
    fn update(&mut self, now_ms: i64) {
        if !self.is_leader() {
            return;
        }
        self.maybe_increment_high_watermark(now_ms);
        self.complete_waiting();
    }

    /// Kafka's `maybeIncrementLeaderHW`, counting only durable data under
    /// `fsync_before_ack`. Never moves the high watermark back.
    fn maybe_increment_high_watermark(&mut self, now_ms: i64) {
        if self.isr.len() < self.effective_min_insync_replicas() {
            return;
        }
        let leader_end = self.local.log_end_offset;
        let lag = self.config.replica_lag_time_max_ms;
        let mut new_hw = self.local_counted_end();
        for (id, f) in &self.followers {
            let caught_up = f.log_end_offset == leader_end || now_ms.saturating_sub(f.last_caught_up_ms) <= lag;
            // A caught-up follower about to join the ISR is waited for, else the high
            // watermark could run away from it and it would never join; one that may
            // not join (its broker fenced) is not.
            let may_join = caught_up && f.log_end_offset >= 0 && !self.is_ineligible(*id);
            if self.maximal_isr().contains(id) || may_join {
                new_hw = new_hw.min(self.counted_end(f.log_end_offset, f.durable_end_offset));
            }
        }
        if new_hw > self.high_watermark {
            self.high_watermark = new_hw;
            self.outputs.push_back(Output::HighWatermark(new_hw));
        }
    }

    /// Kafka's `checkEnoughReplicasReachOffset` for each waiting request, and Osprey's
    /// answer for the requests an ISR below the minimum leaves waiting: an acks=all
    /// request fails with NOT_ENOUGH_REPLICAS_AFTER_APPEND at once rather than wait for
    /// its timeout, since the high watermark cannot pass it until the ISR grows back.
    fn complete_waiting(&mut self) {
        if self.waiting.is_empty() {
            return;
        }
        let min_isr = self.effective_min_insync_replicas();
        let under_min_isr = self.isr.len() < min_isr;
        let enough_replicas = self.maximal_isr().len() >= min_isr;
        let local_end = self.local_counted_end();
        let hw = self.high_watermark;
        let mut decided = Vec::new();
        for (&request_id, w) in &self.waiting {
            let result = match w.level {
                AckLevel::Leader if local_end >= w.required_offset => Ok(()),
                AckLevel::All if hw >= w.required_offset && enough_replicas => Ok(()),
                AckLevel::All if hw >= w.required_offset || under_min_isr => {
                    Err(ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND)
                }
                _ => continue,
            };
            decided.push((request_id, result));
        }
        for (request_id, result) in decided {
            self.waiting.remove(&request_id);
            self.complete(request_id, result);
        }
    }

    fn complete(&mut self, request_id: u64, result: Result<(), ErrorCode>) {
        self.outputs.push_back(Output::Completed { request_id, result });
    }
}

#[cfg(test)]
mod tests;
