//! ShareAcknowledge's side (and ShareFetch's acknowledgements, and share session close):
//! moving ACQUIRED records on, with a write that commits or rolls back (Kafka's
//! `SharePartition.acknowledge`, `releaseAcquiredRecords`, `rollbackOrProcessStateUpdates`).

use super::cache::{DlqCause, DlqMark, InFlightState, RecordState, States};
use super::persisted::{push_coalesced, StateWrite, WriteId};
use super::SharePartition;
use crate::share_state::StateBatch;
use osprey_protocol::ErrorCode;

/// An acknowledgement type, with Kafka's ids (`AcknowledgeType`, KIP-932 and KIP-1222).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AcknowledgeType {
    /// 0: the offset has no record (compacted away, a control record): ARCHIVED.
    Gap,
    /// 1: processed: ACKNOWLEDGED.
    Accept,
    /// 2: deliver again: AVAILABLE, or ARCHIVED at the delivery limit.
    Release,
    /// 3: not processable: ARCHIVED.
    Reject,
    /// 4 (KIP-1222): still working on it: the acquisition lock starts again, no state change.
    Renew,
}

impl AcknowledgeType {
    pub fn id(self) -> i8 {
        match self {
            AcknowledgeType::Gap => 0,
            AcknowledgeType::Accept => 1,
            AcknowledgeType::Release => 2,
            AcknowledgeType::Reject => 3,
            AcknowledgeType::Renew => 4,
        }
    }

    pub fn from_id(id: i8) -> Option<AcknowledgeType> {
        match id {
            0 => Some(AcknowledgeType::Gap),
            1 => Some(AcknowledgeType::Accept),
            2 => Some(AcknowledgeType::Release),
            3 => Some(AcknowledgeType::Reject),
            4 => Some(AcknowledgeType::Renew),
            _ => None,
        }
    }

    /// The state an ACQUIRED record with `delivery_count` moves to, and why it goes to the
    /// dead-letter queue if it does (Kafka's `ACK_TYPE_TO_RECORD_STATE` and
    /// `recordStateWithDlq`, and `InFlightState.tryUpdateState` for the limit). `archive`
    /// is where rejected records and those out of deliveries go: ARCHIVING when the group
    /// has a dead-letter queue, else ARCHIVED. A gap has no record to write: ARCHIVED.
    fn target(
        self,
        delivery_count: i16,
        delivery_count_limit: i16,
        archive: RecordState,
    ) -> (RecordState, Option<DlqCause>) {
        let dlq = |cause| (archive, (archive == RecordState::Archiving).then_some(cause));
        match self {
            AcknowledgeType::Accept => (RecordState::Acknowledged, None),
            AcknowledgeType::Gap => (RecordState::Archived, None),
            AcknowledgeType::Reject => dlq(DlqCause::ClientReject),
            AcknowledgeType::Release if delivery_count >= delivery_count_limit => dlq(DlqCause::DeliveryCountExceeded),
            AcknowledgeType::Release => (RecordState::Available, None),
            AcknowledgeType::Renew => (RecordState::Acquired, None),
        }
    }
}

/// One `AcknowledgementBatch` of ShareAcknowledge / ShareFetch: `acknowledge_types` has one
/// type for the whole range or one per offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcknowledgementBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub acknowledge_types: Vec<i8>,
}

/// Why an acknowledgement was refused; nothing of it took effect (but renewals, as in Kafka).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AcknowledgeError {
    /// A malformed batch, or offsets past the records in flight.
    #[error("invalid request: {0}")]
    InvalidRequest(&'static str),
    /// Records not ACQUIRED by this member, in transition, or not in flight.
    #[error("invalid record state: {0}")]
    InvalidRecordState(&'static str),
}

impl AcknowledgeError {
    /// The partition's `AcknowledgeErrorCode`.
    pub fn error_code(self) -> ErrorCode {
        match self {
            AcknowledgeError::InvalidRequest(_) => ErrorCode::INVALID_REQUEST,
            AcknowledgeError::InvalidRecordState(_) => ErrorCode::INVALID_RECORD_STATE,
        }
    }
}

use AcknowledgeError::{InvalidRecordState, InvalidRequest};

/// One acknowledgement in progress: the write its transitions wait for, and its batches.
struct Ack<'a> {
    member: &'a str,
    write: WriteId,
    lock_deadline_ms: i64,
    delivery_count_limit: i16,
    /// ARCHIVED, or ARCHIVING when the group has a dead-letter queue.
    archive: RecordState,
    renew_enabled: bool,
    changes: Vec<StateBatch>,
}

