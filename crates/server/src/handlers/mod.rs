//! One file per request kind. Each handler takes the decoded request and returns a
//! [`Reply`]: a response now, one that resolves later (fsync, long poll), or nothing.

pub mod acls;
pub mod alter_configs;
pub mod api_versions;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_log_dirs;
pub mod describe_topic_partitions;
pub mod fetch;
pub mod find_coordinator;
pub mod groups;
pub mod init_producer_id;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod telemetry_subscriptions;
pub mod transactions;

use crate::broker::Broker;
use crate::dispatch::{Reply, Request};
use osprey_protocol::RequestBody;
use std::sync::Arc;

/// Routes a decoded request to its handler.
pub fn handle(broker: &Arc<Broker>, request: Request, peer: std::net::SocketAddr) -> Reply {
    let version = request.version();
    let client_id = request.header.client_id.clone().unwrap_or_default();
    match request.body {
        RequestBody::ApiVersions(body) => Reply::Now(api_versions::handle(broker, &body, version)),
        RequestBody::Metadata(body) => Reply::Now(metadata::handle(broker, body, version)),
        RequestBody::Produce(body) => produce::handle(broker, body, version),
        RequestBody::Fetch(body) => fetch::handle(broker, body, version),
        RequestBody::ListOffsets(body) => list_offsets::handle(broker, body, version),
        RequestBody::CreateTopics(body) => create_topics::handle(broker, body, version),
        RequestBody::DeleteTopics(body) => Reply::Now(delete_topics::handle(broker, body, version)),
        RequestBody::CreatePartitions(body) => create_partitions::handle(broker, body),
        RequestBody::DeleteRecords(body) => Reply::Now(delete_records::handle(broker, body)),
        RequestBody::OffsetForLeaderEpoch(body) => Reply::Now(offset_for_leader_epoch::handle(broker, body)),
        RequestBody::DescribeConfigs(body) => Reply::Now(describe_configs::handle(broker, body, version)),
        RequestBody::AlterConfigs(body) => Reply::Now(alter_configs::handle_alter(broker, body)),
        RequestBody::IncrementalAlterConfigs(body) => Reply::Now(alter_configs::handle_incremental(broker, body)),
        RequestBody::DescribeCluster(body) => Reply::Now(describe_cluster::handle(broker, body, version)),
        RequestBody::DescribeLogDirs(body) => Reply::Now(describe_log_dirs::handle(broker, body)),
        RequestBody::DescribeTopicPartitions(body) => Reply::Now(describe_topic_partitions::handle(broker, body)),
        RequestBody::GetTelemetrySubscriptions(body) => Reply::Now(telemetry_subscriptions::handle_get(body)),
        RequestBody::FindCoordinator(body) => Reply::Now(find_coordinator::handle(broker, body, version)),
        RequestBody::JoinGroup(body) => groups::join(broker, body, version, &client_id, &format!("/{}", peer.ip())),
        RequestBody::SyncGroup(body) => groups::sync(broker, body, version),
        RequestBody::Heartbeat(body) => Reply::Now(groups::heartbeat(broker, body)),
        RequestBody::LeaveGroup(body) => Reply::Now(groups::leave(broker, body, version)),
        RequestBody::ListGroups(body) => Reply::Now(groups::list(broker, body, version)),
        RequestBody::DescribeGroups(body) => Reply::Now(groups::describe(broker, body, version)),
        RequestBody::DeleteGroups(body) => groups::delete(broker, body),
        RequestBody::OffsetDelete(body) => groups::delete_offsets(broker, body),
        RequestBody::ConsumerGroupHeartbeat(body) => {
            groups::consumer_heartbeat(broker, body, version, &client_id, &format!("/{}", peer.ip()))
        }
        RequestBody::ConsumerGroupDescribe(body) => Reply::Now(groups::consumer_describe(broker, body)),
        RequestBody::OffsetCommit(body) => offset_commit::handle(broker, body, version),
        RequestBody::OffsetFetch(body) => Reply::Now(offset_fetch::handle(broker, body, version)),
        RequestBody::InitProducerId(body) if body.transactional_id.is_some() => {
            transactions::init_producer_id(broker, body, version)
        }
        RequestBody::InitProducerId(body) => Reply::Now(init_producer_id::handle(broker, body)),
        RequestBody::AddPartitionsToTxn(body) => transactions::add_partitions(broker, body, version),
        RequestBody::AddOffsetsToTxn(body) => transactions::add_offsets(broker, body, version),
        RequestBody::EndTxn(body) => transactions::end_txn(broker, body, version),
        RequestBody::TxnOffsetCommit(body) => transactions::txn_offset_commit(broker, body, version),
        RequestBody::WriteTxnMarkers(body) => transactions::write_txn_markers(broker, body),
        RequestBody::DescribeTransactions(body) => Reply::Now(transactions::describe_transactions(broker, body)),
        RequestBody::ListTransactions(body) => Reply::Now(transactions::list_transactions(broker, body)),
        RequestBody::DescribeProducers(body) => Reply::Now(transactions::describe_producers(broker, body)),
        RequestBody::DescribeAcls(_) => Reply::Now(acls::describe()),
        RequestBody::CreateAcls(body) => Reply::Now(acls::create(body)),
        RequestBody::DeleteAcls(body) => Reply::Now(acls::delete(body)),
        RequestBody::PushTelemetry(_) => Reply::Now(telemetry_subscriptions::handle_push()),
        other => Reply::Close(format!("{} has no handler", other.api_key().name())),
    }
}
