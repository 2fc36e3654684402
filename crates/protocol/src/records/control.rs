//! Control records: the transaction markers the broker writes into a partition when a
//! transaction commits or aborts, and the key that says what a control record is.
//!
//! Key: version i16 (0) | type i16. Value of a transaction marker: version i16 (0) |
//! coordinatorEpoch i32.

use super::{Record, RecordsError};

/// What a control record is, from its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlRecordType {
    /// Type 0: the transaction aborted.
    Abort,
    /// Type 1: the transaction committed.
    Commit,
    /// Any other type (KRaft's leader change, snapshot and voter records, or ones not yet
    /// defined); readers skip them, as Kafka's consumers do.
    Other(i16),
}

impl ControlRecordType {
    /// Reads the type from a control record's key, as Kafka's `ControlRecordType.parse`:
    /// at least 4 bytes, a non-negative version, then the type.
    pub fn from_key(key: &[u8]) -> Result<ControlRecordType, RecordsError> {
        let [v0, v1, t0, t1, ..] = *key else {
            return Err(RecordsError::InvalidControlRecord { reason: "key is shorter than 4 bytes" });
        };
        if i16::from_be_bytes([v0, v1]) < 0 {
            return Err(RecordsError::InvalidControlRecord { reason: "key version is negative" });
        }
        Ok(match i16::from_be_bytes([t0, t1]) {
            0 => ControlRecordType::Abort,
            1 => ControlRecordType::Commit,
            other => ControlRecordType::Other(other),
        })
    }

    /// The type id written in the key.
    pub fn id(self) -> i16 {
        match self {
            ControlRecordType::Abort => 0,
            ControlRecordType::Commit => 1,
            ControlRecordType::Other(id) => id,
        }
    }
}

/// A transaction marker: the outcome of a transaction and the epoch of the coordinator
/// that decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndTxnMarker {
    /// Commit (true) or abort (false).
    pub commit: bool,
    /// Epoch of the transaction coordinator that wrote the marker.
    pub coordinator_epoch: i32,
}

impl EndTxnMarker {
    /// Reads a marker from a control record, as Kafka's `EndTransactionMarker.deserialize`.
    pub fn from_record(record: &Record) -> Result<EndTxnMarker, RecordsError> {
        let key = record.key.as_deref().ok_or(RecordsError::InvalidControlRecord { reason: "key is null" })?;
        let commit = match ControlRecordType::from_key(key)? {
            ControlRecordType::Abort => false,
            ControlRecordType::Commit => true,
            ControlRecordType::Other(_) => {
                return Err(RecordsError::InvalidControlRecord { reason: "not a transaction marker" })
            }
        };
        let value = record.value.as_deref().ok_or(RecordsError::InvalidControlRecord { reason: "value is null" })?;
        let [v0, v1, e0, e1, e2, e3, ..] = *value else {
            return Err(RecordsError::InvalidControlRecord { reason: "marker value is shorter than 6 bytes" });
        };
        if i16::from_be_bytes([v0, v1]) < 0 {
            return Err(RecordsError::InvalidControlRecord { reason: "marker value version is negative" });
        }
        Ok(EndTxnMarker { commit, coordinator_epoch: i32::from_be_bytes([e0, e1, e2, e3]) })
    }

    /// The control record key: version 0, type 0 (abort) or 1 (commit).
    pub fn key(&self) -> [u8; 4] {
        let kind = if self.commit { ControlRecordType::Commit } else { ControlRecordType::Abort };
        let [t0, t1] = kind.id().to_be_bytes();
        [0, 0, t0, t1]
    }

    /// The marker value: version 0, then the coordinator epoch.
    pub fn value(&self) -> [u8; 6] {
        let [e0, e1, e2, e3] = self.coordinator_epoch.to_be_bytes();
        [0, 0, e0, e1, e2, e3]
    }
}
