//! The share-group state APIs (InitializeShareGroupState, ReadShareGroupState,
//! WriteShareGroupState, DeleteShareGroupState, ReadShareGroupStateSummary), the streams
//! group APIs (StreamsGroupHeartbeat, StreamsGroupDescribe) and the records of
//! `__share_group_state` against Kafka's own encoding: the `.hex` files under
//! `tests/golden/kafka-share/` were written by Kafka 4.4's generated message classes
//! (`GoldenShareMessages.java` there) from the values built below. Each must decode to
//! exactly those values and re-encode to exactly Kafka's bytes, at every version.

mod kafka_golden;

use bytes::Buf;
use kafka_golden::{A, B};
use osprey_protocol::messages::*;
use osprey_protocol::Message;

const DIR: &str = "kafka-share";

fn check<M: Message>(name: &str, version: i16, expected: M) {
    kafka_golden::check(DIR, name, version, expected);
}

/// A record of `__share_group_state` as Kafka writes it: an int16 (a key's record type, a
/// value's version) and then the body, which must match `expected` at `version`.
fn check_record<M: Message>(name: &str, prefix: i16, version: i16, expected: M) {
    let mut bytes = kafka_golden::kafka_bytes(DIR, &format!("{name}-record"));
    assert_eq!(bytes.get_i16(), prefix, "{name}: the int16 before the record");
    kafka_golden::check_bytes(name, bytes, version, expected);
}

