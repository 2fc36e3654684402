//! OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups, ListGroups, DescribeGroups and
//! offset retention.

mod group_support;

use group_support::{code, Harness};
use osprey_coordinator::group::{GroupConfig, GroupState, Response};
use osprey_protocol::messages::offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
use osprey_protocol::messages::{OffsetCommitRequest, OffsetDeleteRequest};
use osprey_protocol::ErrorCode;

const G: &str = "my-group";

#[test]
fn commit_then_fetch_with_generation_checks() {
    let mut h = Harness::new();
    let (generation, members, _) = h.stable_group(G, 2, &["orders"]);
    let m = &members[0];
    assert_eq!(h.commit(G, generation, m, &[("orders", 0, 42), ("orders", 1, 7)]), [0, 0]);
    let fetched = h.fetch(G, "orders", &[0, 1, 2]);
    assert_eq!(fetched.iter().map(|p| p.committed_offset).collect::<Vec<_>>(), [42, 7, -1]);
    assert_eq!(fetched[0].committed_leader_epoch, 5);
    assert_eq!(fetched[0].metadata.as_deref(), Some("meta-42"));
    assert_eq!(fetched[2].metadata.as_deref(), Some(""));
    assert_eq!(h.commit(G, generation + 1, m, &[("orders", 0, 43)]), [code(ErrorCode::ILLEGAL_GENERATION)]);
    assert_eq!(h.commit(G, generation, "client-x", &[("orders", 0, 43)]), [code(ErrorCode::UNKNOWN_MEMBER_ID)]);
    assert_eq!(h.commit(G, -1, "", &[("orders", 0, 43)]), [code(ErrorCode::UNKNOWN_MEMBER_ID)], "not a simple group");
    assert_eq!(h.fetch(G, "orders", &[0])[0].committed_offset, 42);
    // PreparingRebalance: still allowed (the heartbeat tells the member to rejoin).
    let rejoin = h.join(G, m, None, &["orders"]);
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::PreparingRebalance));
    assert_eq!(h.commit(G, generation, &members[1], &[("orders", 0, 44)]), [0]);
    // CompletingRebalance: REBALANCE_IN_PROGRESS.
    let rejoin_b = h.join(G, &members[1], None, &["orders"]);
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::CompletingRebalance));
    assert_eq!(h.commit(G, generation + 1, m, &[("orders", 0, 45)]), [code(ErrorCode::REBALANCE_IN_PROGRESS)]);
    assert_eq!(h.fetch(G, "orders", &[0])[0].committed_offset, 44);
    assert!(h.take_join(rejoin).is_some() && h.take_join(rejoin_b).is_some());
}

#[test]
fn commits_become_visible_only_once_durable() {
    let mut h = Harness::new();
    h.auto_persist = false;
    let reply = h.send_commit(&Harness::commit_request(G, -1, "", &[("t", 0, 10)]));
    assert!(h.take_commit(reply).is_none());
    assert_eq!(h.fetch(G, "t", &[0])[0].committed_offset, -1);
    let topics = [osprey_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics {
        name: "t".into(),
        partition_indexes: vec![0],
        ..Default::default()
    }];
    let stable = h.coordinator.fetch_offsets(G, Some(&topics), true);
    assert_eq!(stable.topics[0].partitions[0].error_code, code(ErrorCode::UNSTABLE_OFFSET_COMMIT));
    h.complete_persists();
    assert_eq!(h.take_commit(reply).unwrap().topics[0].partitions[0].error_code, 0);
    assert_eq!(h.fetch(G, "t", &[0])[0].committed_offset, 10);
    assert_eq!(h.coordinator.fetch_offsets(G, Some(&topics), true).topics[0].partitions[0].committed_offset, 10);
}

#[test]
fn pipelined_commits_take_effect_in_the_order_sent_whatever_order_their_appends_report() {
    // librdkafka's 0030_offset_commit: many async commits on one connection, then
    // committed() must be the last one sent.
    let mut h = Harness::new();
    h.auto_persist = false;
    let replies: Vec<_> =
        (1..=50).map(|offset| h.send_commit(&Harness::commit_request(G, -1, "", &[("t", 0, offset)]))).collect();
    h.complete_persists_reported_newest_first();
    for reply in replies {
        assert_eq!(h.take_commit(reply).unwrap().topics[0].partitions[0].error_code, 0);
    }
    assert_eq!(h.fetch(G, "t", &[0])[0].committed_offset, 50);
    h.coordinator.check_invariants().unwrap();
}

