//! Share sessions (KIP-932), Kafka's `ShareSessionCache`: the share partitions a share
//! consumer fetches from this broker, keyed by group and member, with the epoch its next
//! ShareFetch or ShareAcknowledge must carry.
//!
//! - Epoch 0 opens a session (replacing the member's earlier one) with the request's
//!   partitions; it may not carry acknowledgements (INVALID_REQUEST).
//! - Epoch n > 0 must be the session's (else INVALID_SHARE_SESSION_EPOCH; no session:
//!   SHARE_SESSION_NOT_FOUND); a ShareFetch adds its partitions and drops its forgotten
//!   ones; the epoch moves on (wrapping to 1).
//! - Epoch -1 closes the session after the request: its acknowledgements are applied, it
//!   fetches nothing, and the member's acquired records are released.
//! - A session is also closed when the connection that opened it closes (Kafka 4.1's
//!   disconnect listener), releasing the member's records.
//!
//! Bounds: `group.share.max.share.sessions` sessions (SHARE_SESSION_LIMIT_REACHED when
//! full, as Kafka answers) and [`MAX_PARTITIONS_PER_SESSION`] partitions in one session
//! (INVALID_REQUEST beyond).

use osprey_protocol::{ErrorCode, Uuid};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

/// Partitions one share session may hold: a client controls the number, so it is bounded
/// (Kafka bounds sessions, not their size; this is larger than any topic's partition count
/// a consumer is assigned in practice).
pub const MAX_PARTITIONS_PER_SESSION: usize = 10_000;

/// ShareFetch's `ShareSessionEpoch` that opens a session.
pub const INITIAL_EPOCH: i32 = 0;
/// ShareFetch's and ShareAcknowledge's `ShareSessionEpoch` that closes one.
pub const FINAL_EPOCH: i32 = -1;

/// A share partition: topic id and partition index.
pub type TopicIdPartition = (Uuid, i32);

/// Which connection a session belongs to: its listener and the client's address (unique
/// among open connections of a listener).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnectionKey {
    pub listener: Arc<str>,
    pub peer: SocketAddr,
}

#[derive(Debug)]
struct Session {
    epoch: i32,
    /// In the order they joined the session.
    partitions: Vec<TopicIdPartition>,
    connection: ConnectionKey,
}

/// What a ShareFetch does with its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchContext {
    /// A new session (epoch 0): every partition is answered.
    Full { partitions: Vec<TopicIdPartition> },
    /// The next request of a session: partitions with something to say are answered.
    Incremental { partitions: Vec<TopicIdPartition> },
    /// The session's last request (epoch -1): acknowledgements only, then closed.
    Final,
}

#[derive(Debug, Default)]
pub struct ShareSessions {
    sessions: HashMap<(String, String), Session>,
    by_connection: HashMap<ConnectionKey, (String, String)>,
}

/// Kafka's `ShareRequestMetadata.nextEpoch`.
fn next_epoch(epoch: i32) -> i32 {
    match epoch {
        e if e < 0 => e,
        i32::MAX => 1,
        e => e + 1,
    }
}

/// A session's partitions after a request: `current`, then those of `requested` not in it
/// yet, in order, less `forgotten`. INVALID_REQUEST beyond [`MAX_PARTITIONS_PER_SESSION`],
/// found without looking further: the lists come from the request, so the work is linear
/// in them (with sets) and stops at the bound, whatever a client sends.
fn merged(
    current: &[TopicIdPartition],
    requested: &[TopicIdPartition],
    forgotten: &[TopicIdPartition],
) -> Result<Vec<TopicIdPartition>, ErrorCode> {
    let forgotten: HashSet<&TopicIdPartition> = forgotten.iter().collect();
    let mut seen: HashSet<TopicIdPartition> = HashSet::with_capacity(current.len());
    let mut partitions = Vec::with_capacity(current.len());
    let mut kept = 0;
    for p in current.iter().chain(requested) {
        if !seen.insert(*p) {
            continue;
        }
        partitions.push(*p);
        if !forgotten.contains(p) {
            kept += 1;
            if kept > MAX_PARTITIONS_PER_SESSION {
                return Err(ErrorCode::INVALID_REQUEST);
            }
        }
    }
    partitions.retain(|p| !forgotten.contains(p));
    Ok(partitions)
}

