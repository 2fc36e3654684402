//! Transactions between brokers: what the transaction coordinator and the partition
//! leaders send each other when they are not on the same node, as Kafka's
//! `TransactionMarkerChannelManager` and `AddPartitionsToTxnManager` do.
//!
//! - Markers ([`MarkerChannel`]): the coordinator's `WriteMarkers` output is split by
//!   each partition's leader in the metadata image ([`route_markers`]). Partitions led
//!   here are appended locally (`transactions::write_markers`); the others are queued
//!   for their leader, and each leader's queue goes out as WriteTxnMarkers requests, one
//!   at a time per broker (Kafka's marker sender has one request in flight per node),
//!   each carrying every marker queued for that broker meanwhile, across transactions,
//!   up to [`MAX_MARKERS_PER_REQUEST`]. Each partition's result goes back to the
//!   coordinator (`TransactionCoordinator::marker_written`); a retriable one (a leader
//!   move, a connection failure, a timeout) comes back from the coordinator as a new
//!   `WriteMarkers` for that partition, which is routed again after a back-off, so a
//!   marker follows its partition's leadership until it is written.
//! - Verification and implicit adds ([`CoordinatorRoute`], [`send_add_partitions`]):
//!   a partition leader whose transactional id is coordinated elsewhere asks that
//!   coordinator with AddPartitionsToTxn v4+, verify-only for a transaction version 1
//!   producer (KIP-890 part 1), an add for transaction version 2 (KIP-890 part 2).
//!   What the producer finally sees is mapped from the answer by
//!   `handlers::transactions::verification_error`, as Kafka's manager and
//!   `ReplicaManager` map it.

use crate::broker::Broker;
use crate::interbroker::{client_id, ClientConfig, ClientError, NodeAddress, NodeClients};
use osprey_cluster::image::NO_LEADER;
use osprey_cluster::MetadataImage;
use osprey_coordinator::group::partition_for;
use osprey_coordinator::txn::{TopicPartition, TxnMarker, TRANSACTION_STATE_TOPIC_NAME};
use osprey_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTransaction;
use osprey_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use osprey_protocol::messages::{AddPartitionsToTxnRequest, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use osprey_protocol::{ApiKey, ErrorCode, RequestBody, ResponseBody, Uuid};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

/// Markers (one transaction's, for the partitions one broker leads) in one WriteTxnMarkers
/// request at most: a bound on the request's size. More wait for the next request.
pub const MAX_MARKERS_PER_REQUEST: usize = 500;

/// Requests in flight to one coordinator for verifications and implicit adds. Kafka's
/// `AddPartitionsToTxnManager` keeps one and batches what waits behind it; Osprey sends
/// each check on its own, so it lets a few share the connection instead.
const MAX_CHECKS_IN_FLIGHT: usize = 5;

/// Where a transactional id's coordinator is: the leader of its `__transaction_state`
/// partition (`partition_for` over `transaction.state.log.num.partitions`), as
/// FindCoordinator answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinatorRoute {
    /// This broker (or no state topic yet, or a single node): the local coordinator
    /// answers, with its own errors when it does not own the id.
    Local,
    /// Another broker, at its inter-broker listener.
    Remote { node: i32, address: NodeAddress },
    /// The partition has no leader, or its leader is not reachable on the inter-broker
    /// listener: COORDINATOR_NOT_AVAILABLE, which the producer retries.
    NotAvailable,
}

/// The coordinator of `transactional_id` in the current image.
pub fn coordinator_route(broker: &Broker, transactional_id: &str) -> CoordinatorRoute {
    let image = broker.image();
    let partitions = broker.settings.config.transaction_state_log_num_partitions.max(1);
    let leader = image
        .topic(TRANSACTION_STATE_TOPIC_NAME)
        .and_then(|topic| topic.partitions.get(usize::try_from(partition_for(transactional_id, partitions)).ok()?))
        .map(|p| p.leader);
    match leader {
        None => CoordinatorRoute::Local,
        Some(leader) => route_to(broker, &image, leader),
    }
}