#[test]
fn a_failed_commit_append_is_reported_and_not_visible() {
    let mut h = Harness::new();
    h.auto_persist = false;
    let reply = h.send_commit(&Harness::commit_request(G, -1, "", &[("t", 0, 10)]));
    h.fail_persists(ErrorCode::MESSAGE_TOO_LARGE);
    let response = h.take_commit(reply).unwrap();
    assert_eq!(response.topics[0].partitions[0].error_code, code(ErrorCode::UNKNOWN_SERVER_ERROR));
    assert_eq!(h.fetch(G, "t", &[0])[0].committed_offset, -1);
}

#[test]
fn simple_commits_for_assign_mode_consumers() {
    let mut h = Harness::new();
    // Generation -1 with no member id: creates an Empty group that only stores offsets.
    assert_eq!(h.commit("standalone", -1, "", &[("t", 0, 5), ("u", 3, 9)]), [0, 0]);
    assert_eq!(h.coordinator.group_state("standalone"), Some(GroupState::Empty));
    assert_eq!(h.fetch("standalone", "u", &[3])[0].committed_offset, 9);
    let listed = h.coordinator.list_groups(&[], &[], 5);
    assert_eq!(listed.groups.len(), 1);
    assert_eq!(listed.groups[0].group_id, "standalone");
    assert_eq!(listed.groups[0].protocol_type, "");
    assert_eq!(listed.groups[0].group_state, "Empty");
    // A generation for a group that does not exist: ILLEGAL_GENERATION, nothing created.
    assert_eq!(h.commit("other", 3, "m", &[("t", 0, 5)]), [code(ErrorCode::ILLEGAL_GENERATION)]);
    assert_eq!(h.coordinator.group_state("other"), None);
}

#[test]
fn metadata_longer_than_offset_metadata_max_bytes_fails_only_that_partition() {
    let mut h = Harness::new();
    let mut request = Harness::commit_request(G, -1, "", &[("t", 0, 1), ("t", 1, 2)]);
    request.topics[1].partitions[0].committed_metadata = Some("x".repeat(4097));
    request.topics[0].partitions[0].committed_metadata = Some("y".repeat(4096));
    let reply = h.send_commit(&request);
    let response = h.take_commit(reply).unwrap();
    let errors: Vec<i16> = response.topics.iter().flat_map(|t| &t.partitions).map(|p| p.error_code).collect();
    assert_eq!(errors, [0, code(ErrorCode::OFFSET_METADATA_TOO_LARGE)]);
    assert_eq!(response.topics.len(), 1, "partitions of one topic are grouped");
    assert_eq!(h.fetch(G, "t", &[0, 1]).iter().map(|p| p.committed_offset).collect::<Vec<_>>(), [1, -1]);
}

#[test]
fn fetch_for_an_unknown_group_gives_minus_one_everywhere() {
    let h = Harness::new();
    let fetched = h.fetch("nope", "t", &[0, 1]);
    assert_eq!(fetched.len(), 2);
    assert!(fetched.iter().all(|p| p.committed_offset == -1 && p.error_code == 0 && p.committed_leader_epoch == -1));
    let all = h.coordinator.fetch_offsets("nope", None, false);
    assert!(all.topics.is_empty());
    assert_eq!(all.error_code, 0);
}

#[test]
fn fetch_all_returns_every_committed_offset() {
    let mut h = Harness::new();
    h.commit(G, -1, "", &[("a", 0, 1), ("a", 1, 2), ("b", 0, 3)]);
    let all = h.coordinator.fetch_offsets(G, None, false);
    let flat: Vec<(String, i32, i64)> = all
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.clone(), p.partition_index, p.committed_offset)))
        .collect();
    assert_eq!(flat, [("a".into(), 0, 1), ("a".into(), 1, 2), ("b".into(), 0, 3)]);
}

fn offset_delete(group: &str, topics: &[(&str, &[i32])]) -> OffsetDeleteRequest {
    OffsetDeleteRequest {
        group_id: group.into(),
        topics: topics
            .iter()
            .map(|(name, partitions)| OffsetDeleteRequestTopic {
                name: name.to_string(),
                partitions: partitions.iter().map(|p| OffsetDeleteRequestPartition { partition_index: *p }).collect(),
            })
            .collect(),
    }
}

