//! The quorum's state machine (openraft's `RaftStateMachine`): the [`MetadataImage`],
//! fed every committed batch in log order.
//!
//! Snapshots are the image as JSON with openraft's snapshot metadata, in
//! `snapshot-<index>-<term>.json`, written to a temporary file, fsynced, renamed and the
//! directory fsynced; older snapshots are deleted after. A snapshot is requested once
//! `metadata.log.max.record.bytes.between.snapshots` bytes of records were applied since
//! the last one (Kafka's name and meaning), and openraft then purges the log below it.
//!
//! Consumers (a broker applying metadata, the active controller's image) follow applied
//! entries through [`AppliedEvent`]s, in log order, one per index.

use super::fetch::{MetadataFetchContent, RecordTail, TailRead};
use super::files::read_all;
use super::types::{BatchApplied, MetadataBatch};
use super::types::{QuorumEntry, QuorumLogId, QuorumMembership, QuorumStorageError, QuorumTypes, ReplicaKey};
use crate::image::MetadataImage;
use openraft::storage::RaftStateMachine;
use openraft::{AnyError, EntryPayload, RaftLogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageIOError};
use osprey_storage::fs::{Storage, StorageFile};
use serde::{Deserialize, Serialize};
use std::io::{self, Cursor};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{broadcast, watch, Notify};

const SNAPSHOT_PREFIX: &str = "snapshot-";
const SNAPSHOT_SUFFIX: &str = ".json";

/// One applied log index, as consumers see it.
#[derive(Debug, Clone)]
pub enum AppliedEvent {
    /// The entry at `index` was applied: a batch of records, or `None` for an entry of
    /// openraft's own (a leader's blank entry, a membership change).
    Entry { index: u64, term: u64, batch: Option<Arc<MetadataBatch>> },
    /// A snapshot was installed (a node far behind was sent one): the image as of
    /// `index` replaces what the consumer had; entries follow from `index + 1`.
    Snapshot { index: u64, image: Arc<MetadataImage> },
}

/// What the state machine holds: the image and how far it got.
#[derive(Debug, Clone, Default)]
pub struct AppliedImage {
    pub image: MetadataImage,
    pub last_applied: Option<QuorumLogId>,
    pub membership: QuorumMembership,
}

/// The state machine. Clones share it (the snapshot builder is a clone).
#[derive(Debug)]
pub struct StateMachine<S: Storage> {
    shared: Arc<Mutex<Shared>>,
    storage: S,
    dir: PathBuf,
    /// How far the snapshot on disk reaches, for the log's purges to wait on.
    durable_snapshot: Arc<watch::Sender<DurableSnapshot>>,
}

/// How far the newest durable snapshot reaches, or that writing one failed (the member
/// stops then). The log purges no entry a durable snapshot does not cover: openraft
/// 0.9 purges the log up to an installed snapshot as soon as it hands the snapshot to
/// the state machine, before the snapshot is written, and a member whose install then
/// failed (a full disk) or that crashed meanwhile could not start again, its log
/// purged past the snapshot it still had (found by `cluster_simulation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurableSnapshot {
    /// Up to and including this log index (`None`: no snapshot).
    UpTo(Option<u64>),
    Failed,
}

impl<S: Storage + Clone> Clone for StateMachine<S> {
    fn clone(&self) -> Self {
        StateMachine {
            shared: self.shared.clone(),
            storage: self.storage.clone(),
            dir: self.dir.clone(),
            durable_snapshot: self.durable_snapshot.clone(),
        }
    }
}

#[derive(Debug)]
struct Shared {
    applied: AppliedImage,
    events: broadcast::Sender<AppliedEvent>,
    /// Record bytes applied since the last snapshot.
    bytes_since_snapshot: u64,
    max_bytes_between_snapshots: u64,
    /// Woken when a snapshot is due; the quorum asks openraft for one.
    snapshot_due: Arc<Notify>,
    /// The newest snapshot on disk: its metadata and file name.
    current: Option<(SnapshotMeta<ReplicaKey, super::types::ControllerEndpoint>, String)>,
    /// The most recently applied records, for brokers fetching the metadata log; its
    /// next offset is always `applied.image.applied`.
    tail: RecordTail,
}