impl Ack<'_> {
    /// Applies `ack_type` to the ACQUIRED state of `first..=last`. A RENEW while the
    /// group's `share.renew.acknowledge.enable` is false is refused, as Kafka refuses it
    /// once the records are found acquired by the member.
    fn apply(
        &mut self,
        first: i64,
        last: i64,
        s: &mut InFlightState,
        ack_type: AcknowledgeType,
    ) -> Result<(), AcknowledgeError> {
        if ack_type == AcknowledgeType::Renew {
            if !self.renew_enabled {
                return Err(InvalidRecordState("renewing acquisition locks is not enabled for the group"));
            }
            if let Some(lock) = &mut s.lock {
                lock.deadline_ms = self.lock_deadline_ms;
            }
            return Ok(());
        }
        let (target, dlq) = ack_type.target(s.delivery_count, self.delivery_count_limit, self.archive);
        s.start_transition(self.write, target, s.delivery_count);
        s.dlq = dlq.map(|cause| DlqMark { cause, started: false });
        push_coalesced(&mut self.changes, first, last, target, s.delivery_count);
        Ok(())
    }
}

impl SharePartition {
    /// Acknowledges records `member` acquired. The new states take effect at once; the
    /// returned write must be persisted and its outcome reported with
    /// [`write_completed`](Self::write_completed) before the client is answered (a failed
    /// write rolls the acknowledgement back). `Ok(None)`: nothing to persist (renewals
    /// only, or offsets already below the start offset).
    ///
    /// Errors as Kafka's: INVALID_REQUEST for a malformed batch or offsets past the
    /// records in flight; INVALID_RECORD_STATE for offsets before them, records not
    /// ACQUIRED by `member` or still in transition. On an error the acknowledgement's
    /// transitions so far are rolled back at once (renewals stay, as in Kafka).
    pub fn acknowledge(
        &mut self,
        member: &str,
        now_ms: i64,
        batches: &[AcknowledgementBatch],
    ) -> Result<Option<StateWrite>, AcknowledgeError> {
        validate(batches)?;
        let mut ack = Ack {
            member,
            write: WriteId(self.next_write_id + 1),
            lock_deadline_ms: now_ms.saturating_add(self.config.record_lock_duration_ms),
            delivery_count_limit: self.config.delivery_count_limit,
            archive: self.config.archive_state(),
            renew_enabled: self.config.renew_acknowledge_enabled,
            changes: Vec::new(),
        };
        if let Err(e) = batches.iter().try_for_each(|batch| self.acknowledge_batch(&mut ack, batch)) {
            self.complete_transitions(ack.write, false);
            return Err(e);
        }
        if ack.changes.is_empty() {
            return Ok(None);
        }
        let archiving = RecordState::Archiving.id();
        self.dlq_waiting |= ack.changes.iter().any(|b| b.delivery_state == archiving);
        let id = self.take_write_id();
        debug_assert_eq!(id, ack.write);
        Ok(Some(self.state_write(id, ack.changes)))
    }

    /// Releases every record `member` holds, as Kafka does when its share session closes
    /// (or it leaves the group): AVAILABLE again, with the delivery count decremented
    /// because the records were fetched but never delivered to the application (Kafka
    /// 4.1+, KAFKA-17541: `DeliveryCountOps.DECREASE`, so never ARCHIVED here). Persist and
    /// report the write as an acknowledgement's. Kafka stops at the first offset of a
    /// batch held by another member; this releases all of the member's offsets.
    pub fn release_member(&mut self, member: &str) -> Option<StateWrite> {
        let write = WriteId(self.next_write_id + 1);
        let mut changes = Vec::new();
        for batch in self.cache.values_mut() {
            let (first, last) = (batch.first_offset, batch.last_offset);
            let held = |s: &InFlightState| s.is_acquired_by(member) && s.pending.is_none();
            batch.update_range(first, last, held, |from, to, s| {
                let count = (s.delivery_count - 1).max(0);
                s.start_transition(write, RecordState::Available, count);
                push_coalesced(&mut changes, from, to, RecordState::Available, count);
            });
        }
        if changes.is_empty() {
            return None;
        }
        let id = self.take_write_id();
        Some(self.state_write(id, changes))
    }

    /// Reports the outcome of write `id`: its transitions are committed, or rolled back to
    /// what they were (Kafka's `completeStateTransition`). Then the start offset moves
    /// past what is done. Unknown ids, and lock-expiry writes (not rolled back, as in
    /// Kafka), only do the latter.
    pub fn write_completed(&mut self, id: WriteId, succeeded: bool) {
        self.complete_transitions(id, succeeded);
        self.advance_start_offset();
    }

    fn complete_transitions(&mut self, id: WriteId, committed: bool) {
        for batch in self.cache.values_mut() {
            for s in batch.states_mut() {
                s.complete_transition(id, committed);
            }
        }
    }

