//! The commit journal: one file per data directory that makes appends of many small logs
//! durable with one fsync between them (group commit across partitions).
//!
//! A log attached to the journal ([`Journal::attach`]) still writes every append to its
//! segment, and for a leader's append under fsync-before-ack also copies the batches, as
//! written, into the journal's buffer under the same lock, so the journal holds each
//! log's appends in log order. (A follower fsyncs its own segment before it fetches
//! again, as before: its appends are not journaled, and that fsync covers them.) A flusher thread
//! writes the buffer to the journal file and fsyncs it once for every log with entries
//! in it; each of those logs then counts its entries as durable (its waiters are
//! answered) without an fsync of its own segment. Segments are still fsynced, but
//! rarely: when a journal file is retired, at close, and whenever a log cannot vouch for
//! an offset by the journal (a roll not sealed yet, a truncation since the entry).
//!
//! What each file holds, entry after entry:
//! `[len u32][crc32c u32][kind u8][key len u16][key][offset i64][batches]`, where `len`
//! counts from `kind`, and the CRC covers the same bytes. `key` is the log directory's
//! name. Kinds: batches (their base offset), a truncation (the offset the log was cut
//! to: earlier entries from there on mean nothing) and a reset (the log was emptied or
//! created: every earlier entry of the key means nothing).
//!
//! Recovery ([`Journal::open`], then [`Journal::attach`] for each log): the files are
//! read oldest first, each up to its first entry that does not check out (a crash can
//! tear what was written after the last fsync, which nobody was told was durable); the
//! batches of each key that no later truncation or reset voided are appended to its log
//! where the log's recovery left it (batches the log already holds are skipped), and the
//! log is fsynced. Once every log has been attached ([`Journal::recovered`]) the old
//! files are deleted.
//!
//! A file is retired once it passes [`Journal::max_file_bytes`]: a new one is started
//! (and its name made durable), every log with entries in the old one fsyncs its
//! segments, and then the old file is deleted.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Instant;

use crate::batch;
use crate::durability::{Flushable, Flusher, FsyncCounters, FsyncStats};
use crate::error::{Result, StorageError};
use crate::fs::{Storage, StorageFile};

/// The journal's directory, inside the data directory.
pub const JOURNAL_DIR: &str = ".osprey-journal";
const SUFFIX: &str = ".journal";
/// A file is retired once it holds this much (with the default), see [`Journal::open`].
pub const DEFAULT_MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
const ENTRY_HEADER: usize = 4 + 4;

const KIND_BATCHES: u8 = 1;
const KIND_TRUNCATE: u8 = 2;
const KIND_RESET: u8 = 3;

/// What the journal needs of a log attached to it.
pub(crate) trait JournaledLog: Send + Sync {
    /// The journal fsync covering the log's entries from `base` to `end` (exclusive),
    /// recorded in truncation generation `generation`, completed.
    fn journal_durable(&self, generation: u64, base: i64, end: i64);
    /// The journal can no longer vouch for anything: make what waits durable otherwise.
    fn journal_failed(&self);
    /// fsyncs the log's segments up to its end (before a journal file is deleted).
    fn sync_segments(&self) -> Result<()>;
}

/// What a log holds of the journal it is attached to.
pub(crate) struct JournalLink {
    pub(crate) journal: Arc<dyn JournalSink>,
    pub(crate) key: String,
    pub(crate) me: Weak<dyn JournaledLog>,
}

/// The journal as its logs see it (its storage type erased).
pub(crate) trait JournalSink: Send + Sync {
    /// Queues an entry of `pieces` (whole batches, as written to the segment) for the
    /// next journal fsync. False if the journal is offline, or its buffer holds a file's
    /// worth already: the log must fsync itself.
    fn record(&self, link: &JournalLink, generation: u64, base: i64, end: i64, pieces: &[&[u8]]) -> bool;
    /// Durably records that the log was cut to `offset` (`None`: emptied), before its
    /// files change. Returns the completions of other entries the same fsync covered, to
    /// be delivered with [`JournalSink::deliver`] once the caller holds no log lock.
    fn record_cut(&self, key: &str, offset: Option<i64>) -> Result<Completions>;
    fn deliver(&self, completions: Completions);
    /// Makes sure a flusher thread writes what is buffered.
    fn schedule(&self, flusher: &Flusher);
    fn is_online(&self) -> bool;
}

