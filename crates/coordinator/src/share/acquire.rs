//! ShareFetch's side: acquiring records for a member (Kafka's `SharePartition.acquire`).

use super::cache::{InFlightBatch, InFlightState, RecordState, States};
use super::transactions::aborted_batches;
use super::SharePartition;
use std::sync::Arc;

/// The log batches the server read for a ShareFetch, from [`SharePartition::next_fetch_offset`].
#[derive(Debug, Clone, Copy)]
pub struct AcquireRequest<'a> {
    /// The offset the log was read from.
    pub fetch_offset: i64,
    /// The batches read, in offset order (their first and last offsets and what the
    /// transaction filter needs; not their records).
    pub batches: &'a [LogBatch],
    /// ShareFetch v1+ `MaxRecords`: a soft limit (whole log batches are acquired).
    pub max_records: i32,
    /// ShareFetch v1+ `BatchSize`: in batch-optimized mode, acquired records are split at
    /// log batch boundaries into pieces of about this many records. 0 or less: no split.
    pub batch_size: i32,
    /// ShareFetch v2 `ShareAcquireMode`.
    pub mode: ShareAcquireMode,
    /// The share group's `share.isolation.level`.
    pub isolation: Isolation<'a>,
}

/// One log batch read for a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    /// -1 when the batch has none.
    pub producer_id: i64,
    pub is_transactional: bool,
    /// Some for a control batch, with its marker.
    pub control: Option<ControlMarker>,
}

impl LogBatch {
    /// A plain (non-transactional) data batch.
    pub fn data(first_offset: i64, last_offset: i64) -> LogBatch {
        LogBatch { first_offset, last_offset, producer_id: -1, is_transactional: false, control: None }
    }
}

/// The marker a control batch carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlMarker {
    Commit,
    Abort,
}

/// An aborted transaction overlapping the fetched range, as the log reports it with the
/// read (Fetch's `AbortedTransactions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// `share.isolation.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation<'a> {
    ReadUncommitted,
    /// Batches at or past `last_stable_offset` are not acquired; records of aborted
    /// transactions are archived, not delivered. Control batches are acquired with the
    /// records around them, as in Kafka: the client skips them and acknowledges their
    /// offsets as GAP.
    ReadCommitted {
        last_stable_offset: i64,
        aborted_transactions: &'a [AbortedTransaction],
    },
}

/// ShareFetch v2 `ShareAcquireMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShareAcquireMode {
    /// 0: acquire whole log batches, `max_records` is a soft limit.
    #[default]
    BatchOptimized,
    /// 1: acquire at most `max_records` records, leaving the rest of a batch AVAILABLE.
    RecordLimit,
}

impl ShareAcquireMode {
    /// The mode with Kafka's id.
    pub fn from_id(id: i8) -> Option<ShareAcquireMode> {
        match id {
            0 => Some(ShareAcquireMode::BatchOptimized),
            1 => Some(ShareAcquireMode::RecordLimit),
            _ => None,
        }
    }
}

/// One `AcquiredRecords` entry of a ShareFetch response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquiredRecords {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: i16,
}

/// What [`SharePartition::acquire`] acquired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acquired {
    /// In offset order.
    pub records: Vec<AcquiredRecords>,
    /// Records acquired.
    pub count: i64,
    /// Where the next fetch should read from ([`SharePartition::next_fetch_offset`] after
    /// this acquisition): the first AVAILABLE record, or the end offset.
    pub next_fetch_offset: i64,
}

/// One acquisition in progress.
struct Acquisition {
    owner: Arc<str>,
    deadline_ms: i64,
    mode: ShareAcquireMode,
    /// Records this acquisition may take (Kafka's `maxRecordsToAcquire`).
    max: i64,
    count: i64,
    /// Throttling stopped it: nothing more is acquired, new records neither.
    stopped: bool,
    records: Vec<AcquiredRecords>,
}

impl Acquisition {
    fn push(&mut self, first_offset: i64, last_offset: i64, delivery_count: i16) {
        self.records.push(AcquiredRecords { first_offset, last_offset, delivery_count });
    }
}

