//! A partition this broker holds, as leader or follower: its log, its replica state
//! machine, and the signals fetchers wait on.

use crate::telemetry::{LogLimiter, REPEATED_FAILURE_LOG_INTERVAL};
use osprey_cluster::replica::fetch::{FetchDecision, FollowerFetch};
use osprey_cluster::replica::{
    AckLevel, AppendRefused, Assignment, IsrChange, LocalLog, Output, ReplicaConfig, ReplicaState, Role, Snapshot,
};
use osprey_cluster::PartitionImage;
use osprey_protocol::{ErrorCode, Uuid};
use osprey_storage::{FdLimited, Flusher, LogConfig, PartitionLog, StdStorage, StorageError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{mpsc, oneshot, watch};

/// A partition log whose files count against the broker's open-file budget.
pub type Log = PartitionLog<FdLimited<StdStorage>>;

/// A partition this broker holds: its log and its replication state.
///
/// The replica state machine ([`ReplicaState`]) is the one owner of the leader epoch,
/// the ISR, the high watermark, the last stable offset and the flush policy; this type
/// feeds it what the log reports and carries out what it decides: it publishes the high
/// watermark (into the log, which keeps it for retention, cleaning and its checkpoint,
/// and to long-polling fetches) and answers produce requests once it acknowledges them.
#[derive(Debug)]
pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    pub log: Arc<Log>,
    replica: Mutex<Replica>,
    /// The machine's high watermark, published for long-polling fetches.
    high_watermark: watch::Sender<i64>,
    /// The log end offset, published for followers' long-polling fetches (they read
    /// past the high watermark, so its moves are not enough to wake them).
    log_end_offset: watch::Sender<i64>,
    /// Where ISR changes go to be sent to the controller (AlterPartition); none on a
    /// single node, whose ISR never changes.
    isr_changes: Option<IsrSink>,
    /// Transactional appends waiting for their partition to join the transaction (KIP-890
    /// part 2). While any wait, later transactional batches wait behind them, so a batch
    /// never overtakes an earlier one of its producer.
    pub deferred_txn_appends: std::sync::atomic::AtomicUsize,
    /// Held by a leader's append from its leadership check to the end of its write, and
    /// by every change of leadership (`apply_assignment`): a replica that stopped leading,
    /// or leads at another epoch, never appends as the leader. Without it a deposed
    /// leader could write one batch stamped with the new leader's epoch at an offset the
    /// new leader fills with another batch, a divergence no epoch comparison finds.
    leader_appends: Mutex<()>,
    /// Producer batches refused before their append, so that the gap they leave is
    /// answered with the same refusal (see [`crate::refused_batches`]).
    pub refused_batches: crate::refused_batches::RefusedBatches,
}

/// The state machine and the requests waiting on it, under one lock.
#[derive(Debug)]
struct Replica {
    state: ReplicaState,
    next_request_id: u64,
    waiters: HashMap<u64, oneshot::Sender<Result<(), AckError>>>,
    /// Each follower's broker epoch, from its fetches (Fetch v15+ sends it): the ISR
    /// the leader proposes carries them, so the controller refuses a member that has
    /// restarted since (KIP-903).
    follower_broker_epochs: HashMap<i32, i64>,
}

/// A led partition's replication figures, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicationStatus {
    pub replicas: usize,
    pub isr: usize,
    /// The effective `min.insync.replicas`.
    pub min_isr: usize,
    /// The most messages (offsets) a follower is behind the leader's log end.
    pub max_follower_lag: i64,
    /// Produce requests waiting for their acknowledgement.
    pub waiting: usize,
}

/// An ISR change of one partition, for the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrRequest {
    pub topic_id: Uuid,
    pub index: i32,
    pub change: IsrChange,
    /// The broker epoch of each member of `change.new_isr` (-1 where unknown).
    pub broker_epochs: Vec<i64>,
}

/// The queue of ISR changes to send. At most one change per partition is in flight (the
/// replica state machine proposes the next only once the last is answered), so it holds
/// at most one entry per partition held here.
pub type IsrSink = mpsc::UnboundedSender<IsrRequest>;

