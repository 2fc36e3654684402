//! What the leader knows of each follower's replication, for DescribeQuorum: Kafka
//! reports a follower's last fetch and the last time it was caught up; openraft's
//! metrics hold only the matched log position, so the transport records every
//! AppendEntries a follower accepted.

use openraft::RaftMetrics;
use osprey_cluster::quorum::{ControllerEndpoint, ReplicaKey};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// A follower as the leader last heard from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// When it last accepted an AppendEntries (Kafka's last fetch), in ms since the epoch.
    pub last_fetch_ms: i64,
    /// When it last accepted one that brought it to the leader's log end, if ever.
    pub last_caught_up_ms: Option<i64>,
}

/// Every follower's [`Progress`], by replica key.
#[derive(Default)]
pub struct FollowerProgress {
    followers: Mutex<HashMap<ReplicaKey, Progress>>,
    /// The quorum's metrics, once it started: the leader's log end at each record.
    metrics: OnceLock<watch::Receiver<RaftMetrics<ReplicaKey, ControllerEndpoint>>>,
}

impl std::fmt::Debug for FollowerProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FollowerProgress").finish_non_exhaustive()
    }
}

impl FollowerProgress {
    /// Gives the tracker the quorum's metrics (once it started).
    pub fn watch(&self, metrics: watch::Receiver<RaftMetrics<ReplicaKey, ControllerEndpoint>>) {
        let _ = self.metrics.set(metrics);
    }

    /// `follower` accepted entries up to (not including) `end`.
    pub fn fetched(&self, follower: ReplicaKey, end: u64) {
        let now = now_ms();
        let leader_end = self.metrics.get().map(|m| m.borrow().last_log_index.map_or(0, |i| i + 1));
        let mut followers = self.followers.lock().unwrap_or_else(|e| e.into_inner());
        let entry = followers.entry(follower).or_insert(Progress { last_fetch_ms: now, last_caught_up_ms: None });
        entry.last_fetch_ms = now;
        if leader_end.is_some_and(|leader_end| end >= leader_end) {
            entry.last_caught_up_ms = Some(now);
        }
    }

    /// What is known of `follower`.
    pub fn get(&self, follower: ReplicaKey) -> Option<Progress> {
        self.followers.lock().unwrap_or_else(|e| e.into_inner()).get(&follower).copied()
    }
}

/// Wall-clock milliseconds since the epoch, as Kafka's timestamps.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
