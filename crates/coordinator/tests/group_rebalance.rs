//! The classic rebalance protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, with time
//! passed in explicitly.

mod group_support;

use bytes::Bytes;
use group_support::{code, subscription, Harness, REBALANCE_MS, SESSION_MS};
use osprey_coordinator::group::{GroupConfig, GroupState};
use osprey_protocol::messages::leave_group_request::{LeaveGroupRequest, MemberIdentity};
use osprey_protocol::ErrorCode;

const G: &str = "my-group";

#[test]
fn three_members_join_and_sync_and_the_leader_gets_everyones_metadata() {
    let mut h = Harness::new();
    h.auto_persist = false;
    let (a, ra) = h.join_new(G, &["t1"]);
    let (b, rb) = h.join_new(G, &["t2"]);
    let (c, rc) = h.join_new(G, &["t1", "t3"]);
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::PreparingRebalance));
    // The second member arrived during the initial delay: it is extended once.
    h.advance(3_000);
    h.advance(3_000);
    let (ja, jb, jc) = (h.take_join(ra).unwrap(), h.take_join(rb).unwrap(), h.take_join(rc).unwrap());
    for j in [&ja, &jb, &jc] {
        assert_eq!(j.error_code, 0);
        assert_eq!(j.generation_id, 1);
        assert_eq!(j.leader, a);
        assert_eq!(j.protocol_name.as_deref(), Some("range"));
        assert_eq!(j.protocol_type.as_deref(), Some("consumer"));
        assert!(!j.skip_assignment);
    }
    assert_eq!(ja.members.len(), 3);
    let ids: Vec<&str> = ja.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, [a.as_str(), b.as_str(), c.as_str()]);
    assert_eq!(ja.members[1].metadata, subscription(&["t2"]));
    assert!(jb.members.is_empty() && jc.members.is_empty());
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::CompletingRebalance));

    // Followers wait for the leader.
    let sb = h.send_sync(G, 1, &b, None, &[]);
    assert!(h.take_sync(sb).is_none());
    let sa = h.send_sync(G, 1, &a, None, &[(&a, b"A"), (&b, b"B"), (&c, b"C")]);
    let sc = h.send_sync(G, 1, &c, None, &[]);
    // Nothing is released before the group metadata is durable.
    assert_eq!(h.held_persists.len(), 1);
    assert!(h.take_sync(sa).is_none() && h.take_sync(sb).is_none() && h.take_sync(sc).is_none());
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::CompletingRebalance));
    h.complete_persists();
    assert_eq!(h.take_sync(sa).unwrap().assignment, Bytes::from_static(b"A"));
    assert_eq!(h.take_sync(sb).unwrap().assignment, Bytes::from_static(b"B"));
    let sync_c = h.take_sync(sc).unwrap();
    assert_eq!(sync_c.assignment, Bytes::from_static(b"C"));
    assert_eq!(sync_c.protocol_name.as_deref(), Some("range"));
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::Stable));
    for m in [&a, &b, &c] {
        assert_eq!(h.heartbeat(G, 1, m, None), 0);
    }
    // A stable group answers a late SyncGroup with the member's assignment.
    let again = h.send_sync(G, 1, &b, None, &[]);
    assert_eq!(h.take_sync(again).unwrap().assignment, Bytes::from_static(b"B"));
}

#[test]
fn member_id_required_then_rejoin_with_the_given_id() {
    let mut h = Harness::new();
    let first = h.join(G, "", None, &["t"]);
    let response = h.take_join(first).unwrap();
    assert_eq!(response.error_code, code(ErrorCode::MEMBER_ID_REQUIRED));
    assert!(response.member_id.starts_with("client-"), "{}", response.member_id);
    assert_eq!(response.generation_id, -1);
    assert!(h.coordinator.members(G).is_empty(), "only pending until it rejoins");
    let rejoin = h.join(G, &response.member_id, None, &["t"]);
    h.advance(3_000);
    let joined = h.take_join(rejoin).unwrap();
    assert_eq!((joined.error_code, joined.member_id.as_str()), (0, response.member_id.as_str()));
}

