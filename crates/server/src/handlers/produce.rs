//! Produce (v3+): validate each partition's single batch, append it, and answer once the
//! append may be acknowledged (after fsync by default), or never for acks=0.
//!
//! The handler decides at dispatch only what needs no disk (the topic, leadership, acks);
//! each partition's validation and append are queued on the partition's append queue and
//! run on the blocking pool ([`ReplicaManager::append_later`]), so a segment roll, a
//! checkpoint fsync or a stalled write never holds up an async worker, and the queue
//! keeps the partition's batches in dispatch order.
//!
//! [`ReplicaManager::append_later`]: crate::replica_manager::ReplicaManager::append_later

use crate::broker::{now_ms, Broker};
use crate::dispatch::Reply;
use crate::metadata_cache::MetadataCache;
use crate::partition::{AckError, Acknowledgement, Partition};
use crate::telemetry::stages::remote_wait;
use crate::telemetry::{self, LogLimiter, REPEATED_FAILURE_LOG_INTERVAL};
use crate::transactions::NotYet;
use crate::txn_interbroker::{CoordinatorRoute, RemoteCheck};
use bytes::Bytes;
use osprey_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use osprey_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use osprey_protocol::messages::{ProduceRequest, ProduceResponse};
use osprey_protocol::records::{Batches, Compression, RecordBatch};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody, Uuid};
use osprey_storage::batch::BatchError;
use osprey_storage::producer::SequenceError;
use osprey_storage::{AppendInfo, StorageError};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// A partition's outcome before the durability wait.
enum Outcome {
    Failed(ErrorCode, Option<String>),
    /// Refused for particular records (their indexes in the batch), as KIP-467 reports.
    Rejected {
        code: ErrorCode,
        message: String,
        record_errors: Vec<i32>,
    },
    Appended {
        info: AppendInfo,
        /// Resolves once the replica state machine acknowledges the batch.
        durable: Option<Acknowledgement>,
    },
    /// Appended later: a transaction version 2 batch whose partition the coordinator
    /// is adding to the transaction first (KIP-890 part 2). Resolves to another outcome.
    Deferred(Pin<Box<dyn Future<Output = Outcome> + Send>>),
    /// On the partition's append queue: resolves to the outcome of [`append`].
    Queued(oneshot::Receiver<Outcome>),
}

struct PartitionOutcome {
    index: i32,
    outcome: Outcome,
}

struct TopicOutcome {
    name: String,
    topic_id: Uuid,
    /// The topic's name if it exists, for its per-topic request counts.
    known: Option<String>,
    partitions: Vec<PartitionOutcome>,
}

