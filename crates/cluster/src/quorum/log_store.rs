//! The quorum's log on disk (openraft's `RaftLogStorage`), in
//! `metadata.log.dir/__cluster_metadata-0/`:
//!
//! - `<first index, 20 digits>.log`: segments of entries, each a frame
//!   `len u32 | crc32c u32 | entry as JSON`. On open, a segment is read up to its first
//!   torn frame and cut there; a segment that does not continue the one before it (a
//!   truncation or a roll that a crash half undid) ends the log, unless the gap lies
//!   below the purge point.
//! - `quorum-state`: the vote, replaced durably before `save_vote` returns.
//! - `purged`: the last purged log id, replaced durably before any segment is deleted.
//!   A purge first waits until the state machine's durable snapshot covers it
//!   ([`LogStore::purge_behind`]).
//! - `committed`: the committed log id, replaced without fsync (openraft only uses it to
//!   re-apply sooner after a restart; a lost or damaged one reads as absent).
//!
//! openraft's contract: a vote is durable when `save_vote` returns; appended entries are
//! durable when the `LogFlushed` callback fires. `append` writes every entry it is given,
//! then fsyncs each touched segment once (group commit), then calls back.
//!
//! Reads for replication (`limited_get_log_entries`) return the entries from the index
//! asked for on, without a gap, or nothing: openraft sends what they return as the entries
//! right after the follower's matching entry. openraft 0.9 leaves a leader's replication
//! tasks running after it steps down (`QuitLeader` keeps them), and a follower purges
//! without regard to them (`Engine::try_purge_log`), so such a task may ask for entries
//! this log no longer holds. Nor may it read entries written after a truncation: those
//! follow another leader's entries, not the ones the task matched on the follower, so a
//! reader handed out before a truncation reads nothing.
//!
//! The file I/O runs on the calling task: the server runs the quorum on a runtime of its
//! own, so no request handler waits behind an fsync.

use super::files::{decode_frames, encode_frame, read_all, read_frame_file, replace_file};
use super::state_machine::DurableSnapshot;
use super::types::{QuorumEntry, QuorumLogId, QuorumStorageError, QuorumTypes, ReplicaKey};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{AnyError, LogState, RaftLogId, RaftLogReader, StorageIOError, Vote};
use osprey_storage::fs::{Storage, StorageFile};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

/// The name of the quorum's directory under `metadata.log.dir`, as Kafka's.
pub const METADATA_LOG_DIR_NAME: &str = "__cluster_metadata-0";

const VOTE_FILE: &str = "quorum-state";
const PURGED_FILE: &str = "purged";
const COMMITTED_FILE: &str = "committed";
const SEGMENT_SUFFIX: &str = ".log";

/// The quorum's log. Cheap to clone: clones share one log (openraft's log reader is a
/// clone that reads nothing once the log was truncated after it was handed out).
#[derive(Debug)]
pub struct LogStore<S: Storage> {
    inner: Arc<Mutex<LogInner<S>>>,
    /// The state machine's durable snapshot: a purge waits until it covers what it
    /// deletes (see [`DurableSnapshot`]). `None`: purges do not wait (tests of the log
    /// alone).
    durable_snapshot: Option<watch::Receiver<DurableSnapshot>>,
    /// For a reader handed to openraft (`get_log_reader`, which only replication tasks and
    /// the start-up re-apply ask for): the log's truncation count then. `None` for the log
    /// itself.
    reader_truncations: Option<u64>,
}

impl<S: Storage> Clone for LogStore<S> {
    fn clone(&self) -> Self {
        LogStore {
            inner: self.inner.clone(),
            durable_snapshot: self.durable_snapshot.clone(),
            reader_truncations: self.reader_truncations,
        }
    }
}

#[derive(Debug)]
struct LogInner<S: Storage> {
    storage: S,
    dir: PathBuf,
    /// Roll to a new segment once the current one reaches this size.
    segment_bytes: u64,
    /// Every entry above the purge point, with where it lies on disk.
    entries: BTreeMap<u64, StoredEntry>,
    /// Segments by first index: the file and the end of its intact frames.
    segments: BTreeMap<u64, Segment<S::File>>,
    vote: Option<Vote<ReplicaKey>>,
    purged: Option<QuorumLogId>,
    committed: Option<QuorumLogId>,
    /// Why writes are refused: an earlier write or fsync failed, so what the page cache
    /// holds can no longer be trusted (as the single-node metadata log).
    failed: Option<String>,
    /// Truncations since open. Only a follower truncates, so a replication task whose
    /// reader predates one belongs to a leader that has stepped down.
    truncations: u64,
}