impl ShareSessions {
    /// Opens, advances or ends the member's session for a ShareFetch.
    #[allow(clippy::too_many_arguments)]
    pub fn begin_fetch(
        &mut self,
        group_id: &str,
        member_id: &str,
        epoch: i32,
        requested: &[TopicIdPartition],
        forgotten: &[TopicIdPartition],
        has_acknowledgements: bool,
        connection: ConnectionKey,
        max_sessions: usize,
    ) -> Result<FetchContext, ErrorCode> {
        let key = (group_id.to_string(), member_id.to_string());
        match epoch {
            FINAL_EPOCH => match self.sessions.contains_key(&key) {
                true => Ok(FetchContext::Final),
                false => Err(ErrorCode::SHARE_SESSION_NOT_FOUND),
            },
            INITIAL_EPOCH => {
                if has_acknowledgements {
                    return Err(ErrorCode::INVALID_REQUEST);
                }
                self.remove(&key);
                if self.sessions.len() >= max_sessions {
                    return Err(ErrorCode::SHARE_SESSION_LIMIT_REACHED);
                }
                let partitions = merged(&[], requested, &[])?;
                self.by_connection.insert(connection.clone(), key.clone());
                let session = Session { epoch: next_epoch(INITIAL_EPOCH), partitions: partitions.clone(), connection };
                self.sessions.insert(key, session);
                Ok(FetchContext::Full { partitions })
            }
            _ => {
                let session = self.sessions.get_mut(&key).ok_or(ErrorCode::SHARE_SESSION_NOT_FOUND)?;
                if session.epoch != epoch {
                    return Err(ErrorCode::INVALID_SHARE_SESSION_EPOCH);
                }
                // As Kafka's `ShareSession.update`: the request's partitions join first, then
                // the forgotten ones leave, so a partition named only for its
                // acknowledgements and forgotten in the same request is not fetched (the
                // client would drop what it acquired, and the records would come back only
                // at their lock's expiry, one delivery count further).
                let partitions = merged(&session.partitions, requested, forgotten)?;
                session.partitions = partitions.clone();
                session.epoch = next_epoch(epoch);
                Ok(FetchContext::Incremental { partitions })
            }
        }
    }

    /// Checks and advances the member's session for a ShareAcknowledge: `Ok(true)` when
    /// it is the session's last request (epoch -1).
    pub fn begin_acknowledge(&mut self, group_id: &str, member_id: &str, epoch: i32) -> Result<bool, ErrorCode> {
        if epoch == INITIAL_EPOCH {
            return Err(ErrorCode::INVALID_SHARE_SESSION_EPOCH);
        }
        let key = (group_id.to_string(), member_id.to_string());
        let session = self.sessions.get_mut(&key).ok_or(ErrorCode::SHARE_SESSION_NOT_FOUND)?;
        if epoch == FINAL_EPOCH {
            return Ok(true);
        }
        if session.epoch != epoch {
            return Err(ErrorCode::INVALID_SHARE_SESSION_EPOCH);
        }
        session.epoch = next_epoch(epoch);
        Ok(false)
    }

    /// Closes the member's session (its final request was answered): whether it had one.
    pub fn close(&mut self, group_id: &str, member_id: &str) -> bool {
        self.remove(&(group_id.to_string(), member_id.to_string()))
    }

    /// The session opened on `connection`, closed because the connection closed: its
    /// group and member.
    pub fn disconnected(&mut self, connection: &ConnectionKey) -> Option<(String, String)> {
        let key = self.by_connection.remove(connection)?;
        let session = self.sessions.get(&key)?;
        if session.connection != *connection {
            // The member opened a newer session on another connection since.
            return None;
        }
        self.sessions.remove(&key);
        Some(key)
    }

    /// Whether any member of `group_id` has a session here.
    pub fn group_has_sessions(&self, group_id: &str) -> bool {
        self.sessions.keys().any(|(group, _)| group == group_id)
    }

    /// Open sessions.
    pub fn open_sessions(&self) -> usize {
        self.sessions.len()
    }

