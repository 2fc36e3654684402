//! The streams group records of `__consumer_offsets` against Kafka's own: the lines below
//! were printed by Kafka 4.4's `StreamsCoordinatorRecordHelpers` and
//! `GroupCoordinatorRecordSerde` (`tests/kafka/StreamsGroupRecords.java`). A group Kafka
//! wrote loads here, and Osprey writes the same group byte for byte.

use osprey_coordinator::group::streams::{Endpoint, MemberState, StreamsGroupState};
use osprey_coordinator::group::{GroupConfig, GroupCoordinator, Record};

/// Key and value (`-`: a tombstone) of each record, in the order the Java program writes.
const KAFKA: &str = "\
0011000a776f72642d636f756e74 000000000005010203040506070803000400000002011902156e756d2e7374616e6462792e7265706c69636173023100020400000002
0017000a776f72642d636f756e74 0000000000020302300206776f7264730101021e776f72642d636f756e742d636f756e74732d7265706172746974696f6e01010002310101021c776f72642d636f756e742d636f756e74732d6368616e67656c6f67000000000000020f636c65616e75702e706f6c69637908636f6d70616374000001021e776f72642d636f756e742d636f756e74732d7265706172746974696f6e0000000000030100020101020000000000
0013000a776f72642d636f756e7400026d31 00000369310372310363310a2f31302e302e302e31000493e0000000020370310106686f7374311f900003057261636b03723100057a6f6e6502610000
0013000a776f72642d636f756e7400026d32 000000000363320a2f31302e302e302e32000493e000000002037032ff0100
0015000a776f72642d636f756e7400026d31 0000020230030000000000000001000202310200000000000100
0015000a776f72642d636f756e7400026d32 000002023103000000000000000100010100
0014000a776f72642d636f756e74 0000000000050100080000018bcfe56800
0016000a776f72642d636f756e7400026d31 00000000000500000004010202300300000000000000010100090300000005000000030202310200000000000101010100
0016000a776f72642d636f756e7400026d32 000000000004000000030202023102000000000100050200000004010102023102000000010100050200000004010100
0016000a776f72642d636f756e7400026d32 -
0015000a776f72642d636f756e7400026d32 -
0013000a776f72642d636f756e7400026d32 -";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn kafka_records() -> Vec<Record> {
    KAFKA
        .lines()
        .map(|line| {
            let (key, value) = line.split_once(' ').expect("key value");
            Record { key: unhex(key).into(), value: (value != "-").then(|| unhex(value).into()) }
        })
        .collect()
}

fn loaded(records: Vec<Record>) -> GroupCoordinator {
    let mut coordinator = GroupCoordinator::new(GroupConfig::default());
    let summary = coordinator.load(records, 0).expect("Kafka's records load");
    assert_eq!(summary.streams_groups, 1);
    coordinator.check_invariants().expect("invariants");
    coordinator
}

#[test]
fn a_group_kafka_wrote_loads_as_kafka_holds_it() {
    let coordinator = loaded(kafka_records()[..9].to_vec());
    let group = coordinator.streams_group("word-count").expect("loaded");
    assert_eq!((group.group_epoch, group.assignment_epoch, group.validated_topology_epoch), (5, 5, 2));
    assert_eq!((group.metadata_hash, group.assignment_timestamp_ms), (0x0102030405060708, 1_700_000_000_000));
    assert_eq!(group.last_assignment_configs.get("num.standby.replicas").map(String::as_str), Some("1"));
    assert_eq!((group.stored_description_topology_epoch, group.failed_description_topology_epoch), (2, -1));
    let topology = group.topology.as_ref().expect("topology");
    assert_eq!(topology.epoch, 2);
    assert_eq!(
        topology.required_topics().into_iter().collect::<Vec<_>>(),
        ["word-count-counts-changelog", "word-count-counts-repartition", "words"]
    );
    let m1 = &group.members["m1"];
    assert_eq!((m1.member_epoch, m1.previous_member_epoch, m1.state), (5, 4, MemberState::Stable));
    assert_eq!(
        (m1.instance_id.as_deref(), m1.rack_id.as_deref(), m1.process_id.as_str()),
        (Some("i1"), Some("r1"), "p1")
    );
    assert_eq!(m1.user_endpoint, Some(Endpoint { host: "host1".into(), port: 8080 }));
    assert_eq!(m1.client_tags.len(), 2);
    assert_eq!(m1.assigned.active["0"].iter().map(|(p, e)| (*p, *e)).collect::<Vec<_>>(), [(0, 5), (1, 3)]);
    let m2 = &group.members["m2"];
    assert_eq!(m2.state, MemberState::UnrevokedTasks);
    assert_eq!(m2.pending_revocation.active["1"].iter().map(|(p, e)| (*p, *e)).collect::<Vec<_>>(), [(1, 4)]);
    // Without a heartbeat since, the topology has not been configured against topics.
    assert_eq!(group.state(), StreamsGroupState::Reconciling);
}

#[test]
fn osprey_writes_the_group_byte_for_byte_as_kafka() {
    let kafka = kafka_records()[..9].to_vec();
    let coordinator = loaded(kafka.clone());
    let written = coordinator.streams_group("word-count").unwrap().records();
    assert_eq!(written.len(), kafka.len());
    for (ours, theirs) in written.iter().zip(&kafka) {
        assert_eq!(hex(&ours.key), hex(&theirs.key));
        assert_eq!(ours.value.as_deref().map(hex), theirs.value.as_deref().map(hex), "key {}", hex(&ours.key));
    }
}

#[test]
fn kafkas_tombstones_remove_a_member() {
    let coordinator = loaded(kafka_records());
    let group = coordinator.streams_group("word-count").unwrap();
    assert_eq!(group.members.keys().collect::<Vec<_>>(), ["m1"]);
    assert!(!group.target.contains_key("m2"));
}
