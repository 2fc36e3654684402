use super::fetch::{FetchDecision, FollowerFetch};
use super::*;

const LAG_MS: i64 = 30_000;

fn config(local_id: i32, min_insync_replicas: usize, fsync_before_ack: bool) -> ReplicaConfig {
    ReplicaConfig { local_id, replica_lag_time_max_ms: LAG_MS, min_insync_replicas, fsync_before_ack }
}

fn assignment(leader: i32, leader_epoch: i32, partition_epoch: i32, replicas: &[i32], isr: &[i32]) -> Assignment {
    Assignment { leader, leader_epoch, partition_epoch, replicas: replicas.to_vec(), isr: isr.to_vec() }
}

fn log(log_end_offset: i64, durable_end_offset: i64) -> LocalLog {
    LocalLog { log_end_offset, durable_end_offset, first_unstable_offset: None }
}

fn outputs(state: &mut ReplicaState) -> Vec<Output> {
    std::iter::from_fn(|| state.poll_output()).collect()
}

fn single_node(min_insync_replicas: usize, fsync_before_ack: bool) -> ReplicaState {
    let config = config(1, min_insync_replicas, fsync_before_ack);
    ReplicaState::new(config, assignment(1, 0, 0, &[1], &[1]), log(0, 0), 0, 0)
}

#[test]
fn single_node_high_watermark_follows_durable_end_and_acks_complete_from_it() {
    let mut s = single_node(1, true);
    assert!(s.is_leader());
    s.local_log_changed(log(5, 0), 1);
    s.await_ack(7, 5, AckLevel::All, 1);
    assert_eq!(s.high_watermark(), 0, "nothing durable yet");
    assert!(outputs(&mut s).is_empty());
    s.local_log_changed(log(5, 3), 2);
    assert_eq!(outputs(&mut s), vec![Output::HighWatermark(3)]);
    s.local_log_changed(log(5, 5), 3);
    assert_eq!(outputs(&mut s), vec![Output::HighWatermark(5), Output::Completed { request_id: 7, result: Ok(()) }]);
    assert_eq!(s.waiting_count(), 0);
}

#[test]
fn relaxed_flush_policy_counts_the_log_end_offset() {
    let mut s = single_node(1, false);
    s.local_log_changed(log(4, 0), 1);
    s.await_ack(1, 4, AckLevel::All, 1);
    assert_eq!(outputs(&mut s), vec![Output::HighWatermark(4), Output::Completed { request_id: 1, result: Ok(()) }]);
}

#[test]
fn one_replica_with_min_insync_replicas_two_acknowledges_acks_all() {
    // KAFKA-15583: the effective minimum is capped at the replica count.
    let mut s = single_node(2, true);
    assert_eq!(s.effective_min_insync_replicas(), 1);
    assert_eq!(s.check_append(AckLevel::All), Ok(()));
    s.local_log_changed(log(1, 1), 1);
    s.await_ack(3, 1, AckLevel::All, 1);
    assert_eq!(outputs(&mut s), vec![Output::HighWatermark(1), Output::Completed { request_id: 3, result: Ok(()) }]);
}

#[test]
fn acks_all_refused_before_append_when_isr_is_below_min_insync_replicas() {
    let config = config(1, 2, true);
    let s = ReplicaState::new(config, assignment(1, 0, 0, &[1, 2, 3], &[1]), log(0, 0), 0, 0);
    assert_eq!(s.check_append(AckLevel::All), Err(AppendRefused::NotEnoughReplicas { isr: 1, min_isr: 2 }));
    assert_eq!(s.check_append(AckLevel::Leader), Ok(()));
}

#[test]
fn high_watermark_is_the_smallest_durable_end_over_the_isr() {
    let config = config(1, 2, true);
    let mut s = ReplicaState::new(config, assignment(1, 0, 0, &[1, 2, 3], &[1, 2, 3]), log(0, 0), 0, 0);
    s.local_log_changed(log(10, 10), 1);
    s.follower_fetched(2, 10, 8, 1).unwrap();
    assert_eq!(s.high_watermark(), 0, "follower 3 has not fetched");
    s.follower_fetched(3, 9, 9, 2).unwrap();
    assert_eq!(s.high_watermark(), 8, "follower 2 has made only 8 durable");
    s.follower_fetched(2, 10, 10, 3).unwrap();
    assert_eq!(s.high_watermark(), 9);
}

