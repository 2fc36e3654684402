//! Broker liveness on the active controller (Kafka's `BrokerHeartbeatManager`), sans-I/O:
//! every input carries `now_ms`, and nothing here is written to the metadata log.
//!
//! It keeps what the log does not: when each broker last heartbeated, the metadata
//! offset it last reported, and the offset a controlled shutdown waits for. Whether a
//! broker is fenced or in controlled shutdown is the image's fact, read from there (one
//! owner per fact).

use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct BrokerHeartbeatManager {
    session_timeout_ms: i64,
    brokers: BTreeMap<i32, Session>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Session {
    epoch: i64,
    last_contact_ms: i64,
    /// The highest metadata offset the broker reported; -1 before its first heartbeat.
    metadata_offset: i64,
    /// Set when the broker entered controlled shutdown: the offset of the last record
    /// that moved its leaderships away. It may shut down once every active broker has
    /// applied that far.
    controlled_shutdown_offset: Option<i64>,
}

impl BrokerHeartbeatManager {
    pub fn new(session_timeout_ms: i64) -> BrokerHeartbeatManager {
        BrokerHeartbeatManager { session_timeout_ms: session_timeout_ms.max(1), brokers: BTreeMap::new() }
    }

    pub fn session_timeout_ms(&self) -> i64 {
        self.session_timeout_ms
    }

    /// A broker (re)registered at `epoch`: a fresh session, no metadata offset yet.
    pub fn register(&mut self, id: i32, epoch: i64, now_ms: i64) {
        let metadata_offset = match self.brokers.get(&id) {
            Some(s) if s.epoch == epoch => s.metadata_offset,
            _ => -1,
        };
        self.brokers
            .insert(id, Session { epoch, last_contact_ms: now_ms, metadata_offset, controlled_shutdown_offset: None });
    }

    /// A heartbeat arrived from the broker at `epoch`.
    pub fn touch(&mut self, id: i32, epoch: i64, now_ms: i64, metadata_offset: i64) {
        let session = self.brokers.entry(id).or_insert(Session {
            epoch,
            last_contact_ms: now_ms,
            metadata_offset: -1,
            controlled_shutdown_offset: None,
        });
        if session.epoch != epoch {
            *session =
                Session { epoch, last_contact_ms: now_ms, metadata_offset: -1, controlled_shutdown_offset: None };
        }
        session.last_contact_ms = session.last_contact_ms.max(now_ms);
        session.metadata_offset = session.metadata_offset.max(metadata_offset);
    }

    /// The broker was unregistered: forget it.
    pub fn remove(&mut self, id: i32) {
        self.brokers.remove(&id);
    }

    /// Kafka's `hasValidSession`: unfenced and heard from within the session timeout.
    pub fn has_valid_session(&self, id: i32, epoch: i64, fenced: bool, now_ms: i64) -> bool {
        if fenced {
            return false;
        }
        match self.brokers.get(&id) {
            Some(s) if s.epoch == epoch => !self.expired(s, now_ms),
            _ => false,
        }
    }

    /// Has the session of the broker at `epoch` timed out? A broker this manager never
    /// heard of (a controller that started after it registered) has a session from
    /// `reset_sessions`, so it is not reported here before its timeout.
    pub fn session_expired(&self, id: i32, epoch: i64, now_ms: i64) -> bool {
        match self.brokers.get(&id) {
            Some(s) if s.epoch == epoch => self.expired(s, now_ms),
            _ => false,
        }
    }

    /// When the broker's session times out, if it has one.
    pub fn session_deadline(&self, id: i32, epoch: i64) -> Option<i64> {
        match self.brokers.get(&id) {
            Some(s) if s.epoch == epoch => Some(s.last_contact_ms.saturating_add(self.session_timeout_ms)),
            _ => None,
        }
    }

    /// A new active controller gives every registered broker a fresh session before
    /// fencing any (Kafka's controller does the same on activation): the old one's
    /// heartbeat times are not known here.
    pub fn reset_sessions(&mut self, brokers: impl IntoIterator<Item = (i32, i64)>, now_ms: i64) {
        self.brokers.clear();
        for (id, epoch) in brokers {
            self.register(id, epoch, now_ms);
        }
    }

    pub fn metadata_offset(&self, id: i32, epoch: i64) -> Option<i64> {
        self.brokers.get(&id).filter(|s| s.epoch == epoch).map(|s| s.metadata_offset)
    }

    pub fn controlled_shutdown_offset(&self, id: i32, epoch: i64) -> Option<i64> {
        self.brokers.get(&id).filter(|s| s.epoch == epoch).and_then(|s| s.controlled_shutdown_offset)
    }

    /// Records the offset a controlled shutdown waits for, once (Kafka's
    /// `maybeUpdateControlledShutdownOffset`).
    pub fn set_controlled_shutdown_offset(&mut self, id: i32, epoch: i64, offset: i64) {
        if let Some(s) = self.brokers.get_mut(&id).filter(|s| s.epoch == epoch) {
            s.controlled_shutdown_offset.get_or_insert(offset);
        }
    }

    fn expired(&self, s: &Session, now_ms: i64) -> bool {
        now_ms > s.last_contact_ms.saturating_add(self.session_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_expires_after_the_timeout_without_heartbeat() {
        let mut h = BrokerHeartbeatManager::new(9_000);
        h.register(1, 10, 0);
        assert!(h.has_valid_session(1, 10, false, 9_000));
        assert!(!h.session_expired(1, 10, 9_000));
        assert!(h.session_expired(1, 10, 9_001));
        h.touch(1, 10, 5_000, 3);
        assert!(!h.session_expired(1, 10, 14_000));
        assert_eq!(h.metadata_offset(1, 10), Some(3));
    }

    #[test]
    fn fenced_or_other_epoch_has_no_valid_session() {
        let mut h = BrokerHeartbeatManager::new(9_000);
        h.register(1, 10, 0);
        assert!(!h.has_valid_session(1, 10, true, 0));
        assert!(!h.has_valid_session(1, 11, false, 0));
        assert!(!h.has_valid_session(2, 10, false, 0));
    }

    #[test]
    fn reset_gives_every_broker_a_fresh_session() {
        let mut h = BrokerHeartbeatManager::new(100);
        h.register(1, 1, 0);
        assert!(h.session_expired(1, 1, 500));
        h.reset_sessions([(1, 1), (2, 5)], 500);
        assert!(!h.session_expired(1, 1, 600));
        assert_eq!(h.session_deadline(2, 5), Some(600));
        assert_eq!(h.metadata_offset(2, 5), Some(-1));
    }
}
