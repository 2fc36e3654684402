//! The share partitions this broker leads (Kafka's `SharePartitionManager`): for each
//! share group and topic partition led here, the [`SharePartition`] state machine
//! (`osprey_coordinator::share`), loaded from the share coordinator when first fetched
//! (`crate::share_persister`), with the acknowledgements and releases it makes written
//! back there before they are answered.
//!
//! - **Load.** The first ShareFetch of a share partition reads its state at the
//!   partition's leader epoch; a partition never initialised is initialised first (Kafka's
//!   group coordinator does this at the heartbeat; here the leader does it on first use,
//!   with the same start offset, -1). A state with no start offset starts where the
//!   group's `share.auto.offset.reset` says (earliest: the log start; latest: the high
//!   watermark; by_duration: the first batch at or after the time), and that start is
//!   written at once, so it is fixed for good (a restart does not resolve `latest` again).
//!   A leader epoch change loads the partition again.
//! - **Acquisition** (ShareFetch): a fetch takes the share partition's fetch lock if it is
//!   free ([`Slot::try_lock_for_fetch`], Kafka's `maybeAcquireFetchLock`), reads the log
//!   from the machine's next fetch offset (up to the high watermark, or the last stable
//!   offset for `read_committed`), and either acquires what it read or, short of its
//!   MinBytes, lets go and waits; the response carries the batches holding acquired
//!   records. Acquisitions are not written (as in Kafka: a restart makes acquired records
//!   available again).
//! - **Group configs** are read at each acquisition, acknowledgement and lock expiry, so a
//!   change applies to loaded share partitions at once, as in Kafka.
//! - **Writes** (acknowledgements, releases, lock expiry): one write in flight per share
//!   partition, those arriving meanwhile merged into the next (a group commit), so they
//!   reach the share coordinator in order. An acknowledgement is answered once its write
//!   is durable; a failed write rolls it back.
//! - **Dead-letter queue** (KIP-1191, `crate::share_dlq`): records the machine moved to
//!   ARCHIVING are taken after a load, a completed write and a lock expiry, and written to
//!   the group's DLQ topic, one write at a time per share partition; each is then archived
//!   (persisted like a lock expiry), whatever the write's outcome.
//! - **Lock expiry**: the coordinators' timer (`background.rs`, every 100 ms; Kafka's
//!   shortest lock is 1 s) expires acquisition locks and drops share partitions this
//!   broker no longer leads.
//!
//! Waiting ShareFetches are woken by appends (the high watermark), by records made
//! available again (releases, expiry) and by a fetch lock they found held being released:
//! [`SharePartitions::available`].

use crate::broker::{now_ms, Broker};
use crate::partition::Partition;
use crate::share_persister::{self, PersisterClients};
use crate::share_sessions::{ConnectionKey, ShareSessions};
use bytes::{Bytes, BytesMut};
use osprey_coordinator::group::group_config::{ShareGroupOverrides, ShareIsolationLevel};
use osprey_coordinator::share::{
    AbortedTransaction, AcknowledgeError, AcknowledgementBatch, AcquireRequest, AcquiredRecords, ControlMarker,
    DlqWrite, Isolation, LogBatch, ShareAcquireMode, ShareAutoOffsetReset, ShareConfig, SharePartition, StateWrite,
    WriteId,
};
use osprey_coordinator::share_state::{merge_writes, ShareKey, StateError, WriteState};
use osprey_protocol::records::{Batches, ControlRecordType};
use osprey_protocol::ErrorCode;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::{oneshot, watch};

/// A loaded share partition that nobody used this long, with no record acquired and no
/// write waiting, is unloaded (its state is all in the share coordinator; the next fetch
/// loads it again): what bounds the share partitions held here by those in use.
pub const IDLE_UNLOAD_MS: i64 = 10 * 60 * 1000;

/// A share partition failed: Kafka's error code and message for its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareError {
    pub code: ErrorCode,
    pub message: String,
}

impl From<StateError> for ShareError {
    fn from(e: StateError) -> Self {
        ShareError { code: e.code, message: e.message }
    }
}

impl From<AcknowledgeError> for ShareError {
    fn from(e: AcknowledgeError) -> Self {
        ShareError { code: e.error_code(), message: e.to_string() }
    }
}

impl ShareError {
    fn new(code: ErrorCode, message: impl Into<String>) -> ShareError {
        ShareError { code, message: message.into() }
    }
}

