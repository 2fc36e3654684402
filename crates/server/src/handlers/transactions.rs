//! The transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
//! WriteTxnMarkers, DescribeTransactions, ListTransactions and DescribeProducers. The
//! coordinator's decisions are `osprey_coordinator::txn`'s; this file checks what Kafka's
//! `KafkaApis` checks before calling in (topics exist, partitions exist) and shapes the
//! answers for each version.

use crate::broker::Broker;
use crate::dispatch::{Pending, Reply};
use crate::groups::{ensure_offsets_topic, OFFSETS_TOPIC};
use crate::handlers::after_creating_internal_topic;
use crate::telemetry;
use crate::telemetry::stages::remote_wait;
use crate::transactions::marker_durable;
use crate::txn_interbroker::{coordinator_route, CoordinatorRoute};
use osprey_coordinator::group;
use osprey_coordinator::txn::{self, transactions_of, TopicPartition};
use osprey_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTransaction;
use osprey_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use osprey_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use osprey_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use osprey_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use osprey_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest, DescribeTransactionsResponse,
    EndTxnRequest, EndTxnResponse, ListTransactionsRequest, ListTransactionsResponse, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::collections::BTreeMap;
use std::sync::Arc;

/// AddPartitionsToTxn v0-5. v0-3 carry one transaction; v4+ (from partition leaders) a
/// list, each either added or only verified (KIP-890 part 1).
pub fn add_partitions(broker: &Arc<Broker>, req: AddPartitionsToTxnRequest, version: i16) -> Reply {
    let mut waiting = Vec::new();
    for transaction in transactions_of(&req, version) {
        let partitions: Vec<TopicPartition> =
            transaction.topics.iter().flat_map(|t| t.partitions.iter().map(move |p| (t.name.clone(), *p))).collect();
        let unknown: Vec<&TopicPartition> = {
            let image = broker.image();
            partitions
                .iter()
                .filter(|(topic, p)| image.topic(topic).is_none_or(|t| *p < 0 || *p as usize >= t.partitions.len()))
                .collect()
        };
        let outcome = if !unknown.is_empty() {
            // Kafka's answer: the missing ones are unknown, the rest not attempted.
            let errors = partitions
                .iter()
                .map(|tp| {
                    let e = if unknown.contains(&tp) {
                        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                    } else {
                        ErrorCode::OPERATION_NOT_ATTEMPTED
                    };
                    (tp.clone(), e)
                })
                .collect();
            Added::Now(errors)
        } else if version >= 4 && transaction.verify_only {
            Added::Now(broker.transactions.call(broker, |c, _| c.verify(&transaction)))
        } else {
            let rx = broker
                .transactions
                .call_later(broker, |c, reply, now| c.add_partitions(&transaction, version, reply, now));
            Added::Later(partitions, rx)
        };
        waiting.push((transaction.transactional_id.clone(), outcome));
    }
    Reply::Later(Box::pin(async move {
        let mut resp = AddPartitionsToTxnResponse::default();
        for (transactional_id, outcome) in waiting {
            let errors = match outcome {
                Added::Now(errors) => errors,
                Added::Later(partitions, rx) => {
                    let error = match remote_wait(rx).await {
                        Ok(txn::Response::AddPartitionsToTxn { error }) => error,
                        _ => ErrorCode::UNKNOWN_SERVER_ERROR,
                    };
                    partitions.into_iter().map(|tp| (tp, error)).collect()
                }
            };
            for (_, e) in &errors {
                if *e != ErrorCode::NONE {
                    telemetry::error_code(ApiKey::AddPartitionsToTxn, *e);
                }
            }
            let topics = topic_results(errors);
            if version >= 4 {
                resp.results_by_transaction.push(AddPartitionsToTxnResult {
                    transactional_id,
                    topic_results: topics,
                    ..Default::default()
                });
            } else {
                resp.results_by_topic_v3_and_below = topics;
            }
        }
        ResponseBody::AddPartitionsToTxn(resp)
    }))
}

enum Added {
    Now(Vec<(TopicPartition, ErrorCode)>),
    Later(Vec<TopicPartition>, tokio::sync::oneshot::Receiver<txn::Response>),
}