/// Logs whose entries a journal fsync made durable, merged per log.
#[derive(Default)]
pub(crate) struct Completions(Vec<(Weak<dyn JournaledLog>, u64, i64, i64)>);

impl Completions {
    fn add(&mut self, log: &Weak<dyn JournaledLog>, generation: u64, base: i64, end: i64) {
        if let Some(last) = self.0.iter_mut().rev().find(|(l, ..)| Weak::ptr_eq(l, log)) {
            if last.1 == generation && last.3 == base {
                last.3 = end;
                return;
            }
        }
        self.0.push((log.clone(), generation, base, end));
    }
}

/// One batch found in the journal at open, waiting for its log to be attached.
#[derive(Debug, Clone)]
pub struct JournalBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub bytes: Vec<u8>,
}

/// Counters for metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct JournalStats {
    /// Entries recorded (appends of attached logs, truncations, resets).
    pub entries: u64,
    /// Bytes written to journal files.
    pub bytes: u64,
    /// Journal fsyncs, their total and longest duration, failures.
    pub fsyncs: FsyncStats,
    /// Files retired (their logs fsynced, the file deleted).
    pub retired: u64,
    /// Batches appended to logs from the journal at start-up.
    pub replayed: u64,
}

/// The commit journal of one data directory. See the module documentation.
pub struct Journal<S: Storage> {
    storage: S,
    dir: PathBuf,
    max_file_bytes: u64,
    inner: Mutex<Inner<S::File>>,
    /// Signalled when a write of the buffer ends.
    written: Condvar,
    queued: AtomicBool,
    fsyncs: FsyncCounters,
    entries: AtomicU64,
    bytes: AtomicU64,
    retired: AtomicU64,
    replayed: AtomicU64,
    me: Weak<Journal<S>>,
}

struct Inner<F> {
    file: Arc<F>,
    file_seq: u64,
    file_len: u64,
    /// Entries recorded and not yet written: at most `max_file_bytes` of batches (an
    /// append that would pass that is not journaled; its log fsyncs its own segment).
    buffer: Vec<u8>,
    pending: Completions,
    /// Bytes ever put in the buffer, and of them those written and fsynced.
    recorded_total: u64,
    durable_total: u64,
    /// A thread is writing the buffer taken from here.
    writing: bool,
    /// The logs with entries written to the current file (by address), registered when
    /// the bytes are written, so that retiring a file fsyncs exactly the logs in it.
    in_file: HashMap<usize, Weak<dyn JournaledLog>>,
    /// Keys recorded in this process: a log attached under one again gets a reset.
    recorded_keys: HashSet<String>,
    /// Every attached log, by key (to fall back on when the journal fails).
    attached: HashMap<String, Weak<dyn JournaledLog>>,
    /// Batches read at open, by key, until the key's log is attached.
    unreplayed: HashMap<String, Vec<JournalBatch>>,
    /// Keys with entries in the files read at open.
    seen_at_open: HashSet<String>,
    /// Files read at open, deleted by [`Journal::recovered`].
    old_files: Vec<PathBuf>,
    offline: Option<String>,
}

impl<S: Storage> fmt::Debug for Journal<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Journal").field("dir", &self.dir).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A log's identity while it lives (the address of its allocation).
fn address(log: &Weak<dyn JournaledLog>) -> usize {
    Weak::as_ptr(log) as *const () as usize
}

fn file_name(seq: u64) -> String {
    format!("{seq:020}{SUFFIX}")
}