impl SharePartition {
    /// Acquires for `member` the records of `request.batches` that are AVAILABLE in the
    /// cache (redeliveries, first) and the new ones past the end offset, bumping their
    /// delivery count and locking them until `now_ms + record_lock_duration_ms`.
    ///
    /// As Kafka: whole in-flight batches are acquired when the fetch covers them, single
    /// offsets otherwise; `max_records` is a soft limit in batch-optimized mode (the log
    /// batch holding the last record allowed is acquired whole); a record on its last
    /// delivery attempt is delivered alone and records delivered often are throttled
    /// (Kafka's `throttleRecordsDeliveryLimit`); cached AVAILABLE records between the
    /// fetch offset and the first batch read are archived (compacted away). The window
    /// (`group.share.partition.max.record.locks`) bounds `end_offset - start_offset`
    /// strictly here: a log batch crossing it is acquired up to it (Kafka acquires the
    /// whole batch, overshooting by less than a batch).
    pub fn acquire(&mut self, member: &str, now_ms: i64, request: &AcquireRequest<'_>) -> Acquired {
        let records = self.acquire_records(member, now_ms, request);
        self.advance_start_offset();
        let count = records.iter().map(|r| r.last_offset - r.first_offset + 1).sum();
        Acquired { records, count, next_fetch_offset: self.next_fetch_offset() }
    }

    fn acquire_records(&mut self, member: &str, now_ms: i64, request: &AcquireRequest<'_>) -> Vec<AcquiredRecords> {
        let batches = readable_batches(request);
        let (Some(first_batch), Some(last_batch)) = (batches.first(), batches.last()) else {
            return Vec::new();
        };
        if request.max_records <= 0 {
            return Vec::new();
        }
        let Some((last_to_acquire, max)) =
            self.acquire_limits(request.fetch_offset, i64::from(request.max_records), last_batch.last_offset)
        else {
            return Vec::new();
        };
        let base = first_batch.first_offset;
        self.archive_stale(request.fetch_offset, base);
        let mut acquisition = Acquisition {
            owner: Arc::from(member),
            deadline_ms: now_ms.saturating_add(self.config.record_lock_duration_ms),
            mode: request.mode,
            max,
            count: 0,
            stopped: false,
            records: Vec::new(),
        };
        self.acquire_cached(&mut acquisition, base, last_to_acquire);
        self.acquire_new(&mut acquisition, batches, base, last_to_acquire, request.batch_size);
        let mut records = acquisition.records;
        if let Isolation::ReadCommitted { aborted_transactions, .. } = request.isolation {
            let aborted = aborted_batches(batches, aborted_transactions);
            self.archive_acquired(&aborted);
            records = without_ranges(records, &aborted);
        }
        records
    }

    /// The last offset and the number of records an acquisition may take, bounded by the
    /// window (Kafka's `lastOffsetAndMaxRecordsToAcquire`); None when it may take none.
    fn acquire_limits(&self, fetch_offset: i64, max_records: i64, last_offset: i64) -> Option<(i64, i64)> {
        let mut max = max_records.min(self.config.max_record_locks() - self.in_flight_records());
        let mut last_to_acquire = last_offset;
        if max <= 0 {
            // The window is full, but a fetch inside it may still take released records.
            if fetch_offset >= self.end_offset {
                return None;
            }
            max = max_records.min(self.end_offset - fetch_offset);
            last_to_acquire = last_offset.min(self.end_offset - 1);
        }
        (max > 0).then_some((last_to_acquire, max))
    }

    /// Archives the AVAILABLE records cached between the fetch offset and the first batch
    /// read: the log no longer has them (compaction). Not persisted, as in Kafka.
    fn archive_stale(&mut self, fetch_offset: i64, base: i64) {
        if fetch_offset >= base {
            return;
        }
        for batch in self.cache.values_mut() {
            if batch.first_offset >= base {
                break;
            }
            batch.update_range(fetch_offset, base - 1, InFlightState::is_acquirable, |_, _, s| {
                s.state = RecordState::Archived;
            });
        }
    }

