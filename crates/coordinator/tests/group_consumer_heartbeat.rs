//! KIP-848 ConsumerGroupHeartbeat: joining, convergence through revocation rounds,
//! leaving, session and rebalance timeouts, fencing, static members, errors.

mod group_consumer_support;

use group_consumer_support::*;
use osprey_coordinator::group::consumer::{Assignment, INVALID_REGULAR_EXPRESSION};
use osprey_coordinator::group::group_config::ConsumerGroupOverrides;
use osprey_coordinator::group::{ConsumerGroupState, GroupConfig};
use osprey_protocol::messages::consumer_group_heartbeat_request::ConsumerGroupHeartbeatRequest;
use osprey_protocol::ErrorCode;
use std::collections::BTreeSet;

fn code(e: ErrorCode) -> i16 {
    e.code()
}

fn three_converged(h: &mut Harness) -> Vec<Client> {
    let mut clients = vec![
        Client::new("member-a-0000000000001", &["t1", "t2"]),
        Client::new("member-b-0000000000002", &["t1", "t2"]),
        Client::new("member-c-0000000000003", &["t1", "t2"]),
    ];
    for i in 0..clients.len() {
        h.heartbeat(&mut clients[i]);
        assert_exclusive(&clients);
    }
    h.converge(&mut clients);
    clients
}

#[test]
fn three_members_converge_to_a_balanced_target_through_revocations() {
    let mut h = Harness::new();
    let mut a = Client::new("member-a-0000000000001", &["t1", "t2"]);
    let first = h.heartbeat(&mut a);
    // The first member gets everything at once: nobody else owns anything.
    assert_eq!((first.member_epoch, a.count()), (2, 9));
    assert_eq!(first.heartbeat_interval_ms, 5_000);
    let mut clients = vec![a, Client::new("member-b-0000000000002", &["t1", "t2"])];
    let joined = h.heartbeat(&mut clients[1]);
    // b joins at group epoch 3, but a still owns everything: b waits (unreleased).
    assert_eq!(joined.member_epoch, 3);
    assert_eq!(clients[1].count(), 0);
    // a is asked to revoke: its answer omits what moves, and its epoch stays until it
    // has revoked.
    let revoking = h.heartbeat(&mut clients[0]);
    assert_eq!(revoking.member_epoch, 2);
    assert!(clients[0].count() < 9);
    // It reports the revocation and advances.
    assert_eq!(h.heartbeat(&mut clients[0]).member_epoch, 3);
    clients.push(Client::new("member-c-0000000000003", &["t1", "t2"]));
    h.converge(&mut clients);
    let counts: Vec<usize> = clients.iter().map(Client::count).collect();
    assert_eq!(counts, vec![3, 3, 3]);
    assert!(clients.iter().all(|c| c.epoch == 4));
    assert_eq!(h.coordinator.consumer_group_state(GROUP), Some(ConsumerGroupState::Stable));
    let all: BTreeSet<(osprey_protocol::Uuid, i32)> =
        clients.iter().flat_map(|c| c.owned.iter().flat_map(|(t, ps)| ps.iter().map(|p| (*t, *p)))).collect();
    assert_eq!(all.len(), 9);
}

#[test]
fn a_heartbeat_that_changes_nothing_writes_nothing() {
    let mut h = Harness::new();
    let mut clients = three_converged(&mut h);
    let persists = h.persists;
    let response = h.heartbeat(&mut clients[0]);
    assert_eq!(h.persists, persists);
    // The client reported what it owns: the answer carries its assignment again.
    assert!(response.assignment.is_some());
    let mut quiet = clients[0].request();
    quiet.topic_partitions = None;
    assert!(h.send(&quiet).assignment.is_none());
}

