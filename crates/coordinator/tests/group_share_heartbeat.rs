//! Share groups (KIP-932) in the group coordinator: ShareGroupHeartbeat, the simple
//! assignor's spread and sharing, sessions, records and reload, describe, list, delete,
//! and the errors across group types, as Kafka 4.4 answers them.

mod share_group_support;

use osprey_coordinator::group::consumer::Assignment;
use osprey_coordinator::group::group_config::ShareGroupOverrides;
use osprey_coordinator::group::{GroupConfig, Response, ShareGroupState};
use osprey_protocol::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use osprey_protocol::messages::{ConsumerGroupHeartbeatRequest, OffsetCommitRequest};
use osprey_protocol::ErrorCode;
use share_group_support::*;

#[test]
fn a_member_joins_with_its_own_id_and_gets_every_partition() {
    let mut h = Harness::with_topics(&[("orders", 1, 3)]);
    let r = h.heartbeat("member-a", 0, Some(&["orders"]));
    assert_eq!(r.error_code, 0);
    assert_eq!(r.member_id.as_deref(), Some("member-a"));
    assert_eq!(r.member_epoch, 2);
    assert_eq!(r.heartbeat_interval_ms, 5_000);
    assert_eq!(assigned(&r), Some([(topic_id(1), [0, 1, 2].into())].into()));
    // A plain heartbeat at its epoch: nothing changed, no assignment in the answer.
    let r = h.heartbeat("member-a", 2, None);
    assert_eq!((r.error_code, r.member_epoch, r.assignment), (0, 2, None));
    // A full request (subscription set) gets the assignment again.
    let r = h.heartbeat("member-a", 2, Some(&["orders"]));
    assert_eq!(assigned(&r), Some([(topic_id(1), [0, 1, 2].into())].into()));
}

#[test]
fn requests_kafka_refuses_are_invalid() {
    let mut h = Harness::with_topics(&[("orders", 1, 3)]);
    let cases: [(&str, i32, Option<&[&str]>, &str); 4] = [
        ("", 0, Some(&["orders"]), "MemberId can't be empty."),
        ("  ", 0, Some(&["orders"]), "MemberId can't be empty."),
        ("m", 0, None, "SubscribedTopicNames must be set in first request."),
        ("m", -2, None, "MemberEpoch is invalid."),
    ];
    for (member, epoch, topics, message) in cases {
        let r = h.heartbeat(member, epoch, topics);
        assert_eq!(r.error_code, ErrorCode::INVALID_REQUEST.code(), "{member:?} {epoch}");
        assert_eq!(r.error_message.as_deref(), Some(message));
    }
    let r = h.heartbeat_to(" ", "m", 0, Some(&["orders"]));
    assert_eq!(r.error_message.as_deref(), Some("GroupId can't be empty."));
}

