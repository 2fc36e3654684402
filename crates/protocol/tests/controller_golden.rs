//! The controller messages (AlterPartition, BrokerRegistration, BrokerHeartbeat,
//! AllocateProducerIds) against Kafka's own encoding: the `.hex` files under
//! `tests/golden/kafka-controller/` were written by Kafka 4.4's generated message
//! classes (`GoldenControllerMessages.java` there) from the values built below. Each
//! must decode to exactly those values and re-encode to exactly Kafka's bytes, at every
//! version.

mod kafka_golden;

use kafka_golden::{A, B};
use osprey_protocol::messages::{
    alter_partition_request, alter_partition_response, broker_registration_request, AllocateProducerIdsRequest,
    AllocateProducerIdsResponse, AlterPartitionRequest, AlterPartitionResponse, BrokerHeartbeatRequest,
    BrokerHeartbeatResponse, BrokerRegistrationRequest, BrokerRegistrationResponse,
};
use osprey_protocol::Message;

/// Kafka's bytes decode to `expected`, and `expected` encodes to Kafka's bytes.
fn check<M: Message>(name: &str, version: i16, expected: M) {
    kafka_golden::check("kafka-controller", name, version, expected);
}

#[test]
fn alter_partition_matches_kafka_at_every_version() {
    for version in 2..=3 {
        let mut p = alter_partition_request::PartitionData {
            partition_index: 2,
            leader_epoch: 5,
            leader_recovery_state: 1,
            partition_epoch: 9,
            ..Default::default()
        };
        if version < 3 {
            p.new_isr = vec![1, 3];
        } else {
            p.new_isr_with_epochs = vec![
                alter_partition_request::BrokerState { broker_id: 1, broker_epoch: 100, ..Default::default() },
                alter_partition_request::BrokerState { broker_id: 3, broker_epoch: -1, ..Default::default() },
            ];
        }
        let topic = alter_partition_request::TopicData { topic_id: A, partitions: vec![p], ..Default::default() };
        let request =
            AlterPartitionRequest { broker_id: 1, broker_epoch: 100, topics: vec![topic], ..Default::default() };
        check("AlterPartitionRequest", version, request);

        let p = alter_partition_response::PartitionData {
            partition_index: 2,
            error_code: 107,
            leader_id: 1,
            leader_epoch: 5,
            isr: vec![1, 3],
            leader_recovery_state: 1,
            partition_epoch: 10,
            ..Default::default()
        };
        let topic = alter_partition_response::TopicData { topic_id: A, partitions: vec![p], ..Default::default() };
        let response =
            AlterPartitionResponse { throttle_time_ms: 7, error_code: 0, topics: vec![topic], ..Default::default() };
        check("AlterPartitionResponse", version, response);
    }
}

#[test]
fn broker_registration_matches_kafka_at_every_version() {
    for version in 0..=4 {
        let listener =
            |name: &str, host: &str, port: u16, security_protocol: i16| broker_registration_request::Listener {
                name: name.into(),
                host: host.into(),
                port,
                security_protocol,
                ..Default::default()
            };
        let request = BrokerRegistrationRequest {
            broker_id: 3,
            cluster_id: "MkU3OEVBNTcwNTJENDM2Qk".into(),
            incarnation_id: A,
            listeners: vec![listener("PLAINTEXT", "127.0.0.1", 19092, 0), listener("SSL", "b1.example", 65535, 1)],
            features: vec![broker_registration_request::Feature {
                name: "metadata.version".into(),
                min_supported_version: 7,
                max_supported_version: 27,
                ..Default::default()
            }],
            rack: (version % 2 == 0).then(|| "rack-a".to_string()),
            is_migrating_zk_broker: false,
            log_dirs: if version >= 2 { vec![A, B] } else { vec![] },
            previous_broker_epoch: if version >= 3 { 42 } else { -1 },
            ..Default::default()
        };
        check("BrokerRegistrationRequest", version, request);
        let response =
            BrokerRegistrationResponse { throttle_time_ms: 0, error_code: 101, broker_epoch: 77, ..Default::default() };
        check("BrokerRegistrationResponse", version, response);
    }
}

#[test]
fn broker_heartbeat_matches_kafka_at_every_version() {
    for version in 0..=2 {
        let request = BrokerHeartbeatRequest {
            broker_id: 3,
            broker_epoch: 77,
            current_metadata_offset: 1234,
            want_fence: false,
            want_shut_down: true,
            offline_log_dirs: if version >= 1 { vec![B] } else { vec![] },
            cordoned_log_dirs: if version >= 2 { vec![A, B] } else { vec![] },
            ..Default::default()
        };
        check("BrokerHeartbeatRequest", version, request);
        let response = BrokerHeartbeatResponse {
            throttle_time_ms: 1,
            error_code: 0,
            is_caught_up: true,
            is_fenced: false,
            should_shut_down: true,
            ..Default::default()
        };
        check("BrokerHeartbeatResponse", version, response);
    }
}

#[test]
fn allocate_producer_ids_matches_kafka() {
    check(
        "AllocateProducerIdsRequest",
        0,
        AllocateProducerIdsRequest { broker_id: 3, broker_epoch: 77, ..Default::default() },
    );
    let response = AllocateProducerIdsResponse {
        throttle_time_ms: 0,
        error_code: 0,
        producer_id_start: 5000,
        producer_id_len: 1000,
        ..Default::default()
    };
    check("AllocateProducerIdsResponse", 0, response);
}
