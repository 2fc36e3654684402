//! The share partition's invariants, checked by tests after every step (and available to
//! a debug build of the server).

use super::cache::{InFlightState, RecordState};
use super::SharePartition;

impl SharePartition {
    /// Checks every invariant; the error says which one broke, where.
    pub fn check_invariants(&self) -> Result<(), String> {
        let (start, end) = (self.start_offset, self.end_offset);
        if start > end {
            return Err(format!("start offset {start} past end offset {end}"));
        }
        if self.cache.is_empty() != (start == end) {
            return Err(format!("cache of {} batches with start {start} and end {end}", self.cache.len()));
        }
        let mut expected_first: Option<i64> = None;
        for (&key, batch) in &self.cache {
            let (first, last) = (batch.first_offset, batch.last_offset);
            if key != first || first > last {
                return Err(format!("batch {first}-{last} filed under {key}"));
            }
            match expected_first {
                Some(expected) if first != expected => {
                    return Err(format!("batch {first}-{last} after a batch ending at {}", expected - 1));
                }
                None if first > start || last < start => {
                    return Err(format!("first batch {first}-{last} does not hold the start offset {start}"));
                }
                _ => {}
            }
            expected_first = Some(last + 1);
            if let super::cache::States::PerOffset(states) = &batch.states {
                if states.len() as i64 != batch.len() {
                    return Err(format!("batch {first}-{last} has {} offset states", states.len()));
                }
            }
            let mut error = None;
            batch.for_each_state(|from, to, s| {
                if error.is_none() {
                    error = self.check_state(from, to, s).err();
                }
            });
            if let Some(e) = error {
                return Err(e);
            }
        }
        if let Some(last) = self.cache.values().next_back().map(|b| b.last_offset) {
            if last + 1 != end {
                return Err(format!("last batch ends at {last}, end offset {end}"));
            }
        }
        if let Some(view) = self.record_state(start) {
            if view.state.is_terminal() && !view.in_transition {
                return Err(format!("start offset {start} not moved past a {:?} record", view.state));
            }
        }
        if end - start > self.largest_window && end != self.loaded_end_offset {
            return Err(format!("{} records in flight, window {}", end - start, self.largest_window));
        }
        Ok(())
    }

    fn check_state(&self, from: i64, to: i64, s: &InFlightState) -> Result<(), String> {
        let limit = self.largest_delivery_count_limit;
        let at = || format!("offsets {from}-{to} ({:?}, delivery count {})", s.state, s.delivery_count);
        if (s.state == RecordState::Acquired) != s.lock.is_some() {
            return Err(format!("{}: lock {:?}", at(), s.lock));
        }
        if (s.state == RecordState::Archiving) != s.dlq.is_some() {
            return Err(format!("{}: dead-letter queue mark {:?}", at(), s.dlq));
        }
        match s.state {
            RecordState::Acquired if !(1..=limit).contains(&s.delivery_count) => {
                return Err(format!("{}: acquired past the delivery limit {limit}", at()));
            }
            RecordState::Available if !(0..limit).contains(&s.delivery_count) => {
                return Err(format!("{}: available at the delivery limit {limit}", at()));
            }
            _ => {}
        }
        if let Some(before) = &s.pending {
            if before.state != RecordState::Acquired || before.lock.is_none() || s.lock.is_some() {
                return Err(format!("{}: in transition from {:?}", at(), before.state));
            }
        }
        if from < self.start_offset && !s.is_done() {
            return Err(format!("{}: below the start offset {}", at(), self.start_offset));
        }
        Ok(())
    }
}
