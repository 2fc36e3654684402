//! Bootstrap without a format step (DESIGN.md, "Bootstrap without a format step"), as a
//! pure function: every voter sends the others a [`Hello`]; the lowest-numbered
//! configured voter initializes the quorum once a majority of the configured voters
//! answered and none of them (itself included) belongs to a cluster already.
//!
//! What this cannot prevent: if the nodes that hold an initialized cluster are all down
//! or have lost their disks while a majority of fresh disks answers, a second cluster is
//! initialized (as `kafka-storage.sh format` run again would). `meta.properties` with its
//! cluster id on the surviving disks then refuses to mix them.
//!
//! Nor does it recover on its own when the initializer loses its disk before its first
//! entry (the membership) reached any other voter: the others hold a vote and no log, so
//! they report quorum state and nobody initializes again, while nobody has a membership
//! to elect a leader with. Re-initializing there would be safe only if no voter that did
//! not answer holds that entry; deciding so is left to an operator (wipe the voters'
//! `__cluster_metadata-0`), not guessed.

use super::types::{ControllerEndpoint, ReplicaKey};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What a voter tells the others at start-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub replica: ReplicaKey,
    pub endpoint: ControllerEndpoint,
    /// The cluster this node's `meta.properties` names, if any.
    pub cluster_id: Option<String>,
    /// Whether the node holds quorum state (a vote or log entries): it is part of a
    /// cluster even before it learned the cluster id.
    pub has_quorum_state: bool,
}

impl Hello {
    fn belongs_to_a_cluster(&self) -> bool {
        self.cluster_id.is_some() || self.has_quorum_state
    }
}

/// What a voter does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootstrapDecision {
    /// Fewer than a majority of the configured voters answered: ask again later.
    Wait { answered: usize, needed: usize },
    /// This node initializes the quorum with these voters (openraft `initialize`).
    Initialize(BTreeMap<ReplicaKey, ControllerEndpoint>),
    /// A cluster exists (this node or another belongs to one): never initialize; its
    /// leader replicates to this node or adds it.
    JoinExisting { cluster_id: Option<String> },
    /// A majority answered and no cluster exists, but the lowest-numbered voter
    /// initializes, not this node: wait for its leader.
    WaitForInitializer { node_id: i32 },
}

/// Decides from this node's own [`Hello`], the configured voters' node ids
/// (`controller.quorum.voters`) and the answers received so far. Answers from nodes that
/// are not configured voters are ignored; of several from one node id the last counts.
pub fn decide_bootstrap(me: &Hello, configured_voters: &BTreeSet<i32>, answers: &[Hello]) -> BootstrapDecision {
    if std::iter::once(me).chain(answers).any(Hello::belongs_to_a_cluster) {
        let cluster_id = std::iter::once(me).chain(answers).find_map(|h| h.cluster_id.clone());
        return BootstrapDecision::JoinExisting { cluster_id };
    }
    let mut answered: BTreeMap<i32, &Hello> = BTreeMap::new();
    for hello in answers.iter().chain(std::iter::once(me)) {
        if configured_voters.contains(&hello.replica.node_id) {
            answered.insert(hello.replica.node_id, hello);
        }
    }
    let needed = configured_voters.len() / 2 + 1;
    if answered.len() < needed {
        return BootstrapDecision::Wait { answered: answered.len(), needed };
    }
    match configured_voters.first() {
        Some(lowest) if *lowest == me.replica.node_id => {
            BootstrapDecision::Initialize(answered.values().map(|h| (h.replica, h.endpoint.clone())).collect())
        }
        Some(lowest) => BootstrapDecision::WaitForInitializer { node_id: *lowest },
        None => BootstrapDecision::Wait { answered: 0, needed },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(node: i32) -> Hello {
        Hello {
            replica: ReplicaKey::new(node, [node as u8; 16]),
            endpoint: ControllerEndpoint::new("127.0.0.1", 9000 + node as u16),
            cluster_id: None,
            has_quorum_state: false,
        }
    }

    fn voters(ids: &[i32]) -> BTreeSet<i32> {
        ids.iter().copied().collect()
    }

    #[test]
    fn lowest_voter_initializes_once_a_majority_answered() {
        let v = voters(&[1, 2, 3]);
        assert_eq!(decide_bootstrap(&hello(1), &v, &[]), BootstrapDecision::Wait { answered: 1, needed: 2 });
        match decide_bootstrap(&hello(1), &v, &[hello(3)]) {
            BootstrapDecision::Initialize(members) => {
                assert_eq!(members.keys().map(|k| k.node_id).collect::<Vec<_>>(), [1, 3]);
                assert_eq!(members[&hello(3).replica].port, 9003);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_voters_wait_for_the_lowest() {
        let v = voters(&[1, 2, 3]);
        assert_eq!(decide_bootstrap(&hello(2), &v, &[hello(3)]), BootstrapDecision::WaitForInitializer { node_id: 1 });
        assert_eq!(decide_bootstrap(&hello(3), &v, &[]), BootstrapDecision::Wait { answered: 1, needed: 2 });
    }

    #[test]
    fn nobody_initializes_when_any_node_belongs_to_a_cluster() {
        let v = voters(&[1, 2, 3]);
        let mut old = hello(2);
        old.has_quorum_state = true;
        assert_eq!(
            decide_bootstrap(&hello(1), &v, &[old, hello(3)]),
            BootstrapDecision::JoinExisting { cluster_id: None }
        );
        let mut named = hello(3);
        named.cluster_id = Some("abc".into());
        assert_eq!(
            decide_bootstrap(&hello(1), &v, &[hello(2), named]),
            BootstrapDecision::JoinExisting { cluster_id: Some("abc".into()) }
        );
        let mut me = hello(1);
        me.has_quorum_state = true;
        assert!(matches!(decide_bootstrap(&me, &v, &[hello(2), hello(3)]), BootstrapDecision::JoinExisting { .. }));
    }

    #[test]
    fn answers_from_unconfigured_nodes_do_not_make_a_majority() {
        let v = voters(&[1, 2, 3, 4, 5]);
        let strangers = [hello(7), hello(8), hello(9)];
        assert_eq!(decide_bootstrap(&hello(1), &v, &strangers), BootstrapDecision::Wait { answered: 1, needed: 3 });
        // A node answering twice counts once.
        assert_eq!(
            decide_bootstrap(&hello(1), &v, &[hello(2), hello(2)]),
            BootstrapDecision::Wait { answered: 2, needed: 3 }
        );
        assert!(
            matches!(decide_bootstrap(&hello(1), &v, &[hello(2), hello(5)]), BootstrapDecision::Initialize(m) if m.len() == 3)
        );
    }

    #[test]
    fn a_node_that_is_not_a_configured_voter_never_initializes() {
        let v = voters(&[1, 2, 3]);
        let d = decide_bootstrap(&hello(9), &v, &[hello(1), hello(2), hello(3)]);
        assert_eq!(d, BootstrapDecision::WaitForInitializer { node_id: 1 });
    }
}