/// Why a write was not acknowledged.
#[derive(Debug)]
pub enum AckError {
    /// The log could not make it durable.
    Storage(StorageError),
    /// The replica state machine's answer: NOT_LEADER_OR_FOLLOWER, or
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR fell below `min.insync.replicas`.
    Replication(ErrorCode),
}

impl AckError {
    pub fn code(&self) -> ErrorCode {
        match self {
            AckError::Storage(e) => crate::handlers::produce::storage_error_code(e),
            AckError::Replication(code) => *code,
        }
    }
}

impl std::fmt::Display for AckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AckError::Storage(e) => e.fmt(f),
            AckError::Replication(code) => f.write_str(code.name()),
        }
    }
}

/// Resolves once a write is acknowledged (or not).
pub type Acknowledgement = oneshot::Receiver<Result<(), AckError>>;

impl Partition {
    /// A partition whose log was just opened, in the state `assignment` describes.
    pub fn new(
        topic: String,
        topic_id: Uuid,
        assignment: &PartitionImage,
        log: Arc<Log>,
        config: ReplicaConfig,
        isr_changes: Option<IsrSink>,
    ) -> Partition {
        let now = crate::broker::now_ms();
        let state = ReplicaState::new(config, Assignment::from(assignment), local_log(&log), log.high_watermark(), now);
        let (high_watermark, _) = watch::channel(state.high_watermark());
        let (log_end_offset, _) = watch::channel(log.log_end_offset());
        let partition = Partition {
            topic,
            topic_id,
            index: assignment.index,
            log,
            replica: Mutex::new(Replica {
                state,
                next_request_id: 0,
                waiters: HashMap::new(),
                follower_broker_epochs: HashMap::new(),
            }),
            high_watermark,
            log_end_offset,
            isr_changes,
            deferred_txn_appends: std::sync::atomic::AtomicUsize::new(0),
            leader_appends: Mutex::new(()),
            refused_batches: Default::default(),
        };
        // The machine may already have moved the high watermark (a single node is its own
        // ISR: everything recovery kept and made durable is committed).
        let mut replica = partition.lock();
        partition.carry_out(&mut replica);
        drop(replica);
        partition
    }