    fn remove(&mut self, key: &(String, String)) -> bool {
        match self.sessions.remove(key) {
            Some(session) => {
                if self.by_connection.get(&session.connection) == Some(key) {
                    self.by_connection.remove(&session.connection);
                }
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection(port: u16) -> ConnectionKey {
        ConnectionKey { listener: "PLAINTEXT".into(), peer: SocketAddr::from(([127, 0, 0, 1], port)) }
    }

    const T: Uuid = Uuid([1; 16]);

    #[test]
    fn a_session_opens_at_epoch_0_and_follows_the_epochs() {
        let mut s = ShareSessions::default();
        let opened = s.begin_fetch("g", "m", 0, &[(T, 0), (T, 1)], &[], false, connection(1), 10);
        assert_eq!(opened, Ok(FetchContext::Full { partitions: vec![(T, 0), (T, 1)] }));
        assert_eq!(
            s.begin_fetch("g", "m", 2, &[], &[], false, connection(1), 10),
            Err(ErrorCode::INVALID_SHARE_SESSION_EPOCH)
        );
        let next = s.begin_fetch("g", "m", 1, &[(T, 2)], &[(T, 0)], true, connection(1), 10);
        assert_eq!(next, Ok(FetchContext::Incremental { partitions: vec![(T, 1), (T, 2)] }));
        assert_eq!(s.begin_acknowledge("g", "m", 2), Ok(false));
        assert_eq!(s.begin_acknowledge("g", "m", 2), Err(ErrorCode::INVALID_SHARE_SESSION_EPOCH));
        assert_eq!(s.begin_acknowledge("g", "m", 0), Err(ErrorCode::INVALID_SHARE_SESSION_EPOCH));
        assert_eq!(s.begin_fetch("g", "m", -1, &[], &[], true, connection(1), 10), Ok(FetchContext::Final));
        assert!(s.close("g", "m"));
        assert_eq!(
            s.begin_fetch("g", "m", 3, &[], &[], false, connection(1), 10),
            Err(ErrorCode::SHARE_SESSION_NOT_FOUND)
        );
        assert_eq!(s.begin_acknowledge("g", "m", -1), Err(ErrorCode::SHARE_SESSION_NOT_FOUND));
    }

    /// A partition named (for its acknowledgements) and forgotten in one request leaves the
    /// session: the request's partitions join before the forgotten ones leave, as in Kafka
    /// (franz-go acknowledges a revoked partition so).
    #[test]
    fn a_partition_named_and_forgotten_in_one_request_is_not_fetched() {
        let mut s = ShareSessions::default();
        s.begin_fetch("g", "m", 0, &[(T, 0), (T, 1)], &[], false, connection(1), 10).unwrap();
        let next = s.begin_fetch("g", "m", 1, &[(T, 1), (T, 2)], &[(T, 1), (T, 2)], true, connection(1), 10);
        assert_eq!(next, Ok(FetchContext::Incremental { partitions: vec![(T, 0)] }));
    }

    #[test]
    fn an_opening_fetch_may_not_acknowledge_and_sessions_are_bounded() {
        let mut s = ShareSessions::default();
        assert_eq!(
            s.begin_fetch("g", "m", 0, &[(T, 0)], &[], true, connection(1), 10),
            Err(ErrorCode::INVALID_REQUEST)
        );
        assert!(s.begin_fetch("g", "a", 0, &[(T, 0)], &[], false, connection(1), 1).is_ok());
        assert_eq!(
            s.begin_fetch("g", "b", 0, &[(T, 0)], &[], false, connection(2), 1),
            Err(ErrorCode::SHARE_SESSION_LIMIT_REACHED)
        );
        // Reopening one's own session replaces it, within the bound.
        assert!(s.begin_fetch("g", "a", 0, &[(T, 0)], &[], false, connection(1), 1).is_ok());
        let many: Vec<TopicIdPartition> = (0..=MAX_PARTITIONS_PER_SESSION as i32).map(|p| (T, p)).collect();
        assert_eq!(s.begin_fetch("g", "a", 0, &many, &[], false, connection(1), 1), Err(ErrorCode::INVALID_REQUEST));
    }

    /// The bound counts the partitions a session would hold: duplicates once, forgotten
    /// ones not; a request beyond it leaves the session as it was.
    #[test]
    fn an_incremental_request_is_bounded_by_the_partitions_the_session_would_hold() {
        let mut s = ShareSessions::default();
        let first: Vec<TopicIdPartition> = (0..MAX_PARTITIONS_PER_SESSION as i32 - 1).map(|p| (T, p)).collect();
        s.begin_fetch("g", "m", 0, &first, &[], false, connection(1), 10).unwrap();
        // One more, named twice, and a new one whose place a forgotten partition frees.
        let added = [(T, -1), (T, -1), (T, -2)];
        let next = s.begin_fetch("g", "m", 1, &added, &[(T, 0)], false, connection(1), 10).unwrap();
        let FetchContext::Incremental { partitions } = next else { panic!("{next:?}") };
        assert_eq!(partitions.len(), MAX_PARTITIONS_PER_SESSION);
        assert_eq!(partitions[partitions.len() - 2..], [(T, -1), (T, -2)]);
        assert_eq!(
            s.begin_fetch("g", "m", 2, &[(T, -3)], &[], false, connection(1), 10),
            Err(ErrorCode::INVALID_REQUEST)
        );
        // Refused, the request changed nothing: the same epoch goes on with the same partitions.
        let again = s.begin_fetch("g", "m", 2, &[], &[], false, connection(1), 10).unwrap();
        assert_eq!(again, FetchContext::Incremental { partitions });
    }

    #[test]
    fn a_closed_connection_closes_its_session_but_not_a_newer_one_elsewhere() {
        let mut s = ShareSessions::default();
        s.begin_fetch("g", "m", 0, &[(T, 0)], &[], false, connection(1), 10).unwrap();
        assert_eq!(s.disconnected(&connection(1)), Some(("g".into(), "m".into())));
        assert_eq!(s.open_sessions(), 0);
        s.begin_fetch("g", "m", 0, &[(T, 0)], &[], false, connection(1), 10).unwrap();
        s.begin_fetch("g", "m", 0, &[(T, 0)], &[], false, connection(2), 10).unwrap();
        assert_eq!(s.disconnected(&connection(1)), None);
        assert_eq!(s.open_sessions(), 1);
        assert_eq!(s.disconnected(&connection(2)), Some(("g".into(), "m".into())));
    }
}
