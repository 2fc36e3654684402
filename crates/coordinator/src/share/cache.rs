//! The in-flight records: one state per log batch while the batch moves as one, one state
//! per offset once part of it moves on its own (Kafka's `InFlightBatch` / `InFlightState`).

use super::persisted::WriteId;
use std::sync::Arc;

/// A record's delivery state, with Kafka's ids (persisted as `DeliveryState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordState {
    Available,
    Acquired,
    Acknowledged,
    /// On its way to the group's dead-letter queue (KIP-1191, `share.version` 2): rejected,
    /// or out of deliveries, while the group has a DLQ topic. Never delivered again; it
    /// becomes ARCHIVED once its DLQ record is written (or the write gave up), and the
    /// start offset stops at it until then.
    Archiving,
    Archived,
}

impl RecordState {
    /// The id Kafka persists (`RecordState.id`).
    pub fn id(self) -> i8 {
        match self {
            RecordState::Available => 0,
            RecordState::Acquired => 1,
            RecordState::Acknowledged => 2,
            RecordState::Archiving => 3,
            RecordState::Archived => 4,
        }
    }

    /// The state with Kafka's id `id`.
    pub fn from_id(id: i8) -> Option<RecordState> {
        match id {
            0 => Some(RecordState::Available),
            1 => Some(RecordState::Acquired),
            2 => Some(RecordState::Acknowledged),
            3 => Some(RecordState::Archiving),
            4 => Some(RecordState::Archived),
            _ => None,
        }
    }

    /// ACKNOWLEDGED and ARCHIVED: the record is never delivered again.
    pub fn is_terminal(self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }
}

/// What [`super::SharePartition::record_state`] shows of one offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub state: RecordState,
    pub delivery_count: i16,
    /// The member holding it, when ACQUIRED.
    pub owner: Option<&'a str>,
    /// When its acquisition lock expires, when ACQUIRED.
    pub lock_deadline_ms: Option<i64>,
    /// Whether a transition to `state` waits for its write (and would roll back on failure).
    pub in_transition: bool,
}

/// The acquisition lock of an ACQUIRED record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Lock {
    pub owner: Arc<str>,
    pub deadline_ms: i64,
}

/// A transition waiting for its write, and what to restore if the write fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pending {
    pub write: WriteId,
    pub state: RecordState,
    pub delivery_count: i16,
    pub lock: Option<Lock>,
}

/// The state of one offset, or of every offset of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct InFlightState {
    pub state: RecordState,
    pub delivery_count: i16,
    /// Some exactly when ACQUIRED.
    pub lock: Option<Lock>,
    pub pending: Option<Box<Pending>>,
    /// Set with ARCHIVING: why the record goes to the dead-letter queue, and whether its
    /// DLQ write was handed to the server.
    pub dlq: Option<DlqMark>,
}

/// Why a record goes to the dead-letter queue, with Kafka's `__dlq.errors.message`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DlqCause {
    /// A member acknowledged it REJECT.
    ClientReject,
    /// It was released, or its lock expired, at the delivery count limit.
    DeliveryCountExceeded,
}

impl DlqCause {
    /// Kafka's message for it (`ShareGroupDLQManager.CLIENT_REJECT`,
    /// `DELIVERY_COUNT_EXCEEDED`).
    pub fn message(self) -> &'static str {
        match self {
            DlqCause::ClientReject => "Offset rejected by client.",
            DlqCause::DeliveryCountExceeded => "Offset delivery count exceeded the threshold.",
        }
    }
}

/// An ARCHIVING record's dead-letter queue write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DlqMark {
    pub cause: DlqCause,
    /// Handed to the server by [`super::SharePartition::take_dlq_writes`].
    pub started: bool,
}

impl InFlightState {
    pub fn new(state: RecordState, delivery_count: i16) -> InFlightState {
        InFlightState { state, delivery_count, lock: None, pending: None, dlq: None }
    }

    pub fn acquired(owner: &Arc<str>, deadline_ms: i64) -> InFlightState {
        InFlightState {
            state: RecordState::Acquired,
            delivery_count: 1,
            lock: Some(Lock { owner: owner.clone(), deadline_ms }),
            pending: None,
            dlq: None,
        }
    }

    /// AVAILABLE and not waiting for a write: a fetch may acquire it.
    pub fn is_acquirable(&self) -> bool {
        self.state == RecordState::Available && self.pending.is_none()
    }

    /// ACKNOWLEDGED or ARCHIVED and not waiting for a write: the start offset may pass it.
    pub fn is_done(&self) -> bool {
        self.state.is_terminal() && self.pending.is_none()
    }

    pub fn is_acquired_by(&self, member: &str) -> bool {
        self.lock.as_ref().is_some_and(|l| &*l.owner == member)
    }

    /// AVAILABLE -> ACQUIRED, delivery count + 1 (Kafka's `DeliveryCountOps.INCREASE`).
    pub fn acquire(&mut self, owner: &Arc<str>, deadline_ms: i64) {
        debug_assert!(self.is_acquirable());
        self.state = RecordState::Acquired;
        self.delivery_count += 1;
        self.lock = Some(Lock { owner: owner.clone(), deadline_ms });
    }

    /// Moves to `state` with `delivery_count` now, keeping what to restore should write
    /// `write` fail (Kafka's `startStateTransition`).
    pub fn start_transition(&mut self, write: WriteId, state: RecordState, delivery_count: i16) {
        debug_assert!(self.pending.is_none());
        self.pending = Some(Box::new(Pending {
            write,
            state: self.state,
            delivery_count: self.delivery_count,
            lock: self.lock.take(),
        }));
        self.state = state;
        self.delivery_count = delivery_count;
    }

