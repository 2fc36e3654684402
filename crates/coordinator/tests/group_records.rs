//! `__consumer_offsets` records: Kafka's byte formats, the partition of a group, and
//! replaying the log on load.

mod group_support;

use bytes::{BufMut, Bytes, BytesMut};
use group_support::{subscription, Harness, SESSION_MS};
use osprey_coordinator::group::{partition_for, GroupConfig, GroupCoordinator, GroupState, Record};
use osprey_protocol::ErrorCode;

const G: &str = "my-group";

#[test]
fn partition_for_matches_kafka() {
    // Values from Java 17: `Utils.abs(s.hashCode()) % n` (Utils.abs(MIN_VALUE) == 0).
    assert_eq!(partition_for("my-group", 50), 12); // hashCode -1906497762
    assert_eq!(partition_for("my-group", 7), 1);
    assert_eq!(partition_for("test-group", 50), 12); // 627841412
    assert_eq!(partition_for("console-consumer-12345", 50), 6);
    assert_eq!(partition_for("polygenelubricants", 50), 0); // hashCode Integer.MIN_VALUE
    assert_eq!(partition_for("groupé", 50), 6); // -1237460406
    assert_eq!(partition_for("g😀", 50), 32); // a surrogate pair: two UTF-16 units
    assert_eq!(partition_for("a-negative-hash-group", 50), 22);
    assert_eq!(partition_for("connect-cluster", 7), 5);
    assert_eq!(osprey_coordinator::group::records::java_string_hash_code("my-group"), -1906497762);
}

fn put_str(buf: &mut BytesMut, s: &str) {
    buf.put_i16(s.len() as i16);
    buf.put_slice(s.as_bytes());
}

#[test]
fn offset_commit_records_have_kafkas_bytes() {
    let mut h = Harness::new();
    let mut request = Harness::commit_request("g", -1, "", &[("t", 3, 0x0102)]);
    request.topics[0].partitions[0].committed_metadata = Some("m".into());
    let reply = h.send_commit(&request);
    h.take_commit(reply).unwrap();
    let record = h.log.last().unwrap();
    let mut key = BytesMut::new();
    key.put_i16(1);
    put_str(&mut key, "g");
    put_str(&mut key, "t");
    key.put_i32(3);
    assert_eq!(record.key, key.freeze());
    let mut value = BytesMut::new();
    value.put_i16(3);
    value.put_i64(0x0102);
    value.put_i32(5);
    put_str(&mut value, "m");
    value.put_i64(h.now);
    assert_eq!(record.value.clone().unwrap(), value.freeze());
}

/// A GroupMetadataValue v3 as Kafka writes it, built by hand.
/// (member id, instance id, subscription, assignment)
type MemberRow<'a> = (&'a str, Option<&'a str>, &'a [u8], &'a [u8]);