#[test]
fn join_group_before_v4_gets_a_member_id_without_a_round_trip() {
    let mut h = Harness::new();
    let request = Harness::join_request(G, "", None, &[("range", subscription(&["t"]))]);
    let reply = h.send_join(&request, 3);
    assert!(h.take_join(reply).is_none());
    h.advance(3_000);
    let joined = h.take_join(reply).unwrap();
    assert_eq!(joined.error_code, 0);
    assert_eq!(joined.protocol_type, None, "v3 has no protocol type");
    assert_eq!(h.coordinator.members(G), vec![joined.member_id]);
}

#[test]
fn a_pending_member_that_never_rejoins_expires_after_its_session_timeout() {
    let mut h = Harness::new();
    let (a, ra) = h.join_new(G, &["t"]);
    let first = h.join(G, "", None, &["t"]);
    let pending = h.take_join(first).unwrap().member_id;
    h.advance(3_000);
    // The initial delay does not wait for pending members.
    assert_eq!(h.take_join(ra).unwrap().error_code, 0);
    h.advance(i64::from(SESSION_MS) - 3_000);
    let late = h.join(G, &pending, None, &["t"]);
    assert_eq!(h.take_join(late).unwrap().error_code, code(ErrorCode::UNKNOWN_MEMBER_ID));
    assert_eq!(h.coordinator.members(G), vec![a]);
}

#[test]
fn initial_rebalance_delay_waits_and_extends_while_members_arrive() {
    let mut h = Harness::new();
    let (_, ra) = h.join_new(G, &["t"]);
    h.advance(2_000);
    let (_, rb) = h.join_new(G, &["t"]);
    h.advance(999);
    assert!(h.take_join(ra).is_none(), "still inside the initial delay");
    // At 3 s a member had arrived during the delay: another 3 s (within the rebalance timeout).
    h.advance(1);
    assert!(h.take_join(ra).is_none());
    h.advance(2_999);
    assert!(h.take_join(ra).is_none());
    h.advance(1);
    let (ja, jb) = (h.take_join(ra).unwrap(), h.take_join(rb).unwrap());
    assert_eq!((ja.generation_id, jb.generation_id), (1, 1));
}

#[test]
fn initial_rebalance_delay_never_exceeds_the_rebalance_timeout() {
    let config = GroupConfig { group_initial_rebalance_delay_ms: 3_000, ..Default::default() };
    let mut h = Harness::with_config(config);
    let mut request = Harness::join_request(G, "", None, &[("range", subscription(&["t"]))]);
    request.rebalance_timeout_ms = 4_000;
    let first = h.send_join(&request, 9);
    request.member_id = h.take_join(first).unwrap().member_id;
    let ra = h.send_join(&request, 9);
    h.advance(1_000);
    let (_, rb) = h.join_new(G, &["t"]);
    // The group's rebalance timeout was 4 s when the rebalance began: after the first 3 s
    // delay only 1 s remains, although a member arrived meanwhile.
    h.advance(2_000);
    assert!(h.take_join(ra).is_none());
    h.advance(1_000);
    assert!(h.take_join(ra).is_some() && h.take_join(rb).is_some());
}

#[test]
fn a_member_missing_its_session_timeout_is_removed_and_the_others_told_to_rejoin() {
    let mut h = Harness::new();
    let (generation, members, _) = h.stable_group(G, 2, &["t"]);
    let (a, b) = (&members[0], &members[1]);
    h.advance(6_000);
    assert_eq!(h.heartbeat(G, generation, b, None), 0);
    h.advance(4_000);
    // a's session (10 s) is over; b heartbeated 4 s ago.
    assert_eq!(h.coordinator.members(G), vec![b.clone()]);
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::PreparingRebalance));
    assert_eq!(h.heartbeat(G, generation, b, None), code(ErrorCode::REBALANCE_IN_PROGRESS));
    assert_eq!(h.heartbeat(G, generation, a, None), code(ErrorCode::UNKNOWN_MEMBER_ID));
    let rejoin = h.join(G, b, None, &["t"]);
    let joined = h.take_join(rejoin).expect("everyone left has rejoined: no waiting");
    assert_eq!((joined.generation_id, joined.leader.as_str()), (generation + 1, b.as_str()));
    assert_eq!(joined.members.len(), 1);
}