impl<S: Storage> Journal<S> {
    /// Opens the journal of `data_dir` (creating its directory), reads the files a
    /// previous process left, and starts a new file. `max_file_bytes` is where a file
    /// is retired.
    pub fn open(storage: S, data_dir: &Path, max_file_bytes: u64) -> Result<Arc<Self>> {
        let dir = data_dir.join(JOURNAL_DIR);
        if !storage.exists(&dir) {
            storage.create_dir_all(&dir).map_err(|e| StorageError::io("create dir", &dir, e))?;
            storage.sync_dir(data_dir).map_err(|e| StorageError::io("fsync dir", data_dir, e))?;
        }
        let names = storage.list(&dir).map_err(|e| StorageError::io("list", &dir, e))?;
        let mut seqs: Vec<u64> =
            names.iter().filter_map(|n| n.strip_suffix(SUFFIX).and_then(|s| s.parse().ok())).collect();
        seqs.sort_unstable();
        let mut unreplayed: HashMap<String, Vec<JournalBatch>> = HashMap::new();
        let mut seen_at_open = HashSet::new();
        let mut old_files = Vec::new();
        for &seq in &seqs {
            let path = dir.join(file_name(seq));
            let file = storage.open(&path, false).map_err(|e| StorageError::io("open", &path, e))?;
            let len = file.len().map_err(|e| StorageError::io("stat", &path, e))?;
            let mut bytes = Vec::new();
            file.read_exact_at_into(&mut bytes, len as usize, 0).map_err(|e| StorageError::io("read", &path, e))?;
            let (used, torn) = read_entries(&bytes, &mut unreplayed, &mut seen_at_open);
            if torn {
                tracing::info!(file = %path.display(), valid_bytes = used, len, "journal file ends in an entry that was never made durable; ignoring its tail");
            }
            old_files.push(path);
        }
        let file_seq = seqs.last().map_or(1, |s| s + 1);
        let path = dir.join(file_name(file_seq));
        let file = Arc::new(storage.open(&path, true).map_err(|e| StorageError::io("create", &path, e))?);
        storage.sync_dir(&dir).map_err(|e| StorageError::io("fsync dir", &dir, e))?;
        let batches: usize = unreplayed.values().map(Vec::len).sum();
        if batches > 0 {
            tracing::info!(
                logs = unreplayed.len(),
                batches,
                "commit journal read; its batches are replayed as their logs open"
            );
        }
        let inner = Inner {
            file,
            file_seq,
            file_len: 0,
            buffer: Vec::new(),
            pending: Completions::default(),
            recorded_total: 0,
            durable_total: 0,
            writing: false,
            in_file: HashMap::new(),
            recorded_keys: HashSet::new(),
            attached: HashMap::new(),
            unreplayed,
            seen_at_open,
            old_files,
            offline: None,
        };
        Ok(Arc::new_cyclic(|me| Journal {
            storage,
            dir,
            max_file_bytes: max_file_bytes.max(4096),
            inner: Mutex::new(inner),
            written: Condvar::new(),
            queued: AtomicBool::new(false),
            fsyncs: FsyncCounters::default(),
            entries: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            retired: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
            me: me.clone(),
        }))
    }

    /// The journal's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where a file is retired.
    pub fn max_file_bytes(&self) -> u64 {
        self.max_file_bytes
    }

    /// Attaches `log`: appends what the journal holds for it that its recovery did not
    /// keep (and fsyncs it), then journals its appends from now on. A log whose key had
    /// entries before (in an old file, or an earlier log of the same name in this
    /// process) gets a durable reset first, so those entries never come back.
    pub fn attach<L: Storage>(&self, log: &Arc<crate::PartitionLog<L>>) -> Result<()> {
        let key = log.dir().file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let (batches, seen) = {
            let mut inner = lock(&self.inner);
            let seen = inner.seen_at_open.contains(&key) || inner.recorded_keys.contains(&key);
            (inner.unreplayed.remove(&key), seen)
        };
        if let Some(batches) = batches {
            let n = log.replay_journal(&batches)?;
            self.replayed.fetch_add(n as u64, Ordering::Relaxed);
        }
        if seen {
            let completions = self.write_cut(&key, None)?;
            self.deliver_completions(completions);
        }
        let me: Arc<dyn JournaledLog> = log.clone();
        let me = Arc::downgrade(&me);
        lock(&self.inner).attached.insert(key.clone(), me.clone());
        let journal: Arc<dyn JournalSink> = self.me.upgrade().expect("attach is called through an Arc");
        log.set_journal(JournalLink { journal, key, me });
        Ok(())
    }