pub fn handle(broker: &Arc<Broker>, req: ProduceRequest, version: i16, listener: &Arc<str>) -> Reply {
    let acks = req.acks;
    let transactional_id: Option<Arc<str>> = req.transactional_id.as_deref().map(Arc::from);
    let mut topics = Vec::with_capacity(req.topic_data.len());
    let image = broker.image();
    for topic in req.topic_data {
        let found = if version >= 13 { image.topic_by_id(topic.topic_id) } else { image.topic(&topic.name) };
        let unknown = if version >= 13 { ErrorCode::UNKNOWN_TOPIC_ID } else { ErrorCode::UNKNOWN_TOPIC_OR_PARTITION };
        // Only topics that exist are counted: a client naming made-up topics must not
        // add series to /metrics.
        let known = found.map(|t| t.name.clone());
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for p in topic.partition_data {
            if let Some(name) = &known {
                telemetry::topic_produce_request(name);
            }
            let outcome = if version < 3 {
                // Kafka 4 still lists Produce v0-2 (librdkafka needs to see 0 to compress)
                // but refuses them.
                Outcome::Failed(ErrorCode::UNSUPPORTED_VERSION, None)
            } else if !matches!(acks, -1..=1) {
                Outcome::Failed(ErrorCode::INVALID_REQUIRED_ACKS, None)
            } else {
                match broker.replica_manager.partition_or_error(&image, found, p.index, unknown) {
                    Err(code) => {
                        telemetry::error_code(ApiKey::Produce, code);
                        // A follower's replica: it may lead the partition a moment later.
                        let replica = found.and_then(|t| broker.replica_manager.replica(t.id, p.index));
                        if let Some(replica) = replica {
                            remember_refusal(&replica, p.records.as_ref(), code);
                        }
                        Outcome::Failed(code, None)
                    }
                    Ok(partition) => match check_append(&partition, acks, p.records.as_ref()) {
                        Err(outcome) => outcome,
                        Ok(()) => {
                            let (b, part, id, records) =
                                (broker.clone(), partition.clone(), transactional_id.clone(), p.records);
                            Outcome::Queued(broker.replica_manager.append_later(&partition, move || {
                                append(&b, &part, records, version, acks, id.as_deref())
                            }))
                        }
                    },
                }
            };
            partitions.push(PartitionOutcome { index: p.index, outcome });
        }
        topics.push(TopicOutcome { name: topic.name, topic_id: topic.topic_id, known, partitions });
    }
    if acks == 0 {
        // Nobody waits for the answer, but a queued append may defer (transaction version
        // 2), and what it defers must still happen; and failures are counted.
        if !topics.is_empty() {
            tokio::spawn(async move { drop(respond(topics, None).await) });
        }
        return Reply::Nothing;
    }
    let (broker, listener) = (broker.clone(), listener.clone());
    // Kafka's DelayedProduce: what is not acknowledged by `timeout_ms` is answered
    // REQUEST_TIMED_OUT (it stays in the log; an idempotent retry is deduplicated). A
    // timeout of 0 still waits for the local fsync: Kafka answers such a request at once
    // only because its own copy counts without one.
    let timeout = Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0));
    let deadline = (!timeout.is_zero()).then(|| tokio::time::Instant::now() + timeout);
    Reply::Later(Box::pin(async move {
        let mut resp = respond(topics, deadline).await;
        if version >= 10 {
            add_current_leaders(&broker, &listener, &mut resp, version);
        }
        ResponseBody::Produce(resp)
    }))
}

/// KIP-951, Produce v10+: a partition answered NOT_LEADER_OR_FOLLOWER names the current
/// leader and its epoch, and the response carries the leader's endpoint, so the producer
/// goes there without a Metadata round trip (Kafka's `handleProduceRequest`).
fn add_current_leaders(broker: &Broker, listener: &str, resp: &mut ProduceResponse, version: i16) {
    let cache = MetadataCache::for_listener(broker, listener);
    let mut endpoints = std::collections::BTreeMap::new();
    for topic in &mut resp.responses {
        let image = cache.image();
        let found = if version >= 13 { image.topic_by_id(topic.topic_id) } else { image.topic(&topic.name) };
        for p in &mut topic.partition_responses {
            if p.error_code != ErrorCode::NOT_LEADER_OR_FOLLOWER.code() {
                continue;
            }
            let (leader_id, leader_epoch, endpoint) = cache.current_leader(found, p.index);
            p.current_leader = LeaderIdAndEpoch { leader_id, leader_epoch, ..Default::default() };
            if let Some(e) = endpoint {
                endpoints.insert(e.node_id, e);
            }
        }
    }
    resp.node_endpoints = endpoints
        .into_values()
        .map(|e| NodeEndpoint { node_id: e.node_id, host: e.host, port: e.port, rack: e.rack, ..Default::default() })
        .collect();
}

/// Refuses the write before anything is written when the replica state machine says so:
/// this broker does not lead, or acks=all with the ISR below the effective
/// `min.insync.replicas` (NOT_ENOUGH_REPLICAS, as Kafka). The effective value is capped at
/// the partition's replica count, as Kafka's has been since 3.7 (KAFKA-15583): a
/// one-replica topic with `min.insync.replicas=2` takes acks=all.
fn check_append(partition: &Partition, acks: i16, records: Option<&Bytes>) -> Result<(), Outcome> {
    partition.check_append(acks).map_err(|refused| {
        telemetry::error_code(ApiKey::Produce, refused.code());
        remember_refusal(partition, records, refused.code());
        Outcome::Failed(refused.code(), Some(refused.to_string()))
    })
}