fn topic_results(errors: Vec<(TopicPartition, ErrorCode)>) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut by_topic: BTreeMap<String, Vec<AddPartitionsToTxnPartitionResult>> = BTreeMap::new();
    for ((topic, partition_index), e) in errors {
        by_topic.entry(topic).or_default().push(AddPartitionsToTxnPartitionResult {
            partition_index,
            partition_error_code: e.code(),
            ..Default::default()
        });
    }
    by_topic
        .into_iter()
        .map(|(name, results_by_partition)| AddPartitionsToTxnTopicResult {
            name,
            results_by_partition,
            ..Default::default()
        })
        .collect()
}

/// AddOffsetsToTxn v0-4: adds the group's `__consumer_offsets` partition.
pub fn add_offsets(broker: &Arc<Broker>, req: AddOffsetsToTxnRequest, version: i16) -> Reply {
    after_offsets_topic(broker, move |broker, ensured| add_offsets_to_txn(broker, req, version, ensured))
}

/// `then` once `__consumer_offsets` exists (created first, off the async workers, if
/// missing), with the creation's error if it could not be created.
fn after_offsets_topic(
    broker: &Arc<Broker>,
    then: impl FnOnce(&Arc<Broker>, Result<(), ErrorCode>) -> Reply + Send + 'static,
) -> Reply {
    let ensure = |b: &Arc<Broker>| ensure_offsets_topic(b).map(drop);
    after_creating_internal_topic(broker, OFFSETS_TOPIC, ensure, then)
}

fn add_offsets_to_txn(
    broker: &Arc<Broker>,
    req: AddOffsetsToTxnRequest,
    version: i16,
    ensured: Result<(), ErrorCode>,
) -> Reply {
    if let Err(code) = ensured {
        let resp = AddOffsetsToTxnResponse { error_code: code.code(), ..Default::default() };
        return Reply::Now(ResponseBody::AddOffsetsToTxn(resp));
    }
    let rx = broker.transactions.call_later(broker, |c, reply, now| c.add_offsets(&req, version, reply, now));
    Reply::Later(Box::pin(async move {
        let resp = match remote_wait(rx).await {
            Ok(txn::Response::AddOffsetsToTxn(r)) => r,
            _ => AddOffsetsToTxnResponse { error_code: ErrorCode::UNKNOWN_SERVER_ERROR.code(), ..Default::default() },
        };
        count_error(ApiKey::AddOffsetsToTxn, resp.error_code);
        ResponseBody::AddOffsetsToTxn(resp)
    }))
}

/// EndTxn v0-5: commit or abort; answered once PrepareCommit / PrepareAbort is durable.
/// v5 (transaction version 2) bumps the epoch and answers the producer's new id and epoch.
/// When its epoch runs out the producer gets a new id: if the block of producer ids is
/// used up, the next is reserved first on the blocking pool (a metadata-log write), as for
/// InitProducerId, so the coordinator's call (under its lock) writes nothing.
pub fn end_txn(broker: &Arc<Broker>, req: EndTxnRequest, version: i16) -> Reply {
    if version < 5 || !broker.producer_ids_used_up() {
        return Reply::Later(end_transaction(broker, req, version));
    }
    let broker = broker.clone();
    // Ordered: the connection's next request waits until this one reached the coordinator.
    Reply::Ordered(Box::pin(async move {
        let b = broker.clone();
        // A failure here leaves the block empty: the coordinator answers
        // COORDINATOR_LOAD_IN_PROGRESS and the client retries.
        let _ = tokio::task::spawn_blocking(move || b.reserve_producer_ids()).await;
        end_transaction(&broker, req, version).await
    }))
}

