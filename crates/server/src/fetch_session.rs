//! Incremental fetch sessions (KIP-227): a consumer names its partitions once; later
//! requests carry only changes, and responses only partitions with something new.
//!
//! A state machine without I/O: the fetch handler asks [`FetchSessions::begin`] which
//! partitions a request covers, reads them, then asks [`FetchSessions::filter`] which
//! to include in the response (recording what was sent).

use osprey_protocol::{ErrorCode, Uuid};
use std::collections::{BTreeMap, HashMap};

/// Session ids are never 0 (0 means "no session").
pub type SessionId = i32;

/// A partition as a fetch names it: by topic name (v4-12) or topic id (v13+).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
}

/// What the consumer asked for on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionFetch {
    pub fetch_offset: i64,
    pub max_bytes: i32,
    pub current_leader_epoch: i32,
}

/// What the last response told the consumer about a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sent {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
}

#[derive(Debug)]
struct Session {
    /// The epoch the next request must carry.
    next_epoch: i32,
    partitions: BTreeMap<PartitionKey, (PartitionFetch, Option<Sent>)>,
    last_used_ms: i64,
}

/// The outcome of reading a request's session metadata.
#[derive(Debug, PartialEq)]
pub enum Begin {
    /// Read these partitions; answer with this session id (0: none) and include all of
    /// them (`full`) or only those [`FetchSessions::filter`] keeps.
    Fetch { session_id: SessionId, full: bool, partitions: Vec<(PartitionKey, PartitionFetch)> },
    /// Answer with this top-level error and no partitions.
    Error(ErrorCode),
}

#[derive(Debug)]
pub struct FetchSessions {
    sessions: HashMap<SessionId, Session>,
    max_sessions: usize,
    next_id: SessionId,
    /// Sessions unused for this long may be evicted to make room.
    idle_ms: i64,
}

const INITIAL_EPOCH: i32 = 0;
const FINAL_EPOCH: i32 = -1;

impl FetchSessions {
    pub fn new(max_sessions: usize, idle_ms: i64) -> FetchSessions {
        FetchSessions { sessions: HashMap::new(), max_sessions, next_id: 1, idle_ms }
    }

