//! Incremental fetch sessions (KIP-227): a consumer names its partitions once; later
//! requests carry only changes, and responses only partitions with something new.
//!
//! A state machine without I/O, time passed in, following Kafka's `FetchManager`,
//! `FetchContext` and `FetchSessionCache`. The fetch handler asks
//! [`FetchSessions::begin`] which partitions a request covers (a [`Context`]), reads
//! them, then asks [`FetchSessions::respond`] which reads go into the response; that is
//! also when a full fetch's new session is created, from what was read.
//!
//! The transitions, by the request's (session id, epoch):
//! - (0, -1): sessionless full fetch; no session (librdkafka).
//! - (0, 0): full fetch that opens a new session if the cache has (or can make) room.
//! - (X, 0): reset: close X, then as (0, 0). Clients send it when what they read
//!   changes (rebalance, seek) or after a session error.
//! - (X, -1): close X, then as (0, -1).
//! - (X, n): incremental; FETCH_SESSION_ID_NOT_FOUND for an unknown X,
//!   INVALID_FETCH_SESSION_EPOCH for n other than X's next epoch,
//!   FETCH_SESSION_TOPIC_ID_ERROR when the request version and X disagree on topic ids.
//!   A session left with no partitions is closed and the request answered sessionless.

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
    /// The epoch of the last batch the fetcher has (v12+, KIP-320), -1 if not sent: the
    /// leader answers a diverging epoch when its log disagrees.
    pub last_fetched_epoch: i32,
}

/// What a read of a partition found, as far as the session compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionRead {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub records_bytes: usize,
    pub error: bool,
}

/// How a request is answered, decided by [`FetchSessions::begin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Context {
    /// Answer every partition read, with session id 0.
    Sessionless,
    /// Answer every partition read, and open a session of them if there is room.
    Full { privileged: bool, uses_topic_ids: bool },
    /// Answer only the partitions of this session with news. `epoch` is the one the
    /// request carried: a response is only built if no other request used the session
    /// since. `told`: each partition's (high watermark, log start offset) as the session
    /// held them at `begin`, in its order, to filter against should the session be
    /// closed or evicted before the response (Kafka's context keeps the session itself).
    Incremental { session_id: SessionId, epoch: i32, told: Vec<(i64, i64)> },
}

/// The outcome of reading a request's session metadata.
#[derive(Debug, PartialEq)]
pub enum Begin {
    /// Read these partitions, in this order.
    Fetch { context: Context, partitions: Vec<(PartitionKey, PartitionFetch)> },
    /// Answer with this top-level error, session id 0 and no partitions.
    Error(ErrorCode),
}

/// What goes into the response, decided by [`FetchSessions::respond`].
#[derive(Debug, PartialEq)]
pub enum Respond {
    /// The response's session id, and for each read whether it is included.
    Partitions { session_id: SessionId, include: Vec<bool> },
    /// Answer with this top-level error, this session id and no partitions.
    Error { code: ErrorCode, session_id: SessionId },
}

pub const INITIAL_EPOCH: i32 = 0;
pub const FINAL_EPOCH: i32 = -1;

#[derive(Debug)]
pub struct FetchSessions {
    sessions: HashMap<SessionId, Session>,
    /// `max.incremental.fetch.session.cache.slots`.
    max_sessions: usize,
    /// A session unused for longer than this may be evicted by any new one, and one
    /// created longer ago than this (at its last use) by a larger one.
    eviction_ms: i64,
    /// Session ids are drawn at random, as Kafka's, so that a client still holding an
    /// id from before a restart does not close or use another client's session.
    rng: u64,
}