fn end_transaction(broker: &Arc<Broker>, req: EndTxnRequest, version: i16) -> Pending {
    let rx = broker.transactions.call_later(broker, |c, reply, now| {
        // Transaction version 2 may move the producer to a new id when its epoch runs out.
        let mut next = || broker.take_producer_id().ok_or(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
        c.end_txn(&req, version, reply, &mut next, now)
    });
    Box::pin(async move {
        let resp = match remote_wait(rx).await {
            Ok(txn::Response::EndTxn(r)) => r,
            _ => EndTxnResponse {
                error_code: ErrorCode::UNKNOWN_SERVER_ERROR.code(),
                producer_id: -1,
                producer_epoch: -1,
                ..Default::default()
            },
        };
        count_error(ApiKey::EndTxn, resp.error_code);
        ResponseBody::EndTxn(resp)
    })
}

/// InitProducerId with a transactional id: the coordinator's answer, once durable. When
/// the block of producer ids is used up, the next is reserved first on the blocking pool,
/// so the coordinator's call (under its lock) writes no metadata.
pub fn init_producer_id(
    broker: &Arc<Broker>,
    req: osprey_protocol::messages::InitProducerIdRequest,
    version: i16,
) -> Reply {
    if !broker.producer_ids_used_up() {
        return Reply::Later(init_transactional_producer(broker, req, version));
    }
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let b = broker.clone();
        // A failure here leaves the block empty: the coordinator answers
        // COORDINATOR_LOAD_IN_PROGRESS and the client retries.
        let _ = tokio::task::spawn_blocking(move || b.reserve_producer_ids()).await;
        init_transactional_producer(&broker, req, version).await
    }))
}

fn init_transactional_producer(
    broker: &Arc<Broker>,
    req: osprey_protocol::messages::InitProducerIdRequest,
    version: i16,
) -> Pending {
    let rx = broker.transactions.call_later(broker, |c, reply, now| {
        let mut next = || broker.take_producer_id().ok_or(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
        c.init_producer_id(&req, version, reply, &mut next, now)
    });
    Box::pin(async move {
        let resp = match remote_wait(rx).await {
            Ok(txn::Response::InitProducerId(r)) => r,
            _ => osprey_protocol::messages::InitProducerIdResponse {
                error_code: ErrorCode::UNKNOWN_SERVER_ERROR.code(),
                producer_id: -1,
                producer_epoch: -1,
                ..Default::default()
            },
        };
        count_error(ApiKey::InitProducerId, resp.error_code);
        ResponseBody::InitProducerId(resp)
    })
}

/// TxnOffsetCommit v0-5: offsets written in the transaction, visible once it commits.
/// Up to v4 the group's offsets partition must already be in the transaction (KIP-890
/// part 1); v5 (transaction version 2) adds it, as the client sent no AddOffsetsToTxn.
pub fn txn_offset_commit(broker: &Arc<Broker>, req: TxnOffsetCommitRequest, version: i16) -> Reply {
    after_offsets_topic(broker, move |broker, ensured| commit_in_txn(broker, req, version, ensured))
}

fn commit_in_txn(
    broker: &Arc<Broker>,
    req: TxnOffsetCommitRequest,
    version: i16,
    ensured: Result<(), ErrorCode>,
) -> Reply {
    let all = |error: ErrorCode| {
        telemetry::error_code(ApiKey::TxnOffsetCommit, error);
        Reply::Now(ResponseBody::TxnOffsetCommit(error_response(&req, error)))
    };
    if let Err(code) = ensured {
        return all(code);
    }
    {
        let image = broker.image();
        if req.topics.iter().any(|t| image.topic(&t.name).is_none()) {
            return all(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
        }
    }
    let offsets_partition = group::partition_for(&req.group_id, broker.settings.offsets_topic_num_partitions);
    let transaction = AddPartitionsToTxnTransaction {
        transactional_id: req.transactional_id.clone(),
        producer_id: req.producer_id,
        producer_epoch: req.producer_epoch,
        // v5 (transaction version 2): the client sent no AddOffsetsToTxn; the partition is
        // added here. Before, it must already be in the transaction.
        verify_only: version < 5,
        topics: vec![osprey_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic {
            name: OFFSETS_TOPIC.to_string(),
            partitions: vec![offsets_partition],
            ..Default::default()
        }],
        ..Default::default()
    };
    // v5: the add, issued now to a local coordinator (in request order). Before v5: the
    // check, answered now by a local coordinator, or sent to a remote one.
    let check: Option<Check> = if version >= 5 {
        Some(Box::pin(crate::transactions::add_implicitly(broker, transaction)))
    } else {
        match coordinator_route(broker, &req.transactional_id) {
            CoordinatorRoute::Local => {
                let verified = broker.transactions.call(broker, |c, _| c.verify(&transaction));
                if let Some(&(_, error)) = verified.iter().find(|(_, e)| *e != ErrorCode::NONE) {
                    return all(offsets_verification_error(error, version));
                }
                None
            }
            CoordinatorRoute::NotAvailable => {
                return all(offsets_verification_error(ErrorCode::COORDINATOR_NOT_AVAILABLE, version))
            }
            CoordinatorRoute::Remote { node, address } => {
                let broker = broker.clone();
                Some(Box::pin(async move {
                    crate::txn_interbroker::send_add_partitions(&broker, node, address, transaction).await
                }))
            }
        }
    };
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        if let Some(check) = check {
            let error = remote_wait(check).await;
            if error != ErrorCode::NONE {
                let error = offsets_verification_error(error, version);
                telemetry::error_code(ApiKey::TxnOffsetCommit, error);
                return ResponseBody::TxnOffsetCommit(error_response(&req, error));
            }
        }
        let rx = broker.groups.call_later(&broker, |c, reply, now| c.txn_commit_offsets(&req, version, reply, now));
        let resp = match remote_wait(rx).await {
            Ok(group::Response::TxnOffsetCommit(r)) => r,
            _ => TxnOffsetCommitResponse::default(),
        };
        for t in &resp.topics {
            for p in &t.partitions {
                count_error(ApiKey::TxnOffsetCommit, p.error_code);
            }
        }
        ResponseBody::TxnOffsetCommit(resp)
    }))
}

