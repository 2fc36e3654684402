//! Streams groups (KIP-1071) in the group coordinator: StreamsGroupHeartbeat with a
//! topology, its configuration against the topics (statuses, internal topics to create),
//! the sticky assignor with standbys, reconciliation (revoke before reassign), sessions,
//! records and reload, describe, list, delete, offsets, and the errors across group types,
//! as Kafka 4.4 answers them.

mod streams_group_support;

use osprey_coordinator::group::group_config::StreamsGroupOverrides;
use osprey_coordinator::group::streams::topology::Status;
use osprey_coordinator::group::{GroupConfig, Response, StreamsGroupState};
use osprey_protocol::messages::join_group_request::{JoinGroupRequest, JoinGroupRequestProtocol};
use osprey_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use osprey_protocol::messages::streams_group_heartbeat_request::{Subtopology, TopicInfo as RequestTopicInfo};
use osprey_protocol::messages::{ConsumerGroupHeartbeatRequest, OffsetCommitRequest, StreamsGroupHeartbeatRequest};
use osprey_protocol::ErrorCode;
use streams_group_support::*;

fn code(status: Status) -> i8 {
    status.code()
}

#[test]
fn the_first_member_records_the_topology_and_the_group_waits_for_its_topics() {
    let mut h = Harness::new(immediate());
    h.create_internal_topics = false;
    let mut a = Client::new("a", "p1");
    // No input topic: the group is NotReady and says which source topics are missing.
    let answer = a.heartbeat(&mut h);
    assert_eq!(answer.response.error_code, 0, "{:?}", answer.response.error_message);
    // A new group is at epoch 1 in Kafka 4.4; the first member's join bumps it to 2.
    assert_eq!(answer.response.member_epoch, 2);
    assert_eq!(status_codes(&answer.response), [code(Status::MissingSourceTopics)]);
    assert_eq!(
        answer.response.status.as_ref().unwrap()[0].status_detail,
        format!("Source topics {INPUT} are missing.")
    );
    assert!(answer.topics_to_create.is_empty());
    assert_eq!(h.coordinator.streams_group_state(GROUP), Some(StreamsGroupState::NotReady));
    assert_eq!(a.active, tasks(&[]), "nothing to run yet");

    // The input appears: the internal topics are to be created, with the partition counts
    // the topology gives them.
    h.set_topic(INPUT, 4);
    let answer = a.heartbeat(&mut h);
    assert_eq!(status_codes(&answer.response), [code(Status::MissingInternalTopics)]);
    let mut to_create: Vec<(String, i32)> =
        answer.topics_to_create.iter().map(|t| (t.name.clone(), t.num_partitions)).collect();
    to_create.sort();
    assert_eq!(to_create, [(CHANGELOG.to_string(), 4), (REPARTITION.to_string(), 4)]);
    assert_eq!(h.coordinator.streams_group_state(GROUP), Some(StreamsGroupState::NotReady));

    // Once they exist the topology is ready and the only member runs every task.
    for topic in &answer.topics_to_create {
        h.create(topic);
    }
    let answer = a.heartbeat(&mut h);
    assert_eq!(answer.response.status, Some(vec![]), "Kafka sends an empty status list, not null");
    assert_eq!(a.active, tasks(&[("0", &[0, 1, 2, 3]), ("1", &[0, 1, 2, 3])]));
    assert_eq!(answer.response.heartbeat_interval_ms, 5_000);
    assert_eq!(answer.response.acceptable_recovery_lag, 10_000);
    assert_eq!(answer.response.task_offset_interval_ms, 60_000);
    a.heartbeat(&mut h);
    assert_eq!(h.coordinator.streams_group_state(GROUP), Some(StreamsGroupState::Stable));
}

