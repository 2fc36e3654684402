//! The share coordinator: the durable state of share partitions (KIP-932), kept in the
//! `__share_group_state` topic, as Kafka's `ShareCoordinatorShard` keeps it.
//!
//! A share partition's leader (the broker leading the topic partition) holds its
//! in-flight records in memory ([`crate::share`]); what must survive a restart or a
//! leader change (the start offset, and each record's delivery state and count past it)
//! it writes here with WriteShareGroupState and reads back with ReadShareGroupState.
//! Each `group:topic_id:partition` key lives in one partition of `__share_group_state`
//! ([`partition_for`]); its records are a full `ShareSnapshot` now and then and
//! `ShareUpdate`s in between (each a delta, combined with the state before it).
//!
//! # The protocol between the server and the coordinator
//!
//! As the group coordinator's ([`crate::group`]): no I/O, no clock.
//! - Writes ([`ShareStateCoordinator::write`], [`initialize`], [`delete`]) take a
//!   [`ReplyId`] and answer later, as [`Output::Respond`], once the record they produce
//!   ([`Output::Persist`]) is durable and reported with [`persisted`]. Reads
//!   ([`read`], [`read_summary`]) answer at once from the durable state.
//! - One record per key is in flight at a time. Writes to a key that arrive meanwhile
//!   are checked at once (fencing, initialisation) and combined into the next record,
//!   so a busy share partition's acknowledgements share one append (a group commit).
//!   Replaying a record is what changes the state, so the state is always what the
//!   log holds: a failed append changes nothing and its waiters get its error.
//! - On becoming the leader of a `__share_group_state` partition, [`replay`] its
//!   records, oldest first; on losing it, [`unload_partition`] (its waiters get
//!   NOT_COORDINATOR; report its appends still in flight as failed).
//!
//! [`initialize`]: ShareStateCoordinator::initialize
//! [`delete`]: ShareStateCoordinator::delete
//! [`read`]: ShareStateCoordinator::read
//! [`read_summary`]: ShareStateCoordinator::read_summary
//! [`persisted`]: ShareStateCoordinator::persisted
//! [`replay`]: ShareStateCoordinator::replay
//! [`unload_partition`]: ShareStateCoordinator::unload_partition

mod combine;
mod records;

pub use combine::combine;
pub use records::StateLoadError;

use crate::group::{java_string_hash_code, PartitionLoad, PersistId, ReplyId};
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A share partition: the group sharing it and the topic partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShareKey {
    pub group_id: String,
    pub topic_id: Uuid,
    pub partition: i32,
}

impl ShareKey {
    /// Kafka's coordinator key for FindCoordinator (key type SHARE):
    /// `group:topic_id:partition`, the topic id in Kafka's base64 form.
    pub fn coordinator_key(&self) -> String {
        format!("{}:{}:{}", self.group_id, self.topic_id, self.partition)
    }
}

/// The `__share_group_state` partition of `key`: Kafka's
/// `Utils.abs(key.asCoordinatorKey().hashCode()) % share.coordinator.state.topic.num.partitions`.
pub fn partition_for(key: &ShareKey, num_partitions: i32) -> i32 {
    assert!(num_partitions > 0, "share.coordinator.state.topic.num.partitions must be positive");
    let hash = java_string_hash_code(&key.coordinator_key());
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % num_partitions
}

/// A range of offsets with one delivery state (0 available, 2 acknowledged, 4
/// archived) and count, as the state APIs and records carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_state: i8,
    pub delivery_count: i16,
}

/// The state batches of WriteShareGroupState and ReadShareGroupState as the protocol
/// carries them, to and from [`StateBatch`].
macro_rules! wire_state_batch {
    ($($module:ident),+) => {$(
        impl From<&osprey_protocol::messages::$module::StateBatch> for StateBatch {
            fn from(b: &osprey_protocol::messages::$module::StateBatch) -> StateBatch {
                StateBatch {
                    first_offset: b.first_offset,
                    last_offset: b.last_offset,
                    delivery_state: b.delivery_state,
                    delivery_count: b.delivery_count,
                }
            }
        }
        impl From<&StateBatch> for osprey_protocol::messages::$module::StateBatch {
            fn from(b: &StateBatch) -> Self {
                Self {
                    first_offset: b.first_offset,
                    last_offset: b.last_offset,
                    delivery_state: b.delivery_state,
                    delivery_count: b.delivery_count,
                    ..Default::default()
                }
            }
        }
    )+};
}
wire_state_batch!(write_share_group_state_request, read_share_group_state_response);