    fn lock(&self) -> MutexGuard<'_, Replica> {
        self.replica.lock().expect("replica state lock poisoned by an earlier panic")
    }

    /// Runs `append` with this replica's leader epoch if it leads the partition (at
    /// `expected_epoch`, when given), with no change of leadership until it returns;
    /// NOT_LEADER_OR_FOLLOWER otherwise. Every append made as the leader (client batches,
    /// coordinator records, transaction markers) goes through here.
    pub fn append_as_leader<T>(
        &self,
        expected_epoch: Option<i32>,
        append: impl FnOnce(i32) -> T,
    ) -> Result<T, ErrorCode> {
        let _no_leadership_change =
            self.leader_appends.lock().expect("leader append lock poisoned by an earlier panic");
        let epoch = {
            let replica = self.lock();
            let epoch = replica.state.leader_epoch();
            if !replica.state.is_leader() || expected_epoch.is_some_and(|e| e != epoch) {
                return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
            }
            epoch
        };
        Ok(append(epoch))
    }

    /// Runs `apply` if this replica follows the partition at leader epoch `epoch`, with
    /// no change of leadership until it returns; `None` otherwise. A fetcher's answer is
    /// applied only at the epoch its fetch went out for: an answer from a leader this
    /// replica no longer follows (it was deposed, and may not know it yet) holds records
    /// the new leader need not have, and appending them would put them back after the
    /// truncation the new leader asked for (Kafka's fetcher drops such an answer).
    pub fn as_follower_at<T>(&self, epoch: i32, apply: impl FnOnce() -> T) -> Option<T> {
        let _no_leadership_change =
            self.leader_appends.lock().expect("leader append lock poisoned by an earlier panic");
        {
            let replica = self.lock();
            if replica.state.is_leader() || replica.state.leader_epoch() != epoch {
                return None;
            }
        }
        Some(apply())
    }

    /// The leader epoch, high watermark and last stable offset, taken together.
    pub fn snapshot(&self) -> Snapshot {
        self.lock().state.snapshot()
    }

    pub fn leader_epoch(&self) -> i32 {
        self.lock().state.leader_epoch()
    }

    /// The replication figures of a partition led here (None on a follower).
    pub fn replication_status(&self) -> Option<ReplicationStatus> {
        let replica = self.lock();
        let state = &replica.state;
        state.is_leader().then(|| ReplicationStatus {
            replicas: state.replicas().len(),
            isr: state.isr().len(),
            min_isr: state.effective_min_insync_replicas(),
            max_follower_lag: state.max_follower_lag(),
            waiting: state.waiting_count(),
        })
    }

    /// Osprey's default flush policy: data counts only once durable.
    pub fn fsync_before_ack(&self) -> bool {
        self.lock().state.fsync_before_ack()
    }

    /// Whether this broker leads the partition now.
    pub fn is_leader(&self) -> bool {
        self.lock().state.is_leader()
    }

    /// Whether this broker leads the partition now, at leader epoch `epoch`.
    pub fn leads_at(&self, epoch: i32) -> bool {
        let replica = self.lock();
        replica.state.is_leader() && replica.state.leader_epoch() == epoch
    }

    pub fn role(&self) -> Role {
        self.lock().state.role()
    }

    /// The controller's metadata for the partition, from the image: leadership, epochs,
    /// replicas and ISR. Older news is ignored.
    pub fn apply_assignment(&self, assignment: &PartitionImage) {
        self.apply(assignment, false);
    }

    /// The controller accepted an ISR change and answered with the partition's state:
    /// applied only at this replica's leader epoch (`ReplicaState::isr_change_accepted`).
    pub fn isr_change_accepted(&self, answer: &PartitionImage) {
        self.apply(answer, true);
    }

    fn apply(&self, assignment: &PartitionImage, answer: bool) {
        // An accepted ISR change never moves leadership; an assignment may, so it waits
        // for the append in progress as the leader (`append_as_leader`).
        let _no_leader_append =
            (!answer).then(|| self.leader_appends.lock().expect("leader append lock poisoned by an earlier panic"));
        let mut replica = self.lock();
        let led = replica.state.is_leader().then(|| (replica.state.leader_epoch(), replica.state.isr().len()));
        let now_ms = crate::broker::now_ms();
        if answer {
            replica.state.isr_change_accepted(Assignment::from(assignment), now_ms);
        } else {
            replica.state.apply_assignment(Assignment::from(assignment), now_ms);
        }
        let replicas = replica.state.replicas().to_vec();
        replica.follower_broker_epochs.retain(|id, _| replicas.contains(id));
        let leads = replica.state.is_leader().then(|| (replica.state.leader_epoch(), replica.state.isr().len()));
        let new_epoch = leads.is_some_and(|(epoch, _)| led.is_none_or(|(before, _)| before != epoch));
        match (led, leads) {
            (None, Some((epoch, _))) => {
                tracing::info!(topic = %self.topic, partition = self.index, leader_epoch = epoch, "leading the partition");
            }
            // The ISR this broker leads changed (whether the AlterPartition answer or the
            // metadata brought it first): Kafka's IsrShrinksPerSec / IsrExpandsPerSec.
            (Some((e1, before)), Some((e2, after))) if e1 == e2 && before != after => {
                crate::telemetry::isr_changed(after > before);
            }
            _ => {}
        }
        self.carry_out(&mut replica);
        drop(replica);
        if new_epoch {
            if let Err(e) = self.log.assign_epoch_start(assignment.leader_epoch) {
                tracing::error!(topic = %self.topic, partition = self.index, error = %e, "leader epoch not recorded in the log");
            }
        }
    }

    /// The replicas whose brokers the metadata shows fenced, shutting down or gone: not
    /// waited for by the high watermark, nor proposed for the ISR
    /// (`ReplicaState::set_ineligible_replicas`).
    pub fn set_ineligible_replicas(&self, ineligible: Vec<i32>) {
        let mut replica = self.lock();
        replica.state.set_ineligible_replicas(ineligible, crate::broker::now_ms());
        self.carry_out(&mut replica);
    }

    /// The controller refused `change` with `error`: the machine forgets it only when the
    /// controller did not make it (Kafka's `handleAlterPartitionError`).
    pub fn isr_change_refused(&self, change: &IsrChange, error: ErrorCode) {
        let mut replica = self.lock();
        replica.state.isr_change_refused(change, error, crate::broker::now_ms());
        self.carry_out(&mut replica);
    }

    /// As the leader: a follower fetched `fetch` (Kafka's `Partition.fetchRecords` checks:
    /// leadership, epochs, a diverging log), and its position counts only when its log
    /// agrees with this one. A follower fetches only once what it has is durable (its
    /// fetcher flushes first), so the fetch offset is also its durable end. `broker_epoch`
    /// is the follower's, when its fetch names it.
    pub fn follower_fetched(&self, broker_epoch: i64, fetch: &FollowerFetch) -> Result<FetchDecision, ErrorCode> {
        let mut replica = self.lock();
        let log_start_offset = self.log.log_start_offset();
        let end_offset_for = |epoch| self.log.end_offset_for_epoch(epoch);
        let result = replica.state.follower_fetch(fetch, log_start_offset, end_offset_for, crate::broker::now_ms());
        // Kept only for a replica the machine accepted as a follower: the map is bounded
        // by the partition's replicas, whatever ids fetchers claim.
        if result.is_ok() && broker_epoch >= 0 {
            replica.follower_broker_epochs.insert(fetch.replica_id, broker_epoch);
        }
        self.carry_out(&mut replica);
        result
    }

    /// As a follower: the leader's high watermark, from a fetch answer.
    pub fn leader_high_watermark(&self, high_watermark: i64) {
        let mut replica = self.lock();
        replica.state.local_log_changed(local_log(&self.log), crate::broker::now_ms());
        replica.state.leader_high_watermark(high_watermark);
        self.carry_out(&mut replica);
    }

    /// As a follower: the log was truncated where it diverged from the leader's. A high
    /// watermark the truncation lowered (an unclean election took records back) is
    /// published too: the watch otherwise only moves up, and would hold the old value
    /// until the new log passed it, keeping long polls here from waking on the way.
    pub fn log_truncated(&self) {
        let mut replica = self.lock();
        let local = local_log(&self.log);
        replica.state.local_log_truncated(local);
        let hw = replica.state.high_watermark();
        self.high_watermark.send_if_modified(|published| {
            let lowered = hw < *published;
            if lowered {
                *published = hw;
            }
            lowered
        });
        self.publish_log_end_offset(local.log_end_offset);
    }

    /// Time passed: followers that fell behind for `replica.lag.time.max.ms` leave the
    /// ISR (an AlterPartition to send).
    pub fn tick(&self) {
        let mut replica = self.lock();
        replica.state.tick(crate::broker::now_ms());
        self.carry_out(&mut replica);
    }

    /// Requests waiting for their acknowledgement (acks=all waiting on followers).
    pub fn waiting_count(&self) -> usize {
        self.lock().state.waiting_count()
    }

    /// A receiver that changes whenever the log end offset moves (followers' long polls).
    pub fn watch_log_end_offset(&self) -> watch::Receiver<i64> {
        self.log_end_offset.subscribe()
    }

    /// Whether a write with these acks may be appended now (leadership; the ISR against
    /// the effective `min.insync.replicas` for acks=all).
    pub fn check_append(&self, acks: i16) -> Result<(), AppendRefused> {
        self.lock().state.check_append(ack_level(acks))
    }

    /// Applies a topic config change: the log's settings, and the flush policy and
    /// `min.insync.replicas` the replica state machine decides with.
    pub fn reconfigure(&self, config: LogConfig, replica_config: ReplicaConfig) {
        self.log.set_config(config);
        let mut replica = self.lock();
        replica.state.set_config(replica_config, crate::broker::now_ms());
        self.carry_out(&mut replica);
    }

    /// A receiver that changes whenever the high watermark moves.
    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// Tells the replica state machine what the log now holds (appended, durable, its
    /// oldest open transaction) and carries out what follows.
    pub fn log_changed(&self) {
        let mut replica = self.lock();
        // Read under the machine's lock: reports reach it in the order they were read,
        // so an older first unstable offset never replaces a newer one.
        let local = local_log(&self.log);
        replica.state.local_log_changed(local, crate::broker::now_ms());
        self.publish_log_end_offset(local.log_end_offset);
        self.carry_out(&mut replica);
    }

    fn publish_log_end_offset(&self, log_end_offset: i64) {
        self.log_end_offset.send_if_modified(|published| {
            let moved = log_end_offset != *published;
            *published = log_end_offset;
            moved
        });
    }

    /// Resolves once the batch ending at `last_offset` is acknowledged at acks=all:
    /// below the high watermark. Coordinator records and transaction markers wait so.
    pub fn acknowledged(self: &Arc<Self>, last_offset: i64, flusher: &Flusher) -> Acknowledgement {
        self.acknowledge(last_offset, -1, flusher)
    }

    /// Resolves once the batch ending at `last_offset` is acknowledged with `acks`
    /// (acks=0 as acks=1: the high watermark still moves once it is durable). Under
    /// `fsync_before_ack` the log's fsync is what moves the machine.
    pub fn acknowledge(self: &Arc<Self>, last_offset: i64, acks: i16, flusher: &Flusher) -> Acknowledgement {
        let (tx, rx) = oneshot::channel();
        let (request_id, fsync_before_ack) = {
            let mut replica = self.lock();
            if replica.waiters.len() >= WAITERS_SWEEP_AT {
                forget_abandoned_waiters(&mut replica);
            }
            let request_id = replica.next_request_id;
            replica.next_request_id += 1;
            replica.waiters.insert(request_id, tx);
            let now = crate::broker::now_ms();
            let local = local_log(&self.log);
            replica.state.local_log_changed(local, now);
            self.publish_log_end_offset(local.log_end_offset);
            replica.state.await_ack(request_id, last_offset + 1, ack_level(acks), now);
            self.carry_out(&mut replica);
            (request_id, replica.state.fsync_before_ack())
        };
        if fsync_before_ack {
            // Outside the lock: the callback may run at once, on this thread.
            let me = self.clone();
            self.log.on_durable(
                last_offset,
                flusher,
                Box::new(move |result| match result {
                    Ok(()) => me.log_changed(),
                    Err(e) => me.fail(request_id, AckError::Storage(e)),
                }),
            );
        }
        rx
    }

    /// Answers a waiting request with `error`, if it still waits.
    fn fail(&self, request_id: u64, error: AckError) {
        let mut replica = self.lock();
        replica.state.cancel(request_id);
        if let Some(tx) = replica.waiters.remove(&request_id) {
            let _ = tx.send(Err(error));
        }
    }

    /// Carries out the machine's outputs: publishes a new high watermark, queues ISR
    /// changes for the controller, answers acknowledged requests.
    fn carry_out(&self, replica: &mut Replica) {
        while let Some(output) = replica.state.poll_output() {
            match output {
                Output::HighWatermark(hw) => {
                    if let Err(e) = self.log.update_high_watermark(hw) {
                        tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "high watermark not updated");
                    }
                    self.high_watermark.send_if_modified(|published| {
                        let moved = hw > *published;
                        if moved {
                            *published = hw;
                        }
                        moved
                    });
                }
                Output::AlterPartition(change) => {
                    tracing::info!(topic = %self.topic, partition = self.index, isr = ?replica.state.isr(), new_isr = ?change.new_isr, "proposing an ISR change to the controller");
                    let broker_epochs = change
                        .new_isr
                        .iter()
                        .map(|id| replica.follower_broker_epochs.get(id).copied().unwrap_or(-1))
                        .collect();
                    let request = IsrRequest {
                        topic_id: self.topic_id,
                        index: self.index,
                        change: change.clone(),
                        broker_epochs,
                    };
                    let sent = self.isr_changes.as_ref().is_some_and(|sink| sink.send(request).is_ok());
                    if !sent {
                        // Shutting down (or a single node): nobody sends it; forget it, so
                        // the machine may propose again.
                        let not_sent = ErrorCode::OPERATION_NOT_ATTEMPTED;
                        replica.state.isr_change_refused(&change, not_sent, crate::broker::now_ms());
                    }
                }
                Output::Completed { request_id, result } => {
                    if let Some(tx) = replica.waiters.remove(&request_id) {
                        let _ = tx.send(result.map_err(AckError::Replication));
                    }
                }
            }
        }
    }
}