/// A check with the transaction coordinator, answered later.
type Check = std::pin::Pin<Box<dyn std::future::Future<Output = ErrorCode> + Send>>;

/// The transaction coordinator's answer about the offsets partition, as TxnOffsetCommit
/// carries it: TRANSACTION_ABORTABLE only from v4, PRODUCER_FENCED as
/// INVALID_PRODUCER_EPOCH, and coordinator trouble as COORDINATOR_LOAD_IN_PROGRESS, which
/// every client retries for this request.
fn offsets_verification_error(error: ErrorCode, version: i16) -> ErrorCode {
    use ErrorCode as E;
    match error {
        E::TRANSACTION_ABORTABLE if version < 4 => E::INVALID_TXN_STATE,
        E::PRODUCER_FENCED => E::INVALID_PRODUCER_EPOCH,
        E::NOT_COORDINATOR | E::COORDINATOR_NOT_AVAILABLE | E::CONCURRENT_TRANSACTIONS | E::NETWORK_EXCEPTION => {
            E::COORDINATOR_LOAD_IN_PROGRESS
        }
        other => other,
    }
}

/// `error` for every partition of `req`, in request order.
fn error_response(req: &TxnOffsetCommitRequest, error: ErrorCode) -> TxnOffsetCommitResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| TxnOffsetCommitResponseTopic {
            name: t.name.clone(),
            partitions: t
                .partitions
                .iter()
                .map(|p| TxnOffsetCommitResponsePartition {
                    partition_index: p.partition_index,
                    error_code: error.code(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    TxnOffsetCommitResponse { topics, ..Default::default() }
}

/// What a partition leader answers for a transactional write the coordinator did not
/// verify: TRANSACTION_ABORTABLE only for versions that know it (`abortable_from`),
/// INVALID_TXN_STATE before; PRODUCER_FENCED as INVALID_PRODUCER_EPOCH (what data
/// requests have always carried); coordinator trouble, and a remote coordinator that did
/// not answer (NETWORK_EXCEPTION), as the retriable NOT_ENOUGH_REPLICAS, as Kafka's
/// `ReplicaManager` does.
pub fn verification_error(error: ErrorCode, version: i16, abortable_from: i16) -> ErrorCode {
    use ErrorCode as E;
    match error {
        E::TRANSACTION_ABORTABLE if version < abortable_from => E::INVALID_TXN_STATE,
        E::PRODUCER_FENCED => E::INVALID_PRODUCER_EPOCH,
        E::NOT_COORDINATOR
        | E::COORDINATOR_NOT_AVAILABLE
        | E::COORDINATOR_LOAD_IN_PROGRESS
        | E::CONCURRENT_TRANSACTIONS
        | E::NETWORK_EXCEPTION => E::NOT_ENOUGH_REPLICAS,
        other => other,
    }
}

/// WriteTxnMarkers v1-2: markers for partitions led here (an admin's abort of a hanging
/// transaction, or another broker's coordinator); answered once each is durable.
pub fn write_txn_markers(broker: &Arc<Broker>, req: WriteTxnMarkersRequest) -> Reply {
    // Each marker is written on its partition's append queue (the blocking pool, in order
    // with the partition's produce appends), then waits to be acknowledged.
    type Written = Result<crate::partition::Acknowledgement, ErrorCode>;
    type Pending = (i32, tokio::sync::oneshot::Receiver<Written>);
    let mut markers = Vec::new();
    for m in req.markers {
        let mut topics = Vec::new();
        for t in m.topics {
            let image = broker.image();
            let topic_image = image.topic(&t.name).cloned();
            let mut partitions: Vec<Result<Pending, (i32, ErrorCode)>> = Vec::new();
            for index in t.partition_indexes {
                let Some(partition) =
                    topic_image.as_ref().and_then(|ti| broker.replica_manager.partition(ti.id, index))
                else {
                    partitions.push(Err((index, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)));
                    continue;
                };
                let marker = (m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result);
                let (b, part) = (broker.clone(), partition.clone());
                let written = broker.replica_manager.append_later(&partition, move || {
                    let info = b.transactions.append_marker_locked(&part, marker)?;
                    Ok(part.acknowledged(info.last_offset, &b.flusher))
                });
                partitions.push(Ok((index, written)));
            }
            topics.push((t.name, topic_image.map(|ti| ti.id), partitions));
        }
        markers.push((m.producer_id, m.transaction_result, topics));
    }
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let mut resp = WriteTxnMarkersResponse::default();
        for (producer_id, committed, topics) in markers {
            let mut result = WritableTxnMarkerResult { producer_id, ..Default::default() };
            for (name, topic_id, partitions) in topics {
                let mut out = WritableTxnMarkerTopicResult { name: name.clone(), ..Default::default() };
                for p in partitions {
                    let (partition_index, error) = match p {
                        Err((index, code)) => (index, code),
                        Ok((index, written)) => match written.await {
                            Ok(Ok(acknowledged)) => match remote_wait(acknowledged).await {
                                Ok(Ok(())) => {
                                    if let Some(id) = topic_id {
                                        marker_durable(&broker, id, &(name.clone(), index), producer_id, committed);
                                    }
                                    (index, ErrorCode::NONE)
                                }
                                _ => (index, ErrorCode::KAFKA_STORAGE_ERROR),
                            },
                            // Logged where it was refused (`append_marker_as_leader`).
                            Ok(Err(code)) => (index, code),
                            Err(_) => (index, ErrorCode::UNKNOWN_SERVER_ERROR),
                        },
                    };
                    count_error(ApiKey::WriteTxnMarkers, error.code());
                    out.partitions.push(WritableTxnMarkerPartitionResult {
                        partition_index,
                        error_code: error.code(),
                        ..Default::default()
                    });
                }
                result.topics.push(out);
            }
            resp.markers.push(result);
        }
        ResponseBody::WriteTxnMarkers(resp)
    }))
}

