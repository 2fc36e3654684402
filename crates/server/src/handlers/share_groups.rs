//! ShareGroupHeartbeat v1 and ShareGroupDescribe v1 (KIP-932): share groups' membership,
//! answered by the group coordinator (`osprey_coordinator::group::share`) as
//! ConsumerGroupHeartbeat and ConsumerGroupDescribe are (`groups.rs`).
//!
//! They need share groups on (`share.version` at 1, `osprey.share.version`): otherwise
//! [`refused_while_disabled`] answers them UNSUPPORTED_VERSION before the authorizer is
//! asked, as Kafka's `KafkaApis` does when `isShareGroupProtocolEnabled` is false.

use crate::authorized_operations;
use crate::broker::Broker;
use crate::dispatch::Reply;
use crate::handlers::groups::later;
use crate::handlers::share_group_offsets::RefusedWhole;
use osprey_protocol::messages::describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup;
use osprey_protocol::messages::share_group_describe_response::DescribedGroup;
use osprey_protocol::messages::{
    AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsResponse, DescribeShareGroupOffsetsResponse,
    ShareAcknowledgeResponse, ShareFetchResponse, ShareGroupDescribeRequest, ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse,
};
use osprey_protocol::{ErrorCode, RequestBody, ResponseBody};
use std::sync::Arc;

/// Kafka's message for UNSUPPORTED_VERSION.
const UNSUPPORTED_VERSION_MESSAGE: &str = "The version of API is not supported.";

/// The answer to a share-group request while share groups are off (`share.version` 0):
/// UNSUPPORTED_VERSION, as Kafka's `getErrorResponse` builds it. `None` for any other
/// request, or when share groups are on.
pub fn refused_while_disabled(broker: &Broker, body: &RequestBody) -> Option<ResponseBody> {
    if crate::supported::share_groups_enabled(broker.settings.config.share_version) {
        return None;
    }
    let code = ErrorCode::UNSUPPORTED_VERSION;
    match body {
        RequestBody::ShareGroupHeartbeat(_) => Some(ResponseBody::ShareGroupHeartbeat(ShareGroupHeartbeatResponse {
            error_code: code.code(),
            ..Default::default()
        })),
        RequestBody::ShareGroupDescribe(r) => Some(ResponseBody::ShareGroupDescribe(ShareGroupDescribeResponse {
            groups: r
                .group_ids
                .iter()
                .map(|id| DescribedGroup { group_id: id.clone(), error_code: code.code(), ..Default::default() })
                .collect(),
            ..Default::default()
        })),
        RequestBody::ShareFetch(_) => {
            Some(ResponseBody::ShareFetch(ShareFetchResponse { error_code: code.code(), ..Default::default() }))
        }
        RequestBody::ShareAcknowledge(_) => Some(ResponseBody::ShareAcknowledge(ShareAcknowledgeResponse {
            error_code: code.code(),
            ..Default::default()
        })),
        // Each group refused, with the code alone; Alter and Delete whole, worded.
        RequestBody::DescribeShareGroupOffsets(r) => {
            let groups = r.groups.iter().map(|g| DescribeShareGroupOffsetsResponseGroup {
                group_id: g.group_id.clone(),
                error_code: code.code(),
                ..Default::default()
            });
            let answer = DescribeShareGroupOffsetsResponse { groups: groups.collect(), ..Default::default() };
            Some(ResponseBody::DescribeShareGroupOffsets(answer))
        }
        RequestBody::AlterShareGroupOffsets(_) => Some(ResponseBody::AlterShareGroupOffsets(
            AlterShareGroupOffsetsResponse::refused(code, UNSUPPORTED_VERSION_MESSAGE),
        )),
        RequestBody::DeleteShareGroupOffsets(_) => Some(ResponseBody::DeleteShareGroupOffsets(
            DeleteShareGroupOffsetsResponse::refused(code, UNSUPPORTED_VERSION_MESSAGE),
        )),
        _ => None,
    }
}

/// ShareGroupHeartbeat: the member joins, heartbeats or leaves; the answer waits for the
/// group's records to be durable when it changed them. A share subscription names its
/// topics (no patterns), so the coordinator sees the whole image; the authorizer has
/// checked DESCRIBE on each of them already.
pub fn heartbeat(broker: &Arc<Broker>, req: ShareGroupHeartbeatRequest, client_id: &str, client_host: &str) -> Reply {
    let image = broker.image();
    let rx = broker
        .groups
        .call_later(broker, |c, reply, now| c.share_group_heartbeat(&req, client_id, client_host, &*image, reply, now));
    let fallback =
        ShareGroupHeartbeatResponse { error_code: ErrorCode::COORDINATOR_NOT_AVAILABLE.code(), ..Default::default() };
    later(rx, ResponseBody::ShareGroupHeartbeat(fallback))
}

