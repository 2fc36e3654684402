//! The share-partition state machine of KIP-932 (share groups, "queues"), as Kafka's
//! `SharePartition` (core/src/main/java/kafka/server/share/SharePartition.java) keeps it:
//! the state the leader of a topic partition holds for one share group, namely which
//! records are in flight, in which [`RecordState`], with which delivery count, acquired by
//! which member and until when.
//!
//! No I/O, no clock, no tokio: every input takes `now_ms`; state changes that must be
//! durable come back as a [`StateWrite`] for the server to send with WriteShareGroupState.
//!
//! # Offsets
//!
//! - The start offset (SPSO, [`SharePartition::start_offset`]): every record below it is
//!   ACKNOWLEDGED or ARCHIVED and is never delivered again. It moves past any prefix of
//!   such records, and the cache drops the batches wholly below it.
//! - The end offset (SPEO, [`SharePartition::end_offset`]): the first offset past the
//!   records in flight. Kafka's `endOffset` is the last offset in flight (inclusive);
//!   here it is exclusive, so that `end_offset - start_offset` is the number of records
//!   in flight and an empty cache has `start_offset == end_offset`.
//! - Every offset in `[start_offset, end_offset)` has exactly one state. The in-flight
//!   records are kept per log batch where possible (one state for the whole batch) and
//!   split into one state per offset (Kafka's `offsetState`) once something happens to
//!   part of a batch.
//!
//! # The protocol between the server and the machine
//!
//! - On becoming the leader of the partition, ReadShareGroupState and [`load`] the result. When the state was never initialised (start offset -1), the
//!   server resolves `share.auto.offset.reset` ([`ShareAutoOffsetReset`]) against the log
//!   and passes the offset. Records persisted as ACQUIRED come back AVAILABLE. The
//!   persisted shapes ([`ReadState`], [`WriteState`], [`StateBatch`]) are the share
//!   coordinator's ([`crate::share_state`]).
//! - ShareFetch: read the log from [`next_fetch_offset`] (when [`can_acquire_records`]),
//!   then [`acquire`] with the batches read. It returns the AcquiredRecords of the
//!   response. Acquisition is not persisted (as in Kafka: a restart makes acquired records
//!   available again).
//! - ShareAcknowledge (and ShareFetch's acknowledgements): [`acknowledge`]. The changes
//!   take effect at once (other members see the new state; records in transition cannot be
//!   acquired or acknowledged again until it completes), and the returned [`StateWrite`]
//!   must be sent with WriteShareGroupState. **The server answers the client only once the
//!   write has completed**, and reports it with [`write_completed`]: on success the
//!   transitions are committed and the start offset may move; on failure they are rolled
//!   back to what they were (as Kafka's `InFlightState.completeStateTransition(false)`),
//!   and the client gets the write's error.
//! - Member leaving, or its share session closing: [`release_member`]; persist its write
//!   the same way.
//! - Acquisition locks: call [`tick`] at [`next_deadline`] (or on a period); records whose
//!   lock expired become AVAILABLE (ARCHIVED at the delivery limit). Its write is
//!   persisted but, as in Kafka, not rolled back if it fails.
//! - Dead-letter queue (KIP-1191): after a load, a completed write or a tick,
//!   [`take_dlq_writes`] hands out the ARCHIVING records to write to the group's DLQ
//!   topic; report each with [`dlq_write_done`] and persist the write it returns.
//! - [`to_persisted`] is the full durable view (a snapshot) to write at will.
//! - [`check_invariants`] checks the machine's invariants (tests run it after every step).
//!
//! Writes carry the state epoch read at load and the leader epoch given to [`load`] (the
//! share coordinator fences writes of a stale leader); the machine never bumps either:
//! in Kafka the partition's new leader epoch comes with the leadership, and the state
//! epoch is bumped by the share coordinator (InitializeShareGroupState), not by
//! `SharePartition`.
//!
//! [`load`]: SharePartition::load
//! [`next_fetch_offset`]: SharePartition::next_fetch_offset
//! [`can_acquire_records`]: SharePartition::can_acquire_records
//! [`acquire`]: SharePartition::acquire
//! [`acknowledge`]: SharePartition::acknowledge
//! [`write_completed`]: SharePartition::write_completed
//! [`release_member`]: SharePartition::release_member
//! [`tick`]: SharePartition::tick
//! [`next_deadline`]: SharePartition::next_deadline
//! [`take_dlq_writes`]: SharePartition::take_dlq_writes
//! [`dlq_write_done`]: SharePartition::dlq_write_done
//! [`to_persisted`]: SharePartition::to_persisted
//! [`check_invariants`]: SharePartition::check_invariants