/// DescribeTransactions v0.
pub fn describe_transactions(broker: &Arc<Broker>, req: DescribeTransactionsRequest) -> ResponseBody {
    let transaction_states =
        broker.transactions.call(broker, |c, _| req.transactional_ids.iter().map(|id| c.describe(id)).collect());
    ResponseBody::DescribeTransactions(DescribeTransactionsResponse { transaction_states, ..Default::default() })
}

/// ListTransactions v0-2; v2's `transactional_id_pattern` is a regular expression the
/// whole id must match (Java's `Matcher.matches`).
pub fn list_transactions(broker: &Arc<Broker>, req: ListTransactionsRequest) -> ResponseBody {
    let pattern = match req.transactional_id_pattern.as_deref().filter(|p| !p.is_empty()) {
        None => None,
        Some(p) => match regex::Regex::new(&format!("^(?:{p})$")) {
            Ok(re) => Some(re),
            Err(_) => {
                telemetry::error_code(ApiKey::ListTransactions, ErrorCode::INVALID_REGULAR_EXPRESSION);
                return ResponseBody::ListTransactions(ListTransactionsResponse {
                    error_code: ErrorCode::INVALID_REGULAR_EXPRESSION.code(),
                    ..Default::default()
                });
            }
        },
    };
    let mut resp = broker.transactions.call(broker, |c, now| c.list(&req, now));
    if let Some(re) = pattern {
        resp.transaction_states.retain(|t| re.is_match(&t.transactional_id));
    }
    ResponseBody::ListTransactions(resp)
}