/// A snapshot file's contents.
#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta<ReplicaKey, super::types::ControllerEndpoint>,
    image: MetadataImage,
}

impl<S: Storage + Clone> StateMachine<S> {
    /// Opens the state machine in `dir`, from its newest snapshot if there is one.
    /// `events_capacity` bounds how many applied entries a slow consumer may be behind
    /// before it is told it lagged (and must re-read the image); `tail_capacity`, how many
    /// applied records are kept for fetching brokers.
    pub fn open(
        storage: S,
        dir: &Path,
        max_bytes_between_snapshots: u64,
        events_capacity: usize,
        tail_capacity: usize,
    ) -> io::Result<StateMachine<S>> {
        storage.create_dir_all(dir)?;
        let mut snapshots: Vec<(u64, u64, String)> = storage
            .list(dir)?
            .into_iter()
            .filter_map(|name| {
                let (index, term) =
                    name.strip_prefix(SNAPSHOT_PREFIX)?.strip_suffix(SNAPSHOT_SUFFIX)?.split_once('-')?;
                Some((index.parse().ok()?, term.parse().ok()?, name))
            })
            .collect();
        snapshots.sort();
        let mut applied = AppliedImage::default();
        let mut current = None;
        if let Some((_, _, name)) = snapshots.pop() {
            let bytes = read_all(&storage, &dir.join(&name))?;
            // Written whole before its rename: damage here is not a crash's doing, and the
            // log below it is gone, so refuse to start rather than serve a wrong image.
            let file: SnapshotFile = serde_json::from_slice(&bytes)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{name} is damaged: {e}")))?;
            applied = AppliedImage {
                image: file.image,
                last_applied: file.meta.last_log_id,
                membership: file.meta.last_membership.clone(),
            };
            current = Some((file.meta, name));
        }
        for (_, _, stale) in snapshots {
            storage.remove(&dir.join(stale))?;
        }
        let (events, _) = broadcast::channel(events_capacity.max(1));
        let tail = RecordTail::new(applied.image.applied, tail_capacity);
        let durable = DurableSnapshot::UpTo(applied.last_applied.map(|l| l.index));
        let durable_snapshot = Arc::new(watch::Sender::new(durable));
        let shared = Shared {
            tail,
            applied,
            events,
            bytes_since_snapshot: 0,
            max_bytes_between_snapshots,
            snapshot_due: Arc::new(Notify::new()),
            current,
        };
        Ok(StateMachine { shared: Arc::new(Mutex::new(shared)), storage, dir: dir.to_path_buf(), durable_snapshot })
    }
}

impl<S: Storage> StateMachine<S> {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A handle on what is applied, for consumers.
    pub fn view(&self) -> AppliedView {
        AppliedView { shared: self.shared.clone() }
    }

    fn snapshot_error(&self, e: io::Error) -> QuorumStorageError {
        StorageIOError::write_snapshot(None, AnyError::new(&e)).into()
    }

    /// How far the durable snapshot reaches, as it changes: see [`DurableSnapshot`].
    pub fn durable_snapshot(&self) -> watch::Receiver<DurableSnapshot> {
        self.durable_snapshot.subscribe()
    }

    /// Writes the snapshot up to `index` durably and deletes the older ones, and says so
    /// to the log's purges (or that it failed).
    fn write_snapshot_through(
        &self,
        index: Option<u64>,
        file_name: &str,
        bytes: &[u8],
        older: Option<&str>,
    ) -> io::Result<()> {
        let written = self.write_snapshot(file_name, bytes, older);
        self.durable_snapshot.send_modify(|durable| match (&written, *durable) {
            (Err(_), _) => *durable = DurableSnapshot::Failed,
            (Ok(()), DurableSnapshot::UpTo(before)) if index > before => *durable = DurableSnapshot::UpTo(index),
            _ => {}
        });
        written
    }