/// A share partition's durable state (a `ShareSnapshotValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareState {
    pub snapshot_epoch: i32,
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub start_offset: i64,
    /// KIP-1226; -1 when not known.
    pub delivery_complete_count: i32,
    pub create_timestamp: i64,
    pub write_timestamp: i64,
    pub batches: Vec<StateBatch>,
}

/// What a `ShareUpdateValue` carries: a delta on the state before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareUpdate {
    pub snapshot_epoch: i32,
    pub leader_epoch: i32,
    /// -1: unchanged.
    pub start_offset: i64,
    /// -1: unchanged.
    pub delivery_complete_count: i32,
    pub batches: Vec<StateBatch>,
}

/// A record of `__share_group_state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateRecord {
    Snapshot(ShareKey, ShareState),
    Update(ShareKey, ShareUpdate),
    /// The key's state deleted (a `ShareSnapshotKey` with a null value).
    Tombstone(ShareKey),
}

impl StateRecord {
    pub fn key(&self) -> &ShareKey {
        match self {
            StateRecord::Snapshot(key, _) | StateRecord::Update(key, _) | StateRecord::Tombstone(key) => key,
        }
    }
}

/// A WriteShareGroupState for one share partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteState {
    /// -1: not checked.
    pub state_epoch: i32,
    /// -1: not checked.
    pub leader_epoch: i32,
    /// -1: unchanged.
    pub start_offset: i64,
    /// -1: unchanged (WriteShareGroupState v0 has none).
    pub delivery_complete_count: i32,
    pub batches: Vec<StateBatch>,
}

/// ReadShareGroupState's answer for one share partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadState {
    pub state_epoch: i32,
    pub start_offset: i64,
    pub batches: Vec<StateBatch>,
}

/// ReadShareGroupStateSummary's answer for one share partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSummary {
    pub state_epoch: i32,
    pub leader_epoch: i32,
    /// -1 for a share partition with no state (Kafka's `UNINITIALIZED_START_OFFSET`).
    pub start_offset: i64,
    pub delivery_complete_count: i32,
}

/// Why a request about a share partition failed: Kafka's error code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateError {
    pub code: ErrorCode,
    pub message: String,
}

impl StateError {
    fn new(code: ErrorCode, message: impl Into<String>) -> StateError {
        StateError { code, message: message.into() }
    }
}

/// What the coordinator asks of the server.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Answer the held write, initialise or delete `reply`.
    Respond { reply: ReplyId, result: Result<(), StateError> },
    /// Append `record` to `__share_group_state` partition `partition`, then call
    /// [`ShareStateCoordinator::persisted`] with `id`.
    Persist { id: PersistId, partition: i32, record: StateRecord },
}

/// The share coordinator's settings, with Kafka's names and defaults.
#[derive(Debug, Clone)]
pub struct ShareStateConfig {
    /// `share.coordinator.state.topic.num.partitions`
    pub state_topic_num_partitions: i32,
    /// `share.coordinator.snapshot.update.records.per.snapshot`: after this many
    /// `ShareUpdate`s of a key, its next record is a full `ShareSnapshot`.
    pub snapshot_update_records_per_snapshot: u32,
}

impl Default for ShareStateConfig {
    fn default() -> Self {
        ShareStateConfig { state_topic_num_partitions: 50, snapshot_update_records_per_snapshot: 500 }
    }
}