/// How to reach the node leading something: here, there, or nowhere.
pub fn route_to(broker: &Broker, image: &MetadataImage, leader: i32) -> CoordinatorRoute {
    if leader == broker.settings.node_id || image.brokers().next().is_none() {
        // A single node has no registrations: everything it holds is led here.
        return CoordinatorRoute::Local;
    }
    if leader == NO_LEADER {
        return CoordinatorRoute::NotAvailable;
    }
    match inter_broker_address(broker, image, leader) {
        Some(address) => CoordinatorRoute::Remote { node: leader, address },
        None => CoordinatorRoute::NotAvailable,
    }
}

/// Broker `node`'s endpoint on `inter.broker.listener.name` (its first listener if it
/// registered none of that name), if it is registered.
pub fn inter_broker_address(broker: &Broker, image: &MetadataImage, node: i32) -> Option<NodeAddress> {
    let name = &broker.settings.config.inter_broker_listener_name;
    let registration = image.broker(node)?;
    let listener = registration.listeners.iter().find(|l| &l.name == name).or(registration.listeners.first())?;
    Some(NodeAddress::new(listener.host.clone(), listener.port))
}

/// Where each partition of a marker goes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MarkerRoutes {
    /// Led here: appended locally.
    pub local: Vec<TopicPartition>,
    /// Led by another broker, by its node id.
    pub remote: BTreeMap<i32, Vec<TopicPartition>>,
    /// The topic or partition is gone from the image (deleted since it joined the
    /// transaction): nothing to mark, as Kafka's `addTxnMarkersToBrokerQueue` drops it.
    pub deleted: Vec<TopicPartition>,
    /// No leader now: retried once one is elected (Kafka's unknown-broker queue).
    pub leaderless: Vec<TopicPartition>,
}

/// What the image says of a partition's leader: `None` when the image does not have the
/// partition, `Some(NO_LEADER)` when it has no leader.
pub type LeaderOf<'a> = dyn Fn(&TopicPartition) -> Option<i32> + 'a;

/// Splits `partitions` by leader (`this_node` for local appends).
pub fn route_markers(partitions: &[TopicPartition], this_node: i32, leader_of: &LeaderOf<'_>) -> MarkerRoutes {
    let mut routes = MarkerRoutes::default();
    for tp in partitions {
        match leader_of(tp) {
            None => routes.deleted.push(tp.clone()),
            Some(NO_LEADER) => routes.leaderless.push(tp.clone()),
            Some(leader) if leader == this_node => routes.local.push(tp.clone()),
            Some(leader) => routes.remote.entry(leader).or_default().push(tp.clone()),
        }
    }
    routes
}

/// The leader of each partition in `image`, as [`route_markers`] asks it; on a single
/// node (no registered brokers) every partition is led here.
pub fn leader_in<'a>(image: &'a MetadataImage, this_node: i32) -> impl Fn(&TopicPartition) -> Option<i32> + 'a {
    let single_node = image.brokers().next().is_none();
    move |(topic, index): &TopicPartition| {
        let partition = image.topic(topic)?.partitions.get(usize::try_from(*index).ok()?)?;
        Some(if single_node { this_node } else { partition.leader })
    }
}

/// One transaction's marker for partitions led by one other broker.
#[derive(Debug, Clone)]
pub struct RemoteMarker {
    pub transactional_id: String,
    pub marker: TxnMarker,
}

/// A partition's marker result, for the coordinator: the error, and whether the next
/// attempt backs off first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerResult {
    pub transactional_id: String,
    pub coordinator_epoch: i32,
    pub partition: TopicPartition,
    pub error: ErrorCode,
    pub retry: bool,
}

/// The clients and queues of the transaction traffic between brokers.
#[derive(Debug)]
pub struct MarkerChannel {
    /// WriteTxnMarkers, client id `broker-<id>-txn-marker-sender`.
    markers: NodeClients,
    /// AddPartitionsToTxn verifications and adds, client id
    /// `AddPartitionsManager-client-<id>` (Kafka's `NetworkUtils.buildNetworkClient`).
    checks: NodeClients,
    /// Markers waiting for each broker, and whether a sender is draining its queue. What
    /// waits is bounded by the coordinator: one entry per pending transaction and broker.
    queues: Mutex<HashMap<i32, NodeQueue>>,
}