#[test]
fn lagging_follower_is_dropped_from_the_isr_through_alter_partition() {
    let config = config(1, 1, false);
    let mut s = ReplicaState::new(config, assignment(1, 3, 5, &[1, 2], &[1, 2]), log(0, 0), 0, 0);
    s.local_log_changed(log(10, 0), 1);
    s.await_ack(1, 10, AckLevel::All, 1);
    s.tick(LAG_MS);
    assert!(outputs(&mut s).is_empty(), "within the lag window");
    s.tick(LAG_MS + 1);
    let change = IsrChange { leader_epoch: 3, partition_epoch: 5, new_isr: vec![1] };
    assert_eq!(outputs(&mut s), vec![Output::AlterPartition(change)]);
    assert_eq!(s.high_watermark(), 0, "the shrink is not committed yet");
    s.apply_assignment(assignment(1, 3, 6, &[1, 2], &[1]), LAG_MS + 2);
    assert_eq!(outputs(&mut s), vec![Output::HighWatermark(10), Output::Completed { request_id: 1, result: Ok(()) }]);
}

#[test]
fn waiting_acks_all_fails_when_the_isr_falls_below_the_minimum() {
    let config = config(1, 2, true);
    let mut s = ReplicaState::new(config, assignment(1, 0, 0, &[1, 2], &[1, 2]), log(0, 0), 0, 0);
    s.local_log_changed(log(5, 5), 1);
    s.await_ack(9, 5, AckLevel::All, 1);
    s.await_ack(10, 5, AckLevel::Leader, 1);
    assert_eq!(outputs(&mut s), vec![Output::Completed { request_id: 10, result: Ok(()) }]);
    s.apply_assignment(assignment(1, 0, 1, &[1, 2], &[1]), 2);
    assert_eq!(
        outputs(&mut s),
        vec![Output::Completed { request_id: 9, result: Err(ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND) }]
    );
    assert_eq!(s.high_watermark(), 0, "no advance under min ISR");
}

#[test]
fn follower_that_catches_up_is_proposed_for_the_isr() {
    let config = config(1, 1, false);
    let mut s = ReplicaState::new(config, assignment(1, 0, 0, &[1, 2], &[1]), log(0, 0), 0, 0);
    s.local_log_changed(log(4, 0), 1);
    assert_eq!(outputs(&mut s), vec![Output::HighWatermark(4)]);
    s.follower_fetched(2, 3, 3, 2).unwrap();
    assert!(outputs(&mut s).is_empty(), "below the high watermark");
    s.follower_fetched(2, 4, 4, 3).unwrap();
    let change = IsrChange { leader_epoch: 0, partition_epoch: 0, new_isr: vec![1, 2] };
    assert_eq!(outputs(&mut s), vec![Output::AlterPartition(change)]);
    s.local_log_changed(log(6, 0), 4);
    assert_eq!(s.high_watermark(), 4, "the proposed member is waited for at once");
}

