//! Work off the request path: retention passes, time-based flushes (`flush.ms`), and the
//! group and transaction coordinators' timers.

use crate::broker::{now_ms, Broker};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Runs until `stopped` changes.
pub fn spawn(
    broker: Arc<Broker>,
    retention_every: Duration,
    flush_every: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    spawn_coordinator_timers(broker.clone(), stopped.clone());
    tokio::spawn(async move {
        let mut retention = tokio::time::interval(retention_every);
        let mut flush = tokio::time::interval(flush_every);
        let cleaner_enabled = broker.settings.config.log_cleaner_enable;
        let mut cleaner =
            tokio::time::interval(Duration::from_millis(broker.settings.config.log_cleaner_backoff_ms.max(100) as u64));
        loop {
            tokio::select! {
                _ = stopped.changed() => return,
                _ = retention.tick() => {
                    let b = broker.clone();
                    let _ = tokio::task::spawn_blocking(move || {
                        let expiration_ms = i64::from(b.settings.config.producer_id_expiration_ms);
                        for p in b.partitions() {
                            let expired = p.log.expire_producers(now_ms(), expiration_ms);
                            if expired > 0 {
                                tracing::debug!(topic = %p.topic, partition = p.index, expired, "idle producer ids expired");
                            }
                            match p.log.retention_pass(now_ms()) {
                                Ok(o) if o.deleted_segments > 0 => tracing::info!(topic = %p.topic, partition = p.index, segments = o.deleted_segments, bytes = o.deleted_bytes, log_start_offset = o.log_start_offset, "retention deleted segments"),
                                Ok(_) => {}
                                Err(e) => tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "retention pass failed"),
                            }
                        }
                    }).await;
                }
                _ = cleaner.tick(), if cleaner_enabled => {
                    let b = broker.clone();
                    let _ = tokio::task::spawn_blocking(move || clean_compacted(&b)).await;
                }
                _ = flush.tick() => {
                    let b = broker.clone();
                    let _ = tokio::task::spawn_blocking(move || {
                        for p in b.partitions() {
                            match p.log.flush_if_due(now_ms()) {
                                Ok(true) => p.advance_high_watermark(p.log.durable_end_offset()),
                                Ok(false) => {}
                                Err(e) => tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "scheduled flush failed"),
                            }
                        }
                    }).await;
                }
            }
        }
    });
}

/// The group and transaction coordinators' timers, in a task of their own: in the loop
/// above, an arm awaits its disk pass (retention, flush, compaction of every partition)
/// before the loop can select again, and session timeouts must not wait for that.
fn spawn_coordinator_timers(broker: Arc<Broker>, mut stopped: watch::Receiver<bool>) {
    tokio::spawn(async move {
        // Session and rebalance timeouts are milliseconds-to-seconds; 100 ms is fine
        // enough and cheap. A tick that fell behind is not made up in a burst.
        let mut timers = tokio::time::interval(Duration::from_millis(100));
        timers.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stopped.changed() => return,
                _ = timers.tick() => {
                    broker.groups.tick(&broker);
                    broker.transactions.tick(&broker);
                }
            }
        }
    });
}

/// One compaction round: every partition whose topic is compacted gets a cleaning pass
/// (which does nothing unless its dirty ratio or max lag calls for it).
fn clean_compacted(broker: &Broker) {
    let map_bytes = broker.settings.config.log_cleaner_dedupe_buffer_size.clamp(1024, 1 << 32) as usize;
    for p in broker.partitions() {
        if !p.log.config().cleanup_policy.compact {
            continue;
        }
        match p.log.clean(now_ms(), map_bytes) {
            Ok(o) if o.cleaned_segments > 0 => tracing::info!(
                topic = %p.topic,
                partition = p.index,
                segments = o.cleaned_segments,
                bytes_before = o.bytes_before,
                bytes_after = o.bytes_after,
                records_removed = o.records_removed,
                "compacted"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "compaction pass failed"),
        }
    }
}
