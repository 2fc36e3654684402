//! Per-partition log configuration, with Kafka's topic config names and defaults.
//!
//! One deliberate difference from Kafka: when neither `flush.messages` nor `flush.ms` is
//! set, Osprey fsyncs an append before it is acknowledged (see [`FlushPolicy`]). Kafka's
//! defaults (both `Long.MAX_VALUE`) never fsync on the append path and rely on
//! replication for durability; setting either key here restores that behaviour.

use std::fmt;

/// Kafka's `segment.bytes` default: 1 GiB.
pub const DEFAULT_SEGMENT_BYTES: u64 = 1_073_741_824;
/// Kafka's `segment.ms` default: 7 days.
pub const DEFAULT_SEGMENT_MS: i64 = 604_800_000;
/// Kafka's `segment.index.bytes` default: 10 MiB.
pub const DEFAULT_SEGMENT_INDEX_BYTES: u64 = 10_485_760;
/// Kafka's `index.interval.bytes` default.
pub const DEFAULT_INDEX_INTERVAL_BYTES: u64 = 4096;
/// Kafka's `retention.ms` default: 7 days.
pub const DEFAULT_RETENTION_MS: i64 = 604_800_000;
/// Kafka's `max.message.bytes` default (1 MiB plus the batch overhead).
pub const DEFAULT_MAX_MESSAGE_BYTES: u32 = 1_048_588;
/// Kafka's `min.cleanable.dirty.ratio` default.
pub const DEFAULT_MIN_CLEANABLE_DIRTY_RATIO: f64 = 0.5;
/// Kafka's `delete.retention.ms` default: 1 day.
pub const DEFAULT_DELETE_RETENTION_MS: i64 = 86_400_000;

/// Which timestamp a batch carries once it is in the log (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// Keep the producer's timestamps.
    CreateTime,
    /// Stamp the broker's clock at append (attribute bit 3 set, maxTimestamp rewritten).
    LogAppendTime,
}

/// `cleanup.policy`: `delete`, `compact` or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// Retention by `retention.ms` / `retention.bytes` deletes old segments.
    pub delete: bool,
    /// Keep the last record per key ([`crate::PartitionLog::clean`]).
    pub compact: bool,
}

/// When an append may be acknowledged, derived from `flush.messages` / `flush.ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushPolicy {
    /// Osprey's default: an append is acknowledged only after an fsync (fdatasync) that
    /// covers it. Concurrent appends share one fsync (group commit).
    FsyncBeforeAck,
    /// Kafka's behaviour: acknowledge once written to the OS; fsync when this many
    /// messages are unflushed (synchronously, inside the append that crosses the limit)
    /// or when `flush_if_due` finds the oldest unflushed append older than `ms`.
    Periodic {
        /// `flush.messages`, if set.
        messages: Option<u64>,
        /// `flush.ms`, if set.
        ms: Option<u64>,
    },
}

/// A config key or value that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The key is not a log config this crate knows.
    #[error("unknown log config `{0}`")]
    UnknownKey(String),
    /// The value does not parse or is out of the allowed range.
    #[error("invalid value `{value}` for `{key}`: {reason}")]
    InvalidValue {
        /// Config key, as given.
        key: String,
        /// Value, as given.
        value: String,
        /// What was expected.
        reason: &'static str,
    },
}

