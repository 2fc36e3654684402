//! ISR changes: the leader's proposals go to the active controller as AlterPartition
//! (Kafka's `AlterPartitionManager`), and the ISR expiration tick.

use crate::broker::Broker;
use crate::cluster_link::ClusterLink;
use crate::partition::IsrRequest;
use osprey_cluster::replica::IsrChange;
use osprey_cluster::PartitionImage;
use osprey_protocol::messages::alter_partition_request::{BrokerState, PartitionData, TopicData};
use osprey_protocol::messages::{AlterPartitionRequest, AlterPartitionResponse};
use osprey_protocol::{ApiKey, ErrorCode, RequestBody, ResponseBody, Uuid};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// The pause before a refused ISR change may be proposed again, and before a request
/// that reached no controller is sent again. A refused expansion (a fenced follower
/// that keeps fetching, KIP-841) would otherwise be proposed at every fetch.
const RETRY_BACKOFF: Duration = Duration::from_millis(500);

/// Sends the queued ISR changes, all that are waiting in one request, until `stopped`.
pub async fn send_isr_changes(
    broker: Arc<Broker>,
    link: Arc<ClusterLink>,
    mut changes: mpsc::UnboundedReceiver<IsrRequest>,
    mut stopped: watch::Receiver<bool>,
) {
    // The changes not answered yet, by partition: a newer proposal for a partition (after
    // a metadata change reset the machine) replaces the older one.
    let mut pending: BTreeMap<(Uuid, i32), IsrRequest> = BTreeMap::new();
    loop {
        if pending.is_empty() {
            tokio::select! {
                _ = stopped.changed() => return,
                next = changes.recv() => match next {
                    Some(request) => { pending.insert((request.topic_id, request.index), request); }
                    None => return,
                },
            }
        }
        while let Ok(request) = changes.try_recv() {
            pending.insert((request.topic_id, request.index), request);
        }
        let Some(broker_epoch) = link.registration().epoch else {
            tokio::select! {
                _ = stopped.changed() => return,
                _ = tokio::time::sleep(RETRY_BACKOFF) => continue,
            }
        };
        let batch: Vec<IsrRequest> = pending.values().cloned().collect();
        let deadline = tokio::time::Instant::now() + link.config().request_timeout;
        let node_id = broker.settings.node_id;
        let sent = tokio::select! {
            _ = stopped.changed() => return,
            sent = link.send_to_controller(ApiKey::AlterPartition, |v| alter_partition(node_id, broker_epoch, &batch, v), deadline) => sent,
        };
        let answer = match sent {
            Ok(response) => match response.body {
                ResponseBody::AlterPartition(answer) => answer,
                other => {
                    tracing::warn!(api = ?other.api_key(), "unexpected answer to AlterPartition");
                    continue;
                }
            },
            Err(e) => {
                tracing::warn!(partitions = batch.len(), error = %e, "ISR changes not sent; trying again");
                crate::telemetry::isr_change_failed("unreachable");
                tokio::time::sleep(RETRY_BACKOFF).await;
                continue;
            }
        };
        let top = error_code(answer.error_code);
        if top != ErrorCode::NONE {
            // STALE_BROKER_EPOCH: this broker registers again; the request is sent again
            // with the new epoch. Anything else: the controller could not take it now.
            tracing::warn!(error = top.name(), partitions = batch.len(), "AlterPartition refused; trying again");
            crate::telemetry::isr_change_failed(top.name());
            tokio::time::sleep(RETRY_BACKOFF).await;
            continue;
        }
        let (refused, stale_controller) = apply_answer(&broker, &batch, answer, &mut pending);
        if stale_controller {
            tokio::select! {
                _ = stopped.changed() => return,
                _ = tokio::time::sleep(RETRY_BACKOFF) => {}
            }
        }
        if !refused.is_empty() {
            // Let the controller's metadata reach this broker before proposing again.
            let broker = broker.clone();
            tokio::spawn(async move {
                tokio::time::sleep(RETRY_BACKOFF).await;
                for ((topic_id, index), change, code) in refused {
                    if let Some(partition) = broker.replica_manager.replica(topic_id, index) {
                        partition.isr_change_refused(&change, code);
                    }
                }
            });
        }
    }
}

/// A partition whose ISR change the controller refused, and why.
type Refused = ((Uuid, i32), IsrChange, ErrorCode);