/// What the server keeps of share groups on the partition leaders.
#[derive(Debug)]
pub struct SharePartitions {
    cells: Mutex<HashMap<ShareKey, Arc<Cell>>>,
    sessions: Mutex<ShareSessions>,
    persister: PersisterClients,
    /// The dead-letter queue's Produce requests, on connections of their own.
    dlq_clients: PersisterClients,
    /// Bumped whenever records become available again (released, expired): waiting
    /// ShareFetches look again.
    available: watch::Sender<u64>,
}

impl Default for SharePartitions {
    fn default() -> Self {
        SharePartitions {
            cells: Mutex::default(),
            sessions: Mutex::default(),
            persister: PersisterClients::new("share-persister"),
            dlq_clients: PersisterClients::new("share-group-dlq"),
            available: watch::channel(0).0,
        }
    }
}

/// One share partition's place: loaded at most once at a time.
#[derive(Debug, Default)]
struct Cell {
    slot: tokio::sync::Mutex<Option<Arc<Slot>>>,
}

/// A loaded share partition.
#[derive(Debug)]
pub struct Slot {
    key: ShareKey,
    partition: Arc<Partition>,
    leader_epoch: i32,
    /// When a fetch or an acknowledgement last used it.
    last_used_ms: AtomicI64,
    /// The share coordinator refused a write as from a stale state or leader (the group's
    /// offsets were altered or deleted, or another leader took over): what is held here is
    /// not the durable state any more, and the next fetch loads it again.
    fenced: AtomicBool,
    /// Kafka's fetch lock: one fetch at a time, from choosing where to read to acquiring
    /// what was read ([`FetchLock`]).
    fetch: Arc<tokio::sync::Mutex<()>>,
    /// A fetch found the fetch lock held: its release wakes waiting fetches.
    fetch_contended: AtomicBool,
    inner: Mutex<SlotInner>,
}

#[derive(Debug)]
struct SlotInner {
    machine: SharePartition,
    queued: VecDeque<QueuedWrite>,
    writing: bool,
    /// No acquisition lock expires before this (`i64::MAX`: none is held): the timer
    /// looks at the machine's locks only then, so a tick costs one comparison per share
    /// partition rather than a walk of its records. Acquisitions bring it forward; a
    /// look at the locks sets it to the earliest one left.
    next_lock_check_ms: i64,
    /// Dead-letter queue writes taken from the machine and not yet done, in order; one
    /// runs at a time while `dlq_writing`.
    dlq_queued: VecDeque<DlqWrite>,
    dlq_writing: bool,
}

#[derive(Debug)]
struct QueuedWrite {
    id: WriteId,
    state: WriteState,
    reply: Option<oneshot::Sender<Result<(), StateError>>>,
}

/// What one partition of a ShareFetch acquired.
#[derive(Debug, Default)]
pub struct Fetched {
    /// The log batches holding the acquired records.
    pub records: Bytes,
    pub acquired: Vec<AcquiredRecords>,
    pub count: i64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SharePartitions {
    pub fn persister_clients(&self) -> &PersisterClients {
        &self.persister
    }

    pub fn dlq_clients(&self) -> &PersisterClients {
        &self.dlq_clients
    }

    pub fn sessions(&self) -> MutexGuard<'_, ShareSessions> {
        lock(&self.sessions)
    }

    /// A receiver that changes whenever records become available again.
    pub fn watch_available(&self) -> watch::Receiver<u64> {
        self.available.subscribe()
    }