    /// Start-up is over: every log that will be opened has been attached. The batches of
    /// logs that were not (their partitions are no longer here) are dropped, and the
    /// files read at open are deleted.
    pub fn recovered(&self) {
        let (left, files) = {
            let mut inner = lock(&self.inner);
            inner.seen_at_open.clear();
            (std::mem::take(&mut inner.unreplayed), std::mem::take(&mut inner.old_files))
        };
        if !left.is_empty() {
            let mut keys: Vec<_> = left.keys().cloned().collect();
            keys.sort();
            tracing::warn!(logs = ?keys, "the commit journal held batches of logs that were not opened; dropped");
        }
        for path in files {
            if let Err(e) = self.storage.remove(&path) {
                tracing::warn!(file = %path.display(), error = %e, "old commit journal file not removed");
            }
        }
    }

    /// Counters for metrics.
    pub fn stats(&self) -> JournalStats {
        JournalStats {
            entries: self.entries.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            fsyncs: self.fsyncs.snapshot(),
            retired: self.retired.load(Ordering::Relaxed),
            replayed: self.replayed.load(Ordering::Relaxed),
        }
    }

    /// Writes everything buffered, rounds after rounds, until the buffer is empty or
    /// another thread writes. Completions are delivered here unless `keep` takes them.
    fn write_rounds(&self, mut keep: Option<&mut Completions>) {
        loop {
            let (buffer, completions, file, position) = {
                let mut inner = lock(&self.inner);
                if inner.writing || inner.buffer.is_empty() || inner.offline.is_some() {
                    return;
                }
                inner.writing = true;
                let buffer = std::mem::take(&mut inner.buffer);
                let completions = std::mem::take(&mut inner.pending);
                (buffer, completions, inner.file.clone(), inner.file_len)
            };
            let started = Instant::now();
            let result = file.write_all_at(&buffer, position).and_then(|()| file.sync_data());
            self.fsyncs.record(started.elapsed(), result.is_ok());
            let retire = {
                let mut inner = lock(&self.inner);
                inner.writing = false;
                let retire = match &result {
                    Ok(()) => {
                        for (log, ..) in &completions.0 {
                            inner.in_file.entry(address(log)).or_insert_with(|| log.clone());
                        }
                        inner.file_len += buffer.len() as u64;
                        inner.durable_total += buffer.len() as u64;
                        self.bytes.fetch_add(buffer.len() as u64, Ordering::Relaxed);
                        // A thread writing for a truncation holds its log's locks, and
                        // retiring fsyncs logs: the next plain round rotates instead.
                        keep.is_none() && inner.file_len >= self.max_file_bytes
                    }
                    Err(e) => {
                        let reason = format!("commit journal write or fsync failed: {e}");
                        tracing::error!(dir = %self.dir.display(), %reason, "commit journal offline; its logs fsync their own segments from now on");
                        inner.offline = Some(reason);
                        false
                    }
                };
                self.written.notify_all();
                // Rotating holds `writing` so nothing is written to the old file after.
                if retire {
                    inner.writing = true;
                }
                retire
            };
            if result.is_err() {
                self.fail_all();
                return;
            }
            match keep.as_deref_mut() {
                Some(kept) => kept.0.extend(completions.0),
                None => self.deliver_completions(completions),
            }
            if retire {
                self.rotate();
            }
        }
    }

