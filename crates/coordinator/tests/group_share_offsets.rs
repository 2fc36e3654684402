//! The group coordinator's part of the share-group offsets APIs (KIP-932): which share
//! partitions of a group have state, changed by AlterShareGroupOffsets and
//! DeleteShareGroupOffsets only while the group is empty, durable in its
//! ShareGroupStatePartitionMetadata record.

mod share_group_support;

use osprey_coordinator::group::share::{NamedTopic, ShareOffsetsStep, StateTopic};
use osprey_coordinator::group::{GroupCoordinator, ReplyId, Response};
use osprey_protocol::ErrorCode;
use share_group_support::*;
use std::collections::{BTreeMap, BTreeSet};

/// One step on the coordinator; its answer once durable.
fn step(h: &mut Harness, op: impl FnOnce(&mut GroupCoordinator, ReplyId)) -> ShareOffsetsStep {
    let reply = h.reply();
    op(&mut h.coordinator, reply);
    match h.drain().into_iter().find(|(r, _)| *r == reply).expect("answered").1 {
        Response::ShareGroupOffsets(step) => step,
        other => panic!("unexpected {other:?}"),
    }
}

fn topics(partitions: &[i32]) -> BTreeMap<osprey_protocol::Uuid, StateTopic> {
    BTreeMap::from([(
        topic_id(1),
        StateTopic { name: "orders".into(), partitions: partitions.iter().copied().collect() },
    )])
}

fn refused_code(step: ShareOffsetsStep) -> ErrorCode {
    match step {
        ShareOffsetsStep::Refused { code, .. } => code,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn a_share_groups_offsets_are_altered_and_deleted_only_while_it_is_empty() {
    let mut h = Harness::with_topics(&[("orders", 1, 3)]);
    h.join("a", &["orders"]);
    let initialized = h.coordinator.share_group_initialized_partitions(GROUP).unwrap();
    assert_eq!(initialized[&topic_id(1)].partitions, BTreeSet::from([0, 1, 2]));
    assert!(h.coordinator.share_group_initialized_partitions("unknown").unwrap().is_empty());

    let refused = step(&mut h, |c, r| c.begin_share_group_offsets_alter(GROUP, &topics(&[0]), r));
    assert_eq!(refused_code(refused), ErrorCode::NON_EMPTY_GROUP);
    // A group id nobody uses becomes an empty share group whose offsets are set (Kafka:
    // kafka-share-groups.sh --reset-offsets before the first member joins).
    let begun = step(&mut h, |c, r| c.begin_share_group_offsets_alter("unknown", &topics(&[0]), r));
    assert_eq!(begun, ShareOffsetsStep::AlterBegun { state_epoch: 1 });
    assert_eq!(h.coordinator.share_group_state("unknown"), Some(osprey_coordinator::group::ShareGroupState::Empty));

    assert_eq!(h.heartbeat("a", -1, None).error_code, 0);
    let epoch = h.coordinator.share_group(GROUP).unwrap().group_epoch;
    let begun = step(&mut h, |c, r| c.begin_share_group_offsets_alter(GROUP, &topics(&[0]), r));
    assert_eq!(begun, ShareOffsetsStep::AlterBegun { state_epoch: epoch });
    assert_eq!(h.coordinator.share_group(GROUP).unwrap().state_metadata.initializing, topics(&[0]));
    let done = step(&mut h, |c, r| c.share_group_partitions_initialized(GROUP, &topics(&[0]), r));
    assert_eq!(done, ShareOffsetsStep::Done);
    assert!(h.coordinator.share_group(GROUP).unwrap().state_metadata.initializing.is_empty());

    // Delete: an initialized topic's partitions, then (still deleting) all of them; a
    // topic without state has nothing to delete.
    let named = |name: &str, id: u8| NamedTopic { name: name.into(), topic_id: topic_id(id), num_partitions: 3 };
    let begun =
        step(&mut h, |c, r| c.begin_share_group_offsets_delete(GROUP, &[named("orders", 1), named("other", 2)], r));
    let expected = ShareOffsetsStep::DeleteBegun {
        delete: BTreeMap::from([(topic_id(1), BTreeSet::from([0, 1, 2]))]),
        nothing_to_delete: vec!["other".into()],
    };
    assert_eq!(begun, expected);
    let metadata = &h.coordinator.share_group(GROUP).unwrap().state_metadata;
    assert!(metadata.initialized.is_empty());
    assert_eq!(metadata.deleting.get(&topic_id(1)).map(String::as_str), Some("orders"));
    let again = step(&mut h, |c, r| c.begin_share_group_offsets_delete(GROUP, &[named("orders", 1)], r));
    assert!(
        matches!(again, ShareOffsetsStep::DeleteBegun { delete, .. } if delete[&topic_id(1)] == BTreeSet::from([0, 1, 2]))
    );
    let done = step(&mut h, |c, r| c.share_group_offsets_deleted(GROUP, &BTreeSet::from([topic_id(1)]), r));
    assert_eq!(done, ShareOffsetsStep::Done);
    assert!(h.coordinator.share_group(GROUP).unwrap().state_metadata.deleting.is_empty());

    // Every step was written: the log replays to the same state metadata.
    let reloaded = h.reloaded();
    assert_eq!(
        reloaded.share_group(GROUP).unwrap().state_metadata,
        h.coordinator.share_group(GROUP).unwrap().state_metadata
    );
}

#[test]
fn a_failed_write_of_a_step_refuses_it() {
    let mut h = Harness::with_topics(&[("orders", 1, 3)]);
    h.join("a", &["orders"]);
    assert_eq!(h.heartbeat("a", -1, None).error_code, 0);
    let reply = h.reply();
    h.coordinator.begin_share_group_offsets_alter(GROUP, &topics(&[1]), reply);
    let mut answered = None;
    while let Some(output) = h.coordinator.poll_output() {
        match output {
            osprey_coordinator::group::Output::Persist { id, .. } => {
                h.coordinator.persisted(id, Err(ErrorCode::NOT_LEADER_OR_FOLLOWER), h.now)
            }
            osprey_coordinator::group::Output::Respond { reply: r, response } if r == reply => {
                answered = Some(response)
            }
            _ => {}
        }
    }
    let Some(Response::ShareGroupOffsets(step)) = answered else { panic!("not answered") };
    assert_eq!(refused_code(step), ErrorCode::NOT_COORDINATOR);
}
