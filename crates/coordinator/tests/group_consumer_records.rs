//! KIP-848 records: what a heartbeat writes, in Kafka's formats, and a restarted
//! coordinator that replays them knows the members, epochs and assignments.

mod group_consumer_support;

use bytes::Buf;
use group_consumer_support::*;
use osprey_coordinator::group::{partition_for, GroupConfig, GroupCoordinator, Record};
use osprey_protocol::messages::{ConsumerGroupMetadataKey, ConsumerGroupMetadataValue};
use osprey_protocol::Message;

fn key_version(record: &Record) -> i16 {
    record.key.clone().get_i16()
}

fn converged() -> (Harness, Vec<Client>) {
    let mut h = Harness::new();
    let mut clients = vec![
        Client::new("member-a-0000000000001", &["t1", "t2"]),
        Client::new("member-b-0000000000002", &["t1", "t2"]).with_instance("i-b"),
        Client::new("member-c-0000000000003", &["t1"]),
    ];
    for client in &mut clients {
        h.heartbeat(client);
    }
    h.converge(&mut clients);
    (h, clients)
}

#[test]
fn a_first_join_writes_kafkas_records_in_kafkas_order() {
    let mut h = Harness::new();
    h.heartbeat(&mut Client::new("member-a-0000000000001", &["t1"]));
    // Member metadata, partition metadata, group epoch, target member, target metadata,
    // current assignment.
    let versions: Vec<i16> = h.log.iter().map(key_version).collect();
    assert_eq!(versions, vec![5, 4, 3, 7, 6, 8]);
    let epoch = h.log.iter().find(|r| key_version(r) == 3).unwrap();
    let mut key = epoch.key.clone();
    key.advance(2);
    assert_eq!(ConsumerGroupMetadataKey::decode_exact(key, 3).unwrap().group_id, GROUP);
    let mut value = epoch.value.clone().unwrap();
    assert_eq!(value.get_i16(), 0);
    assert_eq!(ConsumerGroupMetadataValue::decode(&mut value, 0).unwrap().epoch, 2);
}

#[test]
fn a_restarted_coordinator_knows_members_epochs_and_assignments() {
    let (mut h, mut clients) = converged();
    let before = h.coordinator.consumer_group_describe(&[GROUP.to_string()]);
    let mut restarted = GroupCoordinator::new(GroupConfig::default());
    let summary = restarted.load(h.log.clone(), h.now).unwrap();
    assert_eq!(summary.consumer_groups, 1);
    restarted.check_invariants().unwrap();
    let after = restarted.consumer_group_describe(&[GROUP.to_string()]);
    assert_eq!(before, after);
    // The members carry on at their epochs against the restarted coordinator.
    h.coordinator = restarted;
    let persists = h.persists;
    for c in clients.iter_mut() {
        let epoch = c.epoch;
        h.heartbeat(c);
        assert_eq!(c.epoch, epoch);
    }
    assert_eq!(h.persists, persists, "nothing changed, nothing written");
}

#[test]
fn replay_mid_rebalance_resumes_the_revocation() {
    let mut h = Harness::new();
    let mut a = Client::new("member-a-0000000000001", &["t1", "t2"]);
    h.heartbeat(&mut a);
    let mut b = Client::new("member-b-0000000000002", &["t1", "t2"]);
    h.heartbeat(&mut b);
    h.heartbeat(&mut a); // a is asked to revoke
    let mut restarted = GroupCoordinator::new(GroupConfig::default());
    restarted.load(h.log.clone(), h.now).unwrap();
    h.coordinator = restarted;
    let mut clients = vec![a, b];
    h.converge(&mut clients);
    assert_eq!(clients.iter().map(Client::count).collect::<Vec<_>>(), vec![5, 4]);
}

#[test]
fn departed_members_stay_gone_after_replay() {
    let (mut h, mut clients) = converged();
    let mut leave = clients[2].request();
    leave.member_epoch = -1;
    assert_eq!(h.send(&leave).error_code, 0);
    clients.pop();
    h.converge(&mut clients);
    let before = h.coordinator.consumer_group_describe(&[GROUP.to_string()]);
    let mut restarted = GroupCoordinator::new(GroupConfig::default());
    restarted.load(h.log.clone(), h.now).unwrap();
    assert_eq!(restarted.consumer_group_describe(&[GROUP.to_string()]), before);
    assert_eq!(before.groups[0].members.len(), 2);
}

#[test]
fn unloading_the_partition_drops_the_consumer_group() {
    let (mut h, _clients) = converged();
    let partition = partition_for(GROUP, 50);
    assert_eq!(h.coordinator.unload_partition(partition, 50, 0), 1);
    assert_eq!(h.coordinator.consumer_group_state(GROUP), None);
    h.drain();
}