#[derive(Debug, Clone)]
struct StoredEntry {
    entry: QuorumEntry,
    segment: u64,
    position: u64,
}

#[derive(Debug)]
struct Segment<F> {
    file: F,
    /// The end of its intact frames.
    len: u64,
    /// The index the next entry written to it must have (its first index plus its
    /// entries), so that a segment never holds a gap.
    next_index: u64,
}

impl<S: Storage> LogStore<S> {
    /// Opens (creating) the log in `dir`, recovering from a crash: torn tails cut, a
    /// segment after a gap dropped, damaged `committed` ignored. A damaged vote or purge
    /// point is an error: guessing either could let this node vote twice in a term or
    /// serve entries it no longer has.
    pub fn open(storage: S, dir: &Path, segment_bytes: u64) -> io::Result<LogStore<S>> {
        storage.create_dir_all(dir)?;
        let vote = match read_frame_file(&storage, &dir.join(VOTE_FILE))? {
            Some(bytes) => Some(serde_json::from_slice(&bytes).map_err(invalid_data)?),
            None => None,
        };
        let purged: Option<QuorumLogId> = match read_frame_file(&storage, &dir.join(PURGED_FILE))? {
            Some(bytes) => serde_json::from_slice(&bytes).map_err(invalid_data)?,
            None => None,
        };
        let committed: Option<QuorumLogId> = match read_frame_file(&storage, &dir.join(COMMITTED_FILE)) {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).unwrap_or(None),
            _ => None,
        };
        let mut inner = LogInner {
            storage,
            dir: dir.to_path_buf(),
            segment_bytes: segment_bytes.max(1),
            entries: BTreeMap::new(),
            segments: BTreeMap::new(),
            vote,
            purged,
            committed: None,
            failed: None,
            truncations: 0,
        };
        inner.recover_segments()?;
        inner.committed = inner.clamp_committed(committed);
        Ok(LogStore { inner: Arc::new(Mutex::new(inner)), durable_snapshot: None, reader_truncations: None })
    }

    /// Makes every purge wait until the state machine's durable snapshot covers it, or
    /// fail if writing the snapshot failed.
    pub fn purge_behind(mut self, durable_snapshot: watch::Receiver<DurableSnapshot>) -> LogStore<S> {
        self.durable_snapshot = Some(durable_snapshot);
        self
    }

    fn lock(&self) -> MutexGuard<'_, LogInner<S>> {
        // A panic elsewhere must not hide the log from a test inspecting it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The log, for reading, unless this is a reader handed out before a truncation.
    fn lock_unless_stale(&self) -> Option<MutexGuard<'_, LogInner<S>>> {
        let inner = self.lock();
        self.reader_truncations.is_none_or(|t| t == inner.truncations).then_some(inner)
    }

    /// The last log id, for tests and metrics.
    pub fn last_log_id(&self) -> Option<QuorumLogId> {
        self.lock().last_log_id()
    }

    /// The vote on disk as of now, for tests.
    pub fn vote(&self) -> Option<Vote<ReplicaKey>> {
        self.lock().vote
    }

    /// Every entry held (above the purge point), for tests.
    pub fn entries(&self) -> Vec<QuorumEntry> {
        self.lock().entries.values().map(|s| s.entry.clone()).collect()
    }

    /// Whether the node has any quorum state (a vote or entries): a node with none is
    /// new, and may take part in bootstrapping a cluster.
    pub fn is_empty(&self) -> bool {
        let inner = self.lock();
        inner.vote.is_none() && inner.last_log_id().is_none()
    }
}

