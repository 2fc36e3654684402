//! Kafka's share-group assignor, `SimpleAssignor` (`SimpleHomogeneousAssignmentBuilder`,
//! `SimpleHeterogeneousAssignmentBuilder`).
//!
//! Every assignable partition goes to `desired_sharing = ceil(members / partitions)`
//! members: with fewer members than partitions each partition has one member and the
//! partitions are spread evenly; with more, a partition is shared by several. Each member
//! wants `ceil(precise * (i + 1)) - ceil(precise * i)` partitions, `precise = sharing *
//! partitions / members`. It is sticky: the current target is kept, then members with
//! too many partitions and partitions shared too widely give some up, then the partitions
//! short of members are handed to the members short of partitions.
//!
//! Homogeneous groups (every member subscribes to the same topics) run this over all
//! their partitions at once; heterogeneous groups run it topic by topic over the members
//! subscribed to the topic. Kafka iterates hash maps keyed by member index and
//! topic-partition, so which member keeps which partition when it must choose depends on
//! hash order there; here members go in member id order and partitions in (topic id,
//! partition) order. The counts and the sharing are Kafka's.
//!
//! One deviation: Kafka's heterogeneous builder keeps a member's current partitions of a
//! topic it no longer subscribes to while others still do (and counts them towards the
//! topic's sharing, though the member will not get them); here they are dropped, as
//! Kafka's homogeneous builder drops them.

use crate::group::consumer::Assignment;
use osprey_protocol::Uuid;
use std::collections::{BTreeMap, BTreeSet};

/// What the assignor knows of a member: the existing topics it subscribes to and its
/// current target.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberSpec {
    pub subscribed_topic_ids: BTreeSet<Uuid>,
    pub current: Assignment,
}

/// The target assignment of every member of `members`. `partitions` are the assignable
/// partitions of each existing subscribed topic; `homogeneous`: every member subscribes
/// to the same topic names (Kafka's `SubscriptionType.HOMOGENEOUS`).
pub fn assign(
    members: &BTreeMap<String, MemberSpec>,
    partitions: &BTreeMap<Uuid, BTreeSet<i32>>,
    homogeneous: bool,
) -> BTreeMap<String, Assignment> {
    let ids: Vec<&String> = members.keys().collect();
    let specs: Vec<&MemberSpec> = members.values().collect();
    let mut result: Vec<BTreeSet<(Uuid, i32)>> = vec![BTreeSet::new(); ids.len()];
    if homogeneous {
        if let Some(first) = specs.first() {
            let targets: Vec<(Uuid, i32)> = first
                .subscribed_topic_ids
                .iter()
                .flat_map(|t| partitions.get(t).into_iter().flatten().map(move |p| (*t, *p)))
                .collect();
            let everyone: Vec<usize> = (0..ids.len()).collect();
            share_out(&targets, &everyone, &specs, &mut result);
        }
    } else {
        let topics: BTreeSet<Uuid> = specs.iter().flat_map(|s| s.subscribed_topic_ids.iter().copied()).collect();
        for topic in topics {
            let targets: Vec<(Uuid, i32)> = partitions.get(&topic).into_iter().flatten().map(|p| (topic, *p)).collect();
            let subscribed: Vec<usize> =
                (0..ids.len()).filter(|i| specs[*i].subscribed_topic_ids.contains(&topic)).collect();
            share_out(&targets, &subscribed, &specs, &mut result);
        }
    }
    ids.into_iter()
        .zip(result)
        .map(|(id, partitions)| {
            let mut assignment = Assignment::new();
            for (topic, partition) in partitions {
                assignment.entry(topic).or_default().insert(partition);
            }
            (id.clone(), assignment)
        })
        .collect()
}

