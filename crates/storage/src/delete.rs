//! Crash-safe removal of partition directories, as Kafka's `LogManager.asyncDelete`.
//!
//! Removing a directory file by file is not atomic: a crash part-way would leave a
//! partition directory under its own name with some of its files gone (its
//! `partition.metadata`, say), which the next start could load, or a topic re-created
//! with the same name adopt. So a deleted partition's directory is first renamed to
//! `<topic>-<partition>.<unique id>-delete` (Kafka's name) and the data directory
//! fsynced, which is atomic and durable: from then on a crash shows it gone from its own
//! name. Only then are its files removed ([`remove`], in the background). At start-up
//! the directories with the `-delete` suffix ([`pending`]) are removed, never loaded.

use std::path::{Path, PathBuf};

use crate::error::{Result, StorageError};
use crate::fs::Storage;

/// The suffix of a directory being deleted (Kafka's `UnifiedLog.DeleteDirSuffix`).
pub const DELETE_DIR_SUFFIX: &str = "-delete";

/// The longest directory name most file systems take, which Kafka caps the name at.
const MAX_DIR_NAME_BYTES: usize = 255;

/// Whether a directory name is that of a directory being deleted.
pub fn is_delete_dir(name: &str) -> bool {
    name.ends_with(DELETE_DIR_SUFFIX)
}

/// The name `dir_name` (`<topic>-<partition>`) takes while it is deleted:
/// `<topic>-<partition>.<unique_id>-delete`, the topic cut short so that the name fits in
/// 255 bytes (Kafka's `logDirNameWithSuffixCappedLength`).
pub fn delete_dir_name(dir_name: &str, unique_id: &str) -> String {
    let suffix = format!(".{unique_id}{DELETE_DIR_SUFFIX}");
    // The partition number stays whole; the topic gives way (on a char boundary).
    let (topic, partition) = dir_name.rsplit_once('-').unwrap_or((dir_name, ""));
    let tail = format!("-{partition}{suffix}");
    let mut keep = topic.len().min(MAX_DIR_NAME_BYTES.saturating_sub(tail.len()));
    while !topic.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{tail}", &topic[..keep])
}

/// Renames each of `dirs` (directories directly in `data_dir`) to its delete name, with
/// ids from `unique_id`, then fsyncs `data_dir` once for all of them. Returns the new
/// paths, to [`remove`]. A directory that cannot be renamed is logged and left under its
/// name. An error means the fsync failed: the renames may not be durable, so the caller
/// must not remove anything in them now (the next start finds them under one name or
/// the other, and removes them either way).
pub fn rename_for_delete<S: Storage>(
    storage: &S,
    data_dir: &Path,
    dirs: &[PathBuf],
    unique_id: &mut dyn FnMut() -> String,
) -> Result<Vec<PathBuf>> {
    let mut renamed = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let Some(name) = dir.file_name().and_then(|n| n.to_str()) else { continue };
        let to = data_dir.join(delete_dir_name(name, &unique_id()));
        match storage.rename_dir(dir, &to) {
            Ok(()) => renamed.push(to),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "could not rename a deleted partition's directory")
            }
        }
    }
    if !renamed.is_empty() {
        storage.sync_dir(data_dir).map_err(|e| StorageError::io("fsync dir", data_dir, e))?;
    }
    Ok(renamed)
}

/// Removes a directory [`rename_for_delete`] renamed (or [`pending`] found) and
/// everything in it. A crash part-way leaves the rest under the delete name, for the
/// next start.
pub fn remove<S: Storage>(storage: &S, dir: &Path) -> Result<()> {
    debug_assert!(dir.file_name().and_then(|n| n.to_str()).is_some_and(is_delete_dir), "{}", dir.display());
    storage.remove_dir_all(dir).map_err(|e| StorageError::io("remove", dir, e))
}

/// The directories in `data_dir` that an interrupted delete left: to [`remove`], never
/// to load.
pub fn pending<S: Storage>(storage: &S, data_dir: &Path) -> Result<Vec<PathBuf>> {
    let names = storage.list(data_dir).map_err(|e| StorageError::io("list", data_dir, e))?;
    let mut dirs: Vec<PathBuf> = names.iter().filter(|n| is_delete_dir(n)).map(|n| data_dir.join(n)).collect();
    dirs.sort();
    Ok(dirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_delete_name_is_kafkas() {
        assert_eq!(delete_dir_name("orders-3", ID), format!("orders-3.{ID}-delete"));
        assert_eq!(delete_dir_name("a.b-c-12", ID), format!("a.b-c-12.{ID}-delete"));
        assert!(is_delete_dir(&delete_dir_name("orders-3", ID)));
        assert!(!is_delete_dir("orders-3"));
    }

    #[test]
    fn a_long_topic_is_cut_so_the_delete_name_fits_in_255_bytes() {
        let topic = "t".repeat(249);
        let name = delete_dir_name(&format!("{topic}-1234"), ID);
        assert_eq!(name.len(), MAX_DIR_NAME_BYTES);
        assert!(name.ends_with(&format!("-1234.{ID}-delete")), "{name}");
        // A multi-byte character is never split.
        let topic = "é".repeat(124);
        let name = delete_dir_name(&format!("{topic}-7"), ID);
        assert!(name.len() <= MAX_DIR_NAME_BYTES && name.ends_with("-delete"), "{name}");
    }
}