/// The producer id, epoch and first and last sequence of an idempotent batch.
fn idempotent_batch(records: &Bytes) -> Option<(i64, i16, i32, i32)> {
    let batch = Batches::new(records.clone()).next()?.ok()?;
    let first = batch.base_sequence();
    (batch.producer_id() >= 0 && first >= 0)
        .then(|| (batch.producer_id(), batch.producer_epoch(), first, first.saturating_add(batch.last_offset_delta())))
}

/// A producer's batch refused before its append leaves a gap in its sequence, which
/// its next batch must not be refused for as out of order ([`crate::refused_batches`]).
fn remember_refusal(partition: &Partition, records: Option<&Bytes>, code: ErrorCode) {
    if let Some((producer_id, epoch, first, last)) = records.and_then(idempotent_batch) {
        partition.refused_batches.refused(producer_id, epoch, first, last, code);
    }
}

/// Validates and appends one partition's batch: on the partition's append queue, on the
/// blocking pool.
fn append(
    broker: &Arc<Broker>,
    partition: &Arc<Partition>,
    records: Option<Bytes>,
    version: i16,
    acks: i16,
    transactional_id: Option<&str>,
) -> Outcome {
    let records = match records {
        Some(r) => r,
        None => return Outcome::Failed(ErrorCode::INVALID_RECORD, Some("null records".into())),
    };
    let producer = match check_batch(broker, partition, &records, version) {
        Ok(producer) => producer,
        Err(outcome) => return outcome,
    };
    let Some(producer) = producer else { return append_checked(broker, partition, records, acks) };
    // A transactional batch: the request names its transactional id, and the partition
    // must be in that transaction (checked with the coordinator before its first batch).
    let Some(transactional_id) = transactional_id.filter(|id| !id.is_empty()) else {
        telemetry::error_code(ApiKey::Produce, ErrorCode::INVALID_REQUEST);
        return Outcome::Failed(
            ErrorCode::INVALID_REQUEST,
            Some("a transactional batch needs the request's transactional_id".into()),
        );
    };
    let batch = TxnBatch {
        broker: broker.clone(),
        partition: partition.clone(),
        transactional_id: Arc::from(transactional_id),
        producer,
        records,
        acks,
        version,
    };
    if partition.deferred_txn_appends.load(Ordering::Acquire) > 0 {
        // Earlier batches wait for the coordinator: this one queues behind them.
        return batch.check_later();
    }
    batch.append_now()
}

/// A transactional batch on its way into its partition: what each step of its append
/// needs (the check with the coordinator may defer it, and it is appended later on the
/// partition's append queue).
#[derive(Clone)]
struct TxnBatch {
    broker: Arc<Broker>,
    partition: Arc<Partition>,
    transactional_id: Arc<str>,
    producer: (i64, i16),
    records: Bytes,
    acks: i16,
    version: i16,
}

impl TxnBatch {
    /// The append, checked with its coordinator first when it is the first of its
    /// transaction on the partition (on the partition's append queue).
    fn append_now(self) -> Outcome {
        // Transaction version 2: the client does not add partitions itself; the leader asks
        // the coordinator to, then appends (KIP-890 part 2). The add's answer is the
        // authoritative one (a fenced epoch, or the previous transaction still completing,
        // which is retried briefly).
        self.try_append(|batch, error| match batch.version >= 12 {
            true => batch.add_then_append(),
            false => batch.not_in_transaction(error),
        })
    }