impl<S: Storage> LogInner<S> {
    fn recover_segments(&mut self) -> io::Result<()> {
        let mut firsts: Vec<u64> = self
            .storage
            .list(&self.dir)?
            .iter()
            .filter_map(|name| name.strip_suffix(SEGMENT_SUFFIX)?.parse().ok())
            .collect();
        firsts.sort_unstable();
        let purged_index = self.purged.map(|p| p.index);
        let mut expected: Option<u64> = None;
        let mut ended = false;
        for first in firsts {
            let path = segment_path(&self.dir, first);
            let continues = expected.is_none_or(|e| e == first) || purged_index.is_some_and(|p| first <= p + 1);
            if ended || !continues {
                // After a torn tail or a gap above the purge point nothing can be trusted:
                // those entries were never reported flushed.
                tracing::warn!(segment = %path.display(), "metadata log segment after a gap or a torn tail; deleting it");
                self.storage.remove(&path)?;
                ended = true;
                continue;
            }
            if expected.is_some_and(|e| e != first) {
                // A legitimate gap (below the purge point): what came before is purged.
                self.entries.clear();
            }
            let bytes = read_all(&self.storage, &path)?;
            let (frames, valid) = decode_frames(&bytes);
            let mut index = first;
            let mut cut = valid as u64;
            for (position, payload) in frames {
                let entry: QuorumEntry = match serde_json::from_slice(payload) {
                    Ok(e) => e,
                    Err(_) => {
                        cut = position;
                        break;
                    }
                };
                if entry.get_log_id().index != index {
                    cut = position;
                    break;
                }
                if purged_index.is_none_or(|p| index > p) {
                    self.entries.insert(index, StoredEntry { entry, segment: first, position });
                }
                index += 1;
            }
            let file = self.storage.open(&path, false)?;
            if cut < bytes.len() as u64 {
                tracing::warn!(segment = %path.display(), position = cut, "metadata log segment ends torn; cutting it");
                file.set_len(cut)?;
                file.sync_data()?;
                ended = true;
            }
            self.segments.insert(first, Segment { file, len: cut, next_index: index });
            expected = Some(index);
        }
        self.storage.sync_dir(&self.dir)?;
        if let (Some(p), Some(first)) = (purged_index, self.entries.keys().next()) {
            if *first != p + 1 {
                return Err(invalid_data(format!("metadata log starts at {first} but was purged up to {p}")));
            }
        }
        Ok(())
    }

    /// The committed log id read back, if the log still holds that entry (entries
    /// committed by the leader may not have been flushed here before a crash).
    fn clamp_committed(&self, committed: Option<QuorumLogId>) -> Option<QuorumLogId> {
        let committed = committed?;
        if self.purged.is_some_and(|p| p.index >= committed.index) {
            return self.purged;
        }
        match self.entries.get(&committed.index) {
            Some(s) if *s.entry.get_log_id() == committed => Some(committed),
            _ => {
                let last = self.entries.keys().next_back().copied()?;
                let at = last.min(committed.index);
                let id = *self.entries.get(&at)?.entry.get_log_id();
                // The same leader wrote both, or an earlier one: committed either way.
                (id.leader_id <= committed.leader_id).then_some(id)
            }
        }
    }

    /// The entries from `start` on (below `end`) up to the first one missing: empty if
    /// `start` itself is not held (purged, or past the end).
    fn entries_from(&self, start: u64, end: u64) -> Vec<QuorumEntry> {
        let mut next = start;
        self.entries
            .range(start..end)
            .map_while(|(index, stored)| {
                let follows = *index == next;
                next += 1;
                follows.then(|| stored.entry.clone())
            })
            .collect()
    }

    fn last_log_id(&self) -> Option<QuorumLogId> {
        match self.entries.values().next_back() {
            Some(s) => Some(*s.entry.get_log_id()),
            None => self.purged,
        }
    }

    fn refuse_if_failed(&self) -> io::Result<()> {
        match &self.failed {
            Some(reason) => Err(io::Error::other(format!(
                "metadata log refuses writes since an earlier failure ({reason}); restart the node"
            ))),
            None => Ok(()),
        }
    }

    fn note_failure<T>(&mut self, result: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &result {
            self.failed.get_or_insert_with(|| e.to_string());
        }
        result
    }

    /// Writes the entries and fsyncs them (group commit): one fsync per touched segment.
    fn append(&mut self, entries: Vec<QuorumEntry>) -> io::Result<()> {
        self.refuse_if_failed()?;
        let result = self.append_unchecked(entries);
        self.note_failure(result)
    }

