//! The server-side assignors of KIP-848: `uniform` (the default) and `range`.
//!
//! An assignor sees every member's subscribed topics (resolved to ids) and its current
//! target assignment, and returns the new target assignment of every member. It is a
//! pure function: the same input gives the same output, which tests and replay rely on.

use super::Assignment;
use osprey_protocol::Uuid;
use std::collections::{BTreeMap, BTreeSet};

/// The assignor names a member may ask for, in the order of `group.consumer.assignors`
/// (the first is the default).
pub const ASSIGNORS: [&str; 2] = ["uniform", "range"];

/// What an assignor knows of one member.
#[derive(Debug, Clone, Default)]
pub struct MemberSpec {
    pub subscribed_topic_ids: BTreeSet<Uuid>,
    /// The member's current target assignment: the uniform assignor keeps what it can.
    pub current: Assignment,
}

/// Runs assignor `name` (one of [`ASSIGNORS`]); `None` for an unknown name.
pub fn assign(
    name: &str,
    members: &BTreeMap<String, MemberSpec>,
    partitions_per_topic: &BTreeMap<Uuid, i32>,
) -> Option<BTreeMap<String, Assignment>> {
    match name {
        "uniform" => Some(uniform(members, partitions_per_topic)),
        "range" => Some(range(members, partitions_per_topic)),
        _ => None,
    }
}

/// The uniform assignor: every partition of a subscribed topic goes to exactly one
/// subscribed member, the members' partition counts differ by at most one when
/// subscriptions are the same (and are evened out as far as subscriptions allow when
/// they differ), and a member keeps the partitions of its current assignment unless
/// balance requires moving them.
pub fn uniform(
    members: &BTreeMap<String, MemberSpec>,
    partitions_per_topic: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    let mut owned: BTreeMap<&str, BTreeSet<(Uuid, i32)>> =
        members.keys().map(|id| (id.as_str(), BTreeSet::new())).collect();
    let mut assigned: BTreeSet<(Uuid, i32)> = BTreeSet::new();
    let all_partitions: Vec<(Uuid, i32)> = partitions_per_topic
        .iter()
        .filter(|(topic, _)| members.values().any(|m| m.subscribed_topic_ids.contains(topic)))
        .flat_map(|(&topic, &n)| (0..n).map(move |p| (topic, p)))
        .collect();
    let total = all_partitions.len();
    // Members that share one subscription can each keep at most ceil(total / members).
    let quota = if members.is_empty() { 0 } else { total.div_ceil(members.len()) };
    // 1. Stickiness: each member keeps the valid partitions of its current assignment,
    //    up to the quota (in partition order, so that the result is deterministic).
    for (id, spec) in members {
        let kept = owned.get_mut(id.as_str()).expect("every member has an entry");
        for (&topic, partitions) in &spec.current {
            if !spec.subscribed_topic_ids.contains(&topic) {
                continue;
            }
            let count = partitions_per_topic.get(&topic).copied().unwrap_or(0);
            for &p in partitions.iter().filter(|&&p| p < count) {
                if kept.len() < quota && assigned.insert((topic, p)) {
                    kept.insert((topic, p));
                }
            }
        }
    }
    // 2. Every partition left goes to the least loaded member subscribed to its topic.
    for tp in all_partitions.iter().filter(|tp| !assigned.contains(tp)) {
        let least = members
            .iter()
            .filter(|(_, spec)| spec.subscribed_topic_ids.contains(&tp.0))
            .min_by_key(|(id, _)| (owned[id.as_str()].len(), id.as_str()))
            .map(|(id, _)| id.as_str());
        if let Some(id) = least {
            owned.get_mut(id).expect("member").insert(*tp);
        }
    }
    // 3. Evening out: move one partition from a member with two or more partitions more
    //    than another that subscribes to its topic, until no such move is left. Every
    //    move lowers the sum of squared counts, so this ends; the bound is a backstop.
    let mut moves_left = total.saturating_mul(members.len().max(1));
    while moves_left > 0 && move_one(members, &mut owned) {
        moves_left -= 1;
    }
    owned.into_iter().map(|(id, tps)| (id.to_string(), to_assignment(tps))).collect()
}