mod replay_properties {
    use super::*;
    use bytes::{BufMut, Bytes, BytesMut};
    use osprey_protocol::messages::consumer_group_current_member_assignment_value::TopicPartitions;
    use osprey_protocol::messages::consumer_group_target_assignment_member_value::TopicPartition;
    use osprey_protocol::messages::{
        ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue,
        ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue, ConsumerGroupTargetAssignmentMemberKey,
        ConsumerGroupTargetAssignmentMemberValue, ConsumerGroupTargetAssignmentMetadataKey,
        ConsumerGroupTargetAssignmentMetadataValue,
    };
    use osprey_protocol::Uuid;
    use proptest::prelude::*;

    fn versioned<M: Message>(m: &M, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_i16(version);
        m.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn partitions() -> impl Strategy<Value = Vec<(u8, Vec<i32>)>> {
        proptest::collection::vec((1u8..3, proptest::collection::vec(0i32..4, 0..3)), 0..3)
    }

    /// Well-formed KIP-848 records about a few groups and members, in any order and with
    /// any contents: what a buggy or foreign writer could leave in the log.
    fn consumer_record() -> impl Strategy<Value = Record> {
        let group = prop_oneof![Just("g1".to_string()), Just("g2".to_string())];
        let member = prop_oneof![Just("m1".to_string()), Just("m2".to_string()), Just("m3".to_string())];
        (0u8..5, group, member, -3i32..5, -1i8..3, partitions(), partitions(), any::<bool>(), any::<bool>()).prop_map(
            |(kind, group_id, member_id, epoch, state, assigned, pending, tombstone, instance)| {
                let tps = |v: &[(u8, Vec<i32>)]| -> Vec<TopicPartitions> {
                    v.iter()
                        .map(|(t, ps)| TopicPartitions {
                            topic_id: Uuid([*t; 16]),
                            partitions: ps.clone(),
                            ..Default::default()
                        })
                        .collect()
                };
                let (key, value) = match kind {
                    0 => (
                        versioned(&ConsumerGroupMetadataKey { group_id }, 3),
                        versioned(&ConsumerGroupMetadataValue { epoch, ..Default::default() }, 0),
                    ),
                    1 => (
                        versioned(&ConsumerGroupTargetAssignmentMetadataKey { group_id }, 6),
                        versioned(
                            &ConsumerGroupTargetAssignmentMetadataValue {
                                assignment_epoch: epoch,
                                ..Default::default()
                            },
                            0,
                        ),
                    ),
                    2 => (
                        versioned(&ConsumerGroupMemberMetadataKey { group_id, member_id }, 5),
                        versioned(
                            &ConsumerGroupMemberMetadataValue {
                                instance_id: instance.then(|| "i".to_string()),
                                subscribed_topic_names: vec!["t1".into()],
                                ..Default::default()
                            },
                            0,
                        ),
                    ),
                    3 => (
                        versioned(&ConsumerGroupTargetAssignmentMemberKey { group_id, member_id }, 7),
                        versioned(
                            &ConsumerGroupTargetAssignmentMemberValue {
                                topic_partitions: assigned
                                    .iter()
                                    .map(|(t, ps)| TopicPartition {
                                        topic_id: Uuid([*t; 16]),
                                        partitions: ps.clone(),
                                        ..Default::default()
                                    })
                                    .collect(),
                                ..Default::default()
                            },
                            0,
                        ),
                    ),
                    _ => (
                        versioned(&ConsumerGroupCurrentMemberAssignmentKey { group_id, member_id }, 8),
                        versioned(
                            &ConsumerGroupCurrentMemberAssignmentValue {
                                member_epoch: epoch,
                                previous_member_epoch: epoch - 1,
                                state: state.max(0),
                                assigned_partitions: tps(&assigned),
                                partitions_pending_revocation: tps(&pending),
                                ..Default::default()
                            },
                            0,
                        ),
                    ),
                };
                Record { key, value: (!tombstone).then_some(value) }
            },
        )
    }

    proptest! {
        /// Whatever well-formed records the log holds, the loaded consumer groups keep
        /// their invariants, and their members can carry on.
        #[test]
        fn loaded_consumer_groups_keep_their_invariants(records in proptest::collection::vec(consumer_record(), 0..12)) {
            let mut c = GroupCoordinator::new(GroupConfig::default());
            c.load(records, 1_000).unwrap();
            prop_assert_eq!(c.check_invariants(), Ok(()));
            c.tick(1_000_000);
            prop_assert_eq!(c.check_invariants(), Ok(()));
        }
    }
}