    /// Appends if the partition is in the transaction; a local coordinator's refusal goes
    /// to `refused`, and a remote coordinator is asked first.
    fn try_append(self, refused: fn(TxnBatch, ErrorCode) -> Outcome) -> Outcome {
        let appended = self.broker.transactions.append_transactional(
            &self.broker,
            &self.partition,
            &self.transactional_id,
            self.producer,
            || self.append_checked(),
        );
        match appended {
            Ok(outcome) => outcome,
            Err(NotYet::Refused(error)) => refused(self, error),
            Err(NotYet::Remote(check)) => self.remote_then_append(check),
        }
    }

    /// Behind deferred batches: checked and appended once the response before it is out
    /// (the connection polls response futures in request order), through the partition's
    /// append queue, so a producer's batches land in the order sent.
    fn check_later(self) -> Outcome {
        let waiting = DeferredAppend::new(&self.partition);
        Outcome::Deferred(Box::pin(async move {
            let _waiting = waiting;
            self.queue(TxnBatch::append_now).await
        }))
    }

    /// A transaction version 2 batch for a partition not yet in its transaction, whose
    /// coordinator is here: the coordinator adds the partition (AddPartitionsToTxn v5 on
    /// the client's behalf, durable before it answers), then the batch is appended under
    /// the marker lock, on the partition's append queue. The add is issued now, in request
    /// order; the append is queued by the response future, which the connection polls in
    /// request order, so batches of one producer still land in the order they were sent.
    fn add_then_append(self) -> Outcome {
        let added = crate::transactions::add_implicitly(&self.broker, self.single_partition_transaction(false));
        let waiting = DeferredAppend::new(&self.partition);
        Outcome::Deferred(Box::pin(async move {
            let _waiting = waiting;
            let error = remote_wait(added).await;
            if error != ErrorCode::NONE {
                return self.not_in_transaction(error);
            }
            // Checked again, not added again; the coordinator may have moved to another
            // broker since it added the partition.
            self.queue(|batch| batch.try_append(TxnBatch::not_in_transaction)).await
        }))
    }

    /// The first batch of a transaction on the partition whose coordinator is on another
    /// broker: the check (AddPartitionsToTxn, verify-only before transaction version 2,
    /// an add from it) is recorded on the partition (`check`'s guard) and sent; the append
    /// then runs on the partition's append queue if no marker for the producer landed
    /// meanwhile.
    fn remote_then_append(self, check: RemoteCheck) -> Outcome {
        let waiting = DeferredAppend::new(&self.partition);
        let add = self.version >= 12;
        let transaction = self.single_partition_transaction(!add);
        Outcome::Deferred(Box::pin(async move {
            let _waiting = waiting;
            let RemoteCheck { guard, node, address } = check;
            let error = remote_wait(async {
                if add {
                    let route = CoordinatorRoute::Remote { node, address };
                    crate::transactions::add_with_retry(self.broker.clone(), route, transaction, None).await
                } else {
                    crate::txn_interbroker::send_add_partitions(&self.broker, node, address, transaction).await
                }
            })
            .await;
            if error != ErrorCode::NONE {
                return self.not_in_transaction(error);
            }
            self.queue(move |batch| {
                batch
                    .broker
                    .transactions
                    .append_verified(&batch.partition, batch.producer, guard, || batch.append_checked())
                    .unwrap_or_else(|error| batch.not_in_transaction(error))
            })
            .await
        }))
    }

    /// Runs `then` on the partition's append queue (the blocking pool), after every
    /// append queued before it.
    async fn queue(self, then: impl FnOnce(TxnBatch) -> Outcome + Send + 'static) -> Outcome {
        let (broker, partition) = (self.broker.clone(), self.partition.clone());
        let queued = broker.replica_manager.append_later(&partition, move || then(self));
        queued.await.unwrap_or_else(|_| never_ran())
    }

    fn append_checked(&self) -> Outcome {
        append_checked(&self.broker, &self.partition, self.records.clone(), self.acks)
    }

