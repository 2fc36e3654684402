//! The data directory's clean-shutdown marker (Kafka's `.kafka_cleanshutdown`, one per
//! log directory, written by `LogManager` once every log in it closed).
//!
//! One marker and one directory fsync per data directory, not per partition, so that
//! shutdown and start-up cost no fsync for a partition that did not change. The broker
//! [`take`]s the marker before it writes anything at start-up (a crash from then on is
//! unclean), opens every log with [`PriorShutdown::Clean`](crate::log::PriorShutdown)
//! when it was there, and [`write`]s it at shutdown only when every log closed.

use std::path::Path;

use crate::error::{Result, StorageError};
use crate::fs::{Storage, StorageFile};
use crate::log::CLEAN_SHUTDOWN_FILE;

/// A clean-shutdown marker's content: the broker epoch the node had when it stopped, in
/// a cluster (Kafka's `{"version":0,"brokerEpoch":N}`). The broker registers with it as
/// its previous broker epoch, so the controller knows the stop was clean (KIP-966: a
/// replica that stopped uncleanly may have lost what it acknowledged, and leaves the
/// eligible leader replicas).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanShutdown {
    pub broker_epoch: Option<i64>,
}

/// Whether `data_dir` holds a clean-shutdown marker (and what it says); if so, removes
/// it durably, so that a crash after this call is seen as unclean at the next start. A
/// marker whose content is not readable (an older, empty one) still means clean, with no
/// broker epoch.
pub fn take<S: Storage>(storage: &S, data_dir: &Path) -> Result<Option<CleanShutdown>> {
    let marker = data_dir.join(CLEAN_SHUTDOWN_FILE);
    if !storage.exists(&marker) {
        return Ok(None);
    }
    let broker_epoch = read_broker_epoch(storage, &marker);
    storage.remove(&marker).map_err(|e| StorageError::io("remove", &marker, e))?;
    storage.sync_dir(data_dir).map_err(|e| StorageError::io("fsync dir", data_dir, e))?;
    Ok(Some(CleanShutdown { broker_epoch }))
}

/// Marks `data_dir` clean: every log in it was closed with
/// [`close_unmarked`](crate::PartitionLog::close_unmarked) and nothing else is open.
/// `broker_epoch` is the node's in a cluster. Durable on return.
pub fn write<S: Storage>(storage: &S, data_dir: &Path, broker_epoch: Option<i64>) -> Result<()> {
    let marker = data_dir.join(CLEAN_SHUTDOWN_FILE);
    let file = storage.open(&marker, true).map_err(|e| StorageError::io("create", &marker, e))?;
    if let Some(epoch) = broker_epoch {
        let content = format!("{{\"version\":0,\"brokerEpoch\":{epoch}}}");
        file.write_all_at(content.as_bytes(), 0).map_err(|e| StorageError::io("write", &marker, e))?;
        file.set_len(content.len() as u64).map_err(|e| StorageError::io("truncate", &marker, e))?;
        file.sync_data().map_err(|e| StorageError::io("fsync", &marker, e))?;
    }
    storage.sync_dir(data_dir).map_err(|e| StorageError::io("fsync dir", data_dir, e))
}

/// The `brokerEpoch` of a marker, if it has a readable one.
fn read_broker_epoch<S: Storage>(storage: &S, marker: &Path) -> Option<i64> {
    let file = storage.open(marker, false).ok()?;
    let len = file.len().ok()?.min(256) as usize;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0).ok()?;
    let text = std::str::from_utf8(&buf).ok()?;
    let after = text.split("\"brokerEpoch\":").nth(1)?;
    let digits: String = after.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '-').collect();
    digits.parse().ok().filter(|e: &i64| *e >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::SimStorage;

    #[test]
    fn the_marker_keeps_the_broker_epoch_and_is_taken_once() {
        let storage = SimStorage::new();
        let dir = Path::new("/data");
        storage.create_dir_all(dir).unwrap();
        assert_eq!(take(&storage, dir).unwrap(), None, "no marker: unclean");
        write(&storage, dir, Some(42)).unwrap();
        assert_eq!(take(&storage, dir).unwrap(), Some(CleanShutdown { broker_epoch: Some(42) }));
        assert_eq!(take(&storage, dir).unwrap(), None, "taken");
        write(&storage, dir, None).unwrap();
        assert_eq!(take(&storage, dir).unwrap(), Some(CleanShutdown { broker_epoch: None }), "a single node's");
    }
}