/// Hands each partition's answer to its replica state machine and removes it from
/// `pending`; returns the partitions whose change the controller refused, and whether
/// some answer came from a stale controller (those stay pending).
fn apply_answer(
    broker: &Broker,
    batch: &[IsrRequest],
    answer: AlterPartitionResponse,
    pending: &mut BTreeMap<(Uuid, i32), IsrRequest>,
) -> (Vec<Refused>, bool) {
    let image = broker.image();
    let mut refused = Vec::new();
    let mut stale_controller = false;
    for topic in answer.topics {
        for p in topic.partitions {
            let key = (topic.topic_id, p.partition_index);
            // Only the change this answer is for: a newer one queued meanwhile stays.
            let Some(sent) = batch.iter().find(|r| (r.topic_id, r.index) == key) else { continue };
            let code = error_code(p.error_code);
            if code == ErrorCode::NOT_CONTROLLER {
                // The controller's image is older than this leader's (a quorum leader cut
                // off from the others, still answering): it decided nothing. The change
                // stays pending and is sent again; handed over as a refusal, it would
                // stay in flight in the replica state machine, waiting for metadata that
                // never comes, and the ISR would never change again (cluster_simulation).
                stale_controller = true;
                continue;
            }
            if pending.get(&key) == Some(sent) {
                pending.remove(&key);
            }
            let Some(partition) = broker.replica_manager.replica(topic.topic_id, p.partition_index) else { continue };
            if code != ErrorCode::NONE {
                tracing::info!(topic = %partition.topic, partition = p.partition_index, error = code.name(), "ISR change refused by the controller");
                crate::telemetry::isr_change_failed(code.name());
                refused.push((key, sent.change.clone(), code));
                continue;
            }
            let Some(current) = image.partition(topic.topic_id, p.partition_index) else { continue };
            tracing::info!(topic = %partition.topic, partition = p.partition_index, isr = ?p.isr, partition_epoch = p.partition_epoch, "ISR changed");
            partition.isr_change_accepted(&PartitionImage {
                leader: p.leader_id,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                isr: p.isr,
                leader_recovery_state: p.leader_recovery_state,
                ..current.clone()
            });
        }
    }
    // Partitions the answer left out are sent again.
    (refused, stale_controller)
}

/// A code from the wire; one this codec does not know counts as UNKNOWN_SERVER_ERROR.
pub(crate) fn error_code(code: i16) -> ErrorCode {
    ErrorCode::from_code(code).unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR)
}

/// The AlterPartition request for `batch`, at `version` (v3 sends each member's broker
/// epoch, KIP-903).
fn alter_partition(broker_id: i32, broker_epoch: i64, batch: &[IsrRequest], version: i16) -> RequestBody {
    let mut topics: Vec<TopicData> = Vec::new();
    for request in batch {
        let data = PartitionData {
            partition_index: request.index,
            leader_epoch: request.change.leader_epoch,
            new_isr: if version < 3 { request.change.new_isr.clone() } else { Vec::new() },
            new_isr_with_epochs: if version >= 3 {
                request
                    .change
                    .new_isr
                    .iter()
                    .zip(&request.broker_epochs)
                    .map(|(&broker_id, &broker_epoch)| BrokerState { broker_id, broker_epoch, ..Default::default() })
                    .collect()
            } else {
                Vec::new()
            },
            partition_epoch: request.change.partition_epoch,
            ..Default::default()
        };
        match topics.iter_mut().find(|t| t.topic_id == request.topic_id) {
            Some(topic) => topic.partitions.push(data),
            None => topics.push(TopicData { topic_id: request.topic_id, partitions: vec![data], ..Default::default() }),
        }
    }
    RequestBody::AlterPartition(AlterPartitionRequest { broker_id, broker_epoch, topics, ..Default::default() })
}

/// Kafka's `isr-expiration` task: every half `replica.lag.time.max.ms`, each partition
/// led here drops the followers that have not caught up for that long.
pub async fn expire_isr(broker: Arc<Broker>, mut stopped: watch::Receiver<bool>) {
    loop {
        let lag_ms = broker.config().replica_lag_time_max_ms.max(2) as u64;
        tokio::select! {
            _ = stopped.changed() => return,
            _ = tokio::time::sleep(Duration::from_millis(lag_ms / 2)) => {}
        }
        for partition in broker.replica_manager.partitions() {
            partition.tick();
        }
    }
}
