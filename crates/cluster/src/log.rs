//! The durable log of metadata records: one file of frames `len u32 | crc32c u32 | json`,
//! appended and fsynced before the records are applied.
//!
//! On open, frames are replayed until the first one that is short or fails its CRC (a
//! write torn by a crash); the file is cut there, since nothing after it was ever
//! acknowledged to an admin client.
//!
//! A failed write or fsync cuts the file back to its last durable length, so a restart
//! does not replay records the admin client was told had failed, and the log refuses
//! every later append until the process restarts: after a failed fsync the kernel may
//! have dropped the dirty pages, so nothing written since can be trusted (Kafka's
//! controller stops on a metadata log write failure).

use crate::image::MetadataRecord;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A metadata record larger than this is corruption, not a record.
const MAX_RECORD_BYTES: u32 = 16 * 1024 * 1024;

#[derive(Debug)]
pub struct MetadataLog<F: MetadataFile = File> {
    path: PathBuf,
    file: F,
    /// Bytes of the file that are intact and durable.
    durable_len: u64,
    /// Why appends are refused: an earlier write or fsync failed.
    failed: Option<String>,
}

/// What the log needs of its file: a trait, so that tests can fail writes and fsyncs.
pub trait MetadataFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    fn sync_data(&mut self) -> io::Result<()>;
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

impl MetadataFile for File {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        Write::write_all(self, buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }
}

impl MetadataLog {
    /// Opens (creating) the log at `path` and returns it with every intact record.
    pub fn open(path: &Path) -> io::Result<(MetadataLog, Vec<MetadataRecord>)> {
        let mut file = OpenOptions::new().read(true).append(true).create(true).open(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let (records, valid_len) = replay(&bytes);
        if valid_len < bytes.len() {
            tracing::warn!(
                file = %path.display(),
                position = valid_len,
                dropped_bytes = bytes.len() - valid_len,
                "metadata log ends in a torn or corrupt record; cutting it off"
            );
            file.set_len(valid_len as u64)?;
            file.sync_all()?;
        }
        file.seek(SeekFrom::End(0))?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok((MetadataLog::with_file(path, file, valid_len as u64), records))
    }
}

impl<F: MetadataFile> MetadataLog<F> {
    /// A log over `file`, whose first `durable_len` bytes are intact and durable.
    pub fn with_file(path: &Path, file: F, durable_len: u64) -> MetadataLog<F> {
        MetadataLog { path: path.to_path_buf(), file, durable_len, failed: None }
    }

