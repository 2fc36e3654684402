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
use crate::fs::Storage;
use crate::log::CLEAN_SHUTDOWN_FILE;

/// Whether `data_dir` holds a clean-shutdown marker; if so, removes it durably, so that
/// a crash after this call is seen as unclean at the next start.
pub fn take<S: Storage>(storage: &S, data_dir: &Path) -> Result<bool> {
    let marker = data_dir.join(CLEAN_SHUTDOWN_FILE);
    if !storage.exists(&marker) {
        return Ok(false);
    }
    storage.remove(&marker).map_err(|e| StorageError::io("remove", &marker, e))?;
    storage.sync_dir(data_dir).map_err(|e| StorageError::io("fsync dir", data_dir, e))?;
    Ok(true)
}

/// Marks `data_dir` clean: every log in it was closed with
/// [`close_unmarked`](crate::PartitionLog::close_unmarked) and nothing else is open.
/// Durable on return.
pub fn write<S: Storage>(storage: &S, data_dir: &Path) -> Result<()> {
    let marker = data_dir.join(CLEAN_SHUTDOWN_FILE);
    storage.open(&marker, true).map_err(|e| StorageError::io("create", &marker, e))?;
    storage.sync_dir(data_dir).map_err(|e| StorageError::io("fsync dir", data_dir, e))
}
