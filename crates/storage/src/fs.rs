//! The log's view of the disk: a small trait so tests can swap in a simulated disk that
//! tears unsynced writes at a crash, runs out of space, or fails fsync.

use std::collections::HashMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// A directory tree of files. Implementations must be shareable between threads: the
/// appender, readers and the fsync thread use the same files.
pub trait Storage: Debug + Send + Sync + 'static {
    /// An open file.
    type File: StorageFile;
    /// Creates `dir` and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names of the files and directories directly in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens `path` for reading and writing, creating it if `create`.
    fn open(&self, path: &Path, create: bool) -> io::Result<Self::File>;
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// Deletes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Renames the directory `from`, with everything in it, to `to` (which must not
    /// exist); durable once their parent directories are fsynced.
    fn rename_dir(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Deletes the directory `dir` and everything in it. Not atomic: a crash part-way
    /// may leave any of it behind.
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Makes creations, renames and deletions in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// A file read and written at explicit positions (pread/pwrite), so readers never
/// contend with the appender for a cursor.
// `len` is the file size; an `is_empty` would add nothing the log uses.
#[allow(clippy::len_without_is_empty)]
pub trait StorageFile: Debug + Send + Sync + 'static {
    /// Reads up to `buf.len()` bytes at `pos`; fewer only at end of file.
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `pos`.
    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()>;
    /// Current length.
    fn len(&self) -> io::Result<u64>;
    /// Truncates or extends to `len`.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// fdatasync: the file's data (and its size) are durable when this returns.
    fn sync_data(&self) -> io::Result<()>;

    /// Reads exactly `buf.len()` bytes at `pos`, or fails with `UnexpectedEof`.
    fn read_exact_at(&self, mut buf: &mut [u8], mut pos: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, pos)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => {
                    buf = &mut buf[n..];
                    pos += n as u64;
                }
            }
        }
        Ok(())
    }

    /// Appends exactly `len` bytes read at `pos` to `buf`, or fails (`UnexpectedEof` if
    /// the file ends first) and leaves `buf` as it was. Implementations that can read
    /// into uninitialised memory skip the zero-filling this default does, which a
    /// profile of fetch showed as a large part of its CPU with the copy itself.
    fn read_exact_at_into(&self, buf: &mut Vec<u8>, len: usize, pos: u64) -> io::Result<()> {
        // Exactly what is asked for: `resize` alone may double the allocation.
        buf.reserve_exact(len);
        read_exact_zeroed(self, buf, len, pos)
    }

    /// Writes `pieces` one after another from `pos`, as one `write_all_at` of their
    /// concatenation would, without concatenating them first. On an error, a prefix of
    /// the bytes may have been written, as with `write_all_at`. This default writes each
    /// piece in turn; OS files gather them into few `pwritev(2)` calls.
    fn write_all_vectored_at(&self, pieces: &[&[u8]], mut pos: u64) -> io::Result<()> {
        for piece in pieces {
            self.write_all_at(piece, pos)?;
            pos += piece.len() as u64;
        }
        Ok(())
    }

    /// The operating-system file behind this handle, open for as long as the caller
    /// holds the `Arc`, so that its bytes can be sent with sendfile(2) after the log's
    /// lock is released and even after the segment is deleted. `None` for files that are
    /// not OS files (the simulated disk's).
    fn os_file(self: &Arc<Self>) -> io::Result<Option<Arc<File>>> {
        Ok(None)
    }
}

/// Linux's IOV_MAX: the most pieces one `pwritev(2)` takes.
const MAX_IO_SLICES: usize = 1024;

/// The real disk, through `std::fs`.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdStorage;