    /// Acquires the AVAILABLE cached records in `[base, last_to_acquire]`.
    fn acquire_cached(&mut self, acq: &mut Acquisition, base: i64, last_to_acquire: i64) {
        let from = base.max(self.start_offset);
        let mut keys: Vec<i64> = self
            .cache
            .range(..=last_to_acquire)
            .rev()
            .take_while(|(_, b)| b.last_offset >= from)
            .map(|(k, _)| *k)
            .collect();
        keys.reverse();
        let limit = self.config.delivery_count_limit;
        let throttle_count = self.config.throttle_delivery_count();
        for key in keys {
            if acq.count >= acq.max {
                break;
            }
            let Some(batch) = self.cache.get_mut(&key) else { continue };
            let full_match = batch.first_offset >= base && batch.last_offset <= last_to_acquire;
            let remaining = acq.max - acq.count;
            let record_limit_subset = acq.mode == ShareAcquireMode::RecordLimit && batch.len() > remaining;
            let throttle = should_throttle(batch, base, last_to_acquire, throttle_count);
            if throttle && acq.count > 0 {
                // Deliver the often-delivered records on their own in a later fetch, so
                // that one bad record does not use up the deliveries of many.
                acq.stopped = true;
                break;
            }
            if let States::Whole(s) = &mut batch.states {
                if !s.is_acquirable() {
                    continue;
                }
                if full_match && !record_limit_subset && !throttle {
                    s.acquire(&acq.owner, acq.deadline_ms);
                    acq.push(batch.first_offset, batch.last_offset, s.delivery_count);
                    acq.count += batch.len();
                    continue;
                }
            }
            let got = acquire_subset(batch, acq, base, last_to_acquire, remaining, limit, throttle_count);
            acq.count += got;
            if throttle && got > 0 {
                acq.stopped = true;
                break;
            }
        }
    }

    /// Acquires the records read past the end offset, as new in-flight batches (Kafka's
    /// `acquireNewBatchRecords`).
    fn acquire_new(
        &mut self,
        acq: &mut Acquisition,
        batches: &[LogBatch],
        base: i64,
        last_to_acquire: i64,
        batch_size: i32,
    ) {
        if acq.stopped || acq.count >= acq.max {
            return;
        }
        let from = base.max(self.end_offset);
        if from > last_to_acquire {
            return;
        }
        let remaining = acq.max - acq.count;
        let mut last = last_to_acquire;
        if remaining < last - from + 1 {
            last = last_offset_of_batch_with(batches, from + remaining - 1);
        }
        let window_start = if self.cache.is_empty() { from } else { self.start_offset };
        last = last.min(window_start + self.config.max_record_locks() - 1);
        if last < from {
            return;
        }
        if self.cache.is_empty() {
            // Nothing in flight: the partition starts at the first record read (the log
            // may start past the start offset).
            self.start_offset = self.start_offset.max(from);
        } else if from > self.end_offset {
            // The log has no records between the end offset and the first batch read
            // (compacted away): nothing to deliver there. Kafka leaves a hole in its cache;
            // here the cache stays contiguous.
            let hole = InFlightState::new(RecordState::Archived, 0);
            self.cache.insert(self.end_offset, InFlightBatch::whole(self.end_offset, from - 1, hole));
        }
        match acq.mode {
            ShareAcquireMode::BatchOptimized => {
                let mut current = from;
                if batch_size > 0 && last - from + 1 > i64::from(batch_size) {
                    for b in batches {
                        if b.first_offset > last {
                            break;
                        }
                        if b.first_offset - current >= i64::from(batch_size) {
                            self.add_acquired_batch(acq, current, b.first_offset - 1);
                            current = b.first_offset;
                        }
                    }
                }
                self.add_acquired_batch(acq, current, last);
            }
            ShareAcquireMode::RecordLimit if last - from + 1 > remaining => {
                // One in-flight batch for the records read; the first `remaining` acquired,
                // the rest AVAILABLE for the next fetch.
                let acquired_last = from + remaining - 1;
                let states = (from..=last)
                    .map(|offset| match offset <= acquired_last {
                        true => InFlightState::acquired(&acq.owner, acq.deadline_ms),
                        false => InFlightState::new(RecordState::Available, 0),
                    })
                    .collect();
                self.cache.insert(
                    from,
                    InFlightBatch { first_offset: from, last_offset: last, states: States::PerOffset(states) },
                );
                acq.push(from, acquired_last, 1);
                acq.count += remaining;
            }
            ShareAcquireMode::RecordLimit => self.add_acquired_batch(acq, from, last),
        }
        self.end_offset = last + 1;
    }

    fn add_acquired_batch(&mut self, acq: &mut Acquisition, first: i64, last: i64) {
        let state = InFlightState::acquired(&acq.owner, acq.deadline_ms);
        self.cache.insert(first, InFlightBatch::whole(first, last, state));
        acq.push(first, last, 1);
        acq.count += last - first + 1;
    }