fn kafka_group_metadata(generation: i32, members: &[MemberRow<'_>]) -> Record {
    kafka_group_metadata_at(generation, 123, members)
}

fn kafka_group_metadata_at(generation: i32, state_timestamp: i64, members: &[MemberRow<'_>]) -> Record {
    let mut key = BytesMut::new();
    key.put_i16(2);
    put_str(&mut key, G);
    let mut v = BytesMut::new();
    v.put_i16(3);
    put_str(&mut v, "consumer");
    v.put_i32(generation);
    put_str(&mut v, "range");
    put_str(&mut v, members[0].0);
    v.put_i64(state_timestamp);
    v.put_i32(members.len() as i32);
    for (member_id, instance, subscription, assignment) in members {
        put_str(&mut v, member_id);
        match instance {
            Some(i) => put_str(&mut v, i),
            None => v.put_i16(-1),
        }
        put_str(&mut v, "client");
        put_str(&mut v, "/10.0.0.9");
        v.put_i32(30_000);
        v.put_i32(SESSION_MS);
        v.put_i32(subscription.len() as i32);
        v.put_slice(subscription);
        v.put_i32(assignment.len() as i32);
        v.put_slice(assignment);
    }
    Record { key: key.freeze(), value: Some(v.freeze()) }
}

#[test]
fn load_restores_a_stable_group_written_by_kafka_with_fresh_sessions() {
    let sub = subscription(&["t"]);
    let record = kafka_group_metadata(4, &[("m-1", None, &sub, b"A"), ("m-2", Some("i-2"), &sub, b"B")]);
    let mut c = GroupCoordinator::new(GroupConfig::default());
    let summary = c.load(vec![record.clone()], 50_000).unwrap();
    assert_eq!(summary.groups, 1);
    assert_eq!(c.group_state(G), Some(GroupState::Stable));
    assert_eq!(c.generation(G), Some(4));
    let described = c.describe_groups(&[G.into()], 5);
    let g = &described.groups[0];
    assert_eq!(g.protocol_data, "range");
    assert_eq!(g.members[1].group_instance_id.as_deref(), Some("i-2"));
    assert_eq!(g.members[1].member_assignment, Bytes::from_static(b"B"));
    assert_eq!(g.members[0].member_metadata, sub);
    // Our own record for the same group is byte-identical to Kafka's.
    let mut h = Harness::new();
    h.coordinator.load(vec![record.clone()], h.now).unwrap();
    h.join(G, "m-1", None, &["t"]); // the leader rejoins: a rebalance...
    let rejoin = h.join(G, "m-2", Some("i-2"), &["t"]);
    let generation = h.take_join(rejoin).unwrap().generation_id;
    assert_eq!(generation, 5);
    let s1 = h.send_sync(G, 5, "m-1", None, &[("m-1", b"A"), ("m-2", b"B")]);
    h.take_sync(s1).unwrap();
    let ours = h.log.last().unwrap();
    assert_eq!(ours.key, record.key);
    // Byte for byte what Kafka writes for generation 5, which began now.
    let expected = kafka_group_metadata_at(5, h.now, &[("m-1", None, &sub, b"A"), ("m-2", Some("i-2"), &sub, b"B")]);
    assert_eq!(ours, &expected);

    // Sessions restart at load time: heartbeats work, silence expires them.
    let mut c2 = GroupCoordinator::new(GroupConfig::default());
    c2.load(vec![kafka_group_metadata(4, &[("m-1", None, &sub, b"A")])], 50_000).unwrap();
    let hb = osprey_protocol::messages::HeartbeatRequest {
        group_id: G.into(),
        generation_id: 4,
        member_id: "m-1".into(),
        ..Default::default()
    };
    assert_eq!(c2.heartbeat(&hb, 55_000).error_code, 0);
    c2.tick(55_000 + i64::from(SESSION_MS) - 1);
    assert_eq!(c2.members(G), ["m-1"]);
    c2.tick(55_000 + i64::from(SESSION_MS));
    assert!(c2.members(G).is_empty());
    assert_eq!(c2.group_state(G), Some(GroupState::Empty), "the last member gone ends the rebalance at once");
}

#[test]
fn persist_then_load_gives_the_same_offsets_and_group() {
    let mut h = Harness::new();
    let (generation, members, leader) = h.stable_group(G, 3, &["orders", "payments"]);
    h.commit(G, generation, &members[1], &[("orders", 0, 100), ("orders", 1, 200), ("payments", 0, 5)]);
    h.commit(G, generation, &members[1], &[("orders", 0, 150)]);
    h.commit("simple", -1, "", &[("t", 0, 1)]);
    h.commit("deleted", -1, "", &[("t", 0, 1)]);
    let reply = h.next_reply();
    h.coordinator.delete_groups(&["deleted".into()], reply);
    h.drain();

    let mut loaded = GroupCoordinator::new(GroupConfig::default());
    let summary = loaded.load(h.log.clone(), h.now).unwrap();
    assert_eq!(summary.groups, 2);
    assert_eq!(loaded.group_state(G), Some(GroupState::Stable));
    assert_eq!(loaded.generation(G), Some(generation));
    assert_eq!(loaded.members(G), members);
    let before = h.coordinator.describe_groups(&[G.into(), "simple".into(), "deleted".into()], 5);
    let after = loaded.describe_groups(&[G.into(), "simple".into(), "deleted".into()], 5);
    assert_eq!(before, after);
    for group in [G, "simple", "deleted"] {
        assert_eq!(h.coordinator.fetch_offsets(group, None, false), loaded.fetch_offsets(group, None, false));
    }
    let offsets = loaded.fetch_offsets(G, None, false);
    assert_eq!(offsets.topics[0].partitions[0].committed_offset, 150, "the later commit wins");
    // The loaded leader can drive the next rebalance.
    let mut h2 = Harness::new();
    h2.coordinator = loaded;
    h2.now = h.now;
    let rejoins: Vec<_> = members.iter().map(|m| h2.join(G, m, None, &["orders", "payments"])).collect();
    let first = h2.take_join(rejoins[0]).unwrap();
    assert_eq!((first.generation_id, first.leader.as_str()), (generation + 1, leader.as_str()));
}

#[test]
fn load_applies_tombstones_and_skips_other_record_kinds() {
    let mut h = Harness::new();
    h.commit("a", -1, "", &[("t", 0, 1), ("t", 1, 2)]);
    let reply = h.send_commit(&Harness::commit_request("a", -1, "", &[("t", 0, 3)]));
    h.take_commit(reply).unwrap();
    let mut log = h.log.clone();
    // OffsetDelete of t-1.
    let mut key = BytesMut::new();
    key.put_i16(1);
    put_str(&mut key, "a");
    put_str(&mut key, "t");
    key.put_i32(1);
    log.push(Record { key: key.freeze(), value: None });
    // A KIP-848 ConsumerGroupMetadataKey (version 3): a consumer group at epoch 1.
    let mut other = BytesMut::new();
    other.put_i16(3);
    put_str(&mut other, "kip848");
    log.push(Record { key: other.freeze(), value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 1, 0])) });
    let mut c = GroupCoordinator::new(GroupConfig::default());
    let summary = c.load(log, 0).unwrap();
    assert_eq!((summary.groups, summary.offsets, summary.skipped, summary.consumer_groups), (1, 1, 0, 1));
    let fetched = c.fetch_offsets("a", None, false);
    assert_eq!(fetched.topics[0].partitions.len(), 1);
    assert_eq!(fetched.topics[0].partitions[0].committed_offset, 3);
    // A malformed key is an error, not a silent loss of offsets.
    let bad = Record { key: Bytes::from_static(&[0, 1, 0]), value: None };
    assert!(c.load(vec![bad], 0).is_err());
}

