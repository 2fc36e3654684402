//! A partition this broker leads: its log, and the signal fetchers wait on.

use osprey_protocol::Uuid;
use osprey_storage::{FdLimited, Flusher, PartitionLog, StdStorage, StorageError};

/// A partition log whose files count against the broker's open-file budget.
pub type Log = PartitionLog<FdLimited<StdStorage>>;
use std::sync::Arc;
use tokio::sync::{oneshot, watch};

#[derive(Debug)]
pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    pub leader_epoch: i32,
    pub log: Arc<Log>,
    /// Acknowledge only after fsync (the default), or at once (`flush.messages`/`flush.ms` set).
    fsync_before_ack: std::sync::atomic::AtomicBool,
    /// The high watermark, published for long-polling fetches.
    high_watermark: watch::Sender<i64>,
    /// Transactional appends waiting for their partition to join the transaction (KIP-890
    /// part 2). While any wait, later transactional batches wait behind them, so a batch
    /// never overtakes an earlier one of its producer.
    pub deferred_txn_appends: std::sync::atomic::AtomicUsize,
}

impl Partition {
    pub fn new(
        topic: String,
        topic_id: Uuid,
        index: i32,
        leader_epoch: i32,
        log: Arc<Log>,
        fsync_before_ack: bool,
    ) -> Partition {
        let (high_watermark, _) = watch::channel(log.high_watermark());
        let fsync_before_ack = std::sync::atomic::AtomicBool::new(fsync_before_ack);
        Partition {
            topic,
            topic_id,
            index,
            leader_epoch,
            log,
            fsync_before_ack,
            high_watermark,
            deferred_txn_appends: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Applies a topic config change to this partition's log.
    pub fn reconfigure(&self, config: osprey_storage::LogConfig) {
        let fsync = matches!(config.flush_policy(), osprey_storage::FlushPolicy::FsyncBeforeAck);
        self.fsync_before_ack.store(fsync, std::sync::atomic::Ordering::Release);
        self.log.set_config(config);
    }

    /// A receiver that changes whenever the high watermark moves.
    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// Moves the high watermark to `end_offset` once everything before it may be read:
    /// on a single node that is when it is acknowledged-durable, so a consumer never
    /// reads data a crash could take back.
    pub fn advance_high_watermark(&self, end_offset: i64) {
        if end_offset <= self.log.high_watermark() {
            return;
        }
        if let Err(e) = self.log.update_high_watermark(end_offset) {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "high watermark not updated");
            return;
        }
        self.high_watermark.send_if_modified(|hw| {
            let moved = end_offset > *hw;
            if moved {
                *hw = end_offset;
            }
            moved
        });
    }

    /// Resolves once `last_offset` may be acknowledged under the log's flush policy, and
    /// moves the high watermark past it.
    pub fn acknowledged(
        self: &Arc<Self>,
        last_offset: i64,
        flusher: &Flusher,
    ) -> oneshot::Receiver<Result<(), StorageError>> {
        let (tx, rx) = oneshot::channel();
        if !self.fsync_before_ack.load(std::sync::atomic::Ordering::Acquire) {
            self.advance_high_watermark(last_offset + 1);
            let _ = tx.send(Ok(()));
            return rx;
        }
        let me = self.clone();
        self.log.on_durable(
            last_offset,
            flusher,
            Box::new(move |result| {
                if result.is_ok() {
                    me.advance_high_watermark(last_offset + 1);
                }
                let _ = tx.send(result);
            }),
        );
        rx
    }
}

/// Appends coordinator records (`__consumer_offsets`, `__transaction_state`) as one
/// uncompressed batch, transactional for `producer` if given (no sequence: coordinator
/// writes are not sequence-checked, as in Kafka), and returns the durability wait. `what`
/// names the write in the error log.
pub fn append_coordinator_records(
    partition: &Arc<Partition>,
    flusher: &Flusher,
    records: &[osprey_coordinator::group::Record],
    producer: Option<(i64, i16)>,
    what: &str,
) -> Result<oneshot::Receiver<Result<(), StorageError>>, osprey_protocol::ErrorCode> {
    use osprey_protocol::records::{BatchBuilder, Compression};
    use osprey_protocol::ErrorCode;
    let now = crate::broker::now_ms();
    let mut builder = BatchBuilder::new(Compression::None);
    if let Some((producer_id, producer_epoch)) = producer {
        builder = builder.producer(producer_id, producer_epoch, -1).transactional(true);
    }
    for r in records {
        builder.append(now, Some(&r.key), r.value.as_deref(), &[]).map_err(|_| ErrorCode::UNKNOWN_SERVER_ERROR)?;
    }
    let batch = builder.build().map_err(|_| ErrorCode::UNKNOWN_SERVER_ERROR)?;
    let mut bytes = batch.into_bytes_mut();
    let info = partition.log.append(&mut bytes, partition.leader_epoch, now).map_err(|e| {
        tracing::error!(topic = %partition.topic, partition = partition.index, error = %e, "{what} failed");
        if e.is_kafka_storage_error() {
            ErrorCode::KAFKA_STORAGE_ERROR
        } else {
            ErrorCode::UNKNOWN_SERVER_ERROR
        }
    })?;
    Ok(partition.acknowledged(info.last_offset, flusher))
}
