//! Work off the request path: retention passes, time-based flushes (`flush.ms`), the
//! group and transaction coordinators' timers, share groups' acquisition locks, and the
//! scrubber.

use crate::broker::{now_ms, Broker};
use metrics::counter;
use osprey_storage::ScrubCursor;
use std::sync::Arc;
use std::time::{Duration, Instant};
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
                        let expiration_ms = i64::from(b.config().producer_id_expiration_ms);
                        for p in b.replica_manager.partitions() {
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
                        for p in b.replica_manager.partitions() {
                            match p.log.flush_if_due(now_ms()) {
                                Ok(true) => p.log_changed(),
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
                    // A safety net: leadership changes reach the coordinators from
                    // `Broker::publish`; a load that failed is tried again here.
                    broker.coordinators_follow_if_idle();
                    broker.groups.tick(&broker);
                    broker.transactions.tick(&broker);
                    broker.share_partitions.tick(&broker);
                }
            }
        }
    });
}

/// One compaction round: every partition whose topic is compacted gets a cleaning pass
/// (which does nothing unless its dirty ratio or max lag calls for it).
fn clean_compacted(broker: &Broker) {
    let map_bytes = broker.config().log_cleaner_dedupe_buffer_size.clamp(1024, 1 << 32) as usize;
    for p in broker.replica_manager.partitions() {
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

/// Starts the scrubber (`osprey.log.scrub.bytes.per.second` > 0) on a thread of its own:
/// it reads sealed segments for hours at a paced rate, which is no work for a tokio
/// worker nor for the blocking pool that retention and flushes share. It stops when
/// `stopped` changes.
pub fn spawn_scrubber(broker: Arc<Broker>, stopped: watch::Receiver<bool>) {
    let rate = broker.settings.config.log_scrub_bytes_per_second;
    if rate <= 0 {
        tracing::info!("log scrubber disabled (osprey.log.scrub.bytes.per.second = 0)");
        return;
    }
    let pause = Duration::from_millis(broker.settings.config.log_scrub_interval_ms.max(0) as u64);
    let spawned = std::thread::Builder::new()
        .name("osprey-scrubber".into())
        .spawn(move || scrub_until_stopped(&broker, rate as u64, pause, &stopped));
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start the log scrubber thread");
    }
}

/// Pass after pass over every partition's sealed segments, `rate` bytes per second at
/// most, pausing `pause` between passes.
fn scrub_until_stopped(broker: &Broker, rate: u64, pause: Duration, stopped: &watch::Receiver<bool>) {
    // Steps of about a tenth of a second's budget keep the pace smooth.
    let step_bytes = (rate / 10).clamp(4096, 1 << 20);
    loop {
        let (started, mut bytes, mut corrupt) = (Instant::now(), 0u64, 0u64);
        for p in broker.replica_manager.partitions() {
            let mut cursor = ScrubCursor::default();
            loop {
                let step_started = Instant::now();
                let step = match p.log.scrub(&mut cursor, step_bytes) {
                    Ok(step) => step,
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "scrubber could not read the log; skipping it this pass");
                        break;
                    }
                };
                counter!("osprey_log_scrub_bytes_total").increment(step.bytes);
                bytes += step.bytes;
                for f in &step.findings {
                    counter!("osprey_log_scrub_corrupt_batches_total").increment(1);
                    corrupt += 1;
                    tracing::error!(
                        topic = %p.topic,
                        partition = p.index,
                        file = %f.file.display(),
                        segment_base_offset = f.segment_base_offset,
                        position = f.position,
                        offset = f.batch_base_offset.map_or(-1, |o| o),
                        reason = %f.reason,
                        "scrubber found a corrupt batch in a sealed segment; consumers that check CRCs (check.crcs) will reject it"
                    );
                }
                let budget = Duration::from_secs_f64(step.bytes as f64 / rate as f64);
                if !sleep_unless_stopped(budget.saturating_sub(step_started.elapsed()), stopped) {
                    return;
                }
                if step.pass_done {
                    break;
                }
            }
        }
        tracing::info!(
            bytes,
            corrupt_batches = corrupt,
            took_ms = started.elapsed().as_millis() as u64,
            "scrubber pass over sealed segments done"
        );
        if !sleep_unless_stopped(pause, stopped) {
            return;
        }
    }
}

/// Sleeps `how_long` in short slices; false as soon as the broker is stopping.
fn sleep_unless_stopped(how_long: Duration, stopped: &watch::Receiver<bool>) -> bool {
    let until = Instant::now() + how_long;
    loop {
        if *stopped.borrow() {
            return false;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(200)));
    }
}