    /// One acknowledgement batch (Kafka's `fetchSubMapForAcknowledgementBatch` and
    /// `acknowledgeBatchRecords`).
    fn acknowledge_batch(&mut self, ack: &mut Ack<'_>, batch: &AcknowledgementBatch) -> Result<(), AcknowledgeError> {
        if batch.last_offset < self.start_offset {
            // Already done with; nothing to change.
            return Ok(());
        }
        let types: Vec<AcknowledgeType> =
            batch.acknowledge_types.iter().filter_map(|&id| AcknowledgeType::from_id(id)).collect();
        let floor = match self.cache.range(..=batch.first_offset).next_back() {
            Some((key, _)) => *key,
            // The batch starts before the cache: fine if the start offset moved into it.
            None if batch.first_offset < self.start_offset => {
                match self.cache.range(..=self.start_offset).next_back() {
                    Some((key, _)) => *key,
                    None => return Err(InvalidRecordState("the acknowledged offsets are not in flight")),
                }
            }
            None => return Err(InvalidRecordState("the acknowledged offsets are not in flight")),
        };
        let keys: Vec<i64> = self.cache.range(floor..=batch.last_offset).map(|(key, _)| *key).collect();
        let last_in_flight = keys.last().and_then(|key| self.cache.get(key)).map_or(-1, |b| b.last_offset);
        if last_in_flight < batch.first_offset {
            return Err(InvalidRequest("the first acknowledged offset is past the acquired records"));
        }
        if batch.last_offset > last_in_flight {
            return Err(InvalidRequest("the last acknowledged offset is past the acquired records"));
        }
        for key in keys {
            self.acknowledge_in_flight_batch(ack, key, batch, &types)?;
        }
        Ok(())
    }

    fn acknowledge_in_flight_batch(
        &mut self,
        ack: &mut Ack<'_>,
        key: i64,
        batch: &AcknowledgementBatch,
        types: &[AcknowledgeType],
    ) -> Result<(), AcknowledgeError> {
        let start_offset = self.start_offset;
        let Some(in_flight) = self.cache.get_mut(&key) else { return Ok(()) };
        if in_flight.last_offset < start_offset {
            return Ok(());
        }
        if let States::Whole(s) = &in_flight.states {
            match &s.lock {
                None => return Err(InvalidRecordState("the batch is not in the acquired state")),
                Some(lock) if &*lock.owner != ack.member => {
                    return Err(InvalidRecordState("the member is not the owner of the batch"))
                }
                Some(_) => {}
            }
        }
        let full_match = in_flight.first_offset >= batch.first_offset && in_flight.last_offset <= batch.last_offset;
        let per_offset_types = types.len() > 1;
        let start_within = in_flight.first_offset < start_offset && in_flight.last_offset >= start_offset;
        if let (States::Whole(s), true, false, false) =
            (&mut in_flight.states, full_match, per_offset_types, start_within)
        {
            return ack.apply(in_flight.first_offset, in_flight.last_offset, s, types[0]);
        }
        let first_offset = in_flight.first_offset;
        let from = batch.first_offset.max(start_offset).max(first_offset);
        let to = batch.last_offset.min(in_flight.last_offset);
        let states = in_flight.split();
        for offset in from..=to {
            let s = &mut states[(offset - first_offset) as usize];
            if s.state != RecordState::Acquired {
                return Err(InvalidRecordState("the offset is not acquired"));
            }
            if !s.is_acquired_by(ack.member) {
                return Err(InvalidRecordState("the member is not the owner of the offset"));
            }
            let ack_type = if per_offset_types { types[(offset - batch.first_offset) as usize] } else { types[0] };
            ack.apply(offset, offset, s, ack_type)?;
        }
        Ok(())
    }
}

/// The checks Kafka makes of acknowledgement batches before they reach the partition
/// (`KafkaApis` / `SharePartition.fetchAckTypeMapForBatch`): ranges not empty, in order
/// and not overlapping, one type or one per offset, every type known.
fn validate(batches: &[AcknowledgementBatch]) -> Result<(), AcknowledgeError> {
    let mut previous_last: Option<i64> = None;
    for batch in batches {
        if batch.first_offset < 0 || batch.first_offset > batch.last_offset {
            return Err(InvalidRequest("an acknowledgement batch has an empty range"));
        }
        if previous_last.is_some_and(|last| batch.first_offset <= last) {
            return Err(InvalidRequest("acknowledgement batches overlap or are out of order"));
        }
        previous_last = Some(batch.last_offset);
        let range = batch.last_offset - batch.first_offset + 1;
        let n = batch.acknowledge_types.len() as i64;
        if n != 1 && n != range {
            return Err(InvalidRequest("acknowledge types must be one, or one per offset"));
        }
        if batch.acknowledge_types.iter().any(|&id| AcknowledgeType::from_id(id).is_none()) {
            return Err(InvalidRequest("unknown acknowledge type"));
        }
    }
    Ok(())
}
