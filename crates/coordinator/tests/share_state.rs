//! The share coordinator (`osprey_coordinator::share_state`): durable share-partition
//! state, one record in flight per key, writes combined meanwhile, fencing by leader and
//! state epoch, and a log that replays to the same state.

use osprey_coordinator::group::{PersistId, ReplyId};
use osprey_coordinator::share_state::{
    Output, ShareKey, ShareStateConfig, ShareStateCoordinator, StateBatch, StateRecord, WriteState,
};
use osprey_protocol::{ErrorCode, Uuid};
use proptest::prelude::*;

fn key(partition: i32) -> ShareKey {
    ShareKey { group_id: "queue".into(), topic_id: Uuid([7; 16]), partition }
}

fn batch(first: i64, last: i64, state: i8, count: i16) -> StateBatch {
    StateBatch { first_offset: first, last_offset: last, delivery_state: state, delivery_count: count }
}

fn write(leader_epoch: i32, start_offset: i64, batches: Vec<StateBatch>) -> WriteState {
    WriteState { state_epoch: 0, leader_epoch, start_offset, delivery_complete_count: -1, batches }
}

/// Drains the outputs: the persists asked for and the answers given.
#[derive(Debug, Default)]
struct Drained {
    persists: Vec<(PersistId, i32, StateRecord)>,
    answers: Vec<(ReplyId, Result<(), ErrorCode>)>,
}

fn drain(c: &mut ShareStateCoordinator) -> Drained {
    let mut out = Drained::default();
    while let Some(o) = c.poll_output() {
        match o {
            Output::Persist { id, partition, record } => out.persists.push((id, partition, record)),
            Output::Respond { reply, result } => out.answers.push((reply, result.map_err(|e| e.code))),
        }
    }
    c.check_invariants();
    out
}

/// A coordinator with `key(0)` initialised at start offset 0 and its snapshot durable.
fn initialised() -> ShareStateCoordinator {
    let mut c = ShareStateCoordinator::new(ShareStateConfig::default());
    c.initialize(ReplyId(0), key(0), 0, 0, 1);
    let d = drain(&mut c);
    assert_eq!(d.persists.len(), 1);
    c.persisted(d.persists[0].0, Ok(0), 2);
    assert_eq!(drain(&mut c).answers, vec![(ReplyId(0), Ok(()))]);
    c
}

#[test]
fn a_write_is_answered_once_its_record_is_durable_and_reads_see_it_only_then() {
    let mut c = initialised();
    c.write(ReplyId(1), key(0), write(3, 5, vec![batch(5, 9, 2, 1)]), 10);
    let d = drain(&mut c);
    assert!(d.answers.is_empty(), "not before it is durable");
    let [(id, partition, StateRecord::Update(_, update))] = &d.persists[..] else { panic!("one update: {d:?}") };
    assert_eq!(*partition, c.partition_of(&key(0)));
    assert_eq!(update.batches, vec![batch(5, 9, 2, 1)]);
    assert_eq!(c.read(&key(0), 3, 11).unwrap().start_offset, 0, "reads see the durable state");

    c.persisted(*id, Ok(1), 12);
    assert_eq!(drain(&mut c).answers, vec![(ReplyId(1), Ok(()))]);
    let read = c.read(&key(0), 3, 13).unwrap();
    assert_eq!((read.start_offset, read.batches), (5, vec![batch(5, 9, 2, 1)]));
}

#[test]
fn writes_arriving_while_one_is_in_flight_share_the_next_record() {
    let mut c = initialised();
    c.write(ReplyId(1), key(0), write(1, -1, vec![batch(0, 4, 0, 1)]), 10);
    let first = drain(&mut c).persists;
    c.write(ReplyId(2), key(0), write(1, -1, vec![batch(0, 1, 2, 1)]), 11);
    c.write(ReplyId(3), key(0), write(1, 2, vec![batch(3, 3, 4, 1)]), 12);
    assert!(drain(&mut c).persists.is_empty(), "one record in flight per key");

    c.persisted(first[0].0, Ok(1), 13);
    let d = drain(&mut c);
    assert_eq!(d.answers, vec![(ReplyId(1), Ok(()))]);
    let [(id, _, StateRecord::Update(_, combined))] = &d.persists[..] else { panic!("one combined update: {d:?}") };
    assert_eq!(combined.start_offset, 2);
    assert_eq!(combined.batches, vec![batch(3, 3, 4, 1)], "offsets below the new start offset are gone");
    c.persisted(*id, Ok(2), 14);
    assert_eq!(drain(&mut c).answers, vec![(ReplyId(2), Ok(())), (ReplyId(3), Ok(()))]);
    let read = c.read(&key(0), 1, 15).unwrap();
    assert_eq!((read.start_offset, read.batches), (2, vec![batch(2, 2, 0, 1), batch(3, 3, 4, 1), batch(4, 4, 0, 1)]));
}