    /// The answer for a batch the coordinator did not let in.
    fn not_in_transaction(self, error: ErrorCode) -> Outcome {
        let code = super::transactions::verification_error(error, self.version, 11);
        telemetry::error_code(ApiKey::Produce, code);
        let why = format!(
            "{}-{} is not in the transaction of {} ({})",
            self.partition.topic,
            self.partition.index,
            self.transactional_id,
            error.name()
        );
        Outcome::Failed(code, Some(why))
    }

    /// The AddPartitionsToTxn entry for this partition of the producer's transaction.
    fn single_partition_transaction(&self, verify_only: bool) -> AddPartitionsToTxnTransaction {
        AddPartitionsToTxnTransaction {
            transactional_id: self.transactional_id.to_string(),
            producer_id: self.producer.0,
            producer_epoch: self.producer.1,
            verify_only,
            topics: vec![AddPartitionsToTxnTopic {
                name: self.partition.topic.clone(),
                partitions: vec![self.partition.index],
                ..Default::default()
            }],
            ..Default::default()
        }
    }
}

/// Counts a deferred transactional append on its partition for as long as it lives
/// (dropped with its future, even if the connection goes before it runs).
struct DeferredAppend(Arc<Partition>);

impl DeferredAppend {
    fn new(partition: &Arc<Partition>) -> DeferredAppend {
        partition.deferred_txn_appends.fetch_add(1, Ordering::AcqRel);
        DeferredAppend(partition.clone())
    }
}

