//! A bound on open file descriptors shared by every log of the process.
//!
//! [`FdLimited`] wraps a [`Storage`]: each file it opens is a [`LimitedFile`] whose
//! descriptor lives in a shared [`FdBudget`], a least-recently-used cache of at most
//! `max_open` handles. An evicted file is reopened by path on its next use, so a broker
//! with thousands of partitions, each with an active segment and some sealed ones, holds
//! at most `max_open` segment descriptors (plus those pinned by operations in flight,
//! including located reads' [`FileChunk`](crate::FileChunk)s until they are dropped).
//! Active segments are included: the cost of an eviction is one `open` on the next
//! append or read of that partition.
//!
//! Two things to know:
//! * An fsync through a reopened descriptor flushes the file's dirty pages like any
//!   other (Linux flushes per inode). A writeback error that happened while the file had
//!   no descriptor open is reported to a later opener only if nobody saw it yet (Linux
//!   4.16+ errseq semantics), which is the case here since the broker is the only
//!   writer; older kernels could lose such an error.
//! * Reopening is by path. Paths of live segments never change; a segment deleted by
//!   retention or truncation fails to reopen (an I/O error, as a read of a deleted
//!   segment should). A read that took its segment view just before a compaction swap
//!   and whose descriptor was evicted in that instant would reopen the cleaned file;
//!   its batch framing is checked, but this window is not closed.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::fs::{Storage, StorageFile};

/// The shared limit: an LRU of open handles, keyed by file.
pub struct FdBudget {
    max_open: usize,
    lru: Mutex<Lru>,
}

type Handle = Arc<dyn Any + Send + Sync>;

#[derive(Default)]
struct Lru {
    /// File id → (open handle, last use tick).
    open: HashMap<u64, (Handle, u64)>,
    /// Last use tick → file id, oldest first.
    by_use: BTreeMap<u64, u64>,
    tick: u64,
    next_id: u64,
}

impl fmt::Debug for FdBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FdBudget").field("max_open", &self.max_open).field("open", &self.open_count()).finish()
    }
}

fn lock(m: &Mutex<Lru>) -> MutexGuard<'_, Lru> {
    // Every mutation leaves the maps consistent before anything can panic.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FdBudget {
    /// A budget of at most `max_open` cached descriptors (at least 1).
    pub fn new(max_open: usize) -> Arc<FdBudget> {
        Arc::new(FdBudget { max_open: max_open.max(1), lru: Mutex::new(Lru::default()) })
    }

    /// The limit.
    pub fn max_open(&self) -> usize {
        self.max_open
    }

    /// Descriptors cached now.
    pub fn open_count(&self) -> usize {
        lock(&self.lru).open.len()
    }

    fn register(&self, handle: Handle) -> u64 {
        let mut lru = lock(&self.lru);
        let id = lru.next_id;
        lru.next_id += 1;
        lru.put(id, handle, self.max_open);
        id
    }

    fn get(&self, id: u64) -> Option<Handle> {
        let mut lru = lock(&self.lru);
        let tick = lru.next_tick();
        let (handle, last) = lru.open.get_mut(&id)?;
        let (handle, old) = (handle.clone(), std::mem::replace(last, tick));
        lru.by_use.remove(&old);
        lru.by_use.insert(tick, id);
        Some(handle)
    }

    fn insert(&self, id: u64, handle: Handle) {
        lock(&self.lru).put(id, handle, self.max_open);
    }

    fn forget(&self, id: u64) {
        let mut lru = lock(&self.lru);
        if let Some((_, tick)) = lru.open.remove(&id) {
            lru.by_use.remove(&tick);
        }
    }
}

impl Lru {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Caches `handle` as most recently used and evicts the least recently used beyond
    /// `max_open` (their descriptors close once no operation holds them).
    fn put(&mut self, id: u64, handle: Handle, max_open: usize) {
        let tick = self.next_tick();
        if let Some((_, old)) = self.open.insert(id, (handle, tick)) {
            self.by_use.remove(&old);
        }
        self.by_use.insert(tick, id);
        while self.open.len() > max_open {
            let Some((_, victim)) = self.by_use.pop_first() else { break };
            self.open.remove(&victim);
        }
    }
}

/// A [`Storage`] whose files share an [`FdBudget`].
#[derive(Debug, Clone)]
pub struct FdLimited<S> {
    inner: S,
    budget: Arc<FdBudget>,
}

impl<S> FdLimited<S> {
    /// `inner` with its open files limited by `budget` (share one budget between all the
    /// logs of a process).
    pub fn new(inner: S, budget: Arc<FdBudget>) -> FdLimited<S> {
        FdLimited { inner, budget }
    }