impl Storage for StdStorage {
    type File = File;

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<File> {
        let file = OpenOptions::new().read(true).write(true).create(create).truncate(false).open(path)?;
        // Segments are read front to back: a larger readahead window for cold fetches.
        // Only advice, so a refusal changes nothing.
        #[cfg(unix)]
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Sequential);
        Ok(file)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn rename_dir(&self, from: &Path, to: &Path) -> io::Result<()> {
        // rename(2) would replace an empty directory at `to`: refuse, as the contract says.
        if to.exists() {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{} exists", to.display())));
        }
        std::fs::rename(from, to)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

impl StorageFile for File {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, pos)
    }

    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        FileExt::write_all_at(self, buf, pos)
    }

    fn write_all_vectored_at(&self, pieces: &[&[u8]], mut pos: u64) -> io::Result<()> {
        // Without empty pieces, a write of nothing means the file takes no more.
        let mut slices: Vec<IoSlice<'_>> =
            pieces.iter().filter(|piece| !piece.is_empty()).map(|piece| IoSlice::new(piece)).collect();
        let mut rest = &mut slices[..];
        while !rest.is_empty() {
            let batch = rest.len().min(MAX_IO_SLICES);
            match rustix::io::pwritev(self, &rest[..batch], pos) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    IoSlice::advance_slices(&mut rest, n);
                    pos += n as u64;
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }

    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn read_exact_at_into(&self, buf: &mut Vec<u8>, len: usize, pos: u64) -> io::Result<()> {
        let start = buf.len();
        let end = start + len;
        if buf.capacity() - start > len {
            // pread fills the whole spare capacity, which would read (and then discard)
            // bytes past `len`: a reused buffer larger than needed takes the zeroing path.
            return read_exact_zeroed(self, buf, len, pos);
        }
        buf.reserve_exact(len);
        while buf.len() < end {
            let at = pos + (buf.len() - start) as u64;
            // Into the spare capacity, which the read initialises: no zero-filling first.
            match rustix::io::pread(self, rustix::buffer::spare_capacity(buf), at) {
                Ok(0) => {
                    buf.truncate(start);
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    buf.truncate(start);
                    return Err(e.into());
                }
            }
        }
        // The allocator may have granted more capacity than reserved, and the last read
        // filled it: keep exactly `len`.
        buf.truncate(end);
        Ok(())
    }

    fn os_file(self: &Arc<Self>) -> io::Result<Option<Arc<File>>> {
        Ok(Some(self.clone()))
    }
}

/// `read_exact_at_into` by zero-filling and `read_exact_at`: the default, and the
/// fallback of implementations that do better only in some cases.
fn read_exact_zeroed<F: StorageFile + ?Sized>(file: &F, buf: &mut Vec<u8>, len: usize, pos: u64) -> io::Result<()> {
    let start = buf.len();
    buf.resize(start + len, 0);
    let read = file.read_exact_at(&mut buf[start..], pos);
    if read.is_err() {
        buf.truncate(start);
    }
    read
}

/// An in-memory disk for fault-injection tests. Each file remembers what was last
/// fsynced; [`SimStorage::crash`] returns the disk as a power loss would leave it: the
/// synced bytes plus, optionally, a torn (and possibly garbled) prefix of the rest.
///
/// A file's name is a directory entry, durable only once its directory is fsynced
/// ([`Storage::sync_dir`]), as on ext4 or XFS: a file created, renamed or deleted since
/// then may come back from a crash under its old name, or not at all, even if its bytes
/// were fsynced. [`CrashMode::LoseUnsynced`] drops every such change; the tearing modes
/// keep a seed-chosen prefix of them, in the order they were made (a journaling file
/// system commits metadata in order). Directories themselves are durable once created:
/// making a new directory's own entry durable is its creator's job (the broker fsyncs
/// the data directory after creating partition directories). Renaming or removing a
/// directory is a change of a name in its parent like any other: durable once the parent
/// is fsynced, and a removal's unlinks of the files inside come back with it in a crash
/// before that.
#[derive(Debug, Clone, Default)]
pub struct SimStorage {
    disk: Arc<Mutex<SimDisk>>,
}

#[derive(Debug, Default)]
struct SimDisk {
    /// The names as running code sees them.
    files: HashMap<PathBuf, Arc<Mutex<SimData>>>,
    /// The names a crash would leave: as of each directory's last fsync.
    durable_files: HashMap<PathBuf, Arc<Mutex<SimData>>>,
    /// Changes to names since their directory's last fsync, oldest first.
    unsynced: Vec<NameChange>,
    /// The directories as running code sees them.
    dirs: Vec<PathBuf>,
    /// The directories a crash would leave.
    durable_dirs: Vec<PathBuf>,
    faults: Arc<Mutex<SimFaults>>,
    /// With [`SimStorage::record_crash_points`]: the disk as a crash would leave it just
    /// before each fsync and each change of a name.
    crash_points: Option<Vec<SimStorage>>,
}