#[test]
fn a_fenced_follower_out_of_the_isr_is_not_waited_for_though_it_was_caught_up() {
    // Follower 3 was caught up when its broker died; the controller fenced it and took
    // it out of the ISR. Its last fetch was within the lag window, so as a replica about
    // to join it would hold the high watermark until the window ran out (30 s of stalled
    // acks=all writes). Kafka's `isReplicaIsrEligible` leaves it out.
    let config = config(1, 2, false);
    let mut s = ReplicaState::new(config, assignment(1, 0, 0, &[1, 2, 3], &[1, 2, 3]), log(0, 0), 0, 0);
    s.local_log_changed(log(5, 5), 1);
    s.follower_fetched(2, 5, 5, 2).unwrap();
    s.follower_fetched(3, 5, 5, 2).unwrap();
    assert_eq!(s.high_watermark(), 5);
    s.apply_assignment(assignment(1, 0, 1, &[1, 2, 3], &[1, 2]), 3);
    outputs(&mut s);
    s.local_log_changed(log(8, 8), 4);
    s.await_ack(1, 8, AckLevel::All, 4);
    s.follower_fetched(2, 8, 8, 5).unwrap();
    assert_eq!(s.high_watermark(), 5, "follower 3, caught up 3 ms ago, may still join: waited for");
    assert!(outputs(&mut s).is_empty());
    s.set_ineligible_replicas(vec![3], 6);
    assert_eq!(outputs(&mut s), vec![Output::HighWatermark(8), Output::Completed { request_id: 1, result: Ok(()) }]);
    // Back at the high watermark while still fenced, it is not proposed for the ISR.
    s.follower_fetched(3, 8, 8, 7).unwrap();
    assert!(outputs(&mut s).is_empty(), "a fenced replica is not proposed");
    s.set_ineligible_replicas(Vec::new(), 8);
    s.follower_fetched(3, 8, 8, 9).unwrap();
    let change = IsrChange { leader_epoch: 0, partition_epoch: 1, new_isr: vec![1, 2, 3] };
    assert_eq!(outputs(&mut s), vec![Output::AlterPartition(change)]);
}

#[test]
fn losing_leadership_fails_waiting_requests() {
    let config = config(1, 1, true);
    let mut s = ReplicaState::new(config, assignment(1, 0, 0, &[1, 2], &[1, 2]), log(3, 3), 0, 0);
    s.await_ack(4, 3, AckLevel::All, 1);
    s.apply_assignment(assignment(2, 1, 1, &[1, 2], &[1, 2]), 2);
    assert_eq!(
        outputs(&mut s),
        vec![Output::Completed { request_id: 4, result: Err(ErrorCode::NOT_LEADER_OR_FOLLOWER) }]
    );
    assert_eq!(s.role(), Role::Follower { leader: 2 });
    assert_eq!(s.leader_epoch(), 1);
    assert_eq!(s.check_append(AckLevel::Leader), Err(AppendRefused::NotLeader));
}

#[test]
fn stale_metadata_is_ignored() {
    let config = config(1, 1, true);
    let mut s = ReplicaState::new(config, assignment(1, 4, 7, &[1, 2], &[1, 2]), log(0, 0), 0, 0);
    s.apply_assignment(assignment(2, 3, 9, &[1, 2], &[2]), 1);
    s.apply_assignment(assignment(1, 4, 6, &[1, 2], &[1]), 1);
    assert_eq!((s.leader_epoch(), s.partition_epoch(), s.isr()), (4, 7, &[1, 2][..]));
}

#[test]
fn last_stable_offset_stops_at_the_first_unstable_offset_and_the_high_watermark() {
    let mut s = single_node(1, true);
    s.local_log_changed(LocalLog { log_end_offset: 10, durable_end_offset: 10, first_unstable_offset: Some(4) }, 1);
    assert_eq!(s.snapshot(), Snapshot { leader_epoch: 0, high_watermark: 10, last_stable_offset: 4 });
    s.local_log_changed(LocalLog { log_end_offset: 12, durable_end_offset: 10, first_unstable_offset: None }, 2);
    assert_eq!(s.last_stable_offset(), 10);
}

/// Leader 1 of epoch 2 whose log has epoch 0 on [0, 3) and epoch 2 from 3, all durable.
fn leader_after_an_election() -> ReplicaState {
    let mut s = ReplicaState::new(config(1, 1, true), assignment(1, 2, 4, &[1, 2], &[1, 2]), log(3, 3), 3, 0);
    s.local_log_changed(log(6, 6), 1);
    s.await_ack(9, 5, AckLevel::All, 1);
    outputs(&mut s);
    s
}

fn leader_epochs(epoch: i32) -> (i32, i64) {
    osprey_storage::epoch::LeaderEpochCache::from_entries([(0, 0), (2, 3)]).end_offset_for(epoch, 6)
}

