//! TxnOffsetCommit into a KIP-848 consumer group: checked against the member epoch as
//! Kafka's `ConsumerGroup.validateOffsetCommit` does for transactional commits.

mod group_consumer_support;

use group_consumer_support::{Client, Harness, GROUP};
use osprey_coordinator::group::{partition_for, Response};
use osprey_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use osprey_protocol::messages::TxnOffsetCommitRequest;
use osprey_protocol::ErrorCode;

fn txn_commit(h: &mut Harness, member_id: &str, epoch: i32, offset: i64) -> i16 {
    let request = TxnOffsetCommitRequest {
        transactional_id: "tx".into(),
        group_id: GROUP.into(),
        producer_id: 9,
        producer_epoch: 0,
        generation_id: epoch,
        member_id: member_id.into(),
        topics: vec![TxnOffsetCommitRequestTopic {
            name: "t1".into(),
            partitions: vec![TxnOffsetCommitRequestPartition {
                partition_index: 0,
                committed_offset: offset,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    match h.call(|c, reply, now| c.txn_commit_offsets(&request, 5, reply, now)) {
        Some(Response::TxnOffsetCommit(r)) => r.topics[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    }
}

fn committed(h: &Harness) -> i64 {
    h.coordinator.fetch_offsets(GROUP, None, false).topics.first().map_or(-1, |t| t.partitions[0].committed_offset)
}

#[test]
fn txn_commits_are_checked_against_the_member_epoch() {
    let mut h = Harness::new();
    let mut a = Client::new("member-a-0000000000001", &["t1"]);
    h.heartbeat(&mut a);
    let member = a.member_id.clone();
    let illegal = ErrorCode::ILLEGAL_GENERATION.code();
    // TxnOffsetCommit turns STALE_MEMBER_EPOCH into ILLEGAL_GENERATION.
    assert_eq!(txn_commit(&mut h, &member, a.epoch + 1, 10), illegal);
    assert_eq!(txn_commit(&mut h, &member, a.epoch - 1, 10), illegal);
    assert_eq!(txn_commit(&mut h, "someone-else", a.epoch, 10), ErrorCode::UNKNOWN_MEMBER_ID.code());
    // Naming nobody is accepted even while the group has members.
    assert_eq!(txn_commit(&mut h, "", -1, 10), 0);
    assert_eq!(txn_commit(&mut h, &member, a.epoch, 42), 0);
    assert_eq!(committed(&h), -1, "pending until the transaction commits");
    h.coordinator.complete_txn(9, true, partition_for(GROUP, 50), 50, h.now);
    h.coordinator.check_invariants().unwrap();
    assert_eq!(committed(&h), 42);
}