    /// Applies a request's session id, epoch, partitions and forgotten partitions.
    pub fn begin(
        &mut self,
        session_id: SessionId,
        epoch: i32,
        requested: Vec<(PartitionKey, PartitionFetch)>,
        forgotten: &[PartitionKey],
        now_ms: i64,
    ) -> Begin {
        if session_id == 0 || epoch == FINAL_EPOCH {
            if session_id != 0 {
                self.sessions.remove(&session_id);
            }
            if epoch == INITIAL_EPOCH {
                let id = self.create(&requested, now_ms);
                return Begin::Fetch { session_id: id, full: true, partitions: requested };
            }
            // A sessionless full fetch (librdkafka), or the last request of a session.
            return Begin::Fetch { session_id: 0, full: true, partitions: requested };
        }
        let Some(session) = self.sessions.get_mut(&session_id) else {
            return Begin::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND);
        };
        if epoch != session.next_epoch {
            return Begin::Error(ErrorCode::INVALID_FETCH_SESSION_EPOCH);
        }
        session.next_epoch = next_epoch(epoch);
        session.last_used_ms = now_ms;
        for key in forgotten {
            session.partitions.remove(key);
        }
        for (key, fetch) in requested {
            let sent = session.partitions.get(&key).and_then(|(_, sent)| *sent);
            session.partitions.insert(key, (fetch, sent));
        }
        let partitions = session.partitions.iter().map(|(k, (f, _))| (k.clone(), *f)).collect();
        Begin::Fetch { session_id, full: false, partitions }
    }

    /// Whether a partition's fresh read goes into the response, recording what is sent.
    /// Full responses carry everything; incremental ones only partitions with records,
    /// an error, or a changed high watermark, last stable offset or log start offset.
    pub fn filter(
        &mut self,
        session_id: SessionId,
        full: bool,
        key: &PartitionKey,
        now: Sent,
        has_records: bool,
        error: bool,
    ) -> bool {
        let Some(session) = self.sessions.get_mut(&session_id) else { return true };
        let Some((_, sent)) = session.partitions.get_mut(key) else { return full };
        let changed = *sent != Some(now);
        *sent = Some(now);
        full || has_records || error || changed
    }

    fn create(&mut self, partitions: &[(PartitionKey, PartitionFetch)], now_ms: i64) -> SessionId {
        if self.sessions.len() >= self.max_sessions && !self.evict_idle(now_ms) {
            // No room: the consumer falls back to full fetches, which always work.
            return 0;
        }
        let id = self.next_id;
        self.next_id = if self.next_id == i32::MAX { 1 } else { self.next_id + 1 };
        let partitions = partitions.iter().map(|(k, f)| (k.clone(), (*f, None))).collect();
        self.sessions.insert(id, Session { next_epoch: next_epoch(INITIAL_EPOCH), partitions, last_used_ms: now_ms });
        id
    }

    fn evict_idle(&mut self, now_ms: i64) -> bool {
        let oldest = self.sessions.iter().min_by_key(|(_, s)| s.last_used_ms).map(|(id, s)| (*id, s.last_used_ms));
        match oldest {
            Some((id, used)) if now_ms - used >= self.idle_ms => {
                self.sessions.remove(&id);
                true
            }
            _ => false,
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

/// Epochs wrap from i32::MAX to 1 (0 and -1 are reserved).
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

    fn key(p: i32) -> PartitionKey {
        PartitionKey { topic: "t".into(), topic_id: Uuid::ZERO, partition: p }
    }

    fn fetch(offset: i64) -> PartitionFetch {
        PartitionFetch { fetch_offset: offset, max_bytes: 1024, current_leader_epoch: -1 }
    }

    fn sent(hw: i64) -> Sent {
        Sent { high_watermark: hw, last_stable_offset: hw, log_start_offset: 0 }
    }

    #[test]
    fn sessionless_fetch_creates_no_session() {
        let mut s = FetchSessions::new(10, 1000);
        let b = s.begin(0, -1, vec![(key(0), fetch(0))], &[], 0);
        assert!(matches!(b, Begin::Fetch { session_id: 0, full: true, .. }));
        assert!(s.is_empty());
    }

    #[test]
    fn incremental_requests_keep_partitions_and_send_only_changes() {
        let mut s = FetchSessions::new(10, 1000);
        let Begin::Fetch { session_id, full: true, .. } =
            s.begin(0, 0, vec![(key(0), fetch(0)), (key(1), fetch(0))], &[], 0)
        else {
            panic!("no session")
        };
        assert_ne!(session_id, 0);
        assert!(s.filter(session_id, true, &key(0), sent(5), true, false));
        assert!(s.filter(session_id, true, &key(1), sent(0), false, false));
        // Epoch 1: nothing named; both partitions still covered.
        let Begin::Fetch { partitions, full: false, .. } = s.begin(session_id, 1, vec![], &[], 1) else { panic!() };
        assert_eq!(partitions.len(), 2);
        assert!(!s.filter(session_id, false, &key(1), sent(0), false, false), "unchanged partition omitted");
        assert!(s.filter(session_id, false, &key(1), sent(3), false, false), "moved high watermark included");
        // Epoch 2: forget partition 0.
        let Begin::Fetch { partitions, .. } = s.begin(session_id, 2, vec![], &[key(0)], 2) else { panic!() };
        assert_eq!(partitions, vec![(key(1), fetch(0))]);
    }

    #[test]
    fn wrong_epoch_and_unknown_session_are_errors() {
        let mut s = FetchSessions::new(10, 1000);
        let Begin::Fetch { session_id, .. } = s.begin(0, 0, vec![(key(0), fetch(0))], &[], 0) else { panic!() };
        assert_eq!(s.begin(session_id, 5, vec![], &[], 0), Begin::Error(ErrorCode::INVALID_FETCH_SESSION_EPOCH));
        assert_eq!(s.begin(session_id + 100, 1, vec![], &[], 0), Begin::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND));
        // Closing with the final epoch removes it.
        s.begin(session_id, -1, vec![], &[], 0);
        assert!(s.is_empty());
    }

    #[test]
    fn full_cache_falls_back_to_sessionless_unless_a_session_is_idle() {
        let mut s = FetchSessions::new(1, 1000);
        let Begin::Fetch { session_id: first, .. } = s.begin(0, 0, vec![], &[], 0) else { panic!() };
        assert_ne!(first, 0);
        assert!(matches!(s.begin(0, 0, vec![], &[], 10), Begin::Fetch { session_id: 0, .. }));
        assert!(matches!(s.begin(0, 0, vec![], &[], 5000), Begin::Fetch { session_id, .. } if session_id != 0));
        assert_eq!(s.len(), 1);
    }
}