    fn records_available(&self) {
        self.available.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The loaded share partition of `key` on `partition` (this broker's leader replica),
    /// loading it first when needed.
    pub async fn slot(
        &self,
        broker: &Arc<Broker>,
        key: &ShareKey,
        partition: &Arc<Partition>,
    ) -> Result<Arc<Slot>, ShareError> {
        let cell = lock(&self.cells).entry(key.clone()).or_default().clone();
        let mut slot = cell.slot.lock().await;
        let epoch = partition.leader_epoch();
        if !partition.is_leader() {
            *slot = None;
            return Err(ShareError::new(ErrorCode::NOT_LEADER_OR_FOLLOWER, "this broker does not lead the partition"));
        }
        if let Some(s) = slot.as_ref() {
            if s.leader_epoch == epoch && Arc::ptr_eq(&s.partition, partition) && !s.fenced.load(Ordering::Relaxed) {
                return Ok(s.clone());
            }
        }
        *slot = None;
        let loaded = Arc::new(load(broker, key, partition, epoch).await?);
        *slot = Some(loaded.clone());
        // Records persisted ARCHIVING go to the dead-letter queue again (at least once).
        loaded.start_dlq_writes(broker);
        Ok(loaded)
    }

    /// The loaded share partitions of `group_id`.
    fn loaded_of_group(&self, group_id: &str) -> Vec<Arc<Slot>> {
        let cells: Vec<Arc<Cell>> =
            lock(&self.cells).iter().filter(|(k, _)| k.group_id == group_id).map(|(_, c)| c.clone()).collect();
        cells.iter().filter_map(|c| c.slot.try_lock().ok().and_then(|s| s.clone())).collect()
    }

    /// The member's share session ended (its last request, epoch -1): its records are
    /// released, and when it was the group's last session here, the group's share
    /// partitions are unloaded (Kafka's `onGroupEmpty`): an empty group's offsets may be
    /// altered or deleted (AlterShareGroupOffsets, DeleteShareGroupOffsets), and the next
    /// fetch must load what the share coordinator has then.
    pub fn end_session(&self, broker: &Arc<Broker>, group_id: &str, member_id: &str) {
        self.sessions().close(group_id, member_id);
        self.session_ended(broker, group_id, member_id);
    }

    fn session_ended(&self, broker: &Arc<Broker>, group_id: &str, member_id: &str) {
        self.release_member(broker, group_id, member_id);
        if self.sessions().group_has_sessions(group_id) {
            return;
        }
        let cells: Vec<Arc<Cell>> =
            lock(&self.cells).iter().filter(|(k, _)| k.group_id == group_id).map(|(_, c)| c.clone()).collect();
        for cell in cells {
            if let Ok(mut slot) = cell.slot.try_lock() {
                *slot = None;
            }
        }
    }

    /// Releases every record `member_id` holds in `group_id`'s share partitions here (its
    /// share session closed).
    fn release_member(&self, broker: &Arc<Broker>, group_id: &str, member_id: &str) {
        let mut released = false;
        for slot in self.loaded_of_group(group_id) {
            let write = lock(&slot.inner).machine.release_member(member_id);
            if let Some(write) = write {
                released = true;
                slot.enqueue(broker, write, None);
            }
        }
        if released {
            tracing::debug!(group = group_id, member = member_id, "share session closed: acquired records released");
        }
    }

    /// The connection `connection` closed: its share session ends and its member's
    /// records are released.
    pub fn disconnected(&self, broker: &Arc<Broker>, connection: &ConnectionKey) {
        let closed = self.sessions().disconnected(connection);
        if let Some((group_id, member_id)) = closed {
            self.session_ended(broker, &group_id, &member_id);
        }
    }

    /// Expires acquisition locks and forgets share partitions no longer led here at the
    /// epoch they were loaded at.
    pub fn tick(&self, broker: &Arc<Broker>) {
        let now = now_ms();
        let cells: Vec<(ShareKey, Arc<Cell>)> = lock(&self.cells).iter().map(|(k, c)| (k.clone(), c.clone())).collect();
        let mut expired = false;
        for (key, cell) in cells {
            let Ok(mut guard) = cell.slot.try_lock() else { continue };
            let Some(slot) = guard.clone() else {
                drop(guard);
                let mut cells = lock(&self.cells);
                if cells.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell) && Arc::strong_count(c) == 2) {
                    cells.remove(&key);
                }
                continue;
            };
            if !slot.partition.leads_at(slot.leader_epoch) {
                *guard = None;
                continue;
            }
            let (write, idle) = {
                let mut inner = lock(&slot.inner);
                let idle_for = now - slot.last_used_ms.load(Ordering::Relaxed);
                if inner.next_lock_check_ms <= now || idle_for > IDLE_UNLOAD_MS {
                    let write = match inner.machine.next_deadline() {
                        Some(at) if at <= now => {
                            // An expiry archives at the delivery count limit in force now.
                            inner.machine.set_config(share_settings(broker, &key.group_id).0);
                            inner.machine.tick(now)
                        }
                        _ => None,
                    };
                    let next = inner.machine.next_deadline();
                    inner.next_lock_check_ms = next.unwrap_or(i64::MAX);
                    let quiet = next.is_none()
                        && write.is_none()
                        && inner.queued.is_empty()
                        && !inner.writing
                        && inner.dlq_queued.is_empty()
                        && !inner.dlq_writing;
                    (write, quiet && idle_for > IDLE_UNLOAD_MS)
                } else {
                    (None, false)
                }
            };
            if idle {
                *guard = None;
                tracing::debug!(group = key.group_id, partition = key.partition, "idle share partition unloaded");
                continue;
            }
            drop(guard);
            if let Some(write) = write {
                expired = true;
                crate::telemetry::share_lock_expiry();
                slot.enqueue(broker, write, None);
                slot.start_dlq_writes(broker);
            }
        }
        if expired {
            self.records_available();
        }
        crate::telemetry::share_sessions(self.sessions().open_sessions());
    }
}