/// One change of a directory entry not yet made durable by a directory fsync.
#[derive(Debug, Clone)]
enum NameChange {
    Link(PathBuf, Arc<Mutex<SimData>>),
    Unlink(PathBuf),
    /// Atomic, as rename(2) is: a crash shows the file under one name or the other.
    Rename(PathBuf, PathBuf, Arc<Mutex<SimData>>),
    /// A directory renamed with everything in it; atomic too.
    RenameDir(PathBuf, PathBuf),
    /// A directory removed, after the unlinks of everything in it.
    RemoveDir(PathBuf),
}

impl NameChange {
    fn touches(&self, dir: &Path) -> bool {
        match self {
            NameChange::Link(p, _) | NameChange::Unlink(p) | NameChange::RemoveDir(p) => p.parent() == Some(dir),
            NameChange::Rename(from, to, _) | NameChange::RenameDir(from, to) => {
                from.parent() == Some(dir) || to.parent() == Some(dir)
            }
        }
    }

    /// Whether this change renames `dir` or one of its ancestors into place.
    fn renames_into(&self, dir: &Path) -> bool {
        matches!(self, NameChange::RenameDir(_, to) if dir.starts_with(to))
    }

    fn apply(&self, names: &mut HashMap<PathBuf, Arc<Mutex<SimData>>>, dirs: &mut Vec<PathBuf>) {
        match self {
            NameChange::Link(p, data) => {
                names.insert(p.clone(), data.clone());
            }
            NameChange::Unlink(p) => {
                names.remove(p);
            }
            NameChange::Rename(from, to, data) => {
                names.remove(from);
                names.insert(to.clone(), data.clone());
            }
            NameChange::RenameDir(from, to) => move_tree(names, dirs, from, to),
            NameChange::RemoveDir(dir) => {
                names.retain(|p, _| !p.starts_with(dir));
                dirs.retain(|d| !d.starts_with(dir));
            }
        }
    }
}

/// Moves every file and directory at or below `from` to the same place below `to`.
fn move_tree(names: &mut HashMap<PathBuf, Arc<Mutex<SimData>>>, dirs: &mut [PathBuf], from: &Path, to: &Path) {
    let moved = |p: &Path| p.strip_prefix(from).ok().map(|rest| to.join(rest));
    let inside: Vec<PathBuf> = names.keys().filter(|p| p.starts_with(from)).cloned().collect();
    for old in inside {
        if let (Some(data), Some(new)) = (names.remove(&old), moved(&old)) {
            names.insert(new, data);
        }
    }
    for d in dirs.iter_mut() {
        if let Some(new) = moved(d) {
            *d = new;
        }
    }
}

#[derive(Debug, Default)]
struct SimFaults {
    /// Bytes that may still be written before writes fail with `StorageFull`.
    space_left: Option<u64>,
    /// Fail every fsync with an I/O error.
    fail_sync: bool,
    /// Renames that may still succeed before every rename fails (a crash point in a
    /// sequence of renames, such as a compaction swap).
    renames_left: Option<u64>,
    /// fsyncs done (files and directories), for tests that count them.
    syncs: u64,
}

#[derive(Debug, Default, Clone)]
struct SimData {
    data: Vec<u8>,
    durable: Vec<u8>,
}

/// What a simulated crash does to the unsynced tail of each file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Everything not fsynced is lost.
    LoseUnsynced,
    /// A prefix of the unsynced bytes of `seed`-chosen length survives.
    TearUnsynced {
        /// Chooses how much survives.
        seed: u64,
    },
    /// Like `TearUnsynced`, and the last surviving bytes are overwritten with garbage.
    TearAndGarble {
        /// Chooses how much survives and the garbage.
        seed: u64,
    },
}

