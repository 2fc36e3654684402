//! What the active controller does for the configured voters (DESIGN.md, "Bootstrap
//! without a format step" and "A voter that lost its disk"):
//! - the cluster id: a new quorum's first leader commits a `ClusterId` record (the id
//!   `meta.properties` was formatted with, else a new random one);
//! - a configured voter heard from (Hello) under a replica key that is not a voter is
//!   added as a learner, and once caught up made a voter: in place of its old key if it
//!   came back with a new directory id (a joint membership change, KIP-853's
//!   remove-voter and add-voter), else in addition (a voter that started late).

use super::bootstrap::HELLO_INTERVAL;
use super::NodeState;
use osprey_cluster::image::MetadataRecord;
use osprey_cluster::quorum::{ControllerEndpoint, ReplicaKey};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often the leader looks at the configured voters.
const LEADER_TICK: Duration = Duration::from_millis(200);
/// A Hello older than this is not acted on: a node that is not a voter says Hello every
/// [`HELLO_INTERVAL`], so an old one may be from a replica that is gone.
const HELLO_FRESH: Duration = Duration::from_secs(5);
/// A learner this few entries behind the leader is caught up enough to become a voter.
const CAUGHT_UP_ENTRIES: u64 = 16;

/// Runs the leader's duties whenever this node leads, until `stopped`.
pub async fn lead(
    node: Arc<NodeState>,
    voters: Vec<(i32, ControllerEndpoint)>,
    formatted_cluster_id: Option<String>,
    mut stopped: watch::Receiver<bool>,
) {
    debug_assert!(HELLO_FRESH > HELLO_INTERVAL * 4);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(LEADER_TICK) => {}
            _ = stopped.changed() => return,
        }
        if !node.quorum.is_leader() {
            continue;
        }
        if node.quorum.with_applied(|a| a.image.cluster_id.is_none()) {
            commit_cluster_id(&node, formatted_cluster_id.clone()).await;
        }
        for (node_id, endpoint) in &voters {
            // The endpoint is the configured one, not the Hello's: a Hello cannot send
            // the quorum's traffic elsewhere.
            if let Some(hello) = node.recent_hellos(HELLO_FRESH).remove(node_id) {
                make_voter(&node, hello.replica, endpoint.clone()).await;
            }
        }
    }
}

async fn commit_cluster_id(node: &NodeState, formatted: Option<String>) {
    let id = match formatted {
        Some(id) => id,
        None => match osprey_cluster::meta_properties::random_uuid() {
            Ok(id) => id.to_string(),
            Err(e) => return tracing::warn!(error = %e, "cannot make a cluster id"),
        },
    };
    match node.quorum.propose(vec![MetadataRecord::ClusterId { id: id.clone() }]).await {
        Ok(_) => tracing::info!(cluster_id = %id, "committed the cluster id"),
        Err(e) => tracing::debug!(error = %e, "cluster id not committed; retrying"),
    }
}

/// Brings `replica` of a configured voter in as a voter, one step per call.
async fn make_voter(node: &NodeState, replica: ReplicaKey, endpoint: ControllerEndpoint) {
    let quorum = &node.quorum;
    // The voters of every configuration: during a joint one, the old key of this node
    // is still among them.
    let voters = quorum.voters();
    let old = voters.iter().copied().find(|k| k.node_id == replica.node_id && *k != replica);
    if voters.contains(&replica) {
        if let Some(old) = old {
            // A replacement whose joint configuration was committed but whose final one
            // was not (its leader stopped in between): finish it, or the old key stays a
            // voter of the old configuration, which then needs it for a majority.
            tracing::info!(%old, new = %replica, "finishing a quorum voter replacement left in a joint configuration");
            if let Err(e) = quorum.replace_voter(old, replica).await {
                tracing::warn!(%old, new = %replica, error = %e, "cannot finish the voter replacement");
            }
        }
        return;
    }
    if !quorum.members().contains_key(&replica) {
        tracing::info!(%replica, %endpoint, "adding a configured voter as a learner");
        if let Err(e) = quorum.add_learner(replica, endpoint).await {
            tracing::warn!(%replica, error = %e, "cannot add the learner");
        }
        return;
    }
    match quorum.replication_lag(replica) {
        Some(lag) if lag <= CAUGHT_UP_ENTRIES => {}
        _ => return,
    }
    match old {
        Some(old) => match quorum.replace_voter(old, replica).await {
            Ok(()) => {
                tracing::warn!(
                    %old, new = %replica,
                    "replaced a quorum voter: node {} came back with a new metadata directory id",
                    replica.node_id
                );
                crate::telemetry::quorum_voter_replaced();
            }
            Err(e) => tracing::warn!(%old, new = %replica, error = %e, "cannot replace the voter"),
        },
        None => {
            let mut next = voters;
            next.insert(replica);
            match quorum.change_voters(next).await {
                Ok(()) => tracing::info!(%replica, "a configured voter joined the quorum"),
                Err(e) => tracing::warn!(%replica, error = %e, "cannot make the learner a voter"),
            }
        }
    }
}