    /// Writes a snapshot file durably and deletes the older ones.
    fn write_snapshot(&self, file_name: &str, bytes: &[u8], older: Option<&str>) -> io::Result<()> {
        let tmp = self.dir.join(format!("{file_name}.tmp"));
        let file = self.storage.open(&tmp, true)?;
        file.set_len(0)?;
        file.write_all_at(bytes, 0)?;
        file.sync_data()?;
        self.storage.rename(&tmp, &self.dir.join(file_name))?;
        self.storage.sync_dir(&self.dir)?;
        if let Some(older) = older.filter(|o| *o != file_name) {
            // Deleting late is safe: on open only the newest snapshot is read.
            self.storage.remove(&self.dir.join(older))?;
        }
        Ok(())
    }
}

/// What the state machine has applied, for its consumers (the quorum handle, a broker's
/// metadata publisher). Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppliedView {
    shared: Arc<Mutex<Shared>>,
}

impl AppliedView {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The applied image as of now (a copy).
    pub fn applied(&self) -> AppliedImage {
        self.lock().applied.clone()
    }

    /// The applied image as of now and a receiver of every entry applied after it, taken
    /// together so that nothing falls between them.
    pub fn subscribe(&self) -> (AppliedImage, broadcast::Receiver<AppliedEvent>) {
        let shared = self.lock();
        (shared.applied.clone(), shared.events.subscribe())
    }

    /// What a broker fetching from record `offset` gets now (`None`: nothing applied
    /// at or past it yet), and a receiver of the entries applied after this read, taken
    /// together so that a waiting fetch misses nothing. Only applied records are served,
    /// and a node applies only what the quorum committed.
    pub fn records_from(
        &self,
        offset: u64,
        max_records: u32,
    ) -> (Option<MetadataFetchContent>, broadcast::Receiver<AppliedEvent>) {
        let shared = self.lock();
        let content = match shared.tail.read(offset, max_records) {
            TailRead::Records(records) => Some(MetadataFetchContent::Records { first_offset: offset, records }),
            TailRead::BelowTail => Some(MetadataFetchContent::Image { image: Box::new(shared.applied.image.clone()) }),
            TailRead::NothingNew => None,
        };
        (content, shared.events.subscribe())
    }

    /// Notified whenever enough has been applied since the last snapshot.
    pub fn snapshot_due(&self) -> Arc<Notify> {
        self.lock().snapshot_due.clone()
    }

    /// Reads `f` of the applied image without copying it.
    pub fn with_applied<T>(&self, f: impl FnOnce(&AppliedImage) -> T) -> T {
        f(&self.lock().applied)
    }
}

fn snapshot_name(last: Option<QuorumLogId>) -> String {
    let (index, term) = last.map_or((0, 0), |l| (l.index, l.leader_id.term));
    format!("{SNAPSHOT_PREFIX}{index}-{term}{SNAPSHOT_SUFFIX}")
}

impl<S: Storage + Clone> RaftSnapshotBuilder<QuorumTypes> for StateMachine<S> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<QuorumTypes>, QuorumStorageError> {
        let (file, older) = {
            let mut shared = self.lock();
            let last = shared.applied.last_applied;
            let meta = SnapshotMeta {
                last_log_id: last,
                last_membership: shared.applied.membership.clone(),
                snapshot_id: snapshot_name(last),
            };
            shared.bytes_since_snapshot = 0;
            let older = shared.current.as_ref().map(|(_, name)| name.clone());
            (SnapshotFile { meta, image: shared.applied.image.clone() }, older)
        };
        let bytes = serde_json::to_vec(&file).map_err(|e| self.snapshot_error(io::Error::other(e)))?;
        let name = file.meta.snapshot_id.clone();
        let index = file.meta.last_log_id.map(|l| l.index);
        self.write_snapshot_through(index, &name, &bytes, older.as_deref()).map_err(|e| self.snapshot_error(e))?;
        self.lock().current = Some((file.meta.clone(), name));
        Ok(Snapshot { meta: file.meta, snapshot: Box::new(Cursor::new(bytes)) })
    }
}

impl<S: Storage + Clone> RaftStateMachine<QuorumTypes> for StateMachine<S> {
    type SnapshotBuilder = StateMachine<S>;