/// A simulated file handle.
#[derive(Debug, Clone)]
pub struct SimFile {
    data: Arc<Mutex<SimData>>,
    faults: Arc<Mutex<SimFaults>>,
    disk: Arc<Mutex<SimDisk>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test thread must not hide the disk from the rest of the test.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SimStorage {
    /// An empty disk.
    pub fn new() -> SimStorage {
        SimStorage::default()
    }

    /// Writes fail with `StorageFull` once `bytes` more have been written (the write that
    /// crosses the limit is partly applied, as on a real full disk). `None` lifts it.
    pub fn set_space_left(&self, bytes: Option<u64>) {
        let disk = lock(&self.disk);
        lock(&disk.faults).space_left = bytes;
    }

    /// Makes every fsync fail (or succeed again).
    pub fn set_fail_sync(&self, fail: bool) {
        let disk = lock(&self.disk);
        lock(&disk.faults).fail_sync = fail;
    }

    /// Renames fail with an I/O error once `n` more have succeeded; `None` lifts it.
    pub fn set_renames_left(&self, n: Option<u64>) {
        let disk = lock(&self.disk);
        lock(&disk.faults).renames_left = n;
    }

    /// The disk after a power loss at this instant, as a new independent `SimStorage`.
    pub fn crash(&self, mode: CrashMode) -> SimStorage {
        lock(&self.disk).crash_image(mode)
    }

    /// From now on, keeps the disk as a crash ([`CrashMode::LoseUnsynced`]) would leave
    /// it just before every fsync and every creation, rename or deletion of a file, so a
    /// test can check recovery from each step of a sequence of I/O.
    pub fn record_crash_points(&self) {
        lock(&self.disk).crash_points.get_or_insert_with(Vec::new);
    }

    /// The crash images recorded so far, oldest first.
    pub fn crash_points(&self) -> Vec<SimStorage> {
        lock(&self.disk).crash_points.clone().unwrap_or_default()
    }

    /// How many crash images have been recorded so far.
    pub fn crash_point_count(&self) -> usize {
        lock(&self.disk).crash_points.as_ref().map_or(0, Vec::len)
    }

    /// fsyncs (of files and of directories) done so far, for tests that count them.
    pub fn sync_count(&self) -> u64 {
        let disk = lock(&self.disk);
        let n = lock(&disk.faults).syncs;
        n
    }

    /// The names of the files directly in `dir` that a crash now would leave, sorted.
    pub fn durable_names(&self, dir: &Path) -> Vec<String> {
        let disk = lock(&self.disk);
        let mut names: Vec<String> = disk
            .durable_files
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect();
        names.sort();
        names
    }

    /// The current contents of a file, for assertions.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = lock(&self.disk);
        disk.files.get(path).map(|f| lock(f).data.clone())
    }

    /// Open handles (`SimFile`s alive) per file, for tests of descriptor bounds.
    pub fn open_handles(&self) -> Vec<(PathBuf, usize)> {
        let disk = lock(&self.disk);
        // References the disk itself holds are not handles.
        let held_by_disk = |d: &Arc<Mutex<SimData>>| {
            let durable = disk.durable_files.values().filter(|x| Arc::ptr_eq(x, d)).count();
            let journal = disk
                .unsynced
                .iter()
                .filter(|c| match c {
                    NameChange::Link(_, x) | NameChange::Rename(_, _, x) => Arc::ptr_eq(x, d),
                    NameChange::Unlink(_) | NameChange::RenameDir(..) | NameChange::RemoveDir(_) => false,
                })
                .count();
            1 + durable + journal
        };
        let mut out: Vec<_> = disk
            .files
            .iter()
            .map(|(p, d)| (p.clone(), Arc::strong_count(d) - held_by_disk(d)))
            .filter(|(_, n)| *n > 0)
            .collect();
        out.sort();
        out
    }

    /// Overwrites the contents of a file (current and durable, name included), to plant
    /// corruption.
    pub fn put(&self, path: &Path, bytes: Vec<u8>) {
        let mut disk = lock(&self.disk);
        let data = Arc::new(Mutex::new(SimData { data: bytes.clone(), durable: bytes }));
        disk.files.insert(path.to_path_buf(), data.clone());
        disk.durable_files.insert(path.to_path_buf(), data);
    }