#[test]
fn initialize_share_group_state_matches_kafka() {
    use initialize_share_group_state_request as req;
    use initialize_share_group_state_response as resp;
    let partition =
        |partition, start_offset| req::PartitionData { partition, state_epoch: 3, start_offset, ..Default::default() };
    let request = InitializeShareGroupStateRequest {
        group_id: "share-g".into(),
        topics: vec![req::InitializeStateData {
            topic_id: A,
            partitions: vec![partition(0, -1), partition(4, 1234)],
            ..Default::default()
        }],
        ..Default::default()
    };
    check("InitializeShareGroupStateRequest", 0, request);
    let response = InitializeShareGroupStateResponse {
        results: vec![resp::InitializeStateResult {
            topic_id: A,
            partitions: vec![
                resp::PartitionResult { partition: 0, ..Default::default() },
                resp::PartitionResult {
                    partition: 4,
                    error_code: 124,
                    error_message: Some("fenced state epoch".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        ..Default::default()
    };
    check("InitializeShareGroupStateResponse", 0, response);
}

#[test]
fn read_share_group_state_matches_kafka() {
    use read_share_group_state_request as req;
    use read_share_group_state_response as resp;
    let request = ReadShareGroupStateRequest {
        group_id: "share-g".into(),
        topics: vec![req::ReadStateData {
            topic_id: B,
            partitions: vec![req::PartitionData { partition: 2, leader_epoch: 7, ..Default::default() }],
            ..Default::default()
        }],
        ..Default::default()
    };
    check("ReadShareGroupStateRequest", 0, request);
    let batch = |first_offset, last_offset, delivery_state, delivery_count| resp::StateBatch {
        first_offset,
        last_offset,
        delivery_state,
        delivery_count,
        ..Default::default()
    };
    let response = ReadShareGroupStateResponse {
        results: vec![resp::ReadStateResult {
            topic_id: B,
            partitions: vec![resp::PartitionResult {
                partition: 2,
                state_epoch: 3,
                start_offset: 100,
                state_batches: vec![batch(100, 109, 0, 1), batch(110, 110, 4, 5)],
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    check("ReadShareGroupStateResponse", 0, response);
}

#[test]
fn write_share_group_state_matches_kafka_at_every_version() {
    use write_share_group_state_request as req;
    use write_share_group_state_response as resp;
    for version in 0..=1 {
        let partition = req::PartitionData {
            partition: 2,
            state_epoch: 3,
            leader_epoch: 7,
            start_offset: 100,
            delivery_complete_count: if version >= 1 { 50 } else { -1 },
            state_batches: vec![req::StateBatch {
                first_offset: 100,
                last_offset: 149,
                delivery_state: 2,
                delivery_count: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        let request = WriteShareGroupStateRequest {
            group_id: "share-g".into(),
            topics: vec![req::WriteStateData { topic_id: B, partitions: vec![partition], ..Default::default() }],
            ..Default::default()
        };
        check("WriteShareGroupStateRequest", version, request);
        let response = WriteShareGroupStateResponse {
            results: vec![resp::WriteStateResult {
                topic_id: B,
                partitions: vec![resp::PartitionResult { partition: 2, error_code: 74, ..Default::default() }],
                ..Default::default()
            }],
            ..Default::default()
        };
        check("WriteShareGroupStateResponse", version, response);
    }
}

/// Kafka drops delivery_complete_count (ignorable) when writing v0, rather than failing.
#[test]
fn write_share_group_state_v0_leaves_out_delivery_complete_count() {
    use write_share_group_state_request as req;
    let request = WriteShareGroupStateRequest {
        topics: vec![req::WriteStateData {
            partitions: vec![req::PartitionData { delivery_complete_count: 50, ..Default::default() }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut v0 = bytes::BytesMut::new();
    request.encode(&mut v0, 0).expect("an ignorable field is left out of v0");
    let decoded = WriteShareGroupStateRequest::decode_exact(v0.freeze(), 0).expect("decodes");
    assert_eq!(decoded.topics[0].partitions[0].delivery_complete_count, -1);
}

#[test]
fn delete_share_group_state_matches_kafka() {
    use delete_share_group_state_request as req;
    use delete_share_group_state_response as resp;
    let partition = |partition| req::PartitionData { partition, ..Default::default() };
    let request = DeleteShareGroupStateRequest {
        group_id: "share-g".into(),
        topics: vec![req::DeleteStateData {
            topic_id: A,
            partitions: vec![partition(0), partition(1)],
            ..Default::default()
        }],
        ..Default::default()
    };
    check("DeleteShareGroupStateRequest", 0, request);
    let response = DeleteShareGroupStateResponse {
        results: vec![resp::DeleteStateResult {
            topic_id: A,
            partitions: vec![resp::PartitionResult {
                partition: 0,
                error_code: 69,
                error_message: Some("unknown group".into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    check("DeleteShareGroupStateResponse", 0, response);
}

#[test]
fn read_share_group_state_summary_matches_kafka_at_every_version() {
    use read_share_group_state_summary_request as req;
    use read_share_group_state_summary_response as resp;
    for version in 0..=1 {
        let request = ReadShareGroupStateSummaryRequest {
            group_id: "share-g".into(),
            topics: vec![req::ReadStateSummaryData {
                topic_id: A,
                partitions: vec![req::PartitionData { partition: 1, leader_epoch: 7, ..Default::default() }],
                ..Default::default()
            }],
            ..Default::default()
        };
        check("ReadShareGroupStateSummaryRequest", version, request);
        let response = ReadShareGroupStateSummaryResponse {
            results: vec![resp::ReadStateSummaryResult {
                topic_id: A,
                partitions: vec![resp::PartitionResult {
                    partition: 1,
                    state_epoch: 3,
                    leader_epoch: 7,
                    start_offset: 100,
                    delivery_complete_count: if version >= 1 { 12 } else { -1 },
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        check("ReadShareGroupStateSummaryResponse", version, response);
    }
}

#[test]
fn streams_group_heartbeat_matches_kafka_at_every_version() {
    use streams_group_heartbeat_request as req;
    use streams_group_heartbeat_response as resp;
    for version in 0..=1 {
        let request = StreamsGroupHeartbeatRequest {
            group_id: "app".into(),
            member_id: "m-1".into(),
            member_epoch: 0,
            endpoint_information_epoch: 2,
            rack_id: Some("rack-a".into()),
            rebalance_timeout_ms: 30000,
            topology: Some(req::Topology {
                epoch: 1,
                subtopologies: vec![req::Subtopology {
                    subtopology_id: "0".into(),
                    source_topics: vec!["in".into()],
                    repartition_sink_topics: vec!["app-rep".into()],
                    state_changelog_topics: vec![req::TopicInfo {
                        name: "app-store-changelog".into(),
                        partitions: 0,
                        replication_factor: -1,
                        topic_configs: vec![req::KeyValue {
                            key: "cleanup.policy".into(),
                            value: "compact".into(),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    copartition_groups: vec![req::CopartitionGroup { source_topics: vec![0], ..Default::default() }],
                    ..Default::default()
                }],
                ..Default::default()
            }),
            active_tasks: Some(vec![req::TaskIds {
                subtopology_id: "0".into(),
                partitions: vec![0, 1],
                ..Default::default()
            }]),
            process_id: Some("p-1".into()),
            user_endpoint: Some(req::Endpoint { host: "h1".into(), port: 8080, ..Default::default() }),
            client_tags: Some(vec![req::KeyValue { key: "zone".into(), value: "z1".into(), ..Default::default() }]),
            task_offsets: Some(vec![req::TaskOffset {
                subtopology_id: "0".into(),
                partition: 1,
                offset: 42,
                ..Default::default()
            }]),
            ..Default::default()
        };
        check("StreamsGroupHeartbeatRequest", version, request);

        let response = StreamsGroupHeartbeatResponse {
            member_id: "m-1".into(),
            member_epoch: 5,
            heartbeat_interval_ms: 5000,
            acceptable_recovery_lag_legacy: if version == 0 { 10000 } else { 0 },
            task_offset_interval_ms: 60000,
            acceptable_recovery_lag: if version >= 1 { 5_000_000_000 } else { -1 },
            status: Some(vec![resp::Status {
                // MISSING_CLIENT_TAGS, which only v1 may carry.
                status_code: if version >= 1 { 6 } else { 1 },
                status_detail: "detail".into(),
                ..Default::default()
            }]),
            active_tasks: Some(vec![resp::TaskIds {
                subtopology_id: "0".into(),
                partitions: vec![0, 1],
                ..Default::default()
            }]),
            topology_description_required: version >= 1,
            endpoint_information_epoch: 2,
            partitions_by_user_endpoint: Some(vec![resp::EndpointToPartitions {
                user_endpoint: resp::Endpoint { host: "h1".into(), port: 8080, ..Default::default() },
                active_partitions: vec![resp::TopicPartition {
                    topic: "in".into(),
                    partitions: vec![0, 1],
                    ..Default::default()
                }],
                ..Default::default()
            }]),
            ..Default::default()
        };
        check("StreamsGroupHeartbeatResponse", version, response);
    }
}

#[test]
fn streams_group_describe_matches_kafka_at_every_version() {
    use streams_group_describe_response as resp;
    for version in 0..=1 {
        let request = StreamsGroupDescribeRequest {
            group_ids: vec!["app".into(), "other".into()],
            include_authorized_operations: true,
            include_topology_description: version >= 1,
            ..Default::default()
        };
        check("StreamsGroupDescribeRequest", version, request);

        let assignment = resp::Assignment {
            active_tasks: vec![resp::TaskIds { subtopology_id: "0".into(), partitions: vec![0], ..Default::default() }],
            ..Default::default()
        };
        let mut group = resp::DescribedGroup {
            group_id: "app".into(),
            group_state: "Stable".into(),
            group_epoch: 5,
            assignment_epoch: 5,
            topology: Some(resp::Topology {
                epoch: 1,
                subtopologies: Some(vec![resp::Subtopology {
                    subtopology_id: "0".into(),
                    source_topics: vec!["in".into()],
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            members: vec![resp::Member {
                member_id: "m-1".into(),
                member_epoch: 5,
                client_id: "c".into(),
                client_host: "/10.0.0.1".into(),
                topology_epoch: 1,
                process_id: "p-1".into(),
                user_endpoint: Some(resp::Endpoint { host: "h1".into(), port: 8080, ..Default::default() }),
                assignment: assignment.clone(),
                target_assignment: assignment,
                ..Default::default()
            }],
            authorized_operations: 0x5a8,
            ..Default::default()
        };
        if version >= 1 {
            let source = resp::TopologyDescriptionNode {
                name: "KSTREAM-SOURCE-0000000000".into(),
                node_type: 0,
                source_topics: vec!["in".into()],
                successors: vec!["KSTREAM-SINK-0000000001".into()],
                ..Default::default()
            };
            let sink = resp::TopologyDescriptionNode {
                name: "KSTREAM-SINK-0000000001".into(),
                node_type: 2,
                sink_topic: Some("out".into()),
                ..Default::default()
            };
            group.topology_description = Some(resp::TopologyDescription {
                subtopologies: vec![resp::TopologyDescriptionSubtopology {
                    subtopology_id: "0".into(),
                    nodes: vec![source.clone(), sink.clone()],
                    ..Default::default()
                }],
                global_stores: vec![resp::TopologyDescriptionGlobalStore {
                    source,
                    processor: resp::TopologyDescriptionNode { stores: vec!["store".into()], ..sink },
                    ..Default::default()
                }],
                ..Default::default()
            });
            group.topology_description_status = 1;
            group.assignor_name = Some("sticky".into());
        }
        let missing = resp::DescribedGroup {
            error_code: 69,
            error_message: Some("no such group".into()),
            group_id: "other".into(),
            group_state: "Dead".into(),
            ..Default::default()
        };
        let response =
            StreamsGroupDescribeResponse { throttle_time_ms: 3, groups: vec![group, missing], ..Default::default() };
        check("StreamsGroupDescribeResponse", version, response);
    }
}

#[test]
fn share_group_state_records_match_kafka() {
    // A key's version is its record type: ShareSnapshot 0, ShareUpdate 1.
    let key = ShareSnapshotKey { group_id: "share-g".into(), topic_id: A, partition: 3 };
    check_record("ShareSnapshotKey", 0, 0, key);
    let key = ShareUpdateKey { group_id: "share-g".into(), topic_id: A, partition: 3 };
    check_record("ShareUpdateKey", 1, 1, key);

    let snapshot = ShareSnapshotValue {
        snapshot_epoch: 2,
        state_epoch: 3,
        leader_epoch: 7,
        start_offset: 100,
        delivery_complete_count: 50,
        create_timestamp: 1_700_000_000_000,
        write_timestamp: 1_700_000_005_000,
        state_batches: vec![share_snapshot_value::StateBatch {
            first_offset: 100,
            last_offset: 149,
            delivery_state: 2,
            delivery_count: 1,
            ..Default::default()
        }],
        ..Default::default()
    };
    check_record("ShareSnapshotValue", 0, 0, snapshot);
    // delivery_complete_count left at its default: the tag is not written.
    let update = ShareUpdateValue {
        snapshot_epoch: 2,
        leader_epoch: 7,
        start_offset: -1,
        state_batches: vec![share_update_value::StateBatch {
            first_offset: 150,
            last_offset: 150,
            delivery_state: 0,
            delivery_count: 2,
            ..Default::default()
        }],
        ..Default::default()
    };
    check_record("ShareUpdateValue", 0, 0, update);
}
