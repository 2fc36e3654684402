//! Helpers shared by the share-partition tests: a log of batches, fetches that read it as
//! the server would, acknowledgements, and a store that combines writes as the share
//! coordinator does.
#![allow(dead_code)]

use osprey_coordinator::share::{
    AcknowledgeError, AcknowledgeType, AcknowledgementBatch, AcquireRequest, Acquired, Isolation, LogBatch, ReadState,
    RecordState, ShareAcquireMode, ShareConfig, SharePartition, StateBatch, StateWrite, WriteState,
};
use osprey_coordinator::share_state::combine;

pub const LOCK_MS: i64 = 30_000;

pub fn config() -> ShareConfig {
    ShareConfig {
        record_lock_duration_ms: LOCK_MS,
        delivery_count_limit: 5,
        partition_max_record_locks: 2000,
        ..Default::default()
    }
}

/// A partition with no persisted state, starting at `start` (share.auto.offset.reset).
pub fn fresh(config: ShareConfig, start: i64) -> SharePartition {
    SharePartition::load(config, 7, &uninitialized(), Some(start)).expect("loads")
}

/// ReadShareGroupState's answer for a partition with no state.
pub fn uninitialized() -> ReadState {
    ReadState { state_epoch: 0, start_offset: -1, batches: Vec::new() }
}

/// What a reader gets back after `write` replaced the state (a snapshot).
pub fn as_read(write: &WriteState) -> ReadState {
    ReadState { state_epoch: write.state_epoch, start_offset: write.start_offset, batches: write.batches.clone() }
}

/// Data batches of `size` records from `first` up to `end` (exclusive).
pub fn log(first: i64, end: i64, size: i64) -> Vec<LogBatch> {
    (first..end).step_by(size as usize).map(|f| LogBatch::data(f, (f + size - 1).min(end - 1))).collect()
}

/// The batches of `log` the server reads from `offset`.
pub fn read_from(log: &[LogBatch], offset: i64) -> Vec<LogBatch> {
    log.iter().filter(|b| b.last_offset >= offset).copied().collect()
}

/// A ShareFetch as the server runs it: read from the next fetch offset, acquire.
pub fn fetch(sp: &mut SharePartition, member: &str, now: i64, log: &[LogBatch], max_records: i32) -> Acquired {
    fetch_with(sp, member, now, log, max_records, ShareAcquireMode::BatchOptimized, i32::MAX)
}

pub fn fetch_with(
    sp: &mut SharePartition,
    member: &str,
    now: i64,
    log: &[LogBatch],
    max_records: i32,
    mode: ShareAcquireMode,
    batch_size: i32,
) -> Acquired {
    let fetch_offset = sp.next_fetch_offset();
    let batches = read_from(log, fetch_offset);
    let request = AcquireRequest {
        fetch_offset,
        batches: &batches,
        max_records,
        batch_size,
        mode,
        isolation: Isolation::ReadUncommitted,
    };
    sp.acquire(member, now, &request)
}

pub fn ack_batch(first: i64, last: i64, ack: AcknowledgeType) -> AcknowledgementBatch {
    AcknowledgementBatch { first_offset: first, last_offset: last, acknowledge_types: vec![ack.id()] }
}

/// Acknowledges `first..=last` with one type; the write, if any.
pub fn ack(
    sp: &mut SharePartition,
    member: &str,
    now: i64,
    first: i64,
    last: i64,
    ack: AcknowledgeType,
) -> Result<Option<StateWrite>, AcknowledgeError> {
    sp.acknowledge(member, now, &[ack_batch(first, last, ack)])
}

/// Acknowledges and reports the write durable at once.
pub fn ack_durably(sp: &mut SharePartition, member: &str, now: i64, first: i64, last: i64, t: AcknowledgeType) {
    if let Some(write) = ack(sp, member, now, first, last, t).expect("acknowledged") {
        sp.write_completed(write.id, true);
    }
    sp.check_invariants().unwrap();
}

/// The state and delivery count of `offset`.
pub fn state(sp: &SharePartition, offset: i64) -> (RecordState, i16) {
    let view = sp.record_state(offset).unwrap_or_else(|| panic!("offset {offset} not in flight"));
    (view.state, view.delivery_count)
}

/// The share coordinator's side, for tests: the durable state, each write combined into it
/// with the share coordinator's own combiner.
#[derive(Debug, Clone)]
pub struct Store {
    pub state: ReadState,
}

impl Default for Store {
    fn default() -> Self {
        Store { state: uninitialized() }
    }
}

impl Store {
    pub fn new() -> Store {
        Store::default()
    }

    pub fn apply(&mut self, write: &StateWrite) {
        let w = &write.state;
        self.state.state_epoch = w.state_epoch;
        if w.start_offset >= 0 {
            self.state.start_offset = w.start_offset;
        }
        self.state.batches = combine(&self.state.batches, &w.batches, self.state.start_offset);
    }

    /// What ReadShareGroupState answers.
    pub fn read(&self) -> ReadState {
        self.state.clone()
    }

    /// The durable (delivery state, delivery count) of `offset`, if any batch holds it.
    pub fn state_of(&self, offset: i64) -> Option<(i8, i16)> {
        self.state
            .batches
            .iter()
            .find(|b: &&StateBatch| b.first_offset <= offset && offset <= b.last_offset)
            .map(|b| (b.delivery_state, b.delivery_count))
    }
}