    /// Deletes a file, name included, as something outside the broker might.
    pub fn delete_durably(&self, path: &Path) {
        let mut disk = lock(&self.disk);
        disk.files.remove(path);
        disk.durable_files.remove(path);
    }
}

impl SimDisk {
    fn crash_image(&self, mode: CrashMode) -> SimStorage {
        let mut rng = match mode {
            CrashMode::LoseUnsynced => 1,
            CrashMode::TearUnsynced { seed } | CrashMode::TearAndGarble { seed } => seed | 1,
        };
        let mut names = self.durable_files.clone();
        let mut dirs = self.durable_dirs.clone();
        if mode != CrashMode::LoseUnsynced {
            let kept = (xorshift(&mut rng) % (self.unsynced.len() as u64 + 1)) as usize;
            for change in &self.unsynced[..kept] {
                change.apply(&mut names, &mut dirs);
            }
        }
        let mut files = HashMap::new();
        let mut paths: Vec<_> = names.keys().cloned().collect();
        paths.sort();
        for path in paths {
            let file = lock(&names[&path]).clone();
            let mut survived = file.durable.clone();
            if mode != CrashMode::LoseUnsynced && file.data.len() >= survived.len() {
                let common = survived.len();
                let pending = &file.data[common..];
                let keep = (xorshift(&mut rng) % (pending.len() as u64 + 1)) as usize;
                survived.extend_from_slice(&pending[..keep]);
                if let CrashMode::TearAndGarble { .. } = mode {
                    let garble = keep.min(64);
                    let len = survived.len();
                    for byte in &mut survived[len - garble..] {
                        *byte = xorshift(&mut rng) as u8;
                    }
                }
            }
            let data = SimData { data: survived.clone(), durable: survived };
            files.insert(path, Arc::new(Mutex::new(data)));
        }
        let disk =
            SimDisk { durable_files: files.clone(), files, durable_dirs: dirs.clone(), dirs, ..Default::default() };
        SimStorage { disk: Arc::new(Mutex::new(disk)) }
    }