impl Drop for DeferredAppend {
    fn drop(&mut self) {
        self.0.deferred_txn_appends.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Appends a batch that passed [`check_batch`] (and, if transactional, verification).
fn append_checked(broker: &Broker, partition: &Arc<Partition>, records: Bytes, acks: i16) -> Outcome {
    // The request's own bytes: the log writes them with the offsets and leader epoch it
    // assigns in a prefix of its own, without copying the batch.
    let appended = partition.append_as_leader(None, |epoch| partition.log.append(&records, epoch, now_ms()));
    let appended = match appended {
        Ok(appended) => appended,
        Err(code) => {
            telemetry::error_code(ApiKey::Produce, code);
            remember_refusal(partition, Some(&records), code);
            return Outcome::Failed(code, Some("this broker stopped leading the partition".into()));
        }
    };
    match appended {
        Ok(info) => {
            telemetry::bytes_in(&partition.topic, info.bytes, info.records);
            // With acks=0 nobody waits, but the high watermark must still move once the
            // batch is durable.
            let acknowledgement = partition.acknowledge(info.last_offset, acks, &broker.flusher);
            let durable = (acks != 0).then_some(acknowledgement);
            Outcome::Appended { info, durable }
        }
        Err(StorageError::Sequence(SequenceError::OutOfOrderSequence { producer_id, first_seq, expected_after }))
            if let Some(code) = idempotent_batch(&records).and_then(|(_, epoch, _, _)| {
                partition.refused_batches.explains_gap(producer_id, epoch, first_seq, expected_after)
            }) =>
        {
            telemetry::error_code(ApiKey::Produce, code);
            metrics::counter!("osprey_produce_gaps_answered_as_refusals_total").increment(1);
            let why = format!(
                "producer {producer_id} sequence {first_seq} follows batches this broker refused ({}) moments ago; \
                 send those first",
                code.name()
            );
            Outcome::Failed(code, Some(why))
        }
        Err(e) => {
            let code = storage_error_code(&e);
            telemetry::error_code(ApiKey::Produce, code);
            if e.is_kafka_storage_error() {
                if let Some(unlogged) = APPEND_FAILURES_LOGGED.admit(REPEATED_FAILURE_LOG_INTERVAL) {
                    tracing::error!(
                        topic = %partition.topic,
                        partition = partition.index,
                        error = %e,
                        unlogged,
                        "append failed; producers get KAFKA_STORAGE_ERROR and retry (a full disk: free space and appends resume)"
                    );
                }
            }
            Outcome::Failed(code, Some(e.to_string()))
        }
    }
}

/// A full or failing disk fails every append, each producer retrying every back-off:
/// one "append failed" line per interval for the whole broker, with how many were held
/// back (every failure is counted in `osprey_error_codes_total`).
static APPEND_FAILURES_LOGGED: LogLimiter = LogLimiter::new();

/// Produce v3+ carries exactly one v2 batch per partition, written by a client (not a
/// control batch), compressed with a codec this request version may use, whose records
/// are what its header says (see [`check_records`]). Returns the producer id and epoch of
/// a transactional batch.
fn check_batch(
    broker: &Broker,
    partition: &Partition,
    records: &Bytes,
    version: i16,
) -> Result<Option<(i64, i16)>, Outcome> {
    let failed = |code: ErrorCode, why: String| {
        telemetry::error_code(ApiKey::Produce, code);
        Outcome::Failed(code, Some(why))
    };
    let mut batches = Batches::new(records.clone());
    let batch: RecordBatch = match batches.next() {
        Some(Ok(b)) => b,
        Some(Err(e)) => return Err(failed(code_of(e.kafka_error_code()), e.to_string())),
        None => return Err(failed(ErrorCode::INVALID_RECORD, "no record batch".into())),
    };
    if batches.next().is_some() {
        return Err(failed(
            ErrorCode::INVALID_RECORD,
            "Produce v3+ must carry exactly one record batch per partition".into(),
        ));
    }
    batch.check_produce_invariants().map_err(|e| failed(code_of(e.kafka_error_code()), e.to_string()))?;
    match batch.compression() {
        Ok(Compression::Zstd) if version < 7 => {
            return Err(failed(ErrorCode::UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7 or later".into()))
        }
        Ok(_) => {}
        Err(e) => return Err(failed(code_of(e.kafka_error_code()), e.to_string())),
    }
    // A compressed batch may not inflate past this while its records are walked; past it
    // the batch is refused (MESSAGE_TOO_LARGE), never stored.
    let max_decompressed_bytes = usize::try_from(broker.config().produce_decompressed_max_bytes).unwrap_or(0);
    check_records(partition, &batch, max_decompressed_bytes)?;
    Ok(batch.is_transactional().then(|| (batch.producer_id(), batch.producer_epoch())))
}

/// Walks the batch's records before it is stored, as Kafka's `LogValidator` iterates them:
/// recordsCount records with offset deltas 0, 1, 2, ..., each taking exactly its declared
/// length, and nothing after them; a compressed batch within the decompression budget
/// (`osprey.produce.decompressed.max.bytes`).
/// Osprey stores the batch as sent, so a batch lying about its records would otherwise
/// take fewer offsets than it hands consumers. A compacted topic also needs a key on
/// every record: Kafka refuses the batch with INVALID_RECORD and names the keyless
/// records (KIP-467).
fn check_records(partition: &Partition, batch: &RecordBatch, max_decompressed_bytes: usize) -> Result<(), Outcome> {
    let compacted = partition.log.config().cleanup_policy.compact;
    let mut keyless = Vec::new();
    let mut walk = |budget| {
        keyless.clear();
        batch.validate_records(budget, |record| {
            if compacted && record.key_len.is_none() {
                keyless.push(record.index);
            }
        })
    };
    // On the partition's append queue (the blocking pool): a batch inflating up to the
    // budget takes tens of ms of CPU there, off the async workers.
    if let Err(e) = walk(max_decompressed_bytes) {
        // Kafka checks the CRC before it reads a record: a batch damaged in transit is
        // CORRUPT_MESSAGE, whatever its records now look like. Computed here only for a
        // refused batch; the log checks it for every batch it appends.
        let e = batch.ensure_valid_crc().err().unwrap_or(e);
        let code = code_of(e.kafka_error_code());
        telemetry::error_code(ApiKey::Produce, code);
        return Err(Outcome::Failed(code, Some(e.to_string())));
    }
    if keyless.is_empty() {
        return Ok(());
    }
    telemetry::error_code(ApiKey::Produce, ErrorCode::INVALID_RECORD);
    let message = format!(
        "Compacted topic cannot accept message without key in topic partition {}-{}.",
        partition.topic, partition.index
    );
    Err(Outcome::Rejected { code: ErrorCode::INVALID_RECORD, message, record_errors: keyless })
}

/// The outcome of a queued append whose job was dropped unrun (only a panic does that,
/// and a release build aborts on one).
fn never_ran() -> Outcome {
    telemetry::error_code(ApiKey::Produce, ErrorCode::UNKNOWN_SERVER_ERROR);
    Outcome::Failed(ErrorCode::UNKNOWN_SERVER_ERROR, Some("the append did not run".into()))
}

fn code_of(code: i16) -> ErrorCode {
    ErrorCode::from_code(code).unwrap_or(ErrorCode::CORRUPT_MESSAGE)
}

pub(crate) fn storage_error_code(e: &StorageError) -> ErrorCode {
    match e {
        StorageError::Io { .. } | StorageError::LogOffline { .. } | StorageError::EarlierWriteFailed { .. } => {
            ErrorCode::KAFKA_STORAGE_ERROR
        }
        StorageError::InvalidBatch { reason: BatchError::CrcMismatch { .. }, .. } => ErrorCode::CORRUPT_MESSAGE,
        StorageError::InvalidBatch { .. } => ErrorCode::INVALID_RECORD,
        StorageError::RecordBatchTooLarge { .. } => ErrorCode::MESSAGE_TOO_LARGE,
        StorageError::StaleLeaderEpoch { .. } => ErrorCode::FENCED_LEADER_EPOCH,
        StorageError::Sequence(osprey_storage::producer::SequenceError::InvalidProducerEpoch { .. }) => {
            ErrorCode::INVALID_PRODUCER_EPOCH
        }
        StorageError::Sequence(osprey_storage::producer::SequenceError::OutOfOrderSequence { .. }) => {
            ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER
        }
        StorageError::Sequence(osprey_storage::producer::SequenceError::CoordinatorFenced { .. }) => {
            ErrorCode::TRANSACTION_COORDINATOR_FENCED
        }
        _ => ErrorCode::UNKNOWN_SERVER_ERROR,
    }
}

async fn respond(topics: Vec<TopicOutcome>, deadline: Option<tokio::time::Instant>) -> ProduceResponse {
    let mut resp = ProduceResponse::default();
    for topic in topics {
        let mut out = TopicProduceResponse { name: topic.name, topic_id: topic.topic_id, ..Default::default() };
        for p in topic.partitions {
            let mut r = PartitionProduceResponse { index: p.index, base_offset: -1, ..Default::default() };
            let mut outcome = p.outcome;
            // A queued append may defer; a deferred one queues its append and resolves to
            // its outcome, so this ends after at most two rounds.
            let outcome = loop {
                outcome = match outcome {
                    Outcome::Queued(queued) => queued.await.unwrap_or_else(|_| never_ran()),
                    Outcome::Deferred(deferred) => deferred.await,
                    done => break done,
                };
            };
            match outcome {
                Outcome::Deferred(_) | Outcome::Queued(_) => unreachable!("resolved above"),
                Outcome::Failed(code, message) => {
                    r.error_code = code.code();
                    r.error_message = message;
                }
                Outcome::Rejected { code, message, record_errors } => {
                    r.error_code = code.code();
                    r.record_errors = record_errors
                        .into_iter()
                        .map(|batch_index| BatchIndexAndErrorMessage {
                            batch_index,
                            batch_index_error_message: Some(message.clone()),
                            ..Default::default()
                        })
                        .collect();
                    r.error_message = Some(message);
                }
                Outcome::Appended { info, durable } => {
                    let truncated = || Err(AckError::Storage(StorageError::Truncated(info.last_offset)));
                    // Kafka's DelayedProduce: the request's remote time.
                    let result = match (durable, deadline) {
                        (Some(rx), Some(deadline)) => match remote_wait(tokio::time::timeout_at(deadline, rx)).await {
                            Ok(acknowledged) => acknowledged.unwrap_or_else(|_| truncated()),
                            Err(_) => Err(AckError::Replication(ErrorCode::REQUEST_TIMED_OUT)),
                        },
                        (Some(rx), None) => remote_wait(rx).await.unwrap_or_else(|_| truncated()),
                        (None, _) => Ok(()),
                    };
                    match result {
                        Ok(()) => {
                            r.base_offset = info.base_offset;
                            r.log_append_time_ms = info.log_append_time;
                            r.log_start_offset = info.log_start_offset;
                        }
                        Err(e) => {
                            let code = e.code();
                            telemetry::error_code(ApiKey::Produce, code);
                            r.error_code = code.code();
                            r.error_message = Some(e.to_string());
                        }
                    }
                }
            }
            if let (Some(name), true) = (&topic.known, r.error_code != ErrorCode::NONE.code()) {
                telemetry::topic_produce_failed(name);
            }
            out.partition_responses.push(r);
        }
        resp.responses.push(out);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::handle;
    use crate::broker::DEFAULT_LISTENER;
    use crate::dispatch::Reply;
    use osprey_cluster::NewTopic;
    use osprey_protocol::messages::{produce_request, ProduceRequest};
    use osprey_protocol::records::{BatchBuilder, Compression};
    use osprey_protocol::ResponseBody;
    use std::sync::atomic::Ordering;

    fn produce(topic: &str, value: &[u8]) -> ProduceRequest {
        let mut batch = BatchBuilder::new(Compression::None);
        batch.append(0, Some(b"k"), Some(value), &[]).unwrap();
        ProduceRequest {
            acks: -1,
            timeout_ms: 30_000,
            topic_data: vec![produce_request::TopicProduceData {
                name: topic.into(),
                partition_data: vec![produce_request::PartitionProduceData {
                    index: 0,
                    records: Some(batch.build().unwrap().into_bytes()),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// A current-thread runtime runs its tasks on the thread that blocks on it; any other
    /// thread it starts is a blocking-pool thread, counted here. The first batches of a new
    /// partition write its leader-epoch checkpoint (fsyncs) and
    /// roll at every batch (14-byte segments): none of it may run on the async worker.
    #[test]
    fn produce_appends_and_rolls_on_the_blocking_pool_in_the_order_dispatched() {
        let (broker, dir) = crate::test_support::broker_in("produce-off-worker");
        let configs = [("segment.bytes".to_string(), "14".to_string())].into_iter().collect();
        let topic =
            NewTopic { name: "t".into(), num_partitions: 1, replication_factor: 1, configs, ..Default::default() };
        let topic = broker.create_topic(&topic, false).unwrap();
        let partition = broker.replica_manager.partition(topic.id, 0).unwrap();

        let (runtime, blocking_threads) = crate::test_support::counting_runtime();
        let offsets = runtime.block_on(async {
            // Pipelined: every request dispatched before any answer is awaited.
            let replies: Vec<Reply> =
                (0..5u8).map(|i| handle(&broker, produce("t", &[i]), 9, &DEFAULT_LISTENER.into())).collect();
            let mut offsets = Vec::new();
            for reply in replies {
                let Reply::Later(pending) = reply else { panic!("{reply:?}") };
                let ResponseBody::Produce(resp) = pending.await else { panic!("not a Produce answer") };
                let answer = &resp.responses[0].partition_responses[0];
                assert_eq!(answer.error_code, 0, "{:?}", answer.error_message);
                offsets.push(answer.base_offset);
            }
            offsets
        });
        assert_eq!(offsets, [0, 1, 2, 3, 4], "appended in the order dispatched");
        assert!(partition.log.segment_count() >= 5, "every batch rolled");
        assert!(blocking_threads.load(Ordering::SeqCst) > 0, "the appends ran on the async worker");
        drop((partition, broker));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