mod acknowledge;
mod acquire;
mod cache;
mod config;
mod dlq;
mod expiry;
mod invariants;
mod persisted;
mod transactions;

/// The persisted shapes are the share coordinator's: what ReadShareGroupState answers and
/// WriteShareGroupState carries.
pub use crate::share_state::{ReadState, StateBatch, WriteState};
pub use acknowledge::{AcknowledgeError, AcknowledgeType, AcknowledgementBatch};
pub use acquire::{
    AbortedTransaction, AcquireRequest, Acquired, AcquiredRecords, ControlMarker, Isolation, LogBatch, ShareAcquireMode,
};
pub use cache::{DlqCause, RecordState, RecordView};
pub use config::{ShareAutoOffsetReset, ShareConfig};
pub use dlq::DlqWrite;
pub use persisted::{LoadError, StateWrite, WriteId};

use cache::InFlightBatch;
use std::collections::BTreeMap;

/// The state of one share partition (one share group, one topic partition) on its leader.
#[derive(Debug, Clone)]
pub struct SharePartition {
    config: ShareConfig,
    leader_epoch: i32,
    state_epoch: i32,
    /// SPSO: the first offset that is not known to be ACKNOWLEDGED or ARCHIVED.
    start_offset: i64,
    /// SPEO, exclusive: the first offset past the in-flight records.
    end_offset: i64,
    /// The in-flight batches by first offset, contiguous from at most `start_offset` to
    /// `end_offset - 1`. The first may start below `start_offset` (only whole batches
    /// are dropped); its offsets there are all ACKNOWLEDGED or ARCHIVED.
    cache: BTreeMap<i64, InFlightBatch>,
    /// The end offset right after load: a persisted state larger than the window is
    /// loaded as is, and only acquisitions past it are held to the window.
    loaded_end_offset: i64,
    /// The largest delivery count limit and window in force since load: records acquired
    /// or released under a larger setting keep their delivery counts and stay in flight
    /// when the group's setting is lowered, and the invariants are checked against these.
    largest_delivery_count_limit: i16,
    largest_window: i64,
    next_write_id: u64,
    /// Some record may be ARCHIVING with its dead-letter queue write not handed out yet:
    /// [`Self::take_dlq_writes`] looks through the cache only then (it runs after every
    /// write).
    dlq_waiting: bool,
}

impl SharePartition {
    /// The settings this partition runs with.
    pub fn config(&self) -> &ShareConfig {
        &self.config
    }

    /// Takes the group's settings in force now (a group config changed), as Kafka's
    /// `SharePartition` reads them from the group's config at each use: the lock duration
    /// for acquisitions and renewals from now on (locks held keep their deadline); the
    /// delivery count limit for the next acquisition, release or lock expiry (a record
    /// already AVAILABLE at or past a lowered limit is delivered once more and archived
    /// after, as in Kafka); the window for the next acquisition (records in flight beyond
    /// a lowered window stay); whether RENEW is taken for the next acknowledgement.
    pub fn set_config(&mut self, config: ShareConfig) {
        self.largest_delivery_count_limit = self.largest_delivery_count_limit.max(config.delivery_count_limit);
        self.largest_window = self.largest_window.max(config.max_record_locks());
        self.config = config;
    }

    /// SPSO: every record below it is ACKNOWLEDGED or ARCHIVED.
    pub fn start_offset(&self) -> i64 {
        self.start_offset
    }

    /// SPEO (exclusive): the first offset past the in-flight records.
    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    /// The state epoch read at load, carried by every write.
    pub fn state_epoch(&self) -> i32 {
        self.state_epoch
    }

    /// The leader epoch given at load, carried by every write.
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// Records in flight: `end_offset - start_offset`, what `group.share.partition.max.record.locks`
    /// bounds (Kafka's `numInFlightRecords`).
    pub fn in_flight_records(&self) -> i64 {
        self.end_offset - self.start_offset
    }