    /// Records a crash image if the test asked for them.
    fn crash_point(&mut self) {
        if self.crash_points.is_some() {
            let image = self.crash_image(CrashMode::LoseUnsynced);
            if let Some(points) = self.crash_points.as_mut() {
                points.push(image);
            }
        }
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

impl Storage for SimStorage {
    type File = SimFile;

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        let SimDisk { dirs, durable_dirs, .. } = &mut *disk;
        for d in dir.ancestors().filter(|d| !d.as_os_str().is_empty()) {
            for known in [&mut *dirs, &mut *durable_dirs] {
                if !known.iter().any(|k| k == d) {
                    known.push(d.to_path_buf());
                }
            }
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let disk = lock(&self.disk);
        if !disk.dirs.iter().any(|d| d == dir) {
            return Err(io::ErrorKind::NotFound.into());
        }
        let files = disk.files.keys().filter(|p| p.parent() == Some(dir));
        let subdirs = disk.dirs.iter().filter(|d| d.parent() == Some(dir));
        Ok(files.chain(subdirs).filter_map(|p| p.file_name()?.to_str().map(str::to_string)).collect())
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<SimFile> {
        let mut disk = lock(&self.disk);
        let faults = disk.faults.clone();
        let data = match disk.files.get(path) {
            Some(d) => d.clone(),
            None if create => {
                disk.crash_point();
                let d = Arc::new(Mutex::new(SimData::default()));
                disk.files.insert(path.to_path_buf(), d.clone());
                disk.unsynced.push(NameChange::Link(path.to_path_buf(), d.clone()));
                d
            }
            None => return Err(io::ErrorKind::NotFound.into()),
        };
        Ok(SimFile { data, faults, disk: self.disk.clone() })
    }

    fn exists(&self, path: &Path) -> bool {
        let disk = lock(&self.disk);
        disk.files.contains_key(path) || disk.dirs.iter().any(|d| d == path)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        if disk.files.contains_key(path) {
            disk.crash_point();
        }
        match disk.files.remove(path) {
            Some(_) => {
                disk.unsynced.push(NameChange::Unlink(path.to_path_buf()));
                Ok(())
            }
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        if let Some(left) = &mut lock(&disk.faults).renames_left {
            if *left == 0 {
                return Err(io::Error::other("injected rename failure"));
            }
            *left -= 1;
        }
        if disk.files.contains_key(from) {
            disk.crash_point();
        }
        let data = disk.files.remove(from).ok_or(io::ErrorKind::NotFound)?;
        disk.files.insert(to.to_path_buf(), data.clone());
        disk.unsynced.push(NameChange::Rename(from.to_path_buf(), to.to_path_buf(), data));
        Ok(())
    }

    fn rename_dir(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        if !disk.dirs.iter().any(|d| d == from) {
            return Err(io::ErrorKind::NotFound.into());
        }
        if disk.dirs.iter().any(|d| d == to) || disk.files.contains_key(to) {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        disk.crash_point();
        let SimDisk { files, dirs, unsynced, .. } = &mut *disk;
        move_tree(files, dirs, from, to);
        unsynced.push(NameChange::RenameDir(from.to_path_buf(), to.to_path_buf()));
        Ok(())
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        if !disk.dirs.iter().any(|d| d == dir) {
            return Err(io::ErrorKind::NotFound.into());
        }
        let mut inside: Vec<PathBuf> = disk.files.keys().filter(|p| p.starts_with(dir)).cloned().collect();
        inside.sort();
        for path in inside {
            disk.crash_point();
            disk.files.remove(&path);
            disk.unsynced.push(NameChange::Unlink(path));
        }
        disk.crash_point();
        disk.dirs.retain(|d| !d.starts_with(dir));
        disk.unsynced.push(NameChange::RemoveDir(dir.to_path_buf()));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        disk.crash_point();
        {
            let mut faults = lock(&disk.faults);
            if faults.fail_sync {
                return Err(io::Error::other("simulated directory fsync failure"));
            }
            faults.syncs += 1;
        }
        let SimDisk { files, durable_files, unsynced, durable_dirs, .. } = &mut *disk;
        // A journaling file system commits in order: fsyncing a directory that was
        // renamed into place commits that rename, and everything before it, too.
        if let Some(last) = unsynced.iter().rposition(|c| c.renames_into(dir)) {
            for change in unsynced.drain(..=last) {
                change.apply(durable_files, durable_dirs);
            }
        }
        // The directory's entries as they are now become durable, and only they: a
        // change that also touched another directory (a rename between two) is durable
        // on this side only, but a directory renamed or removed moves with what is in it.
        for change in unsynced.iter().filter(|c| c.touches(dir)) {
            if let NameChange::RenameDir(..) | NameChange::RemoveDir(_) = change {
                change.apply(durable_files, durable_dirs);
            }
        }
        durable_files.retain(|p, _| p.parent() != Some(dir));
        for (p, data) in files.iter().filter(|(p, _)| p.parent() == Some(dir)) {
            durable_files.insert(p.clone(), data.clone());
        }
        unsynced.retain(|change| !change.touches(dir));
        Ok(())
    }
}

impl StorageFile for SimFile {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let file = lock(&self.data);
        let start = (pos as usize).min(file.data.len());
        let n = buf.len().min(file.data.len() - start);
        buf[..n].copy_from_slice(&file.data[start..start + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        let mut faults = lock(&self.faults);
        let (n, full) = match faults.space_left {
            Some(left) if (buf.len() as u64) > left => (left as usize, true),
            _ => (buf.len(), false),
        };
        if let Some(left) = faults.space_left.as_mut() {
            *left -= n as u64;
        }
        drop(faults);
        let mut file = lock(&self.data);
        let pos = pos as usize;
        if file.data.len() < pos + n {
            file.data.resize(pos + n, 0);
        }
        file.data[pos..pos + n].copy_from_slice(&buf[..n]);
        if full {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "simulated disk full"));
        }
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(lock(&self.data).data.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut file = lock(&self.data);
        file.data.resize(len as usize, 0);
        if file.durable.len() > len as usize {
            file.durable.truncate(len as usize);
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        // The disk lock first, as everywhere (it orders before a file's lock).
        lock(&self.disk).crash_point();
        {
            let mut faults = lock(&self.faults);
            if faults.fail_sync {
                return Err(io::Error::other("simulated fsync failure"));
            }
            faults.syncs += 1;
        }
        let mut file = lock(&self.data);
        file.durable = file.data.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_keeps_synced_bytes_and_drops_unsynced_ones() {
        let disk = SimStorage::new();
        let dir = Path::new("/d");
        disk.create_dir_all(dir).unwrap();
        let f = disk.open(&dir.join("a"), true).unwrap();
        f.write_all_at(b"hello", 0).unwrap();
        f.sync_data().unwrap();
        disk.sync_dir(dir).unwrap();
        f.write_all_at(b" world", 5).unwrap();
        let after = disk.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.contents(&dir.join("a")).unwrap(), b"hello");
        let torn = disk.crash(CrashMode::TearUnsynced { seed: 3 }).contents(&dir.join("a")).unwrap();
        assert!(torn.starts_with(b"hello") && torn.len() <= 11);
    }

    #[test]
    fn names_changed_since_the_directory_fsync_are_lost_in_a_crash() {
        let disk = SimStorage::new();
        let dir = Path::new("/d");
        disk.create_dir_all(dir).unwrap();
        let old = disk.open(&dir.join("old"), true).unwrap();
        old.write_all_at(b"1", 0).unwrap();
        old.sync_data().unwrap();
        disk.sync_dir(dir).unwrap();
        let new = disk.open(&dir.join("new"), true).unwrap();
        new.write_all_at(b"2", 0).unwrap();
        new.sync_data().unwrap();
        disk.rename(&dir.join("old"), &dir.join("renamed")).unwrap();
        let lost = disk.crash(CrashMode::LoseUnsynced);
        assert_eq!(lost.list(dir).unwrap(), vec!["old".to_string()], "fsynced data, unsynced names");
        assert_eq!(lost.contents(&dir.join("old")).unwrap(), b"1");
        disk.sync_dir(dir).unwrap();
        let mut kept = disk.crash(CrashMode::LoseUnsynced).list(dir).unwrap();
        kept.sort();
        assert_eq!(kept, vec!["new".to_string(), "renamed".to_string()]);
    }

    #[test]
    fn a_torn_crash_keeps_a_prefix_of_the_unsynced_name_changes() {
        let disk = SimStorage::new();
        let dir = Path::new("/d");
        disk.create_dir_all(dir).unwrap();
        for name in ["a", "b", "c"] {
            disk.open(&dir.join(name), true).unwrap();
        }
        for seed in 1..40 {
            let mut names = disk.crash(CrashMode::TearUnsynced { seed }).list(dir).unwrap();
            names.sort();
            let prefixes: [&[&str]; 4] = [&[], &["a"], &["a", "b"], &["a", "b", "c"]];
            assert!(prefixes.iter().any(|p| names == *p), "seed {seed}: {names:?} is not a prefix");
        }
    }

    #[test]
    fn a_directory_rename_or_removal_is_durable_once_its_parent_is_fsynced() {
        let disk = SimStorage::new();
        let (data, dir) = (Path::new("/data"), Path::new("/data/t-0"));
        disk.create_dir_all(dir).unwrap();
        let f = disk.open(&dir.join("a"), true).unwrap();
        f.write_all_at(b"1", 0).unwrap();
        f.sync_data().unwrap();
        disk.sync_dir(dir).unwrap();
        let gone = Path::new("/data/t-0.x-delete");
        disk.rename_dir(dir, gone).unwrap();
        assert_eq!(disk.list(data).unwrap(), vec!["t-0.x-delete".to_string()]);
        let lost = disk.crash(CrashMode::LoseUnsynced);
        assert_eq!(lost.list(data).unwrap(), vec!["t-0".to_string()], "the rename was not fsynced");
        assert_eq!(lost.contents(&dir.join("a")).unwrap(), b"1");
        disk.sync_dir(data).unwrap();
        let kept = disk.crash(CrashMode::LoseUnsynced);
        assert_eq!(kept.list(data).unwrap(), vec!["t-0.x-delete".to_string()]);
        assert_eq!(kept.contents(&gone.join("a")).unwrap(), b"1");

        disk.remove_dir_all(gone).unwrap();
        assert!(!disk.exists(gone) && disk.list(data).unwrap().is_empty());
        let lost = disk.crash(CrashMode::LoseUnsynced);
        assert_eq!(lost.contents(&gone.join("a")).unwrap(), b"1", "the removal was not fsynced");
        disk.sync_dir(data).unwrap();
        assert!(disk.crash(CrashMode::LoseUnsynced).list(data).unwrap().is_empty());
    }

    /// A file holding `0123456789`, read through `read_exact_at_into`.
    fn check_read_exact_at_into(file: &impl StorageFile) {
        file.write_all_at(b"0123456789", 0).unwrap();
        let mut buf = b"ab".to_vec();
        file.read_exact_at_into(&mut buf, 4, 3).unwrap();
        assert_eq!(buf, b"ab3456", "appended after what the buffer held");
        let err = file.read_exact_at_into(&mut buf, 5, 8).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(buf, b"ab3456", "a failed read leaves the buffer as it was");
        file.read_exact_at_into(&mut buf, 0, 10).unwrap();
        assert_eq!(buf, b"ab3456");
        // More spare capacity than asked for: still exactly `len` bytes.
        let mut roomy = Vec::with_capacity(64);
        file.read_exact_at_into(&mut roomy, 3, 7).unwrap();
        assert_eq!(roomy, b"789");
        let mut exact = Vec::new();
        file.read_exact_at_into(&mut exact, 10, 0).unwrap();
        assert_eq!((exact.as_slice(), exact.capacity()), (&b"0123456789"[..], 10), "no more reserved than needed");
    }

    #[test]
    fn read_exact_at_into_appends_exactly_len_bytes_and_fails_past_the_end() {
        check_read_exact_at_into(&SimStorage::new().open(Path::new("/x"), true).unwrap());
        let path = std::env::temp_dir().join(format!("osprey-storage-read-into-{}", std::process::id()));
        check_read_exact_at_into(&StdStorage.open(&path, true).unwrap());
        std::fs::remove_file(&path).unwrap();
    }

    /// Pieces written from 5 in a file holding 5 bytes: empty ones, and more than one
    /// `pwritev` takes.
    fn check_write_all_vectored_at(file: &impl StorageFile) {
        file.write_all_at(b"01234", 0).unwrap();
        let bytes: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let mut pieces: Vec<&[u8]> = vec![b"", b"abc", b""];
        pieces.extend(bytes.chunks(2));
        pieces.push(b"");
        assert!(pieces.len() > MAX_IO_SLICES);
        file.write_all_vectored_at(&pieces, 5).unwrap();
        let mut read = Vec::new();
        file.read_exact_at_into(&mut read, 5 + 3 + bytes.len(), 0).unwrap();
        assert_eq!(read, [&b"01234abc"[..], &bytes].concat());
        assert_eq!(file.len().unwrap(), read.len() as u64);
    }

    #[test]
    fn write_all_vectored_at_writes_the_pieces_one_after_another() {
        check_write_all_vectored_at(&SimStorage::new().open(Path::new("/x"), true).unwrap());
        let path = std::env::temp_dir().join(format!("osprey-storage-write-vectored-{}", std::process::id()));
        check_write_all_vectored_at(&StdStorage.open(&path, true).unwrap());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn only_real_files_have_an_os_file() {
        let sim = Arc::new(SimStorage::new().open(Path::new("/x"), true).unwrap());
        assert!(sim.os_file().unwrap().is_none());
        let path = std::env::temp_dir().join(format!("osprey-storage-os-file-{}", std::process::id()));
        let real = Arc::new(StdStorage.open(&path, true).unwrap());
        assert!(Arc::ptr_eq(&real.os_file().unwrap().unwrap(), &real));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn full_disk_applies_part_of_the_write_then_fails() {
        let disk = SimStorage::new();
        let f = disk.open(Path::new("/x"), true).unwrap();
        disk.set_space_left(Some(3));
        let err = f.write_all_at(b"abcdef", 0).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert_eq!(f.len().unwrap(), 3);
    }
}