/// Waiting requests past which each new one first drops those nobody waits for any more.
const WAITERS_SWEEP_AT: usize = 64;

/// Drops the waiters whose request was answered elsewhere (REQUEST_TIMED_OUT, or its
/// connection closed) and takes them out of the machine's waiting list: while the high
/// watermark is stuck (a quorum lost, so the ISR cannot shrink) a client's acks=all
/// requests would otherwise pile up there. What waits is then bounded by the requests in
/// flight.
fn forget_abandoned_waiters(replica: &mut Replica) {
    let abandoned: Vec<u64> = replica.waiters.iter().filter(|(_, tx)| tx.is_closed()).map(|(id, _)| *id).collect();
    for request_id in abandoned {
        replica.waiters.remove(&request_id);
        replica.state.cancel(request_id);
    }
}

/// What the log reports to the replica state machine. The durable end is read first:
/// it never passes the log end offset read after it.
fn local_log(log: &Log) -> LocalLog {
    let durable_end_offset = log.durable_end_offset();
    let offsets = log.offsets();
    // A transaction whose start was deleted (DeleteRecords, retention) holds the last
    // stable offset at the log start offset, as Kafka's `maybeIncrementFirstUnstableOffset`.
    let first_unstable_offset = log.first_unstable_offset().map(|first| first.max(offsets.log_start_offset));
    LocalLog { log_end_offset: offsets.log_end_offset, durable_end_offset, first_unstable_offset }
}