    fn append_unchecked(&mut self, entries: Vec<QuorumEntry>) -> io::Result<()> {
        let mut touched: Vec<u64> = Vec::new();
        let mut created = false;
        let mut pending: Vec<u8> = Vec::new();
        let mut pending_segment: Option<u64> = None;
        for entry in entries {
            let index = entry.get_log_id().index;
            let roll = match self.segments.values().next_back() {
                None => true,
                // An entry that does not follow the last one written (after a snapshot
                // was installed past the end of the log) starts a segment of its own,
                // so every segment stays contiguous.
                Some(s) => s.next_index != index || s.len + pending.len() as u64 >= self.segment_bytes,
            };
            if roll {
                self.flush_pending(&mut pending, pending_segment)?;
                let path = segment_path(&self.dir, index);
                let file = self.storage.open(&path, true)?;
                file.set_len(0)?;
                self.segments.insert(index, Segment { file, len: 0, next_index: index });
                created = true;
            }
            // The buffered frames always belong to the last segment.
            let (first, segment) =
                self.segments.iter_mut().next_back().ok_or_else(|| io::Error::other("no segment"))?;
            let first = *first;
            pending_segment = Some(first);
            let json = serde_json::to_vec(&entry).map_err(io::Error::other)?;
            let position = segment.len + pending.len() as u64;
            segment.next_index = index + 1;
            encode_frame(&json, &mut pending);
            if !touched.contains(&first) {
                touched.push(first);
            }
            self.entries.insert(index, StoredEntry { entry, segment: first, position });
        }
        self.flush_pending(&mut pending, pending_segment)?;
        for first in touched {
            if let Some(segment) = self.segments.get(&first) {
                segment.file.sync_data()?;
            }
        }
        if created {
            self.storage.sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Writes the buffered frames at the end of their segment.
    fn flush_pending(&mut self, pending: &mut Vec<u8>, segment: Option<u64>) -> io::Result<()> {
        let Some(first) = segment else { return Ok(()) };
        if pending.is_empty() {
            return Ok(());
        }
        let segment = self.segments.get_mut(&first).ok_or_else(|| io::Error::other("segment vanished"))?;
        segment.file.write_all_at(pending, segment.len)?;
        segment.len += pending.len() as u64;
        pending.clear();
        Ok(())
    }

    /// Removes every entry at or after `index`, durably before returning.
    fn truncate(&mut self, index: u64) -> io::Result<()> {
        self.refuse_if_failed()?;
        self.truncations += 1;
        let result = self.truncate_unchecked(index);
        self.note_failure(result)
    }

    fn truncate_unchecked(&mut self, index: u64) -> io::Result<()> {
        let cut = self.entries.get(&index).map(|s| (s.segment, s.position));
        self.entries.split_off(&index);
        // Later segments first, so a crash in between leaves a gap that recovery cuts at,
        // never a hole inside the log.
        let later: Vec<u64> = self.segments.range(index..).map(|(first, _)| *first).collect();
        let mut removed = false;
        for first in later.into_iter().rev() {
            if let Some((segment, _)) = cut {
                if segment == first {
                    continue;
                }
            }
            self.segments.remove(&first);
            self.storage.remove(&segment_path(&self.dir, first))?;
            removed = true;
        }
        if let Some((first, position)) = cut {
            if let Some(segment) = self.segments.get_mut(&first) {
                segment.file.set_len(position)?;
                segment.file.sync_data()?;
                segment.len = position;
                segment.next_index = index;
            }
        }
        if removed {
            self.storage.sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Forgets entries up to and including `log_id`: the purge point is made durable
    /// first, then segments wholly below it are deleted.
    fn purge(&mut self, log_id: QuorumLogId) -> io::Result<()> {
        self.refuse_if_failed()?;
        let result = self.purge_unchecked(log_id);
        self.note_failure(result)
    }

    fn purge_unchecked(&mut self, log_id: QuorumLogId) -> io::Result<()> {
        let json = serde_json::to_vec(&Some(log_id)).map_err(io::Error::other)?;
        replace_file(&self.storage, &self.dir, PURGED_FILE, &json, true)?;
        self.purged = Some(log_id);
        self.entries = self.entries.split_off(&(log_id.index + 1));
        // A segment is wholly purged when the next one starts at or below purged + 1.
        let firsts: Vec<u64> = self.segments.keys().copied().collect();
        let mut removed = false;
        for pair in firsts.windows(2) {
            if pair[1] <= log_id.index + 1 {
                self.segments.remove(&pair[0]);
                self.storage.remove(&segment_path(&self.dir, pair[0]))?;
                removed = true;
            }
        }
        if removed {
            self.storage.sync_dir(&self.dir)?;
        }
        Ok(())
    }

    fn save_vote(&mut self, vote: Vote<ReplicaKey>) -> io::Result<()> {
        self.refuse_if_failed()?;
        let json = serde_json::to_vec(&vote).map_err(io::Error::other)?;
        let result = replace_file(&self.storage, &self.dir, VOTE_FILE, &json, true);
        self.note_failure(result)?;
        self.vote = Some(vote);
        Ok(())
    }

    fn save_committed(&mut self, committed: Option<QuorumLogId>) -> io::Result<()> {
        self.refuse_if_failed()?;
        let json = serde_json::to_vec(&committed).map_err(io::Error::other)?;
        let result = replace_file(&self.storage, &self.dir, COMMITTED_FILE, &json, false);
        self.note_failure(result)?;
        self.committed = committed;
        Ok(())
    }
}

fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("{first:020}{SEGMENT_SUFFIX}"))
}

fn invalid_data(e: impl ToString) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

fn write_error(e: io::Error) -> QuorumStorageError {
    StorageIOError::write_logs(AnyError::new(&e)).into()
}

impl<S: Storage> RaftLogReader<QuorumTypes> for LogStore<S> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<QuorumEntry>, QuorumStorageError> {
        let Some(inner) = self.lock_unless_stale() else { return Ok(Vec::new()) };
        Ok(inner.entries.range(range).map(|(_, s)| s.entry.clone()).collect())
    }

    /// What openraft's replication sends after the follower's entry at `start - 1`: the
    /// entries from `start` on, or nothing when `start` is below the purge point. The
    /// default (`try_get_log_entries`) would return the entries above the purge point,
    /// and the follower would append them after a gap (seed 1000332: a former leader's
    /// replication task asked for 8..18 after the node, by then a follower, purged up to
    /// 16, and sent entry 17 alone after entry 7). openraft 0.9.25 sends an empty answer
    /// as a heartbeat (`replication/mod.rs`, "returned empty"). A reader handed out before
    /// a truncation reads nothing either: see the module's comment.
    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> Result<Vec<QuorumEntry>, QuorumStorageError> {
        Ok(self.lock_unless_stale().map_or_else(Vec::new, |inner| inner.entries_from(start, end)))
    }
}

impl<S: Storage> RaftLogStorage<QuorumTypes> for LogStore<S> {
    type LogReader = LogStore<S>;