#[derive(Debug)]
struct Session {
    /// The epoch the next request must carry.
    epoch: i32,
    /// Opened by a follower; followers may evict consumers' sessions.
    privileged: bool,
    /// Opened by a v13+ request, which names topics by id.
    uses_topic_ids: bool,
    created_ms: i64,
    last_used_ms: i64,
    /// The size, and whether the session may be evicted, as of its last use (Kafka's
    /// cache re-files a session in its eviction order only when it is used).
    size_at_last_use: usize,
    evictable_by_privileged: bool,
    evictable_by_all: bool,
    partitions: HashMap<PartitionKey, Cached>,
    /// The order partitions are read in: a partition that returned records moves to
    /// the back, so that under the response's byte limit every partition gets its turn.
    order: BTreeMap<u64, PartitionKey>,
    next_position: u64,
}

/// A session's partition: the request parameters last given, and what the last
/// response told the consumer.
#[derive(Debug)]
struct Cached {
    fetch: PartitionFetch,
    position: u64,
    /// -1 until sent, and after an error, so the partition is sent again.
    high_watermark: i64,
    log_start_offset: i64,
}

impl FetchSessions {
    pub fn new(max_sessions: usize, eviction_ms: i64, seed: u64) -> FetchSessions {
        FetchSessions { sessions: HashMap::new(), max_sessions, eviction_ms, rng: seed }
    }