    /// Where the server should read the log from: the first AVAILABLE record in the cache
    /// (a redelivery) or, when there is none, the end offset.
    pub fn next_fetch_offset(&self) -> i64 {
        for batch in self.cache.values() {
            let from = batch.first_offset.max(self.start_offset);
            if let Some(offset) = batch.first_matching(from, |s| s.is_acquirable()) {
                return offset;
            }
        }
        self.end_offset
    }

    /// Whether a fetch could acquire anything: there are AVAILABLE records to redeliver,
    /// or the in-flight window has room (Kafka's `canAcquireRecords`).
    pub fn can_acquire_records(&self) -> bool {
        self.next_fetch_offset() != self.end_offset || self.in_flight_records() < self.config.max_record_locks()
    }

    /// The state of one offset, if it is in flight (for tests and for describing the
    /// partition).
    pub fn record_state(&self, offset: i64) -> Option<RecordView<'_>> {
        if offset < self.start_offset || offset >= self.end_offset {
            return None;
        }
        let (_, batch) = self.cache.range(..=offset).next_back()?;
        Some(batch.state_at(offset).view())
    }

    /// Moves the start offset past the ACKNOWLEDGED / ARCHIVED records at its head (those
    /// not waiting for a write) and drops the batches wholly below it, as Kafka's
    /// `maybeUpdateCachedStateAndOffsets`.
    fn advance_start_offset(&mut self) {
        let mut offset = self.start_offset;
        for batch in self.cache.values() {
            if batch.last_offset < offset {
                continue;
            }
            match batch.first_matching(offset, |s| !s.is_done()) {
                Some(stop) => {
                    offset = stop;
                    break;
                }
                None => offset = batch.last_offset + 1,
            }
        }
        self.start_offset = offset;
        while let Some(entry) = self.cache.first_entry() {
            if entry.get().last_offset >= self.start_offset {
                break;
            }
            entry.remove();
        }
        if self.cache.is_empty() {
            self.end_offset = self.end_offset.max(self.start_offset);
        }
    }

    /// The log's start moved to `log_start_offset` past records in flight (retention,
    /// DeleteRecords): Kafka's `updateCacheAndOffsets`. The records below it are gone from
    /// the log and are never delivered: whatever their state, they are ARCHIVED at once
    /// (an acquisition or a transition on them is void; a write waiting for them completes
    /// without effect on them), and the start offset moves to the log start at least.
    /// The write to persist the new start offset, when it moved.
    pub fn log_start_moved(&mut self, log_start_offset: i64) -> Option<StateWrite> {
        if log_start_offset <= self.start_offset {
            return None;
        }
        for batch in self.cache.values_mut() {
            batch.update_range(
                batch.first_offset,
                log_start_offset - 1,
                |_| true,
                |_, _, s| {
                    s.state = RecordState::Archived;
                    s.lock = None;
                    s.pending = None;
                    s.dlq = None;
                },
            );
        }
        self.advance_start_offset();
        if self.start_offset < log_start_offset {
            // Past every record in flight: nothing is cached below the log start now.
            self.start_offset = log_start_offset;
            self.end_offset = self.end_offset.max(log_start_offset);
        }
        let id = self.take_write_id();
        Some(self.state_write(id, Vec::new()))
    }

    fn take_write_id(&mut self) -> WriteId {
        self.next_write_id += 1;
        WriteId(self.next_write_id)
    }

    /// A write of `batches` with the partition's epochs and current start offset.
    fn state_write(&mut self, id: WriteId, batches: Vec<StateBatch>) -> StateWrite {
        let state = WriteState {
            state_epoch: self.state_epoch,
            leader_epoch: self.leader_epoch,
            start_offset: self.start_offset,
            delivery_complete_count: self.delivery_complete_count(),
            batches,
        };
        StateWrite { id, state }
    }

    /// Records at or above the start offset that are ACKNOWLEDGED or ARCHIVED (Kafka's
    /// `deliveryCompleteCount`).
    fn delivery_complete_count(&self) -> i32 {
        let mut count = 0i64;
        for batch in self.cache.values() {
            count += batch.count_matching(self.start_offset, |s| s.state.is_terminal());
        }
        i32::try_from(count).unwrap_or(i32::MAX)
    }
}
