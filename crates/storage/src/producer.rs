//! Idempotent-producer state: per producer id, its epoch and its last 5 batches
//! (sequence and offset ranges), so a retried batch is recognised as a duplicate and a
//! gap in sequences is refused. Everything needed is in the batch header, so the state
//! is rebuilt from the log tail by reading headers only; snapshots (`<offset>.snapshot`)
//! taken at segment roll and clean close bound that scan.
//!
//! It also holds each producer's ongoing transaction (Kafka's `currentTxnFirstOffset`):
//! the first offset of its first transactional batch since its last transaction marker.
//! The oldest of those bounds the last stable offset; snapshots carry them so the LSO is
//! right after a restart.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::batch::BatchHeader;

/// Batches remembered per producer, as Kafka (max.in.flight.requests.per.connection <= 5).
pub const BATCHES_PER_PRODUCER: usize = 5;
/// Snapshot file magic and version.
const SNAPSHOT_MAGIC: &[u8; 4] = b"OSPS";
/// Version 3 adds each producer's coordinator epoch; version 2 added its ongoing
/// transaction. Versions 1 and 2 are still read.
const SNAPSHOT_VERSION: u16 = 3;
const SNAPSHOT_VERSION_WITHOUT_COORDINATOR_EPOCH: u16 = 2;
const SNAPSHOT_VERSION_WITHOUT_TXNS: u16 = 1;
/// Smallest entry of any version (id, epoch, batch count), to bound the entry count.
const ENTRY_HEADER: usize = 8 + 2 + 1;
const BATCH_ENTRY: usize = 4 + 4 + 8 + 8 + 8;

/// One remembered batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    /// baseSequence.
    pub first_seq: i32,
    /// baseSequence + lastOffsetDelta (wrapping at i32::MAX as Kafka does).
    pub last_seq: i32,
    /// Offset assigned to its first record.
    pub first_offset: i64,
    /// Offset assigned to its last record.
    pub last_offset: i64,
    /// Its max timestamp.
    pub max_timestamp: i64,
}

/// A producer's epoch and recent batches, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    /// Current producer epoch.
    pub epoch: i16,
    /// Up to `BATCHES_PER_PRODUCER` batches.
    pub batches: VecDeque<BatchMetadata>,
    /// First offset of its ongoing transaction, if one is open.
    pub current_txn_first_offset: Option<i64>,
    /// The coordinator epoch of its last transaction marker, -1 before any (Kafka's
    /// `coordinatorEpoch`): a marker from an older coordinator epoch is refused.
    pub coordinator_epoch: i32,
}

impl Default for ProducerEntry {
    fn default() -> ProducerEntry {
        ProducerEntry { epoch: 0, batches: VecDeque::new(), current_txn_first_offset: None, coordinator_epoch: -1 }
    }
}

/// A producer's newest batch, as compaction must keep it (Kafka's `LastRecord`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastBatch {
    /// Last offset of its newest data batch; `None` when a marker bumped the epoch since
    /// (the batches were forgotten), in which case that marker is the one to keep.
    pub last_data_offset: Option<i64>,
    /// Its current epoch.
    pub epoch: i16,
}

impl LastBatch {
    /// Whether `h` is this producer's newest batch (Kafka's `isBatchLastRecordOfProducer`):
    /// the data batch ending at its last data offset, or, with no data batch remembered,
    /// a marker of its current epoch.
    pub(crate) fn is(&self, h: &BatchHeader) -> bool {
        match self.last_data_offset {
            Some(offset) => h.last_offset() == offset,
            None => h.is_control() && h.producer_epoch == self.epoch,
        }
    }
}

/// A transaction ended by a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    /// Producer id.
    pub producer_id: i64,
    /// First offset of the transaction (the marker's own offset if none was open).
    pub first_offset: i64,
    /// Offset of the marker.
    pub last_offset: i64,
    /// Commit (true) or abort (false).
    pub commit: bool,
}

