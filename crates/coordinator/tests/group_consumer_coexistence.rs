//! Consumer-protocol groups next to classic ones, and offsets committed by
//! consumer-protocol members (checked against the member epoch).

mod group_consumer_support;

use group_consumer_support::*;
use osprey_coordinator::group::Response;
use osprey_protocol::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use osprey_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use osprey_protocol::ErrorCode;

fn join_request(member_id: &str) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: GROUP.into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        member_id: member_id.into(),
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupRequestProtocol { name: "range".into(), ..Default::default() }],
        ..Default::default()
    }
}

fn classic_join(h: &mut Harness, member_id: &str) -> i16 {
    let request = join_request(member_id);
    match h.call(|c, reply, now| c.join(&request, 9, "client", "/10.0.0.1", reply, now)) {
        Some(Response::JoinGroup(r)) => r.error_code,
        other => panic!("{other:?}"),
    }
}

fn commit(h: &mut Harness, member_id: &str, epoch: i32, version: i16, offset: i64) -> i16 {
    let request = OffsetCommitRequest {
        group_id: GROUP.into(),
        generation_id_or_member_epoch: epoch,
        member_id: member_id.into(),
        topics: vec![OffsetCommitRequestTopic {
            name: "t1".into(),
            partitions: vec![OffsetCommitRequestPartition {
                partition_index: 0,
                committed_offset: offset,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match h.call(|c, reply, now| c.commit_offsets(&request, version, reply, now)) {
        Some(Response::OffsetCommit(r)) => r.topics[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    }
}

fn committed(h: &Harness) -> i64 {
    h.coordinator.fetch_offsets(GROUP, None, false).topics.first().map_or(-1, |t| t.partitions[0].committed_offset)
}

#[test]
fn a_classic_join_to_a_consumer_group_with_members_is_inconsistent() {
    let mut h = Harness::new();
    h.heartbeat(&mut Client::new("member-a-0000000000001", &["t1"]));
    assert_eq!(classic_join(&mut h, ""), ErrorCode::INCONSISTENT_GROUP_PROTOCOL.code());
}

#[test]
fn a_consumer_heartbeat_to_a_classic_group_with_members_is_not_found() {
    let mut h = Harness::new();
    assert_eq!(classic_join(&mut h, ""), ErrorCode::MEMBER_ID_REQUIRED.code());
    let first = Client::new("member-a-0000000000001", &["t1"]).request();
    // The classic group only has a pending member: the join is refused all the same.
    assert_eq!(h.send(&first).error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
}

#[test]
fn an_empty_consumer_group_gives_way_to_a_classic_one_and_back() {
    let mut h = Harness::new();
    let mut a = Client::new("member-a-0000000000001", &["t1"]);
    h.heartbeat(&mut a);
    let mut leave = a.request();
    leave.member_epoch = -1;
    h.send(&leave);
    // Empty now: a classic member may take the group id.
    assert_eq!(classic_join(&mut h, ""), ErrorCode::MEMBER_ID_REQUIRED.code());
    assert_eq!(h.coordinator.consumer_group_state(GROUP), None);
    // The classic group has no members yet (only a pending one expires): once it is
    // empty a consumer member may take it back.
    h.advance(400_000);
    let mut b = Client::new("member-b-0000000000002", &["t1"]);
    h.heartbeat(&mut b);
    assert_eq!(b.count(), 6);
}

#[test]
fn member_count_counts_a_groups_members_and_not_a_pending_classic_join() {
    let mut h = Harness::new();
    assert_eq!(h.coordinator.member_count(GROUP), 0, "an unknown group");
    let mut a = Client::new("member-a-0000000000001", &["t1"]);
    let mut b = Client::new("member-b-0000000000002", &["t1"]);
    h.heartbeat(&mut a);
    h.heartbeat(&mut b);
    assert_eq!(h.coordinator.member_count(GROUP), 2);
    for client in [&a, &b] {
        let mut leave = client.request();
        leave.member_epoch = -1;
        h.send(&leave);
    }
    assert_eq!(h.coordinator.member_count(GROUP), 0);
    // A classic join without a member id is only pending: not a member yet.
    assert_eq!(classic_join(&mut h, ""), ErrorCode::MEMBER_ID_REQUIRED.code());
    assert_eq!(h.coordinator.member_count(GROUP), 0);
}

#[test]
fn offset_commits_are_checked_against_the_member_epoch() {
    let mut h = Harness::new();
    let mut a = Client::new("member-a-0000000000001", &["t1"]);
    h.heartbeat(&mut a);
    let member = a.member_id.clone();
    assert_eq!(commit(&mut h, &member, a.epoch + 1, 9, 10), ErrorCode::STALE_MEMBER_EPOCH.code());
    assert_eq!(commit(&mut h, &member, a.epoch - 1, 9, 10), ErrorCode::STALE_MEMBER_EPOCH.code());
    assert_eq!(commit(&mut h, "someone-else", a.epoch, 9, 10), ErrorCode::UNKNOWN_MEMBER_ID.code());
    assert_eq!(commit(&mut h, &member, a.epoch, 8, 10), ErrorCode::UNSUPPORTED_VERSION.code());
    // An admin commit (epoch -1) is refused while the group has members.
    assert_eq!(commit(&mut h, "", -1, 9, 10), ErrorCode::UNKNOWN_MEMBER_ID.code());
    assert_eq!(committed(&h), -1);
    assert_eq!(commit(&mut h, &member, a.epoch, 9, 42), 0);
    assert_eq!(committed(&h), 42);
    // The offsets survive the member leaving, and an admin may commit then.
    let mut leave = a.request();
    leave.member_epoch = -1;
    h.send(&leave);
    assert_eq!(commit(&mut h, "", -1, 9, 50), 0);
    assert_eq!(committed(&h), 50);
}

#[test]
fn offset_fetches_are_checked_against_the_member_epoch() {
    let mut h = Harness::new();
    let mut a = Client::new("member-a-0000000000001", &["t1"]);
    h.heartbeat(&mut a);
    let c = &h.coordinator;
    assert_eq!(c.validate_offset_fetch(GROUP, Some(&a.member_id), a.epoch), Ok(()));
    assert_eq!(c.validate_offset_fetch(GROUP, Some(&a.member_id), a.epoch - 1), Err(ErrorCode::STALE_MEMBER_EPOCH));
    assert_eq!(c.validate_offset_fetch(GROUP, Some("nobody"), a.epoch), Err(ErrorCode::UNKNOWN_MEMBER_ID));
    assert_eq!(c.validate_offset_fetch(GROUP, None, -1), Ok(()));
    assert_eq!(c.validate_offset_fetch("classic-or-unknown", Some("x"), 3), Ok(()));
}

fn delete(h: &mut Harness) -> i16 {
    let ids = [GROUP.to_string()];
    match h.call(|c, reply, _| c.delete_groups(&ids, reply)) {
        Some(Response::DeleteGroups(r)) => r.results[0].error_code,
        other => panic!("{other:?}"),
    }
}

#[test]
fn delete_groups_removes_an_empty_consumer_group_and_its_offsets() {
    let mut h = Harness::new();
    let mut a = Client::new("member-a-0000000000001", &["t1"]);
    h.heartbeat(&mut a);
    assert_eq!(commit(&mut h, &a.member_id.clone(), a.epoch, 9, 7), 0);
    assert_eq!(delete(&mut h), ErrorCode::NON_EMPTY_GROUP.code());
    let mut leave = a.request();
    leave.member_epoch = -1;
    h.send(&leave);
    assert_eq!(delete(&mut h), 0);
    assert_eq!(h.coordinator.consumer_group_state(GROUP), None);
    assert_eq!(committed(&h), -1);
    assert_eq!(delete(&mut h), ErrorCode::GROUP_ID_NOT_FOUND.code());
    // Replaying the log after the deletion finds nothing.
    let mut restarted = osprey_coordinator::group::GroupCoordinator::new(Default::default());
    restarted.load(h.log.clone(), h.now).unwrap();
    assert_eq!(restarted.consumer_group_state(GROUP), None);
}