/// One key's state and the writes waiting on it.
#[derive(Debug, Default)]
struct Entry {
    /// What the log holds, replayed; `None`: no state (never initialised, or deleted).
    state: Option<ShareState>,
    /// `ShareUpdate`s replayed since the last `ShareSnapshot`.
    updates_since_snapshot: u32,
    /// The log offset from which this key's records are still needed: its latest
    /// snapshot's (or its first record's, before any snapshot). `None` with no state.
    needed_from: Option<i64>,
    /// The highest leader and state epochs seen, durable or not: fencing applies as soon
    /// as a newer leader has spoken, not only once its record is durable.
    fence_leader_epoch: i32,
    fence_state_epoch: i32,
    in_flight: Option<InFlight>,
    queued: VecDeque<Queued>,
}

#[derive(Debug)]
struct InFlight {
    id: PersistId,
    record: StateRecord,
    waiters: Vec<ReplyId>,
}

/// A change waiting for the key's record in flight; consecutive writes combine.
#[derive(Debug)]
enum Change {
    Write(WriteState),
    Initialize {
        state_epoch: i32,
        start_offset: i64,
    },
    Delete,
    /// A read by a newer leader: its epoch is recorded, as Kafka does.
    LeaderEpoch(i32),
}

#[derive(Debug)]
struct Queued {
    change: Change,
    waiters: Vec<ReplyId>,
    now_ms: i64,
}

/// The share coordinator of the `__share_group_state` partitions this broker leads.
#[derive(Debug)]
pub struct ShareStateCoordinator {
    config: ShareStateConfig,
    entries: HashMap<ShareKey, Entry>,
    /// Which entry each persist in flight belongs to.
    persists: BTreeMap<PersistId, ShareKey>,
    /// The `__share_group_state` partitions served, once the server follows leadership
    /// ([`ShareStateCoordinator::follow_leadership`]); `None`: every partition.
    partitions: Option<BTreeMap<i32, PartitionLoad>>,
    /// Per partition, the offset after the last record replayed.
    log_ends: HashMap<i32, i64>,
    next_persist: u64,
    outputs: VecDeque<Output>,
}

impl ShareStateCoordinator {
    pub fn new(config: ShareStateConfig) -> ShareStateCoordinator {
        ShareStateCoordinator {
            config,
            entries: HashMap::new(),
            persists: BTreeMap::new(),
            partitions: None,
            log_ends: HashMap::new(),
            next_persist: 0,
            outputs: VecDeque::new(),
        }
    }

    /// The next thing the server must do.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The `__share_group_state` partition of `key` under this coordinator's settings.
    pub fn partition_of(&self, key: &ShareKey) -> i32 {
        partition_for(key, self.config.state_topic_num_partitions)
    }

    /// InitializeShareGroupState: a fresh state for `key` at `start_offset` (-1: the
    /// share partition resolves `share.auto.offset.reset` when it first loads), replacing
    /// whatever was there. FENCED_STATE_EPOCH when a newer state epoch has been seen.
    pub fn initialize(&mut self, reply: ReplyId, key: ShareKey, state_epoch: i32, start_offset: i64, now_ms: i64) {
        if let Err(e) = self.check_serving(&key) {
            self.respond(reply, Err(e));
            return;
        }
        let entry = self.entries.entry(key.clone()).or_default();
        if state_epoch != -1 && entry.fence_state_epoch > state_epoch {
            let message = format!("state epoch {state_epoch} is older than {}", entry.fence_state_epoch);
            self.respond(reply, Err(StateError::new(ErrorCode::FENCED_STATE_EPOCH, message)));
            return;
        }
        entry.fence_state_epoch = entry.fence_state_epoch.max(state_epoch);
        self.enqueue(key, Change::Initialize { state_epoch, start_offset }, Some(reply), now_ms);
    }

    /// WriteShareGroupState for one share partition: answered once durable.
    pub fn write(&mut self, reply: ReplyId, key: ShareKey, write: WriteState, now_ms: i64) {
        if let Err(e) = self.check_serving(&key).and_then(|()| self.check_write(&key, &write)) {
            self.respond(reply, Err(e));
            return;
        }
        let entry = self.entries.get_mut(&key).expect("checked: the key has state");
        entry.fence_leader_epoch = entry.fence_leader_epoch.max(write.leader_epoch);
        self.enqueue(key, Change::Write(write), Some(reply), now_ms);
    }