#[test]
fn rebalance_timeout_removes_members_that_did_not_rejoin() {
    let mut h = Harness::new();
    let (generation, members, leader) = h.stable_group(G, 2, &["t"]);
    let follower = members.iter().find(|m| **m != leader).unwrap().clone();
    // The leader rejoining forces a rebalance.
    let rejoin = h.join(G, &leader, None, &["t"]);
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::PreparingRebalance));
    // The follower keeps heartbeating but never rejoins.
    for _ in 0..5 {
        h.advance(5_000);
        assert_eq!(h.heartbeat(G, generation, &follower, None), code(ErrorCode::REBALANCE_IN_PROGRESS));
    }
    assert!(h.take_join(rejoin).is_none());
    h.advance(i64::from(REBALANCE_MS) - 25_000);
    let joined = h.take_join(rejoin).unwrap();
    assert_eq!(joined.generation_id, generation + 1);
    assert_eq!(h.coordinator.members(G), vec![leader.clone()]);
    assert_eq!(h.heartbeat(G, generation, &follower, None), code(ErrorCode::UNKNOWN_MEMBER_ID));
}

#[test]
fn a_member_that_never_syncs_is_removed_after_the_rebalance_timeout() {
    let mut h = Harness::new();
    let (generation, members, _) = h.joined_group(G, 2, &["t"]);
    let (a, b) = (members[0].clone(), members[1].clone());
    let sa = h.send_sync(G, generation, &a, None, &[(&a, b"x"), (&b, b"y")]);
    assert_eq!(h.take_sync(sa).unwrap().error_code, 0);
    // b keeps its session alive but never sends SyncGroup.
    for _ in 0..6 {
        h.advance(5_000);
        h.heartbeat(G, generation, &b, None);
        h.heartbeat(G, generation, &a, None);
    }
    assert_eq!(h.coordinator.members(G), vec![a.clone()]);
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::PreparingRebalance));
}

#[test]
fn static_member_restart_keeps_its_assignment_without_a_rebalance() {
    let mut h = Harness::new();
    let ra = h.join(G, "", Some("instance-a"), &["t"]);
    let rb = h.join(G, "", Some("instance-b"), &["t"]);
    // The second member arrived during the initial delay: it is extended once.
    h.advance(3_000);
    h.advance(3_000);
    let (ja, jb) = (h.take_join(ra).unwrap(), h.take_join(rb).unwrap());
    let (a, b) = (ja.member_id.clone(), jb.member_id.clone());
    assert!(a.starts_with("instance-a-"));
    assert_eq!(ja.members[0].group_instance_id.as_deref(), Some("instance-a"));
    let sa = h.send_sync(G, 1, &a, Some("instance-a"), &[(&a, b"A"), (&b, b"B")]);
    let sb = h.send_sync(G, 1, &b, Some("instance-b"), &[]);
    assert_eq!(h.take_sync(sa).unwrap().error_code, 0);
    assert_eq!(h.take_sync(sb).unwrap().assignment, Bytes::from_static(b"B"));

    // instance-b restarts: unknown member id, same instance id.
    h.auto_persist = false;
    let restart = h.join(G, "", Some("instance-b"), &["t"]);
    assert!(h.take_join(restart).is_none(), "answered once the new member id is durable");
    assert_eq!(h.held_persists.len(), 1);
    h.complete_persists();
    let joined = h.take_join(restart).unwrap();
    assert_eq!(joined.error_code, 0);
    assert_eq!(joined.generation_id, 1, "no rebalance");
    assert_ne!(joined.member_id, b);
    assert!(!joined.skip_assignment, "a follower has nothing to skip");
    assert_eq!(joined.leader, a);
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::Stable));
    let new_b = joined.member_id;
    let sync = h.send_sync(G, 1, &new_b, Some("instance-b"), &[]);
    assert_eq!(h.take_sync(sync).unwrap().assignment, Bytes::from_static(b"B"));
    assert_eq!(h.heartbeat(G, 1, &a, Some("instance-a")), 0);
    // The old incarnation is fenced.
    assert_eq!(h.heartbeat(G, 1, &b, Some("instance-b")), code(ErrorCode::FENCED_INSTANCE_ID));
    assert_eq!(h.heartbeat(G, 1, &b, None), code(ErrorCode::UNKNOWN_MEMBER_ID));
}