fn delete_offsets(h: &mut Harness, request: &OffsetDeleteRequest) -> osprey_protocol::messages::OffsetDeleteResponse {
    let reply = h.next_reply();
    h.coordinator.delete_offsets(request, reply);
    h.drain();
    match h.take(reply) {
        Some(Response::OffsetDelete(r)) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn offset_delete_refuses_topics_the_group_is_subscribed_to() {
    let mut h = Harness::new();
    let (generation, members, _) = h.stable_group(G, 2, &["orders"]);
    h.commit(G, generation, &members[0], &[("orders", 0, 1), ("old-topic", 0, 2)]);
    let log_len = h.log.len();
    let response = delete_offsets(&mut h, &offset_delete(G, &[("orders", &[0]), ("old-topic", &[0, 1])]));
    assert_eq!(response.error_code, 0);
    assert_eq!(response.topics[0].partitions[0].error_code, code(ErrorCode::GROUP_SUBSCRIBED_TO_TOPIC));
    assert_eq!(response.topics[1].partitions.iter().map(|p| p.error_code).collect::<Vec<_>>(), [0, 0]);
    assert_eq!(h.fetch(G, "old-topic", &[0])[0].committed_offset, -1);
    assert_eq!(h.fetch(G, "orders", &[0])[0].committed_offset, 1);
    // One tombstone, for the one offset that existed.
    assert_eq!(h.log.len(), log_len + 1);
    assert_eq!(h.log.last().unwrap().value, None);

    let response = delete_offsets(&mut h, &offset_delete("nope", &[("t", &[0])]));
    assert_eq!(response.error_code, code(ErrorCode::GROUP_ID_NOT_FOUND));
}

#[test]
fn offset_delete_on_a_non_consumer_group_with_members_is_non_empty_group() {
    let mut h = Harness::new();
    let mut request = Harness::join_request(G, "", None, &[("connect-protocol", bytes::Bytes::new())]);
    request.protocol_type = "connect".into();
    let first = h.send_join(&request, 9);
    request.member_id = h.take_join(first).unwrap().member_id;
    let r = h.send_join(&request, 9);
    h.advance(3_000);
    h.take_join(r).unwrap();
    let response = delete_offsets(&mut h, &offset_delete(G, &[("t", &[0])]));
    assert_eq!(response.error_code, code(ErrorCode::NON_EMPTY_GROUP));
}

#[test]
fn delete_groups_removes_empty_groups_with_their_offsets() {
    let mut h = Harness::new();
    h.commit("empty", -1, "", &[("t", 0, 1), ("t", 1, 2)]);
    h.stable_group("busy", 1, &["t"]);
    h.auto_persist = false;
    let reply = h.next_reply();
    h.coordinator.delete_groups(&["empty".into(), "busy".into(), "nope".into()], reply);
    h.drain();
    assert!(h.take(reply).is_none(), "answered once the tombstones are durable");
    assert_eq!(h.held_persists.len(), 1);
    let (_, group_id, records) = &h.held_persists[0];
    assert_eq!(group_id, "empty");
    assert_eq!(records.len(), 3, "two offset tombstones and the group's");
    assert!(records.iter().all(|r| r.value.is_none()));
    h.complete_persists();
    let Some(Response::DeleteGroups(response)) = h.take(reply) else { panic!() };
    let errors: Vec<(&str, i16)> = response.results.iter().map(|r| (r.group_id.as_str(), r.error_code)).collect();
    assert_eq!(
        errors,
        [("empty", 0), ("busy", code(ErrorCode::NON_EMPTY_GROUP)), ("nope", code(ErrorCode::GROUP_ID_NOT_FOUND))]
    );
    assert_eq!(h.coordinator.group_state("empty"), None);
    assert_eq!(h.fetch("empty", "t", &[0])[0].committed_offset, -1);
}

#[test]
fn describe_and_list_groups() {
    let mut h = Harness::new();
    let (_, members, leader) = h.stable_group(G, 2, &["t"]);
    h.commit("simple", -1, "", &[("t", 0, 1)]);
    let described = h.coordinator.describe_groups(&[G.into(), "nope".into()], 5);
    let group = &described.groups[0];
    assert_eq!(
        (group.group_state.as_str(), group.protocol_type.as_str(), group.protocol_data.as_str()),
        ("Stable", "consumer", "range")
    );
    assert_eq!(group.members.len(), 2);
    assert_eq!(group.members[0].member_id, members[0]);
    assert_eq!(group.members[0].client_id, "client");
    assert_eq!(group.members[0].client_host, "/10.0.0.1");
    assert_eq!(group.members[0].member_assignment, bytes::Bytes::from(members[0].clone().into_bytes()));
    assert_eq!(group.members[0].member_metadata, group_support::subscription(&["t"]));
    assert_eq!((described.groups[1].group_state.as_str(), described.groups[1].error_code), ("Dead", 0));
    let v6 = h.coordinator.describe_groups(&["nope".into()], 6);
    assert_eq!(v6.groups[0].error_code, code(ErrorCode::GROUP_ID_NOT_FOUND));
    // While rebalancing: no protocol, no metadata.
    h.join(G, &leader, None, &["t"]);
    let group = &h.coordinator.describe_groups(&[G.into()], 5).groups[0];
    assert_eq!((group.group_state.as_str(), group.protocol_data.as_str()), ("PreparingRebalance", ""));
    assert!(group.members.iter().all(|m| m.member_metadata.is_empty() && m.member_assignment.is_empty()));

    let all = h.coordinator.list_groups(&[], &[], 5);
    assert_eq!(all.groups.iter().map(|g| g.group_id.as_str()).collect::<Vec<_>>(), [G, "simple"]);
    assert!(all.groups.iter().all(|g| g.group_type == "classic"));
    let empty = h.coordinator.list_groups(&["empty".into()], &[], 5);
    assert_eq!(empty.groups.iter().map(|g| g.group_id.as_str()).collect::<Vec<_>>(), ["simple"]);
    assert!(h.coordinator.list_groups(&[], &["consumer".into()], 5).groups.is_empty());
    assert_eq!(h.coordinator.list_groups(&[], &["Classic".into()], 5).groups.len(), 2);
}

#[test]
fn offsets_of_an_empty_group_expire_after_the_retention_and_the_group_goes() {
    let config = GroupConfig { offsets_retention_minutes: 60, ..Default::default() };
    let mut h = Harness::with_config(config);
    let (generation, members, _) = h.stable_group(G, 1, &["t"]);
    h.commit(G, generation, &members[0], &[("t", 0, 1)]);
    let leave = osprey_protocol::messages::LeaveGroupRequest {
        group_id: G.into(),
        member_id: members[0].clone(),
        ..Default::default()
    };
    h.coordinator.leave(&leave, 1, h.now);
    h.drain();
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::Empty));
    // Retention counts from when the group became Empty.
    h.advance(3_600_000 - 1);
    assert_eq!(h.fetch(G, "t", &[0])[0].committed_offset, 1);
    h.advance(600_000);
    assert_eq!(h.fetch(G, "t", &[0])[0].committed_offset, -1);
    assert_eq!(h.coordinator.group_state(G), None);
    let tail: Vec<bool> = h.log[h.log.len() - 2..].iter().map(|r| r.value.is_none()).collect();
    assert_eq!(tail, [true, true], "offset and group tombstones");
}