/// One evening-out move of [`uniform`]; false when none is possible.
fn move_one(members: &BTreeMap<String, MemberSpec>, owned: &mut BTreeMap<&str, BTreeSet<(Uuid, i32)>>) -> bool {
    let mut by_load: Vec<(&str, usize)> = owned.iter().map(|(id, tps)| (*id, tps.len())).collect();
    by_load.sort_by_key(|&(id, n)| (n, id));
    for &(over, over_n) in by_load.iter().rev() {
        for &(under, under_n) in &by_load {
            if under_n + 1 >= over_n {
                break;
            }
            let subscribed = &members[under].subscribed_topic_ids;
            // The last partition of the most loaded member: the lowest ones stay put.
            let candidate = owned[over].iter().rev().find(|tp| subscribed.contains(&tp.0)).copied();
            if let Some(tp) = candidate {
                owned.get_mut(over).expect("member").remove(&tp);
                owned.get_mut(under).expect("member").insert(tp);
                return true;
            }
        }
    }
    false
}

/// The range assignor: per topic, the subscribed members in member-id order each get a
/// contiguous range of partitions, the first `partitions % members` one more. Topics with
/// the same partition count and the same subscribers are co-partitioned: a member gets the
/// same partition numbers of each.
pub fn range(
    members: &BTreeMap<String, MemberSpec>,
    partitions_per_topic: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    let mut result: BTreeMap<String, Assignment> = members.keys().map(|id| (id.clone(), Assignment::new())).collect();
    for (&topic, &count) in partitions_per_topic {
        let subscribers: Vec<&String> =
            members.iter().filter(|(_, m)| m.subscribed_topic_ids.contains(&topic)).map(|(id, _)| id).collect();
        if subscribers.is_empty() || count <= 0 {
            continue;
        }
        let n = subscribers.len() as i32;
        let (per_member, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, id) in subscribers.into_iter().enumerate() {
            let take = per_member + i32::from((i as i32) < extra);
            if take > 0 {
                let partitions = result.get_mut(id).expect("member").entry(topic).or_default();
                partitions.extend(next..next + take);
            }
            next += take;
        }
    }
    result
}