    async fn get_log_state(&mut self) -> Result<LogState<QuorumTypes>, QuorumStorageError> {
        let inner = self.lock();
        Ok(LogState { last_purged_log_id: inner.purged, last_log_id: inner.last_log_id() })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        let truncations = self.lock().truncations;
        LogStore { inner: self.inner.clone(), durable_snapshot: None, reader_truncations: Some(truncations) }
    }

    async fn save_vote(&mut self, vote: &Vote<ReplicaKey>) -> Result<(), QuorumStorageError> {
        self.lock().save_vote(*vote).map_err(|e| StorageIOError::write_vote(AnyError::new(&e)).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<ReplicaKey>>, QuorumStorageError> {
        Ok(self.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<QuorumLogId>) -> Result<(), QuorumStorageError> {
        self.lock().save_committed(committed).map_err(write_error)
    }

    async fn read_committed(&mut self) -> Result<Option<QuorumLogId>, QuorumStorageError> {
        Ok(self.lock().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<QuorumTypes>) -> Result<(), QuorumStorageError>
    where
        I: IntoIterator<Item = QuorumEntry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<QuorumEntry> = entries.into_iter().collect();
        let result = self.lock().append(entries);
        match result {
            Ok(()) => {
                // Only now, after the fsync: openraft counts these entries as durable.
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(io::Error::new(e.kind(), e.to_string())));
                Err(write_error(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: QuorumLogId) -> Result<(), QuorumStorageError> {
        self.lock().truncate(log_id.index).map_err(write_error)
    }

    async fn purge(&mut self, log_id: QuorumLogId) -> Result<(), QuorumStorageError> {
        if let Some(mut durable) = self.durable_snapshot.clone() {
            let covered = |d: &DurableSnapshot| match d {
                DurableSnapshot::UpTo(index) => index.is_some_and(|i| i >= log_id.index),
                DurableSnapshot::Failed => true,
            };
            let ready = durable.wait_for(covered).await.map(|d| *d);
            if !matches!(ready, Ok(DurableSnapshot::UpTo(_))) {
                let e = io::Error::other("the snapshot covering the purge was not made durable");
                return Err(write_error(e));
            }
        }
        self.lock().purge(log_id).map_err(write_error)
    }
}
