//! One file per request kind. Each handler takes the decoded request and returns a
//! [`Reply`]: a response now, one that resolves later (fsync, long poll), or nothing.

pub mod acls;
pub mod alter_configs;
pub mod api_versions;
pub mod client_quotas;
#[cfg(test)]
mod cluster_tests;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_log_dirs;
mod describe_quorum;
pub mod describe_topic_partitions;
pub mod elect_leaders;
pub mod fetch;
pub mod find_coordinator;
pub mod groups;
pub mod init_producer_id;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod partition_reassignments;
pub mod produce;
pub mod scram_credentials;
pub mod share_fetch;
pub mod share_group_offsets;
pub mod share_groups;
pub mod share_state;
pub mod streams_groups;
pub mod telemetry_subscriptions;
pub mod transactions;

use crate::access::Access;
use crate::authorization::{self, Finish, Gate};
use crate::broker::Broker;
use crate::dispatch::{Client, Reply, Request};
use osprey_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
use osprey_protocol::{ErrorCode, RequestBody, ResponseBody};
use std::sync::Arc;

/// Routes a decoded request to its handler. A request for a coordinator whose internal
/// topic (`__consumer_offsets`, `__transaction_state`) does not exist yet creates it
/// first, on the blocking pool, as Kafka creates them on first use; the request is
/// then handled as usual (answered with the coordinator's error if creating failed).
pub fn handle(broker: &Arc<Broker>, request: Request, client: &Client) -> Reply {
    if let Some(answer) = share_groups::refused_while_disabled(broker, &request.body) {
        return Reply::Now(answer);
    }
    if let Some(answer) = streams_groups::refused_while_disabled(broker, &request.body) {
        return Reply::Now(answer);
    }
    let access = Access::of(broker, client);
    if !access.enabled() {
        return handle_allowed(broker, request, client);
    }
    let Request { api_key, header, body } = request;
    match authorization::gate(&access, body, header.request_api_version) {
        Gate::Refuse(answer) => Reply::Now(answer),
        Gate::Handle(body, finish) => {
            let reply = handle_allowed(broker, Request { api_key, header, body }, client);
            match finish {
                Some(finish) => finish_reply(reply, finish),
                None => reply,
            }
        }
    }
}

/// `reply` with `finish` applied to its answer, now or when it resolves.
fn finish_reply(reply: Reply, finish: Finish) -> Reply {
    match reply {
        Reply::Now(body) => Reply::Now(finish(body)),
        Reply::Later(pending) => Reply::Later(Box::pin(async move { finish(pending.await) })),
        Reply::Ordered(pending) => Reply::Ordered(Box::pin(async move { finish(pending.await) })),
        // The chunks stay matched to their fields: a finish only appends partitions
        // without records (refused ones).
        Reply::Records(pending) => Reply::Records(Box::pin(async move {
            let answer = pending.await;
            crate::dispatch::Answer { body: finish(answer.body), chunks: answer.chunks }
        })),
        other => other,
    }
}

/// The request once the authorizer (if any) has let it through.
fn handle_allowed(broker: &Arc<Broker>, request: Request, client: &Client) -> Reply {
    let missing = internal_topic_of(&request.body).filter(|(name, _)| broker.image().topic(name).is_none());
    if let Some((name, ensure)) = missing {
        let client = client.clone();
        return after_creating_internal_topic(broker, name, ensure, move |b, _| route(b, request, &client));
    }
    route(broker, request, client)
}