#[test]
fn restarted_static_leader_learns_to_skip_the_assignment_from_v9() {
    let mut h = Harness::new();
    let a = stable_static_member(&mut h, "instance-a");
    let restart = h.join(G, "", Some("instance-a"), &["t"]);
    let joined = h.take_join(restart).unwrap();
    assert_ne!(joined.member_id, a);
    assert!(joined.skip_assignment);
    assert_eq!(joined.leader, joined.member_id);
    assert_eq!(joined.members.len(), 1);
    // Before v9 the old leader id comes back, so the client does not assign.
    let request = Harness::join_request(G, "", Some("instance-a"), &[("range", subscription(&["t"]))]);
    let restart = h.send_join(&request, 8);
    let joined_v8 = h.take_join(restart).unwrap();
    assert!(!joined_v8.skip_assignment);
    assert_eq!(joined_v8.leader, joined.member_id);
    assert_ne!(joined_v8.member_id, joined.member_id);
}

#[test]
fn static_member_replacement_is_undone_when_the_write_fails() {
    let mut h = Harness::new();
    let a = stable_static_member(&mut h, "instance-a");
    h.auto_persist = false;
    let restart = h.join(G, "", Some("instance-a"), &["t"]);
    h.fail_persists(ErrorCode::NOT_LEADER_OR_FOLLOWER);
    let failed = h.take_join(restart).unwrap();
    assert_eq!(failed.error_code, code(ErrorCode::NOT_COORDINATOR));
    assert_eq!(h.coordinator.members(G), vec![a.clone()]);
    assert_eq!(h.heartbeat(G, 1, &a, Some("instance-a")), 0);
}