#[test]
fn unknown_members_and_wrong_epochs_are_refused() {
    let mut h = Harness::with_topics(&[("orders", 1, 3)]);
    let r = h.heartbeat("m", 1, None);
    assert_eq!(r.error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
    assert_eq!(r.error_message.as_deref(), Some(format!("Share group {GROUP} not found.").as_str()));
    h.join("a", &["orders"]);
    let r = h.heartbeat("b", 1, None);
    assert_eq!(r.error_code, ErrorCode::UNKNOWN_MEMBER_ID.code());
    let r = h.heartbeat("a", 3, None);
    assert_eq!(r.error_code, ErrorCode::FENCED_MEMBER_EPOCH.code());
    h.join("b", &["orders"]);
    // a is at epoch 2, the group at 3: a's next heartbeat moves it to 3 ...
    assert_eq!(h.heartbeat("a", 2, None).member_epoch, 3);
    // ... and its previous epoch (a lost response) is still accepted, an older one not.
    assert_eq!(h.heartbeat("a", 2, None).error_code, 0);
    assert_eq!(h.heartbeat("a", 0, Some(&["orders"])).error_code, ErrorCode::FENCED_MEMBER_EPOCH.code());
}

#[test]
fn fewer_members_than_partitions_spread_them_and_more_members_share_them() {
    let mut h = Harness::with_topics(&[("orders", 1, 4)]);
    h.join("a", &["orders"]);
    h.join("b", &["orders"]);
    let a = assigned(&h.heartbeat("a", 2, None)).unwrap();
    let b = assigned(&h.heartbeat("b", 3, Some(&["orders"]))).unwrap();
    assert_eq!((count_partitions(&a), count_partitions(&b)), (2, 2));
    assert!(a[&topic_id(1)].is_disjoint(&b[&topic_id(1)]));
    // Nine members for four partitions: each partition to ceil(9/4) = 3 members.
    for m in ["c", "d", "e", "f", "g", "h", "i"] {
        h.join(m, &["orders"]);
    }
    let group = h.coordinator.share_group(GROUP).unwrap().clone();
    let mut sharing = [0usize; 4];
    for target in group.target.values() {
        for p in &target[&topic_id(1)] {
            sharing[*p as usize] += 1;
        }
    }
    assert!(sharing.iter().all(|n| *n == 3), "{sharing:?}");
    // Each member takes its target, at the group epoch, at its next heartbeat.
    for (id, member) in &group.members {
        let r = h.heartbeat(id, member.member_epoch, None);
        assert_eq!(r.member_epoch, group.group_epoch);
        let now = h.coordinator.share_group(GROUP).unwrap().members[id].assigned_partitions.clone();
        assert_eq!(now, group.target[id]);
    }
}

#[test]
fn a_topic_created_or_grown_later_is_assigned_at_the_next_heartbeat() {
    let mut h = Harness::with_topics(&[]);
    let r = h.heartbeat("a", 0, Some(&["orders"]));
    assert_eq!((r.member_epoch, assigned(&r)), (2, Some(Assignment::new())));
    h.set_topic("orders", 1, 2);
    let r = h.heartbeat("a", 2, None);
    assert_eq!((r.member_epoch, assigned(&r)), (3, Some([(topic_id(1), [0, 1].into())].into())));
    h.set_topic("orders", 1, 3);
    let r = h.heartbeat("a", 3, None);
    assert_eq!((r.member_epoch, assigned(&r)), (4, Some([(topic_id(1), [0, 1, 2].into())].into())));
    let state = &h.coordinator.share_group(GROUP).unwrap().state_metadata;
    assert_eq!(state.initialized[&topic_id(1)].partitions, [0, 1, 2].into());
}

#[test]
fn leaving_and_session_expiry_fence_the_member_and_bump_the_epoch() {
    let mut h = Harness::with_topics(&[("orders", 1, 2)]);
    h.join("a", &["orders"]);
    h.join("b", &["orders"]);
    let r = h.heartbeat("a", -1, None);
    assert_eq!((r.error_code, r.member_id.as_deref(), r.member_epoch), (0, Some("a"), -1));
    assert_eq!(h.coordinator.share_group(GROUP).unwrap().group_epoch, 4);
    assert_eq!(h.heartbeat("a", -1, None).error_code, ErrorCode::UNKNOWN_MEMBER_ID.code());
    // b is fenced once group.share.session.timeout.ms passes without a heartbeat.
    assert_eq!(h.coordinator.next_deadline().map(|d| d - h.now), Some(45_000));
    h.tick(44_999);
    assert_eq!(h.coordinator.member_count(GROUP), 1);
    h.tick(1);
    assert_eq!(h.coordinator.share_group_state(GROUP), Some(ShareGroupState::Empty));
    assert_eq!(h.heartbeat("b", 2, None).error_code, ErrorCode::UNKNOWN_MEMBER_ID.code());
}

#[test]
fn the_group_configs_override_session_and_heartbeat_interval() {
    let mut h = Harness::with_topics(&[("orders", 1, 2)]);
    let overrides = ShareGroupOverrides {
        session_timeout_ms: Some(50_000),
        heartbeat_interval_ms: Some(7_000),
        ..Default::default()
    };
    h.overrides.insert(GROUP.to_string(), overrides);
    let r = h.heartbeat("a", 0, Some(&["orders"]));
    assert_eq!(r.heartbeat_interval_ms, 7_000);
    assert_eq!(h.coordinator.next_deadline().map(|d| d - h.now), Some(50_000));
}

#[test]
fn group_share_max_size_refuses_new_members() {
    let mut h = Harness::new(GroupConfig { share_group_max_size: 1, ..Default::default() });
    h.set_topic("orders", 1, 2);
    h.join("a", &["orders"]);
    let r = h.heartbeat("b", 0, Some(&["orders"]));
    assert_eq!(r.error_code, ErrorCode::GROUP_MAX_SIZE_REACHED.code());
    assert_eq!(r.error_message.as_deref(), Some("The share group has reached its maximum capacity of 1 members."));
    assert_eq!(h.heartbeat("a", 2, None).error_code, 0);
}

#[test]
fn the_records_reload_into_the_same_group() {
    let mut h = Harness::with_topics(&[("orders", 1, 3), ("payments", 2, 1)]);
    h.join("a", &["orders", "payments"]);
    h.join("b", &["orders"]);
    h.join("c", &["payments"]);
    h.heartbeat("a", 2, None);
    h.heartbeat("b", 3, Some(&["orders", "payments"]));
    h.heartbeat("c", -1, None);
    let live = h.coordinator.share_group(GROUP).unwrap().durable();
    let reloaded = h.reloaded();
    assert_eq!(reloaded.share_group(GROUP).unwrap().durable(), live);
    assert_eq!(reloaded.share_group_describe(&[GROUP.into()]), h.coordinator.share_group_describe(&[GROUP.into()]));
    // The reloaded group goes on: a member heartbeats at its epoch without a bump.
    let epoch = live.members["a"].member_epoch;
    let mut h2 = Harness::with_topics(&[("orders", 1, 3), ("payments", 2, 1)]);
    h2.coordinator = reloaded;
    let r = h2.heartbeat("a", epoch, None);
    assert_eq!((r.error_code, h2.coordinator.share_group(GROUP).unwrap().group_epoch), (0, live.group_epoch));
}

#[test]
fn describe_names_topics_and_list_shows_share_groups() {
    let mut h = Harness::with_topics(&[("orders", 1, 2)]);
    h.join("a", &["orders"]);
    let described = h.coordinator.share_group_describe(&[GROUP.into(), "nope".into()]);
    let g = &described.groups[0];
    assert_eq!((g.error_code, g.group_state.as_str(), g.assignor_name.as_str()), (0, "Stable", "simple"));
    assert_eq!((g.group_epoch, g.assignment_epoch), (2, 2));
    let m = &g.members[0];
    assert_eq!((m.member_id.as_str(), m.member_epoch, m.client_id.as_str()), ("a", 2, "client"));
    assert_eq!(m.assignment.topic_partitions[0].topic_name, "orders");
    assert_eq!(m.assignment.topic_partitions[0].partitions, vec![0, 1]);
    assert_eq!(described.groups[1].error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
    assert_eq!(described.groups[1].error_message.as_deref(), Some("Group nope not found."));

    let listed = h.coordinator.list_groups(&[], &["share".into()], 5);
    assert_eq!(listed.groups.len(), 1);
    let l = &listed.groups[0];
    assert_eq!(
        (l.group_id.as_str(), l.protocol_type.as_str(), l.group_state.as_str(), l.group_type.as_str()),
        (GROUP, "share", "Stable", "share")
    );
    assert!(h.coordinator.list_groups(&["empty".into()], &[], 5).groups.is_empty());
    // DescribeGroups (the classic API) answers a share group as Kafka does any other type.
    let classic = h.coordinator.describe_groups(&[GROUP.into()], 6);
    assert_eq!(classic.groups[0].error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
    assert_eq!(classic.groups[0].group_state, "Dead");
    assert_eq!(
        classic.groups[0].error_message.as_deref(),
        Some(format!("Group {GROUP} is not a classic group.").as_str())
    );
}

#[test]
fn delete_groups_deletes_an_empty_share_group_only() {
    let mut h = Harness::with_topics(&[("orders", 1, 2)]);
    h.join("a", &["orders"]);
    let delete = |h: &mut Harness| {
        let reply = h.reply();
        h.coordinator.delete_groups(&[GROUP.into()], reply);
        match h.drain().pop() {
            Some((_, Response::DeleteGroups(r))) => r.results[0].error_code,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(delete(&mut h), ErrorCode::NON_EMPTY_GROUP.code());
    h.heartbeat("a", -1, None);
    assert_eq!(delete(&mut h), 0);
    assert_eq!(h.coordinator.share_group_state(GROUP), None);
    // The tombstones delete it on reload too.
    assert!(h.reloaded().share_group(GROUP).is_none());
}

#[test]
fn group_types_do_not_cross() {
    let mut h = Harness::with_topics(&[("orders", 1, 2)]);
    h.join("a", &["orders"]);
    // A ConsumerGroupHeartbeat to the share group.
    let request = ConsumerGroupHeartbeatRequest {
        group_id: GROUP.into(),
        member_id: "c".into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec!["orders".into()]),
        topic_partitions: Some(vec![]),
        ..Default::default()
    };
    let reply = h.reply();
    let topics = h.topics.clone();
    h.coordinator.consumer_group_heartbeat(&request, 1, "c", "/h", &topics, reply, h.now);
    let Some((_, Response::ConsumerGroupHeartbeat(r))) = h.drain().pop() else { panic!() };
    assert_eq!(r.error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
    assert_eq!(r.error_message.as_deref(), Some(format!("Group {GROUP} is not a consumer group.").as_str()));
    // A classic JoinGroup to the share group.
    let join = JoinGroupRequest {
        group_id: GROUP.into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupRequestProtocol { name: "range".into(), ..Default::default() }],
        ..Default::default()
    };
    let reply = h.reply();
    h.coordinator.join(&join, 9, "c", "/h", reply, h.now);
    let Some((_, Response::JoinGroup(r))) = h.drain().pop() else { panic!() };
    assert_eq!((r.error_code, r.member_id.as_str()), (ErrorCode::INCONSISTENT_GROUP_PROTOCOL.code(), ""));
    // OffsetCommit and OffsetFetch to the share group.
    let commit =
        OffsetCommitRequest { group_id: GROUP.into(), generation_id_or_member_epoch: -1, ..Default::default() };
    let reply = h.reply();
    h.coordinator.commit_offsets(&commit, 9, reply, h.now);
    let responses = h.drain();
    assert!(matches!(responses.last(), Some((_, Response::OffsetCommit(_)))));
    assert_eq!(h.coordinator.validate_offset_fetch(GROUP, None, -1), Err(ErrorCode::GROUP_ID_NOT_FOUND));
    // A ShareGroupHeartbeat to a consumer group's id.
    let request = ConsumerGroupHeartbeatRequest { group_id: "consumers".into(), ..request };
    let reply = h.reply();
    h.coordinator.consumer_group_heartbeat(&request, 1, "c", "/h", &topics, reply, h.now);
    h.drain();
    let r = h.heartbeat_to("consumers", "s", 0, Some(&["orders"]));
    assert_eq!(r.error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
    assert_eq!(r.error_message.as_deref(), Some("Group consumers is not a share group."));
    assert!(h.coordinator.check_invariants().is_ok());
}