/// acks=all waits for the high watermark; acks=1 (and 0) for the leader's own copy.
fn ack_level(acks: i16) -> AckLevel {
    if acks == -1 {
        AckLevel::All
    } else {
        AckLevel::Leader
    }
}

/// A full disk fails every coordinator append, retried: one line per interval.
static COORDINATOR_APPEND_FAILURES_LOGGED: LogLimiter = LogLimiter::new();

/// What a coordinator append's acknowledgement tells the group or transaction
/// coordinator: the replication error itself, which each maps as Kafka does
/// (`appendGroupMetadataErrorToResponseError`, `appendTransactionToLog`). An ISR fallen
/// below `min.insync.replicas` (NOT_ENOUGH_REPLICAS_AFTER_APPEND) is then
/// COORDINATOR_NOT_AVAILABLE, so a transaction's completion is retried rather than left
/// prepared until another coordinator loads the partition, and NOT_LEADER_OR_FOLLOWER is
/// NOT_COORDINATOR. A wait dropped unanswered counts as a failed write.
pub fn coordinator_append_result(
    acknowledged: Result<Result<(), AckError>, oneshot::error::RecvError>,
) -> Result<(), ErrorCode> {
    match acknowledged {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.code()),
        Err(_) => Err(ErrorCode::KAFKA_STORAGE_ERROR),
    }
}

