//! TxnOffsetCommit: offsets pending for their producer until its transaction ends, the
//! checks of the committing member, replay of transactional batches and markers, and how
//! pending offsets meet plain commits, deletion, expiry and partition moves.

mod group_support;

use group_support::{code, Harness};
use osprey_coordinator::group::{
    partition_for, GroupCoordinator, GroupState, Output, PersistId, Record, Replay, ReplyId, Response,
};
use osprey_protocol::messages::offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
use osprey_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics;
use osprey_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use osprey_protocol::messages::{OffsetDeleteRequest, TxnOffsetCommitRequest};
use osprey_protocol::ErrorCode;

const G: &str = "txn-group";
const T: &str = "orders";
/// `offsets.topic.num.partitions`
const N: i32 = 50;
const PRODUCER: i64 = 7;
const EPOCH: i16 = 3;

fn request(
    group: &str,
    producer_id: i64,
    generation: i32,
    member_id: &str,
    offsets: &[(i32, i64)],
) -> TxnOffsetCommitRequest {
    TxnOffsetCommitRequest {
        transactional_id: format!("tx-{producer_id}"),
        group_id: group.into(),
        producer_id,
        producer_epoch: EPOCH,
        generation_id: generation,
        member_id: member_id.into(),
        topics: vec![TxnOffsetCommitRequestTopic {
            name: T.into(),
            partitions: offsets
                .iter()
                .map(|(p, o)| TxnOffsetCommitRequestPartition {
                    partition_index: *p,
                    committed_offset: *o,
                    committed_leader_epoch: 4,
                    committed_metadata: Some(format!("txn-{o}")),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A TxnOffsetCommit sent: answered at once, or waiting for its persist.
enum Sent {
    Answered(Vec<i16>),
    InFlight { reply: ReplyId, id: PersistId, producer: Option<(i64, i16)>, records: Vec<Record> },
}

fn send(h: &mut Harness, request: &TxnOffsetCommitRequest, version: i16) -> Sent {
    let reply = h.next_reply();
    h.coordinator.txn_commit_offsets(request, version, reply, h.now);
    let mut sent = None;
    while let Some(output) = h.coordinator.poll_output() {
        match output {
            Output::Respond { reply: r, response: Response::TxnOffsetCommit(response) } if r == reply => {
                assert!(sent.is_none());
                sent = Some(Sent::Answered(errors(&response)));
            }
            Output::Persist { id, records, producer, .. } => {
                assert!(sent.is_none(), "one persist");
                sent = Some(Sent::InFlight { reply, id, producer, records });
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    h.coordinator.check_invariants().unwrap();
    sent.expect("answered or persisting")
}

fn errors(response: &osprey_protocol::messages::TxnOffsetCommitResponse) -> Vec<i16> {
    response.topics.iter().flat_map(|t| t.partitions.iter().map(|p| p.error_code)).collect()
}

/// Reports the persist of `sent` done with `result`; returns the answer.
fn finish(h: &mut Harness, sent: Sent, result: Result<(), ErrorCode>, log: Option<&mut Vec<Replay>>) -> Vec<i16> {
    let Sent::InFlight { reply, id, producer, records } = sent else { panic!("not in flight") };
    if let (Ok(()), Some(log)) = (result, log) {
        let producer_id = producer.expect("transactional").0;
        log.extend(records.into_iter().map(|record| Replay::Transactional { producer_id, record }));
    }
    h.coordinator.persisted(id, result, h.now);
    let mut answer = None;
    while let Some(output) = h.coordinator.poll_output() {
        match output {
            Output::Respond { reply: r, response: Response::TxnOffsetCommit(response) } if r == reply => {
                answer = Some(errors(&response))
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    h.coordinator.check_invariants().unwrap();
    answer.expect("answered once persisted")
}

/// Commits transactionally and makes it durable at once.
fn txn_commit(h: &mut Harness, producer_id: i64, generation: i32, member_id: &str, offsets: &[(i32, i64)]) -> Vec<i16> {
    match send(h, &request(G, producer_id, generation, member_id, offsets), 5) {
        Sent::Answered(errors) => errors,
        sent => finish(h, sent, Ok(()), None),
    }
}

fn complete(h: &mut Harness, producer_id: i64, committed: bool) {
    h.coordinator.complete_txn(producer_id, committed, partition_for(G, N), N, h.now);
    assert!(h.coordinator.poll_output().is_none(), "the marker needs no output");
    h.coordinator.check_invariants().unwrap();
}

fn committed(h: &Harness, partitions: &[i32]) -> Vec<i64> {
    h.fetch(G, T, partitions).iter().map(|p| p.committed_offset).collect()
}

/// OffsetFetch with require_stable: (offset, error) per partition.
fn stable(coordinator: &GroupCoordinator, partitions: &[i32]) -> Vec<(i64, i16)> {
    let topics =
        [OffsetFetchRequestTopics { name: T.into(), partition_indexes: partitions.to_vec(), ..Default::default() }];
    let group = coordinator.fetch_offsets(G, Some(&topics), true);
    group.topics.iter().flat_map(|t| t.partitions.iter().map(|p| (p.committed_offset, p.error_code))).collect()
}

/// UNSTABLE_OFFSET_COMMIT
const UNSTABLE: i16 = 88;

#[test]
fn txn_offsets_are_invisible_until_the_transaction_commits() {
    let mut h = Harness::new();
    assert_eq!(h.commit(G, -1, "", &[(T, 0, 5)]), [0]);
    let sent = send(&mut h, &request(G, PRODUCER, -1, "", &[(0, 10), (1, 20)]), 5);
    let Sent::InFlight { producer, records, .. } = &sent else { panic!("persists") };
    assert_eq!(*producer, Some((PRODUCER, EPOCH)), "written as the producer's transactional batch");
    assert_eq!(records.len(), 2);
    // In flight: unstable already, the old offset otherwise.
    assert_eq!(stable(&h.coordinator, &[0, 1]), [(-1, UNSTABLE), (-1, UNSTABLE)]);
    assert_eq!(finish(&mut h, sent, Ok(()), None), [0, 0]);
    assert_eq!(committed(&h, &[0, 1]), [5, -1]);
    assert_eq!(stable(&h.coordinator, &[0, 1, 2]), [(-1, UNSTABLE), (-1, UNSTABLE), (-1, 0)]);
    complete(&mut h, PRODUCER, true);
    assert_eq!(committed(&h, &[0, 1]), [10, 20]);
    assert_eq!(stable(&h.coordinator, &[0, 1]), [(10, 0), (20, 0)]);
    let fetched = h.fetch(G, T, &[0]);
    assert_eq!((fetched[0].committed_leader_epoch, fetched[0].metadata.as_deref()), (4, Some("txn-10")));
}

#[test]
fn an_aborted_transaction_drops_its_offsets_and_the_previous_offset_remains() {
    let mut h = Harness::new();
    assert_eq!(h.commit(G, -1, "", &[(T, 0, 5)]), [0]);
    assert_eq!(txn_commit(&mut h, PRODUCER, -1, "", &[(0, 10), (1, 20)]), [0, 0]);
    complete(&mut h, PRODUCER, false);
    assert_eq!(committed(&h, &[0, 1]), [5, -1]);
    assert_eq!(stable(&h.coordinator, &[0, 1]), [(5, 0), (-1, 0)]);
    // A later marker of the same producer finds nothing.
    complete(&mut h, PRODUCER, true);
    assert_eq!(committed(&h, &[0, 1]), [5, -1]);
}

#[test]
fn a_marker_of_another_partition_or_producer_completes_nothing() {
    let mut h = Harness::new();
    assert_eq!(txn_commit(&mut h, PRODUCER, -1, "", &[(0, 10)]), [0]);
    let other_partition = (partition_for(G, N) + 1) % N;
    h.coordinator.complete_txn(PRODUCER, true, other_partition, N, h.now);
    h.coordinator.complete_txn(PRODUCER + 1, true, partition_for(G, N), N, h.now);
    assert_eq!(committed(&h, &[0]), [-1]);
    assert_eq!(stable(&h.coordinator, &[0]), [(-1, UNSTABLE)]);
    complete(&mut h, PRODUCER, true);
    assert_eq!(committed(&h, &[0]), [10]);
}

#[test]
fn two_producers_pending_on_one_partition_end_independently() {
    let mut h = Harness::new();
    assert_eq!(txn_commit(&mut h, 1, -1, "", &[(0, 10)]), [0]);
    assert_eq!(txn_commit(&mut h, 2, -1, "", &[(0, 20)]), [0]);
    complete(&mut h, 2, true);
    assert_eq!(committed(&h, &[0]), [20]);
    assert_eq!(stable(&h.coordinator, &[0]), [(-1, UNSTABLE)], "producer 1 is still open");
    // Producer 1's record is older than producer 2's: the committed offset stays.
    complete(&mut h, 1, true);
    assert_eq!(stable(&h.coordinator, &[0]), [(20, 0)]);
}

#[test]
fn the_newer_record_wins_between_plain_and_transactional_commits() {
    let mut h = Harness::new();
    // Transactional first, then a plain commit before the marker: the plain one is newer.
    assert_eq!(txn_commit(&mut h, PRODUCER, -1, "", &[(0, 10)]), [0]);
    assert_eq!(h.commit(G, -1, "", &[(T, 0, 30)]), [0]);
    complete(&mut h, PRODUCER, true);
    assert_eq!(committed(&h, &[0]), [30]);
    // Plain first, then transactional: the transactional one is newer.
    assert_eq!(h.commit(G, -1, "", &[(T, 1, 30)]), [0]);
    assert_eq!(txn_commit(&mut h, PRODUCER, -1, "", &[(1, 10)]), [0]);
    assert_eq!(committed(&h, &[1]), [30]);
    complete(&mut h, PRODUCER, true);
    assert_eq!(committed(&h, &[1]), [10]);
}

#[test]
fn a_failed_append_is_answered_and_leaves_nothing_pending() {
    let mut h = Harness::new();
    assert_eq!(h.commit(G, -1, "", &[(T, 0, 5)]), [0]);
    let sent = send(&mut h, &request(G, PRODUCER, -1, "", &[(0, 10), (1, 20)]), 5);
    let not_coordinator = code(ErrorCode::NOT_COORDINATOR);
    assert_eq!(finish(&mut h, sent, Err(ErrorCode::NOT_LEADER_OR_FOLLOWER), None), [not_coordinator; 2]);
    assert_eq!(stable(&h.coordinator, &[0, 1]), [(5, 0), (-1, 0)]);
    // A fenced producer's append error goes back as it is.
    let sent = send(&mut h, &request(G, PRODUCER, -1, "", &[(0, 11)]), 5);
    let fenced = code(ErrorCode::INVALID_PRODUCER_EPOCH);
    assert_eq!(finish(&mut h, sent, Err(ErrorCode::INVALID_PRODUCER_EPOCH), None), [fenced]);
    complete(&mut h, PRODUCER, true);
    assert_eq!(committed(&h, &[0, 1]), [5, -1]);
}

#[test]
fn a_failed_append_keeps_the_earlier_durable_offsets_of_the_transaction() {
    let mut h = Harness::new();
    assert_eq!(txn_commit(&mut h, PRODUCER, -1, "", &[(0, 10)]), [0]);
    let sent = send(&mut h, &request(G, PRODUCER, -1, "", &[(0, 11)]), 5);
    finish(&mut h, sent, Err(ErrorCode::NOT_ENOUGH_REPLICAS), None);
    complete(&mut h, PRODUCER, true);
    assert_eq!(committed(&h, &[0]), [10]);
}

#[test]
fn member_and_generation_are_checked_from_v3() {
    let mut h = Harness::new();
    let (generation, members, _) = h.stable_group(G, 2, &[T]);
    let m = &members[0];
    let illegal = code(ErrorCode::ILLEGAL_GENERATION);
    let unknown = code(ErrorCode::UNKNOWN_MEMBER_ID);
    assert_eq!(txn_commit(&mut h, PRODUCER, generation + 1, m, &[(0, 10), (1, 11)]), [illegal, illegal]);
    assert_eq!(txn_commit(&mut h, PRODUCER, generation, "client-x", &[(0, 10)]), [unknown]);
    assert_eq!(txn_commit(&mut h, PRODUCER, -1, m, &[(0, 10)]), [illegal], "a member must name its generation");
    assert_eq!(stable(&h.coordinator, &[0]), [(-1, 0)]);
    assert_eq!(txn_commit(&mut h, PRODUCER, generation, m, &[(0, 10)]), [0]);
    // Naming nobody is allowed even in a group with members: v0-2 cannot name anyone.
    assert_eq!(txn_commit(&mut h, PRODUCER, -1, "", &[(1, 11)]), [0]);
    let old = request(G, PRODUCER, generation + 5, "client-x", &[(2, 12)]);
    let sent = send(&mut h, &old, 2);
    assert!(matches!(sent, Sent::InFlight { .. }), "v2 carries no member fields to check");
    // Persists of a group complete in order: finish this one before the next commit.
    assert_eq!(finish(&mut h, sent, Ok(()), None), [0]);
    // CompletingRebalance does not refuse a transactional commit (no REBALANCE_IN_PROGRESS).
    let rejoin_a = h.join(G, m, None, &[T]);
    let rejoin_b = h.join(G, &members[1], None, &[T]);
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::CompletingRebalance));
    assert_eq!(txn_commit(&mut h, PRODUCER, generation + 1, m, &[(3, 13)]), [0]);
    assert!(h.take_join(rejoin_a).is_some() && h.take_join(rejoin_b).is_some());
}

#[test]
fn a_fenced_static_member_cannot_commit() {
    let mut h = Harness::new();
    let first = h.join(G, "", Some("instance-a"), &[T]);
    h.advance(3_000);
    let member_id = h.take_join(first).unwrap().member_id;
    let sync = h.send_sync(G, 1, &member_id, Some("instance-a"), &[(&member_id, b"A")]);
    assert_eq!(h.take_sync(sync).unwrap().error_code, 0);
    let restart = h.join(G, "", Some("instance-a"), &[T]);
    let new_id = h.take_join(restart).unwrap().member_id;
    let mut stale = request(G, PRODUCER, 1, &member_id, &[(0, 10)]);
    stale.group_instance_id = Some("instance-a".into());
    let Sent::Answered(errors) = send(&mut h, &stale, 3) else { panic!("refused at once") };
    assert_eq!(errors, [code(ErrorCode::FENCED_INSTANCE_ID)]);
    let mut current = request(G, PRODUCER, 1, &new_id, &[(0, 10)]);
    current.group_instance_id = Some("instance-a".into());
    let sent = send(&mut h, &current, 3);
    assert_eq!(finish(&mut h, sent, Ok(()), None), [0]);
}

#[test]
fn an_unknown_group_is_created_only_without_a_generation() {
    let mut h = Harness::new();
    assert_eq!(txn_commit(&mut h, PRODUCER, 1, "client-x", &[(0, 10)]), [code(ErrorCode::ILLEGAL_GENERATION)]);
    assert_eq!(h.coordinator.group_state(G), None);
    assert_eq!(txn_commit(&mut h, PRODUCER, -1, "", &[(0, 10)]), [0]);
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::Empty));
    let empty_id = request("", PRODUCER, -1, "", &[(0, 10)]);
    let Sent::Answered(errors) = send(&mut h, &empty_id, 3) else { panic!("refused at once") };
    assert_eq!(errors, [code(ErrorCode::INVALID_GROUP_ID)]);
}

#[test]
fn metadata_too_large_fails_only_that_partition() {
    let mut h = Harness::new();
    let mut req = request(G, PRODUCER, -1, "", &[(0, 10), (1, 11)]);
    req.topics[0].partitions[1].committed_metadata = Some("x".repeat(4097));
    req.topics.push(TxnOffsetCommitRequestTopic {
        name: "other".into(),
        partitions: vec![TxnOffsetCommitRequestPartition {
            partition_index: 0,
            committed_offset: 1,
            ..Default::default()
        }],
        ..Default::default()
    });
    let sent = send(&mut h, &req, 3);
    let Sent::InFlight { records, .. } = &sent else { panic!("persists the valid ones") };
    assert_eq!(records.len(), 2);
    assert_eq!(finish(&mut h, sent, Ok(()), None), [0, code(ErrorCode::OFFSET_METADATA_TOO_LARGE), 0]);
    // Nothing valid at all: answered without a write.
    let mut bad = request(G, PRODUCER, -1, "", &[(0, 10)]);
    bad.topics[0].partitions[0].committed_metadata = Some("x".repeat(4097));
    let Sent::Answered(errors) = send(&mut h, &bad, 3) else { panic!("nothing to write") };
    assert_eq!(errors, [code(ErrorCode::OFFSET_METADATA_TOO_LARGE)]);
}

/// Plays a log: plain commits (from the harness's log), transactional ones, markers.
struct Logged {
    h: Harness,
    log: Vec<Replay>,
}

impl Logged {
    fn new() -> Logged {
        Logged { h: Harness::new(), log: Vec::new() }
    }

    fn plain(&mut self, partition: i32, offset: i64) {
        assert_eq!(self.h.commit(G, -1, "", &[(T, partition, offset)]), [0]);
        self.log.extend(std::mem::take(&mut self.h.log).into_iter().map(Replay::Record));
    }

    fn txn(&mut self, producer_id: i64, offsets: &[(i32, i64)]) {
        let sent = send(&mut self.h, &request(G, producer_id, -1, "", offsets), 5);
        assert!(finish(&mut self.h, sent, Ok(()), Some(&mut self.log)).iter().all(|e| *e == 0));
    }

    fn marker(&mut self, producer_id: i64, committed: bool, partition: i32) {
        self.h.coordinator.complete_txn(producer_id, committed, partition, N, self.h.now);
        self.log.push(Replay::Marker { producer_id, committed, partition });
    }

    fn reload(&self) -> GroupCoordinator {
        let mut coordinator = GroupCoordinator::new(Default::default());
        coordinator.load_replay(self.log.clone(), N, self.h.now).expect("our own log loads");
        coordinator.check_invariants().unwrap();
        coordinator
    }
}

#[test]
fn replay_commits_aborts_and_keeps_open_transactions_pending() {
    let mut w = Logged::new();
    let home = partition_for(G, N);
    w.plain(1, 5);
    w.txn(1, &[(0, 10)]);
    w.txn(2, &[(1, 20)]);
    w.txn(3, &[(2, 30)]);
    w.txn(4, &[(3, 40)]);
    w.marker(1, true, home);
    w.marker(2, false, home);
    // A marker of another partition leaves producer 4 open.
    w.marker(4, true, (home + 1) % N);
    let expected = stable(&w.h.coordinator, &[0, 1, 2, 3]);
    assert_eq!(expected, [(10, 0), (5, 0), (-1, UNSTABLE), (-1, UNSTABLE)]);
    let mut reloaded = w.reload();
    assert_eq!(stable(&reloaded, &[0, 1, 2, 3]), expected);
    // The open transactions end after the load.
    reloaded.complete_txn(3, true, home, N, w.h.now);
    reloaded.complete_txn(4, false, home, N, w.h.now);
    assert_eq!(stable(&reloaded, &[0, 1, 2, 3]), [(10, 0), (5, 0), (30, 0), (-1, 0)]);
}

#[test]
fn replay_keeps_the_newer_of_plain_and_transactional_commits() {
    let mut w = Logged::new();
    let home = partition_for(G, N);
    w.txn(1, &[(0, 10), (1, 11)]);
    w.plain(0, 30);
    w.marker(1, true, home);
    let mut summary_check = GroupCoordinator::new(Default::default());
    let summary = summary_check.load_replay(w.log.clone(), N, w.h.now).unwrap();
    assert_eq!((summary.groups, summary.offsets, summary.pending_txn_offsets), (1, 2, 0));
    assert_eq!(stable(&w.reload(), &[0, 1]), [(30, 0), (11, 0)]);
    assert_eq!(stable(&w.h.coordinator, &[0, 1]), [(30, 0), (11, 0)]);
}

#[test]
fn replay_of_a_group_with_only_pending_offsets_creates_it() {
    let mut w = Logged::new();
    w.txn(1, &[(0, 10)]);
    let mut coordinator = GroupCoordinator::new(Default::default());
    let summary = coordinator.load_replay(w.log.clone(), N, w.h.now).unwrap();
    assert_eq!((summary.groups, summary.offsets, summary.pending_txn_offsets), (1, 0, 1));
    assert_eq!(coordinator.group_state(G), Some(GroupState::Empty));
    assert!(GroupCoordinator::new(Default::default()).load_replay(w.log.clone(), 0, 0).is_err());
}

#[test]
fn delete_groups_takes_pending_offsets_with_the_group() {
    let mut w = Logged::new();
    w.plain(0, 5);
    w.txn(1, &[(0, 10), (1, 11)]);
    let reply = w.h.next_reply();
    w.h.coordinator.delete_groups(&[G.to_string()], reply);
    w.h.drain();
    let Some(Response::DeleteGroups(response)) = w.h.take(reply) else { panic!("answered") };
    assert_eq!(response.results[0].error_code, 0, "a group with open transactions may go");
    // Tombstones for the committed partition 0 and the pending-only partition 1.
    let tombstones = w.h.log.iter().filter(|r| r.value.is_none()).count();
    assert_eq!(tombstones, 3, "two offsets and the group");
    w.log.extend(std::mem::take(&mut w.h.log).into_iter().map(Replay::Record));
    assert_eq!(w.h.coordinator.group_state(G), None);
    w.marker(1, true, partition_for(G, N));
    assert_eq!(w.h.coordinator.group_state(G), None, "the marker does not bring it back");
    assert_eq!(w.reload().group_state(G), None);
}

#[test]
fn offset_delete_drops_pending_offsets_only_with_a_committed_offset() {
    let mut w = Logged::new();
    w.plain(0, 5);
    w.txn(1, &[(0, 10), (1, 11)]);
    let request = OffsetDeleteRequest {
        group_id: G.into(),
        topics: vec![OffsetDeleteRequestTopic {
            name: T.into(),
            partitions: [0, 1].iter().map(|p| OffsetDeleteRequestPartition { partition_index: *p }).collect(),
        }],
    };
    let reply = w.h.next_reply();
    w.h.coordinator.delete_offsets(&request, reply);
    w.h.drain();
    assert!(matches!(w.h.take(reply), Some(Response::OffsetDelete(r)) if r.error_code == 0));
    w.log.extend(std::mem::take(&mut w.h.log).into_iter().map(Replay::Record));
    // Partition 0's tombstone took its pending offset; partition 1 had no committed offset.
    assert_eq!(stable(&w.h.coordinator, &[0, 1]), [(-1, 0), (-1, UNSTABLE)]);
    assert_eq!(stable(&w.reload(), &[0, 1]), [(-1, 0), (-1, UNSTABLE)]);
    w.marker(1, true, partition_for(G, N));
    assert_eq!(stable(&w.h.coordinator, &[0, 1]), [(-1, 0), (11, 0)]);
    assert_eq!(stable(&w.reload(), &[0, 1]), [(-1, 0), (11, 0)]);
}

#[test]
fn expiry_spares_pending_offsets_and_their_group() {
    let mut h = Harness::new();
    assert_eq!(h.commit(G, -1, "", &[(T, 0, 5), (T, 1, 6)]), [0, 0]);
    assert_eq!(txn_commit(&mut h, PRODUCER, -1, "", &[(0, 10), (2, 12)]), [0, 0]);
    let retention_ms = h.coordinator.config().offsets_retention_minutes * 60_000;
    h.advance(retention_ms + 1);
    h.advance(h.coordinator.config().offsets_retention_check_interval_ms);
    assert_eq!(committed(&h, &[0, 1]), [5, -1], "partition 0 has a pending offset: not expired");
    assert_eq!(h.coordinator.group_state(G), Some(GroupState::Empty), "open transactions keep the group");
    complete(&mut h, PRODUCER, false);
    h.advance(h.coordinator.config().offsets_retention_check_interval_ms);
    assert_eq!(h.coordinator.group_state(G), None, "nothing left once the transaction aborted");
}

#[test]
fn unloading_the_partition_drops_pending_offsets() {
    let mut w = Logged::new();
    w.txn(1, &[(0, 10)]);
    let home = partition_for(G, N);
    assert_eq!(w.h.coordinator.unload_partition(home, N, w.h.now), 1);
    assert_eq!(stable(&w.h.coordinator, &[0]), [(-1, 0)]);
    // Loaded again, the transaction is open again.
    w.h.coordinator.load_replay(w.log.clone(), N, w.h.now).unwrap();
    assert_eq!(stable(&w.h.coordinator, &[0]), [(-1, UNSTABLE)]);
    w.marker(1, true, home);
    assert_eq!(stable(&w.h.coordinator, &[0]), [(10, 0)]);
}

#[test]
fn load_still_replays_plain_records() {
    let mut w = Logged::new();
    w.plain(0, 5);
    let records: Vec<Record> = w
        .log
        .iter()
        .map(|r| match r {
            Replay::Record(record) => record.clone(),
            other => panic!("plain only: {other:?}"),
        })
        .collect();
    let mut coordinator = GroupCoordinator::new(Default::default());
    let summary = coordinator.load(records, 0).unwrap();
    assert_eq!((summary.groups, summary.offsets, summary.pending_txn_offsets), (1, 1, 0));
    assert_eq!(stable(&coordinator, &[0]), [(5, 0)]);
}