/// Why an idempotent batch is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    /// A transaction marker from an older coordinator epoch than the producer's last
    /// marker (TRANSACTION_COORDINATOR_FENCED, 52): a deposed coordinator's.
    #[error("producer {producer_id}: marker of coordinator epoch {coordinator_epoch} is older than the last one's {current}")]
    CoordinatorFenced {
        /// Producer id.
        producer_id: i64,
        /// The marker's coordinator epoch.
        coordinator_epoch: i32,
        /// The coordinator epoch of the producer's last marker.
        current: i32,
    },
    /// The batch's producer epoch is older than the producer's (INVALID_PRODUCER_EPOCH, 47).
    #[error("producer {producer_id} epoch {epoch} is older than the current {current}")]
    InvalidProducerEpoch {
        /// Producer id.
        producer_id: i64,
        /// Epoch in the batch.
        epoch: i16,
        /// Epoch on record.
        current: i16,
    },
    /// The sequence does not follow the last one (OUT_OF_ORDER_SEQUENCE_NUMBER, 45).
    #[error("producer {producer_id} sequence {first_seq} does not follow {expected_after}")]
    OutOfOrderSequence {
        /// Producer id.
        producer_id: i64,
        /// baseSequence in the batch.
        first_seq: i32,
        /// Last sequence on record (-1 for a new epoch, which must start at 0).
        expected_after: i32,
    },
}

/// What the check decided for an idempotent batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Not idempotent (no producer id or sequence): nothing to check.
    NotIdempotent,
    /// Append it.
    Accept,
    /// An exact retry of a kept batch: answer with its original offsets, append nothing.
    Duplicate(BatchMetadata),
}

/// All producers of a partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStateTable {
    producers: HashMap<i64, ProducerEntry>,
    /// The ongoing transactions as (first offset, producer id), oldest first: the
    /// producers' `current_txn_first_offset`s, ordered so that the first unstable offset
    /// (asked on every append report and read_committed fetch) costs no scan of the
    /// producers (Kafka's `ongoingTxns`).
    ongoing_txns: BTreeSet<(i64, i64)>,
}