    /// Applies a request's session id, epoch, partitions and forgotten partitions.
    /// `uses_topic_ids`: the request is v13+; `privileged`: it comes from a follower.
    #[allow(clippy::too_many_arguments)]
    pub fn begin(
        &mut self,
        session_id: SessionId,
        epoch: i32,
        uses_topic_ids: bool,
        privileged: bool,
        requested: Vec<(PartitionKey, PartitionFetch)>,
        forgotten: &[PartitionKey],
        now_ms: i64,
    ) -> Begin {
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            // A full request closes the session it names, if any.
            self.sessions.remove(&session_id);
            let context =
                if epoch == FINAL_EPOCH { Context::Sessionless } else { Context::Full { privileged, uses_topic_ids } };
            return Begin::Fetch { context, partitions: requested };
        }
        let Some(session) = self.sessions.get_mut(&session_id) else {
            return Begin::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND);
        };
        if epoch != session.epoch {
            return Begin::Error(ErrorCode::INVALID_FETCH_SESSION_EPOCH);
        }
        if session.uses_topic_ids != uses_topic_ids {
            return Begin::Error(ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR);
        }
        // Added and updated first, then forgotten: a partition in both is forgotten.
        for (key, fetch) in &requested {
            session.add_or_update(key, *fetch);
        }
        for key in forgotten {
            session.remove(key);
        }
        if session.partitions.is_empty() {
            self.sessions.remove(&session_id);
            return Begin::Fetch { context: Context::Sessionless, partitions: requested };
        }
        session.touch(now_ms, self.eviction_ms);
        session.epoch = next_epoch(session.epoch);
        let partitions = session.order.values().map(|key| (key.clone(), session.partitions[key].fetch)).collect();
        let told = session
            .order
            .values()
            .map(|key| (session.partitions[key].high_watermark, session.partitions[key].log_start_offset))
            .collect();
        Begin::Fetch { context: Context::Incremental { session_id, epoch, told }, partitions }
    }

    /// Decides which reads go into the response, records what they tell the consumer,
    /// and opens a full fetch's session. `reads` are the partitions `begin` gave, in
    /// its order, each with what its read found.
    pub fn respond<'a>(
        &mut self,
        context: &Context,
        reads: impl ExactSizeIterator<Item = (&'a PartitionKey, &'a PartitionFetch, PartitionRead)>,
        now_ms: i64,
    ) -> Respond {
        match context {
            Context::Sessionless => Respond::Partitions { session_id: 0, include: vec![true; reads.len()] },
            &Context::Full { privileged, uses_topic_ids } => {
                let size = reads.len();
                let session_id = self.create(privileged, uses_topic_ids, reads, now_ms);
                Respond::Partitions { session_id, include: vec![true; size] }
            }
            &Context::Incremental { session_id, epoch, ref told } => {
                // Closed or evicted since `begin` (a consumer's closing fetch while its
                // long poll waits): still an incremental response, so only the partitions
                // with news as the session stood; the consumer treats any other as an
                // error. It learns the session is gone on its next request.
                let Some(session) = self.sessions.get_mut(&session_id) else {
                    let include = reads.zip(told).map(|((_, _, read), &told)| has_news(told, read)).collect();
                    return Respond::Partitions { session_id, include };
                };
                if session.epoch != next_epoch(epoch) {
                    // Another request with this session was begun since (a duplicate).
                    return Respond::Error { code: ErrorCode::INVALID_FETCH_SESSION_EPOCH, session_id };
                }
                let include = reads.map(|(key, _, read)| session.must_respond(key, read)).collect();
                Respond::Partitions { session_id, include }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// A new session of the partitions read, if there is room or a session can be
    /// evicted for it; 0 otherwise (the consumer then fetches without a session).
    fn create<'a>(
        &mut self,
        privileged: bool,
        uses_topic_ids: bool,
        reads: impl ExactSizeIterator<Item = (&'a PartitionKey, &'a PartitionFetch, PartitionRead)>,
        now_ms: i64,
    ) -> SessionId {
        if self.sessions.len() >= self.max_sessions && !self.try_evict(privileged, reads.len(), now_ms) {
            return 0;
        }
        let mut session = Session {
            epoch: next_epoch(INITIAL_EPOCH),
            privileged,
            uses_topic_ids,
            created_ms: now_ms,
            last_used_ms: now_ms,
            size_at_last_use: 0,
            evictable_by_privileged: false,
            evictable_by_all: false,
            partitions: HashMap::with_capacity(reads.len()),
            order: BTreeMap::new(),
            next_position: 0,
        };
        for (key, fetch, read) in reads {
            session.add_or_update(key, *fetch);
            if let Some(cached) = session.partitions.get_mut(key) {
                cached.high_watermark = read.high_watermark;
                cached.log_start_offset = read.log_start_offset;
            }
        }
        session.touch(now_ms, self.eviction_ms);
        let id = self.new_session_id();
        self.sessions.insert(id, session);
        id
    }

    /// Kafka's `FetchSessionCache.tryEvict`: a new session A may evict a session B if B
    /// has been unused for longer than the eviction time; otherwise the least valuable
    /// evictable B (by privilege, then size, then id) if A is worth at least as much:
    /// privileged where B is not, or more partitions. Sessions younger than the eviction
    /// time (at their last use) are evictable only by privileged ones, and privileged
    /// ones only when older.
    fn try_evict(&mut self, privileged: bool, size: usize, now_ms: i64) -> bool {
        let Some((&stalest, least_recent)) = self.sessions.iter().min_by_key(|(id, s)| (s.last_used_ms, **id)) else {
            return false;
        };
        if now_ms - least_recent.last_used_ms > self.eviction_ms {
            self.sessions.remove(&stalest);
            return true;
        }
        let least_valuable = self
            .sessions
            .iter()
            .filter(|(_, s)| if privileged { s.evictable_by_privileged } else { s.evictable_by_all })
            .map(|(id, s)| (s.privileged, s.size_at_last_use, *id))
            .min();
        match least_valuable {
            // The new session's key has id 0, below every real id: equal privilege and
            // size do not evict.
            Some(victim) if (privileged, size, 0) >= victim => {
                self.sessions.remove(&victim.2);
                true
            }
            _ => false,
        }
    }

    fn new_session_id(&mut self) -> SessionId {
        loop {
            // splitmix64
            self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.rng;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            // In [1, i32::MAX), as Kafka's.
            let id = (z % (i32::MAX as u64 - 1)) as i32 + 1;
            if !self.sessions.contains_key(&id) {
                return id;
            }
        }
    }
}

impl Session {
    /// A new partition joins at the back of the read order; a known one keeps its place.
    fn add_or_update(&mut self, key: &PartitionKey, fetch: PartitionFetch) {
        if let Some(cached) = self.partitions.get_mut(key) {
            cached.fetch = fetch;
            return;
        }
        let position = self.next_position;
        self.next_position += 1;
        self.order.insert(position, key.clone());
        self.partitions.insert(key.clone(), Cached { fetch, position, high_watermark: -1, log_start_offset: -1 });
    }

    fn remove(&mut self, key: &PartitionKey) {
        if let Some(cached) = self.partitions.remove(key) {
            self.order.remove(&cached.position);
        }
    }

    /// Kafka's `FetchSessionCache.touch`: the last use, and the session's place in the
    /// eviction order, as of now.
    fn touch(&mut self, now_ms: i64, eviction_ms: i64) {
        self.last_used_ms = now_ms;
        self.size_at_last_use = self.partitions.len();
        let old = now_ms - self.created_ms > eviction_ms;
        self.evictable_by_privileged = !self.privileged || old;
        self.evictable_by_all = old;
    }

    /// Kafka's `CachedPartition.maybeUpdateResponseData`: a partition is answered when
    /// it has records, an error, or a high watermark or log start offset the consumer
    /// has not been told. One that returned records moves to the back of the read order.
    fn must_respond(&mut self, key: &PartitionKey, read: PartitionRead) -> bool {
        let Some(cached) = self.partitions.get_mut(key) else { return false };
        let mut must = read.records_bytes > 0;
        if cached.high_watermark != read.high_watermark {
            must = true;
            cached.high_watermark = read.high_watermark;
        }
        if cached.log_start_offset != read.log_start_offset {
            must = true;
            cached.log_start_offset = read.log_start_offset;
        }
        if read.error {
            // Sent again once the error is gone, whatever the high watermark is then.
            cached.high_watermark = -1;
            must = true;
        }
        if read.records_bytes > 0 {
            let position = self.next_position;
            self.next_position += 1;
            self.order.remove(&cached.position);
            cached.position = position;
            self.order.insert(position, key.clone());
        }
        must
    }
}

/// Whether a read has news for a consumer last told this (high watermark, log start
/// offset): records, an error, or either offset changed.
fn has_news(told: (i64, i64), read: PartitionRead) -> bool {
    read.records_bytes > 0 || read.error || told != (read.high_watermark, read.log_start_offset)
}

/// Epochs wrap from i32::MAX to 1 (0 and -1 are reserved).
fn next_epoch(epoch: i32) -> i32 {
    if epoch < 0 {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVICTION_MS: i64 = 120_000;

    fn key(p: i32) -> PartitionKey {
        PartitionKey { topic: "t".into(), topic_id: Uuid::ZERO, partition: p }
    }

    fn fetch(offset: i64) -> PartitionFetch {
        PartitionFetch { fetch_offset: offset, max_bytes: 1024, current_leader_epoch: -1, last_fetched_epoch: -1 }
    }

    fn quiet(hw: i64) -> PartitionRead {
        PartitionRead { high_watermark: hw, log_start_offset: 0, records_bytes: 0, error: false }
    }

    fn records(hw: i64) -> PartitionRead {
        PartitionRead { records_bytes: 100, ..quiet(hw) }
    }

    fn cache(slots: usize) -> FetchSessions {
        FetchSessions::new(slots, EVICTION_MS, 7)
    }

    /// A consumer's request, by topic name.
    fn begin(s: &mut FetchSessions, id: SessionId, epoch: i32, parts: &[i32], forget: &[i32], now: i64) -> Begin {
        let requested = parts.iter().map(|p| (key(*p), fetch(0))).collect();
        let forgotten: Vec<_> = forget.iter().map(|p| key(*p)).collect();
        s.begin(id, epoch, false, false, requested, &forgotten, now)
    }

    /// Answers what `begin` gave, each partition read as `read(partition)`.
    fn respond(s: &mut FetchSessions, begun: Begin, read: impl Fn(i32) -> PartitionRead, now: i64) -> Respond {
        let Begin::Fetch { context, partitions } = begun else { panic!("not a fetch: {begun:?}") };
        s.respond(&context, partitions.iter().map(|(k, f)| (k, f, read(k.partition))), now)
    }

    /// A full fetch (id, 0) of these partitions; the new session's id (0: none).
    fn open(s: &mut FetchSessions, id: SessionId, parts: &[i32], privileged: bool, now: i64) -> SessionId {
        let requested = parts.iter().map(|p| (key(*p), fetch(0))).collect();
        let begun = s.begin(id, INITIAL_EPOCH, false, privileged, requested, &[], now);
        match respond(s, begun, |_| quiet(0), now) {
            Respond::Partitions { session_id, include } => {
                assert!(include.iter().all(|i| *i), "a full response carries every partition");
                session_id
            }
            other => panic!("{other:?}"),
        }
    }

    fn read_order(begun: &Begin) -> Vec<i32> {
        let Begin::Fetch { partitions, .. } = begun else { panic!("{begun:?}") };
        partitions.iter().map(|(k, _)| k.partition).collect()
    }

    #[test]
    fn sessionless_fetch_creates_no_session() {
        let mut s = cache(10);
        let begun = begin(&mut s, 0, FINAL_EPOCH, &[0, 1], &[], 0);
        assert_eq!(
            respond(&mut s, begun, |_| quiet(0), 0),
            Respond::Partitions { session_id: 0, include: vec![true, true] }
        );
        assert!(s.is_empty());
    }

    #[test]
    fn full_fetch_with_initial_epoch_opens_a_session_at_epoch_one() {
        let mut s = cache(10);
        let id = open(&mut s, 0, &[0, 1], false, 0);
        assert_ne!(id, 0);
        assert_eq!(read_order(&begin(&mut s, id, 1, &[], &[], 1)), vec![0, 1]);
    }

    #[test]
    fn reset_with_epoch_zero_closes_the_session_and_opens_a_new_one() {
        let mut s = cache(10);
        let old = open(&mut s, 0, &[0, 1], false, 0);
        assert!(matches!(begin(&mut s, old, 1, &[], &[], 1), Begin::Fetch { .. }));
        // The client lost track (e.g. a response it abandoned) and resets: (old, 0).
        let new = open(&mut s, old, &[2], false, 2);
        assert_ne!(new, 0);
        assert_ne!(new, old);
        assert_eq!(s.len(), 1);
        assert_eq!(begin(&mut s, old, 2, &[], &[], 3), Begin::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND));
        assert_eq!(read_order(&begin(&mut s, new, 1, &[], &[], 3)), vec![2]);
    }

    #[test]
    fn final_epoch_closes_the_session_and_answers_sessionless() {
        let mut s = cache(10);
        let id = open(&mut s, 0, &[0], false, 0);
        let begun = begin(&mut s, id, FINAL_EPOCH, &[3], &[], 1);
        assert_eq!(read_order(&begun), vec![3]);
        assert_eq!(respond(&mut s, begun, |_| quiet(0), 1), Respond::Partitions { session_id: 0, include: vec![true] });
        assert!(s.is_empty());
    }

    #[test]
    fn incremental_requests_keep_partitions_and_answer_only_news() {
        let mut s = cache(10);
        let id = open(&mut s, 0, &[0, 1, 2, 3], false, 0);
        // Nothing named: all four covered. Records, a moved high watermark, a moved log
        // start offset go in; an unchanged partition stays out.
        let begun = begin(&mut s, id, 1, &[], &[], 1);
        let read = |p| match p {
            0 => records(0),
            1 => quiet(5),
            2 => PartitionRead { log_start_offset: 3, ..quiet(0) },
            _ => quiet(0),
        };
        assert_eq!(
            respond(&mut s, begun, read, 1),
            Respond::Partitions { session_id: id, include: vec![true, true, true, false] }
        );
        // What was answered is remembered: the same state again is not news.
        let begun = begin(&mut s, id, 2, &[], &[], 2);
        let include = match respond(
            &mut s,
            begun,
            |p| {
                if p == 2 {
                    PartitionRead { log_start_offset: 3, ..quiet(0) }
                } else if p == 1 {
                    quiet(5)
                } else {
                    quiet(0)
                }
            },
            2,
        ) {
            Respond::Partitions { include, .. } => include,
            other => panic!("{other:?}"),
        };
        assert_eq!(include, vec![false, false, false, false]);
        // A partition named again takes its new offset and keeps its place.
        let begun = s.begin(id, 3, false, false, vec![(key(1), fetch(42))], &[], 3);
        let Begin::Fetch { partitions, .. } = begun else { panic!() };
        assert_eq!(partitions.iter().find(|(k, _)| k.partition == 1).unwrap().1.fetch_offset, 42);
    }

    #[test]
    fn unknown_session_wrong_epoch_and_topic_id_mismatch_are_errors() {
        let mut s = cache(10);
        let id = open(&mut s, 0, &[0], false, 0);
        assert_eq!(begin(&mut s, id, 5, &[], &[], 0), Begin::Error(ErrorCode::INVALID_FETCH_SESSION_EPOCH));
        assert_eq!(
            begin(&mut s, id.wrapping_add(1), 1, &[], &[], 0),
            Begin::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND)
        );
        assert_eq!(begin(&mut s, 0, 1, &[], &[], 0), Begin::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND));
        // Opened by name (v12-), continued by id (v13+).
        assert_eq!(s.begin(id, 1, true, false, vec![], &[], 0), Begin::Error(ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR));
        // Errors change nothing: epoch 1 still works.
        assert!(matches!(begin(&mut s, id, 1, &[], &[], 0), Begin::Fetch { .. }));
    }

    #[test]
    fn forgetting_every_partition_closes_the_session() {
        let mut s = cache(10);
        let id = open(&mut s, 0, &[0, 1], false, 0);
        let begun = begin(&mut s, id, 1, &[], &[0, 1], 1);
        assert_eq!(respond(&mut s, begun, |_| quiet(0), 1), Respond::Partitions { session_id: 0, include: vec![] });
        assert!(s.is_empty());
        assert_eq!(begin(&mut s, id, 2, &[], &[], 2), Begin::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND));
    }

    #[test]
    fn a_partition_both_added_and_forgotten_is_forgotten() {
        let mut s = cache(10);
        let id = open(&mut s, 0, &[0], false, 0);
        assert_eq!(read_order(&begin(&mut s, id, 1, &[1], &[1], 1)), vec![0]);
    }

    #[test]
    fn a_partition_with_records_moves_to_the_back_of_the_read_order() {
        let mut s = cache(10);
        let id = open(&mut s, 0, &[0, 1, 2], false, 0);
        let begun = begin(&mut s, id, 1, &[], &[], 1);
        assert_eq!(read_order(&begun), vec![0, 1, 2]);
        // Partition 0 filled the response; 1 and 2 got nothing under its byte limit.
        respond(&mut s, begun, |p| if p == 0 { records(9) } else { quiet(0) }, 1);
        assert_eq!(read_order(&begin(&mut s, id, 2, &[], &[], 2)), vec![1, 2, 0]);
        // A new partition joins at the back.
        assert_eq!(read_order(&begin(&mut s, id, 3, &[5], &[], 3)), vec![1, 2, 0, 5]);
    }

    #[test]
    fn a_partition_is_answered_again_once_its_error_is_gone() {
        let mut s = cache(10);
        let id = open(&mut s, 0, &[0], false, 0);
        let begun = begin(&mut s, id, 1, &[], &[], 1);
        let failed = PartitionRead { error: true, ..quiet(0) };
        assert_eq!(respond(&mut s, begun, |_| failed, 1), Respond::Partitions { session_id: id, include: vec![true] });
        // Same high watermark as before the error, but the consumer last saw an error.
        let begun = begin(&mut s, id, 2, &[], &[], 2);
        assert_eq!(
            respond(&mut s, begun, |_| quiet(0), 2),
            Respond::Partitions { session_id: id, include: vec![true] }
        );
    }

    #[test]
    fn a_response_after_the_session_moved_on_is_an_epoch_error() {
        let mut s = cache(10);
        let id = open(&mut s, 0, &[0], false, 0);
        let first = begin(&mut s, id, 1, &[], &[], 1);
        // A second request (pipelined on the connection) begins before the first answers.
        let second = begin(&mut s, id, 2, &[], &[], 1);
        assert_eq!(
            respond(&mut s, first, |_| records(1), 2),
            Respond::Error { code: ErrorCode::INVALID_FETCH_SESSION_EPOCH, session_id: id }
        );
        assert_eq!(
            respond(&mut s, second, |_| quiet(3), 2),
            Respond::Partitions { session_id: id, include: vec![true] }
        );
    }

    #[test]
    fn a_full_cache_opens_no_session_unless_one_can_be_evicted() {
        let mut s = cache(1);
        let first = open(&mut s, 0, &[0, 1], false, 0);
        assert_ne!(first, 0);
        // Fresh sessions are evictable by nobody but followers; the consumer goes on
        // without a session.
        assert_eq!(open(&mut s, 0, &[0, 1, 2], false, 10), 0);
        // Unused for longer than the eviction time: any new session takes its slot.
        let second = open(&mut s, 0, &[0], false, EVICTION_MS + 1);
        assert_ne!(second, 0);
        assert_eq!(s.len(), 1);
        assert_eq!(
            begin(&mut s, first, 1, &[], &[], EVICTION_MS + 1),
            Begin::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND)
        );
    }

    #[test]
    fn an_old_session_is_evicted_only_by_a_larger_one() {
        let mut s = cache(1);
        let old = open(&mut s, 0, &[0, 1], false, 0);
        // Used again after the eviction time (so not stale), now evictable by all.
        let later = EVICTION_MS + 10;
        assert!(matches!(begin(&mut s, old, 1, &[], &[], later), Begin::Fetch { .. }));
        assert_eq!(open(&mut s, 0, &[5, 6], false, later + 1), 0, "as many partitions: not evicted");
        let larger = open(&mut s, 0, &[5, 6, 7], false, later + 1);
        assert_ne!(larger, 0);
        assert_eq!(begin(&mut s, old, 2, &[], &[], later + 1), Begin::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND));
    }

    #[test]
    fn a_follower_evicts_a_fresh_consumer_session_but_not_the_reverse() {
        let mut s = cache(1);
        let consumer = open(&mut s, 0, &[0, 1, 2], false, 0);
        let follower = open(&mut s, 0, &[0], true, 1);
        assert_ne!(follower, 0);
        assert_eq!(begin(&mut s, consumer, 1, &[], &[], 2), Begin::Error(ErrorCode::FETCH_SESSION_ID_NOT_FOUND));
        assert_eq!(open(&mut s, 0, &[0, 1, 2, 3], false, 3), 0);
    }

    #[test]
    fn a_session_closed_during_a_long_poll_still_answers_only_news() {
        let mut s = cache(10);
        let id = open(&mut s, 0, &[0, 1, 2], false, 0);
        // The incremental long poll is parked when the consumer's closing fetch arrives.
        let parked = begin(&mut s, id, 1, &[], &[], 1);
        let closing = begin(&mut s, id, FINAL_EPOCH, &[], &[], 2);
        assert_eq!(respond(&mut s, closing, |_| quiet(0), 2), Respond::Partitions { session_id: 0, include: vec![] });
        assert!(s.is_empty());
        // As Kafka's: still filtered against what the session had told the consumer; a
        // partition it has not been told of would be an error to the consumer.
        let read = |p| match p {
            0 => records(0),
            1 => quiet(4),
            _ => quiet(0),
        };
        assert_eq!(
            respond(&mut s, parked, read, 3),
            Respond::Partitions { session_id: id, include: vec![true, true, false] }
        );
    }

    #[test]
    fn zero_slots_means_no_sessions() {
        let mut s = cache(0);
        assert_eq!(open(&mut s, 0, &[0], false, 0), 0);
        assert!(s.is_empty());
    }

    #[test]
    fn epochs_wrap_to_one() {
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(INITIAL_EPOCH), 1);
        assert_eq!(next_epoch(FINAL_EPOCH), FINAL_EPOCH);
    }
}