#[test]
fn a_diverging_followers_position_does_not_move_the_high_watermark() {
    // Follower 2 still has offsets 3 and 4 of epoch 0, which the old leader wrote and
    // never committed: its fetch offset 5 is not the leader's offset 5.
    let mut s = leader_after_an_election();
    let fetch = FollowerFetch {
        replica_id: 2,
        current_leader_epoch: 2,
        fetch_offset: 5,
        durable_end_offset: 5,
        last_fetched_epoch: 0,
    };
    let decision = s.follower_fetch(&fetch, 0, leader_epochs, 2);
    assert_eq!(decision, Ok(FetchDecision::Diverging(fetch::EpochEnd { epoch: 0, end_offset: 3 })));
    assert_eq!(s.high_watermark(), 3, "offsets 3 and 4 are not on follower 2");
    assert!(outputs(&mut s).is_empty(), "request 9 is not acknowledged");

    // Truncated to 3, it fetches again: now its position counts.
    let fetch = FollowerFetch { fetch_offset: 3, durable_end_offset: 3, ..fetch };
    assert_eq!(s.follower_fetch(&fetch, 0, leader_epochs, 3), Ok(FetchDecision::Read));
    let fetch = FollowerFetch { fetch_offset: 6, durable_end_offset: 6, last_fetched_epoch: 2, ..fetch };
    assert_eq!(s.follower_fetch(&fetch, 0, leader_epochs, 4), Ok(FetchDecision::Read));
    assert_eq!(outputs(&mut s), vec![Output::HighWatermark(6), Output::Completed { request_id: 9, result: Ok(()) }]);
}

#[test]
fn a_fetch_from_another_leader_epoch_is_refused_before_its_position_counts() {
    let mut s = leader_after_an_election();
    let stale = FollowerFetch {
        replica_id: 2,
        current_leader_epoch: 1,
        fetch_offset: 6,
        durable_end_offset: 6,
        last_fetched_epoch: 2,
    };
    assert_eq!(s.follower_fetch(&stale, 0, leader_epochs, 2), Err(ErrorCode::FENCED_LEADER_EPOCH));
    let newer = FollowerFetch { current_leader_epoch: 3, ..stale };
    assert_eq!(s.follower_fetch(&newer, 0, leader_epochs, 2), Err(ErrorCode::UNKNOWN_LEADER_EPOCH));
    let stranger = FollowerFetch { replica_id: 7, current_leader_epoch: 2, ..stale };
    assert_eq!(s.follower_fetch(&stranger, 0, leader_epochs, 2), Err(ErrorCode::NOT_LEADER_OR_FOLLOWER));
    assert_eq!(s.high_watermark(), 3);
    assert!(outputs(&mut s).is_empty());
}

#[test]
fn metadata_the_leader_already_has_keeps_an_isr_expansion_in_flight() {
    // Leader 1 with ISR [1] at partition epoch 5; follower 2 catches up and is proposed.
    let mut s = ReplicaState::new(config(1, 1, true), assignment(1, 0, 5, &[1, 2], &[1]), log(10, 10), 10, 0);
    s.follower_fetched(2, 10, 10, 1).unwrap();
    let proposal = IsrChange { leader_epoch: 0, partition_epoch: 5, new_isr: vec![1, 2] };
    assert_eq!(outputs(&mut s), vec![Output::AlterPartition(proposal)]);
    s.local_log_changed(log(20, 20), 2);
    assert_eq!(s.high_watermark(), 10, "the high watermark waits for the member being added (KIP-497)");

    // Follower 2 goes quiet; the metadata record of partition epoch 5 (which the
    // AlterPartition answer brought first) arrives late. It is not news: the expansion
    // is still in flight, and the controller may commit it.
    let quiet = 2 + LAG_MS + 1;
    s.apply_assignment(assignment(1, 0, 5, &[1, 2], &[1]), quiet);
    assert_eq!(s.high_watermark(), 10, "still waiting for follower 2");
    s.apply_assignment(assignment(1, 0, 6, &[1, 2], &[1, 2]), quiet + 1);
    assert_eq!(s.isr(), &[1, 2]);
    assert_eq!(s.high_watermark(), 10, "never above an ISR member's end");
}