#[derive(Debug, Default)]
struct NodeQueue {
    pending: VecDeque<RemoteMarker>,
    sending: bool,
}

impl MarkerChannel {
    /// The channel of broker `node_id`, with Kafka's client defaults (`request.timeout.ms`
    /// 30 s among them).
    /// `security`: what the inter-broker listener asks of a connection.
    pub fn new(node_id: i32, security: &crate::interbroker::Security) -> MarkerChannel {
        let mut markers = ClientConfig::new(client_id::txn_marker_sender(node_id));
        markers.max_in_flight_requests = 1;
        markers.security = security.clone();
        let mut checks = ClientConfig::new(format!("AddPartitionsManager-client-{node_id}"));
        checks.max_in_flight_requests = MAX_CHECKS_IN_FLIGHT;
        checks.security = security.clone();
        MarkerChannel { markers: NodeClients::new(markers), checks: NodeClients::new(checks), queues: Mutex::default() }
    }

    /// Queues `marker` for broker `node`, starting its sender if none runs. Each result
    /// is handed to `report` (the coordinator) as it comes.
    pub fn send(&self, broker: &Arc<Broker>, node: i32, marker: RemoteMarker) {
        let start = {
            let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
            let queue = queues.entry(node).or_default();
            queue.pending.push_back(marker);
            !std::mem::replace(&mut queue.sending, true)
        };
        if start {
            tokio::spawn(drain_node(Arc::downgrade(broker), node));
        }
    }

    /// Takes the next request's worth of markers for `node`; none left ends its sender.
    fn next_batch(&self, node: i32) -> Vec<RemoteMarker> {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(queue) = queues.get_mut(&node) else { return Vec::new() };
        let n = queue.pending.len().min(MAX_MARKERS_PER_REQUEST);
        let batch: Vec<RemoteMarker> = queue.pending.drain(..n).collect();
        if batch.is_empty() {
            queues.remove(&node);
        }
        batch
    }
}

/// Sends `node`'s queued markers, a request at a time, until its queue is empty.
async fn drain_node(broker: std::sync::Weak<Broker>, node: i32) {
    loop {
        let Some(broker) = broker.upgrade() else { return };
        let channel = broker.transactions.channel(&broker);
        let batch = channel.next_batch(node);
        if batch.is_empty() {
            return;
        }
        let results = send_markers(&broker, channel, node, &batch).await;
        broker.transactions.markers_written(&broker, results);
    }
}

/// Sends one WriteTxnMarkers request with `batch` to `node` and maps every partition's
/// outcome.
async fn send_markers(
    broker: &Broker,
    channel: &MarkerChannel,
    node: i32,
    batch: &[RemoteMarker],
) -> Vec<MarkerResult> {
    let image = broker.image();
    let Some(address) = inter_broker_address(broker, &image, node) else {
        // Unregistered since the marker was routed: route it again after a back-off.
        return all_results(batch, ErrorCode::NOT_LEADER_OR_FOLLOWER);
    };
    let client = channel.markers.client(node, address);
    let request = write_txn_markers_request(batch);
    match client.send_with(ApiKey::WriteTxnMarkers, |_| RequestBody::WriteTxnMarkers(request)).await {
        Ok(response) => match response.body {
            ResponseBody::WriteTxnMarkers(resp) => marker_results(batch, &resp),
            _ => all_results(batch, ErrorCode::UNKNOWN_SERVER_ERROR),
        },
        Err(e) => {
            tracing::debug!(node, error = %e, markers = batch.len(), "WriteTxnMarkers failed; the markers will be sent again");
            all_results(batch, transport_error(&e))
        }
    }
}