    /// ReadShareGroupState: the durable state. A read by a leader with a newer epoch
    /// records that epoch (fencing the older leader's writes at once, and durably once
    /// its record is appended).
    pub fn read(&mut self, key: &ShareKey, leader_epoch: i32, now_ms: i64) -> Result<ReadState, StateError> {
        self.check_serving(key)?;
        let entry = self.initialised(key, "read")?;
        let Some(state) = entry.state.as_ref() else {
            // Initialising: reads see durable state only.
            return Err(StateError::new(
                ErrorCode::INVALID_REQUEST,
                "read operation on uninitialized share partition not allowed",
            ));
        };
        if entry.fence_leader_epoch > leader_epoch {
            let message = format!("leader epoch {leader_epoch} is older than {}", entry.fence_leader_epoch);
            return Err(StateError::new(ErrorCode::FENCED_LEADER_EPOCH, message));
        }
        let read = ReadState {
            state_epoch: state.state_epoch,
            start_offset: state.start_offset,
            batches: state.batches.clone(),
        };
        if leader_epoch != -1 && leader_epoch > entry.fence_leader_epoch {
            let entry = self.entries.get_mut(key).expect("initialised");
            entry.fence_leader_epoch = leader_epoch;
            self.enqueue(key.clone(), Change::LeaderEpoch(leader_epoch), None, now_ms);
        }
        Ok(read)
    }

    /// ReadShareGroupStateSummary: start offset and epochs, or -1s for a share
    /// partition with no state.
    pub fn read_summary(&self, key: &ShareKey) -> StateSummary {
        match self.entries.get(key).and_then(|e| e.state.as_ref()) {
            Some(s) => StateSummary {
                state_epoch: s.state_epoch,
                leader_epoch: s.leader_epoch,
                start_offset: s.start_offset,
                delivery_complete_count: s.delivery_complete_count,
            },
            None => StateSummary { state_epoch: 0, leader_epoch: -1, start_offset: -1, delivery_complete_count: -1 },
        }
    }

    /// DeleteShareGroupState: a tombstone for `key` (answered at once when it has no
    /// state).
    pub fn delete(&mut self, reply: ReplyId, key: ShareKey, now_ms: i64) {
        if let Err(e) = self.check_serving(&key) {
            self.respond(reply, Err(e));
            return;
        }
        let known =
            self.entries.get(&key).is_some_and(|e| e.state.is_some() || e.in_flight.is_some() || !e.queued.is_empty());
        if !known {
            self.respond(reply, Ok(()));
            return;
        }
        self.enqueue(key, Change::Delete, Some(reply), now_ms);
    }

    /// The append of persist `id` is durable at log offset `Ok(offset)`, or failed with
    /// `Err(code)`.
    pub fn persisted(&mut self, id: PersistId, result: Result<i64, ErrorCode>, now_ms: i64) {
        let Some(key) = self.persists.remove(&id) else { return };
        let partition = self.partition_of(&key);
        let Some(entry) = self.entries.get_mut(&key) else { return };
        let Some(in_flight) = entry.in_flight.take_if(|f| f.id == id) else { return };
        let answer = match result {
            Ok(offset) => {
                apply(entry, offset, &in_flight.record);
                let end = self.log_ends.entry(partition).or_insert(0);
                *end = (*end).max(offset + 1);
                Ok(())
            }
            // As Kafka's share coordinator answers a failed write: a moved leader or a
            // failed disk is NOT_COORDINATOR, too few replicas COORDINATOR_NOT_AVAILABLE.
            Err(code) => Err(StateError::new(
                crate::group::append_error_to_response(code),
                format!("the share state append failed ({})", code.name()),
            )),
        };
        for reply in in_flight.waiters {
            self.respond(reply, answer.clone());
        }
        self.issue_next(&key, now_ms);
    }

    /// Replays the record at `offset` of `__share_group_state` (loading a partition).
    pub fn replay(&mut self, offset: i64, record: &StateRecord) {
        let end = self.log_ends.entry(self.partition_of(record.key())).or_insert(0);
        *end = (*end).max(offset + 1);
        let entry = self.entries.entry(record.key().clone()).or_default();
        apply(entry, offset, record);
        if entry.state.is_none() && entry.in_flight.is_none() && entry.queued.is_empty() {
            self.entries.remove(record.key());
        }
    }