    /// The shared budget.
    pub fn budget(&self) -> &Arc<FdBudget> {
        &self.budget
    }
}

impl<S: Storage + Clone> Storage for FdLimited<S> {
    type File = LimitedFile<S>;

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<LimitedFile<S>> {
        let file = self.inner.open(path, create)?;
        let id = self.budget.register(Arc::new(file));
        Ok(LimitedFile { id, path: path.to_path_buf(), storage: self.inner.clone(), budget: self.budget.clone() })
    }

    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }

    fn rename_dir(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename_dir(from, to)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.remove_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
}

/// A file whose descriptor may be closed by the budget and is reopened on use.
#[derive(Debug)]
pub struct LimitedFile<S: Storage> {
    id: u64,
    path: PathBuf,
    storage: S,
    budget: Arc<FdBudget>,
}

impl<S: Storage> LimitedFile<S> {
    /// The open handle, reopened (and cached) if the budget closed it.
    fn file(&self) -> io::Result<Arc<S::File>> {
        if let Some(handle) = self.budget.get(self.id) {
            if let Ok(file) = handle.downcast::<S::File>() {
                return Ok(file);
            }
        }
        let file = Arc::new(self.storage.open(&self.path, false)?);
        self.budget.insert(self.id, file.clone());
        Ok(file)
    }
}

impl<S: Storage> Drop for LimitedFile<S> {
    fn drop(&mut self) {
        self.budget.forget(self.id);
    }
}

impl<S: Storage> StorageFile for LimitedFile<S> {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        self.file()?.read_at(buf, pos)
    }

    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        self.file()?.write_all_at(buf, pos)
    }

    fn write_all_vectored_at(&self, pieces: &[&[u8]], pos: u64) -> io::Result<()> {
        self.file()?.write_all_vectored_at(pieces, pos)
    }

    fn len(&self) -> io::Result<u64> {
        self.file()?.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file()?.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file()?.sync_data()
    }

    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        // One handle for the whole read, not one per partial read.
        self.file()?.read_exact_at(buf, pos)
    }

    fn read_exact_at_into(&self, buf: &mut Vec<u8>, len: usize, pos: u64) -> io::Result<()> {
        // The open file's own read, which may skip the zero-filling.
        self.file()?.read_exact_at_into(buf, len, pos)
    }

    fn os_file(self: &Arc<Self>) -> io::Result<Option<Arc<std::fs::File>>> {
        // The handle cached now (reopened if the budget closed it). The caller's `Arc`
        // keeps its descriptor open after the budget evicts it, until dropped: responses
        // in flight (a sendfile of this file) can take the process past `max_open`.
        self.file()?.os_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::SimStorage;

    #[test]
    fn evicted_files_reopen_transparently_and_the_cache_stays_bounded() {
        let sim = SimStorage::new();
        let storage = FdLimited::new(sim.clone(), FdBudget::new(3));
        let files: Vec<_> = (0..10)
            .map(|i| {
                let f = storage.open(Path::new(&format!("/f{i}")), true).unwrap();
                f.write_all_at(&[i as u8; 4], 0).unwrap();
                f
            })
            .collect();
        assert_eq!(storage.budget().open_count(), 3);
        assert!(sim.open_handles().len() <= 3);
        for (i, f) in files.iter().enumerate() {
            let mut buf = [0u8; 4];
            f.read_exact_at(&mut buf, 0).unwrap();
            assert_eq!(buf, [i as u8; 4]);
            assert!(sim.open_handles().len() <= 3);
        }
        drop(files);
        assert_eq!(storage.budget().open_count(), 0, "dropped files leave the cache");
    }

    #[test]
    fn a_held_os_file_stays_readable_after_the_budget_closes_its_handle() {
        let dir = std::env::temp_dir().join(format!("osprey-storage-fd-os-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let storage = FdLimited::new(crate::fs::StdStorage, FdBudget::new(1));
        let first = Arc::new(storage.open(&dir.join("a"), true).unwrap());
        first.write_all_at(b"held", 0).unwrap();
        let os_file = first.os_file().unwrap().expect("a real file has an OS file");
        // Evicts `first`'s handle from the budget of one.
        let second = storage.open(&dir.join("b"), true).unwrap();
        second.write_all_at(b"other", 0).unwrap();
        assert_eq!(storage.budget().open_count(), 1);
        let mut held = Vec::new();
        os_file.read_exact_at_into(&mut held, 4, 0).unwrap();
        assert_eq!(held, b"held");
        let mut reopened = Vec::new();
        first.read_exact_at_into(&mut reopened, 4, 0).unwrap();
        assert_eq!(reopened, b"held", "the budget's handle is reopened for the file's own reads");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