/// The request for `batch`: one entry per transaction, its partitions by topic.
pub fn write_txn_markers_request(batch: &[RemoteMarker]) -> WriteTxnMarkersRequest {
    let markers = batch
        .iter()
        .map(|m| {
            let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for (topic, index) in &m.marker.partitions {
                topics.entry(topic).or_default().push(*index);
            }
            WritableTxnMarker {
                producer_id: m.marker.producer_id,
                producer_epoch: m.marker.producer_epoch,
                transaction_result: m.marker.committed,
                topics: topics
                    .into_iter()
                    .map(|(name, partition_indexes)| WritableTxnMarkerTopic {
                        name: name.to_string(),
                        partition_indexes,
                        ..Default::default()
                    })
                    .collect(),
                coordinator_epoch: m.marker.coordinator_epoch,
                transaction_version: m.marker.transaction_version,
                ..Default::default()
            }
        })
        .collect();
    WriteTxnMarkersRequest { markers, ..Default::default() }
}

/// Each partition's result from the response. The response names producers, not
/// transactions: a producer has one transaction completing at a time, so its id finds it.
/// A partition the response leaves out is sent again.
pub fn marker_results(batch: &[RemoteMarker], resp: &WriteTxnMarkersResponse) -> Vec<MarkerResult> {
    let mut codes: HashMap<(i64, &str, i32), i16> = HashMap::new();
    for m in &resp.markers {
        for t in &m.topics {
            for p in &t.partitions {
                codes.insert((m.producer_id, t.name.as_str(), p.partition_index), p.error_code);
            }
        }
    }
    let mut results = Vec::new();
    for m in batch {
        for tp in &m.marker.partitions {
            let error = match codes.get(&(m.marker.producer_id, tp.0.as_str(), tp.1)) {
                Some(&code) => ErrorCode::from_code(code).unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR),
                None => ErrorCode::UNKNOWN_SERVER_ERROR,
            };
            results.push(marker_result(m, tp, error));
        }
    }
    results
}

fn all_results(batch: &[RemoteMarker], error: ErrorCode) -> Vec<MarkerResult> {
    batch.iter().flat_map(|m| m.marker.partitions.iter().map(move |tp| marker_result(m, tp, error))).collect()
}

fn marker_result(m: &RemoteMarker, tp: &TopicPartition, error: ErrorCode) -> MarkerResult {
    MarkerResult {
        transactional_id: m.transactional_id.clone(),
        coordinator_epoch: m.marker.coordinator_epoch,
        partition: tp.clone(),
        error,
        retry: marker_retriable(error),
    }
}

/// Whether a partition's marker error is sent again (after a back-off), as Kafka's
/// `TransactionMarkerRequestCompletionHandler` retries it. NONE is done; a fenced
/// coordinator or producer epoch stops the transaction's markers here (a newer
/// coordinator owns it); a partition that cannot hold a marker (UNSUPPORTED_*: the
/// producer could not have written there either) is done. Everything else, the errors
/// Kafka lists as retriable and those it would treat as fatal alike, is retried, so a
/// marker is never lost (the coordinator decides the same, `marker_written`).
pub fn marker_retriable(error: ErrorCode) -> bool {
    use ErrorCode as E;
    !matches!(
        error,
        E::NONE
            | E::INVALID_PRODUCER_EPOCH
            | E::TRANSACTION_COORDINATOR_FENCED
            | E::UNSUPPORTED_FOR_MESSAGE_FORMAT
            | E::UNSUPPORTED_VERSION
    )
}

/// The error a failed request stands for: a timeout as REQUEST_TIMED_OUT, the rest
/// (no connection, a disconnect, a peer that does not serve the request) as
/// NETWORK_EXCEPTION, as Kafka's clients report a disconnection.
pub fn transport_error(e: &ClientError) -> ErrorCode {
    match e {
        ClientError::RequestTimedOut { .. } => ErrorCode::REQUEST_TIMED_OUT,
        _ => ErrorCode::NETWORK_EXCEPTION,
    }
}