/// The group's settings in force: the broker's `group.share.*`, overridden by the group's
/// configs. Read at each use of a loaded share partition (an acquisition, an
/// acknowledgement, a lock expiry), as Kafka's `SharePartition` reads its group's config
/// through `ShareGroupConfigProvider`, so that a change applies at once.
pub fn share_settings(broker: &Broker, group_id: &str) -> (ShareConfig, ShareAutoOffsetReset, ShareIsolationLevel) {
    let c = broker.config();
    let image = broker.image();
    let overrides = image.group_configs(group_id).map(ShareGroupOverrides::from_configs).unwrap_or_default();
    let config = ShareConfig {
        record_lock_duration_ms: i64::from(
            overrides.record_lock_duration_ms.unwrap_or(c.group_share_record_lock_duration_ms),
        ),
        delivery_count_limit: i16::try_from(
            overrides.delivery_count_limit.unwrap_or(c.group_share_delivery_count_limit),
        )
        .unwrap_or(i16::MAX),
        partition_max_record_locks: overrides
            .partition_max_record_locks
            .unwrap_or(c.group_share_partition_max_record_locks),
        renew_acknowledge_enabled: overrides.renew_acknowledge_enabled.unwrap_or(true),
        // The feature level is static: the broker's own setting, as every share API reads it.
        dlq_enabled: broker.settings.config.share_version >= 2 && overrides.dlq_topic_name.is_some(),
    };
    let reset = overrides.auto_offset_reset.unwrap_or_default();
    let isolation = overrides.isolation_level.unwrap_or(ShareIsolationLevel::ReadUncommitted);
    (config, reset, isolation)
}

/// Loads `key`'s state from its share coordinator, for the leader at `epoch`.
async fn load(
    broker: &Arc<Broker>,
    key: &ShareKey,
    partition: &Arc<Partition>,
    epoch: i32,
) -> Result<Slot, ShareError> {
    let read = match share_persister::read(broker, key, epoch).await {
        Err(e) if e.code == ErrorCode::INVALID_REQUEST => {
            // Never initialised: do it now, with no start offset yet.
            share_persister::initialize(broker, key, 0, -1).await?;
            share_persister::read(broker, key, epoch).await?
        }
        other => other?,
    };
    let (config, reset, _) = share_settings(broker, &key.group_id);
    let reset_offset = if read.start_offset == -1 { Some(reset_offset(partition, reset)?) } else { None };
    let machine = SharePartition::load(config, epoch, &read, reset_offset).map_err(|e| {
        tracing::error!(group = key.group_id, topic = %partition.topic, partition = key.partition, error = %e, "share partition state does not load");
        ShareError::new(ErrorCode::UNKNOWN_SERVER_ERROR, e.to_string())
    })?;
    if let Some(start) = reset_offset {
        // Fix the start offset, so that `latest` is resolved once.
        let write = WriteState {
            state_epoch: machine.state_epoch(),
            leader_epoch: epoch,
            start_offset: start,
            delivery_complete_count: 0,
            batches: Vec::new(),
        };
        share_persister::write(broker, key, &write).await?;
    }
    tracing::info!(
        group = key.group_id,
        topic = %partition.topic,
        partition = key.partition,
        leader_epoch = epoch,
        start_offset = machine.start_offset(),
        in_flight = machine.in_flight_records(),
        "share partition loaded"
    );
    Ok(Slot {
        key: key.clone(),
        partition: partition.clone(),
        leader_epoch: epoch,
        last_used_ms: AtomicI64::new(now_ms()),
        fenced: AtomicBool::new(false),
        fetch: Arc::default(),
        fetch_contended: AtomicBool::new(false),
        inner: Mutex::new(SlotInner {
            machine,
            queued: VecDeque::new(),
            writing: false,
            next_lock_check_ms: i64::MAX,
            dlq_queued: VecDeque::new(),
            dlq_writing: false,
        }),
    })
}