/// Per-partition log settings. Field names are Kafka's keys with `.` replaced by `_`.
#[derive(Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`: roll the active segment before it would exceed this size.
    pub segment_bytes: u64,
    /// `segment.ms`: roll once the active segment's first batch is this old.
    pub segment_ms: i64,
    /// `segment.index.bytes`: roll once the offset (8 B/entry) or time (12 B/entry)
    /// index of the active segment would exceed this size.
    pub segment_index_bytes: u64,
    /// `index.interval.bytes`: bytes of log between two sparse index entries.
    pub index_interval_bytes: u64,
    /// `retention.ms`: delete segments whose newest timestamp is older; -1 = forever.
    pub retention_ms: i64,
    /// `retention.bytes`: delete the oldest segments while the log is larger; -1 = no limit.
    pub retention_bytes: i64,
    /// `flush.messages`: unset by default (Osprey fsyncs before ack; see module docs).
    pub flush_messages: Option<u64>,
    /// `flush.ms`: unset by default (Osprey fsyncs before ack; see module docs).
    pub flush_ms: Option<u64>,
    /// `max.message.bytes`: largest batch (including its 12-byte log overhead) accepted.
    pub max_message_bytes: u32,
    /// `message.timestamp.type`.
    pub message_timestamp_type: TimestampType,
    /// `cleanup.policy`.
    pub cleanup_policy: CleanupPolicy,
    /// `min.cleanable.dirty.ratio`: compact once dirty bytes / cleanable bytes reach this
    /// (0.0 to 1.0, never NaN: `set` rejects anything else).
    pub min_cleanable_dirty_ratio: f64,
    /// `delete.retention.ms`: how long a tombstone stays after the segment holding it
    /// was first cleaned, so consumers reading the head see the delete.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: a record is not compacted before it is this old.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a dirty record this old forces a clean whatever the ratio.
    pub max_compaction_lag_ms: i64,
}

// `min_cleanable_dirty_ratio` is an f64 but never NaN, so equality is total.
impl Eq for LogConfig {}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            segment_ms: DEFAULT_SEGMENT_MS,
            segment_index_bytes: DEFAULT_SEGMENT_INDEX_BYTES,
            index_interval_bytes: DEFAULT_INDEX_INTERVAL_BYTES,
            retention_ms: DEFAULT_RETENTION_MS,
            retention_bytes: -1,
            flush_messages: None,
            flush_ms: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            message_timestamp_type: TimestampType::CreateTime,
            cleanup_policy: CleanupPolicy { delete: true, compact: false },
            min_cleanable_dirty_ratio: DEFAULT_MIN_CLEANABLE_DIRTY_RATIO,
            delete_retention_ms: DEFAULT_DELETE_RETENTION_MS,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
        }
    }
}

impl fmt::Debug for LogConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogConfig")
            .field("segment.bytes", &self.segment_bytes)
            .field("segment.ms", &self.segment_ms)
            .field("segment.index.bytes", &self.segment_index_bytes)
            .field("index.interval.bytes", &self.index_interval_bytes)
            .field("retention.ms", &self.retention_ms)
            .field("retention.bytes", &self.retention_bytes)
            .field("flush.messages", &self.flush_messages)
            .field("flush.ms", &self.flush_ms)
            .field("max.message.bytes", &self.max_message_bytes)
            .field("message.timestamp.type", &self.message_timestamp_type)
            .field("cleanup.policy", &self.cleanup_policy)
            .field("min.cleanable.dirty.ratio", &self.min_cleanable_dirty_ratio)
            .field("delete.retention.ms", &self.delete_retention_ms)
            .field("min.compaction.lag.ms", &self.min_compaction_lag_ms)
            .field("max.compaction.lag.ms", &self.max_compaction_lag_ms)
            .finish()
    }
}

impl LogConfig {
    /// The ack/fsync policy these settings imply.
    pub fn flush_policy(&self) -> FlushPolicy {
        match (self.flush_messages, self.flush_ms) {
            (None, None) => FlushPolicy::FsyncBeforeAck,
            (messages, ms) => FlushPolicy::Periodic { messages, ms },
        }
    }

