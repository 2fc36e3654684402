//! OffsetForLeaderEpoch: the end offset of an epoch, from the leader-epoch cache, so a
//! consumer (KIP-320) or follower can detect a diverged log.

use crate::broker::Broker;
use osprey_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use osprey_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: OffsetForLeaderEpochRequest) -> ResponseBody {
    let image = broker.image();
    let mut resp = OffsetForLeaderEpochResponse::default();
    for t in req.topics {
        let topic = image.topic(&t.topic);
        let mut out = OffsetForLeaderTopicResult { topic: t.topic.clone(), ..Default::default() };
        for p in t.partitions {
            let mut r =
                EpochEndOffset { partition: p.partition, leader_epoch: -1, end_offset: -1, ..Default::default() };
            match broker.replica_manager.partition_or_error(
                &image,
                topic,
                p.partition,
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            ) {
                Err(code) => r.error_code = code.code(),
                Ok(partition) if p.current_leader_epoch >= 0 && p.current_leader_epoch < partition.leader_epoch() => {
                    r.error_code = ErrorCode::FENCED_LEADER_EPOCH.code()
                }
                Ok(partition) if p.current_leader_epoch > partition.leader_epoch() => {
                    r.error_code = ErrorCode::UNKNOWN_LEADER_EPOCH.code()
                }
                Ok(partition) => {
                    let (epoch, end_offset) = partition.log.end_offset_for_epoch(p.leader_epoch);
                    r.leader_epoch = epoch;
                    r.end_offset = end_offset;
                }
            }
            if let Some(code) = ErrorCode::from_code(r.error_code) {
                crate::telemetry::error_code(ApiKey::OffsetForLeaderEpoch, code);
            }
            out.partitions.push(r);
        }
        resp.topics.push(out);
    }
    ResponseBody::OffsetForLeaderEpoch(resp)
}