#[test]
fn fenced_instance_id_for_a_stale_member_id_of_an_instance() {
    let mut h = Harness::new();
    let ra = h.join(G, "", Some("instance-a"), &["t"]);
    h.advance(3_000);
    let a = h.take_join(ra).unwrap().member_id;
    let stale = "instance-a-00000000-0000-4000-8000-000000000000";
    let join = h.join(G, stale, Some("instance-a"), &["t"]);
    assert_eq!(h.take_join(join).unwrap().error_code, code(ErrorCode::FENCED_INSTANCE_ID));
    let sync = h.send_sync(G, 1, stale, Some("instance-a"), &[]);
    assert_eq!(h.take_sync(sync).unwrap().error_code, code(ErrorCode::FENCED_INSTANCE_ID));
    assert_eq!(h.heartbeat(G, 1, stale, Some("instance-a")), code(ErrorCode::FENCED_INSTANCE_ID));
    let commit = Harness::commit_request(G, 1, stale, &[("t", 0, 1)]);
    let mut commit = commit;
    commit.group_instance_id = Some("instance-a".into());
    let reply = h.send_commit(&commit);
    let errors: Vec<i16> = h.take_commit(reply).unwrap().topics[0].partitions.iter().map(|p| p.error_code).collect();
    assert_eq!(errors, [code(ErrorCode::FENCED_INSTANCE_ID)]);
    let leave = LeaveGroupRequest {
        group_id: G.into(),
        members: vec![MemberIdentity {
            member_id: stale.into(),
            group_instance_id: Some("instance-a".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let response = h.coordinator.leave(&leave, 5, h.now);
    assert_eq!(response.members[0].error_code, code(ErrorCode::FENCED_INSTANCE_ID));
    // An unknown instance id with a known member id: UNKNOWN_MEMBER_ID.
    assert_eq!(h.heartbeat(G, 1, &a, Some("instance-z")), code(ErrorCode::UNKNOWN_MEMBER_ID));
    assert_eq!(h.heartbeat(G, 1, &a, Some("instance-a")), 0);
}

#[test]
fn join_errors() {
    let mut h = Harness::new();
    let mut request = Harness::join_request(G, "", None, &[("range", subscription(&["t"]))]);
    for timeout in [5_999, 1_800_001] {
        request.session_timeout_ms = timeout;
        let r = h.send_join(&request, 9);
        assert_eq!(h.take_join(r).unwrap().error_code, code(ErrorCode::INVALID_SESSION_TIMEOUT));
    }
    request.session_timeout_ms = SESSION_MS;
    let r = h.send_join(&Harness::join_request("", "", None, &[("range", Bytes::new())]), 9);
    assert_eq!(h.take_join(r).unwrap().error_code, code(ErrorCode::INVALID_GROUP_ID));
    // A member id for a group that does not exist.
    let r = h.send_join(&Harness::join_request("nope", "ghost", None, &[("range", Bytes::new())]), 9);
    assert_eq!(h.take_join(r).unwrap().error_code, code(ErrorCode::UNKNOWN_MEMBER_ID));
    // Empty protocol list or type on an empty group.
    let r = h.send_join(&Harness::join_request(G, "", None, &[]), 9);
    assert_eq!(h.take_join(r).unwrap().error_code, code(ErrorCode::INCONSISTENT_GROUP_PROTOCOL));

    let (generation, members, _) = h.stable_group(G, 1, &["t"]);
    // A protocol nobody in the group supports, or another protocol type.
    let r = h.send_join(&Harness::join_request(G, "", None, &[("roundrobin", Bytes::new())]), 9);
    assert_eq!(h.take_join(r).unwrap().error_code, code(ErrorCode::INCONSISTENT_GROUP_PROTOCOL));
    let mut other_type = Harness::join_request(G, "", None, &[("range", Bytes::new())]);
    other_type.protocol_type = "connect".into();
    let r = h.send_join(&other_type, 9);
    assert_eq!(h.take_join(r).unwrap().error_code, code(ErrorCode::INCONSISTENT_GROUP_PROTOCOL));
    // A member id the group does not know.
    let r = h.join(G, "client-unknown", None, &["t"]);
    assert_eq!(h.take_join(r).unwrap().error_code, code(ErrorCode::UNKNOWN_MEMBER_ID));
    assert_eq!(h.generation(), generation);
    assert_eq!(h.coordinator.members(G), members);
}

#[test]
fn group_max_size_turns_away_extra_members() {
    let config = GroupConfig { group_max_size: 1, ..Default::default() };
    let mut h = Harness::with_config(config);
    h.stable_group(G, 1, &["t"]);
    let r = h.join(G, "", None, &["t"]);
    let response = h.take_join(r).unwrap();
    assert_eq!(response.error_code, code(ErrorCode::GROUP_MAX_SIZE_REACHED));
}

#[test]
fn protocol_is_chosen_among_the_common_ones_by_votes() {
    let mut h = Harness::new();
    let s = subscription(&["t"]);
    let mut joins = Vec::new();
    for protocols in [
        vec![("roundrobin", s.clone()), ("range", s.clone()), ("sticky", s.clone())],
        vec![("range", s.clone()), ("roundrobin", s.clone())],
        vec![("range", s.clone()), ("roundrobin", s.clone()), ("cooperative", s.clone())],
    ] {
        let first = h.send_join(&Harness::join_request(G, "", None, &protocols), 9);
        let member_id = h.take_join(first).unwrap().member_id;
        joins.push(h.send_join(&Harness::join_request(G, &member_id, None, &protocols), 9));
    }
    // The second member arrived during the initial delay: it is extended once.
    h.advance(3_000);
    h.advance(3_000);
    for r in joins {
        assert_eq!(h.take_join(r).unwrap().protocol_name.as_deref(), Some("range"));
    }
}

#[test]
fn sync_errors() {
    let mut h = Harness::new();
    let r = h.send_sync("nope", 1, "m", None, &[]);
    assert_eq!(h.take_sync(r).unwrap().error_code, code(ErrorCode::UNKNOWN_MEMBER_ID));
    let r = h.send_sync("", 1, "m", None, &[]);
    assert_eq!(h.take_sync(r).unwrap().error_code, code(ErrorCode::INVALID_GROUP_ID));
    let (generation, members, leader) = h.stable_group(G, 2, &["t"]);
    let r = h.send_sync(G, generation + 1, &leader, None, &[]);
    assert_eq!(h.take_sync(r).unwrap().error_code, code(ErrorCode::ILLEGAL_GENERATION));
    let r = h.send_sync(G, generation, "client-unknown", None, &[]);
    assert_eq!(h.take_sync(r).unwrap().error_code, code(ErrorCode::UNKNOWN_MEMBER_ID));
    // SyncGroup v5 names the protocol: it must be the group's.
    let mut request = osprey_protocol::messages::SyncGroupRequest {
        group_id: G.into(),
        generation_id: generation,
        member_id: leader.clone(),
        protocol_type: Some("consumer".into()),
        protocol_name: Some("roundrobin".into()),
        ..Default::default()
    };
    let reply = h.next_reply();
    h.coordinator.sync(&request, 5, reply, h.now);
    h.drain();
    assert_eq!(h.take_sync(reply).unwrap().error_code, code(ErrorCode::INCONSISTENT_GROUP_PROTOCOL));
    request.protocol_name = Some("range".into());
    let reply = h.next_reply();
    h.coordinator.sync(&request, 5, reply, h.now);
    h.drain();
    assert_eq!(h.take_sync(reply).unwrap().error_code, 0);
    // During PreparingRebalance: REBALANCE_IN_PROGRESS.
    let follower = members.iter().find(|m| **m != leader).unwrap();
    let rejoin = h.join(G, &leader, None, &["t"]);
    let r = h.send_sync(G, generation, follower, None, &[]);
    assert_eq!(h.take_sync(r).unwrap().error_code, code(ErrorCode::REBALANCE_IN_PROGRESS));
    assert!(h.take_join(rejoin).is_none());
}

#[test]
fn a_rebalance_starting_during_completing_rebalance_answers_waiting_syncs() {
    let mut h = Harness::new();
    let (generation, members, _) = h.joined_group(G, 2, &["t"]);
    let (a, b) = (members[0].clone(), members[1].clone());
    let sb = h.send_sync(G, generation, &b, None, &[]);
    // A new member arrives before the leader syncs.
    let (_, rc) = h.join_new(G, &["t"]);
    assert_eq!(h.take_sync(sb).unwrap().error_code, code(ErrorCode::REBALANCE_IN_PROGRESS));
    // The heartbeat tells the others; they rejoin and the rebalance ends without waiting.
    assert_eq!(h.heartbeat(G, generation, &a, None), code(ErrorCode::REBALANCE_IN_PROGRESS));
    let ra2 = h.join(G, &a, None, &["t"]);
    let rb2 = h.join(G, &b, None, &["t"]);
    for r in [rc, ra2, rb2] {
        assert_eq!(h.take_join(r).unwrap().generation_id, generation + 1);
    }
}

#[test]
fn sync_append_failure_answers_the_mapped_error_and_rebalances() {
    let mut h = Harness::new();
    let (a, ra) = h.join_new(G, &["t"]);
    h.advance(3_000);
    h.take_join(ra).unwrap();
    h.auto_persist = false;
    let sa = h.send_sync(G, 1, &a, None, &[(&a, b"A")]);
    h.fail_persists(ErrorCode::NOT_ENOUGH_REPLICAS);
    assert_eq!(h.take_sync(sa).unwrap().error_code, code(ErrorCode::COORDINATOR_NOT_AVAILABLE));
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::PreparingRebalance));
}

#[test]
fn leave_group_triggers_a_rebalance_with_per_member_errors() {
    let mut h = Harness::new();
    let (generation, members, _) = h.stable_group(G, 3, &["t"]);
    let leave = LeaveGroupRequest {
        group_id: G.into(),
        members: vec![
            MemberIdentity { member_id: members[0].clone(), group_instance_id: None, ..Default::default() },
            MemberIdentity { member_id: "client-ghost".into(), group_instance_id: None, ..Default::default() },
        ],
        ..Default::default()
    };
    let response = h.coordinator.leave(&leave, 5, h.now);
    h.drain();
    assert_eq!(response.error_code, 0);
    let errors: Vec<i16> = response.members.iter().map(|m| m.error_code).collect();
    assert_eq!(errors, [0, code(ErrorCode::UNKNOWN_MEMBER_ID)]);
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::PreparingRebalance));
    assert_eq!(h.heartbeat(G, generation, &members[1], None), code(ErrorCode::REBALANCE_IN_PROGRESS));
    // v0-2: one member, its error at the top.
    let v0 = LeaveGroupRequest { group_id: G.into(), member_id: "client-ghost".into(), ..Default::default() };
    let response = h.coordinator.leave(&v0, 0, h.now);
    assert_eq!(response.error_code, code(ErrorCode::UNKNOWN_MEMBER_ID));
    assert!(response.members.is_empty());
    // Everyone leaves: the rebalance ends with an Empty group, written as such.
    for m in &members[1..] {
        let v1 = LeaveGroupRequest { group_id: G.into(), member_id: m.clone(), ..Default::default() };
        assert_eq!(h.coordinator.leave(&v1, 1, h.now).error_code, 0);
        h.drain();
    }
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::Empty));
    assert_eq!(h.coordinator.generation(G), Some(generation + 1));
    // Leaving a group that does not exist.
    let unknown = LeaveGroupRequest {
        group_id: "nope".into(),
        members: vec![MemberIdentity { member_id: "m".into(), ..Default::default() }],
        ..Default::default()
    };
    assert_eq!(h.coordinator.leave(&unknown, 3, h.now).members[0].error_code, code(ErrorCode::UNKNOWN_MEMBER_ID));
}

