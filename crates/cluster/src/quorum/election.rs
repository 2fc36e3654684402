//! When a member stands for election. openraft decides who wins and keeps every safety
//! rule (votes, terms, log checks, the leader lease); this decides only *when* a member
//! asks it to campaign (`Raft::trigger().elect()`), with openraft's own election timer
//! off.
//!
//! Why not openraft's timer: it draws one election timeout per process and checks it on
//! a tick of 1.5 heartbeat intervals. Two members whose draws fall in the same tick
//! stand together after a leader dies, split the vote, and, with the same draws, tend to
//! split it again: a killed active controller was replaced after 3.5 s where Kafka takes
//! 2. Here every wait is drawn afresh, as Kafka's KRaft does:
//! - after the last message from a leader (an AppendEntries or snapshot it accepted, or
//!   a vote it granted), a member stands once a random time between 3/4 of
//!   `controller.quorum.fetch.timeout.ms` and all of it has passed in silence;
//! - after standing, it stands again if no leader appeared within a random time between
//!   half of `controller.quorum.election.timeout.ms` and all of it.
//!
//! The leader lease (openraft's largest election timeout, half the fetch timeout, see
//! `QuorumConfig::openraft_config`) is shorter than the first wait, so the other voters
//! grant a vote to a member that stands after a leader's silence.

use super::runtime::QuorumRuntime;
use super::types::QuorumTypes;
use openraft::{AsyncRuntime, Raft, ServerState};
use rand_core::RngCore;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// What the member last heard, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    /// A leader (or a candidate it voted for): wait the fetch timeout.
    Leader(Instant),
    /// Its own campaign: wait the election timeout.
    OwnCampaign(Instant),
}

/// Shared between the RPC handler (which reports a leader's messages) and the task
/// that stands for election.
#[derive(Debug)]
pub struct ElectionTimer {
    heard: Mutex<Heard>,
    fetch_timeout: Duration,
    election_timeout: Duration,
}

impl ElectionTimer {
    pub fn new(fetch_timeout_ms: u64, election_timeout_ms: u64) -> Arc<ElectionTimer> {
        Arc::new(ElectionTimer {
            heard: Mutex::new(Heard::Leader(Instant::now())),
            fetch_timeout: Duration::from_millis(fetch_timeout_ms.max(4)),
            election_timeout: Duration::from_millis(election_timeout_ms.max(2)),
        })
    }

    /// A leader's message was accepted, or this member granted its vote.
    pub fn heard_from_leader(&self) {
        *self.heard.lock().unwrap_or_else(|p| p.into_inner()) = Heard::Leader(Instant::now());
    }

    fn campaigned(&self) {
        *self.heard.lock().unwrap_or_else(|p| p.into_inner()) = Heard::OwnCampaign(Instant::now());
    }

    fn last(&self) -> Heard {
        *self.heard.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// When to stand if nothing else is heard: a fresh draw for this period.
    fn deadline(&self, heard: Heard) -> Instant {
        let (since, low, high) = match heard {
            Heard::Leader(at) => (at, self.fetch_timeout * 3 / 4, self.fetch_timeout),
            Heard::OwnCampaign(at) => (at, self.election_timeout / 2, self.election_timeout),
        };
        since + random_between(low, high)
    }
}

/// A uniformly drawn duration in `[low, high]`, from the quorum's generator (seeded in
/// the simulation, so a seed replays).
fn random_between(low: Duration, high: Duration) -> Duration {
    let span = high.saturating_sub(low).as_micros() as u64;
    let offset = if span == 0 { 0 } else { QuorumRuntime::thread_rng().next_u64() % (span + 1) };
    low + Duration::from_micros(offset)
}

/// Stands for election whenever the timer runs out; ends when openraft stops.
pub async fn stand_when_leader_silent(raft: Raft<QuorumTypes>, timer: Arc<ElectionTimer>) {
    loop {
        let heard = timer.last();
        tokio::time::sleep_until(timer.deadline(heard)).await;
        if timer.last() != heard {
            continue;
        }
        let (leading, voter) = {
            let metrics = raft.metrics();
            let m = metrics.borrow();
            let voter = m.membership_config.membership().voter_ids().any(|v| v == m.id);
            (m.state == ServerState::Leader, voter)
        };
        if leading || !voter {
            // Nothing to stand for: look again after another period.
            timer.heard_from_leader();
            continue;
        }
        if raft.trigger().elect().await.is_err() {
            return;
        }
        timer.campaigned();
    }
}
