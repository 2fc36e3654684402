//! The leader-epoch cache: for each leader epoch, the first offset appended in it
//! (KIP-101). Answers OffsetForLeaderEpoch and guides follower truncation.

/// Epoch → start offset, epochs and offsets strictly increasing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<(i32, i64)>,
}

/// Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET.
pub const UNDEFINED: (i32, i64) = (-1, -1);

impl LeaderEpochCache {
    /// Builds a cache from entries, dropping any that break monotonicity (a corrupt
    /// checkpoint must not make later lookups wrong).
    pub fn from_entries(entries: impl IntoIterator<Item = (i32, i64)>) -> LeaderEpochCache {
        let mut cache = LeaderEpochCache::default();
        for (epoch, offset) in entries {
            cache.assign(epoch, offset);
        }
        cache
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    /// The newest epoch, if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.0)
    }

    /// Records that `epoch` starts at `start_offset`. Returns whether the cache changed.
    /// Ignores epochs not newer than the latest and offsets below the latest start. A
    /// newer epoch starting where the latest starts replaces it: that leadership appended
    /// nothing (Kafka's `maybeTruncateNonMonotonicEntries`), and two epochs at one offset
    /// would answer OffsetForLeaderEpoch unlike the replicas that never saw the empty one
    /// (found by the partition replication simulation, seed 1001128).
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 {
            return false;
        }
        match self.entries.last() {
            Some(&(e, o)) if epoch <= e || start_offset < o => false,
            Some(&(_, o)) if start_offset == o => {
                self.entries.pop();
                self.entries.push((epoch, start_offset));
                true
            }
            _ => {
                self.entries.push((epoch, start_offset));
                true
            }
        }
    }

    /// Removes epochs starting at or after `end_offset` (log truncated to it).
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|&(_, o)| o < end_offset);
        before != self.entries.len()
    }

    /// Drops epochs wholly below the new log start; the one containing it now starts there.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let keep_from = self.entries.iter().rposition(|&(_, o)| o <= start_offset);
        let mut changed = false;
        if let Some(i) = keep_from {
            if i > 0 {
                self.entries.drain(..i);
                changed = true;
            }
            if self.entries[0].1 < start_offset {
                self.entries[0].1 = start_offset;
                changed = true;
            }
        }
        changed
    }

    /// OffsetForLeaderEpoch, exactly as Kafka's `LeaderEpochFileCache.endOffsetFor`:
    /// `(largest epoch <= requested, start offset of the next epoch or log end)`.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        if requested < 0 {
            return UNDEFINED;
        }
        if self.latest_epoch() == Some(requested) {
            return (requested, log_end_offset);
        }
        let Some(higher) = self.entries.iter().find(|&&(e, _)| e > requested) else {
            return UNDEFINED;
        };
        match self.entries.iter().rev().find(|&&(e, _)| e <= requested) {
            Some(&(floor, _)) => (floor, higher.1),
            None => (requested, higher.1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_offset_for_follows_kafka_rules() {
        let c = LeaderEpochCache::from_entries([(1, 0), (3, 10), (5, 20)]);
        assert_eq!(c.end_offset_for(5, 30), (5, 30));
        assert_eq!(c.end_offset_for(3, 30), (3, 20));
        assert_eq!(c.end_offset_for(4, 30), (3, 20));
        assert_eq!(c.end_offset_for(0, 30), (0, 0));
        assert_eq!(c.end_offset_for(6, 30), UNDEFINED);
        assert_eq!(c.end_offset_for(-1, 30), UNDEFINED);
    }

    #[test]
    fn non_monotonic_entries_are_dropped() {
        let c = LeaderEpochCache::from_entries([(3, 10), (2, 20), (4, 5), (5, 30)]);
        assert_eq!(c.entries(), &[(3, 10), (5, 30)]);
    }

    #[test]
    fn a_newer_epoch_at_the_same_start_replaces_an_empty_one() {
        // Leader in epoch 4 at offset 310 appending nothing, then leader in epoch 6 there.
        let mut c = LeaderEpochCache::from_entries([(2, 262), (4, 310)]);
        assert!(c.assign(6, 310));
        assert_eq!(c.entries(), &[(2, 262), (6, 310)]);
        assert_eq!(c.end_offset_for(4, 400), (2, 310), "as a replica that never saw epoch 4 answers");
        assert!(!c.assign(6, 310), "the same entry again changes nothing");
    }

    #[test]
    fn truncation_from_both_ends() {
        let mut c = LeaderEpochCache::from_entries([(1, 0), (3, 10), (5, 20)]);
        c.truncate_from_end(20);
        assert_eq!(c.entries(), &[(1, 0), (3, 10)]);
        c.truncate_from_start(15);
        assert_eq!(c.entries(), &[(3, 15)]);
    }
}