fn to_assignment(tps: BTreeSet<(Uuid, i32)>) -> Assignment {
    let mut assignment = Assignment::new();
    for (topic, p) in tps {
        assignment.entry(topic).or_default().insert(p);
    }
    assignment
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn topic(n: u8) -> Uuid {
        Uuid([n; 16])
    }

    fn spec(topics: &[u8], current: &[(u8, &[i32])]) -> MemberSpec {
        MemberSpec {
            subscribed_topic_ids: topics.iter().map(|&t| topic(t)).collect(),
            current: current.iter().map(|&(t, ps)| (topic(t), ps.iter().copied().collect())).collect(),
        }
    }

    fn counts(result: &BTreeMap<String, Assignment>) -> Vec<usize> {
        result.values().map(|a| a.values().map(BTreeSet::len).sum()).collect()
    }

    /// Every partition of a subscribed topic is owned exactly once, by a subscriber.
    fn check_complete(
        members: &BTreeMap<String, MemberSpec>,
        topics: &BTreeMap<Uuid, i32>,
        result: &BTreeMap<String, Assignment>,
    ) {
        let mut seen = BTreeSet::new();
        for (id, assignment) in result {
            for (t, ps) in assignment {
                assert!(members[id].subscribed_topic_ids.contains(t), "{id} got an unsubscribed topic");
                for &p in ps {
                    assert!(p < topics[t]);
                    assert!(seen.insert((*t, p)), "{t}-{p} assigned twice");
                }
            }
        }
        for (t, &n) in topics {
            if members.values().any(|m| m.subscribed_topic_ids.contains(t)) {
                for p in 0..n {
                    assert!(seen.contains(&(*t, p)), "{t}-{p} unassigned");
                }
            }
        }
    }

    #[test]
    fn range_gives_contiguous_co_partitioned_ranges() {
        let members: BTreeMap<String, MemberSpec> =
            [("a".to_string(), spec(&[1, 2], &[])), ("b".to_string(), spec(&[1, 2], &[]))].into();
        let topics = [(topic(1), 3), (topic(2), 3)].into();
        let result = range(&members, &topics);
        assert_eq!(result["a"][&topic(1)], [0, 1].into());
        assert_eq!(result["a"][&topic(2)], [0, 1].into());
        assert_eq!(result["b"][&topic(1)], [2].into());
        assert_eq!(result["b"][&topic(2)], [2].into());
    }

    #[test]
    fn uniform_keeps_partitions_that_need_not_move() {
        let members: BTreeMap<String, MemberSpec> = [
            ("a".to_string(), spec(&[1], &[(1, &[0, 1, 2])])),
            ("b".to_string(), spec(&[1], &[(1, &[3, 4, 5])])),
            ("c".to_string(), spec(&[1], &[])),
        ]
        .into();
        let topics = [(topic(1), 6)].into();
        let result = uniform(&members, &topics);
        check_complete(&members, &topics, &result);
        assert_eq!(counts(&result), vec![2, 2, 2]);
        assert!(result["a"][&topic(1)].is_subset(&[0, 1, 2].into()));
        assert!(result["b"][&topic(1)].is_subset(&[3, 4, 5].into()));
    }

    #[test]
    fn unknown_assignor_is_none() {
        assert!(assign("sticky", &BTreeMap::new(), &BTreeMap::new()).is_none());
    }

    proptest! {
        #[test]
        fn uniform_is_complete_balanced_and_sticky(
            partitions in proptest::collection::vec(1i32..12, 1..4),
            member_count in 1usize..7,
            previous_count in 1usize..7,
        ) {
            let topics: BTreeMap<Uuid, i32> =
                partitions.iter().enumerate().map(|(i, &n)| (topic(i as u8 + 1), n)).collect();
            let all: Vec<u8> = (1..=partitions.len() as u8).collect();
            // A balanced assignment among `previous_count` members, then the group
            // changes to `member_count` members (some leave, some join).
            let before_members: BTreeMap<String, MemberSpec> =
                (0..previous_count).map(|i| (format!("m{i}"), spec(&all, &[]))).collect();
            let before = uniform(&before_members, &topics);
            check_complete(&before_members, &topics, &before);
            let members: BTreeMap<String, MemberSpec> = (0..member_count)
                .map(|i| {
                    let id = format!("m{i}");
                    let current = before.get(&id).cloned().unwrap_or_default();
                    (id, MemberSpec { subscribed_topic_ids: all.iter().map(|&t| topic(t)).collect(), current })
                })
                .collect();
            let after = uniform(&members, &topics);
            check_complete(&members, &topics, &after);
            let c = counts(&after);
            prop_assert!(c.iter().max().unwrap() - c.iter().min().unwrap() <= 1, "unbalanced: {c:?}");
            // Stickiness: a member loses partitions only down to the new quota.
            let total: usize = partitions.iter().map(|&n| n as usize).sum();
            let quota = total.div_ceil(member_count);
            for (id, spec) in &members {
                let kept: usize = spec.current.iter()
                    .map(|(t, ps)| ps.iter().filter(|p| after[id].get(t).is_some_and(|a| a.contains(p))).count())
                    .sum();
                let had: usize = spec.current.values().map(BTreeSet::len).sum();
                prop_assert!(kept >= had.min(quota).saturating_sub(1), "{id} kept {kept} of {had}, quota {quota}");
            }
        }

        #[test]
        fn uniform_with_different_subscriptions_is_complete(
            subscriptions in proptest::collection::vec(proptest::collection::btree_set(1u8..4, 1..3), 1..6),
        ) {
            let topics: BTreeMap<Uuid, i32> = [(topic(1), 5), (topic(2), 3), (topic(3), 7)].into();
            let members: BTreeMap<String, MemberSpec> = subscriptions
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("m{i}"), MemberSpec { subscribed_topic_ids: s.iter().map(|&t| topic(t)).collect(), current: Assignment::new() }))
                .collect();
            let result = uniform(&members, &topics);
            check_complete(&members, &topics, &result);
        }

        #[test]
        fn range_is_complete_and_balanced_per_topic(
            partitions in proptest::collection::vec(1i32..12, 1..4),
            member_count in 1usize..7,
        ) {
            let topics: BTreeMap<Uuid, i32> =
                partitions.iter().enumerate().map(|(i, &n)| (topic(i as u8 + 1), n)).collect();
            let all: Vec<u8> = (1..=partitions.len() as u8).collect();
            let members: BTreeMap<String, MemberSpec> =
                (0..member_count).map(|i| (format!("m{i}"), spec(&all, &[]))).collect();
            let result = range(&members, &topics);
            check_complete(&members, &topics, &result);
            for t in topics.keys() {
                let c: Vec<usize> = result.values().map(|a| a.get(t).map_or(0, BTreeSet::len)).collect();
                prop_assert!(c.iter().max().unwrap() - c.iter().min().unwrap() <= 1);
            }
        }
    }
}