/// DescribeProducers v0: the producers with state on each partition led here.
pub fn describe_producers(broker: &Arc<Broker>, req: DescribeProducersRequest) -> ResponseBody {
    let image = broker.image();
    let mut resp = DescribeProducersResponse::default();
    for t in req.topics {
        let topic = image.topic(&t.name);
        let mut out = TopicResponse { name: t.name.clone(), ..Default::default() };
        for index in t.partition_indexes {
            let mut p = PartitionResponse { partition_index: index, ..Default::default() };
            match broker.replica_manager.partition_or_error(&image, topic, index, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
            {
                Err(code) => {
                    telemetry::error_code(ApiKey::DescribeProducers, code);
                    p.error_code = code.code();
                }
                Ok(partition) => {
                    let mut producers = partition.log.producer_states();
                    producers.sort_by_key(|(id, _)| *id);
                    p.active_producers = producers
                        .into_iter()
                        .map(|(producer_id, e)| ProducerState {
                            producer_id,
                            producer_epoch: i32::from(e.epoch),
                            last_sequence: e.batches.back().map_or(-1, |b| b.last_seq),
                            last_timestamp: e.batches.back().map_or(-1, |b| b.max_timestamp),
                            coordinator_epoch: e.coordinator_epoch,
                            current_txn_start_offset: e.current_txn_first_offset.unwrap_or(-1),
                            ..Default::default()
                        })
                        .collect();
                }
            }
            out.partitions.push(p);
        }
        resp.topics.push(out);
    }
    ResponseBody::DescribeProducers(resp)
}

fn count_error(api: ApiKey, code: i16) {
    if code != 0 {
        if let Some(e) = ErrorCode::from_code(code) {
            telemetry::error_code(api, e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::write_txn_markers;
    use crate::dispatch::Reply;
    use osprey_cluster::NewTopic;
    use osprey_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
    use osprey_protocol::messages::WriteTxnMarkersRequest;
    use osprey_protocol::ResponseBody;
    use std::sync::atomic::Ordering;

    #[test]
    fn end_txn_v5_reserves_producer_ids_on_the_blocking_pool_not_under_the_coordinator_lock() {
        let (broker, dir) = crate::test_support::broker_in("end-txn-ids");
        crate::transactions::ensure_state_topic(&broker).unwrap();
        assert!(broker.producer_ids_used_up(), "a new broker has no block of producer ids yet");
        let (runtime, blocking_threads) = crate::test_support::counting_runtime();
        let req = osprey_protocol::messages::EndTxnRequest {
            transactional_id: "txn".into(),
            producer_id: 1,
            producer_epoch: i16::MAX - 1,
            committed: true,
            ..Default::default()
        };
        runtime.block_on(async {
            match super::end_txn(&broker, req, 5) {
                Reply::Later(pending) | Reply::Ordered(pending) => drop(pending.await),
                other => panic!("{other:?}"),
            }
        });
        assert!(!broker.producer_ids_used_up(), "the next block was reserved before the coordinator's call");
        assert!(blocking_threads.load(Ordering::SeqCst) > 0, "reserved on the async worker");
        drop(broker);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_coordinator_never_reserves_producer_ids_under_its_lock_and_answers_load_in_progress() {
        let (broker, dir) = crate::test_support::broker_in("txn-ids-empty");
        crate::transactions::ensure_state_topic(&broker).unwrap();
        assert!(broker.producer_ids_used_up(), "a new broker has no block of producer ids yet");
        // A reservation attempted from here stalls (60 s at most) and is seen: the
        // coordinator's own call must not make one.
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let (_release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        *broker.producer_id_stall.lock().unwrap() = Some((entered_tx, release_rx));
        let req = osprey_protocol::messages::InitProducerIdRequest {
            transactional_id: Some("txn".into()),
            transaction_timeout_ms: 60_000,
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let answer = runtime.block_on(async {
            let pending = super::init_transactional_producer(&broker, req, 4);
            tokio::time::timeout(std::time::Duration::from_secs(120), pending).await
        });
        assert!(entered_rx.try_recv().is_err(), "the coordinator reserved producer ids under its lock");
        match answer.expect("InitProducerId not answered within 120 s") {
            ResponseBody::InitProducerId(r) => {
                assert_eq!(r.error_code, osprey_protocol::ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.code())
            }
            other => panic!("{other:?}"),
        }
        *broker.producer_id_stall.lock().unwrap() = None;
        drop(broker);
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn marker_request(producer_id: i64, coordinator_epoch: i32) -> WriteTxnMarkersRequest {
        WriteTxnMarkersRequest {
            markers: vec![WritableTxnMarker {
                producer_id,
                producer_epoch: 0,
                transaction_result: true,
                topics: vec![WritableTxnMarkerTopic {
                    name: "t".into(),
                    partition_indexes: vec![0],
                    ..Default::default()
                }],
                coordinator_epoch,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn marker_error(broker: &std::sync::Arc<crate::broker::Broker>, req: WriteTxnMarkersRequest) -> i16 {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let body = runtime.block_on(async {
            match write_txn_markers(broker, req) {
                Reply::Later(pending) => pending.await,
                other => panic!("{other:?}"),
            }
        });
        let ResponseBody::WriteTxnMarkers(resp) = body else { panic!("not a WriteTxnMarkers answer") };
        resp.markers[0].topics[0].partitions[0].error_code
    }

    /// Kafka's `checkCoordinatorEpoch`: a coordinator that lost its `__transaction_state`
    /// partition (an older coordinator epoch) cannot end the transaction any more.
    #[test]
    fn a_marker_from_an_older_coordinator_epoch_than_the_last_is_fenced() {
        let (broker, dir) = crate::test_support::broker_in("markers-fenced");
        let topic = NewTopic { name: "t".into(), num_partitions: 1, replication_factor: 1, ..Default::default() };
        let topic = broker.create_topic(&topic, false).unwrap();
        let partition = broker.replica_manager.partition(topic.id, 0).unwrap();
        assert_eq!(marker_error(&broker, marker_request(7, 3)), 0);
        assert_eq!(marker_error(&broker, marker_request(7, 3)), 0, "the same coordinator again");
        assert_eq!(
            marker_error(&broker, marker_request(7, 2)),
            osprey_protocol::ErrorCode::TRANSACTION_COORDINATOR_FENCED.code()
        );
        assert_eq!(partition.log.log_end_offset(), 2, "the fenced marker was not written");
        assert_eq!(marker_error(&broker, marker_request(8, 0)), 0, "another producer's epoch is its own");
        assert_eq!(partition.log.producer_state(7).unwrap().coordinator_epoch, 3);
        drop((partition, broker));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A current-thread runtime runs its tasks on the thread that blocks on it; any other
    /// thread it starts is a blocking-pool thread, counted here. The marker is the first
    /// batch of its partition: its leader-epoch checkpoint fsyncs there too.
    #[test]
    fn write_txn_markers_writes_the_marker_on_the_blocking_pool() {
        let (broker, dir) = crate::test_support::broker_in("markers-off-worker");
        let topic = NewTopic { name: "t".into(), num_partitions: 1, replication_factor: 1, ..Default::default() };
        let topic = broker.create_topic(&topic, false).unwrap();
        let partition = broker.replica_manager.partition(topic.id, 0).unwrap();

        let (runtime, blocking_threads) = crate::test_support::counting_runtime();
        let req = WriteTxnMarkersRequest {
            markers: vec![WritableTxnMarker {
                producer_id: 7,
                producer_epoch: 0,
                transaction_result: false,
                topics: vec![WritableTxnMarkerTopic {
                    name: "t".into(),
                    partition_indexes: vec![0],
                    ..Default::default()
                }],
                coordinator_epoch: 0,
                ..Default::default()
            }],
            ..Default::default()
        };
        let body = runtime.block_on(async {
            match write_txn_markers(&broker, req) {
                Reply::Later(pending) => pending.await,
                other => panic!("{other:?}"),
            }
        });
        let ResponseBody::WriteTxnMarkers(resp) = body else { panic!("not a WriteTxnMarkers answer") };
        assert_eq!(resp.markers[0].topics[0].partitions[0].error_code, 0);
        assert_eq!(partition.log.log_end_offset(), 1, "the marker was written");
        assert!(blocking_threads.load(Ordering::SeqCst) > 0, "the marker was written on the async worker");
        drop((partition, broker));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