#[test]
fn offsets_of_a_stable_group_do_not_expire_while_subscribed() {
    let config = GroupConfig { offsets_retention_minutes: 60, ..Default::default() };
    let mut h = Harness::with_config(config);
    let (generation, members, _) = h.stable_group(G, 1, &["t"]);
    h.commit(G, generation, &members[0], &[("t", 0, 1), ("gone", 0, 2)]);
    // 75 minutes of heartbeats every 5 s keep the member in the group.
    for _ in 0..900 {
        h.advance(5_000);
        assert_eq!(h.heartbeat(G, generation, &members[0], None), 0);
    }
    assert_eq!(h.fetch(G, "t", &[0])[0].committed_offset, 1);
    assert_eq!(h.fetch(G, "gone", &[0])[0].committed_offset, -1);
}

#[test]
fn commits_with_a_retention_time_use_the_old_expiry() {
    let mut h = Harness::new();
    let mut request: OffsetCommitRequest = Harness::commit_request(G, -1, "", &[("t", 0, 1)]);
    request.retention_time_ms = 1_000;
    let reply = h.next_reply();
    h.coordinator.commit_offsets(&request, 2, reply, h.now);
    h.drain();
    assert!(h.take_commit(reply).is_some());
    // Value version 1, with the expire timestamp.
    let value = h.log.last().unwrap().value.clone().unwrap();
    assert_eq!(&value[..2], &[0, 1]);
    h.advance(600_000);
    assert_eq!(h.fetch(G, "t", &[0])[0].committed_offset, -1);
}