    /// Starts a new file and retires the current one: its logs fsync their segments,
    /// then it is deleted. Called with `writing` set; clears it.
    fn rotate(&self) {
        let (old_path, seq) = {
            let inner = lock(&self.inner);
            (self.dir.join(file_name(inner.file_seq)), inner.file_seq + 1)
        };
        let path = self.dir.join(file_name(seq));
        let created = self
            .storage
            .open(&path, true)
            .and_then(|file| self.storage.sync_dir(&self.dir).map(|()| file))
            .map_err(|e| format!("creating {}: {e}", path.display()));
        let logs = {
            let mut inner = lock(&self.inner);
            inner.writing = false;
            self.written.notify_all();
            match created {
                Ok(file) => {
                    inner.file = Arc::new(file);
                    inner.file_seq = seq;
                    inner.file_len = 0;
                    std::mem::take(&mut inner.in_file)
                }
                Err(reason) => {
                    // The current file stays; it grows past the bound until a rotation works.
                    tracing::warn!(%reason, "commit journal file not rotated");
                    return;
                }
            }
        };
        for log in logs.values().filter_map(Weak::upgrade) {
            if let Err(e) = log.sync_segments() {
                // Its acknowledged appends may be only in that file: it stays, and is
                // replayed at the next start.
                tracing::warn!(error = %e, file = %old_path.display(), "a log was not fsynced; the old commit journal file is kept");
                return;
            }
        }
        match self.storage.remove(&old_path) {
            Ok(()) => {
                self.retired.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::warn!(file = %old_path.display(), error = %e, "old commit journal file not removed"),
        }
    }

    fn deliver_completions(&self, completions: Completions) {
        for (log, generation, base, end) in completions.0 {
            if let Some(log) = log.upgrade() {
                log.journal_durable(generation, base, end);
            }
        }
    }

    fn fail_all(&self) {
        let logs: Vec<_> = {
            let mut inner = lock(&self.inner);
            inner.buffer.clear();
            inner.pending = Completions::default();
            inner.attached.values().cloned().collect()
        };
        for log in logs.iter().filter_map(Weak::upgrade) {
            log.journal_failed();
        }
    }

    fn write_cut(&self, key: &str, offset: Option<i64>) -> Result<Completions> {
        let target = {
            let mut inner = lock(&self.inner);
            if let Some(reason) = &inner.offline {
                return Err(StorageError::LogOffline { dir: self.dir.clone(), reason: reason.clone() });
            }
            let (kind, offset) = match offset {
                Some(o) => (KIND_TRUNCATE, o),
                None => (KIND_RESET, -1),
            };
            inner.recorded_total += encode(&mut inner.buffer, kind, key, offset, &[]);
            self.entries.fetch_add(1, Ordering::Relaxed);
            inner.recorded_total
        };
        let mut completions = Completions::default();
        loop {
            self.write_rounds(Some(&mut completions));
            let inner = lock(&self.inner);
            if let Some(reason) = &inner.offline {
                return Err(StorageError::LogOffline { dir: self.dir.clone(), reason: reason.clone() });
            }
            if inner.durable_total >= target {
                return Ok(completions);
            }
            if inner.writing {
                // Another thread writes the buffer now; the next round takes ours.
                drop(self.written.wait(inner).unwrap_or_else(|e| e.into_inner()));
            }
        }
    }
}

impl<S: Storage> JournalSink for Journal<S> {
    fn record(&self, link: &JournalLink, generation: u64, base: i64, end: i64, pieces: &[&[u8]]) -> bool {
        let mut inner = lock(&self.inner);
        // The bound on what waits in memory for the next round: about one file's worth.
        // Past it the append is not journaled, and its log fsyncs its own segment.
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        if inner.offline.is_some() || (inner.buffer.len() + len) as u64 > self.max_file_bytes {
            return false;
        }
        inner.recorded_total += encode(&mut inner.buffer, KIND_BATCHES, &link.key, base, pieces);
        inner.pending.add(&link.me, generation, base, end);
        if !inner.recorded_keys.contains(&link.key) {
            inner.recorded_keys.insert(link.key.clone());
        }
        self.entries.fetch_add(1, Ordering::Relaxed);
        true
    }