    /// Builds a config from defaults overridden by `(key, value)` pairs. Accepts topic
    /// keys (`segment.bytes`) and the broker-wide defaults they fall back to
    /// (`log.segment.bytes`, `log.roll.ms`, `log.roll.hours`, `log.retention.ms`,
    /// `log.retention.minutes`, `log.retention.hours`, `log.retention.bytes`,
    /// `log.flush.interval.messages`, `log.flush.interval.ms`, `log.index.size.max.bytes`,
    /// `log.index.interval.bytes`, `log.cleanup.policy`, `log.message.timestamp.type`,
    /// `message.max.bytes`, `log.cleaner.min.cleanable.ratio`,
    /// `log.cleaner.delete.retention.ms`, `log.cleaner.min.compaction.lag.ms`,
    /// `log.cleaner.max.compaction.lag.ms`). Later pairs win.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<LogConfig, ConfigError> {
        let mut config = LogConfig::default();
        for (key, value) in pairs {
            config.set(key, value)?;
        }
        Ok(config)
    }

    /// Applies one Kafka config key (topic or broker-default name).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let v = Value { key, value };
        match key {
            "segment.bytes" | "log.segment.bytes" => self.segment_bytes = v.positive_u64(14)?,
            "segment.ms" | "log.roll.ms" => self.segment_ms = v.positive_i64(1)?,
            "log.roll.hours" => self.segment_ms = v.positive_i64(1)?.saturating_mul(3_600_000),
            "segment.index.bytes" | "log.index.size.max.bytes" => self.segment_index_bytes = v.positive_u64(12)?,
            "index.interval.bytes" | "log.index.interval.bytes" => self.index_interval_bytes = v.positive_u64(0)?,
            "retention.ms" | "log.retention.ms" => self.retention_ms = v.at_least_minus_one()?,
            "log.retention.minutes" => self.retention_ms = v.scaled_retention(60_000)?,
            "log.retention.hours" => self.retention_ms = v.scaled_retention(3_600_000)?,
            "retention.bytes" | "log.retention.bytes" => self.retention_bytes = v.at_least_minus_one()?,
            "flush.messages" | "log.flush.interval.messages" => self.flush_messages = Some(v.positive_u64(1)?),
            "flush.ms" | "log.flush.interval.ms" => self.flush_ms = Some(v.positive_u64(0)?),
            "max.message.bytes" | "message.max.bytes" => {
                let n = v.positive_u64(0)?;
                self.max_message_bytes = u32::try_from(n).map_err(|_| v.invalid("at most 2^32-1"))?
            }
            "message.timestamp.type" | "log.message.timestamp.type" => {
                self.message_timestamp_type = match value {
                    "CreateTime" => TimestampType::CreateTime,
                    "LogAppendTime" => TimestampType::LogAppendTime,
                    _ => return Err(v.invalid("CreateTime or LogAppendTime")),
                }
            }
            "cleanup.policy" | "log.cleanup.policy" => self.cleanup_policy = v.cleanup_policy()?,
            "min.cleanable.dirty.ratio" | "log.cleaner.min.cleanable.ratio" => {
                self.min_cleanable_dirty_ratio = v.ratio()?
            }
            "delete.retention.ms" | "log.cleaner.delete.retention.ms" => {
                self.delete_retention_ms = v.positive_i64(0)?
            }
            "min.compaction.lag.ms" | "log.cleaner.min.compaction.lag.ms" => {
                self.min_compaction_lag_ms = v.positive_i64(0)?
            }
            "max.compaction.lag.ms" | "log.cleaner.max.compaction.lag.ms" => {
                self.max_compaction_lag_ms = v.positive_i64(1)?
            }
            _ => return Err(ConfigError::UnknownKey(key.to_string())),
        }
        Ok(())
    }
}

struct Value<'a> {
    key: &'a str,
    value: &'a str,
}