    /// Appends records and fsyncs them; returns only once they are durable. After a
    /// failure, the records are cut off again and every later append is refused.
    pub fn append(&mut self, records: &[MetadataRecord]) -> io::Result<()> {
        if let Some(reason) = &self.failed {
            return Err(io::Error::other(format!(
                "metadata log refuses writes since an earlier failure ({reason}); restart the broker"
            )));
        }
        let mut buf = Vec::new();
        for r in records {
            let json = serde_json::to_vec(r).map_err(io::Error::other)?;
            buf.extend_from_slice(&(json.len() as u32).to_be_bytes());
            buf.extend_from_slice(&crc32c::crc32c(&json).to_be_bytes());
            buf.extend_from_slice(&json);
        }
        let written = self.file.write_all(&buf).and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            self.failed = Some(e.to_string());
            let cut = self.file.set_len(self.durable_len).and_then(|()| self.file.sync_data());
            if let Err(cut_error) = cut {
                tracing::error!(
                    file = %self.path.display(),
                    error = %cut_error,
                    "cannot cut a failed metadata write off: it may reappear after a restart"
                );
            }
            return Err(e);
        }
        self.durable_len += buf.len() as u64;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The records of the intact prefix of `bytes`, and that prefix's length.
fn replay(bytes: &[u8]) -> (Vec<MetadataRecord>, usize) {
    let mut records = Vec::new();
    let mut pos = 0;
    while bytes.len() - pos >= 8 {
        let len = u32::from_be_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]]);
        let crc = u32::from_be_bytes([bytes[pos + 4], bytes[pos + 5], bytes[pos + 6], bytes[pos + 7]]);
        if len > MAX_RECORD_BYTES || bytes.len() - pos - 8 < len as usize {
            break;
        }
        let body = &bytes[pos + 8..pos + 8 + len as usize];
        if crc32c::crc32c(body) != crc {
            break;
        }
        match serde_json::from_slice(body) {
            Ok(r) => records.push(r),
            Err(e) => {
                tracing::warn!(position = pos, error = %e, "metadata record with a valid CRC does not parse");
                break;
            }
        }
        pos += 8 + len as usize;
    }
    (records, pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn record(i: u8) -> MetadataRecord {
        MetadataRecord::CreateTopic {
            name: format!("t{i}"),
            id: [i; 16],
            replicas: vec![vec![1]],
            configs: BTreeMap::new(),
            isrs: None,
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("osprey-cluster-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn appended_records_replay_after_reopen() {
        let dir = temp_dir("replay");
        let path = dir.join("metadata.log");
        let (mut log, records) = MetadataLog::open(&path).unwrap();
        assert!(records.is_empty());
        log.append(&[record(1), record(2)]).unwrap();
        log.append(&[record(3)]).unwrap();
        drop(log);
        let (_, records) = MetadataLog::open(&path).unwrap();
        assert_eq!(records, vec![record(1), record(2), record(3)]);
    }

    #[test]
    fn torn_tail_is_cut_and_later_appends_replay() {
        let dir = temp_dir("torn");
        let path = dir.join("metadata.log");
        let (mut log, _) = MetadataLog::open(&path).unwrap();
        log.append(&[record(1), record(2)]).unwrap();
        drop(log);
        let full = std::fs::metadata(&path).unwrap().len();
        for cut in [full - 1, full - 5, full - 20] {
            let f = OpenOptions::new().write(true).open(&path).unwrap();
            f.set_len(cut).unwrap();
            drop(f);
            let (mut log, records) = MetadataLog::open(&path).unwrap();
            assert_eq!(records, vec![record(1)], "cut at {cut}");
            log.append(&[record(2)]).unwrap();
        }
        let (_, records) = MetadataLog::open(&path).unwrap();
        assert_eq!(records, vec![record(1), record(2)]);
    }

    /// A file in memory whose fsync can fail; what was written stays in it, as the page
    /// cache keeps it after a failed fsync and may still write it out.
    #[derive(Debug, Default)]
    struct FlakyFile {
        bytes: Vec<u8>,
        fail_sync: bool,
    }

    impl MetadataFile for &mut FlakyFile {
        fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
            self.bytes.extend_from_slice(buf);
            Ok(())
        }
        fn sync_data(&mut self) -> io::Result<()> {
            if self.fail_sync {
                return Err(io::Error::other("injected fsync failure"));
            }
            Ok(())
        }
        fn set_len(&mut self, len: u64) -> io::Result<()> {
            self.bytes.truncate(len as usize);
            Ok(())
        }
    }

    #[test]
    fn a_failed_fsync_cuts_the_records_off_and_refuses_later_appends() {
        let mut file = FlakyFile::default();
        let mut log = MetadataLog::with_file(Path::new("metadata.log"), &mut file, 0);
        log.append(&[record(1)]).unwrap();
        log.file.fail_sync = true;
        assert!(log.append(&[record(2)]).is_err(), "the fsync failed");
        log.file.fail_sync = false;
        assert!(log.append(&[record(3)]).is_err(), "no append after a failed fsync");
        drop(log);
        // A restart replays what the file holds: the client was told record 2 failed,
        // and record 3 was refused.
        assert_eq!(replay(&file.bytes).0, vec![record(1)]);
    }

    #[test]
    fn corrupt_byte_stops_replay_there() {
        let dir = temp_dir("corrupt");
        let path = dir.join("metadata.log");
        let (mut log, _) = MetadataLog::open(&path).unwrap();
        log.append(&[record(1), record(2)]).unwrap();
        drop(log);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let (_, records) = MetadataLog::open(&path).unwrap();
        assert_eq!(records, vec![record(1)]);
    }
}