/// Leader 1 at log end 20, high watermark 10, proposing to add follower 2 (caught up
/// to 10 at time 1) to the ISR at partition epoch 5.
fn leader_with_an_expansion_in_flight() -> (ReplicaState, IsrChange) {
    let mut s = ReplicaState::new(config(1, 1, true), assignment(1, 0, 5, &[1, 2], &[1]), log(10, 10), 10, 0);
    s.follower_fetched(2, 10, 10, 1).unwrap();
    let expansion = IsrChange { leader_epoch: 0, partition_epoch: 5, new_isr: vec![1, 2] };
    assert_eq!(outputs(&mut s), vec![Output::AlterPartition(expansion.clone())]);
    s.local_log_changed(log(20, 20), 2);
    (s, expansion)
}

#[test]
fn refusing_an_older_isr_change_keeps_the_expansion_in_flight() {
    let (mut s, expansion) = leader_with_an_expansion_in_flight();

    // A retry of the shrink to [1] (partition epoch 4), which the controller had
    // already committed, is refused after follower 2 went quiet.
    let quiet = 2 + LAG_MS + 1;
    let shrink = IsrChange { leader_epoch: 0, partition_epoch: 4, new_isr: vec![1] };
    s.isr_change_refused(&shrink, ErrorCode::INELIGIBLE_REPLICA, quiet);
    assert_eq!(s.high_watermark(), 10, "the expansion is still in flight: the high watermark waits for 2");
    s.isr_change_refused(&expansion, ErrorCode::INELIGIBLE_REPLICA, quiet);
    assert_eq!(s.high_watermark(), 20, "not made: follower 2 is not waited for any more");
}

#[test]
fn a_retried_expansion_refused_as_stale_stays_in_flight_until_the_metadata_comes() {
    let (mut s, expansion) = leader_with_an_expansion_in_flight();

    // The first attempt was committed (partition epoch 6) and its answer lost; the
    // retry is refused as stale, while follower 2 is quiet.
    let quiet = 2 + LAG_MS + 1;
    s.isr_change_refused(&expansion, ErrorCode::INVALID_UPDATE_VERSION, quiet);
    assert_eq!(s.high_watermark(), 10, "follower 2 may be in the ISR: still waited for");
    s.apply_assignment(assignment(1, 0, 6, &[1, 2], &[1, 2]), quiet + 1);
    assert_eq!((s.isr(), s.high_watermark()), (&[1, 2][..], 10));
    s.follower_fetched(2, 20, 20, quiet + 2).unwrap();
    assert_eq!(s.high_watermark(), 20);
}

#[test]
fn an_answer_that_moved_the_leader_epoch_waits_for_the_metadata_with_the_new_replicas() {
    // Leader 1 of [1, 3, 2] while a reassignment adds 3 and removes 2; min.insync.replicas 3.
    let mut s = ReplicaState::new(config(1, 3, true), assignment(1, 0, 5, &[1, 3, 2], &[1, 2]), log(10, 10), 10, 0);
    s.follower_fetched(2, 10, 10, 1).unwrap();
    s.follower_fetched(3, 10, 10, 1).unwrap();
    let expansion = IsrChange { leader_epoch: 0, partition_epoch: 5, new_isr: vec![1, 2, 3] };
    assert!(outputs(&mut s).contains(&Output::AlterPartition(expansion)));
    // The expansion completed the reassignment: replicas [1, 3], leader epoch 1. The
    // answer has no replica list; applied, it would keep the old one.
    s.isr_change_accepted(assignment(1, 1, 6, &[1, 3, 2], &[1, 3]), 2);
    assert_eq!((s.leader_epoch(), s.replicas()), (0, &[1, 3, 2][..]), "the answer waits for the metadata");
    s.apply_assignment(assignment(1, 1, 6, &[1, 3], &[1, 3]), 3);
    assert_eq!((s.leader_epoch(), s.replicas(), s.isr()), (1, &[1, 3][..], &[1, 3][..]));
    assert_eq!(s.effective_min_insync_replicas(), 2, "two replicas left");
    // An answer at the same leader epoch is applied at once, as before.
    s.local_log_changed(log(12, 12), 4);
    s.follower_fetched(3, 12, 12, 5).unwrap();
    assert_eq!(s.high_watermark(), 12);
    s.isr_change_accepted(assignment(1, 1, 7, &[1, 3], &[1]), 6);
    assert_eq!(s.isr(), &[1][..]);
}