/// One run of Kafka's builder over `targets` and the `members` (indices into `specs`)
/// that may take them; adds each member's share to `result`.
fn share_out(targets: &[(Uuid, i32)], members: &[usize], specs: &[&MemberSpec], result: &mut [BTreeSet<(Uuid, i32)>]) {
    if members.is_empty() {
        return;
    }
    let num_partitions = targets.len();
    let sharing = if num_partitions == 0 { 0 } else { members.len().div_ceil(num_partitions) };
    // Kafka's integer-exact split of sharing * partitions over the members, in doubles.
    let precise = (sharing * num_partitions) as f64 / members.len() as f64;
    let desired: BTreeMap<usize, usize> = members
        .iter()
        .enumerate()
        .map(|(i, m)| (*m, (precise * (i + 1) as f64).ceil() as usize - (precise * i as f64).ceil() as usize))
        .collect();
    let target_set: BTreeSet<(Uuid, i32)> = targets.iter().copied().collect();

    // 1. Keep the current targets that are still assignable.
    let mut by_partition: BTreeMap<(Uuid, i32), BTreeSet<usize>> = BTreeMap::new();
    let mut by_member: BTreeMap<usize, BTreeSet<(Uuid, i32)>> = BTreeMap::new();
    for &m in members {
        for (topic, ps) in &specs[m].current {
            for p in ps {
                if target_set.contains(&(*topic, *p)) {
                    by_partition.entry((*topic, *p)).or_default().insert(m);
                    by_member.entry(m).or_default().insert((*topic, *p));
                }
            }
        }
    }
    // 2. Members with more than they want give up the excess.
    for (&m, owned) in by_member.iter_mut() {
        while owned.len() > desired[&m] {
            let tp = owned.pop_first().expect("not empty");
            by_partition.get_mut(&tp).expect("kept above").remove(&m);
        }
    }
    // 3. Partitions shared more widely than `sharing` lose members.
    for (tp, assigned) in by_partition.iter_mut() {
        while assigned.len() > sharing {
            let m = assigned.pop_first().expect("not empty");
            by_member.get_mut(&m).expect("kept above").remove(tp);
        }
    }
    for tp in targets {
        by_partition.entry(*tp).or_default();
    }
    // 4. Partitions short of members go round the members short of partitions.
    let mut unfilled: Vec<usize> =
        members.iter().copied().filter(|m| by_member.get(m).map_or(0, BTreeSet::len) < desired[m]).collect();
    let mut cursor = 0;
    let mut assigned_this_pass = false;
    for (tp, assigned) in by_partition.iter_mut() {
        let mut to_make = sharing.saturating_sub(assigned.len());
        while to_make > 0 {
            if cursor >= unfilled.len() {
                // Kafka goes round again only if the last pass assigned something: no
                // member left can take this partition (they all have it already).
                if !assigned_this_pass {
                    break;
                }
                cursor = 0;
                assigned_this_pass = false;
                if unfilled.is_empty() {
                    break;
                }
            }
            let m = unfilled[cursor];
            cursor += 1;
            if assigned.insert(m) {
                let owned = by_member.entry(m).or_default();
                owned.insert(*tp);
                to_make -= 1;
                assigned_this_pass = true;
                if owned.len() >= desired[&m] {
                    cursor -= 1;
                    unfilled.remove(cursor);
                }
            }
        }
        if unfilled.is_empty() {
            break;
        }
    }
    for (m, owned) in by_member {
        result[m].extend(owned);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u8) -> Uuid {
        Uuid([n; 16])
    }

    fn spec(topics: &[Uuid], current: &[(Uuid, &[i32])]) -> MemberSpec {
        MemberSpec {
            subscribed_topic_ids: topics.iter().copied().collect(),
            current: current.iter().map(|(t, ps)| (*t, ps.iter().copied().collect())).collect(),
        }
    }

    fn partitions(topics: &[(Uuid, i32)]) -> BTreeMap<Uuid, BTreeSet<i32>> {
        topics.iter().map(|(t, n)| (*t, (0..*n).collect())).collect()
    }

    fn count(result: &BTreeMap<String, Assignment>) -> BTreeMap<(Uuid, i32), usize> {
        let mut counts = BTreeMap::new();
        for a in result.values() {
            for (t, ps) in a {
                for p in ps {
                    *counts.entry((*t, *p)).or_default() += 1;
                }
            }
        }
        counts
    }

    fn sizes(result: &BTreeMap<String, Assignment>) -> Vec<usize> {
        result.values().map(|a| a.values().map(BTreeSet::len).sum()).collect()
    }

    /// Kafka's `testAssignWithTwoMembersAndTwoTopicsHomogeneous`: 5 partitions, 2 members.
    #[test]
    fn two_members_two_topics_spread_every_partition_once() {
        let (t1, t3) = (topic(1), topic(3));
        let members: BTreeMap<String, MemberSpec> =
            [("A", spec(&[t1, t3], &[])), ("B", spec(&[t1, t3], &[]))].map(|(k, v)| (k.to_string(), v)).into();
        let result = assign(&members, &partitions(&[(t1, 3), (t3, 2)]), true);
        assert_eq!(count(&result).len(), 5);
        assert!(count(&result).values().all(|n| *n == 1));
        assert_eq!(sizes(&result), vec![3, 2]);
        // Round robin over the members short of partitions, in partition order.
        assert_eq!(result["A"], [(t1, [0, 2].into()), (t3, [1].into())].into());
        assert_eq!(result["B"], [(t1, [1].into()), (t3, [0].into())].into());
    }

    /// More members than partitions: each partition is shared by ceil(m / p) members.
    #[test]
    fn more_members_than_partitions_share_each_partition() {
        let t = topic(1);
        let members: BTreeMap<String, MemberSpec> = (0..5).map(|i| (format!("m{i}"), spec(&[t], &[]))).collect();
        let result = assign(&members, &partitions(&[(t, 2)]), true);
        // sharing = 3, 6 slots over 5 members: one member gets both partitions.
        assert_eq!(count(&result), [((t, 0), 3), ((t, 1), 3)].into());
        assert_eq!(sizes(&result).iter().sum::<usize>(), 6);
        assert!(sizes(&result).iter().all(|n| (1..=2).contains(n)));
    }

    /// Kafka's `testIncrementalAssignmentIncreasingMembersHomogeneous` and the decreasing
    /// one: 24 partitions, members 1..=101 and back, every partition always assigned, and
    /// a member keeps what it had while its share does not shrink.
    #[test]
    fn members_coming_and_going_keep_every_partition_assigned() {
        let t = topic(1);
        let topics = partitions(&[(t, 24)]);
        let mut members: BTreeMap<String, MemberSpec> = BTreeMap::new();
        let run = |members: &mut BTreeMap<String, MemberSpec>| {
            let result = assign(members, &topics, true);
            let counts = count(&result);
            assert_eq!(counts.len(), 24, "with {} members", members.len());
            let sharing = members.len().div_ceil(24);
            // Kafka's `assertEveryPartitionGetsAssignment`; a partition may fall short of
            // `sharing` when every member short of partitions already has it.
            assert!(counts.values().all(|n| (1..=sharing).contains(n)), "{counts:?}");
            for (id, assignment) in result {
                members.get_mut(&id).unwrap().current = assignment;
            }
        };
        for i in 0..101 {
            members.insert(format!("M{i:03}"), spec(&[t], &[]));
            run(&mut members);
            // Sticky: the same members with their targets as current get the same again.
            let again = assign(&members, &topics, true);
            assert!(again.iter().all(|(id, a)| members[id].current == *a), "not stable with {} members", i + 1);
        }
        for i in (1..101).rev() {
            members.remove(&format!("M{i:03}"));
            run(&mut members);
        }
    }

    /// Kafka's `testAssignWithThreeMembersThreeTopicsHeterogeneous`: A subscribes to
    /// topics 1 and 2, B to 3, C to 2 and 3.
    #[test]
    fn heterogeneous_subscriptions_share_each_topic_among_its_subscribers() {
        let (t1, t2, t3) = (topic(1), topic(2), topic(3));
        let members: BTreeMap<String, MemberSpec> =
            [("A", spec(&[t1, t2], &[])), ("B", spec(&[t3], &[])), ("C", spec(&[t2, t3], &[]))]
                .map(|(k, v)| (k.to_string(), v))
                .into();
        let result = assign(&members, &partitions(&[(t1, 3), (t2, 3), (t3, 2)]), false);
        assert_eq!(count(&result).len(), 8);
        assert!(count(&result).values().all(|n| *n == 1));
        assert_eq!(result["A"][&t1], [0, 1, 2].into());
        assert!(!result["B"].contains_key(&t2) && !result["A"].contains_key(&t3));
        assert_eq!(result["A"][&t2].len() + result["C"][&t2].len(), 3);
    }

    /// Kafka's `testAssignWithOneMemberNoAssignedTopicHeterogeneous`: a member subscribed
    /// to no existing topic gets nothing.
    #[test]
    fn a_member_without_existing_topics_gets_nothing() {
        let (t1, t2) = (topic(1), topic(2));
        let members: BTreeMap<String, MemberSpec> =
            [("A", spec(&[t1, t2], &[])), ("B", spec(&[], &[]))].map(|(k, v)| (k.to_string(), v)).into();
        let result = assign(&members, &partitions(&[(t1, 3), (t2, 2)]), false);
        assert_eq!(result["A"], [(t1, [0, 1, 2].into()), (t2, [0, 1].into())].into());
        assert_eq!(result["B"], Assignment::new());
    }

    #[test]
    fn current_targets_stick_and_unsubscribed_topics_are_dropped() {
        let (t1, t2) = (topic(1), topic(2));
        let members: BTreeMap<String, MemberSpec> =
            [("A", spec(&[t1], &[(t1, &[2, 3]), (t2, &[0])])), ("B", spec(&[t1], &[(t1, &[0, 1])]))]
                .map(|(k, v)| (k.to_string(), v))
                .into();
        let result = assign(&members, &partitions(&[(t1, 4), (t2, 1)]), true);
        assert_eq!(result["A"], [(t1, [2, 3].into())].into());
        assert_eq!(result["B"], [(t1, [0, 1].into())].into());
    }
}
