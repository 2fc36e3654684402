//! How a share partition's leader reaches the share coordinator that keeps the partition's
//! durable state (Kafka's `DefaultStatePersister`): the coordinator is the leader of the
//! `__share_group_state` partition the share partition hashes to
//! (`share_state::partition_for`), here (`crate::share_states`, called directly) or on
//! another broker (the share-group state APIs over the inter-broker listener).
//!
//! Every call is retried while the coordinator is moving or loading (NOT_COORDINATOR,
//! COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, a connection failure), after
//! a back-off, up to [`MAX_ATTEMPTS`] times, as Kafka's persister retries them; other
//! errors are final.
//!
//! Writes of one share partition are ordered by their caller (`crate::share_partitions`
//! sends one at a time per share partition); this module does not reorder what it is given.

use crate::broker::Broker;
use crate::interbroker::{ClientConfig, ClientError, NodeAddress, NodeClients};
use crate::share_states::{ensure_share_state_topic, SHARE_STATE_TOPIC};
use crate::txn_interbroker::{route_to, CoordinatorRoute};
use osprey_coordinator::share_state::{
    partition_for, ReadState, ShareKey, StateBatch, StateError, StateSummary, WriteState,
};
use osprey_protocol::messages::{
    delete_share_group_state_request as delete_req, initialize_share_group_state_request as init_req,
    read_share_group_state_request as read_req, read_share_group_state_summary_request as summary_req,
    write_share_group_state_request as write_req, DeleteShareGroupStateRequest, InitializeShareGroupStateRequest,
    ReadShareGroupStateRequest, ReadShareGroupStateSummaryRequest, WriteShareGroupStateRequest,
};
use osprey_protocol::{ErrorCode, RequestBody, ResponseBody};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Attempts of one call while the coordinator is moving or loading (Kafka's persister
/// also gives up after a bounded number of retries): about 16 s of back-offs, longer
/// than the default `broker.session.timeout.ms` (9 s) after which a dead coordinator's
/// partitions move, so an acknowledgement waits out a coordinator's failover.
pub const MAX_ATTEMPTS: u32 = 20;
/// The first back-off between attempts; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_millis(1000);

/// Connections to other brokers opened on first use, under one client id
/// (`<name>-<node id>`). The share partitions keep two: the share persister's, and the
/// dead-letter queue's Produce requests (`crate::share_dlq`) on their own, as Kafka's DLQ
/// manager has its own network client: a request is answered in order on its connection,
/// so an acks=all Produce waiting up to 30 s must not hold share state writes behind it.
#[derive(Debug)]
pub struct PersisterClients {
    name: &'static str,
    clients: OnceLock<NodeClients>,
}

impl PersisterClients {
    pub const fn new(name: &'static str) -> PersisterClients {
        PersisterClients { name, clients: OnceLock::new() }
    }

    /// The connection to broker `node` at `address`.
    pub fn client(&self, broker: &Broker, node: i32, address: NodeAddress) -> crate::interbroker::NodeClient {
        self.get(broker).client(node, address)
    }

    fn get(&self, broker: &Broker) -> &NodeClients {
        self.clients.get_or_init(|| {
            let mut config = ClientConfig::new(format!("{}-{}", self.name, broker.settings.node_id));
            config.security = broker.settings.interbroker.clone();
            NodeClients::new(config)
        })
    }
}

/// ReadShareGroupState: the durable state of `key`, read by its leader at `leader_epoch`.
/// INVALID_REQUEST when it was never initialised.
pub async fn read(broker: &Arc<Broker>, key: &ShareKey, leader_epoch: i32) -> Result<ReadState, StateError> {
    with_retries(broker, key, "read", |route| async move {
        match route {
            Route::Local => broker.share_states.call(broker, |c, now| c.read(key, leader_epoch, now)),
            Route::Remote(node, address) => {
                let request = ReadShareGroupStateRequest {
                    group_id: key.group_id.clone(),
                    topics: vec![read_req::ReadStateData {
                        topic_id: key.topic_id,
                        partitions: vec![read_req::PartitionData {
                            partition: key.partition,
                            leader_epoch,
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                let response = send(broker, node, address, RequestBody::ReadShareGroupState(request)).await?;
                let ResponseBody::ReadShareGroupState(r) = response else {
                    return Err(unexpected("ReadShareGroupState"));
                };
                let p = r.results.into_iter().flat_map(|t| t.partitions).find(|p| p.partition == key.partition);
                let p = p.ok_or_else(|| missing("ReadShareGroupState"))?;
                check(p.error_code, p.error_message)?;
                let batches = p
                    .state_batches
                    .into_iter()
                    .map(|b| StateBatch {
                        first_offset: b.first_offset,
                        last_offset: b.last_offset,
                        delivery_state: b.delivery_state,
                        delivery_count: b.delivery_count,
                    })
                    .collect();
                Ok(ReadState { state_epoch: p.state_epoch, start_offset: p.start_offset, batches })
            }
        }
    })
    .await
}

/// InitializeShareGroupState: a fresh state for `key` at `start_offset` (-1: the leader
/// resolves `share.auto.offset.reset` when it loads the partition).
pub async fn initialize(
    broker: &Arc<Broker>,
    key: &ShareKey,
    state_epoch: i32,
    start_offset: i64,
) -> Result<(), StateError> {
    with_retries(broker, key, "initialize", |route| async move {
        match route {
            Route::Local => {
                let k = key.clone();
                let rx = broker
                    .share_states
                    .call_later(broker, |c, reply, now| c.initialize(reply, k, state_epoch, start_offset, now));
                rx.await.unwrap_or_else(|_| Err(coordinator_gone()))
            }
            Route::Remote(node, address) => {
                let request = InitializeShareGroupStateRequest {
                    group_id: key.group_id.clone(),
                    topics: vec![init_req::InitializeStateData {
                        topic_id: key.topic_id,
                        partitions: vec![init_req::PartitionData {
                            partition: key.partition,
                            state_epoch,
                            start_offset,
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                let response = send(broker, node, address, RequestBody::InitializeShareGroupState(request)).await?;
                let ResponseBody::InitializeShareGroupState(r) = response else {
                    return Err(unexpected("InitializeShareGroupState"));
                };
                let p = r.results.into_iter().flat_map(|t| t.partitions).find(|p| p.partition == key.partition);
                let p = p.ok_or_else(|| missing("InitializeShareGroupState"))?;
                check(p.error_code, p.error_message)
            }
        }
    })
    .await
}

/// WriteShareGroupState: `write` applied to `key`'s state, answered once durable.
pub async fn write(broker: &Arc<Broker>, key: &ShareKey, write: &WriteState) -> Result<(), StateError> {
    with_retries(broker, key, "write", |route| async move {
        match route {
            Route::Local => {
                let (k, w) = (key.clone(), write.clone());
                let rx = broker.share_states.call_later(broker, |c, reply, now| c.write(reply, k, w, now));
                rx.await.unwrap_or_else(|_| Err(coordinator_gone()))
            }
            Route::Remote(node, address) => {
                let partition = write_req::PartitionData {
                    partition: key.partition,
                    state_epoch: write.state_epoch,
                    leader_epoch: write.leader_epoch,
                    start_offset: write.start_offset,
                    delivery_complete_count: write.delivery_complete_count,
                    state_batches: write
                        .batches
                        .iter()
                        .map(|b| write_req::StateBatch {
                            first_offset: b.first_offset,
                            last_offset: b.last_offset,
                            delivery_state: b.delivery_state,
                            delivery_count: b.delivery_count,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                };
                let request = WriteShareGroupStateRequest {
                    group_id: key.group_id.clone(),
                    topics: vec![write_req::WriteStateData {
                        topic_id: key.topic_id,
                        partitions: vec![partition],
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                let response = send(broker, node, address, RequestBody::WriteShareGroupState(request)).await?;
                let ResponseBody::WriteShareGroupState(r) = response else {
                    return Err(unexpected("WriteShareGroupState"));
                };
                let p = r.results.into_iter().flat_map(|t| t.partitions).find(|p| p.partition == key.partition);
                let p = p.ok_or_else(|| missing("WriteShareGroupState"))?;
                check(p.error_code, p.error_message)
            }
        }
    })
    .await
}

/// DeleteShareGroupState: `key`'s state removed (a tombstone; nothing to do when it has
/// none).
pub async fn delete(broker: &Arc<Broker>, key: &ShareKey) -> Result<(), StateError> {
    with_retries(broker, key, "delete", |route| async move {
        match route {
            Route::Local => {
                let k = key.clone();
                let rx = broker.share_states.call_later(broker, |c, reply, now| c.delete(reply, k, now));
                rx.await.unwrap_or_else(|_| Err(coordinator_gone()))
            }
            Route::Remote(node, address) => {
                let request = DeleteShareGroupStateRequest {
                    group_id: key.group_id.clone(),
                    topics: vec![delete_req::DeleteStateData {
                        topic_id: key.topic_id,
                        partitions: vec![delete_req::PartitionData { partition: key.partition, ..Default::default() }],
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                let response = send(broker, node, address, RequestBody::DeleteShareGroupState(request)).await?;
                let ResponseBody::DeleteShareGroupState(r) = response else {
                    return Err(unexpected("DeleteShareGroupState"));
                };
                let p = r.results.into_iter().flat_map(|t| t.partitions).find(|p| p.partition == key.partition);
                let p = p.ok_or_else(|| missing("DeleteShareGroupState"))?;
                check(p.error_code, p.error_message)
            }
        }
    })
    .await
}

/// ReadShareGroupStateSummary: the start offset and epochs of `key` (-1s when it has no
/// state).
pub async fn read_summary(broker: &Arc<Broker>, key: &ShareKey, leader_epoch: i32) -> Result<StateSummary, StateError> {
    with_retries(broker, key, "read summary", |route| async move {
        match route {
            Route::Local => broker.share_states.call(broker, |c, _| match c.serving_error(key) {
                Some(code) => Err(StateError { code, message: format!("{}: share coordinator moving", code.name()) }),
                None => Ok(c.read_summary(key)),
            }),
            Route::Remote(node, address) => {
                let request = ReadShareGroupStateSummaryRequest {
                    group_id: key.group_id.clone(),
                    topics: vec![summary_req::ReadStateSummaryData {
                        topic_id: key.topic_id,
                        partitions: vec![summary_req::PartitionData {
                            partition: key.partition,
                            leader_epoch,
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                let response = send(broker, node, address, RequestBody::ReadShareGroupStateSummary(request)).await?;
                let ResponseBody::ReadShareGroupStateSummary(r) = response else {
                    return Err(unexpected("ReadShareGroupStateSummary"));
                };
                let p = r.results.into_iter().flat_map(|t| t.partitions).find(|p| p.partition == key.partition);
                let p = p.ok_or_else(|| missing("ReadShareGroupStateSummary"))?;
                check(p.error_code, p.error_message)?;
                Ok(StateSummary {
                    state_epoch: p.state_epoch,
                    leader_epoch: p.leader_epoch,
                    start_offset: p.start_offset,
                    delivery_complete_count: p.delivery_complete_count,
                })
            }
        }
    })
    .await
}

/// Where `key`'s share coordinator is now.
#[derive(Debug, Clone)]
enum Route {
    Local,
    Remote(i32, NodeAddress),
}

/// Runs `attempt` against the current route of `key`, again after a back-off while the
/// error is one of a coordinator moving or loading.
async fn with_retries<'a, T, F, Fut>(
    broker: &'a Arc<Broker>,
    key: &'a ShareKey,
    what: &str,
    attempt: F,
) -> Result<T, StateError>
where
    F: Fn(Route) -> Fut,
    Fut: std::future::Future<Output = Result<T, StateError>> + 'a,
{
    let mut backoff = FIRST_BACKOFF;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let result = match route(broker, key).await {
            Ok(route) => attempt(route).await,
            Err(e) => Err(e),
        };
        match result {
            Err(e) if retriable(e.code) && attempts < MAX_ATTEMPTS => {
                tracing::debug!(
                    group = key.group_id,
                    partition = key.partition,
                    error = e.code.name(),
                    attempts,
                    "share state {what}: retrying"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            other => return other,
        }
    }
}

fn retriable(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NOT_COORDINATOR
            | ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
            | ErrorCode::COORDINATOR_NOT_AVAILABLE
            | ErrorCode::NETWORK_EXCEPTION
            | ErrorCode::REQUEST_TIMED_OUT
    )
}

/// The share coordinator of `key`: the leader of its `__share_group_state` partition,
/// the topic created first when missing (as FindCoordinator does).
async fn route(broker: &Arc<Broker>, key: &ShareKey) -> Result<Route, StateError> {
    if broker.image().topic(SHARE_STATE_TOPIC).is_none() {
        let b = broker.clone();
        let created = tokio::task::spawn_blocking(move || ensure_share_state_topic(&b)).await;
        match created {
            Ok(Ok(_)) => {}
            Ok(Err(code)) => {
                return Err(StateError { code, message: format!("{SHARE_STATE_TOPIC} not available: {}", code.name()) })
            }
            Err(_) => return Err(coordinator_gone()),
        }
    }
    let image = broker.image();
    let index = partition_for(key, broker.share_states.num_partitions());
    let leader =
        image.topic(SHARE_STATE_TOPIC).and_then(|t| t.partitions.get(usize::try_from(index).ok()?)).map(|p| p.leader);
    let Some(leader) = leader else {
        return Err(StateError {
            code: ErrorCode::COORDINATOR_NOT_AVAILABLE,
            message: format!("{SHARE_STATE_TOPIC}-{index} does not exist"),
        });
    };
    match route_to(broker, &image, leader) {
        CoordinatorRoute::Local => Ok(Route::Local),
        CoordinatorRoute::Remote { node, address } => Ok(Route::Remote(node, address)),
        CoordinatorRoute::NotAvailable => Err(StateError {
            code: ErrorCode::COORDINATOR_NOT_AVAILABLE,
            message: format!("{SHARE_STATE_TOPIC}-{index} has no reachable leader"),
        }),
    }
}

async fn send(
    broker: &Arc<Broker>,
    node: i32,
    address: NodeAddress,
    body: RequestBody,
) -> Result<ResponseBody, StateError> {
    let api = body.api_key();
    let client = broker.share_partitions.persister_clients().client(broker, node, address);
    match client.send(body).await {
        Ok(response) => Ok(response.body),
        Err(e @ ClientError::Unsupported { .. })
        | Err(e @ ClientError::InvalidRequest(_))
        | Err(e @ ClientError::MalformedResponse { .. }) => {
            Err(StateError { code: ErrorCode::UNKNOWN_SERVER_ERROR, message: format!("{}: {e}", api.name()) })
        }
        Err(e) => Err(StateError {
            code: ErrorCode::NETWORK_EXCEPTION,
            message: format!("{} to node {node}: {e}", api.name()),
        }),
    }
}

fn check(code: i16, message: Option<String>) -> Result<(), StateError> {
    if code == ErrorCode::NONE.code() {
        return Ok(());
    }
    let code = ErrorCode::from_code(code).unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR);
    Err(StateError { code, message: message.unwrap_or_else(|| code.name().to_string()) })
}

fn unexpected(api: &str) -> StateError {
    StateError {
        code: ErrorCode::UNKNOWN_SERVER_ERROR,
        message: format!("{api}: the share coordinator answered another API"),
    }
}

fn missing(api: &str) -> StateError {
    StateError {
        code: ErrorCode::UNKNOWN_SERVER_ERROR,
        message: format!("{api}: the share coordinator's answer left the partition out"),
    }
}

fn coordinator_gone() -> StateError {
    StateError {
        code: ErrorCode::COORDINATOR_NOT_AVAILABLE,
        message: "the share coordinator dropped the request (shutting down)".into(),
    }
}
