//! DescribeLogDirs: the data directory, its partitions' sizes, and the disk's space.

use crate::broker::Broker;
use osprey_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use osprey_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};
use osprey_protocol::ResponseBody;
use std::collections::BTreeMap;
use std::sync::Arc;

pub fn handle(broker: &Arc<Broker>, req: DescribeLogDirsRequest) -> ResponseBody {
    let mut by_topic: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    for p in broker.replica_manager.partitions() {
        let wanted = req
            .topics
            .as_ref()
            .is_none_or(|ts| ts.iter().any(|t| t.topic == p.topic && t.partitions.contains(&p.index)));
        if wanted {
            by_topic.entry(p.topic.clone()).or_default().push(DescribeLogDirsPartition {
                partition_index: p.index,
                partition_size: p.log.size_bytes() as i64,
                offset_lag: 0,
                is_future_key: false,
                ..Default::default()
            });
        }
    }
    let dir = broker.settings.data_dir.canonicalize().unwrap_or_else(|_| broker.settings.data_dir.clone());
    let (total, usable) = disk_space(&dir);
    let result = DescribeLogDirsResult {
        log_dir: dir.display().to_string(),
        topics: by_topic
            .into_iter()
            .map(|(name, mut partitions)| {
                partitions.sort_by_key(|p| p.partition_index);
                DescribeLogDirsTopic { name, partitions, ..Default::default() }
            })
            .collect(),
        total_bytes: total,
        usable_bytes: usable,
        ..Default::default()
    };
    ResponseBody::DescribeLogDirs(DescribeLogDirsResponse { results: vec![result], ..Default::default() })
}

/// (total, available) bytes of the file system holding `dir`; -1 when unknown.
fn disk_space(dir: &std::path::Path) -> (i64, i64) {
    let total = fs4::total_space(dir).map_or(-1, |b| b as i64);
    let usable = fs4::available_space(dir).map_or(-1, |b| b as i64);
    (total, usable)
}