#[test]
fn a_member_leaving_frees_its_partitions() {
    let mut h = Harness::new();
    let mut clients = three_converged(&mut h);
    let mut leave = clients[2].request();
    leave.member_epoch = -1;
    let left = h.send(&leave);
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
    assert_eq!(left.member_id.as_deref(), Some(clients[2].member_id.as_str()));
    clients.pop();
    h.converge(&mut clients);
    let counts: Vec<usize> = clients.iter().map(Client::count).collect();
    assert_eq!(counts.iter().sum::<usize>(), 9);
    assert!(counts.iter().all(|&n| n == 4 || n == 5), "{counts:?}");
    assert!(clients.iter().all(|c| c.epoch == 5));
    // Heartbeats of the departed member are unknown.
    let mut stale = clients[0].request();
    stale.member_id = "member-c-0000000000003".into();
    stale.member_epoch = 3;
    assert_eq!(h.send(&stale).error_code, code(ErrorCode::UNKNOWN_MEMBER_ID));
}

#[test]
fn session_timeout_expires_a_silent_member() {
    let mut h = Harness::new();
    let mut clients = three_converged(&mut h);
    for _ in 0..10 {
        h.advance(5_000);
        h.heartbeat(&mut clients[0]);
        h.heartbeat(&mut clients[1]);
    }
    // c stayed silent for 50 s > group.consumer.session.timeout.ms (45 s).
    let described = h.coordinator.consumer_group_describe(&[GROUP.to_string()]);
    assert_eq!(described.groups[0].members.len(), 2);
    clients.pop();
    h.converge(&mut clients);
    assert_eq!(clients.iter().map(Client::count).sum::<usize>(), 9);
}

#[test]
fn a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced() {
    let mut h = Harness::new();
    let mut a = Client::new("member-a-0000000000001", &["t1", "t2"]);
    h.heartbeat(&mut a);
    let mut b = Client::new("member-b-0000000000002", &["t1", "t2"]);
    h.heartbeat(&mut b);
    // a is asked to revoke but keeps reporting everything it owned.
    let keep = a.owned.clone();
    h.heartbeat(&mut a);
    a.owned = keep;
    for _ in 0..13 {
        h.advance(5_000);
        let response = h.send(&a.request());
        if response.error_code != 0 {
            assert_eq!(response.error_code, code(ErrorCode::UNKNOWN_MEMBER_ID));
            break;
        }
        h.heartbeat(&mut b);
    }
    let described = h.coordinator.consumer_group_describe(&[GROUP.to_string()]);
    assert_eq!(described.groups[0].members.len(), 1, "a was fenced after {REBALANCE_MS} ms");
    h.converge(std::slice::from_mut(&mut b));
    assert_eq!(b.count(), 9);
}

#[test]
fn fenced_member_epochs() {
    let mut h = Harness::new();
    // a goes 2 -> 3 through a revocation, so its previous epoch is 2.
    let mut clients = three_converged_prefix(&mut h, 2);
    let epoch = clients[0].epoch;
    assert_eq!(epoch, 3);
    let mut ahead = clients[0].request();
    ahead.member_epoch = epoch + 1;
    assert_eq!(h.send(&ahead).error_code, code(ErrorCode::FENCED_MEMBER_EPOCH));
    // The previous epoch with partitions outside the assignment is fenced...
    let mut behind = clients[0].request();
    behind.member_epoch = epoch - 1;
    behind.topic_partitions = Some(owned_list(&clients[1].owned));
    assert_eq!(h.send(&behind).error_code, code(ErrorCode::FENCED_MEMBER_EPOCH));
    // ... with a subset of it, accepted: the answer with the new epoch may have been lost.
    let mut previous = clients[0].request();
    previous.member_epoch = epoch - 1;
    previous.topic_partitions = Some(Vec::new());
    let accepted = h.send(&previous);
    assert_eq!((accepted.error_code, accepted.member_epoch), (0, epoch));
    // Rejoining with epoch 0 under a known member id is fenced too (Kafka's
    // throwIfMemberEpochIsInvalid: 0 is neither the current nor the previous epoch).
    let mut rejoin = clients[0].clone();
    rejoin.epoch = 0;
    rejoin.owned = Assignment::new();
    assert_eq!(h.send(&rejoin.request()).error_code, code(ErrorCode::FENCED_MEMBER_EPOCH));
    h.heartbeat(&mut clients[0]);
}