    async fn applied_state(&mut self) -> Result<(Option<QuorumLogId>, QuorumMembership), QuorumStorageError> {
        let shared = self.lock();
        Ok((shared.applied.last_applied, shared.applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<BatchApplied>, QuorumStorageError>
    where
        I: IntoIterator<Item = QuorumEntry> + Send,
        I::IntoIter: Send,
    {
        let mut shared = self.lock();
        let mut responses = Vec::new();
        for entry in entries {
            let log_id = *entry.get_log_id();
            let batch = match entry.payload {
                EntryPayload::Blank => None,
                EntryPayload::Normal(batch) => {
                    for record in &batch.records {
                        shared.applied.image.apply(record);
                    }
                    shared.tail.push(&batch.records);
                    debug_assert_eq!(shared.tail.next_offset(), shared.applied.image.applied);
                    shared.bytes_since_snapshot += approximate_bytes(&batch);
                    Some(Arc::new(batch))
                }
                EntryPayload::Membership(membership) => {
                    shared.applied.membership = QuorumMembership::new(Some(log_id), membership);
                    None
                }
            };
            shared.applied.last_applied = Some(log_id);
            // No receiver is not an error: nobody follows the metadata yet.
            let _ = shared.events.send(AppliedEvent::Entry { index: log_id.index, term: log_id.leader_id.term, batch });
            responses.push(BatchApplied { index: log_id.index, term: log_id.leader_id.term });
        }
        if shared.bytes_since_snapshot >= shared.max_bytes_between_snapshots {
            shared.snapshot_due.notify_one();
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, QuorumStorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<ReplicaKey, super::types::ControllerEndpoint>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), QuorumStorageError> {
        let read_error = |e: serde_json::Error| -> QuorumStorageError {
            StorageIOError::read_snapshot(Some(meta.signature()), AnyError::new(&e)).into()
        };
        let received: SnapshotFile = serde_json::from_slice(snapshot.get_ref()).map_err(read_error)?;
        // openraft's metadata is the authority; the file is rewritten with it.
        let file = SnapshotFile { meta: meta.clone(), image: received.image };
        let bytes = serde_json::to_vec(&file).map_err(read_error)?;
        let name = snapshot_name(meta.last_log_id);
        let older = self.lock().current.as_ref().map(|(_, n)| n.clone());
        let index = meta.last_log_id.map(|l| l.index);
        self.write_snapshot_through(index, &name, &bytes, older.as_deref()).map_err(|e| self.snapshot_error(e))?;
        let mut shared = self.lock();
        let image = Arc::new(file.image.clone());
        shared.applied = AppliedImage {
            image: file.image,
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
        };
        shared.bytes_since_snapshot = 0;
        shared.current = Some((meta.clone(), name));
        // The records before the snapshot's image are not known here any more.
        let next_offset = shared.applied.image.applied;
        shared.tail.reset(next_offset);
        let index = meta.last_log_id.map_or(0, |l| l.index);
        let _ = shared.events.send(AppliedEvent::Snapshot { index, image });
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<QuorumTypes>>, QuorumStorageError> {
        let Some((meta, name)) = self.lock().current.clone() else { return Ok(None) };
        let bytes = read_all(&self.storage, &self.dir.join(&name)).map_err(|e| {
            QuorumStorageError::from(StorageIOError::read_snapshot(Some(meta.signature()), AnyError::new(&e)))
        })?;
        Ok(Some(Snapshot { meta, snapshot: Box::new(Cursor::new(bytes)) }))
    }
}

/// The size a batch counts for toward the next snapshot: its records as JSON.
fn approximate_bytes(batch: &MetadataBatch) -> u64 {
    serde_json::to_vec(&batch.records).map_or(0, |v| v.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::MetadataRecord;
    use crate::quorum::fetch::RECORD_TAIL_CAPACITY;
    use openraft::{CommittedLeaderId, Entry, LogId, Membership};
    use osprey_storage::fs::SimStorage;
    use std::collections::BTreeSet;

    fn key(n: i32) -> ReplicaKey {
        ReplicaKey::new(n, [n as u8; 16])
    }

    fn log_id(index: u64) -> QuorumLogId {
        LogId::new(CommittedLeaderId::new(1, key(1)), index)
    }

    fn pids(next: i64) -> MetadataRecord {
        MetadataRecord::ProducerIdsAllocated { next }
    }

    fn normal(index: u64, records: Vec<MetadataRecord>) -> QuorumEntry {
        Entry { log_id: log_id(index), payload: EntryPayload::Normal(MetadataBatch::new(records)) }
    }

    fn open(dir: &str) -> StateMachine<SimStorage> {
        StateMachine::open(SimStorage::new(), Path::new(dir), 1 << 20, 16, RECORD_TAIL_CAPACITY).unwrap()
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    fn read(sm: &StateMachine<SimStorage>, offset: u64, max: u32) -> Option<MetadataFetchContent> {
        sm.view().records_from(offset, max).0
    }

    fn records(content: Option<MetadataFetchContent>) -> (u64, Vec<MetadataRecord>) {
        match content {
            Some(MetadataFetchContent::Records { first_offset, records }) => (first_offset, records),
            other => panic!("expected records, got {other:?}"),
        }
    }

    #[test]
    fn record_offsets_run_across_batches_and_openraft_entries_carry_none() {
        let mut sm = open("/a");
        let voters = BTreeSet::from([key(1)]);
        let entries = vec![
            Entry { log_id: log_id(1), payload: EntryPayload::Blank },
            Entry { log_id: log_id(2), payload: EntryPayload::Membership(Membership::new(vec![voters], None)) },
            normal(3, vec![MetadataRecord::ClusterId { id: "c".into() }, pids(1000)]),
            Entry { log_id: log_id(4), payload: EntryPayload::Blank },
            normal(5, vec![pids(2000)]),
        ];
        block_on(sm.apply(entries)).unwrap();
        assert_eq!(sm.view().applied().image.applied, 3, "three records in five entries");
        let (first, all) = records(read(&sm, 0, 100));
        assert_eq!(first, 0);
        assert_eq!(all, vec![MetadataRecord::ClusterId { id: "c".into() }, pids(1000), pids(2000)]);
        assert_eq!(records(read(&sm, 2, 100)), (2, vec![pids(2000)]));
        assert_eq!(records(read(&sm, 1, 1)), (1, vec![pids(1000)]), "bounded by max_records");
        assert!(read(&sm, 3, 100).is_none(), "nothing applied at offset 3 yet");
    }

    #[test]
    fn an_installed_snapshot_resets_the_tail_and_older_offsets_get_the_image() {
        let mut leader = open("/leader");
        block_on(leader.apply((1..=4).map(|i| normal(i, vec![pids(i as i64 * 1000)])))).unwrap();
        let snapshot = block_on(async { leader.get_snapshot_builder().await.build_snapshot().await }).unwrap();

        let mut follower = open("/follower");
        block_on(follower.apply([normal(1, vec![pids(1000)])])).unwrap();
        block_on(follower.install_snapshot(&snapshot.meta, snapshot.snapshot)).unwrap();
        match read(&follower, 0, 100) {
            Some(MetadataFetchContent::Image { image }) => {
                assert_eq!((image.applied, image.next_producer_id), (4, 4000))
            }
            other => panic!("an offset below the snapshot gets the image: {other:?}"),
        }
        assert!(read(&follower, 4, 100).is_none(), "the tail goes on from the image's offset");
        block_on(follower.apply([normal(5, vec![pids(5000)])])).unwrap();
        assert_eq!(records(read(&follower, 4, 100)), (4, vec![pids(5000)]));
        assert!(matches!(read(&follower, 3, 100), Some(MetadataFetchContent::Image { .. })));
    }

    #[test]
    fn a_reopened_state_machine_serves_the_snapshot_image_below_its_offset() {
        let disk = SimStorage::new();
        let mut sm = StateMachine::open(disk.clone(), Path::new("/m"), 1 << 20, 16, RECORD_TAIL_CAPACITY).unwrap();
        block_on(sm.apply((1..=3).map(|i| normal(i, vec![pids(i as i64)])))).unwrap();
        block_on(async { sm.get_snapshot_builder().await.build_snapshot().await }).unwrap();
        let reopened = StateMachine::open(disk, Path::new("/m"), 1 << 20, 16, RECORD_TAIL_CAPACITY).unwrap();
        assert!(matches!(read(&reopened, 0, 10), Some(MetadataFetchContent::Image { .. })));
        assert!(read(&reopened, 3, 10).is_none());
    }
}
