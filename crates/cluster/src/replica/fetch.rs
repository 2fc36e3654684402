//! The epoch checks of a follower's Fetch (KIP-320), as pure functions over a log's
//! leader-epoch lookup, so that the broker and the replication simulation
//! (`tests/partition_replication_simulation.rs`) run one piece of code: the leader's
//! diverging-epoch answer and the follower's truncation offset.
//!
//! `end_offset_for` is the log's `LeaderEpochCache::end_offset_for(epoch, log_end_offset)`
//! (Kafka's `endOffsetFor`): the largest epoch at or below the one asked for and where it
//! ends, or `(-1, -1)` when the log knows no such epoch.

use osprey_protocol::ErrorCode;

/// An epoch and the offset it ends at (Kafka's `EpochEndOffset`); `-1, -1` is undefined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEnd {
    pub epoch: i32,
    pub end_offset: i64,
}

/// What a follower sends the leader in a Fetch, for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerFetch {
    pub replica_id: i32,
    /// The leader epoch the follower knows (-1: not checked).
    pub current_leader_epoch: i32,
    /// The follower's log end offset.
    pub fetch_offset: i64,
    /// What the follower has made durable (its fetch offset: it flushes before fetching).
    pub durable_end_offset: i64,
    /// The epoch of the follower's last batch (-1: an empty log).
    pub last_fetched_epoch: i32,
}

/// The leader's answer to a follower's position, once the epochs agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchDecision {
    /// The logs agree up to the fetch offset: read from it.
    Read,
    /// The follower's log diverges: it truncates (see [`truncation_offset`]) and fetches
    /// again. Its position is not taken: the offsets it names are not the leader's.
    Diverging(EpochEnd),
}

/// As the leader: whether the follower's log diverges from this one (Kafka's
/// `UnifiedLog.read` checks in `Partition.readRecords`). OFFSET_OUT_OF_RANGE when this
/// log knows no epoch at or below the follower's last one, or the fetch offset is below
/// the log start; diverging when this log's epoch at or below the follower's is smaller,
/// or ends before the fetch offset.
pub fn diverging_epoch(
    last_fetched_epoch: i32,
    fetch_offset: i64,
    log_start_offset: i64,
    end_offset_for: impl FnOnce(i32) -> (i32, i64),
) -> Result<Option<EpochEnd>, ErrorCode> {
    if last_fetched_epoch < 0 {
        return Ok(None);
    }
    let (epoch, end_offset) = end_offset_for(last_fetched_epoch);
    if epoch < 0 || end_offset < 0 || fetch_offset < log_start_offset {
        return Err(ErrorCode::OFFSET_OUT_OF_RANGE);
    }
    Ok((epoch < last_fetched_epoch || end_offset < fetch_offset).then_some(EpochEnd { epoch, end_offset }))
}

/// As a follower: where to truncate when the leader answered `diverging` (Kafka's
/// `truncateOnFetchResponse`). Without an epoch from the leader, keep only what is
/// committed (`high_watermark`); else cut at the end of that epoch, on whichever log
/// ends it first. The next fetch names the new last epoch and the leader checks again.
pub fn truncation_offset(
    diverging: EpochEnd,
    high_watermark: i64,
    log_end_offset: i64,
    end_offset_for: impl FnOnce(i32) -> (i32, i64),
) -> i64 {
    if diverging.epoch < 0 || diverging.end_offset < 0 {
        return high_watermark;
    }
    let (local_epoch, local_end) = end_offset_for(diverging.epoch);
    if local_epoch < 0 {
        diverging.end_offset.min(log_end_offset)
    } else {
        diverging.end_offset.min(local_end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leader whose epochs are 1 from 0, 3 from 10, 5 from 20; log end 30.
    fn leader(epoch: i32) -> (i32, i64) {
        osprey_storage::epoch::LeaderEpochCache::from_entries([(1, 0), (3, 10), (5, 20)]).end_offset_for(epoch, 30)
    }

    #[test]
    fn agreeing_fetches_read() {
        assert_eq!(diverging_epoch(-1, 0, 0, leader), Ok(None), "an empty follower");
        assert_eq!(diverging_epoch(5, 25, 0, leader), Ok(None));
        assert_eq!(diverging_epoch(3, 20, 0, leader), Ok(None), "at the end of its epoch");
    }

    #[test]
    fn a_follower_past_its_epochs_end_or_in_an_unknown_epoch_diverges() {
        let e = |epoch, end_offset| Ok(Some(EpochEnd { epoch, end_offset }));
        assert_eq!(diverging_epoch(3, 22, 0, leader), e(3, 20));
        assert_eq!(diverging_epoch(4, 15, 0, leader), e(3, 20), "epoch 4 never was the leader's");
        assert_eq!(diverging_epoch(0, 3, 0, leader), e(0, 0), "before the first epoch");
    }

    #[test]
    fn unknown_epochs_and_offsets_below_the_log_start_are_out_of_range() {
        assert_eq!(diverging_epoch(6, 25, 0, leader), Err(ErrorCode::OFFSET_OUT_OF_RANGE));
        assert_eq!(diverging_epoch(5, 3, 4, leader), Err(ErrorCode::OFFSET_OUT_OF_RANGE));
    }

    #[test]
    fn truncation_cuts_where_either_log_ends_the_epoch() {
        let follower =
            |epoch| osprey_storage::epoch::LeaderEpochCache::from_entries([(1, 0), (3, 12)]).end_offset_for(epoch, 25);
        let at = |epoch, end_offset| EpochEnd { epoch, end_offset };
        assert_eq!(truncation_offset(at(3, 20), 5, 25, follower), 20, "the leader's epoch 3 ends first");
        assert_eq!(truncation_offset(at(1, 14), 5, 25, follower), 12, "the follower's epoch 1 ends first");
        assert_eq!(truncation_offset(at(0, 0), 5, 25, follower), 0, "no epoch at or below 0 here");
        assert_eq!(truncation_offset(at(-1, -1), 5, 25, follower), 5, "the high watermark");
    }
}
