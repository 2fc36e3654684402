//! Small text checkpoint files (Kafka's format: version line, count line, entries),
//! replaced atomically: write a temp file, fsync it, rename over, fsync the directory.

use std::path::Path;

use crate::error::{Result, StorageError};
use crate::fs::{Storage, StorageFile};

/// Largest checkpoint file read; a bigger one is treated as corrupt, not allocated.
const MAX_CHECKPOINT_BYTES: u64 = 1 << 20;

/// Atomically replaces `dir/name` with `lines` under Kafka's `0\n<count>\n` header.
pub(crate) fn write<S: Storage>(storage: &S, dir: &Path, name: &str, lines: &[String]) -> Result<()> {
    let mut text = format!("0\n{}\n", lines.len());
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    write_bytes(storage, dir, name, text.as_bytes())
}

/// Atomically replaces `dir/name` with `bytes` (temp file, fsync, rename, dir fsync).
pub(crate) fn write_bytes<S: Storage>(storage: &S, dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let file = storage.open(&tmp, true).map_err(|e| StorageError::io("create", &tmp, e))?;
    file.set_len(0).map_err(|e| StorageError::io("truncate", &tmp, e))?;
    file.write_all_at(bytes, 0).map_err(|e| StorageError::io("write", &tmp, e))?;
    file.sync_data().map_err(|e| StorageError::io("fsync", &tmp, e))?;
    storage.rename(&tmp, &path).map_err(|e| StorageError::io("rename", &path, e))?;
    storage.sync_dir(dir).map_err(|e| StorageError::io("fsync dir", dir, e))
}

/// Reads the entry lines of `dir/name`; `None` if it is missing or malformed (callers
/// then rebuild the state from the log, so a bad checkpoint is never fatal).
pub(crate) fn read<S: Storage>(storage: &S, dir: &Path, name: &str) -> Option<Vec<String>> {
    let path = dir.join(name);
    let file = storage.open(&path, false).ok()?;
    let len = file.len().ok()?;
    if len > MAX_CHECKPOINT_BYTES {
        tracing::warn!(file = %path.display(), len, "checkpoint too large; ignoring it");
        return None;
    }
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, 0).ok()?;
    let text = String::from_utf8(buf).ok()?;
    let mut lines = text.lines();
    if lines.next()? != "0" {
        return None;
    }
    let count: usize = lines.next()?.trim().parse().ok()?;
    let entries: Vec<String> = lines.map(str::to_string).collect();
    if entries.len() != count {
        tracing::warn!(file = %path.display(), "checkpoint entry count mismatch; ignoring it");
        return None;
    }
    Some(entries)
}

/// Reads a checkpoint holding a single i64.
pub(crate) fn read_i64<S: Storage>(storage: &S, dir: &Path, name: &str) -> Option<i64> {
    let lines = read(storage, dir, name)?;
    lines.first()?.trim().parse().ok()
}
