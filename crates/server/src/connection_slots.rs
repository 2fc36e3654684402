//! The `max.connections` slots: one per open client connection, and a limit that a
//! dynamic broker config can change while connections hold slots (Kafka's
//! `max.connections` is a cluster-wide dynamic config).
//!
//! Raising the limit adds slots at once. Lowering it closes no connection, as in Kafka:
//! free slots are removed at once, and a slot in use is removed when its connection
//! closes (the acceptor forgets it instead of reusing it), so no new connection is taken
//! until the open ones are below the new limit.

use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Debug)]
pub struct ConnectionSlots {
    semaphore: Arc<Semaphore>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    limit: usize,
    /// Slots in use to remove once their connections close: a lowered limit's excess.
    owed: usize,
}

impl ConnectionSlots {
    /// `limit` slots (at least one, so the broker can always be reached).
    pub fn new(limit: usize) -> ConnectionSlots {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        ConnectionSlots { semaphore: Arc::new(Semaphore::new(limit)), state: Mutex::new(State { limit, owed: 0 }) }
    }

    /// The limit in effect.
    pub fn limit(&self) -> usize {
        self.lock().limit
    }

    /// Changes the limit (at least one). Never closes a connection.
    pub fn resize(&self, limit: usize) {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        let mut state = self.lock();
        if limit > state.limit {
            let grow = limit - state.limit;
            let cancelled = grow.min(state.owed);
            state.owed -= cancelled;
            self.semaphore.add_permits(grow - cancelled);
        } else {
            let shrink = state.limit - limit;
            let removed = self.semaphore.forget_permits(shrink);
            state.owed += shrink - removed;
        }
        state.limit = limit;
    }

    /// Waits for a free slot (the acceptor stops accepting meanwhile). Cancel-safe.
    pub async fn acquire(&self) -> OwnedSemaphorePermit {
        loop {
            let permit = self.semaphore.clone().acquire_owned().await.expect("the slot semaphore is never closed");
            if let Some(permit) = self.keep(permit) {
                return permit;
            }
        }
    }

    /// A free slot if there is one now.
    pub fn try_acquire(&self) -> Option<OwnedSemaphorePermit> {
        loop {
            let permit = self.semaphore.clone().try_acquire_owned().ok()?;
            if let Some(permit) = self.keep(permit) {
                return Some(permit);
            }
        }
    }

    /// Hands a freed slot back, or removes it while a lowered limit is still owed slots.
    fn keep(&self, permit: OwnedSemaphorePermit) -> Option<OwnedSemaphorePermit> {
        let mut state = self.lock();
        if state.owed > 0 {
            state.owed -= 1;
            permit.forget();
            return None;
        }
        Some(permit)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is two counters updated together; a panic cannot leave them torn.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raised_limit_adds_slots_at_once() {
        let slots = ConnectionSlots::new(2);
        let held: Vec<_> = (0..2).map(|_| slots.try_acquire().unwrap()).collect();
        assert!(slots.try_acquire().is_none());
        slots.resize(3);
        let third = slots.try_acquire().expect("the raised limit's slot");
        assert!(slots.try_acquire().is_none());
        drop((held, third));
    }

    #[test]
    fn a_lowered_limit_closes_nothing_and_takes_slots_back_as_connections_close() {
        let slots = ConnectionSlots::new(4);
        let mut held: Vec<_> = (0..3).map(|_| slots.try_acquire().unwrap()).collect();
        slots.resize(1);
        assert_eq!(slots.limit(), 1);
        assert!(slots.try_acquire().is_none(), "the free slot is gone at once");
        held.pop();
        assert!(slots.try_acquire().is_none(), "two open, limit one: the freed slot is removed");
        held.pop();
        assert!(slots.try_acquire().is_none(), "one open, limit one");
        held.pop();
        let only = slots.try_acquire().expect("none open: one slot");
        assert!(slots.try_acquire().is_none());
        drop(only);
        assert!(slots.try_acquire().is_some());
    }

    #[test]
    fn raising_again_cancels_what_a_lowered_limit_still_owed() {
        let slots = ConnectionSlots::new(3);
        let mut held: Vec<_> = (0..3).map(|_| slots.try_acquire().unwrap()).collect();
        slots.resize(1); // owes two
        slots.resize(4); // cancels both and adds one
        held.push(slots.try_acquire().expect("the fourth slot"));
        assert!(slots.try_acquire().is_none());
        held.clear();
        let again: Vec<_> = (0..4).map(|_| slots.try_acquire().unwrap()).collect();
        assert!(slots.try_acquire().is_none(), "exactly four");
        drop(again);
    }
}