/// The internal topic a request's coordinator writes to, and how to create it.
type Ensure = fn(&Arc<Broker>) -> Result<(), osprey_protocol::ErrorCode>;
fn internal_topic_of(body: &RequestBody) -> Option<(&'static str, Ensure)> {
    use crate::groups::{ensure_offsets_topic, OFFSETS_TOPIC};
    use crate::transactions::ensure_state_topic;
    use osprey_coordinator::txn::TRANSACTION_STATE_TOPIC_NAME;
    let offsets: (&'static str, Ensure) = (OFFSETS_TOPIC, |b| ensure_offsets_topic(b).map(drop));
    let state: (&'static str, Ensure) = (TRANSACTION_STATE_TOPIC_NAME, |b| ensure_state_topic(b).map(drop));
    match body {
        RequestBody::JoinGroup(_)
        | RequestBody::SyncGroup(_)
        | RequestBody::OffsetCommit(_)
        | RequestBody::DeleteGroups(_)
        | RequestBody::OffsetDelete(_)
        | RequestBody::ConsumerGroupHeartbeat(_)
        | RequestBody::ShareGroupHeartbeat(_)
        | RequestBody::StreamsGroupHeartbeat(_) => Some(offsets),
        // AddOffsetsToTxn and TxnOffsetCommit create `__consumer_offsets` themselves.
        RequestBody::InitProducerId(body) if body.transactional_id.is_some() => Some(state),
        RequestBody::AddPartitionsToTxn(_)
        | RequestBody::AddOffsetsToTxn(_)
        | RequestBody::EndTxn(_)
        | RequestBody::TxnOffsetCommit(_) => Some(state),
        _ => None,
    }
}

fn route(broker: &Arc<Broker>, request: Request, client: &Client) -> Reply {
    let version = request.version();
    let client_id = request.header.client_id.clone().unwrap_or_default();
    let client_host = || format!("/{}", client.peer.ip());
    let listener = &client.listener;
    match request.body {
        RequestBody::ApiVersions(body) => Reply::Now(api_versions::handle(broker, &body, version)),
        RequestBody::Metadata(body) if metadata::creates_topics(broker, &body, version) => {
            let listener = listener.clone();
            on_blocking_pool(broker, move |b| metadata::handle(b, body, version, &listener))
        }
        RequestBody::Metadata(body) => Reply::Now(metadata::handle(broker, body, version, listener)),
        RequestBody::Produce(body) => produce::handle(broker, body, version, listener),
        RequestBody::Fetch(mut body) => {
            let follower = body.replica_id >= 0 || body.replica_state.replica_id >= 0;
            if let Some(cap) = crate::quota::fetch_window_bytes(broker, &client.principal, &client_id) {
                if !follower {
                    body.max_bytes = body.max_bytes.min(cap);
                }
            }
            let access = Access::if_enabled(broker, client);
            fetch::handle(broker, body, version, listener, access.as_ref())
        }
        RequestBody::ListOffsets(body) => list_offsets::handle(broker, body, version),
        RequestBody::CreateTopics(body) => create_topics::handle(broker, body, version, client.requester(&client_id)),
        RequestBody::DeleteTopics(body) => {
            let requester = client.requester(&client_id);
            on_blocking_pool(broker, move |b| delete_topics::handle(b, body, version, &requester))
        }
        RequestBody::CreatePartitions(body) => {
            create_partitions::handle(broker, body, version, client.requester(&client_id))
        }
        RequestBody::DeleteRecords(body) => on_blocking_pool(broker, move |b| delete_records::handle(b, body)),
        RequestBody::OffsetForLeaderEpoch(body) => Reply::Now(offset_for_leader_epoch::handle(broker, body)),
        RequestBody::DescribeConfigs(body) => Reply::Now(describe_configs::handle(broker, body, version)),
        RequestBody::AlterConfigs(body) => on_blocking_pool(broker, move |b| alter_configs::handle_alter(b, body)),
        RequestBody::IncrementalAlterConfigs(body) => {
            on_blocking_pool(broker, move |b| alter_configs::handle_incremental(b, body))
        }
        RequestBody::DescribeCluster(body) => Reply::Now(describe_cluster::handle(broker, body, version, listener)),
        RequestBody::DescribeQuorum(body) => describe_quorum::handle(broker, body, version),
        RequestBody::ElectLeaders(body) => elect_leaders::handle(broker, body, version),
        RequestBody::AlterPartitionReassignments(body) => partition_reassignments::alter(broker, body, version),
        RequestBody::ListPartitionReassignments(body) => partition_reassignments::list(broker, body, version),
        RequestBody::DescribeLogDirs(body) => Reply::Now(describe_log_dirs::handle(broker, body)),
        RequestBody::DescribeTopicPartitions(body) => {
            Reply::Now(describe_topic_partitions::handle(broker, body, listener))
        }
        RequestBody::GetTelemetrySubscriptions(body) => Reply::Now(telemetry_subscriptions::handle_get(body)),
        RequestBody::FindCoordinator(body) if find_coordinator::creates_topic(broker, &body, version) => {
            let listener = listener.clone();
            on_blocking_pool(broker, move |b| find_coordinator::handle(b, body, version, &listener))
        }
        RequestBody::FindCoordinator(body) => Reply::Now(find_coordinator::handle(broker, body, version, listener)),
        RequestBody::JoinGroup(body) => groups::join(broker, body, version, &client_id, &client_host()),
        RequestBody::SyncGroup(body) => groups::sync(broker, body, version),
        RequestBody::Heartbeat(body) => Reply::Now(groups::heartbeat(broker, body)),
        RequestBody::LeaveGroup(body) => Reply::Now(groups::leave(broker, body, version)),
        RequestBody::ListGroups(body) => Reply::Now(groups::list(broker, body, version)),
        RequestBody::DescribeGroups(body) => Reply::Now(groups::describe(broker, body, version)),
        RequestBody::DeleteGroups(body) => groups::delete(broker, body),
        RequestBody::OffsetDelete(body) => groups::delete_offsets(broker, body),
        RequestBody::ConsumerGroupHeartbeat(body) => {
            let access = Access::if_enabled(broker, client);
            groups::consumer_heartbeat(broker, body, version, &client_id, &client_host(), access)
        }
        RequestBody::ConsumerGroupDescribe(body) => Reply::Now(groups::consumer_describe(broker, body)),
        RequestBody::ShareFetch(body) => {
            share_fetch::handle_fetch(broker, body, version, client, Access::if_enabled(broker, client))
        }
        RequestBody::ShareAcknowledge(body) => {
            share_fetch::handle_acknowledge(broker, body, Access::if_enabled(broker, client))
        }
        RequestBody::ShareGroupHeartbeat(body) => share_groups::heartbeat(broker, body, &client_id, &client_host()),
        RequestBody::ShareGroupDescribe(body) => Reply::Now(share_groups::describe(broker, body)),
        RequestBody::StreamsGroupHeartbeat(body) => {
            streams_groups::heartbeat(broker, body, client, &client_id, &client_host())
        }
        RequestBody::StreamsGroupDescribe(body) => Reply::Now(streams_groups::describe(broker, body)),
        RequestBody::DescribeShareGroupOffsets(body) => share_group_offsets::describe(broker, body),
        RequestBody::AlterShareGroupOffsets(body) => share_group_offsets::alter(broker, body),
        RequestBody::DeleteShareGroupOffsets(body) => share_group_offsets::delete(broker, body),
        RequestBody::InitializeShareGroupState(body) => share_state::initialize(broker, body),
        RequestBody::ReadShareGroupState(body) => Reply::Now(share_state::read(broker, body)),
        RequestBody::WriteShareGroupState(body) => share_state::write(broker, body),
        RequestBody::DeleteShareGroupState(body) => share_state::delete(broker, body),
        RequestBody::ReadShareGroupStateSummary(body) => Reply::Now(share_state::read_summary(broker, body)),
        RequestBody::OffsetCommit(body) => offset_commit::handle(broker, body, version),
        RequestBody::OffsetFetch(body) => Reply::Now(offset_fetch::handle(broker, body, version)),
        RequestBody::InitProducerId(body) if body.transactional_id.is_some() => {
            transactions::init_producer_id(broker, body, version)
        }
        RequestBody::InitProducerId(body) => on_blocking_pool(broker, move |b| init_producer_id::handle(b, body)),
        RequestBody::AddPartitionsToTxn(body) => transactions::add_partitions(broker, body, version),
        RequestBody::AddOffsetsToTxn(body) => transactions::add_offsets(broker, body, version),
        RequestBody::EndTxn(body) => transactions::end_txn(broker, body, version),
        RequestBody::TxnOffsetCommit(body) => transactions::txn_offset_commit(broker, body, version),
        RequestBody::WriteTxnMarkers(body) => transactions::write_txn_markers(broker, body),
        RequestBody::DescribeTransactions(body) => Reply::Now(transactions::describe_transactions(broker, body)),
        RequestBody::ListTransactions(body) => Reply::Now(transactions::list_transactions(broker, body)),
        RequestBody::DescribeProducers(body) => Reply::Now(transactions::describe_producers(broker, body)),
        RequestBody::DescribeAcls(body) => Reply::Now(acls::describe(&Access::of(broker, client), body)),
        RequestBody::CreateAcls(body) => {
            let access = Access::of(broker, client);
            on_blocking_pool(broker, move |b| acls::create(b, &access, body, version))
        }
        RequestBody::DeleteAcls(body) => {
            let access = Access::of(broker, client);
            on_blocking_pool(broker, move |b| acls::delete(b, &access, body, version))
        }
        RequestBody::PushTelemetry(_) => Reply::Now(telemetry_subscriptions::handle_push()),
        // Authentication happens before the request loop (network.rs, sasl/); here the
        // connection is a PLAINTEXT or SSL one, or already authenticated, as in Kafka's
        // KafkaApis.
        RequestBody::DescribeUserScramCredentials(body) => Reply::Now(scram_credentials::describe(broker, body)),
        RequestBody::AlterUserScramCredentials(body) => {
            on_blocking_pool(broker, move |b| scram_credentials::alter(b, body))
        }
        RequestBody::DescribeClientQuotas(body) => Reply::Now(client_quotas::describe(broker, body)),
        RequestBody::AlterClientQuotas(body) => on_blocking_pool(broker, move |b| client_quotas::alter(b, body)),
        RequestBody::SaslHandshake(_) => Reply::Now(ResponseBody::SaslHandshake(SaslHandshakeResponse {
            error_code: ErrorCode::ILLEGAL_SASL_STATE.code(),
            mechanisms: Vec::new(),
        })),
        RequestBody::SaslAuthenticate(_) => Reply::Now(ResponseBody::SaslAuthenticate(SaslAuthenticateResponse {
            error_code: ErrorCode::ILLEGAL_SASL_STATE.code(),
            error_message: Some("SaslAuthenticate request received after successful authentication".into()),
            ..Default::default()
        })),
        other => Reply::Close(format!("{} has no handler", other.api_key().name())),
    }
}

/// Runs a handler that writes through the controller (metadata-log appends and their
/// fsyncs, creating or deleting partition logs) on the blocking pool, never on an async
/// worker; every other connection goes on meanwhile, and this one's later requests wait
/// for its effect ([`Reply::Ordered`]).
fn on_blocking_pool(broker: &Arc<Broker>, work: impl FnOnce(&Arc<Broker>) -> ResponseBody + Send + 'static) -> Reply {
    let broker = broker.clone();
    Reply::Ordered(Box::pin(async move {
        match tokio::task::spawn_blocking(move || work(&broker)).await {
            Ok(body) => body,
            // Only at runtime shutdown (a panic aborts the process): the connection is
            // going away, and the answer with it.
            Err(e) => {
                tracing::error!(error = %e, "a controller request did not finish");
                std::future::pending().await
            }
        }
    }))
}

/// `then`, at once when the internal topic `name` exists; otherwise after `ensure` has
/// created it on the blocking pool (as [`on_blocking_pool`]). `then` gets `ensure`'s error.
pub(crate) fn after_creating_internal_topic<E: Send + 'static>(
    broker: &Arc<Broker>,
    name: &str,
    ensure: impl FnOnce(&Arc<Broker>) -> Result<(), E> + Send + 'static,
    then: impl FnOnce(&Arc<Broker>, Result<(), E>) -> Reply + Send + 'static,
) -> Reply {
    if broker.image().topic(name).is_some() {
        return then(broker, Ok(()));
    }
    let broker = broker.clone();
    Reply::Ordered(Box::pin(async move {
        let b = broker.clone();
        let Ok(ensured) = tokio::task::spawn_blocking(move || ensure(&b)).await else {
            // Only at runtime shutdown, as in on_blocking_pool.
            return std::future::pending().await;
        };
        match then(&broker, ensured) {
            Reply::Now(body) => body,
            Reply::Later(pending) | Reply::Ordered(pending) => pending.await,
            // The callers answer a request, now or later; neither of these. (Records is
            // a Fetch's, which needs no internal topic.)
            Reply::Nothing | Reply::Close(_) | Reply::Records(_) => std::future::pending().await,
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::Settings;
    use crate::test_support::answer;
    use osprey_cluster::NewTopic;
    use osprey_protocol::messages::{alter_configs_request, incremental_alter_configs_request};
    use osprey_protocol::messages::{AlterConfigsRequest, IncrementalAlterConfigsRequest};
    use osprey_protocol::ApiKey;
    use std::sync::Mutex;
    use std::thread::ThreadId;

    const RESOURCE_TOPIC: i8 = 2;

    /// The broker's topic-config validator runs inside the controller's write: the
    /// threads it ran on are the threads the controller writes ran on.
    #[tokio::test(flavor = "current_thread")]
    async fn config_changes_write_the_metadata_log_off_the_async_worker() {
        let dir = std::env::temp_dir().join(format!("osprey-controller-off-worker-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let ran_on: Arc<Mutex<Vec<ThreadId>>> = Arc::default();
        let record = ran_on.clone();
        let validator = Box::new(move |_: &str, _: &str| {
            record.lock().unwrap().push(std::thread::current().id());
            Ok(())
        });
        let broker = Broker::open(Settings::single_node(addr, dir.clone()), validator).unwrap();
        let topic = NewTopic { name: "t".into(), num_partitions: 1, replication_factor: 1, ..Default::default() };
        broker.create_topic(&topic, false).unwrap();
        ran_on.lock().unwrap().clear();
        // A current-thread runtime: its only worker is this thread.
        let worker = std::thread::current().id();

        let alter = AlterConfigsRequest {
            resources: vec![alter_configs_request::AlterConfigsResource {
                resource_type: RESOURCE_TOPIC,
                resource_name: "t".into(),
                configs: vec![alter_configs_request::AlterableConfig {
                    name: "retention.ms".into(),
                    value: Some("100000".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let ResponseBody::AlterConfigs(resp) =
            answer(&broker, ApiKey::AlterConfigs, 1, RequestBody::AlterConfigs(alter)).await
        else {
            panic!("not an AlterConfigs answer")
        };
        assert_eq!(resp.responses[0].error_code, 0);
        let incremental = IncrementalAlterConfigsRequest {
            resources: vec![incremental_alter_configs_request::AlterConfigsResource {
                resource_type: RESOURCE_TOPIC,
                resource_name: "t".into(),
                configs: vec![incremental_alter_configs_request::AlterableConfig {
                    name: "retention.ms".into(),
                    value: Some("200000".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let body =
            answer(&broker, ApiKey::IncrementalAlterConfigs, 1, RequestBody::IncrementalAlterConfigs(incremental))
                .await;
        let ResponseBody::IncrementalAlterConfigs(resp) = body else { panic!("not an IncrementalAlterConfigs answer") };
        assert_eq!(resp.responses[0].error_code, 0);

        let ran_on = ran_on.lock().unwrap();
        assert!(ran_on.len() >= 2, "each change was validated by the controller");
        assert!(ran_on.iter().all(|t| *t != worker), "a controller write ran on the async worker");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