#[test]
fn requests_kafka_refuses_are_invalid() {
    let mut h = Harness::word_count(2);
    let base = Client::new("m", "p").request();
    let invalid = |r: StreamsGroupHeartbeatRequest| r;
    let cases: Vec<(StreamsGroupHeartbeatRequest, i16, &str)> = vec![
        (
            invalid(StreamsGroupHeartbeatRequest { member_id: " ".into(), ..base.clone() }),
            42,
            "MemberId can't be empty.",
        ),
        (invalid(StreamsGroupHeartbeatRequest { group_id: "".into(), ..base.clone() }), 42, "GroupId can't be empty."),
        (
            invalid(StreamsGroupHeartbeatRequest { rebalance_timeout_ms: -1, ..base.clone() }),
            42,
            "RebalanceTimeoutMs must be provided in first request.",
        ),
        (
            invalid(StreamsGroupHeartbeatRequest { topology: None, ..base.clone() }),
            42,
            "Topology must be non-null when (re-)joining.",
        ),
        (
            invalid(StreamsGroupHeartbeatRequest { member_epoch: -3, ..base.clone() }),
            42,
            "MemberEpoch is -3, but must be greater than or equal to -2.",
        ),
        (invalid(StreamsGroupHeartbeatRequest { member_epoch: -2, ..base.clone() }), 42, "InstanceId can't be null."),
        (
            invalid(StreamsGroupHeartbeatRequest { standby_tasks: None, ..base.clone() }),
            42,
            "If one task-type is non-null, all must be non-null.",
        ),
        (
            invalid(StreamsGroupHeartbeatRequest { member_epoch: 3, ..base.clone() }),
            42,
            "Topology can only be provided when (re-)joining.",
        ),
    ];
    for (request, error, message) in cases {
        let answer = h.send(&request);
        assert_eq!(answer.response.error_code, error, "{message}");
        assert_eq!(answer.response.error_message.as_deref(), Some(message));
    }
    // A changelog's partition count is the coordinator's to decide.
    let mut request = base.clone();
    request.topology.as_mut().unwrap().subtopologies[1].state_changelog_topics[0].partitions = 3;
    let answer = h.send(&request);
    assert_eq!(answer.response.error_code, ErrorCode::STREAMS_INVALID_TOPOLOGY.code());
    assert_eq!(
        answer.response.error_message.as_deref(),
        Some(
            format!("Changelog topic {CHANGELOG} must have an undefined partition count, but it is set to 3.").as_str()
        )
    );
    // Kafka 4.4 does not serve regular expressions for source topics.
    let mut request = base;
    request.topology.as_mut().unwrap().subtopologies[0].source_topic_regex = vec!["w.*".into()];
    let answer = h.send(&request);
    assert_eq!(answer.response.error_code, ErrorCode::INVALID_REQUEST.code());
    assert_eq!(
        answer.response.error_message.as_deref(),
        Some("Regular expressions for source topics are not supported yet.")
    );
    assert!(h.coordinator.streams_group(GROUP).is_none(), "a refused join makes no group");
}