#[test]
fn responses_encode_at_every_version_they_answer() {
    use osprey_protocol::Message;
    let mut h = Harness::new();
    let (generation, members, _) = h.stable_group(G, 2, &["t"]);
    for version in 0..=9 {
        let request = Harness::join_request(G, &members[1], None, &[("range", subscription(&["t"]))]);
        let reply = h.send_join(&request, version);
        let response = h.take_join(reply).unwrap();
        let mut buf = BytesMut::new();
        response.encode(&mut buf, version).unwrap_or_else(|e| panic!("JoinGroup v{version}: {e}"));
        let error = h.send_join(&Harness::join_request(G, "ghost", None, &[("range", Bytes::new())]), version);
        h.take_join(error).unwrap().encode(&mut BytesMut::new(), version).unwrap();
    }
    for version in 0..=5 {
        let request = osprey_protocol::messages::SyncGroupRequest {
            group_id: G.into(),
            generation_id: generation,
            member_id: members[1].clone(),
            ..Default::default()
        };
        let reply = h.next_reply();
        h.coordinator.sync(&request, version, reply, h.now);
        h.drain();
        let response = h.take_sync(reply).unwrap();
        assert_eq!(response.error_code, 0);
        response.encode(&mut BytesMut::new(), version).unwrap_or_else(|e| panic!("SyncGroup v{version}: {e}"));
        let leave = osprey_protocol::messages::LeaveGroupRequest {
            group_id: G.into(),
            member_id: "ghost".into(),
            ..Default::default()
        };
        h.coordinator.leave(&leave, version, h.now).encode(&mut BytesMut::new(), version).unwrap();
    }
    for version in 0..=6 {
        h.coordinator
            .describe_groups(&[G.into(), "nope".into()], version)
            .encode(&mut BytesMut::new(), version)
            .unwrap();
    }
    for version in 0..=5 {
        h.coordinator.list_groups(&[], &[], version).encode(&mut BytesMut::new(), version).unwrap();
    }
    let commit = h.send_commit(&Harness::commit_request(G, generation, &members[0], &[("t", 0, 1)]));
    h.take_commit(commit).unwrap().encode(&mut BytesMut::new(), 9).unwrap();
    let _ = ErrorCode::NONE;
}

mod decode_properties {
    use super::*;
    use osprey_protocol::messages::group_metadata_value::MemberMetadata;
    use osprey_protocol::messages::{GroupMetadataKey, GroupMetadataValue};
    use osprey_protocol::Message;
    use proptest::prelude::*;

    fn versioned<M: Message>(m: &M, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_i16(version);
        m.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn member() -> impl Strategy<Value = MemberMetadata> {
        ("[ab]", proptest::option::of("[xy]"), any::<i32>(), proptest::collection::vec(any::<u8>(), 0..8)).prop_map(
            |(member_id, group_instance_id, session_timeout, subscription)| MemberMetadata {
                member_id,
                group_instance_id,
                session_timeout,
                subscription: Bytes::from(subscription),
                ..Default::default()
            },
        )
    }

    fn group_record() -> impl Strategy<Value = Record> {
        (
            "[gh]",
            proptest::option::of("[pq]"),
            proptest::option::of("[ab]"),
            any::<i32>(),
            proptest::collection::vec(member(), 0..4),
            any::<bool>(),
        )
            .prop_map(|(group, protocol, leader, generation, members, tombstone)| {
                let key = versioned(&GroupMetadataKey { group }, 2);
                let value = GroupMetadataValue {
                    protocol_type: "consumer".into(),
                    generation,
                    protocol,
                    leader,
                    members,
                    ..Default::default()
                };
                Record { key, value: (!tombstone).then(|| versioned(&value, 3)) }
            })
    }

    proptest! {
        /// Whatever well-formed records the log holds, the loaded groups keep their invariants.
        #[test]
        fn loaded_groups_keep_their_invariants(records in proptest::collection::vec(group_record(), 0..6)) {
            let mut c = GroupCoordinator::new(GroupConfig::default());
            c.load(records, 1_000).unwrap();
            prop_assert_eq!(c.check_invariants(), Ok(()));
            c.tick(1_000_000);
            prop_assert_eq!(c.check_invariants(), Ok(()));
        }

        /// Arbitrary bytes are an error or a load, never a panic.
        #[test]
        fn arbitrary_records_never_panic(
            records in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..24), proptest::option::of(proptest::collection::vec(any::<u8>(), 0..48))),
                0..6,
            )
        ) {
            let records = records.into_iter().map(|(k, v)| Record { key: Bytes::from(k), value: v.map(Bytes::from) });
            let mut c = GroupCoordinator::new(GroupConfig::default());
            if c.load(records, 0).is_ok() {
                prop_assert_eq!(c.check_invariants(), Ok(()));
            }
        }
    }
}