    /// Completes the transition of `write`, if this state waits for it: commits it, or
    /// restores the state before it. A restored ACQUIRED record keeps its lock deadline,
    /// so a lock that expired meanwhile is expired by the next tick (Kafka makes it
    /// AVAILABLE at once, without the delivery limit and without a write).
    pub fn complete_transition(&mut self, write: WriteId, committed: bool) -> bool {
        if self.pending.as_ref().is_none_or(|p| p.write != write) {
            return false;
        }
        let Some(before) = self.pending.take() else { return false };
        if !committed {
            self.state = before.state;
            self.delivery_count = before.delivery_count;
            self.lock = before.lock;
            self.dlq = None;
        }
        true
    }

    /// What is durable of this state: the state before a transition still waiting for
    /// its write; an ACQUIRED record as AVAILABLE (acquisition is not persisted).
    pub fn durable(&self) -> (RecordState, i16) {
        let (state, count) = match &self.pending {
            Some(before) => (before.state, before.delivery_count),
            None => (self.state, self.delivery_count),
        };
        match state {
            RecordState::Acquired => (RecordState::Available, count),
            other => (other, count),
        }
    }

    pub fn view(&self) -> RecordView<'_> {
        RecordView {
            state: self.state,
            delivery_count: self.delivery_count,
            owner: self.lock.as_ref().map(|l| &*l.owner),
            lock_deadline_ms: self.lock.as_ref().map(|l| l.deadline_ms),
            in_transition: self.pending.is_some(),
        }
    }
}

/// The states of a batch's offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum States {
    /// Every offset of the batch is in this state.
    Whole(InFlightState),
    /// One state per offset, `[i]` for `first_offset + i`.
    PerOffset(Vec<InFlightState>),
}

/// A log batch's records in flight (or a range of them, or of several batches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct InFlightBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub states: States,
}

impl InFlightBatch {
    pub fn whole(first_offset: i64, last_offset: i64, state: InFlightState) -> InFlightBatch {
        InFlightBatch { first_offset, last_offset, states: States::Whole(state) }
    }

    pub fn len(&self) -> i64 {
        self.last_offset - self.first_offset + 1
    }

    pub fn state_at(&self, offset: i64) -> &InFlightState {
        match &self.states {
            States::Whole(s) => s,
            States::PerOffset(v) => &v[(offset - self.first_offset) as usize],
        }
    }

    /// One state per offset from now on (Kafka's `maybeInitializeOffsetStateUpdate`). The
    /// batch is bounded by the in-flight window, so this allocates at most that many.
    pub fn split(&mut self) -> &mut Vec<InFlightState> {
        if let States::Whole(s) = &self.states {
            let per_offset = vec![s.clone(); self.len() as usize];
            self.states = States::PerOffset(per_offset);
        }
        match &mut self.states {
            States::PerOffset(v) => v,
            States::Whole(_) => unreachable!("split above"),
        }
    }

    /// The first offset at or after `from` whose state matches.
    pub fn first_matching(&self, from: i64, matches: impl Fn(&InFlightState) -> bool) -> Option<i64> {
        let from = from.max(self.first_offset);
        if from > self.last_offset {
            return None;
        }
        match &self.states {
            States::Whole(s) => matches(s).then_some(from),
            States::PerOffset(v) => {
                let skip = (from - self.first_offset) as usize;
                v.iter().skip(skip).position(matches).map(|i| from + i as i64)
            }
        }
    }

    /// How many offsets at or after `from` have a matching state.
    pub fn count_matching(&self, from: i64, matches: impl Fn(&InFlightState) -> bool) -> i64 {
        let from = from.max(self.first_offset);
        if from > self.last_offset {
            return 0;
        }
        match &self.states {
            States::Whole(s) if matches(s) => self.last_offset - from + 1,
            States::Whole(_) => 0,
            States::PerOffset(v) => {
                v.iter().skip((from - self.first_offset) as usize).filter(|s| matches(s)).count() as i64
            }
        }
    }

    /// Every (offset range, state) of the batch, whole or per offset, in offset order.
    pub fn for_each_state(&self, mut f: impl FnMut(i64, i64, &InFlightState)) {
        match &self.states {
            States::Whole(s) => f(self.first_offset, self.last_offset, s),
            States::PerOffset(v) => {
                for (i, s) in v.iter().enumerate() {
                    let offset = self.first_offset + i as i64;
                    f(offset, offset, s);
                }
            }
        }
    }

    /// Applies `f` to the states of `[first, last]` that match `pred`, as one state when
    /// the whole batch is covered and still moves as one, per offset otherwise (splitting
    /// only when some state matches). Calls `f(first, last, state)`.
    pub fn update_range(
        &mut self,
        first: i64,
        last: i64,
        pred: impl Fn(&InFlightState) -> bool,
        mut f: impl FnMut(i64, i64, &mut InFlightState),
    ) {
        let (from, to) = (first.max(self.first_offset), last.min(self.last_offset));
        if from > to {
            return;
        }
        if let States::Whole(s) = &mut self.states {
            if !pred(s) {
                return;
            }
            if from == self.first_offset && to == self.last_offset {
                f(from, to, s);
                return;
            }
        }
        let first_offset = self.first_offset;
        let states = self.split();
        for offset in from..=to {
            let s = &mut states[(offset - first_offset) as usize];
            if pred(s) {
                f(offset, offset, s);
            }
        }
    }

    /// Every state of the batch (the one whole state, or one per offset), to update in place.
    pub fn states_mut(&mut self) -> &mut [InFlightState] {
        match &mut self.states {
            States::Whole(s) => std::slice::from_mut(s),
            States::PerOffset(v) => v,
        }
    }
}