#[test]
fn leave_by_instance_id_removes_the_static_member() {
    let mut h = Harness::new();
    let ra = h.join(G, "", Some("instance-a"), &["t"]);
    h.advance(3_000);
    h.take_join(ra).unwrap();
    let leave = LeaveGroupRequest {
        group_id: G.into(),
        members: vec![
            MemberIdentity {
                member_id: String::new(),
                group_instance_id: Some("instance-a".into()),
                ..Default::default()
            },
            MemberIdentity {
                member_id: String::new(),
                group_instance_id: Some("instance-b".into()),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let response = h.coordinator.leave(&leave, 4, h.now);
    h.drain();
    let errors: Vec<i16> = response.members.iter().map(|m| m.error_code).collect();
    assert_eq!(errors, [0, code(ErrorCode::UNKNOWN_MEMBER_ID)]);
    assert!(h.coordinator.members(G).is_empty());
}

#[test]
fn heartbeat_errors() {
    let mut h = Harness::new();
    assert_eq!(h.heartbeat("nope", 1, "m", None), code(ErrorCode::UNKNOWN_MEMBER_ID));
    assert_eq!(h.heartbeat("", 1, "m", None), code(ErrorCode::INVALID_GROUP_ID));
    let (generation, members, _) = h.stable_group(G, 1, &["t"]);
    assert_eq!(h.heartbeat(G, generation - 1, &members[0], None), code(ErrorCode::ILLEGAL_GENERATION));
    assert_eq!(h.heartbeat(G, generation, "client-x", None), code(ErrorCode::UNKNOWN_MEMBER_ID));
    assert_eq!(h.heartbeat(G, generation, &members[0], None), 0);
}

#[test]
fn the_rebalance_ends_when_a_silent_members_session_expires() {
    let mut h = Harness::new();
    let (generation, members, _) = h.stable_group(G, 1, &["t"]);
    let (_, rb) = h.join_new(G, &["t"]);
    // The old member neither heartbeats nor rejoins: its session ends at 10 s, which
    // completes the rebalance with the new member alone.
    h.advance(i64::from(SESSION_MS) - 1);
    assert!(h.take_join(rb).is_none());
    h.advance(1);
    let joined = h.take_join(rb).unwrap();
    assert_eq!(joined.generation_id, generation + 1);
    assert!(!h.coordinator.members(G).contains(&members[0]));
}

#[test]
fn a_new_member_waiting_longer_than_the_new_member_join_timeout_is_dropped() {
    let config = GroupConfig { new_member_join_timeout_ms: 20_000, ..Default::default() };
    let mut h = Harness::with_config(config);
    let (generation, members, _) = h.stable_group(G, 1, &["t"]);
    let (b, rb) = h.join_new(G, &["t"]);
    // The old member heartbeats but never rejoins, so the rebalance lasts its full 30 s.
    for _ in 0..3 {
        h.advance(5_000);
        assert_eq!(h.heartbeat(G, generation, &members[0], None), code(ErrorCode::REBALANCE_IN_PROGRESS));
    }
    h.advance(4_999);
    assert!(h.take_join(rb).is_none());
    h.advance(1);
    let dropped = h.take_join(rb).unwrap();
    assert_eq!(dropped.error_code, code(ErrorCode::UNKNOWN_MEMBER_ID));
    assert!(!h.coordinator.members(G).contains(&b));
}

/// A Stable group of one static member; returns its member id.
fn stable_static_member(h: &mut Harness, instance: &str) -> String {
    let reply = h.join(G, "", Some(instance), &["t"]);
    h.advance(3_000);
    let member_id = h.take_join(reply).unwrap().member_id;
    let sync = h.send_sync(G, 1, &member_id, Some(instance), &[(&member_id, b"A")]);
    assert_eq!(h.take_sync(sync).unwrap().error_code, 0);
    member_id
}

trait Generation {
    fn generation(&self) -> i32;
}

impl Generation for Harness {
    fn generation(&self) -> i32 {
        self.coordinator.generation(G).unwrap()
    }
}

#[test]
fn a_rejoin_with_unchanged_metadata_returns_the_current_generation() {
    let mut h = Harness::new();
    let (_, members, _) = h.joined_group(G, 2, &["t"]);
    let (a, b) = (members[0].clone(), members[1].clone());
    // CompletingRebalance: a member that lost its response asks again; the leader gets
    // the member list again.
    let again = h.join(G, &a, None, &["t"]);
    let response = h.take_join(again).unwrap();
    assert_eq!((response.generation_id, response.members.len()), (1, 2));
    let sa = h.send_sync(G, 1, &a, None, &[(&a, b"A"), (&b, b"B")]);
    h.take_sync(sa).unwrap();
    // Stable: a follower with the same metadata gets the generation, no rebalance.
    let again = h.join(G, &b, None, &["t"]);
    let response = h.take_join(again).unwrap();
    assert_eq!((response.generation_id, response.leader.as_str(), response.members.len()), (1, a.as_str(), 0));
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::Stable));
    // ... but new metadata starts a rebalance.
    let changed = h.join(G, &b, None, &["t", "u"]);
    assert!(h.take_join(changed).is_none());
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::PreparingRebalance));
}