#[test]
fn unknown_members_and_groups() {
    let mut h = Harness::new();
    let mut request = Client::new("member-x-0000000000009", &["t1"]).request();
    request.member_epoch = 3;
    request.topic_partitions = None;
    assert_eq!(h.send(&request).error_code, code(ErrorCode::GROUP_ID_NOT_FOUND));
    let _clients = three_converged(&mut h);
    assert_eq!(h.send(&request).error_code, code(ErrorCode::UNKNOWN_MEMBER_ID));
    request.member_epoch = -1;
    assert_eq!(h.send(&request).error_code, code(ErrorCode::UNKNOWN_MEMBER_ID));
}

#[test]
fn static_member_leaves_for_now_and_rejoins_with_its_assignment() {
    let mut h = Harness::new();
    let mut clients = vec![
        Client::new("member-s1-000000000001", &["t1", "t2"]).with_instance("i1"),
        Client::new("member-s2-000000000002", &["t1", "t2"]).with_instance("i2"),
    ];
    h.heartbeat(&mut clients[0]);
    h.heartbeat(&mut clients[1]);
    h.converge(&mut clients);
    let owned_before = clients[0].owned.clone();
    let epoch_before = h.coordinator.consumer_group_describe(&[GROUP.to_string()]).groups[0].group_epoch;
    // A second instance "i1" cannot join while the first is still there.
    let mut usurper = Client::new("member-s3-000000000003", &["t1", "t2"]).with_instance("i1");
    assert_eq!(h.send(&usurper.request()).error_code, code(ErrorCode::UNRELEASED_INSTANCE_ID));
    // A heartbeat under the instance id with another member id is fenced.
    let mut impostor = clients[0].request();
    impostor.member_id = "member-s3-000000000003".into();
    assert_eq!(h.send(&impostor).error_code, code(ErrorCode::FENCED_INSTANCE_ID));
    // Leave for now: epoch -2; the group epoch does not move.
    let mut leave = clients[0].request();
    leave.member_epoch = -2;
    let left = h.send(&leave);
    assert_eq!((left.error_code, left.member_epoch), (0, -2));
    let described = h.coordinator.consumer_group_describe(&[GROUP.to_string()]);
    assert_eq!(described.groups[0].group_epoch, epoch_before);
    assert!(described.groups[0].members.iter().any(|m| m.member_epoch == -2));
    // The instance comes back under a new member id and gets its partitions back.
    let response = h.heartbeat(&mut usurper);
    assert_eq!(response.error_code, 0);
    assert_eq!(usurper.owned, owned_before);
    assert_eq!(response.member_epoch, epoch_before);
    let described = h.coordinator.consumer_group_describe(&[GROUP.to_string()]);
    assert_eq!(described.groups[0].group_epoch, epoch_before);
    assert_eq!(described.groups[0].members.len(), 2);
    assert!(described.groups[0].members.iter().all(|m| m.member_id != clients[0].member_id));
}

#[test]
fn static_member_leaving_for_good_bumps_the_epoch() {
    let mut h = Harness::new();
    let mut clients = vec![Client::new("member-s1-000000000001", &["t1"]).with_instance("i1")];
    h.converge(&mut clients);
    let mut leave = clients[0].request();
    leave.member_epoch = -1;
    assert_eq!(h.send(&leave).error_code, 0);
    let described = h.coordinator.consumer_group_describe(&[GROUP.to_string()]);
    assert_eq!(described.groups[0].group_state, "Empty");
    assert_eq!(described.groups[0].group_epoch, 3);
}