/// Where a share partition with no state starts.
fn reset_offset(partition: &Partition, reset: ShareAutoOffsetReset) -> Result<i64, ShareError> {
    let log = &partition.log;
    let high_watermark = partition.snapshot().high_watermark;
    Ok(match reset {
        ShareAutoOffsetReset::Earliest => log.log_start_offset(),
        ShareAutoOffsetReset::Latest => high_watermark,
        ShareAutoOffsetReset::ByDuration { duration_ms } => {
            let found = log
                .offset_for_timestamp(now_ms().saturating_sub(duration_ms))
                .map_err(|e| ShareError::new(ErrorCode::KAFKA_STORAGE_ERROR, e.to_string()))?;
            found.map_or(high_watermark, |t| t.offset.min(high_watermark))
        }
    })
}

impl Slot {
    pub fn key(&self) -> &ShareKey {
        &self.key
    }

    pub fn partition(&self) -> &Arc<Partition> {
        &self.partition
    }

    /// Kafka's `SharePartition.maybeAcquireFetchLock` and `canAcquireRecords`, as
    /// `DelayedShareFetch.acquirablePartitions` asks them: the share partition's fetch lock
    /// if no other fetch holds it, and only when it can acquire anything (there are
    /// records to deliver again, or the in-flight window has room). The group's settings
    /// in force are taken first. A fetch that finds the lock held is woken when it is
    /// released.
    pub fn try_lock_for_fetch(self: &Arc<Self>, broker: &Arc<Broker>) -> Option<FetchLock> {
        let Ok(guard) = self.fetch.clone().try_lock_owned() else {
            self.fetch_contended.store(true, Ordering::Relaxed);
            return None;
        };
        self.last_used_ms.store(now_ms(), Ordering::Relaxed);
        if self.fenced.load(Ordering::Relaxed) {
            return None;
        }
        let config = share_settings(broker, &self.key.group_id).0;
        let fetch_offset = {
            let mut inner = lock(&self.inner);
            inner.machine.set_config(config);
            if !inner.machine.can_acquire_records() {
                return None;
            }
            inner.machine.next_fetch_offset()
        };
        Some(FetchLock { slot: self.clone(), guard: Some(guard), broker: broker.clone(), fetch_offset })
    }

    /// Acknowledges `batches` for `member_id`: answered once the write is durable.
    pub async fn acknowledge(
        self: &Arc<Self>,
        broker: &Arc<Broker>,
        member_id: &str,
        batches: &[AcknowledgementBatch],
    ) -> Result<(), ShareError> {
        self.last_used_ms.store(now_ms(), Ordering::Relaxed);
        let config = share_settings(broker, &self.key.group_id).0;
        let result = async {
            let write = {
                let mut inner = lock(&self.inner);
                inner.machine.set_config(config);
                inner.machine.acknowledge(member_id, now_ms(), batches)?
            };
            let Some(write) = write else { return Ok(()) };
            let (tx, rx) = oneshot::channel();
            self.enqueue(broker, write, Some(tx));
            match rx.await {
                Ok(result) => result.map_err(ShareError::from),
                Err(_) => Err(ShareError::new(ErrorCode::UNKNOWN_SERVER_ERROR, "the share state write was dropped")),
            }
        }
        .await;
        crate::telemetry::share_acknowledgement(result.as_ref().map_or_else(|e| e.code.name(), |()| "ok"));
        result
    }

    /// The acquisition lock the group's records get now.
    pub fn record_lock_duration_ms(&self) -> i64 {
        lock(&self.inner).machine.config().record_lock_duration_ms
    }

    /// Queues `write`, starting the writer when none runs.
    fn enqueue(
        self: &Arc<Self>,
        broker: &Arc<Broker>,
        write: StateWrite,
        reply: Option<oneshot::Sender<Result<(), StateError>>>,
    ) {
        let start = {
            let mut inner = lock(&self.inner);
            inner.queued.push_back(QueuedWrite { id: write.id, state: write.state, reply });
            !std::mem::replace(&mut inner.writing, true)
        };
        if start {
            let (slot, broker) = (self.clone(), broker.clone());
            tokio::spawn(async move { slot.write_queued(&broker).await });
        }
    }

