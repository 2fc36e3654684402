//! A replica fetcher's incremental fetch session with its leader (KIP-227, Kafka's
//! `FetchSessionHandler`), sans-I/O. The first fetch is full and names every partition;
//! the leader opens a session and answers its id. From then on a fetch names only the
//! partitions whose fetch state changed (offset, log start, leader epoch, ...) and those
//! the session should forget, and the leader answers only the partitions with news, so a
//! follower of many idle partitions sends and receives little. Any doubt about what the
//! leader's session holds (a failed request, a session error) makes the next fetch full
//! again, closing the old session.

use osprey_protocol::messages::fetch_request::FetchPartition;
use osprey_protocol::{ErrorCode, Uuid};
use std::collections::HashMap;

/// KIP-227's epochs: 0 opens a session with a full fetch.
const INITIAL_EPOCH: i32 = 0;

/// A partition of the session: topic id and index.
pub type SessionKey = (Uuid, i32);

/// What one fetch sends.
#[derive(Debug, PartialEq)]
pub struct SessionFetch {
    pub session_id: i32,
    pub epoch: i32,
    /// The partitions to name: all of them in a full fetch, the changed ones otherwise.
    pub send: Vec<(SessionKey, FetchPartition)>,
    /// Partitions the leader's session holds and this fetch no longer wants.
    pub forget: Vec<SessionKey>,
}

impl SessionFetch {
    pub fn is_full(&self) -> bool {
        self.epoch == INITIAL_EPOCH
    }
}

#[derive(Debug, Default)]
pub struct FetchSession {
    /// The leader's session id (0: none).
    id: i32,
    /// The epoch of the next fetch (0: a full one).
    epoch: i32,
    /// Each partition's fetch state as the leader's session holds it.
    held: HashMap<SessionKey, FetchPartition>,
    /// What the session will hold once the fetch in flight succeeds.
    in_flight: Option<HashMap<SessionKey, FetchPartition>>,
}

impl FetchSession {
    /// The fetch for the partitions `wanted` now, with their current fetch state.
    pub fn next_fetch(&mut self, wanted: Vec<(SessionKey, FetchPartition)>) -> SessionFetch {
        let fetch = if self.id == 0 || self.epoch == INITIAL_EPOCH {
            SessionFetch { session_id: self.id, epoch: INITIAL_EPOCH, send: wanted.clone(), forget: Vec::new() }
        } else {
            let send = wanted.iter().filter(|(key, state)| self.held.get(key) != Some(state)).cloned().collect();
            let mut forget: Vec<SessionKey> =
                self.held.keys().filter(|key| !wanted.iter().any(|(k, _)| k == *key)).copied().collect();
            forget.sort_unstable_by_key(|(topic, index)| (topic.0, *index));
            SessionFetch { session_id: self.id, epoch: self.epoch, send, forget }
        };
        self.in_flight = Some(wanted.into_iter().collect());
        fetch
    }

    /// The leader answered the fetch in flight: `error` at the top, and the session id.
    /// Whether to fetch again at once (a session error: the next fetch is full).
    pub fn answered(&mut self, error: ErrorCode, session_id: i32, was_full: bool) -> bool {
        let sent = self.in_flight.take();
        match error {
            ErrorCode::NONE => {}
            // As Kafka's `FetchSessionHandler`: a session the leader does not know is not
            // closed; any other error closes it with the next (full) fetch.
            ErrorCode::FETCH_SESSION_ID_NOT_FOUND => {
                *self = FetchSession::default();
                return true;
            }
            ErrorCode::INVALID_FETCH_SESSION_EPOCH | ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR => {
                self.restart();
                return true;
            }
            _ => {
                self.restart();
                return false;
            }
        }
        if session_id == 0 {
            // The leader keeps no session (none free, or it forgot every partition):
            // every fetch is full.
            *self = FetchSession::default();
            return false;
        }
        if was_full {
            self.id = session_id;
            self.epoch = INITIAL_EPOCH;
        }
        self.held = sent.unwrap_or_default();
        self.epoch = next_epoch(self.epoch);
        false
    }

