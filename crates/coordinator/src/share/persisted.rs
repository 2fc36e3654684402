//! What the share partition persists through Kafka's share-group state APIs: it loads a
//! ReadShareGroupState result and hands out WriteShareGroupState contents.

use super::cache::{DlqCause, DlqMark, InFlightBatch, InFlightState, RecordState};
use super::{ShareConfig, SharePartition};
use crate::share_state::{ReadState, StateBatch, WriteState};
use std::collections::BTreeMap;

/// Identifies a [`StateWrite`]; handed back to [`SharePartition::write_completed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WriteId(pub u64);

/// A state change to persist: `state` is the partition's part of a WriteShareGroupState
/// request (or of [`crate::share_state::ShareStateCoordinator::write`]), its batches a
/// delta that the share coordinator combines with the state it holds. Report its outcome
/// with [`SharePartition::write_completed`]`(id, ..)`.
///
/// `state.delivery_complete_count` is Kafka's `deliveryCompleteCount` (KIP-1226: records
/// at or above the start offset that are ACKNOWLEDGED or ARCHIVED); WriteShareGroupState
/// v0 has no such field and the server leaves it out there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateWrite {
    pub id: WriteId,
    pub state: WriteState,
}

/// Why a persisted state does not load (Kafka fails the partition's initialisation: its
/// fetches get an error until the leader loads it again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The state has no start offset (never initialised) and the server passed no
    /// `share.auto.offset.reset` offset.
    #[error("share partition has no start offset and no share.auto.offset.reset offset was given")]
    NeedsResetOffset,
    #[error("invalid persisted share partition state: {0}")]
    Invalid(String),
}

impl SharePartition {
    /// A share partition from its ReadShareGroupState result ([`ReadState`]), on the leader at
    /// `leader_epoch`. With no state yet (`start_offset` -1), it starts at
    /// `reset_start_offset`, the server's resolution of `share.auto.offset.reset`.
    ///
    /// Batches must lie at or above the start offset (as Kafka checks). Offsets between
    /// the start offset and the last batch that no batch covers (Kafka's "gap window":
    /// fetched but never persisted) are AVAILABLE with delivery count 0, to be fetched
    /// again. Records persisted ACQUIRED come back AVAILABLE (no member holds them now),
    /// and AVAILABLE records at or past the delivery limit (the limit was lowered) are
    /// ARCHIVED (ARCHIVING with a dead-letter queue), so that no record is delivered more
    /// often than the limit (Kafka would deliver them once more). Records persisted
    /// ARCHIVING have their dead-letter queue write still to make (Kafka's
    /// `maybeResumeDlqArchiving`): [`SharePartition::take_dlq_writes`] hands them out, the
    /// cause told by the delivery count as Kafka tells it.
    pub fn load(
        config: ShareConfig,
        leader_epoch: i32,
        read: &ReadState,
        reset_start_offset: Option<i64>,
    ) -> Result<SharePartition, LoadError> {
        let start_offset = match read.start_offset {
            -1 => reset_start_offset.ok_or(LoadError::NeedsResetOffset)?,
            start => start,
        };
        if start_offset < 0 {
            return Err(LoadError::Invalid(format!("start offset {start_offset}")));
        }
        let mut batches = read.batches.clone();
        batches.sort_by_key(|b| b.first_offset);
        let mut cache = BTreeMap::new();
        let mut next = start_offset;
        for b in &batches {
            let state = check_batch(b, next, start_offset)?;
            if b.first_offset > next {
                let gap = InFlightState::new(RecordState::Available, 0);
                cache.insert(next, InFlightBatch::whole(next, b.first_offset - 1, gap));
            }
            let state = match state {
                RecordState::Acquired => RecordState::Available,
                RecordState::Available if b.delivery_count >= config.delivery_count_limit => config.archive_state(),
                other => other,
            };
            let mut in_flight = InFlightState::new(state, b.delivery_count);
            if state == RecordState::Archiving {
                let cause = match b.delivery_count >= config.delivery_count_limit {
                    true => DlqCause::DeliveryCountExceeded,
                    false => DlqCause::ClientReject,
                };
                in_flight.dlq = Some(DlqMark { cause, started: false });
            }
            cache.insert(b.first_offset, InFlightBatch::whole(b.first_offset, b.last_offset, in_flight));
            next = b.last_offset + 1;
        }
        let (largest_delivery_count_limit, largest_window) = (config.delivery_count_limit, config.max_record_locks());
        let mut partition = SharePartition {
            config,
            leader_epoch,
            state_epoch: read.state_epoch,
            start_offset,
            end_offset: next,
            cache,
            loaded_end_offset: next,
            largest_delivery_count_limit,
            largest_window,
            next_write_id: 0,
            dlq_waiting: true,
        };
        partition.advance_start_offset();
        Ok(partition)
    }

    /// The full durable view of the partition, what a snapshot write holds: every offset
    /// from the start offset, ACQUIRED records as AVAILABLE with their delivery count (the
    /// delivery happened) and records in transition as they were before it (their write
    /// is not known to be durable). As a write it covers every offset from the start
    /// offset; the share coordinator combines it with what it holds, as any write.
    pub fn to_persisted(&self) -> WriteState {
        let mut state_batches = Vec::new();
        let mut complete = 0i64;
        for batch in self.cache.values() {
            batch.for_each_state(|first, last, s| {
                let first = first.max(self.start_offset);
                if first <= last {
                    let (state, count) = s.durable();
                    push_coalesced(&mut state_batches, first, last, state, count);
                    if state.is_terminal() {
                        complete += last - first + 1;
                    }
                }
            });
        }
        WriteState {
            state_epoch: self.state_epoch,
            leader_epoch: self.leader_epoch,
            start_offset: self.start_offset,
            delivery_complete_count: i32::try_from(complete).unwrap_or(i32::MAX),
            batches: state_batches,
        }
    }
}

fn check_batch(b: &StateBatch, next: i64, start_offset: i64) -> Result<RecordState, LoadError> {
    if b.first_offset < start_offset {
        return Err(LoadError::Invalid(format!("batch {b:?} below start offset {start_offset}")));
    }
    if b.first_offset > b.last_offset || b.first_offset < next {
        return Err(LoadError::Invalid(format!("batch {b:?} empty or overlapping the one before")));
    }
    if b.delivery_count < 0 {
        return Err(LoadError::Invalid(format!("batch {b:?} has a negative delivery count")));
    }
    RecordState::from_id(b.delivery_state)
        .ok_or_else(|| LoadError::Invalid(format!("batch {b:?} has unknown delivery state")))
}

/// Appends `first..=last` in `state` with `count`, merged into the last batch when it is
/// its neighbour with the same state and count.
pub(super) fn push_coalesced(batches: &mut Vec<StateBatch>, first: i64, last: i64, state: RecordState, count: i16) {
    if let Some(prev) = batches.last_mut() {
        if prev.last_offset + 1 == first && prev.delivery_state == state.id() && prev.delivery_count == count {
            prev.last_offset = last;
            return;
        }
    }
    batches.push(StateBatch {
        first_offset: first,
        last_offset: last,
        delivery_state: state.id(),
        delivery_count: count,
    });
}
