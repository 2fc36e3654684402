//! Moving one member from its current assignment towards its target: Kafka's
//! `CurrentAssignmentBuilder`.
//!
//! A member is only given partitions no other member still owns, keeps its epoch until it
//! has revoked the partitions moving away (UNREVOKED_PARTITIONS), and waits at the target
//! epoch for partitions others have not released yet (UNRELEASED_PARTITIONS).

use super::{Assignment, ConsumerMember, MemberState};
use osprey_protocol::Uuid;
use std::collections::BTreeSet;

/// The next state of `member` given the target `(target_epoch, target)`, the partitions
/// it reports owning (`None`: not reported in this heartbeat), and `owned_by_other`:
/// whether another member still owns a partition (assigned or pending revocation).
pub(super) fn reconcile(
    member: &ConsumerMember,
    target_epoch: i32,
    target: &Assignment,
    reported_owned: Option<&Assignment>,
    owned_by_other: &dyn Fn(Uuid, i32) -> bool,
) -> ConsumerMember {
    match member.state {
        MemberState::Stable if member.member_epoch == target_epoch => member.clone(),
        MemberState::Stable | MemberState::UnreleasedPartitions => {
            next_assignment(member, member.member_epoch, target_epoch, target, owned_by_other)
        }
        MemberState::UnrevokedPartitions => {
            // The partitions count as revoked once the member no longer reports them.
            let still_owns = match reported_owned {
                None => true,
                Some(owned) => overlaps(owned, &member.partitions_pending_revocation),
            };
            if still_owns {
                member.clone()
            } else {
                next_assignment(member, member.member_epoch, target_epoch, target, owned_by_other)
            }
        }
    }
}

fn next_assignment(
    member: &ConsumerMember,
    member_epoch: i32,
    target_epoch: i32,
    target: &Assignment,
    owned_by_other: &dyn Fn(Uuid, i32) -> bool,
) -> ConsumerMember {
    let mut has_unreleased = false;
    let mut assigned = Assignment::new();
    let mut pending_revocation = Assignment::new();
    let mut pending_assignment = Assignment::new();
    let topics: BTreeSet<Uuid> = target.keys().chain(member.assigned_partitions.keys()).copied().collect();
    let empty = BTreeSet::new();
    for topic in topics {
        let wanted = target.get(&topic).unwrap_or(&empty);
        let current = member.assigned_partitions.get(&topic).unwrap_or(&empty);
        let kept: BTreeSet<i32> = current.intersection(wanted).copied().collect();
        let revoke: BTreeSet<i32> = current.difference(&kept).copied().collect();
        let mut to_assign: BTreeSet<i32> = wanted.difference(&kept).copied().collect();
        let before = to_assign.len();
        to_assign.retain(|&p| !owned_by_other(topic, p));
        has_unreleased |= to_assign.len() != before;
        if !kept.is_empty() {
            assigned.insert(topic, kept);
        }
        if !revoke.is_empty() {
            pending_revocation.insert(topic, revoke);
        }
        if !to_assign.is_empty() {
            pending_assignment.insert(topic, to_assign);
        }
    }
    let mut next = member.clone();
    if !pending_revocation.is_empty() {
        // Revoke first; the epoch stays until the member acknowledges the revocation.
        next.state = MemberState::UnrevokedPartitions;
        next.set_epoch(member_epoch);
        next.assigned_partitions = assigned;
        next.partitions_pending_revocation = pending_revocation;
        return next;
    }
    for (topic, partitions) in pending_assignment {
        assigned.entry(topic).or_default().extend(partitions);
    }
    next.state = if has_unreleased { MemberState::UnreleasedPartitions } else { MemberState::Stable };
    next.set_epoch(target_epoch);
    next.assigned_partitions = assigned;
    next.partitions_pending_revocation = Assignment::new();
    next
}

fn overlaps(a: &Assignment, b: &Assignment) -> bool {
    a.iter().any(|(topic, ps)| b.get(topic).is_some_and(|other| !ps.is_disjoint(other)))
}