    /// The fetch in flight failed (no answer): what the leader's session holds is
    /// unknown, so the next fetch is full, closing that session.
    pub fn failed(&mut self) {
        self.in_flight = None;
        self.restart();
    }

    fn restart(&mut self) {
        self.epoch = INITIAL_EPOCH;
        self.held.clear();
    }
}

/// Kafka's `FetchMetadata.nextEpoch`: 1 after the largest.
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(index: i32) -> SessionKey {
        (Uuid([1; 16]), index)
    }

    fn at(offset: i64) -> FetchPartition {
        FetchPartition { fetch_offset: offset, ..Default::default() }
    }

    fn names(fetch: &SessionFetch) -> Vec<i32> {
        fetch.send.iter().map(|((_, index), _)| *index).collect()
    }

    #[test]
    fn after_a_full_fetch_only_changed_partitions_are_named_and_dropped_ones_forgotten() {
        let mut s = FetchSession::default();
        let full = s.next_fetch(vec![(key(0), at(5)), (key(1), at(7)), (key(2), at(0))]);
        assert!(full.is_full() && full.session_id == 0);
        assert_eq!(names(&full), [0, 1, 2]);
        assert!(!s.answered(ErrorCode::NONE, 42, true));

        let next = s.next_fetch(vec![(key(0), at(9)), (key(1), at(7))]);
        assert_eq!((next.session_id, next.epoch), (42, 1));
        assert_eq!(names(&next), [0], "partition 1 did not change");
        assert_eq!(next.forget, [key(2)]);
        s.answered(ErrorCode::NONE, 42, false);

        let idle = s.next_fetch(vec![(key(0), at(9)), (key(1), at(7))]);
        assert_eq!((idle.epoch, names(&idle), idle.forget.len()), (2, vec![], 0));
        s.answered(ErrorCode::NONE, 42, false);
        let back = s.next_fetch(vec![(key(0), at(9)), (key(1), at(7)), (key(2), at(3))]);
        assert_eq!(names(&back), [2], "a partition wanted again is named again");
    }

    #[test]
    fn a_session_error_or_a_failed_fetch_makes_the_next_fetch_full() {
        let mut s = FetchSession::default();
        s.next_fetch(vec![(key(0), at(5))]);
        s.answered(ErrorCode::NONE, 42, true);
        s.next_fetch(vec![(key(0), at(5))]);
        assert!(s.answered(ErrorCode::INVALID_FETCH_SESSION_EPOCH, 0, false), "fetch again at once");
        let full = s.next_fetch(vec![(key(0), at(5))]);
        assert_eq!((full.session_id, full.epoch, names(&full)), (42, 0, vec![0]), "closes 42, opens another");
        s.answered(ErrorCode::NONE, 42, true);
        s.next_fetch(vec![(key(0), at(5))]);
        assert!(s.answered(ErrorCode::FETCH_SESSION_ID_NOT_FOUND, 0, false));
        let full = s.next_fetch(vec![(key(0), at(5))]);
        assert_eq!((full.session_id, full.epoch, names(&full)), (0, 0, vec![0]), "a session the leader lost");

        s.answered(ErrorCode::NONE, 43, true);
        s.next_fetch(vec![(key(0), at(6))]);
        s.failed();
        let full = s.next_fetch(vec![(key(0), at(6))]);
        assert_eq!(
            (full.session_id, full.epoch, names(&full)),
            (43, 0, vec![0]),
            "closes session 43 and opens another"
        );
    }

    #[test]
    fn without_a_session_from_the_leader_every_fetch_is_full() {
        let mut s = FetchSession::default();
        s.next_fetch(vec![(key(0), at(5))]);
        s.answered(ErrorCode::NONE, 0, true);
        let again = s.next_fetch(vec![(key(0), at(5))]);
        assert!(again.is_full());
        assert_eq!(names(&again), [0]);
    }

    #[test]
    fn epochs_wrap_to_one() {
        assert_eq!(next_epoch(1), 2);
        assert_eq!(next_epoch(i32::MAX), 1);
    }
}
