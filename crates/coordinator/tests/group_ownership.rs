//! A coordinator that follows the leadership of `__consumer_offsets` partitions: groups
//! of a partition not handed over are NOT_COORDINATOR, of one being loaded
//! COORDINATOR_LOAD_IN_PROGRESS; a load for an epoch no longer wanted is dropped; an
//! unload fails the persists in flight and their late reports change nothing.

mod group_support;

use group_support::{code, Harness};
use osprey_coordinator::group::{partition_for, PartitionLoad, Replay};
use osprey_protocol::messages::{HeartbeatRequest, LeaveGroupRequest};
use osprey_protocol::ErrorCode;

const G: &str = "my-group";
const PARTITIONS: i32 = 50;

fn following() -> (Harness, i32) {
    let mut h = Harness::new();
    h.coordinator.follow_leadership(PARTITIONS, h.now);
    (h, partition_for(G, PARTITIONS))
}

fn load(h: &mut Harness, partition: i32, epoch: i32, log: Vec<osprey_coordinator::group::Record>) {
    h.coordinator.begin_load(partition, epoch, h.now);
    let items = log.into_iter().map(Replay::Record);
    h.coordinator.finish_load(partition, epoch, items, h.now).expect("wanted").expect("loads");
    h.coordinator.check_invariants().unwrap();
}

#[test]
fn groups_of_a_partition_not_led_here_are_not_coordinator_then_loading_then_served() {
    let (mut h, p) = following();
    let heartbeat = HeartbeatRequest { group_id: G.into(), member_id: "m".into(), ..Default::default() };
    assert_eq!(h.coordinator.heartbeat(&heartbeat, h.now).error_code, code(ErrorCode::NOT_COORDINATOR));
    assert_eq!(h.commit(G, -1, "", &[("t", 0, 5)]), [code(ErrorCode::NOT_COORDINATOR)]);
    let reply = h.join(G, "", None, &["t"]);
    assert_eq!(h.take_join(reply).unwrap().error_code, code(ErrorCode::NOT_COORDINATOR));
    let fetched = h.coordinator.fetch_offsets(G, None, false);
    assert_eq!(fetched.error_code, code(ErrorCode::NOT_COORDINATOR));

    h.coordinator.begin_load(p, 3, h.now);
    assert_eq!(h.coordinator.partition_load(p), Some(PartitionLoad::Loading { epoch: 3 }));
    assert_eq!(h.commit(G, -1, "", &[("t", 0, 5)]), [code(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS)]);
    let leave = LeaveGroupRequest { group_id: G.into(), member_id: "m".into(), ..Default::default() };
    assert_eq!(h.coordinator.leave(&leave, 0, h.now).error_code, code(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS));
    let described = h.coordinator.describe_groups(&[G.to_string()], 5);
    assert_eq!(described.groups[0].error_code, code(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS));

    h.coordinator.finish_load(p, 3, Vec::new(), h.now).unwrap().unwrap();
    assert_eq!(h.coordinator.loaded_epoch(p), Some(3));
    assert_eq!(h.commit(G, -1, "", &[("t", 0, 5)]), [0]);
    assert_eq!(h.fetch(G, "t", &[0])[0].committed_offset, 5);
    // Another partition's groups are still not served.
    let other = (0..).map(|i| format!("g{i}")).find(|g| partition_for(g, PARTITIONS) != p).unwrap();
    assert_eq!(h.commit(&other, -1, "", &[("t", 0, 5)]), [code(ErrorCode::NOT_COORDINATOR)]);
}

#[test]
fn a_new_leader_loads_what_the_old_one_wrote_and_the_old_one_forgets_it() {
    let (mut old, p) = following();
    load(&mut old, p, 1, Vec::new());
    let (generation, members, _) = old.stable_group(G, 2, &["t"]);
    assert_eq!(old.commit(G, generation, &members[0], &[("t", 0, 42)]), [0]);

    let (mut new, _) = following();
    load(&mut new, p, 2, old.log.clone());
    assert_eq!(new.fetch(G, "t", &[0])[0].committed_offset, 42);
    assert_eq!(new.coordinator.generation(G), Some(generation));

    assert_eq!(old.coordinator.unload_partition(p, PARTITIONS, old.now), 1);
    assert_eq!(old.coordinator.loaded_epoch(p), None);
    assert_eq!(old.commit(G, generation, &members[0], &[("t", 0, 43)]), [code(ErrorCode::NOT_COORDINATOR)]);
    old.coordinator.check_invariants().unwrap();
}

#[test]
fn a_load_finished_for_an_epoch_no_longer_wanted_is_dropped() {
    let (mut h, p) = following();
    let (mut writer, _) = following();
    load(&mut writer, p, 1, Vec::new());
    assert_eq!(writer.commit(G, -1, "", &[("t", 0, 9)]), [0]);

    h.coordinator.begin_load(p, 4, h.now);
    // Leadership moved on (epoch 5) while epoch 4's records were being read.
    h.coordinator.begin_load(p, 5, h.now);
    let stale = writer.log.clone().into_iter().map(Replay::Record);
    assert!(h.coordinator.finish_load(p, 4, stale, h.now).is_none());
    assert_eq!(h.coordinator.partition_load(p), Some(PartitionLoad::Loading { epoch: 5 }));
    // Unloaded before its records came: nothing is loaded.
    h.coordinator.unload_partition(p, PARTITIONS, h.now);
    let late = writer.log.clone().into_iter().map(Replay::Record);
    assert!(h.coordinator.finish_load(p, 5, late, h.now).is_none());
    assert_eq!(h.coordinator.partition_load(p), None);
    assert_eq!(h.coordinator.generation(G), None);
}

#[test]
fn an_unload_fails_commits_in_flight_and_their_late_reports_change_nothing() {
    let (mut h, p) = following();
    load(&mut h, p, 1, Vec::new());
    h.auto_persist = false;
    let reply = h.send_commit(&Harness::commit_request(G, -1, "", &[("t", 0, 10)]));
    assert!(h.take_commit(reply).is_none());
    h.coordinator.unload_partition(p, PARTITIONS, h.now);
    h.drain();
    let answer = h.take_commit(reply).expect("answered at the unload");
    assert_eq!(answer.topics[0].partitions[0].error_code, code(ErrorCode::NOT_COORDINATOR));
    // Leadership comes back (epoch 2) before the old append's report arrives.
    load(&mut h, p, 2, Vec::new());
    h.complete_persists();
    assert_eq!(h.fetch(G, "t", &[0])[0].committed_offset, -1, "an append of epoch 1 reported late is ignored");
    h.coordinator.check_invariants().unwrap();
}