#[test]
fn unloading_the_partition_answers_held_requests_not_coordinator() {
    let mut h = Harness::new();
    let (_, ra) = h.join_new(G, &["t"]);
    let partition = osprey_coordinator::group::partition_for(G, 50);
    assert_eq!(h.coordinator.unload_partition((partition + 1) % 50, 50, h.now), 0);
    assert_eq!(h.coordinator.unload_partition(partition, 50, h.now), 1);
    h.drain();
    assert_eq!(h.take_join(ra).unwrap().error_code, code(ErrorCode::NOT_COORDINATOR));
    assert_eq!(h.coordinator.group_state(G), None);
    assert_eq!(h.coordinator.held_replies(), 0);
}

#[test]
fn next_deadline_tells_the_server_when_to_tick() {
    let mut h = Harness::new();
    h.coordinator.tick(h.now);
    let (_, _) = h.join_new(G, &["t"]);
    assert_eq!(h.coordinator.next_deadline(), Some(h.now + 3_000), "the initial delay");
    h.advance(3_000);
    assert_eq!(h.coordinator.next_deadline(), Some(h.now + i64::from(SESSION_MS)), "the member's session");
}

#[test]
fn a_silent_static_member_expires_exactly_one_session_timeout_after_its_last_heartbeat() {
    let mut h = Harness::new();
    let member_id = stable_static_member(&mut h, "instance-a");
    h.advance(1_000);
    assert_eq!(h.heartbeat(G, 1, &member_id, Some("instance-a")), 0);
    // The member closes without LeaveGroup (as a static member does).
    h.advance(i64::from(SESSION_MS) - 1);
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::Stable), "one millisecond early");
    h.advance(1);
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::Empty), "expired at the session timeout");
}