#[test]
fn a_failed_append_changes_nothing_and_its_writers_get_its_error() {
    let mut c = initialised();
    c.write(ReplyId(1), key(0), write(1, 3, vec![batch(3, 4, 2, 1)]), 10);
    let d = drain(&mut c);
    c.persisted(d.persists[0].0, Err(ErrorCode::KAFKA_STORAGE_ERROR), 11);
    // Answered as Kafka's coordinator runtime answers a failed disk: NOT_COORDINATOR.
    assert_eq!(drain(&mut c).answers, vec![(ReplyId(1), Err(ErrorCode::NOT_COORDINATOR))]);
    let read = c.read(&key(0), 1, 12).unwrap();
    assert_eq!((read.start_offset, read.batches), (0, vec![]));
}

#[test]
fn an_older_leader_or_state_epoch_is_fenced_as_soon_as_a_newer_one_has_spoken() {
    let mut c = initialised();
    // The new leader reads with epoch 5: at once, the old leader's writes are fenced.
    c.read(&key(0), 5, 10).unwrap();
    let epoch_record = drain(&mut c).persists;
    assert!(matches!(&epoch_record[..], [(_, _, StateRecord::Update(_, u))] if u.leader_epoch == 5));
    c.write(ReplyId(1), key(0), write(4, -1, vec![]), 11);
    assert_eq!(drain(&mut c).answers, vec![(ReplyId(1), Err(ErrorCode::FENCED_LEADER_EPOCH))]);
    assert_eq!(c.read(&key(0), 4, 12).unwrap_err().code, ErrorCode::FENCED_LEADER_EPOCH);

    let mut stale = write(5, -1, vec![]);
    stale.state_epoch = 0;
    c.initialize(ReplyId(2), key(0), 1, 0, 13);
    c.write(ReplyId(3), key(0), stale, 14);
    let answers = drain(&mut c).answers;
    assert!(answers.contains(&(ReplyId(3), Err(ErrorCode::FENCED_STATE_EPOCH))), "{answers:?}");
}

#[test]
fn uninitialised_share_partitions_refuse_reads_and_writes() {
    let mut c = ShareStateCoordinator::new(ShareStateConfig::default());
    assert_eq!(c.read(&key(1), 0, 1).unwrap_err().code, ErrorCode::INVALID_REQUEST);
    c.write(ReplyId(1), key(1), write(0, 0, vec![]), 1);
    assert_eq!(drain(&mut c).answers, vec![(ReplyId(1), Err(ErrorCode::INVALID_REQUEST))]);
    let summary = c.read_summary(&key(1));
    assert_eq!((summary.start_offset, summary.leader_epoch), (-1, -1));
    c.delete(ReplyId(2), key(1), 1);
    assert_eq!(drain(&mut c).answers, vec![(ReplyId(2), Ok(()))], "deleting nothing is done at once");
}

#[test]
fn a_snapshot_follows_the_configured_number_of_updates() {
    let config = ShareStateConfig { snapshot_update_records_per_snapshot: 2, ..ShareStateConfig::default() };
    let mut c = ShareStateCoordinator::new(config);
    c.initialize(ReplyId(0), key(0), 0, 0, 1);
    let mut kinds = Vec::new();
    let mut persists = drain(&mut c).persists;
    for i in 0..4 {
        let (id, _, record) = persists.remove(0);
        kinds.push(matches!(record, StateRecord::Snapshot(..)));
        c.persisted(id, Ok(i), 2 + i);
        drain(&mut c);
        c.write(ReplyId(1 + i as u64), key(0), write(0, -1, vec![batch(i, i, 2, 1)]), 2 + i);
        persists = drain(&mut c).persists;
    }
    assert_eq!(kinds, vec![true, false, false, true]);
}

