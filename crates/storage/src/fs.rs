//! The log's view of the disk: a small trait so tests can swap in a simulated disk that
//! tears unsynced writes at a crash, runs out of space, or fails fsync.

use std::collections::HashMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
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
    /// Names of the files directly in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens `path` for reading and writing, creating it if `create`.
    fn open(&self, path: &Path, create: bool) -> io::Result<Self::File>;
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// Deletes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
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
}

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

    fn len(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }

    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }
}

/// An in-memory disk for fault-injection tests. Each file remembers what was last
/// fsynced; [`SimStorage::crash`] returns the disk as a power loss would leave it: the
/// synced bytes plus, optionally, a torn (and possibly garbled) prefix of the rest.
/// Directory operations are treated as immediately durable.
#[derive(Debug, Clone, Default)]
pub struct SimStorage {
    disk: Arc<Mutex<SimDisk>>,
}

#[derive(Debug, Default)]
struct SimDisk {
    files: HashMap<PathBuf, Arc<Mutex<SimData>>>,
    dirs: Vec<PathBuf>,
    faults: Arc<Mutex<SimFaults>>,
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
        let disk = lock(&self.disk);
        let mut files = HashMap::new();
        let mut rng = match mode {
            CrashMode::LoseUnsynced => 1,
            CrashMode::TearUnsynced { seed } | CrashMode::TearAndGarble { seed } => seed | 1,
        };
        let mut paths: Vec<_> = disk.files.keys().cloned().collect();
        paths.sort();
        for path in paths {
            let file = lock(&disk.files[&path]).clone();
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
        let dirs = disk.dirs.clone();
        SimStorage { disk: Arc::new(Mutex::new(SimDisk { files, dirs, faults: Default::default() })) }
    }

    /// The current contents of a file, for assertions.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = lock(&self.disk);
        disk.files.get(path).map(|f| lock(f).data.clone())
    }

    /// Open handles (`SimFile`s alive) per file, for tests of descriptor bounds.
    pub fn open_handles(&self) -> Vec<(PathBuf, usize)> {
        let disk = lock(&self.disk);
        let mut out: Vec<_> =
            disk.files.iter().map(|(p, d)| (p.clone(), Arc::strong_count(d) - 1)).filter(|(_, n)| *n > 0).collect();
        out.sort();
        out
    }

    /// Overwrites the contents of a file (current and durable), to plant corruption.
    pub fn put(&self, path: &Path, bytes: Vec<u8>) {
        let mut disk = lock(&self.disk);
        let data = SimData { data: bytes.clone(), durable: bytes };
        disk.files.insert(path.to_path_buf(), Arc::new(Mutex::new(data)));
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
        if !disk.dirs.iter().any(|d| d == dir) {
            disk.dirs.push(dir.to_path_buf());
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let disk = lock(&self.disk);
        if !disk.dirs.iter().any(|d| d == dir) {
            return Err(io::ErrorKind::NotFound.into());
        }
        Ok(disk
            .files
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect())
    }

    fn open(&self, path: &Path, create: bool) -> io::Result<SimFile> {
        let mut disk = lock(&self.disk);
        let faults = disk.faults.clone();
        let data = match disk.files.get(path) {
            Some(d) => d.clone(),
            None if create => {
                let d = Arc::new(Mutex::new(SimData::default()));
                disk.files.insert(path.to_path_buf(), d.clone());
                d
            }
            None => return Err(io::ErrorKind::NotFound.into()),
        };
        Ok(SimFile { data, faults })
    }

    fn exists(&self, path: &Path) -> bool {
        lock(&self.disk).files.contains_key(path)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        match lock(&self.disk).files.remove(path) {
            Some(_) => Ok(()),
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
        let data = disk.files.remove(from).ok_or(io::ErrorKind::NotFound)?;
        disk.files.insert(to.to_path_buf(), data);
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
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
        if lock(&self.faults).fail_sync {
            return Err(io::Error::other("simulated fsync failure"));
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
        f.write_all_at(b" world", 5).unwrap();
        let after = disk.crash(CrashMode::LoseUnsynced);
        assert_eq!(after.contents(&dir.join("a")).unwrap(), b"hello");
        let torn = disk.crash(CrashMode::TearUnsynced { seed: 3 }).contents(&dir.join("a")).unwrap();
        assert!(torn.starts_with(b"hello") && torn.len() <= 11);
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