/// Sends `transaction` (one partition or more, verify-only or an add) to the coordinator
/// on `node` with AddPartitionsToTxn v4+ and returns the first error among its
/// partitions (NONE when every one is in the transaction), as the local coordinator
/// answers (`TransactionCoordinator::verify`, `add_partitions`): the caller maps it for
/// its client (`handlers::transactions::verification_error`). A request that got no
/// answer is NETWORK_EXCEPTION, as in Kafka's `AddPartitionsToTxnManager`.
pub async fn send_add_partitions(
    broker: &Broker,
    node: i32,
    address: NodeAddress,
    transaction: AddPartitionsToTxnTransaction,
) -> ErrorCode {
    let channel = broker.transactions.channel(broker);
    let client = channel.checks.client(node, address);
    let request = AddPartitionsToTxnRequest { transactions: vec![transaction.clone()], ..Default::default() };
    let sent = client.send_with(ApiKey::AddPartitionsToTxn, |_| RequestBody::AddPartitionsToTxn(request)).await;
    match sent {
        Ok(response) if response.version < 4 => {
            // The peer only takes client versions: it cannot verify for a partition leader.
            tracing::warn!(
                node,
                version = response.version,
                "the transaction coordinator does not serve AddPartitionsToTxn v4+"
            );
            ErrorCode::UNKNOWN_SERVER_ERROR
        }
        Ok(response) => match response.body {
            ResponseBody::AddPartitionsToTxn(resp) => {
                if resp.error_code != 0 {
                    return top_level_error(resp.error_code);
                }
                let codes = resp
                    .results_by_transaction
                    .iter()
                    .filter(|r| r.transactional_id == transaction.transactional_id)
                    .flat_map(|r| r.topic_results.iter())
                    .flat_map(|t| {
                        t.results_by_partition
                            .iter()
                            .map(move |p| ((t.name.as_str(), p.partition_index), p.partition_error_code))
                    })
                    .collect::<HashMap<_, _>>();
                for t in &transaction.topics {
                    for p in &t.partitions {
                        let code = codes.get(&(t.name.as_str(), *p)).copied();
                        let error = code.map_or(ErrorCode::UNKNOWN_SERVER_ERROR, |c| {
                            ErrorCode::from_code(c).unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR)
                        });
                        if error != ErrorCode::NONE {
                            return error;
                        }
                    }
                }
                ErrorCode::NONE
            }
            _ => ErrorCode::UNKNOWN_SERVER_ERROR,
        },
        Err(ClientError::Unsupported { .. }) => ErrorCode::UNKNOWN_SERVER_ERROR,
        Err(e) => {
            tracing::debug!(node, error = %e, "AddPartitionsToTxn to the transaction coordinator failed");
            ErrorCode::NETWORK_EXCEPTION
        }
    }
}

/// A top-level error of an AddPartitionsToTxn v4+ response (the coordinator could not
/// read the request at all): Kafka's manager passes it on, CLUSTER_AUTHORIZATION_FAILED
/// as UNKNOWN_SERVER_ERROR (the producer is not the one unauthorized).
fn top_level_error(code: i16) -> ErrorCode {
    match ErrorCode::from_code(code) {
        Some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED) | None => ErrorCode::UNKNOWN_SERVER_ERROR,
        Some(e) => e,
    }
}

/// The verifications in flight with remote coordinators, by partition and producer
/// (Kafka's `VerificationStateEntry`): held under the marker lock (`transactions.rs`).
/// A marker for the producer on the partition clears them, so an append whose
/// verification started before that marker is refused (its transaction may be the one
/// the marker just ended). Bounded by the produce requests in flight: each entry is
/// removed when its append runs or is abandoned ([`VerificationGuard`]'s drop).
#[derive(Debug, Default)]
pub struct VerificationGuards {
    next_id: u64,
    pending: HashMap<GuardKey, Vec<u64>>,
}

/// (topic id, partition, producer id).
pub type GuardKey = (Uuid, i32, i64);

impl VerificationGuards {
    /// Records a verification about to be sent; its id is its guard.
    pub fn start(&mut self, key: GuardKey) -> u64 {
        self.next_id += 1;
        self.pending.entry(key).or_default().push(self.next_id);
        self.next_id
    }

    /// Ends the verification `id`: whether no marker cleared it meanwhile.
    pub fn finish(&mut self, key: &GuardKey, id: u64) -> bool {
        let Some(ids) = self.pending.get_mut(key) else { return false };
        let Some(at) = ids.iter().position(|&g| g == id) else { return false };
        ids.swap_remove(at);
        if ids.is_empty() {
            self.pending.remove(key);
        }
        true
    }

