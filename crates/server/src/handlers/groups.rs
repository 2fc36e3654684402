//! The classic consumer-group APIs, answered by the group coordinator state machine
//! (`osprey_coordinator::group`, bridged by `crate::groups`): JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete.
//! Offsets have their own files (`offset_commit.rs`, `offset_fetch.rs`).

use crate::access::Access;
use crate::authorized_operations;
use crate::broker::Broker;
use crate::dispatch::Reply;
use osprey_coordinator::group::{Response, ShareGroupState, TopicInfo, TopicsView};
use osprey_coordinator::share_state::ShareKey;
use osprey_protocol::messages::delete_groups_response::DeletableGroupResult;
use osprey_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DeleteGroupsRequest,
    DeleteGroupsResponse, DescribeGroupsRequest, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, ListGroupsRequest, OffsetDeleteRequest, OffsetDeleteResponse, SyncGroupRequest,
    SyncGroupResponse,
};
use osprey_protocol::{ErrorCode, ResponseBody};
use std::sync::Arc;
use tokio::sync::oneshot;

/// A response the coordinator gives later; `fallback` if it never does (a bug, but the
/// client must still get an answer).
pub fn later(rx: oneshot::Receiver<Response>, fallback: ResponseBody) -> Reply {
    Reply::Later(Box::pin(async move {
        // Held by the coordinator (a rebalance, a durable write): the request's remote time.
        match crate::telemetry::stages::remote_wait(rx).await {
            Ok(Response::JoinGroup(r)) => ResponseBody::JoinGroup(r),
            Ok(Response::SyncGroup(r)) => ResponseBody::SyncGroup(r),
            Ok(Response::OffsetCommit(r)) => ResponseBody::OffsetCommit(r),
            Ok(Response::DeleteGroups(r)) => ResponseBody::DeleteGroups(r),
            Ok(Response::OffsetDelete(r)) => ResponseBody::OffsetDelete(r),
            Ok(Response::ConsumerGroupHeartbeat(r)) => ResponseBody::ConsumerGroupHeartbeat(r),
            Ok(Response::TxnOffsetCommit(r)) => ResponseBody::TxnOffsetCommit(r),
            Ok(Response::ShareGroupHeartbeat(r)) => ResponseBody::ShareGroupHeartbeat(r),
            // A step of the share-group offsets APIs, or a StreamsGroupHeartbeat's answer
            // with its internal topics to create, answers no request by itself
            // (`share_group_offsets.rs` and `streams_groups.rs` await those).
            Ok(Response::ShareGroupOffsets(_)) | Ok(Response::StreamsGroupHeartbeat(_)) | Err(_) => fallback,
        }
    }))
}

pub fn join(broker: &Arc<Broker>, req: JoinGroupRequest, version: i16, client_id: &str, client_host: &str) -> Reply {
    let rx =
        broker.groups.call_later(broker, |c, reply, now| c.join(&req, version, client_id, client_host, reply, now));
    let fallback = JoinGroupResponse {
        error_code: ErrorCode::COORDINATOR_NOT_AVAILABLE.code(),
        protocol_name: (version < 7).then(String::new),
        ..Default::default()
    };
    later(rx, ResponseBody::JoinGroup(fallback))
}

pub fn sync(broker: &Arc<Broker>, req: SyncGroupRequest, version: i16) -> Reply {
    let rx = broker.groups.call_later(broker, |c, reply, now| c.sync(&req, version, reply, now));
    let fallback = SyncGroupResponse { error_code: ErrorCode::COORDINATOR_NOT_AVAILABLE.code(), ..Default::default() };
    later(rx, ResponseBody::SyncGroup(fallback))
}

pub fn heartbeat(broker: &Arc<Broker>, req: HeartbeatRequest) -> ResponseBody {
    ResponseBody::Heartbeat(broker.groups.call(broker, |c, now| c.heartbeat(&req, now)))
}

pub fn leave(broker: &Arc<Broker>, req: LeaveGroupRequest, version: i16) -> ResponseBody {
    ResponseBody::LeaveGroup(broker.groups.call(broker, |c, now| c.leave(&req, version, now)))
}

pub fn list(broker: &Arc<Broker>, req: ListGroupsRequest, version: i16) -> ResponseBody {
    ResponseBody::ListGroups(
        broker.groups.call(broker, |c, _| c.list_groups(&req.states_filter, &req.types_filter, version)),
    )
}

/// DescribeGroups; v3+ adds the authorized operations of each group described without
/// error, when asked (as Kafka's `KafkaApis.handleDescribeGroupsRequest`).
pub fn describe(broker: &Arc<Broker>, req: DescribeGroupsRequest, version: i16) -> ResponseBody {
    let mut resp = broker.groups.call(broker, |c, _| c.describe_groups(&req.groups, version));
    if version >= 3 {
        authorized_operations::set_for_groups(&mut resp.groups, req.include_authorized_operations);
    }
    ResponseBody::DescribeGroups(resp)
}