#[test]
fn malformed_first_heartbeats_are_invalid_requests() {
    let mut h = Harness::new();
    let good = Client::new("member-a-0000000000001", &["t1"]).request();
    let cases: Vec<(&str, ConsumerGroupHeartbeatRequest)> = vec![
        ("no rebalance timeout", ConsumerGroupHeartbeatRequest { rebalance_timeout_ms: -1, ..good.clone() }),
        ("no subscription", ConsumerGroupHeartbeatRequest { subscribed_topic_names: None, ..good.clone() }),
        ("owned partitions when joining", ConsumerGroupHeartbeatRequest { topic_partitions: None, ..good.clone() }),
        ("empty group id", ConsumerGroupHeartbeatRequest { group_id: String::new(), ..good.clone() }),
        ("empty member id in v1", ConsumerGroupHeartbeatRequest { member_id: String::new(), ..good.clone() }),
        ("epoch -3", ConsumerGroupHeartbeatRequest { member_epoch: -3, ..good.clone() }),
        ("-2 without instance", ConsumerGroupHeartbeatRequest { member_epoch: -2, ..good.clone() }),
    ];
    for (what, request) in cases {
        let response = h.send(&request);
        assert_eq!(response.error_code, code(ErrorCode::INVALID_REQUEST), "{what}");
        assert!(response.error_message.is_some());
    }
    assert_eq!(h.coordinator.consumer_group_state(GROUP), None, "no group from failed joins");
    let unknown = ConsumerGroupHeartbeatRequest { server_assignor: Some("sticky".into()), ..good.clone() };
    assert_eq!(h.send(&unknown).error_code, code(ErrorCode::UNSUPPORTED_ASSIGNOR));
    let regex = ConsumerGroupHeartbeatRequest {
        subscribed_topic_names: None,
        subscribed_topic_regex: Some("t[".into()),
        ..good.clone()
    };
    let refused = h.send(&regex);
    assert_eq!(refused.error_code, INVALID_REGULAR_EXPRESSION);
    assert!(refused.error_message.unwrap().contains("is not a valid regular expression"));
    // A pattern without metacharacters matches the one topic of that name.
    let literal = ConsumerGroupHeartbeatRequest {
        subscribed_topic_names: None,
        subscribed_topic_regex: Some("t2".into()),
        ..good
    };
    let joined = h.send(&literal);
    assert_eq!(joined.error_code, 0);
    assert_eq!(joined.assignment.unwrap().topic_partitions[0].partitions, vec![0, 1, 2]);
}

#[test]
fn version_0_joins_get_a_member_id_from_the_coordinator() {
    let mut h = Harness::new();
    let request = ConsumerGroupHeartbeatRequest { member_id: String::new(), ..Client::new("", &["t1"]).request() };
    let response = h.send_version(&request, 0);
    assert_eq!(response.error_code, 0);
    let id = response.member_id.unwrap();
    assert_eq!(id.len(), 22);
    assert_eq!(response.member_epoch, 2);
}

#[test]
fn the_range_assignor_is_used_when_asked_for() {
    let mut h = Harness::new();
    let mut clients: Vec<Client> = ["member-a-0000000000001", "member-b-0000000000002"]
        .iter()
        .map(|id| Client { assignor: Some("range".into()), ..Client::new(id, &["t1", "t2"]) })
        .collect();
    h.converge(&mut clients);
    let t1 = topic_id(1);
    let t2 = topic_id(2);
    assert_eq!(clients[0].owned[&t1], [0, 1, 2].into());
    assert_eq!(clients[0].owned[&t2], [0, 1].into());
    assert_eq!(clients[1].owned[&t1], [3, 4, 5].into());
    assert_eq!(clients[1].owned[&t2], [2].into());
    let described = h.coordinator.consumer_group_describe(&[GROUP.to_string()]);
    assert_eq!(described.groups[0].assignor_name, "range");
}

#[test]
fn a_full_group_rejects_new_members() {
    let config = GroupConfig { consumer_group_max_size: 2, ..Default::default() };
    let mut h = Harness::with_config(config);
    let _clients = three_converged_prefix(&mut h, 2);
    let c = Client::new("member-c-0000000000003", &["t1"]);
    assert_eq!(h.send(&c.request()).error_code, code(ErrorCode::GROUP_MAX_SIZE_REACHED));
}

fn three_converged_prefix(h: &mut Harness, n: usize) -> Vec<Client> {
    let mut clients: Vec<Client> = ["member-a-0000000000001", "member-b-0000000000002", "member-c-0000000000003"]
        .iter()
        .take(n)
        .map(|id| Client::new(id, &["t1", "t2"]))
        .collect();
    h.converge(&mut clients);
    clients
}