    /// A marker for the producer landed on the partition: every verification in flight
    /// for it is void.
    pub fn marker_written(&mut self, key: &GuardKey) {
        self.pending.remove(key);
    }

    /// Verifications in flight.
    pub fn len(&self) -> usize {
        self.pending.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// A verification (or transaction version 2 add) sent to a remote coordinator before
/// a partition's first transactional append; the append must present it
/// (`Transactions::append_verified`). Dropped unused (the request failed, the client
/// went away), it leaves the marker lock's table.
#[derive(Debug)]
pub struct VerificationGuard {
    pub(crate) broker: Arc<Broker>,
    pub(crate) key: GuardKey,
    pub(crate) id: u64,
    /// Set once the append took it out of the table (under the marker lock).
    pub(crate) finished: bool,
}

impl Drop for VerificationGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.broker.transactions.verification_abandoned(&self.key, self.id);
        }
    }
}

/// What a transactional append waits for when its coordinator is on another broker.
#[derive(Debug)]
pub struct RemoteCheck {
    pub guard: VerificationGuard,
    pub node: i32,
    pub address: NodeAddress,
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_protocol::messages::write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };

    fn tp(topic: &str, index: i32) -> TopicPartition {
        (topic.to_string(), index)
    }

    fn marker(producer_id: i64, partitions: Vec<TopicPartition>) -> TxnMarker {
        TxnMarker {
            producer_id,
            producer_epoch: 3,
            coordinator_epoch: 7,
            committed: true,
            partitions,
            transaction_version: 2,
        }
    }

    #[test]
    fn markers_are_grouped_by_the_broker_leading_each_partition() {
        let leaders: HashMap<TopicPartition, i32> =
            [(tp("a", 0), 1), (tp("a", 1), 2), (tp("b", 0), 2), (tp("b", 1), 3), (tp("c", 0), NO_LEADER)]
                .into_iter()
                .collect();
        let partitions = vec![tp("a", 0), tp("a", 1), tp("b", 0), tp("b", 1), tp("c", 0), tp("gone", 0)];
        let routes = route_markers(&partitions, 1, &|p| leaders.get(p).copied());
        assert_eq!(routes.local, vec![tp("a", 0)]);
        assert_eq!(routes.remote.get(&2), Some(&vec![tp("a", 1), tp("b", 0)]));
        assert_eq!(routes.remote.get(&3), Some(&vec![tp("b", 1)]));
        assert_eq!(routes.remote.len(), 2);
        assert_eq!(routes.leaderless, vec![tp("c", 0)]);
        assert_eq!(routes.deleted, vec![tp("gone", 0)]);
    }

    #[test]
    fn one_request_carries_every_transaction_queued_for_a_broker_with_its_partitions_by_topic() {
        let batch = vec![
            RemoteMarker {
                transactional_id: "t1".into(),
                marker: marker(10, vec![tp("b", 1), tp("a", 0), tp("b", 0)]),
            },
            RemoteMarker { transactional_id: "t2".into(), marker: marker(11, vec![tp("a", 2)]) },
        ];
        let req = write_txn_markers_request(&batch);
        assert_eq!(req.markers.len(), 2);
        let first = &req.markers[0];
        assert_eq!((first.producer_id, first.producer_epoch, first.coordinator_epoch), (10, 3, 7));
        assert!(first.transaction_result);
        assert_eq!(first.transaction_version, 2);
        let topics: Vec<(&str, &[i32])> =
            first.topics.iter().map(|t| (t.name.as_str(), t.partition_indexes.as_slice())).collect();
        assert_eq!(topics, vec![("a", &[0][..]), ("b", &[1, 0][..])]);
        assert_eq!(req.markers[1].producer_id, 11);
    }

    #[test]
    fn each_partition_gets_its_own_result_and_a_missing_one_is_retried() {
        let batch = vec![
            RemoteMarker { transactional_id: "t1".into(), marker: marker(10, vec![tp("a", 0), tp("a", 1)]) },
            RemoteMarker { transactional_id: "t2".into(), marker: marker(11, vec![tp("b", 0)]) },
        ];
        let result = |index: i32, error: ErrorCode| WritableTxnMarkerPartitionResult {
            partition_index: index,
            error_code: error.code(),
            ..Default::default()
        };
        let resp = WriteTxnMarkersResponse {
            markers: vec![WritableTxnMarkerResult {
                producer_id: 10,
                topics: vec![WritableTxnMarkerTopicResult {
                    name: "a".into(),
                    partitions: vec![result(0, ErrorCode::NONE), result(1, ErrorCode::TRANSACTION_COORDINATOR_FENCED)],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let results = marker_results(&batch, &resp);
        let summary: Vec<(&str, TopicPartition, ErrorCode, bool)> =
            results.iter().map(|r| (r.transactional_id.as_str(), r.partition.clone(), r.error, r.retry)).collect();
        assert_eq!(
            summary,
            vec![
                ("t1", tp("a", 0), ErrorCode::NONE, false),
                ("t1", tp("a", 1), ErrorCode::TRANSACTION_COORDINATOR_FENCED, false),
                ("t2", tp("b", 0), ErrorCode::UNKNOWN_SERVER_ERROR, true),
            ]
        );
        assert!(results.iter().all(|r| r.coordinator_epoch == 7));
    }

    #[test]
    fn marker_errors_are_retried_except_the_final_ones() {
        use ErrorCode as E;
        for retried in [
            E::NOT_LEADER_OR_FOLLOWER,
            E::UNKNOWN_TOPIC_OR_PARTITION,
            E::NOT_ENOUGH_REPLICAS,
            E::NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            E::REQUEST_TIMED_OUT,
            E::KAFKA_STORAGE_ERROR,
            E::NETWORK_EXCEPTION,
        ] {
            assert!(marker_retriable(retried), "{retried:?}");
        }
        for done in [
            E::NONE,
            E::INVALID_PRODUCER_EPOCH,
            E::TRANSACTION_COORDINATOR_FENCED,
            E::UNSUPPORTED_FOR_MESSAGE_FORMAT,
            E::UNSUPPORTED_VERSION,
        ] {
            assert!(!marker_retriable(done), "{done:?}");
        }
    }

    #[test]
    fn a_top_level_error_stands_for_every_partition_cluster_authorization_as_unknown() {
        use ErrorCode as E;
        assert_eq!(top_level_error(E::CLUSTER_AUTHORIZATION_FAILED.code()), E::UNKNOWN_SERVER_ERROR);
        assert_eq!(top_level_error(E::COORDINATOR_LOAD_IN_PROGRESS.code()), E::COORDINATOR_LOAD_IN_PROGRESS);
    }

    #[test]
    fn a_marker_voids_the_verifications_in_flight_for_its_producer_and_partition_only() {
        let topic = Uuid([1; 16]);
        let mut guards = VerificationGuards::default();
        let first = guards.start((topic, 0, 10));
        let second = guards.start((topic, 0, 10));
        let other_producer = guards.start((topic, 0, 11));
        let other_partition = guards.start((topic, 1, 10));
        assert_eq!(guards.len(), 4);
        assert!(guards.finish(&(topic, 0, 10), first), "no marker came: the append may go");
        guards.marker_written(&(topic, 0, 10));
        assert!(!guards.finish(&(topic, 0, 10), second), "a marker came between the check and the append");
        assert!(guards.finish(&(topic, 0, 11), other_producer));
        assert!(guards.finish(&(topic, 1, 10), other_partition));
        assert!(guards.is_empty(), "every finished or voided guard leaves the table");
    }

    #[test]
    fn a_timeout_is_request_timed_out_and_other_failures_a_network_exception() {
        let timeout = ClientError::RequestTimedOut { node: 2, timeout_ms: 30_000 };
        assert_eq!(transport_error(&timeout), ErrorCode::REQUEST_TIMED_OUT);
        let closed = ClientError::Disconnected { node: 2, reason: crate::interbroker::DisconnectReason::PeerClosed };
        assert_eq!(transport_error(&closed), ErrorCode::NETWORK_EXCEPTION);
    }
}