    /// Archives the ACQUIRED records of the given ranges (aborted transactions): they are
    /// never delivered. Not persisted, as in Kafka.
    fn archive_acquired(&mut self, ranges: &[(i64, i64)]) {
        for &(first, last) in ranges {
            for batch in self.cache.values_mut() {
                if batch.first_offset > last {
                    break;
                }
                batch.update_range(
                    first,
                    last,
                    |s| s.state == RecordState::Acquired,
                    |_, _, s| {
                        s.state = RecordState::Archived;
                        s.lock = None;
                    },
                );
            }
        }
    }
}

/// The batches the fetch may acquire: under read_committed, none at or past the last
/// stable offset.
fn readable_batches<'a>(request: &AcquireRequest<'a>) -> &'a [LogBatch] {
    match request.isolation {
        Isolation::ReadUncommitted => request.batches,
        Isolation::ReadCommitted { last_stable_offset, .. } => {
            let n = request.batches.iter().take_while(|b| b.last_offset < last_stable_offset).count();
            &request.batches[..n]
        }
    }
}

/// Whether the batch's records have been delivered often enough to be throttled (Kafka's
/// `shouldThrottleRecordsDelivery`: a whole batch by its count, whatever its state).
fn should_throttle(batch: &InFlightBatch, first: i64, last: i64, throttle_count: i16) -> bool {
    match &batch.states {
        States::Whole(s) => s.delivery_count >= throttle_count,
        States::PerOffset(states) => states
            .iter()
            .enumerate()
            .filter(|(i, s)| {
                let offset = batch.first_offset + *i as i64;
                offset >= first && offset <= last && s.state == RecordState::Available
            })
            .any(|(_, s)| s.delivery_count >= throttle_count),
    }
}

/// Acquires single offsets of `batch` in `[first, last]` (Kafka's `acquireSubsetBatchRecords`).
fn acquire_subset(
    batch: &mut InFlightBatch,
    acq: &mut Acquisition,
    first: i64,
    last: i64,
    remaining: i64,
    limit: i16,
    throttle_count: i16,
) -> i64 {
    let first_offset = batch.first_offset;
    let size = batch.len();
    let states = batch.split();
    let mut got = 0i64;
    let mut throttled_max: i64 = -1;
    for (i, s) in states.iter_mut().enumerate() {
        let offset = first_offset + i as i64;
        if offset > last {
            break;
        }
        if offset < first || !s.is_acquirable() {
            continue;
        }
        let count = s.delivery_count;
        // A record on its last attempt goes alone: if it is what breaks the consumer, it
        // does not take other records' deliveries with it.
        if limit > 2 && count == limit - 1 && got > 0 {
            break;
        }
        if count >= throttle_count && throttled_max < 0 {
            let shift = (count - throttle_count + 1).clamp(0, 62) as u32;
            throttled_max = (size >> shift).max(1);
        }
        s.acquire(&acq.owner, acq.deadline_ms);
        acq.push(offset, offset, s.delivery_count);
        got += 1;
        if s.delivery_count == limit && limit > 2 {
            break;
        }
        if acq.mode == ShareAcquireMode::RecordLimit && got == remaining {
            break;
        }
        if got == throttled_max {
            break;
        }
    }
    got
}

/// The last offset of the read batch holding `offset`, or `offset` when none does
/// (Kafka's `lastOffsetFromBatchWithRequestOffset`).
fn last_offset_of_batch_with(batches: &[LogBatch], offset: i64) -> i64 {
    match batches.iter().take_while(|b| b.first_offset <= offset).last() {
        Some(b) if offset <= b.last_offset => b.last_offset,
        _ => offset,
    }
}

/// `records` without the offsets of `ranges` (both in offset order), as Kafka's
/// `filterRecordBatchesFromAcquiredRecords`.
fn without_ranges(records: Vec<AcquiredRecords>, ranges: &[(i64, i64)]) -> Vec<AcquiredRecords> {
    if ranges.is_empty() {
        return records;
    }
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let mut first = r.first_offset;
        for &(a, b) in ranges {
            if b < first || a > r.last_offset {
                continue;
            }
            if a > first {
                out.push(AcquiredRecords { first_offset: first, last_offset: a - 1, ..r });
            }
            first = first.max(b + 1);
        }
        if first <= r.last_offset {
            out.push(AcquiredRecords { first_offset: first, ..r });
        }
    }
    out
}