#[test]
fn new_partitions_of_a_subscribed_topic_are_assigned_at_the_next_heartbeat() {
    let mut h = Harness::new();
    let mut clients = three_converged(&mut h);
    h.topics.get_mut("t2").unwrap().num_partitions = 6;
    h.converge(&mut clients);
    assert_eq!(clients.iter().map(Client::count).collect::<Vec<_>>(), vec![4, 4, 4]);
}

#[test]
fn a_failed_write_answers_the_heartbeat_with_the_mapped_error() {
    let mut h = Harness::new();
    h.fail_persists = Some(ErrorCode::NOT_LEADER_OR_FOLLOWER);
    let response = h.send(&Client::new("member-a-0000000000001", &["t1"]).request());
    assert_eq!(response.error_code, code(ErrorCode::NOT_COORDINATOR));
}

#[test]
fn describe_reports_members_assignments_and_unknown_groups() {
    let mut h = Harness::new();
    let _clients = three_converged(&mut h);
    let described = h.coordinator.consumer_group_describe(&[GROUP.to_string(), "nope".to_string()]);
    let g = &described.groups[0];
    assert_eq!((g.error_code, g.group_state.as_str(), g.group_epoch, g.assignment_epoch), (0, "Stable", 4, 4));
    assert_eq!(g.assignor_name, "uniform");
    assert_eq!(g.members.len(), 3);
    for m in &g.members {
        assert_eq!(m.client_id, "client");
        assert_eq!(m.subscribed_topic_names, vec!["t1".to_string(), "t2".to_string()]);
        assert_eq!(m.assignment, m.target_assignment);
        assert!(m.assignment.topic_partitions.iter().all(|t| t.topic_name == "t1" || t.topic_name == "t2"));
        assert_eq!(m.member_type, 1);
    }
    let missing = &described.groups[1];
    assert_eq!(missing.error_code, code(ErrorCode::GROUP_ID_NOT_FOUND));
}

#[test]
fn list_groups_shows_consumer_groups_with_their_type() {
    let mut h = Harness::new();
    let mut a = Client::new("member-a-0000000000001", &["t1"]);
    h.heartbeat(&mut a);
    let listed = h.coordinator.list_groups(&[], &[], 5);
    assert_eq!(listed.groups.len(), 1);
    let g = &listed.groups[0];
    assert_eq!(
        (g.group_id.as_str(), g.protocol_type.as_str(), g.group_state.as_str(), g.group_type.as_str()),
        (GROUP, "consumer", "Stable", "consumer")
    );
    assert!(h.coordinator.list_groups(&[], &["classic".to_string()], 5).groups.is_empty());
}

#[test]
fn a_group_config_overrides_the_heartbeat_interval_and_session_timeout_of_that_group() {
    let mut h = Harness::new();
    let overrides = ConsumerGroupOverrides { session_timeout_ms: Some(50_000), heartbeat_interval_ms: Some(6_000) };
    h.group_overrides.insert(GROUP.to_string(), overrides);
    let mut client = Client::new("member-a-0000000000001", &["t1"]);
    let response = h.heartbeat(&mut client);
    assert_eq!(response.heartbeat_interval_ms, 6_000);
    // The broker's session timeout is 45 s; the group's is 50 s.
    h.advance(49_999);
    assert_eq!(h.coordinator.consumer_group_state(GROUP), Some(ConsumerGroupState::Stable));
    h.advance(1);
    assert_eq!(h.coordinator.consumer_group_state(GROUP), Some(ConsumerGroupState::Empty));
    // Another group keeps the broker's settings.
    let mut other = Client::new("member-b-0000000000002", &["t1"]);
    let mut request = other.request();
    request.group_id = "other".into();
    let response = h.send(&request);
    other.epoch = response.member_epoch;
    assert_eq!(response.heartbeat_interval_ms, GroupConfig::default().consumer_group_heartbeat_interval_ms);
}