    /// This broker no longer leads `__share_group_state` partition `partition`: its keys
    /// are dropped and their waiters answered NOT_COORDINATOR. Returns the persists still
    /// in flight there, which the server need not report any more.
    pub fn unload_partition(&mut self, partition: i32) -> Vec<PersistId> {
        if let Some(partitions) = &mut self.partitions {
            partitions.remove(&partition);
        }
        self.log_ends.remove(&partition);
        let keys: Vec<ShareKey> = self.entries.keys().filter(|k| self.partition_of(k) == partition).cloned().collect();
        let mut dropped = Vec::new();
        for key in keys {
            let entry = self.entries.remove(&key).expect("listed");
            let waiters = entry
                .in_flight
                .iter()
                .flat_map(|f| f.waiters.iter())
                .chain(entry.queued.iter().flat_map(|q| q.waiters.iter()));
            let waiters: Vec<ReplyId> = waiters.copied().collect();
            if let Some(f) = entry.in_flight {
                self.persists.remove(&f.id);
                dropped.push(f.id);
            }
            for reply in waiters {
                self.respond(reply, Err(StateError::new(ErrorCode::NOT_COORDINATOR, "the share coordinator moved")));
            }
        }
        dropped
    }

    /// The durable state of `key`, if any.
    pub fn state(&self, key: &ShareKey) -> Option<&ShareState> {
        self.entries.get(key).and_then(|e| e.state.as_ref())
    }

    /// From now on, serve only the `__share_group_state` partitions handed over with
    /// [`begin_load`](Self::begin_load) (a coordinator made with `new` serves them all).
    pub fn follow_leadership(&mut self) {
        let all: Vec<i32> = (0..self.config.state_topic_num_partitions).collect();
        for partition in all {
            self.unload_partition(partition);
        }
        self.partitions = Some(BTreeMap::new());
    }

    /// This broker became the leader of `partition` at leader epoch `epoch`: its keys
    /// answer COORDINATOR_LOAD_IN_PROGRESS until [`finish_load`](Self::finish_load).
    pub fn begin_load(&mut self, partition: i32, epoch: i32) -> Vec<PersistId> {
        let dropped =
            if self.partition_load(partition).is_some() { self.unload_partition(partition) } else { Vec::new() };
        if let Some(partitions) = &mut self.partitions {
            partitions.insert(partition, PartitionLoad::Loading { epoch });
        }
        dropped
    }

    /// The records of `partition`, with their offsets, read for the load begun at
    /// `epoch`, oldest first. Returns false when that load is no longer wanted (the
    /// partition was unloaded, or a newer epoch began loading): nothing is replayed.
    pub fn finish_load(
        &mut self,
        partition: i32,
        epoch: i32,
        records: impl IntoIterator<Item = (i64, StateRecord)>,
    ) -> bool {
        if self.partition_load(partition) != Some(PartitionLoad::Loading { epoch }) {
            return false;
        }
        for (offset, record) in records {
            if self.partition_of(record.key()) == partition {
                self.replay(offset, &record);
            }
        }
        if let Some(partitions) = &mut self.partitions {
            partitions.insert(partition, PartitionLoad::Loaded { epoch });
        }
        true
    }

    /// Where `partition` stands, if this coordinator follows leadership and holds it.
    pub fn partition_load(&self, partition: i32) -> Option<PartitionLoad> {
        self.partitions.as_ref()?.get(&partition).copied()
    }

    /// The leader epoch `partition` was loaded at; `None` when it is not served here
    /// (`Some(-1)` when this coordinator serves every partition).
    pub fn loaded_epoch(&self, partition: i32) -> Option<i32> {
        match &self.partitions {
            None => Some(-1),
            Some(p) => match p.get(&partition) {
                Some(PartitionLoad::Loaded { epoch }) => Some(*epoch),
                _ => None,
            },
        }
    }