/// DeleteGroups. An empty share group's share partitions' state is deleted from the share
/// coordinators first, as Kafka's `GroupCoordinatorService.deleteGroups` does (a share
/// group's state outlives it otherwise, and a group of the same name would start from
/// it); a group whose state cannot be deleted is not deleted, and is answered with the
/// share coordinator's error.
pub fn delete(broker: &Arc<Broker>, req: DeleteGroupsRequest) -> Reply {
    let share_states: Vec<(String, Vec<ShareKey>)> = broker.groups.call(broker, |c, _| {
        req.groups_names
            .iter()
            .filter(|g| c.share_group_state(g) == Some(ShareGroupState::Empty))
            .map(|g| {
                let partitions = c.share_group_initialized_partitions(g).unwrap_or_default();
                let keys = partitions
                    .into_iter()
                    .flat_map(|(topic_id, topic)| {
                        topic.partitions.into_iter().map(move |partition| ShareKey {
                            group_id: g.clone(),
                            topic_id,
                            partition,
                        })
                    })
                    .collect();
                (g.clone(), keys)
            })
            .collect()
    });
    if share_states.iter().all(|(_, keys)| keys.is_empty()) {
        let rx = broker.groups.call_later(broker, |c, reply, _| c.delete_groups(&req.groups_names, reply));
        return later(rx, ResponseBody::DeleteGroups(DeleteGroupsResponse::default()));
    }
    let broker = broker.clone();
    Reply::Later(Box::pin(async move {
        let mut refused = Vec::new();
        for (group_id, keys) in share_states {
            for key in keys {
                if let Err(e) = crate::share_persister::delete(&broker, &key).await {
                    tracing::warn!(
                        group = group_id,
                        partition = key.partition,
                        error = e.code.name(),
                        message = e.message,
                        "share group not deleted: its share state could not be deleted"
                    );
                    refused.push(DeletableGroupResult {
                        group_id: group_id.clone(),
                        error_code: e.code.code(),
                        ..Default::default()
                    });
                    break;
                }
            }
        }
        let names: Vec<String> =
            req.groups_names.into_iter().filter(|g| !refused.iter().any(|r| &r.group_id == g)).collect();
        let rx = broker.groups.call_later(&broker, |c, reply, _| c.delete_groups(&names, reply));
        let mut resp = match crate::telemetry::stages::remote_wait(rx).await {
            Ok(Response::DeleteGroups(resp)) => resp,
            _ => DeleteGroupsResponse::default(),
        };
        resp.results.extend(refused);
        ResponseBody::DeleteGroups(resp)
    }))
}

pub fn delete_offsets(broker: &Arc<Broker>, req: OffsetDeleteRequest) -> Reply {
    let rx = broker.groups.call_later(broker, |c, reply, _| c.delete_offsets(&req, reply));
    let fallback =
        OffsetDeleteResponse { error_code: ErrorCode::COORDINATOR_NOT_AVAILABLE.code(), ..Default::default() };
    later(rx, ResponseBody::OffsetDelete(fallback))
}

/// ConsumerGroupHeartbeat (KIP-848): the server-side assignor computes assignments from
/// the current topics; the answer waits for the group's records to be durable. With an
/// authorizer (`access`), the topics a regular-expression subscription resolves to are
/// those the heartbeating member may DESCRIBE, as Kafka filters them (KAFKA-18813): the
/// group's patterns are resolved with the permissions of the member whose heartbeat
/// resolves them, again whenever the metadata (ACLs included) has moved.
pub fn consumer_heartbeat(
    broker: &Arc<Broker>,
    req: ConsumerGroupHeartbeatRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
    access: Option<Access>,
) -> Reply {
    let image = broker.image();
    let rx = broker.groups.call_later(broker, |c, reply, now| match &access {
        Some(access) => {
            let view = DescribableTopics { image: &image, access };
            c.consumer_group_heartbeat(&req, version, client_id, client_host, &view, reply, now)
        }
        None => c.consumer_group_heartbeat(&req, version, client_id, client_host, &*image, reply, now),
    });
    let fallback = ConsumerGroupHeartbeatResponse {
        error_code: ErrorCode::COORDINATOR_NOT_AVAILABLE.code(),
        member_epoch: -1,
        ..Default::default()
    };
    later(rx, ResponseBody::ConsumerGroupHeartbeat(fallback))
}

/// The metadata image as a regular expression sees it: the topics `access` may DESCRIBE.
/// Topics named outright are looked up unfiltered (the request's own names were checked
/// by the authorizer already, and other members' names are theirs).
struct DescribableTopics<'a> {
    image: &'a osprey_cluster::MetadataImage,
    access: &'a Access,
}

impl TopicsView for DescribableTopics<'_> {
    fn topic(&self, name: &str) -> Option<TopicInfo> {
        TopicsView::topic(self.image, name)
    }
    fn for_each_name(&self, f: &mut dyn FnMut(&str)) {
        self.image.for_each_name(&mut |name| {
            if self.access.allows_quietly(crate::access::kind::TOPIC, name, crate::access::op::DESCRIBE) {
                f(name);
            }
        });
    }
    fn version(&self) -> u64 {
        self.image.version()
    }
    fn consumer_group_overrides(
        &self,
        group_id: &str,
    ) -> osprey_coordinator::group::group_config::ConsumerGroupOverrides {
        self.image.consumer_group_overrides(group_id)
    }
}

/// ConsumerGroupDescribe, with the authorized operations of each group described without
/// error when asked.
pub fn consumer_describe(broker: &Arc<Broker>, req: ConsumerGroupDescribeRequest) -> ResponseBody {
    let mut resp = broker.groups.call(broker, |c, _| c.consumer_group_describe(&req.group_ids));
    authorized_operations::set_for_groups(&mut resp.groups, req.include_authorized_operations);
    ResponseBody::ConsumerGroupDescribe(resp)
}