    /// Sends what is queued, merged, one write at a time, until nothing is left.
    async fn write_queued(self: Arc<Self>, broker: &Arc<Broker>) {
        loop {
            let queued: Vec<QueuedWrite> = {
                let mut inner = lock(&self.inner);
                if inner.queued.is_empty() {
                    inner.writing = false;
                    return;
                }
                inner.queued.drain(..).collect()
            };
            let mut merged: Option<WriteState> = None;
            for q in &queued {
                match &mut merged {
                    None => merged = Some(q.state.clone()),
                    Some(m) => merge_writes(m, q.state.clone()),
                }
            }
            let merged = merged.expect("queue was not empty");
            let result = share_persister::write(broker, &self.key, &merged).await;
            crate::telemetry::share_state_write(result.as_ref().map_or_else(|e| e.code.name(), |()| "ok"));
            if let Err(e) = &result {
                if matches!(
                    e.code,
                    ErrorCode::FENCED_STATE_EPOCH | ErrorCode::FENCED_LEADER_EPOCH | ErrorCode::INVALID_REQUEST
                ) {
                    self.fenced.store(true, Ordering::Relaxed);
                }
                tracing::warn!(group = self.key.group_id, topic = %self.partition.topic, partition = self.key.partition, error = e.code.name(), message = e.message, "share state write failed; the acknowledgements it carried are rolled back");
            }
            {
                let mut inner = lock(&self.inner);
                for q in &queued {
                    inner.machine.write_completed(q.id, result.is_ok());
                }
                if result.is_err() {
                    // Rolled back: locks are held again, with their old deadlines.
                    inner.next_lock_check_ms = i64::MIN;
                }
            }
            broker.share_partitions.records_available();
            for q in queued {
                if let Some(reply) = q.reply {
                    let _ = reply.send(result.clone());
                }
            }
            // Acknowledgements' ARCHIVING is durable now: on to the dead-letter queue.
            self.start_dlq_writes(broker);
        }
    }

    /// Queues the machine's new dead-letter queue writes, starting the writer when none
    /// runs.
    fn start_dlq_writes(self: &Arc<Self>, broker: &Arc<Broker>) {
        let start = {
            let mut inner = lock(&self.inner);
            let taken = inner.machine.take_dlq_writes();
            if taken.is_empty() {
                return;
            }
            inner.dlq_queued.extend(taken);
            !std::mem::replace(&mut inner.dlq_writing, true)
        };
        if start {
            let (slot, broker) = (self.clone(), broker.clone());
            tokio::spawn(async move { slot.write_dlq_queued(&broker).await });
        }
    }

    /// Writes the queued dead-letter queue records one write at a time, archiving each
    /// range after its write (or its failure, as Kafka archives regardless).
    async fn write_dlq_queued(self: Arc<Self>, broker: &Arc<Broker>) {
        loop {
            let next = {
                let mut inner = lock(&self.inner);
                if !self.partition.leads_at(self.leader_epoch) {
                    // The new leader loads what is ARCHIVING and writes it: writing it here
                    // too would only duplicate DLQ records.
                    inner.dlq_queued.clear();
                }
                let next = inner.dlq_queued.pop_front();
                if next.is_none() {
                    inner.dlq_writing = false;
                }
                next
            };
            let Some(w) = next else { return };
            let result = crate::share_dlq::write(broker, &self.key.group_id, &self.partition, &w).await;
            let (group, topic, partition) = (&self.key.group_id, &self.partition.topic, self.key.partition);
            match &result {
                Ok(n) => {
                    tracing::debug!(group, topic = %topic, partition, first_offset = w.first_offset, last_offset = w.last_offset, records = n, "records written to the dead-letter queue");
                }
                Err(e) => {
                    tracing::warn!(group, topic = %topic, partition, first_offset = w.first_offset, last_offset = w.last_offset, error = %e, "dead-letter queue write failed; the records are archived without it");
                }
            }
            crate::telemetry::share_dlq_write(
                result.as_ref().map_or("failed", |_| "ok"),
                result.as_ref().map_or(0, |n| *n),
            );
            let write = lock(&self.inner).machine.dlq_write_done(w.first_offset, w.last_offset);
            if let Some(write) = write {
                self.enqueue(broker, write, None);
            }
        }
    }
}

/// A share partition's fetch lock, held by one ShareFetch from choosing where to read
/// until it acquired what it read or gave up (Kafka's `DelayedShareFetch` holding the
/// share partition's fetch lock from `tryComplete` to `onComplete`).
#[derive(Debug)]
pub struct FetchLock {
    slot: Arc<Slot>,
    /// Taken on drop before waiting fetches are woken.
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    broker: Arc<Broker>,
    fetch_offset: i64,
}

impl Drop for FetchLock {
    fn drop(&mut self) {
        drop(self.guard.take());
        if self.slot.fetch_contended.swap(false, Ordering::Relaxed) {
            self.broker.share_partitions.records_available();
        }
    }
}