    /// NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS when `key`'s partition is not
    /// served here (yet): the server answers it before calling in. `None` when served.
    pub fn serving_error(&self, key: &ShareKey) -> Option<ErrorCode> {
        let partitions = self.partitions.as_ref()?;
        match partitions.get(&self.partition_of(key)) {
            Some(PartitionLoad::Loaded { .. }) => None,
            Some(PartitionLoad::Loading { .. }) => Some(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
            None => Some(ErrorCode::NOT_COORDINATOR),
        }
    }

    /// The offset below which `partition`'s records are no longer needed (each key's
    /// latest snapshot holds all before it): the server may delete records below it, as
    /// Kafka prunes `__share_group_state` (its `lastRedundantOffset`). `None` when
    /// nothing has been replayed there.
    pub fn redundant_offset(&self, partition: i32) -> Option<i64> {
        let end = *self.log_ends.get(&partition)?;
        let needed = self
            .entries
            .iter()
            .filter(|(key, _)| self.partition_of(key) == partition)
            .filter_map(|(_, entry)| entry.needed_from)
            .min();
        Some(needed.unwrap_or(end))
    }

    /// Checks the coordinator's invariants (tests call it after every step).
    pub fn check_invariants(&self) {
        for (key, entry) in &self.entries {
            if let Some(state) = &entry.state {
                for pair in state.batches.windows(2) {
                    assert!(pair[0].last_offset < pair[1].first_offset, "{key:?}: batches overlap: {pair:?}");
                }
                if let Some(first) = state.batches.first() {
                    assert!(
                        state.start_offset < 0 || first.first_offset >= state.start_offset,
                        "{key:?}: a batch below the start offset"
                    );
                }
                assert!(
                    entry.fence_leader_epoch >= state.leader_epoch,
                    "{key:?}: fence below the durable leader epoch"
                );
            }
            if let Some(f) = &entry.in_flight {
                assert_eq!(self.persists.get(&f.id), Some(key), "{key:?}: in-flight persist not indexed");
            } else {
                assert!(entry.queued.is_empty(), "{key:?}: changes queued with nothing in flight");
            }
        }
        for (id, key) in &self.persists {
            let in_flight = self.entries.get(key).and_then(|e| e.in_flight.as_ref());
            assert_eq!(in_flight.map(|f| f.id), Some(*id), "persist {id:?} indexed for {key:?} but not in flight");
        }
    }

    /// NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS when `key`'s partition is not
    /// served from here now ([`Self::serving_error`]), as Kafka's coordinator runtime
    /// answers before its shard sees the request.
    fn check_serving(&self, key: &ShareKey) -> Result<(), StateError> {
        match self.serving_error(key) {
            Some(code) => Err(StateError::new(
                code,
                format!("{}: this broker is not the share coordinator of the share partition now", code.name()),
            )),
            None => Ok(()),
        }
    }

    fn check_write(&self, key: &ShareKey, write: &WriteState) -> Result<(), StateError> {
        let entry = self.initialised(key, "write")?;
        if write.leader_epoch != -1 && entry.fence_leader_epoch > write.leader_epoch {
            let message = format!("leader epoch {} is older than {}", write.leader_epoch, entry.fence_leader_epoch);
            return Err(StateError::new(ErrorCode::FENCED_LEADER_EPOCH, message));
        }
        if write.state_epoch != -1 && entry.fence_state_epoch > write.state_epoch {
            let message = format!("state epoch {} is older than {}", write.state_epoch, entry.fence_state_epoch);
            return Err(StateError::new(ErrorCode::FENCED_STATE_EPOCH, message));
        }
        Ok(())
    }

    /// The entry of `key` if it has state, durable or initialising; Kafka answers
    /// INVALID_REQUEST for reads and writes of uninitialised share partitions.
    fn initialised(&self, key: &ShareKey, what: &str) -> Result<&Entry, StateError> {
        let initialising = |e: &Entry| {
            e.queued.iter().any(|q| matches!(q.change, Change::Initialize { .. }))
                || e.in_flight.as_ref().is_some_and(|f| matches!(f.record, StateRecord::Snapshot(..)))
        };
        match self.entries.get(key) {
            Some(e) if e.state.is_some() || initialising(e) => Ok(e),
            _ => Err(StateError::new(
                ErrorCode::INVALID_REQUEST,
                format!("{what} operation on uninitialized share partition not allowed"),
            )),
        }
    }

    fn respond(&mut self, reply: ReplyId, result: Result<(), StateError>) {
        self.outputs.push_back(Output::Respond { reply, result });
    }

    /// Queues `change` (combined with a queued write before it where both are writes)
    /// and issues it at once if nothing is in flight for `key`.
    fn enqueue(&mut self, key: ShareKey, change: Change, reply: Option<ReplyId>, now_ms: i64) {
        let entry = self.entries.entry(key.clone()).or_default();
        let waiters: Vec<ReplyId> = reply.into_iter().collect();
        match (entry.queued.back_mut(), change) {
            (Some(last), Change::Write(next)) if matches!(last.change, Change::Write(_)) => {
                let Change::Write(earlier) = &mut last.change else { unreachable!("matched") };
                merge_writes(earlier, next);
                last.waiters.extend(waiters);
                last.now_ms = now_ms;
            }
            (_, change) => entry.queued.push_back(Queued { change, waiters, now_ms }),
        }
        if entry.in_flight.is_none() {
            self.issue_next(&key, now_ms);
        }
    }

    /// Turns the next queued change of `key` into a record and asks for its append.
    fn issue_next(&mut self, key: &ShareKey, now_ms: i64) {
        let partition = self.partition_of(key);
        let per_snapshot = self.config.snapshot_update_records_per_snapshot;
        let Some(entry) = self.entries.get_mut(key) else { return };
        while entry.in_flight.is_none() {
            let Some(next) = entry.queued.pop_front() else { break };
            let record = match record_for(key, entry, next.change, per_snapshot, next.now_ms.max(now_ms)) {
                Ok(Some(record)) => record,
                Ok(None) => {
                    // Nothing to write (deleting a key with no state).
                    for reply in next.waiters {
                        self.outputs.push_back(Output::Respond { reply, result: Ok(()) });
                    }
                    continue;
                }
                Err(e) => {
                    for reply in next.waiters {
                        self.outputs.push_back(Output::Respond { reply, result: Err(e.clone()) });
                    }
                    continue;
                }
            };
            let id = PersistId(self.next_persist);
            self.next_persist += 1;
            self.persists.insert(id, key.clone());
            self.outputs.push_back(Output::Persist { id, partition, record: record.clone() });
            entry.in_flight = Some(InFlight { id, record, waiters: next.waiters });
        }
        if entry.state.is_none() && entry.in_flight.is_none() && entry.queued.is_empty() {
            self.entries.remove(key);
        }
    }
}

/// A second write to the same key before the first was issued: one write with both
/// (batches combined, the later start offset and epochs). Also what a share partition
/// leader uses to send the writes queued behind one in flight as one request.
pub fn merge_writes(earlier: &mut WriteState, later: WriteState) {
    let start = earlier.start_offset.max(later.start_offset);
    earlier.batches = combine(&earlier.batches, &later.batches, start);
    earlier.start_offset = start;
    earlier.state_epoch = earlier.state_epoch.max(later.state_epoch);
    earlier.leader_epoch = earlier.leader_epoch.max(later.leader_epoch);
    if later.delivery_complete_count != -1 {
        earlier.delivery_complete_count = later.delivery_complete_count;
    }
}

/// The record a change makes, given the durable state before it (which, one record in
/// flight at a time, is what the record will be replayed onto).
fn record_for(
    key: &ShareKey,
    entry: &Entry,
    change: Change,
    per_snapshot: u32,
    now_ms: i64,
) -> Result<Option<StateRecord>, StateError> {
    let key = key.clone();
    let current = entry.state.as_ref();
    let record = match change {
        Change::Initialize { state_epoch, start_offset } => StateRecord::Snapshot(
            key,
            ShareState {
                snapshot_epoch: current.map_or(0, |s| s.snapshot_epoch + 1),
                state_epoch,
                // As Kafka's `ShareGroupOffset.fromRequest(InitializeShareGroupState...)`:
                // leader epoch 0, and no records done at a known start offset (so the
                // group's lag is known: DescribeShareGroupOffsets v1).
                leader_epoch: 0,
                start_offset,
                delivery_complete_count: if start_offset == -1 { -1 } else { 0 },
                create_timestamp: now_ms,
                write_timestamp: now_ms,
                batches: Vec::new(),
            },
        ),
        Change::Delete => match current {
            Some(_) => StateRecord::Tombstone(key),
            None => return Ok(None),
        },
        Change::LeaderEpoch(leader_epoch) => {
            let write = WriteState {
                state_epoch: -1,
                leader_epoch,
                start_offset: -1,
                delivery_complete_count: -1,
                batches: Vec::new(),
            };
            return record_for(&key, entry, Change::Write(write), per_snapshot, now_ms);
        }
        Change::Write(write) => {
            let Some(current) = current else {
                // Deleted meanwhile (a tombstone went first).
                return Err(StateError::new(
                    ErrorCode::INVALID_REQUEST,
                    "write operation on uninitialized share partition not allowed",
                ));
            };
            let leader_epoch = if write.leader_epoch != -1 {
                write.leader_epoch.max(current.leader_epoch)
            } else {
                current.leader_epoch
            };
            if entry.updates_since_snapshot >= per_snapshot {
                let start_offset = if write.start_offset == -1 { current.start_offset } else { write.start_offset };
                StateRecord::Snapshot(
                    key,
                    ShareState {
                        snapshot_epoch: current.snapshot_epoch + 1,
                        state_epoch: current.state_epoch,
                        leader_epoch,
                        start_offset,
                        delivery_complete_count: if write.delivery_complete_count == -1 {
                            current.delivery_complete_count
                        } else {
                            write.delivery_complete_count
                        },
                        create_timestamp: now_ms,
                        write_timestamp: now_ms,
                        batches: combine(&current.batches, &write.batches, start_offset),
                    },
                )
            } else {
                StateRecord::Update(
                    key,
                    ShareUpdate {
                        snapshot_epoch: current.snapshot_epoch,
                        leader_epoch,
                        start_offset: write.start_offset,
                        delivery_complete_count: write.delivery_complete_count,
                        batches: combine(&[], &write.batches, write.start_offset),
                    },
                )
            }
        }
    };
    Ok(Some(record))
}

/// Replays `record`, at log offset `offset`, onto `entry`'s durable state, as Kafka's
/// shard does.
fn apply(entry: &mut Entry, offset: i64, record: &StateRecord) {
    match record {
        StateRecord::Snapshot(_, state) => {
            entry.needed_from = Some(offset);
            entry.fence_leader_epoch = entry.fence_leader_epoch.max(state.leader_epoch);
            entry.fence_state_epoch = entry.fence_state_epoch.max(state.state_epoch);
            entry.state = Some(state.clone());
            entry.updates_since_snapshot = 0;
        }
        StateRecord::Update(_, update) => {
            entry.needed_from.get_or_insert(offset);
            entry.fence_leader_epoch = entry.fence_leader_epoch.max(update.leader_epoch);
            entry.updates_since_snapshot += 1;
            let Some(state) = entry.state.as_mut() else {
                // An update with no snapshot before it (Kafka takes it as the state).
                entry.state = Some(ShareState {
                    snapshot_epoch: update.snapshot_epoch,
                    state_epoch: 0,
                    leader_epoch: update.leader_epoch,
                    start_offset: update.start_offset,
                    delivery_complete_count: update.delivery_complete_count,
                    create_timestamp: -1,
                    write_timestamp: -1,
                    batches: update.batches.clone(),
                });
                return;
            };
            if update.start_offset != -1 {
                state.start_offset = update.start_offset;
            }
            if update.leader_epoch != -1 {
                state.leader_epoch = update.leader_epoch;
            }
            if update.delivery_complete_count != -1 {
                state.delivery_complete_count = update.delivery_complete_count;
            }
            state.batches = combine(&state.batches, &update.batches, state.start_offset);
        }
        StateRecord::Tombstone(_) => {
            entry.needed_from = None;
            entry.state = None;
            entry.updates_since_snapshot = 0;
        }
    }
}