#[test]
fn unloading_a_partition_answers_its_waiters_not_coordinator() {
    let mut c = initialised();
    c.write(ReplyId(1), key(0), write(0, -1, vec![]), 10);
    let d = drain(&mut c);
    let partition = c.partition_of(&key(0));
    assert_eq!(c.unload_partition(partition), vec![d.persists[0].0]);
    assert_eq!(drain(&mut c).answers, vec![(ReplyId(1), Err(ErrorCode::NOT_COORDINATOR))]);
    assert!(c.state(&key(0)).is_none());
}

#[test]
fn the_coordinator_key_and_partition_are_kafkas() {
    // Kafka: Utils.abs("group:topicId:partition".hashCode()) % 50, topic id in base64.
    let k = ShareKey { group_id: "g".into(), topic_id: Uuid([0; 16]), partition: 0 };
    assert_eq!(k.coordinator_key(), "g:AAAAAAAAAAAAAAAAAAAAAA:0");
    let expected = osprey_coordinator::group::java_string_hash_code("g:AAAAAAAAAAAAAAAAAAAAAA:0").unsigned_abs() % 50;
    assert_eq!(osprey_coordinator::share_state::partition_for(&k, 50), expected as i32);
}

#[derive(Debug, Clone)]
enum Step {
    Initialize {
        partition: i32,
        start: i64,
    },
    Write {
        partition: i32,
        start: i64,
        first: i64,
        len: i64,
        state: i8,
        count: i16,
    },
    Read {
        partition: i32,
        leader_epoch: i32,
    },
    Delete {
        partition: i32,
    },
    /// Report the oldest persist in flight, durable or failed.
    Persist {
        ok: bool,
    },
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        1 => (0..2i32, -1..4i64).prop_map(|(partition, start)| Step::Initialize { partition, start }),
        4 => (0..2i32, -1..30i64, 0..30i64, 0..5i64, prop::sample::select(vec![0i8, 2, 4]), 1..5i16).prop_map(
            |(partition, start, first, len, state, count)| Step::Write { partition, start, first, len, state, count }
        ),
        1 => (0..2i32, 0..4i32).prop_map(|(partition, leader_epoch)| Step::Read { partition, leader_epoch }),
        1 => (0..2i32).prop_map(|partition| Step::Delete { partition }),
        5 => Just(Step::Persist { ok: true }),
        1 => Just(Step::Persist { ok: false }),
    ];
    prop::collection::vec(step, 1..60)
}