/// ShareGroupDescribe, with the authorized operations of each group described without
/// error when asked.
pub fn describe(broker: &Arc<Broker>, req: ShareGroupDescribeRequest) -> ResponseBody {
    let mut resp = broker.groups.call(broker, |c, _| c.share_group_describe(&req.group_ids));
    authorized_operations::set_for_groups(&mut resp.groups, req.include_authorized_operations);
    ResponseBody::ShareGroupDescribe(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{answer, broker_with_config};
    use osprey_cluster::NewTopic;
    use osprey_protocol::ApiKey;
    use std::path::PathBuf;

    /// A single node with share groups on (`share_version` 1) or off (0), and a topic `t`
    /// of two partitions.
    fn broker(name: &str, share_version: i16) -> (Arc<Broker>, PathBuf) {
        let (broker, dir) = broker_with_config(name, |c| c.share_version = share_version);
        let topic = NewTopic { name: "t".into(), num_partitions: 2, replication_factor: 1, ..Default::default() };
        broker.create_topic(&topic, false).unwrap();
        (broker, dir)
    }

    async fn heartbeat(
        broker: &Arc<Broker>,
        member_epoch: i32,
        topics: Option<&[&str]>,
    ) -> ShareGroupHeartbeatResponse {
        let req = ShareGroupHeartbeatRequest {
            group_id: "queue".into(),
            member_id: "member-a".into(),
            member_epoch,
            subscribed_topic_names: topics.map(|t| t.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        };
        match answer(broker, ApiKey::ShareGroupHeartbeat, 1, RequestBody::ShareGroupHeartbeat(req)).await {
            ResponseBody::ShareGroupHeartbeat(r) => r,
            other => panic!("{other:?}"),
        }
    }

    async fn describe(broker: &Arc<Broker>, group_ids: &[&str], operations: bool) -> ShareGroupDescribeResponse {
        let req = ShareGroupDescribeRequest {
            group_ids: group_ids.iter().map(|s| s.to_string()).collect(),
            include_authorized_operations: operations,
            ..Default::default()
        };
        match answer(broker, ApiKey::ShareGroupDescribe, 1, RequestBody::ShareGroupDescribe(req)).await {
            ResponseBody::ShareGroupDescribe(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// The first heartbeat creates `__consumer_offsets`, joins the member and assigns it
    /// every partition; ShareGroupDescribe then shows it, with the group's operations
    /// only when asked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_share_member_joins_gets_the_partitions_and_is_described() {
        let (broker, dir) = broker("share-groups-join", 1);
        let joined = heartbeat(&broker, 0, Some(&["t"])).await;
        assert_eq!((joined.error_code, joined.member_id.as_deref(), joined.member_epoch), (0, Some("member-a"), 2));
        let t = broker.image().topic("t").unwrap().id;
        let assignment = joined.assignment.expect("the first answer carries the assignment");
        let assigned: Vec<_> =
            assignment.topic_partitions.iter().map(|tp| (tp.topic_id, tp.partitions.clone())).collect();
        assert_eq!(assigned, [(t, vec![0, 1])]);
        assert!(broker.image().topic(crate::groups::OFFSETS_TOPIC).is_some(), "the group's records need it");
        assert_eq!(heartbeat(&broker, 2, None).await.error_code, 0);

        let described = describe(&broker, &["queue", "missing"], false).await;
        let queue = &described.groups[0];
        assert_eq!((queue.error_code, queue.group_state.as_str(), queue.group_epoch), (0, "Stable", 2));
        assert_eq!(queue.members[0].member_id, "member-a");
        assert_eq!(queue.authorized_operations, authorized_operations::NOT_REQUESTED);
        assert_eq!(described.groups[1].error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
        let described = describe(&broker, &["queue", "missing"], true).await;
        assert_eq!(described.groups[0].authorized_operations, authorized_operations::GROUP);
        assert_eq!(described.groups[1].authorized_operations, authorized_operations::NOT_REQUESTED);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `group.share.heartbeat.interval.ms` and `group.share.max.size` reach the share
    /// groups: the interval members are told, and the member beyond the size refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_share_group_broker_settings_reach_the_coordinator() {
        let (broker, dir) = broker_with_config("share-groups-settings", |c| {
            c.share_version = 1;
            c.group_share.heartbeat_interval_ms = 7_000;
            c.group_share_max_size = 1;
        });
        let topic = NewTopic { name: "t".into(), num_partitions: 2, replication_factor: 1, ..Default::default() };
        broker.create_topic(&topic, false).unwrap();
        let joined = heartbeat(&broker, 0, Some(&["t"])).await;
        assert_eq!((joined.error_code, joined.heartbeat_interval_ms), (0, 7_000));
        let second = ShareGroupHeartbeatRequest {
            group_id: "queue".into(),
            member_id: "member-b".into(),
            member_epoch: 0,
            subscribed_topic_names: Some(vec!["t".into()]),
            ..Default::default()
        };
        let refused =
            match answer(&broker, ApiKey::ShareGroupHeartbeat, 1, RequestBody::ShareGroupHeartbeat(second)).await {
                ResponseBody::ShareGroupHeartbeat(r) => r,
                other => panic!("{other:?}"),
            };
        assert_eq!(refused.error_code, ErrorCode::GROUP_MAX_SIZE_REACHED.code());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `share.version` 0: Kafka's UNSUPPORTED_VERSION for the heartbeat and for every
    /// group described, and no group is made.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn share_group_apis_are_unsupported_while_share_version_is_0() {
        let (broker, dir) = broker("share-groups-off", 0);
        let refused = heartbeat(&broker, 0, Some(&["t"])).await;
        assert_eq!((refused.error_code, refused.member_id, refused.assignment), (35, None, None));
        let described = describe(&broker, &["queue", "other"], true).await;
        let codes: Vec<_> = described.groups.iter().map(|g| (g.group_id.as_str(), g.error_code)).collect();
        assert_eq!(codes, [("queue", 35), ("other", 35)]);
        assert!(broker.groups.call(&broker, |c, _| c.share_group_state("queue")).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