    fn record_cut(&self, key: &str, offset: Option<i64>) -> Result<Completions> {
        self.write_cut(key, offset)
    }

    fn deliver(&self, completions: Completions) {
        self.deliver_completions(completions);
    }

    fn schedule(&self, flusher: &Flusher) {
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let me: Arc<dyn Flushable> = match self.me.upgrade() {
            Some(me) => me,
            None => return,
        };
        if !flusher.schedule(me) {
            self.queued.store(false, Ordering::Release);
            self.write_rounds(None);
        }
    }

    fn is_online(&self) -> bool {
        lock(&self.inner).offline.is_none()
    }
}

impl<S: Storage> Flushable for Journal<S> {
    fn flush_waiters(&self) {
        self.write_rounds(None);
    }

    fn dequeued(&self) {
        self.queued.store(false, Ordering::Release);
    }
}

/// Appends one entry to `buf`; returns its length.
fn encode(buf: &mut Vec<u8>, kind: u8, key: &str, offset: i64, pieces: &[&[u8]]) -> u64 {
    let key = &key.as_bytes()[..key.len().min(u16::MAX as usize)];
    let body_len = 1 + 2 + key.len() + 8 + pieces.iter().map(|p| p.len()).sum::<usize>();
    let start = buf.len();
    buf.extend_from_slice(&(body_len as u32).to_be_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.push(kind);
    buf.extend_from_slice(&(key.len() as u16).to_be_bytes());
    buf.extend_from_slice(key);
    buf.extend_from_slice(&offset.to_be_bytes());
    for p in pieces {
        buf.extend_from_slice(p);
    }
    let crc = crc32c::crc32c(&buf[start + ENTRY_HEADER..]);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
    (buf.len() - start) as u64
}

/// Reads the entries of one file into `out` (applying truncations and resets), up to
/// the first that does not check out. Returns the bytes used and whether any were left.
fn read_entries(
    bytes: &[u8],
    out: &mut HashMap<String, Vec<JournalBatch>>,
    seen: &mut HashSet<String>,
) -> (usize, bool) {
    let mut at = 0;
    while at < bytes.len() {
        let Some(entry) = parse_entry(&bytes[at..]) else { return (at, true) };
        let (kind, key, offset, body, used) = entry;
        seen.insert(key.to_string());
        match kind {
            KIND_BATCHES => {
                let list = out.entry(key.to_string()).or_default();
                let mut position = 0;
                while position < body.len() {
                    let Ok(header) = batch::validate(&body[position..], u64::MAX) else { break };
                    let end = position + header.total_size() as usize;
                    list.push(JournalBatch {
                        base_offset: header.base_offset,
                        last_offset: header.last_offset(),
                        bytes: body[position..end].to_vec(),
                    });
                    position = end;
                }
            }
            KIND_TRUNCATE => {
                if let Some(list) = out.get_mut(key) {
                    list.retain(|b| b.last_offset < offset);
                }
            }
            _ => {
                out.remove(key);
            }
        }
        at += used;
    }
    (at, false)
}

/// One entry at the start of `bytes`: kind, key, offset, body and its whole length.
fn parse_entry(bytes: &[u8]) -> Option<(u8, &str, i64, &[u8], usize)> {
    let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let crc = u32::from_be_bytes(bytes.get(4..8)?.try_into().ok()?);
    let body = bytes.get(ENTRY_HEADER..ENTRY_HEADER.checked_add(len)?)?;
    if len < 11 || crc32c::crc32c(body) != crc {
        return None;
    }
    let kind = body[0];
    let key_len = u16::from_be_bytes([body[1], body[2]]) as usize;
    let key = std::str::from_utf8(body.get(3..3 + key_len)?).ok()?;
    let offset = i64::from_be_bytes(body.get(3 + key_len..11 + key_len)?.try_into().ok()?);
    if !(KIND_BATCHES..=KIND_RESET).contains(&kind) {
        return None;
    }
    Some((kind, key, offset, &body[11 + key_len..], ENTRY_HEADER + len))
}