proptest! {
    /// Whatever the interleaving of writes, reads, deletes and appends (some failing),
    /// the coordinator's state is what replaying its durable records gives: nothing
    /// acknowledged is missing after a reload, nothing that failed is there.
    #[test]
    fn the_durable_log_replays_to_the_live_state(steps in steps()) {
        let config = ShareStateConfig { snapshot_update_records_per_snapshot: 3, ..ShareStateConfig::default() };
        let mut live = ShareStateCoordinator::new(config.clone());
        let mut log: Vec<StateRecord> = Vec::new();
        let mut in_flight: Vec<(PersistId, StateRecord)> = Vec::new();
        let mut reply = 0u64;
        let mut now = 0i64;
        // What each held request asked, and per partition the batches of writes answered
        // Ok since the last initialise or delete answered Ok.
        let mut asked: std::collections::HashMap<u64, (i32, Option<StateBatch>)> = Default::default();
        let mut acknowledged: [Vec<StateBatch>; 2] = Default::default();
        let mut highest_start = [-1i64; 2];
        for step in steps {
            now += 1;
            reply += 1;
            match step {
                Step::Initialize { partition, start } => {
                    // A share partition's start offset only moves forward (or is -1: not known yet).
                    let start = if start == -1 { -1 } else { start.max(highest_start[partition as usize]) };
                    highest_start[partition as usize] = highest_start[partition as usize].max(start);
                    asked.insert(reply, (partition, None));
                    live.initialize(ReplyId(reply), key(partition), 0, start, now)
                }
                Step::Write { partition, start, first, len, state, count } => {
                    let start = if start == -1 { -1 } else { start.max(highest_start[partition as usize]) };
                    highest_start[partition as usize] = highest_start[partition as usize].max(start);
                    let b = batch(first, first + len, state, count);
                    asked.insert(reply, (partition, Some(b)));
                    let w = WriteState { state_epoch: -1, leader_epoch: -1, start_offset: start, delivery_complete_count: -1, batches: vec![b] };
                    live.write(ReplyId(reply), key(partition), w, now);
                }
                Step::Read { partition, leader_epoch } => { let _ = live.read(&key(partition), leader_epoch, now); }
                Step::Delete { partition } => {
                    asked.insert(reply, (partition, None));
                    live.delete(ReplyId(reply), key(partition), now)
                }
                Step::Persist { ok } => {
                    if !in_flight.is_empty() {
                        let (id, record) = in_flight.remove(0);
                        let offset = log.len() as i64;
                        if ok { log.push(record); }
                        live.persisted(id, if ok { Ok(offset) } else { Err(ErrorCode::KAFKA_STORAGE_ERROR) }, now);
                    }
                }
            }
            let d = drain(&mut live);
            in_flight.extend(d.persists.into_iter().map(|(id, _, record)| (id, record)));
            for (ReplyId(r), result) in d.answers {
                match (asked.remove(&r), result) {
                    (Some((p, Some(b))), Ok(())) => acknowledged[p as usize].push(b),
                    // A fresh state: the writes before it are gone.
                    (Some((p, None)), Ok(())) => acknowledged[p as usize].clear(),
                    _ => {}
                }
            }
            // An acknowledged write is in the durable state: every offset it wrote, at or
            // above the start offset, is at least as far along as it said.
            for p in 0..2 {
                let Some(state) = live.state(&key(p)) else {
                    prop_assert!(acknowledged[p as usize].is_empty(), "acknowledged writes lost: {:?}", acknowledged[p as usize]);
                    continue;
                };
                for b in &acknowledged[p as usize] {
                    for offset in b.first_offset.max(state.start_offset)..=b.last_offset {
                        let held = state.batches.iter().find(|h| h.first_offset <= offset && offset <= h.last_offset);
                        let held = held.map(|h| (h.delivery_count, h.delivery_state));
                        prop_assert!(held >= Some((b.delivery_count, b.delivery_state)), "offset {} of {:?}: {:?}", offset, b, held);
                    }
                }
            }

            let mut replayed = ShareStateCoordinator::new(config.clone());
            for (offset, record) in log.iter().enumerate() { replayed.replay(offset as i64, record); }
            for p in 0..2 {
                prop_assert_eq!(replayed.state(&key(p)), live.state(&key(p)), "partition {} after {:?}", p, log);
            }
            // Records below a partition's redundant offset are not needed: the rest alone
            // replays to the same state (what pruning `__share_group_state` relies on).
            let mut pruned = ShareStateCoordinator::new(config.clone());
            for (offset, record) in log.iter().enumerate() {
                let partition = live.partition_of(record.key());
                if live.redundant_offset(partition).is_some_and(|r| offset as i64 >= r) {
                    pruned.replay(offset as i64, record);
                }
            }
            for p in 0..2 {
                prop_assert_eq!(pruned.state(&key(p)), live.state(&key(p)), "partition {} pruned at {:?}", p, live.redundant_offset(live.partition_of(&key(p))));
            }
        }
    }
}

/// The snapshot of `records_read_back_as_written` and `records_are_byte_for_byte_kafkas`
/// (Kafka's bytes for it are in `KAFKA_SNAPSHOT`).
fn sample_snapshot() -> osprey_coordinator::share_state::ShareState {
    osprey_coordinator::share_state::ShareState {
        snapshot_epoch: 3,
        state_epoch: 1,
        leader_epoch: 7,
        start_offset: 100,
        delivery_complete_count: 4,
        create_timestamp: 1_700_000_000_000,
        write_timestamp: 1_700_000_000_500,
        batches: vec![batch(100, 104, 2, 1), batch(105, 105, 4, 5)],
    }
}