impl FetchLock {
    /// Reads the log from the share partition's next fetch offset (up to the high
    /// watermark, or the last stable offset for `read_committed`): at most `max_bytes`,
    /// but a whole first batch when `min_one_batch` (Kafka's `readFromLog`).
    pub async fn read(self, max_bytes: usize, min_one_batch: bool) -> FetchRead {
        let slot = self.slot.clone();
        if !slot.partition.leads_at(slot.leader_epoch) {
            let failed = Err(ShareError::new(ErrorCode::NOT_LEADER_OR_FOLLOWER, "leadership moved"));
            return FetchRead { lock: self, outcome: failed, last_stable_offset: -1, read_committed: false };
        }
        let isolation = share_settings(&self.broker, &slot.key.group_id).2;
        let read_committed = isolation == ShareIsolationLevel::ReadCommitted;
        let snapshot = slot.partition.snapshot();
        let bound = if read_committed { snapshot.last_stable_offset } else { snapshot.high_watermark };
        let fetch_offset = self.fetch_offset;
        let outcome = if fetch_offset > bound {
            // Past the end (the log was truncated under it): answered at once, as Kafka's
            // `isMinBytesSatisfied` does for a fetch offset past the end offset.
            Ok(ReadOutcome::PastTheEnd)
        } else if fetch_offset == bound {
            Ok(ReadOutcome::Read(None))
        } else {
            let partition = slot.partition.clone();
            let read = tokio::task::spawn_blocking(move || {
                read_log(&partition, fetch_offset, bound, max_bytes, min_one_batch, read_committed)
            })
            .await
            .unwrap_or_else(|_| Err(ShareError::new(ErrorCode::UNKNOWN_SERVER_ERROR, "read interrupted")));
            match read {
                Ok(read) => Ok(ReadOutcome::Read(Some(read))),
                Err(e) if e.code == ErrorCode::OFFSET_OUT_OF_RANGE => Ok(ReadOutcome::OffsetOutOfRange),
                Err(e) => Err(e),
            }
        };
        FetchRead { lock: self, outcome, last_stable_offset: snapshot.last_stable_offset, read_committed }
    }
}

/// What a ShareFetch read of one share partition, under its fetch lock, waiting to be
/// acquired or given up.
#[derive(Debug)]
pub struct FetchRead {
    lock: FetchLock,
    outcome: Result<ReadOutcome, ShareError>,
    last_stable_offset: i64,
    read_committed: bool,
}

#[derive(Debug)]
enum ReadOutcome {
    /// The log from the fetch offset (None: nothing past it yet).
    Read(Option<LogRead>),
    /// The fetch offset is past the log's end.
    PastTheEnd,
    /// The log start passed the fetch offset (retention, DeleteRecords).
    OffsetOutOfRange,
}

impl FetchRead {
    /// The record bytes read.
    pub fn bytes(&self) -> usize {
        match &self.outcome {
            Ok(ReadOutcome::Read(Some(read))) => read.records.len(),
            _ => 0,
        }
    }

    /// Whether the fetch is answered now whatever it read: a read that failed (Kafka's
    /// `anyPartitionHasLogReadError`) or a fetch offset past the end.
    pub fn completes_the_fetch(&self) -> bool {
        !matches!(self.outcome, Ok(ReadOutcome::Read(_)))
    }