impl Value<'_> {
    fn invalid(&self, reason: &'static str) -> ConfigError {
        ConfigError::InvalidValue { key: self.key.into(), value: self.value.into(), reason }
    }

    fn positive_u64(&self, min: u64) -> Result<u64, ConfigError> {
        match self.value.trim().parse::<u64>() {
            Ok(n) if n >= min => Ok(n),
            _ => Err(self.invalid("an integer at or above the minimum for this key")),
        }
    }

    fn positive_i64(&self, min: i64) -> Result<i64, ConfigError> {
        match self.value.trim().parse::<i64>() {
            Ok(n) if n >= min => Ok(n),
            _ => Err(self.invalid("a positive integer")),
        }
    }

    fn ratio(&self) -> Result<f64, ConfigError> {
        match self.value.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
            _ => Err(self.invalid("a number from 0.0 to 1.0")),
        }
    }

    fn at_least_minus_one(&self) -> Result<i64, ConfigError> {
        match self.value.trim().parse::<i64>() {
            Ok(n) if n >= -1 => Ok(n),
            _ => Err(self.invalid("-1 (unlimited) or a non-negative integer")),
        }
    }

    fn scaled_retention(&self, unit_ms: i64) -> Result<i64, ConfigError> {
        let n = self.at_least_minus_one()?;
        Ok(if n < 0 { -1 } else { n.saturating_mul(unit_ms) })
    }

    fn cleanup_policy(&self) -> Result<CleanupPolicy, ConfigError> {
        let mut policy = CleanupPolicy { delete: false, compact: false };
        for part in self.value.split(',').map(str::trim) {
            match part {
                "delete" => policy.delete = true,
                "compact" => policy.compact = true,
                _ => return Err(self.invalid("delete, compact or compact,delete")),
            }
        }
        Ok(policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_kafka_except_flush_policy() {
        let c = LogConfig::default();
        assert_eq!(c.segment_bytes, 1_073_741_824);
        assert_eq!(c.segment_ms, 604_800_000);
        assert_eq!(c.segment_index_bytes, 10_485_760);
        assert_eq!(c.index_interval_bytes, 4096);
        assert_eq!(c.retention_ms, 604_800_000);
        assert_eq!(c.retention_bytes, -1);
        assert_eq!(c.max_message_bytes, 1_048_588);
        assert_eq!(c.flush_policy(), FlushPolicy::FsyncBeforeAck);
    }

    #[test]
    fn setting_flush_messages_relaxes_to_periodic_flush() {
        let c = LogConfig::from_pairs([("flush.messages", "1000")]).unwrap();
        assert_eq!(c.flush_policy(), FlushPolicy::Periodic { messages: Some(1000), ms: None });
        let c = LogConfig::from_pairs([("log.flush.interval.ms", "50")]).unwrap();
        assert_eq!(c.flush_policy(), FlushPolicy::Periodic { messages: None, ms: Some(50) });
    }

    #[test]
    fn broker_defaults_and_topic_keys_are_both_accepted() {
        let c = LogConfig::from_pairs([
            ("log.roll.hours", "1"),
            ("log.retention.hours", "2"),
            ("cleanup.policy", "compact,delete"),
            ("message.timestamp.type", "LogAppendTime"),
            ("segment.bytes", "1048576"),
        ])
        .unwrap();
        assert_eq!(c.segment_ms, 3_600_000);
        assert_eq!(c.retention_ms, 7_200_000);
        assert_eq!(c.cleanup_policy, CleanupPolicy { delete: true, compact: true });
        assert_eq!(c.message_timestamp_type, TimestampType::LogAppendTime);
        assert_eq!(c.segment_bytes, 1_048_576);
    }

    #[test]
    fn bad_keys_and_values_are_rejected_not_clamped() {
        assert!(matches!(LogConfig::from_pairs([("segment.bytes", "-5")]), Err(ConfigError::InvalidValue { .. })));
        assert!(matches!(LogConfig::from_pairs([("retention.ms", "-2")]), Err(ConfigError::InvalidValue { .. })));
        assert!(matches!(LogConfig::from_pairs([("cleanup.policy", "keep")]), Err(ConfigError::InvalidValue { .. })));
        assert!(matches!(LogConfig::from_pairs([("no.such.key", "1")]), Err(ConfigError::UnknownKey(_))));
    }

    #[test]
    fn compaction_keys_have_kafka_defaults_and_bounds() {
        let c = LogConfig::default();
        assert_eq!(c.min_cleanable_dirty_ratio, 0.5);
        assert_eq!(c.delete_retention_ms, 86_400_000);
        assert_eq!((c.min_compaction_lag_ms, c.max_compaction_lag_ms), (0, i64::MAX));
        let c = LogConfig::from_pairs([
            ("min.cleanable.dirty.ratio", "0.1"),
            ("log.cleaner.delete.retention.ms", "5"),
            ("min.compaction.lag.ms", "7"),
            ("max.compaction.lag.ms", "9"),
        ])
        .unwrap();
        assert_eq!(c.min_cleanable_dirty_ratio, 0.1);
        assert_eq!((c.delete_retention_ms, c.min_compaction_lag_ms, c.max_compaction_lag_ms), (5, 7, 9));
        for bad in ["1.5", "-0.1", "NaN", "x"] {
            assert!(LogConfig::from_pairs([("min.cleanable.dirty.ratio", bad)]).is_err(), "{bad}");
        }
    }
}