impl ProducerStateTable {
    /// Every producer, by producer id.
    pub fn iter(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> {
        self.producers.iter().map(|(id, e)| (*id, e))
    }

    /// The state of one producer.
    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Number of producers tracked.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// Whether no producer is tracked.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Forgets producers idle for `expiration_ms` (Kafka's `producer.id.expiration.ms`):
    /// those whose newest batch's max timestamp is at least that much older than
    /// `now_ms`. Returns how many were removed. A later batch from one of them is then
    /// accepted at any sequence, as for any unknown producer (KIP-360).
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        // A producer with an open transaction is kept, as Kafka does: forgetting it would
        // move the LSO past data whose fate is not decided yet.
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some()
                || e.batches.back().is_none_or(|last| now_ms.saturating_sub(last.max_timestamp) < expiration_ms)
        });
        before - self.producers.len()
    }

    /// Producer id → what identifies its newest batch: the batches compaction must keep
    /// (emptied if need be) so the producer's sequence and epoch survive a reload (Kafka's
    /// `lastRecordsOfActiveProducers`).
    pub(crate) fn last_batches(&self) -> HashMap<i64, LastBatch> {
        self.producers
            .iter()
            .map(|(&id, e)| {
                (id, LastBatch { last_data_offset: e.batches.back().map(|b| b.last_offset), epoch: e.epoch })
            })
            .collect()
    }

    /// A copy of the entries of the given producers, to check a multi-batch append
    /// batch by batch without cloning the whole table.
    pub(crate) fn subset(&self, ids: impl Iterator<Item = i64>) -> ProducerStateTable {
        let mut out = ProducerStateTable::default();
        for id in ids {
            if let Some(e) = self.producers.get(&id) {
                out.insert(id, e.clone());
            }
        }
        out
    }

    /// Checks a batch against the producer's state (Kafka's rules; an unknown producer,
    /// e.g. one whose state expired, is accepted at any sequence since KIP-360).
    pub fn check(&self, h: &BatchHeader) -> Result<SequenceCheck, SequenceError> {
        if h.is_control() && h.producer_id >= 0 {
            // A marker carries no sequence, but one from a fenced epoch is refused.
            return match self.producers.get(&h.producer_id) {
                Some(e) if h.producer_epoch < e.epoch => Err(SequenceError::InvalidProducerEpoch {
                    producer_id: h.producer_id,
                    epoch: h.producer_epoch,
                    current: e.epoch,
                }),
                _ => Ok(SequenceCheck::NotIdempotent),
            };
        }
        if h.producer_id < 0 || h.base_sequence < 0 {
            return Ok(SequenceCheck::NotIdempotent);
        }
        let Some(entry) = self.producers.get(&h.producer_id) else {
            return Ok(SequenceCheck::Accept);
        };
        let last_seq = last_sequence(h);
        if h.producer_epoch < entry.epoch {
            return Err(SequenceError::InvalidProducerEpoch {
                producer_id: h.producer_id,
                epoch: h.producer_epoch,
                current: entry.epoch,
            });
        }
        if h.producer_epoch > entry.epoch {
            if h.base_sequence != 0 {
                return Err(SequenceError::OutOfOrderSequence {
                    producer_id: h.producer_id,
                    first_seq: h.base_sequence,
                    expected_after: -1,
                });
            }
            return Ok(SequenceCheck::Accept);
        }
        if let Some(dup) = entry.batches.iter().find(|b| b.first_seq == h.base_sequence && b.last_seq == last_seq) {
            return Ok(SequenceCheck::Duplicate(*dup));
        }
        // No batch of this epoch yet (a transaction version 2 marker bumped the epoch):
        // the epoch's first batch must be sequence 0, as in Kafka's `checkSequence`.
        // Accepting a later one would leave a gap that no retry of sequence 0 can fill.
        let expected_after = entry.batches.back().map_or(-1, |last| last.last_seq);
        if h.base_sequence != next_sequence(expected_after) {
            return Err(SequenceError::OutOfOrderSequence {
                producer_id: h.producer_id,
                first_seq: h.base_sequence,
                expected_after,
            });
        }
        Ok(SequenceCheck::Accept)
    }

    /// Checks a transaction marker's coordinator epoch against the producer's last
    /// marker's (Kafka's `checkCoordinatorEpoch`), on the leader: an older one comes from
    /// a coordinator that has lost its `__transaction_state` partition since.
    pub fn check_marker(&self, producer_id: i64, coordinator_epoch: i32) -> Result<(), SequenceError> {
        match self.producers.get(&producer_id) {
            Some(e) if e.coordinator_epoch > coordinator_epoch => {
                Err(SequenceError::CoordinatorFenced { producer_id, coordinator_epoch, current: e.coordinator_epoch })
            }
            _ => Ok(()),
        }
    }

    /// Records a batch as appended (its header carries the assigned offsets). Called for
    /// every idempotent batch in log order, on append and when rebuilding from the log.
    pub fn record(&mut self, h: &BatchHeader) {
        if h.producer_id < 0 {
            return;
        }
        if h.base_sequence < 0 {
            // A coordinator's transactional write (offsets committed in a transaction)
            // carries no sequence but still opens the producer's transaction here.
            if h.is_transactional() && !h.is_control() {
                let entry = self.producers.entry(h.producer_id).or_default();
                if h.producer_epoch > entry.epoch {
                    entry.epoch = h.producer_epoch;
                    entry.batches.clear();
                }
                if entry.current_txn_first_offset.is_none() {
                    entry.current_txn_first_offset = Some(h.base_offset);
                    self.ongoing_txns.insert((h.base_offset, h.producer_id));
                }
            }
            return;
        }
        let entry = self.producers.entry(h.producer_id).or_default();
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == BATCHES_PER_PRODUCER {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchMetadata {
            first_seq: h.base_sequence,
            last_seq: last_sequence(h),
            first_offset: h.base_offset,
            last_offset: h.last_offset(),
            max_timestamp: h.max_timestamp,
        });
        if h.is_transactional() && !h.is_control() && entry.current_txn_first_offset.is_none() {
            entry.current_txn_first_offset = Some(h.base_offset);
            self.ongoing_txns.insert((h.base_offset, h.producer_id));
        }
    }

    /// Records a transaction marker (a control batch at `h.base_offset` whose record says
    /// commit or abort, written by coordinator epoch `coordinator_epoch`): ends the
    /// producer's ongoing transaction and adopts the marker's epochs, as Kafka's
    /// `appendEndTxnMarker`. A marker with no open transaction still completes one that
    /// starts and ends at the marker, as in Kafka.
    pub fn complete_txn(&mut self, h: &BatchHeader, commit: bool, coordinator_epoch: i32) -> CompletedTxn {
        let entry = self.producers.entry(h.producer_id).or_default();
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        entry.coordinator_epoch = coordinator_epoch;
        let first_offset = match entry.current_txn_first_offset.take() {
            Some(first) => {
                self.ongoing_txns.remove(&(first, h.producer_id));
                first
            }
            None => h.base_offset,
        };
        CompletedTxn { producer_id: h.producer_id, first_offset, last_offset: h.base_offset, commit }
    }

    /// First offset of the oldest ongoing transaction: the last stable offset can be no
    /// higher. O(log n) in the ongoing transactions.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing_txns.first().map(|&(first, _)| first)
    }

    /// Adds a producer's entry (no entry for it yet) with its ongoing transaction.
    fn insert(&mut self, id: i64, entry: ProducerEntry) {
        if let Some(first) = entry.current_txn_first_offset {
            self.ongoing_txns.insert((first, id));
        }
        self.producers.insert(id, entry);
    }

    /// Serialises the table (with a trailing CRC-32C so a torn snapshot is detected).
    pub fn to_snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<_> = self.producers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let entry = &self.producers[&id];
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&entry.epoch.to_be_bytes());
            out.push(entry.batches.len() as u8);
            out.extend_from_slice(&entry.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
            out.extend_from_slice(&entry.coordinator_epoch.to_be_bytes());
            for b in &entry.batches {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.first_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
                out.extend_from_slice(&b.max_timestamp.to_be_bytes());
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Parses a snapshot; `None` if it is torn, corrupt or of another version.
    pub fn from_snapshot(bytes: &[u8]) -> Option<ProducerStateTable> {
        let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
        if crc32c::crc32c(body).to_be_bytes() != crc || body.get(..4)? != SNAPSHOT_MAGIC {
            return None;
        }
        let mut r = Reader { buf: body, pos: 4 };
        let version = r.u16()?;
        if !matches!(
            version,
            SNAPSHOT_VERSION | SNAPSHOT_VERSION_WITHOUT_COORDINATOR_EPOCH | SNAPSHOT_VERSION_WITHOUT_TXNS
        ) {
            return None;
        }
        let count = r.u32()? as usize;
        // Check the count against the bytes present before reserving memory for it.
        if count > (body.len() - r.pos) / ENTRY_HEADER {
            return None;
        }
        let mut table = ProducerStateTable { producers: HashMap::with_capacity(count), ongoing_txns: BTreeSet::new() };
        for _ in 0..count {
            let id = r.i64()?;
            let epoch = r.u16()? as i16;
            let n = usize::from(r.u8()?);
            let current_txn_first_offset = match version {
                SNAPSHOT_VERSION_WITHOUT_TXNS => None,
                _ => Some(r.i64()?).filter(|&o| o >= 0),
            };
            let coordinator_epoch = match version {
                SNAPSHOT_VERSION => r.u32()? as i32,
                _ => -1,
            };
            if n > BATCHES_PER_PRODUCER || r.buf.len() - r.pos < n * BATCH_ENTRY {
                return None;
            }
            let mut batches = VecDeque::with_capacity(n);
            for _ in 0..n {
                batches.push_back(BatchMetadata {
                    first_seq: r.u32()? as i32,
                    last_seq: r.u32()? as i32,
                    first_offset: r.i64()?,
                    last_offset: r.i64()?,
                    max_timestamp: r.i64()?,
                });
            }
            if table.producers.contains_key(&id) {
                return None;
            }
            table.insert(id, ProducerEntry { epoch, batches, current_txn_first_offset, coordinator_epoch });
        }
        (r.pos == body.len()).then_some(table)
    }
}

/// Sequence after `seq`, wrapping from i32::MAX to 0 as Kafka does.
fn next_sequence(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

fn last_sequence(h: &BatchHeader) -> i32 {
    let last = i64::from(h.base_sequence) + i64::from(h.last_offset_delta);
    if last > i64::from(i32::MAX) {
        (last - i64::from(i32::MAX) - 1) as i32
    } else {
        last as i32
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let bytes = self.buf.get(self.pos..self.pos + N)?;
        self.pos += N;
        bytes.try_into().ok()
    }

    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_be_bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_be_bytes)
    }

    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pid: i64, epoch: i16, seq: i32, records: i32, offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset: offset,
            batch_length: 49,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: records - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            records_count: records,
        }
    }

    #[test]
    fn retried_batch_is_a_duplicate_with_its_original_offsets() {
        let mut t = ProducerStateTable::default();
        t.record(&header(7, 0, 0, 3, 100));
        t.record(&header(7, 0, 3, 2, 103));
        match t.check(&header(7, 0, 0, 3, -1)).unwrap() {
            SequenceCheck::Duplicate(b) => assert_eq!((b.first_offset, b.last_offset), (100, 102)),
            other => panic!("{other:?}"),
        }
        assert_eq!(t.check(&header(7, 0, 5, 1, -1)).unwrap(), SequenceCheck::Accept);
    }

    #[test]
    fn gaps_old_epochs_and_non_zero_new_epochs_are_refused() {
        let mut t = ProducerStateTable::default();
        t.record(&header(7, 2, 0, 1, 0));
        assert!(matches!(t.check(&header(7, 2, 5, 1, -1)), Err(SequenceError::OutOfOrderSequence { .. })));
        assert!(matches!(t.check(&header(7, 1, 1, 1, -1)), Err(SequenceError::InvalidProducerEpoch { .. })));
        assert!(matches!(t.check(&header(7, 3, 4, 1, -1)), Err(SequenceError::OutOfOrderSequence { .. })));
        assert_eq!(t.check(&header(7, 3, 0, 1, -1)).unwrap(), SequenceCheck::Accept);
        assert_eq!(t.check(&header(8, 0, 42, 1, -1)).unwrap(), SequenceCheck::Accept, "unknown producer");
        assert_eq!(t.check(&header(-1, -1, -1, 1, -1)).unwrap(), SequenceCheck::NotIdempotent);
    }

    #[test]
    fn after_a_marker_bumps_the_epoch_the_first_batch_must_be_sequence_0() {
        // Transaction version 2: the coordinator writes the marker at the bumped epoch.
        let mut t = ProducerStateTable::default();
        t.record(&header(7, 4, 0, 10, 0));
        let mut marker = header(7, 5, -1, 1, 10);
        marker.attributes = crate::batch::ATTR_TRANSACTIONAL | crate::batch::ATTR_CONTROL;
        t.complete_txn(&marker, true, 0);
        // Sequence 0 of the new epoch was delayed (its partition being added to the
        // transaction); a later batch of the epoch must not overtake it.
        assert_eq!(
            t.check(&header(7, 5, 3, 2, -1)).unwrap_err(),
            SequenceError::OutOfOrderSequence { producer_id: 7, first_seq: 3, expected_after: -1 }
        );
        assert_eq!(t.check(&header(7, 5, 0, 3, -1)).unwrap(), SequenceCheck::Accept);
    }

    #[test]
    fn only_the_last_five_batches_are_kept_and_sequences_wrap() {
        let mut t = ProducerStateTable::default();
        for i in 0..7 {
            t.record(&header(1, 0, i, 1, i64::from(i)));
        }
        assert_eq!(t.get(1).unwrap().batches.len(), 5);
        assert_eq!(
            t.check(&header(1, 0, 0, 1, -1)).unwrap_err(),
            SequenceError::OutOfOrderSequence { producer_id: 1, first_seq: 0, expected_after: 6 }
        );
        let mut t = ProducerStateTable::default();
        t.record(&header(1, 0, i32::MAX, 1, 0));
        assert_eq!(t.check(&header(1, 0, 0, 1, -1)).unwrap(), SequenceCheck::Accept);
    }

    #[test]
    fn ongoing_transactions_start_at_the_first_batch_end_at_a_marker_and_survive_snapshots() {
        let mut t = ProducerStateTable::default();
        let txn = |pid, seq, offset| {
            let mut h = header(pid, 0, seq, 1, offset);
            h.attributes = crate::batch::ATTR_TRANSACTIONAL;
            h
        };
        t.record(&txn(1, 0, 10));
        t.record(&txn(2, 0, 11));
        t.record(&txn(1, 1, 12));
        assert_eq!(t.first_unstable_offset(), Some(10));
        let restored = ProducerStateTable::from_snapshot(&t.to_snapshot()).unwrap();
        assert_eq!(restored, t);
        let mut marker = header(1, 0, -1, 1, 13);
        marker.attributes = crate::batch::ATTR_TRANSACTIONAL | crate::batch::ATTR_CONTROL;
        let done = t.complete_txn(&marker, false, 0);
        assert_eq!(done, CompletedTxn { producer_id: 1, first_offset: 10, last_offset: 13, commit: false });
        assert_eq!(t.first_unstable_offset(), Some(11));
        marker.producer_epoch = -1;
        assert!(matches!(t.check(&marker), Err(SequenceError::InvalidProducerEpoch { .. })));
    }

    /// What `first_unstable_offset` must answer: the oldest ongoing transaction's start,
    /// by a scan of every producer.
    fn first_unstable_by_scan(t: &ProducerStateTable) -> Option<i64> {
        t.iter().filter_map(|(_, e)| e.current_txn_first_offset).min()
    }

    #[test]
    fn the_first_unstable_offset_follows_transactions_opened_ended_expired_and_restored() {
        for seed in 1..200u64 {
            let mut rng = seed;
            let mut next = |n: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n
            };
            let mut t = ProducerStateTable::default();
            let mut seqs = [0i32; 8];
            for offset in 0..300i64 {
                let pid = next(8) as i64;
                let mut h = header(pid, 0, seqs[pid as usize], 1, offset);
                match next(10) {
                    0..=4 => {
                        h.attributes = crate::batch::ATTR_TRANSACTIONAL;
                        seqs[pid as usize] += 1;
                        t.record(&h);
                    }
                    5 => {
                        // A coordinator's transactional write: no sequence.
                        h.base_sequence = -1;
                        h.attributes = crate::batch::ATTR_TRANSACTIONAL;
                        t.record(&h);
                    }
                    6..=7 => {
                        h.base_sequence = -1;
                        h.attributes = crate::batch::ATTR_TRANSACTIONAL | crate::batch::ATTR_CONTROL;
                        t.complete_txn(&h, next(2) == 0, 0);
                    }
                    8 => {
                        t.remove_expired(offset, next(300) as i64);
                    }
                    _ => {
                        // Through a copy and a snapshot, as a checked append and a reload do.
                        let copy = t.subset(0..8);
                        assert_eq!(copy, t, "seed {seed}, offset {offset}");
                        t = ProducerStateTable::from_snapshot(&copy.to_snapshot()).unwrap();
                    }
                }
                assert_eq!(t.first_unstable_offset(), first_unstable_by_scan(&t), "seed {seed}, offset {offset}");
            }
        }
    }

    #[test]
    fn a_marker_from_an_older_coordinator_epoch_is_fenced_and_the_epoch_survives_snapshots() {
        let mut t = ProducerStateTable::default();
        assert_eq!(t.check_marker(7, -1), Ok(()), "a producer never marked takes any coordinator epoch");
        let mut marker = header(7, 0, -1, 1, 10);
        marker.attributes = crate::batch::ATTR_TRANSACTIONAL | crate::batch::ATTR_CONTROL;
        t.complete_txn(&marker, true, 5);
        assert_eq!(t.check_marker(7, 5), Ok(()), "the same coordinator epoch again");
        assert_eq!(t.check_marker(7, 6), Ok(()), "a newer coordinator");
        assert_eq!(
            t.check_marker(7, 4),
            Err(SequenceError::CoordinatorFenced { producer_id: 7, coordinator_epoch: 4, current: 5 })
        );
        assert_eq!(t.check_marker(8, 0), Ok(()), "another producer");
        let restored = ProducerStateTable::from_snapshot(&t.to_snapshot()).unwrap();
        assert_eq!(restored.get(7).unwrap().coordinator_epoch, 5);
        assert_eq!(restored, t);
    }

    #[test]
    fn version_2_snapshots_are_still_read_with_no_coordinator_epoch() {
        let mut t = ProducerStateTable::default();
        let mut h = header(7, 1, 0, 2, 100);
        h.attributes = crate::batch::ATTR_TRANSACTIONAL;
        t.record(&h);
        let mut v2 = Vec::new();
        v2.extend_from_slice(SNAPSHOT_MAGIC);
        v2.extend_from_slice(&SNAPSHOT_VERSION_WITHOUT_COORDINATOR_EPOCH.to_be_bytes());
        v2.extend_from_slice(&1u32.to_be_bytes());
        v2.extend_from_slice(&7i64.to_be_bytes());
        v2.extend_from_slice(&1i16.to_be_bytes());
        v2.push(1);
        v2.extend_from_slice(&100i64.to_be_bytes());
        for v in [0i32, 1] {
            v2.extend_from_slice(&v.to_be_bytes());
        }
        for v in [100i64, 101, 0] {
            v2.extend_from_slice(&v.to_be_bytes());
        }
        let crc = crc32c::crc32c(&v2);
        v2.extend_from_slice(&crc.to_be_bytes());
        let restored = ProducerStateTable::from_snapshot(&v2).unwrap();
        assert_eq!(restored, t);
        assert_eq!(restored.get(7).unwrap().coordinator_epoch, -1);
    }

    #[test]
    fn version_1_snapshots_are_still_read() {
        let mut t = ProducerStateTable::default();
        t.record(&header(7, 1, 0, 2, 100));
        let mut v1 = Vec::new();
        v1.extend_from_slice(SNAPSHOT_MAGIC);
        v1.extend_from_slice(&SNAPSHOT_VERSION_WITHOUT_TXNS.to_be_bytes());
        v1.extend_from_slice(&1u32.to_be_bytes());
        v1.extend_from_slice(&7i64.to_be_bytes());
        v1.extend_from_slice(&1i16.to_be_bytes());
        v1.push(1);
        for v in [0i32, 1] {
            v1.extend_from_slice(&v.to_be_bytes());
        }
        for v in [100i64, 101, 0] {
            v1.extend_from_slice(&v.to_be_bytes());
        }
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(ProducerStateTable::from_snapshot(&v1), Some(t));
    }

    #[test]
    fn snapshot_round_trips_and_rejects_corruption() {
        let mut t = ProducerStateTable::default();
        for pid in 0..20 {
            for i in 0..3 {
                t.record(&header(pid, 1, i * 2, 2, pid * 100 + i64::from(i)));
            }
        }
        let snap = t.to_snapshot();
        assert_eq!(ProducerStateTable::from_snapshot(&snap), Some(t));
        for cut in [0, 3, 10, snap.len() - 1] {
            assert_eq!(ProducerStateTable::from_snapshot(&snap[..cut]), None);
        }
        let mut bad = snap.clone();
        bad[20] ^= 1;
        assert_eq!(ProducerStateTable::from_snapshot(&bad), None);
    }
}
