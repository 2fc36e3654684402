//! DeleteRecords: move a partition's log start offset forward (-1: to the high
//! watermark); whole segments below it are deleted in the background.

use crate::broker::Broker;
use osprey_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use osprey_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use osprey_protocol::{ApiKey, ErrorCode, ResponseBody};
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: DeleteRecordsRequest) -> ResponseBody {
    let image = broker.image();
    let mut resp = DeleteRecordsResponse::default();
    for t in req.topics {
        let topic = image.topic(&t.name);
        let mut out = DeleteRecordsTopicResult { name: t.name.clone(), ..Default::default() };
        for p in t.partitions {
            let mut r = DeleteRecordsPartitionResult {
                partition_index: p.partition_index,
                low_watermark: -1,
                ..Default::default()
            };
            let found = broker.replica_manager.partition_or_error(
                &image,
                topic,
                p.partition_index,
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            );
            let outcome = match found {
                Err(code) => Err(code),
                Ok(partition) => {
                    let hw = partition.snapshot().high_watermark;
                    let target = if p.offset == -1 { hw } else { p.offset };
                    if target < 0 || target > hw {
                        Err(ErrorCode::OFFSET_OUT_OF_RANGE)
                    } else {
                        let deleted = partition.log.delete_records_before(target).map_err(|e| {
                            tracing::error!(topic = %t.name, partition = p.partition_index, error = %e, "DeleteRecords failed");
                            if e.is_kafka_storage_error() { ErrorCode::KAFKA_STORAGE_ERROR } else { ErrorCode::OFFSET_OUT_OF_RANGE }
                        });
                        // The log start moved: a transaction whose start it passed now
                        // holds the last stable offset there.
                        partition.log_changed();
                        deleted
                    }
                }
            };
            match outcome {
                Ok(low_watermark) => r.low_watermark = low_watermark,
                Err(code) => {
                    crate::telemetry::error_code(ApiKey::DeleteRecords, code);
                    r.error_code = code.code();
                }
            }
            out.partitions.push(r);
        }
        resp.topics.push(out);
    }
    ResponseBody::DeleteRecords(resp)
}