/// Appends coordinator records (`__consumer_offsets`, `__transaction_state`,
/// `__share_group_state`) as one uncompressed batch, transactional for `producer` if given
/// (no sequence: coordinator writes are not sequence-checked, as in Kafka), and returns
/// the offset of the last record and the durability wait. `what` names the write in the
/// error log.
pub fn append_coordinator_records(
    partition: &Arc<Partition>,
    coordinator_epoch: i32,
    flusher: &Flusher,
    records: &[osprey_coordinator::group::Record],
    producer: Option<(i64, i16)>,
    what: &str,
) -> Result<(i64, Acknowledgement), ErrorCode> {
    use osprey_protocol::records::{BatchBuilder, Compression};
    let now = crate::broker::now_ms();
    let mut builder = BatchBuilder::new(Compression::None);
    if let Some((producer_id, producer_epoch)) = producer {
        builder = builder.producer(producer_id, producer_epoch, -1).transactional(true);
    }
    for r in records {
        builder.append(now, Some(&r.key), r.value.as_deref(), &[]).map_err(|_| ErrorCode::UNKNOWN_SERVER_ERROR)?;
    }
    let batch = builder.build().map_err(|_| ErrorCode::UNKNOWN_SERVER_ERROR)?;
    // A coordinator that lost the partition's leadership (or whose load was overtaken by
    // a newer epoch) does not write as its coordinator.
    let expected = (coordinator_epoch >= 0).then_some(coordinator_epoch);
    let appended = partition.append_as_leader(expected, |epoch| partition.log.append(batch.as_bytes(), epoch, now))?;
    let info = appended.map_err(|e| {
        if let Some(unlogged) = COORDINATOR_APPEND_FAILURES_LOGGED.admit(REPEATED_FAILURE_LOG_INTERVAL) {
            tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, unlogged, "{what} failed");
        }
        if e.is_kafka_storage_error() {
            ErrorCode::KAFKA_STORAGE_ERROR
        } else {
            ErrorCode::UNKNOWN_SERVER_ERROR
        }
    })?;
    Ok((info.last_offset, partition.acknowledged(info.last_offset, flusher)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coordinator_append_whose_isr_shrank_reports_the_replication_error() {
        use crate::partition::AckError::Replication;
        let result = |ack| coordinator_append_result(Ok(ack));
        assert_eq!(result(Ok(())), Ok(()));
        // Mapped by the coordinator to COORDINATOR_NOT_AVAILABLE: a completion is retried.
        assert_eq!(
            result(Err(Replication(ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND))),
            Err(ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        );
        assert_eq!(result(Err(Replication(ErrorCode::NOT_LEADER_OR_FOLLOWER))), Err(ErrorCode::NOT_LEADER_OR_FOLLOWER));
        let (waiter, acknowledgement) = oneshot::channel::<Result<(), AckError>>();
        drop(waiter);
        let dropped = acknowledgement.blocking_recv();
        assert_eq!(coordinator_append_result(dropped), Err(ErrorCode::KAFKA_STORAGE_ERROR));
    }
    use osprey_protocol::records::{BatchBuilder, Compression};
    use osprey_storage::FdBudget;

    fn open(name: &str, flush_messages: Option<&str>) -> (Arc<Partition>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("osprey-partition-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut config = LogConfig::default();
        if let Some(n) = flush_messages {
            config.set("flush.messages", n).unwrap();
        }
        let fsync_before_ack = matches!(config.flush_policy(), osprey_storage::FlushPolicy::FsyncBeforeAck);
        let storage = FdLimited::new(StdStorage, FdBudget::new(64));
        let log = PartitionLog::open(storage, &dir, config, 0).unwrap();
        let image = partition_image(vec![1], 1, 0);
        let replica_config =
            ReplicaConfig { local_id: 1, replica_lag_time_max_ms: 30_000, min_insync_replicas: 2, fsync_before_ack };
        (Arc::new(Partition::new("t".into(), Uuid::default(), &image, Arc::new(log), replica_config, None)), dir)
    }

    /// Partition 0 with these replicas, all in the ISR, led by `leader` at `leader_epoch`.
    fn partition_image(replicas: Vec<i32>, leader: i32, leader_epoch: i32) -> PartitionImage {
        PartitionImage {
            index: 0,
            isr: replicas.clone(),
            replicas,
            leader,
            leader_epoch,
            partition_epoch: leader_epoch,
            elr: Vec::new(),
            last_known_elr: Vec::new(),
            leader_recovery_state: 0,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    fn append(partition: &Partition, records: usize) -> i64 {
        let mut builder = BatchBuilder::new(Compression::None);
        for i in 0..records {
            builder.append(0, Some(format!("k{i}").as_bytes()), Some(b"v"), &[]).unwrap();
        }
        let batch = builder.build().unwrap();
        partition.log.append(batch.as_bytes(), partition.leader_epoch(), 0).unwrap().last_offset
    }

    #[test]
    fn acks_all_completes_once_the_replica_high_watermark_passes_the_durable_batch() {
        let (partition, dir) = open("acks-all", None);
        let flusher = Flusher::new(1).unwrap();
        // One replica with min.insync.replicas=2: acks=all is taken (KAFKA-15583).
        assert!(partition.check_append(-1).is_ok());
        let mut watch = partition.watch_high_watermark();
        let last_offset = append(&partition, 3);
        let ack = partition.acknowledge(last_offset, -1, &flusher);
        assert!(ack.blocking_recv().unwrap().is_ok());
        let snapshot = partition.snapshot();
        assert_eq!((snapshot.high_watermark, snapshot.last_stable_offset), (3, 3));
        assert_eq!(partition.log.high_watermark(), 3, "published into the log");
        assert!(partition.log.durable_end_offset() >= 3, "acknowledged only once durable");
        assert!(watch.has_changed().unwrap());
        assert_eq!(*watch.borrow_and_update(), 3);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn abandoned_acks_all_waits_do_not_pile_up_while_the_high_watermark_is_stuck() {
        let (single, dir) = open("abandoned-waits", None);
        // The same log, led here with follower 2 in the ISR, which never fetches.
        let image = partition_image(vec![1, 2], 1, 0);
        let replica_config = ReplicaConfig {
            local_id: 1,
            replica_lag_time_max_ms: 30_000,
            min_insync_replicas: 1,
            fsync_before_ack: false,
        };
        let partition =
            Arc::new(Partition::new("t".into(), Uuid::default(), &image, single.log.clone(), replica_config, None));
        let flusher = Flusher::new(1).unwrap();
        let mut live = Vec::new();
        for i in 0..1_000 {
            let last_offset = append(&partition, 1);
            let ack = partition.acknowledge(last_offset, -1, &flusher);
            // Every tenth request is still waited for; the others timed out.
            if i % 10 == 0 {
                live.push(ack);
            }
        }
        assert_eq!(partition.snapshot().high_watermark, 0, "follower 2 never fetched");
        let waiting = partition.waiting_count();
        assert!(waiting >= live.len(), "a live request was dropped: {waiting} < {}", live.len());
        assert!(waiting <= live.len() + WAITERS_SWEEP_AT, "{waiting} requests wait; {} are live", live.len());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn relaxed_flush_policy_acknowledges_before_the_fsync() {
        let (partition, dir) = open("relaxed", Some("1000"));
        let flusher = Flusher::new(1).unwrap();
        let last_offset = append(&partition, 2);
        let mut ack = partition.acknowledge(last_offset, 1, &flusher);
        assert!(ack.try_recv().unwrap().is_ok(), "answered at once, from the log end offset");
        assert_eq!(partition.snapshot().high_watermark, 2);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_truncation_below_the_high_watermark_publishes_the_lower_one() {
        let (single, dir) = open("truncated-hw", None);
        // The same log, followed here (broker 1) and led by broker 2.
        let image = partition_image(vec![2, 1], 2, 1);
        let config = ReplicaConfig {
            local_id: 1,
            replica_lag_time_max_ms: 30_000,
            min_insync_replicas: 1,
            fsync_before_ack: true,
        };
        let follower = Partition::new("t".into(), Uuid::default(), &image, single.log.clone(), config, None);
        for _ in 0..3 {
            append(&follower, 1);
        }
        follower.log.flush().unwrap();
        follower.leader_high_watermark(3);
        let mut watch = follower.watch_high_watermark();
        assert_eq!(*watch.borrow_and_update(), 3);
        follower.log.truncate_to(1).unwrap();
        follower.log_truncated();
        assert!(watch.has_changed().unwrap(), "the lowered high watermark is published");
        assert_eq!(*watch.borrow_and_update(), 1);
        assert_eq!(follower.snapshot().high_watermark, 1);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