/// The update of the same two tests (Kafka's bytes in `KAFKA_UPDATE`).
fn sample_update() -> osprey_coordinator::share_state::ShareUpdate {
    osprey_coordinator::share_state::ShareUpdate {
        snapshot_epoch: 3,
        leader_epoch: -1,
        start_offset: -1,
        delivery_complete_count: -1,
        batches: vec![batch(106, 110, 0, 2)],
    }
}

#[test]
fn records_read_back_as_written() {
    let state = sample_snapshot();
    let update = sample_update();
    for record in
        [StateRecord::Snapshot(key(2), state), StateRecord::Update(key(2), update), StateRecord::Tombstone(key(2))]
    {
        let raw = record.to_record();
        assert_eq!(StateRecord::from_record(raw.key, raw.value).unwrap(), Some(record));
    }
    let garbage = bytes::Bytes::from_static(&[0, 0, 0xff]);
    assert!(StateRecord::from_record(garbage, None).is_err());
    let unknown_type = bytes::Bytes::from_static(&[0, 9, 1, 2]);
    assert_eq!(StateRecord::from_record(unknown_type, None).unwrap(), None);
}

/// The bytes Kafka 4.4's `ShareCoordinatorRecordSerde` writes for the records of
/// `records_read_back_as_written`, printed by `tests/kafka/ShareStateRecords.java`
/// (`javac -cp "<kafka 4.4 libs>/*" ShareStateRecords.java && java -cp "<libs>/*:." ShareStateRecords`).
const KAFKA_SNAPSHOT: (&str, &str) = (
    "0000000571756575650707070707070707070707070707070700000002",
    "000000000003000000010000000700000000000000640000018bcfe568000000018bcfe569f4030000000000000064000000000000006802000100000000000000006900000000000000690400050001000400000004",
);
const KAFKA_UPDATE: (&str, &str) = (
    "0001000571756575650707070707070707070707070707070700000002",
    "000000000003ffffffffffffffffffffffff02000000000000006a000000000000006e0000020000",
);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn records_are_byte_for_byte_kafkas() {
    let state = sample_snapshot();
    let snapshot = StateRecord::Snapshot(key(2), state).to_record();
    assert_eq!(
        (hex(&snapshot.key), hex(snapshot.value.as_deref().unwrap())),
        (KAFKA_SNAPSHOT.0.into(), KAFKA_SNAPSHOT.1.into())
    );
    let update = sample_update();
    let update = StateRecord::Update(key(2), update).to_record();
    assert_eq!(
        (hex(&update.key), hex(update.value.as_deref().unwrap())),
        (KAFKA_UPDATE.0.into(), KAFKA_UPDATE.1.into())
    );
}

#[test]
fn a_coordinator_following_leadership_serves_only_what_it_has_loaded() {
    let mut c = ShareStateCoordinator::new(ShareStateConfig::default());
    c.follow_leadership();
    let p = c.partition_of(&key(0));
    assert_eq!(c.serving_error(&key(0)), Some(ErrorCode::NOT_COORDINATOR));
    c.begin_load(p, 4);
    assert_eq!(c.serving_error(&key(0)), Some(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS));
    let snapshot = osprey_coordinator::share_state::ShareState {
        snapshot_epoch: 0,
        state_epoch: 0,
        leader_epoch: 2,
        start_offset: 10,
        delivery_complete_count: -1,
        create_timestamp: 0,
        write_timestamp: 0,
        batches: vec![batch(10, 12, 2, 1)],
    };
    // A load for an epoch no longer being loaded is dropped.
    assert!(!c.finish_load(p, 3, vec![(0, StateRecord::Snapshot(key(0), snapshot.clone()))]));
    assert!(c.finish_load(p, 4, vec![(7, StateRecord::Snapshot(key(0), snapshot.clone()))]));
    assert_eq!((c.serving_error(&key(0)), c.loaded_epoch(p)), (None, Some(4)));
    assert_eq!(c.state(&key(0)), Some(&snapshot));
    assert_eq!(c.redundant_offset(p), Some(7), "the snapshot at 7 holds everything before it");
    assert!(c.unload_partition(p).is_empty());
    assert_eq!((c.serving_error(&key(0)), c.state(&key(0))), (Some(ErrorCode::NOT_COORDINATOR), None));
}