#[test]
fn unknown_members_wrong_epochs_and_other_topologies_are_refused() {
    let mut h = Harness::word_count(2);
    let mut stranger = Client::new("x", "p");
    stranger.epoch = 3;
    stranger.joined = true;
    let answer = h.send(&stranger.request());
    assert_eq!(answer.response.error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
    assert_eq!(answer.response.error_message.as_deref(), Some(format!("Streams group {GROUP} not found.").as_str()));
    let mut a = Client::new("a", "p1");
    rounds(&mut h, std::slice::from_mut(&mut a), 2);
    let answer = h.send(&stranger.request());
    assert_eq!(answer.response.error_code, ErrorCode::UNKNOWN_MEMBER_ID.code());
    assert_eq!(
        answer.response.error_message.as_deref(),
        Some(format!("Member x is not a member of group {GROUP}.").as_str())
    );
    let mut ahead = a.clone();
    ahead.epoch += 1;
    assert_eq!(h.send(&ahead.request()).response.error_code, ErrorCode::FENCED_MEMBER_EPOCH.code());
    // Another topology under the same epoch is an update Kafka 4.4 does not take.
    let mut b = Client::new("b", "p2");
    let mut request = b.request();
    request.topology.as_mut().unwrap().subtopologies.push(Subtopology {
        subtopology_id: "2".into(),
        source_topics: vec![INPUT.into()],
        ..Default::default()
    });
    let answer = h.send(&request);
    assert_eq!(answer.response.error_code, ErrorCode::INVALID_REQUEST.code());
    assert_eq!(answer.response.error_message.as_deref(), Some("Topology updates are not supported yet."));
    // The same topology joins.
    assert_eq!(b.heartbeat(&mut h).response.error_code, 0);
}

#[test]
fn members_learn_each_others_endpoints_for_interactive_queries() {
    use osprey_protocol::messages::streams_group_heartbeat_request::Endpoint;
    let mut h = Harness::word_count(2);
    let mut a = Client::new("a", "p1");
    let mut request = a.request();
    request.user_endpoint = Some(Endpoint { host: "host-a".into(), port: 7070, ..Default::default() });
    let answer = h.send(&request);
    a.apply(&answer.response);
    let answer = a.heartbeat(&mut h);
    let endpoints = answer.response.partitions_by_user_endpoint.expect("a's epoch was behind");
    assert_eq!(endpoints.len(), 1);
    assert_eq!((endpoints[0].user_endpoint.host.as_str(), endpoints[0].user_endpoint.port), ("host-a", 7070));
    let topics: Vec<(&str, Vec<i32>)> =
        endpoints[0].active_partitions.iter().map(|t| (t.topic.as_str(), t.partitions.clone())).collect();
    assert_eq!(topics, [(INPUT, vec![0, 1]), (REPARTITION, vec![0, 1])]);
    // At the group's endpoint epoch nothing is sent again.
    let answer = a.heartbeat(&mut h);
    assert_eq!(answer.response.partitions_by_user_endpoint, None);
    assert_eq!(answer.response.endpoint_information_epoch, a.endpoint_epoch);
}

#[test]
fn a_member_behind_the_groups_topology_epoch_is_told_it_is_stale() {
    let mut h = Harness::word_count(2);
    let mut a = Client::new("a", "p1");
    a.topology_epoch = 2;
    a.heartbeat(&mut h);
    let mut old = Client::new("old", "p2");
    old.topology_epoch = 1;
    let answer = old.heartbeat(&mut h);
    assert_eq!(answer.response.error_code, 0);
    let stale = answer.response.status.as_ref().unwrap().iter().find(|s| s.status_code == code(Status::StaleTopology));
    assert_eq!(stale.unwrap().status_detail, "The member's topology epoch 1 is behind the group's topology epoch 2.");
}

#[test]
fn a_second_member_gets_tasks_only_after_the_first_revoked_them() {
    let mut h = Harness::word_count(4);
    let mut a = Client::new("a", "p1");
    rounds(&mut h, std::slice::from_mut(&mut a), 3);
    assert_eq!(count(&a.active), 8);
    let mut b = Client::new("b", "p2");
    b.heartbeat(&mut h);
    // b is told nothing yet: a still owns every task.
    assert_eq!(count(&b.active), 0);
    let epoch_before = a.epoch;
    let answer = a.heartbeat(&mut h);
    // a keeps its epoch while it revokes half of its tasks.
    assert_eq!(answer.response.member_epoch, epoch_before);
    assert_eq!(count(&a.active), 4);
    // Its next heartbeat, owning only those, moves it on; then b gets the rest.
    a.heartbeat(&mut h);
    b.heartbeat(&mut h);
    assert_eq!(count(&b.active), 4);
    let mut clients = [a, b];
    rounds(&mut h, &mut clients, 2);
    let [a, b] = &clients;
    assert_eq!(h.coordinator.streams_group_state(GROUP), Some(StreamsGroupState::Stable));
    for s in ["0", "1"] {
        let owned: Vec<i32> = a.active.get(s).into_iter().chain(b.active.get(s)).flatten().copied().collect();
        assert_eq!(owned.len(), 4, "subtopology {s} split between them without overlap: {owned:?}");
    }
}

#[test]
fn standby_replicas_go_to_another_process() {
    let mut h = Harness::word_count(2);
    h.overrides.insert(GROUP.into(), StreamsGroupOverrides { num_standby_replicas: Some(1), ..Default::default() });
    let mut clients = [Client::new("a", "p1"), Client::new("b", "p2")];
    rounds(&mut h, &mut clients, 5);
    let [a, b] = &clients;
    // Only subtopology 1 has state; each of its tasks has a standby on the other process.
    for (client, other) in [(a, b), (b, a)] {
        assert!(!client.standby.contains_key("0"), "stateless tasks get no standby");
        for p in client.standby.get("1").into_iter().flatten() {
            assert!(other.active.get("1").is_some_and(|ps| ps.contains(p)));
        }
    }
    assert_eq!(count(&a.standby) + count(&b.standby), 2);
    let group = h.coordinator.streams_group(GROUP).unwrap();
    assert_eq!(group.last_assignment_configs.get("num.standby.replicas").map(String::as_str), Some("1"));
}

#[test]
fn two_members_of_one_process_never_hold_a_task_twice() {
    let mut h = Harness::word_count(3);
    h.overrides.insert(GROUP.into(), StreamsGroupOverrides { num_standby_replicas: Some(1), ..Default::default() });
    let mut clients = [Client::new("a", "p1"), Client::new("b", "p1")];
    rounds(&mut h, &mut clients, 5);
    let [a, b] = &clients;
    // One process: no standby can be placed (it would be a second copy in the process).
    assert_eq!(count(&a.standby) + count(&b.standby), 0);
    assert_eq!(count(&a.active) + count(&b.active), 6);
}

#[test]
fn a_member_that_stops_heartbeating_is_fenced_and_its_tasks_move() {
    let mut h = Harness::word_count(2);
    let mut clients = [Client::new("a", "p1"), Client::new("b", "p2")];
    rounds(&mut h, &mut clients, 4);
    let [mut a, _b] = clients;
    h.tick(40_000);
    a.heartbeat(&mut h);
    h.tick(6_000);
    let group = h.coordinator.streams_group(GROUP).unwrap();
    assert_eq!(group.members.keys().collect::<Vec<_>>(), ["a"], "b's session (45 s) ran out");
    rounds(&mut h, std::slice::from_mut(&mut a), 2);
    assert_eq!(count(&a.active), 4);
}

#[test]
fn a_leaving_member_goes_at_once() {
    let mut h = Harness::word_count(2);
    let mut clients = [Client::new("a", "p1"), Client::new("b", "p2")];
    rounds(&mut h, &mut clients, 4);
    let mut leave = clients[1].request();
    leave.member_epoch = -1;
    let answer = h.send(&leave);
    assert_eq!((answer.response.error_code, answer.response.member_epoch), (0, -1));
    assert_eq!(h.coordinator.member_count(GROUP), 1);
}

#[test]
fn the_group_reloads_from_its_records_as_it_was() {
    let mut h = Harness::word_count(3);
    h.overrides.insert(GROUP.into(), StreamsGroupOverrides { num_standby_replicas: Some(1), ..Default::default() });
    let mut clients = [Client::new("a", "p1"), Client::new("b", "p2"), Client::new("c", "p3")];
    rounds(&mut h, &mut clients, 2);
    let live = h.coordinator.streams_group(GROUP).unwrap().durable();
    let reloaded = h.reloaded();
    assert_eq!(reloaded.streams_group(GROUP).unwrap().durable(), live);
}

#[test]
fn describe_list_and_delete_treat_streams_groups_as_kafka_does() {
    let mut h = Harness::word_count(2);
    let mut a = Client::new("a", "p1");
    rounds(&mut h, std::slice::from_mut(&mut a), 3);
    let described = h.coordinator.streams_group_describe(&[GROUP.into(), "missing".into()], true);
    let group = &described.groups[0];
    assert_eq!(
        (group.error_code, group.group_state.as_str(), group.group_epoch),
        (0, "Stable", group.assignment_epoch)
    );
    assert_eq!(group.assignor_name.as_deref(), Some("sticky"));
    assert_eq!(group.topology_description_status, 1, "NOT_STORED: no description plugin");
    let topology = group.topology.as_ref().unwrap();
    let changelog = &topology.subtopologies.as_ref().unwrap()[1].state_changelog_topics[0];
    assert_eq!((changelog.name.as_str(), changelog.partitions), (CHANGELOG, 2), "the decided partition count");
    assert_eq!(group.members[0].process_id, "p1");
    assert_eq!(group.members[0].assignment.active_tasks.len(), 2);
    assert_eq!(described.groups[1].error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
    assert_eq!(described.groups[1].error_message.as_deref(), Some("Streams group missing not found."));

    let listed = h.coordinator.list_groups(&[], &[], 5);
    let row = listed.groups.iter().find(|g| g.group_id == GROUP).unwrap();
    assert_eq!(
        (row.protocol_type.as_str(), row.group_type.as_str(), row.group_state.as_str()),
        ("streams", "streams", "Stable")
    );
    assert!(h.coordinator.list_groups(&["not_ready".into()], &[], 5).groups.is_empty());
    assert_eq!(h.coordinator.list_groups(&["stable".into()], &["Streams".into()], 5).groups.len(), 1);

    let classic = h.coordinator.describe_groups(&[GROUP.into()], 6);
    assert_eq!(classic.groups[0].error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
    assert_eq!(
        classic.groups[0].error_message.as_deref(),
        Some(format!("Group {GROUP} is not a classic group.").as_str())
    );

    let reply = h.reply();
    h.coordinator.delete_groups(&[GROUP.into()], reply);
    let Response::DeleteGroups(deleted) = h.drain().remove(0).1 else { panic!() };
    assert_eq!(deleted.results[0].error_code, ErrorCode::NON_EMPTY_GROUP.code());
    let mut leave = a.request();
    leave.member_epoch = -1;
    h.send(&leave);
    let reply = h.reply();
    h.coordinator.delete_groups(&[GROUP.into()], reply);
    let Response::DeleteGroups(deleted) = h.drain().remove(0).1 else { panic!() };
    assert_eq!(deleted.results[0].error_code, 0);
    assert!(h.coordinator.streams_group(GROUP).is_none());
    assert!(h.reloaded().streams_group(GROUP).is_none(), "its tombstones delete it on reload too");
}

fn commit(member_id: &str, epoch: i32, partitions: &[i32]) -> OffsetCommitRequest {
    OffsetCommitRequest {
        group_id: GROUP.into(),
        generation_id_or_member_epoch: epoch,
        member_id: member_id.into(),
        topics: vec![OffsetCommitRequestTopic {
            name: INPUT.into(),
            partitions: partitions
                .iter()
                .map(|p| OffsetCommitRequestPartition {
                    partition_index: *p,
                    committed_offset: 10,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn commit_error(h: &mut Harness, request: &OffsetCommitRequest, version: i16) -> i16 {
    let reply = h.reply();
    let now = h.now;
    h.coordinator.commit_offsets(request, version, reply, now);
    let Response::OffsetCommit(r) = h.drain().remove(0).1 else { panic!() };
    r.topics[0].partitions[0].error_code
}

#[test]
fn offsets_are_committed_at_the_member_epoch_or_at_a_tasks_older_epoch() {
    let mut h = Harness::word_count(2);
    let mut a = Client::new("a", "p1");
    rounds(&mut h, std::slice::from_mut(&mut a), 2);
    let first_epoch = a.epoch;
    assert_eq!(commit_error(&mut h, &commit("a", first_epoch, &[0, 1]), 9), 0);
    assert_eq!(commit_error(&mut h, &commit("a", first_epoch, &[0]), 8), ErrorCode::UNSUPPORTED_VERSION.code());
    assert_eq!(commit_error(&mut h, &commit("nobody", first_epoch, &[0]), 9), ErrorCode::UNKNOWN_MEMBER_ID.code());
    assert_eq!(commit_error(&mut h, &commit("a", first_epoch + 1, &[0]), 9), ErrorCode::STALE_MEMBER_EPOCH.code());
    assert_eq!(commit_error(&mut h, &commit("", -1, &[0]), 9), ErrorCode::UNKNOWN_MEMBER_ID.code());
    // b joins: a's epoch moves on; a task a kept since its first epoch may still be
    // committed at that epoch (Kafka 4.4's per-task assignment epochs).
    let mut clients = [a, Client::new("b", "p2")];
    rounds(&mut h, &mut clients, 3);
    let [a, _] = &clients;
    assert!(a.epoch > first_epoch);
    let kept = *a.active["0"].iter().next().unwrap();
    assert_eq!(commit_error(&mut h, &commit("a", first_epoch, &[kept]), 9), 0);
    let moved = 1 - kept;
    assert_eq!(commit_error(&mut h, &commit("a", first_epoch, &[moved]), 9), ErrorCode::STALE_MEMBER_EPOCH.code());
    let fetched = h.coordinator.validate_offset_fetch(GROUP, Some("a"), first_epoch);
    assert_eq!(fetched, Err(ErrorCode::STALE_MEMBER_EPOCH));
    assert_eq!(h.coordinator.validate_offset_fetch(GROUP, None, -1), Ok(()));
}

#[test]
fn other_group_types_keep_their_ids() {
    let mut h = Harness::word_count(2);
    let mut a = Client::new("a", "p1");
    a.heartbeat(&mut h);
    // A consumer heartbeat to the streams group.
    let request = ConsumerGroupHeartbeatRequest {
        group_id: GROUP.into(),
        member_id: "c".into(),
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec![INPUT.into()]),
        topic_partitions: Some(vec![]),
        ..Default::default()
    };
    let reply = h.reply();
    let now = h.now;
    h.coordinator.consumer_group_heartbeat(&request, 1, "c", "/h", &std::collections::BTreeMap::new(), reply, now);
    let Response::ConsumerGroupHeartbeat(r) = h.drain().remove(0).1 else { panic!() };
    assert_eq!(r.error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
    assert_eq!(r.error_message.as_deref(), Some(format!("Group {GROUP} is not a consumer group.").as_str()));
    // A classic join to a streams group with members.
    let join = JoinGroupRequest {
        group_id: GROUP.into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupRequestProtocol { name: "range".into(), ..Default::default() }],
        ..Default::default()
    };
    let reply = h.reply();
    let now = h.now;
    h.coordinator.join(&join, 9, "c", "/h", reply, now);
    let Response::JoinGroup(r) = h.drain().remove(0).1 else { panic!() };
    assert_eq!(r.error_code, ErrorCode::INCONSISTENT_GROUP_PROTOCOL.code());
    // A streams member to a consumer group's id.
    let reply = h.reply();
    let consumer_group = ConsumerGroupHeartbeatRequest { group_id: "plain".into(), ..request };
    let now = h.now;
    h.coordinator.consumer_group_heartbeat(
        &consumer_group,
        1,
        "c",
        "/h",
        &std::collections::BTreeMap::new(),
        reply,
        now,
    );
    h.drain();
    let mut request = Client::new("s", "p").request();
    request.group_id = "plain".into();
    let answer = h.send(&request);
    assert_eq!(answer.response.error_code, ErrorCode::GROUP_ID_NOT_FOUND.code());
    assert_eq!(answer.response.error_message.as_deref(), Some("Group plain is not a streams group."));
}

#[test]
fn the_first_assignment_of_a_new_group_waits_for_more_members() {
    let mut h = Harness::new(GroupConfig { streams_group_assignment_interval_ms: 0, ..GroupConfig::default() });
    h.set_topic(INPUT, 2);
    let mut a = Client::new("a", "p1");
    let answer = a.heartbeat(&mut h);
    let delayed = code(Status::AssignmentDelayed);
    assert!(status_codes(&answer.response).contains(&delayed));
    // The member reconciles to the initial target assignment epoch 1 with nothing, as in
    // Kafka 4.4: with epoch 0 its next heartbeat (no rebalance timeout, no topology, as
    // a Java client sends it once joined) would be an invalid join.
    assert_eq!(answer.response.member_epoch, 1);
    let answer = a.heartbeat(&mut h);
    assert_eq!(answer.response.error_code, 0, "{:?}", answer.response.error_message);
    assert_eq!(h.coordinator.streams_group_state(GROUP), Some(StreamsGroupState::Assigning));
    let mut b = Client::new("b", "p2");
    let answer = b.heartbeat(&mut h);
    assert_eq!(answer.response.member_epoch, 1);
    let detail = &answer.response.status.as_ref().unwrap().iter().find(|s| s.status_code == delayed).unwrap();
    assert_eq!(detail.status_detail, "Assignment delayed due to the configured initial rebalance delay.");
    assert_eq!(count(&a.active) + count(&b.active), 0);
    // group.streams.initial.rebalance.delay.ms (3 s) later both are assigned at once.
    h.tick(3_000);
    let mut clients = [a, b];
    rounds(&mut h, &mut clients, 3);
    assert_eq!(count(&clients[0].active), 2);
    assert_eq!(count(&clients[1].active), 2);
}

#[test]
fn assignments_are_computed_at_most_once_per_assignment_interval() {
    let mut h = Harness::new(GroupConfig { streams_group_initial_rebalance_delay_ms: 0, ..GroupConfig::default() });
    h.set_topic(INPUT, 2);
    let mut a = Client::new("a", "p1");
    rounds(&mut h, std::slice::from_mut(&mut a), 2);
    let mut b = Client::new("b", "p2");
    let answer = b.heartbeat(&mut h);
    let delayed = answer.response.status.iter().flatten().find(|s| s.status_code == code(Status::AssignmentDelayed));
    assert_eq!(delayed.unwrap().status_detail, "Assignment delayed due to the configured assignment interval.");
    assert_eq!(h.coordinator.streams_group_state(GROUP), Some(StreamsGroupState::Assigning));
    h.now += 1_000;
    b.heartbeat(&mut h);
    assert_eq!(h.coordinator.streams_group_state(GROUP), Some(StreamsGroupState::Reconciling));
}

#[test]
fn internal_topics_with_other_partition_counts_are_incorrectly_partitioned() {
    let mut h = Harness::word_count(4);
    h.set_topic(CHANGELOG, 2);
    let mut a = Client::new("a", "p1");
    let answer = a.heartbeat(&mut h);
    assert_eq!(status_codes(&answer.response), [code(Status::IncorrectlyPartitionedTopics)]);
    assert_eq!(
        answer.response.status.unwrap()[0].status_detail,
        format!("Existing topic {CHANGELOG} has different number of partitions: expected 4, found 2")
    );
}

#[test]
fn copartitioned_topics_must_have_one_partition_count() {
    let mut h = Harness::new(immediate());
    h.set_topic("left", 2);
    h.set_topic("right", 3);
    let mut request = Client::new("a", "p").request();
    request.topology = Some(join_topology("left", "right"));
    let answer = h.send(&request);
    assert_eq!(status_codes(&answer.response), [code(Status::IncorrectlyPartitionedTopics)]);
    assert_eq!(
        answer.response.status.unwrap()[0].status_detail,
        "Following topics do not have the same number of partitions: [{left=2, right=3}]"
    );
    // A repartition topic copartitioned with a source topic takes its count.
    let mut h = Harness::new(immediate());
    h.set_topic("left", 5);
    let mut request = Client::new("a", "p").request();
    let mut topology = join_topology("left", "left-repartition");
    topology.subtopologies[0].source_topics.pop();
    topology.subtopologies[0].repartition_source_topics =
        vec![RequestTopicInfo { name: "left-repartition".into(), partitions: 0, ..Default::default() }];
    topology.subtopologies[0].copartition_groups[0].source_topics = vec![0];
    topology.subtopologies[0].copartition_groups[0].repartition_source_topics = vec![0];
    topology.subtopologies[0].repartition_sink_topics = vec!["left-repartition".into()];
    request.topology = Some(topology);
    let answer = h.send(&request);
    let created: Vec<(String, i32)> =
        answer.topics_to_create.iter().map(|t| (t.name.clone(), t.num_partitions)).collect();
    assert_eq!(created, [("left-repartition".to_string(), 5)]);
}

#[test]
fn a_static_member_leaves_for_now_and_its_instance_takes_its_tasks_back() {
    let mut h = Harness::word_count(2);
    let mut a = Client::new("a", "p1");
    let mut request = a.request();
    request.instance_id = Some("instance-1".into());
    let answer = h.send(&request);
    a.apply(&answer.response);
    rounds(&mut h, std::slice::from_mut(&mut a), 2);
    let held = a.active.clone();
    let epoch = h.coordinator.streams_group(GROUP).unwrap().group_epoch;
    let mut leave = a.request();
    leave.member_epoch = -2;
    leave.instance_id = Some("instance-1".into());
    let answer = h.send(&leave);
    assert_eq!((answer.response.error_code, answer.response.member_epoch), (0, -2));
    // It comes back under a new member id: no rebalance, the same tasks.
    let mut back = Client::new("a2", "p1");
    let mut request = back.request();
    request.instance_id = Some("instance-1".into());
    let answer = h.send(&request);
    assert_eq!(answer.response.error_code, 0, "{:?}", answer.response.error_message);
    back.apply(&answer.response);
    assert_eq!(back.active, held);
    let group = h.coordinator.streams_group(GROUP).unwrap();
    assert_eq!(group.group_epoch, epoch, "a static member's return is no rebalance");
    assert!(!group.members.contains_key("a"));
    // A second member claiming the instance while it is held is refused.
    let mut request = Client::new("a3", "p9").request();
    request.instance_id = Some("instance-1".into());
    let answer = h.send(&request);
    assert_eq!(answer.response.error_code, ErrorCode::UNRELEASED_INSTANCE_ID.code());
}

#[test]
fn a_shutdown_request_reaches_every_member() {
    let mut h = Harness::word_count(2);
    let mut clients = [Client::new("a", "p1"), Client::new("b", "p2")];
    rounds(&mut h, &mut clients, 2);
    let mut request = clients[0].request();
    request.shutdown_application = true;
    h.send(&request);
    let answer = clients[1].heartbeat(&mut h);
    let shutdown = answer.response.status.iter().flatten().find(|s| s.status_code == code(Status::ShutdownApplication));
    assert_eq!(
        shutdown.unwrap().status_detail,
        "Streams group member a encountered a fatal error and requested a shutdown for the entire application."
    );
}