    /// Acquires for `member_id` what was read, at most `max_records` (Kafka's
    /// `ShareFetchUtils.processFetchResponse` and `SharePartition.acquire`), then releases
    /// the fetch lock.
    pub fn acquire(
        self,
        member_id: &str,
        max_records: i32,
        batch_size: i32,
        mode: ShareAcquireMode,
    ) -> Result<Fetched, ShareError> {
        let slot = &self.lock.slot;
        let read = match self.outcome {
            Err(e) => return Err(e),
            Ok(ReadOutcome::Read(Some(read))) => read,
            Ok(ReadOutcome::Read(None) | ReadOutcome::PastTheEnd) => return Ok(Fetched::default()),
            Ok(ReadOutcome::OffsetOutOfRange) => {
                // The records in flight there are gone; the share partition moves on to the
                // log start, and the client fetches again (as Kafka's
                // `ShareFetchUtils.processFetchResponse`).
                let log_start = slot.partition.log.log_start_offset();
                let write = lock(&slot.inner).machine.log_start_moved(log_start);
                if let Some(write) = write {
                    tracing::info!(group = slot.key.group_id, topic = %slot.partition.topic, partition = slot.key.partition, log_start_offset = log_start, "share partition start offset moved to the log start: earlier records were deleted before their delivery completed");
                    slot.enqueue(&self.lock.broker, write, None);
                }
                return Ok(Fetched::default());
            }
        };
        if read.batches.is_empty() || max_records <= 0 {
            return Ok(Fetched::default());
        }
        let isolation = match self.read_committed {
            true => Isolation::ReadCommitted {
                last_stable_offset: self.last_stable_offset,
                aborted_transactions: &read.aborted,
            },
            false => Isolation::ReadUncommitted,
        };
        let request = AcquireRequest {
            fetch_offset: self.lock.fetch_offset,
            batches: &read.batches,
            max_records,
            batch_size,
            mode,
            isolation,
        };
        let acquired = {
            let mut inner = lock(&slot.inner);
            let now = now_ms();
            let acquired = inner.machine.acquire(member_id, now, &request);
            if !acquired.records.is_empty() {
                let deadline = now.saturating_add(inner.machine.config().record_lock_duration_ms);
                inner.next_lock_check_ms = inner.next_lock_check_ms.min(deadline);
            }
            acquired
        };
        if acquired.records.is_empty() {
            return Ok(Fetched::default());
        }
        crate::telemetry::share_records_acquired(acquired.count);
        let records = slice_batches(&read.records, &acquired.records);
        Ok(Fetched { records, acquired: acquired.records, count: acquired.count })
    }
}

/// What a share fetch read of the log.
#[derive(Debug)]
struct LogRead {
    records: Bytes,
    batches: Vec<LogBatch>,
    aborted: Vec<AbortedTransaction>,
}

fn read_log(
    partition: &Partition,
    from: i64,
    bound: i64,
    max_bytes: usize,
    min_one_batch: bool,
    read_committed: bool,
) -> Result<LogRead, ShareError> {
    let log = &partition.log;
    let slice = match log.read_limited(from, max_bytes, bound, min_one_batch) {
        Ok(slice) => slice,
        Err(osprey_storage::StorageError::OffsetOutOfRange { .. }) => {
            return Err(ShareError::new(
                ErrorCode::OFFSET_OUT_OF_RANGE,
                format!("offset {from} is no longer in the log"),
            ));
        }
        Err(e) => {
            tracing::error!(topic = %partition.topic, error = %e, "share fetch read failed");
            let code = if e.is_kafka_storage_error() {
                ErrorCode::KAFKA_STORAGE_ERROR
            } else {
                ErrorCode::UNKNOWN_SERVER_ERROR
            };
            return Err(ShareError::new(code, e.to_string()));
        }
    };
    let mut batches = Vec::new();
    for batch in Batches::new(slice.records.clone()) {
        let Ok(batch) = batch else { break };
        let control = if batch.is_control() {
            let marker = batch
                .records(1 << 20)
                .ok()
                .and_then(|mut records| records.next())
                .and_then(|r| r.ok())
                .and_then(|r| r.key)
                .and_then(|key| ControlRecordType::from_key(&key).ok());
            match marker {
                Some(ControlRecordType::Commit) => Some(ControlMarker::Commit),
                _ => Some(ControlMarker::Abort),
            }
        } else {
            None
        };
        batches.push(LogBatch {
            first_offset: batch.base_offset(),
            last_offset: batch.last_offset(),
            producer_id: batch.producer_id(),
            is_transactional: batch.is_transactional(),
            control,
        });
    }
    let aborted = if read_committed {
        log.aborted_transactions(from, slice.next_offset)
            .into_iter()
            .map(|(producer_id, first_offset)| AbortedTransaction { producer_id, first_offset })
            .collect()
    } else {
        Vec::new()
    };
    Ok(LogRead { records: slice.records, batches, aborted })
}

/// The batches of `records` that hold any acquired offset, in order (Kafka's
/// `maybeSliceFetchRecords`).
fn slice_batches(records: &Bytes, acquired: &[AcquiredRecords]) -> Bytes {
    let mut out = BytesMut::new();
    let mut kept_all = true;
    let mut kept = Vec::new();
    for batch in Batches::new(records.clone()) {
        let Ok(batch) = batch else { break };
        let (first, last) = (batch.base_offset(), batch.last_offset());
        let holds = acquired.iter().any(|a| a.first_offset <= last && a.last_offset >= first);
        if holds {
            kept.push(batch.into_bytes());
        } else {
            kept_all = false;
        }
    }
    if kept_all && !kept.is_empty() {
        return records.clone();
    }
    for b in kept {
        out.extend_from_slice(&b);
    }
    out.freeze()
}
