//! Combining state batches: what a `ShareUpdate` adds to the state before it, as Kafka's
//! `PersisterStateBatchCombiner` does.
//!
//! A share partition's delivery count only grows and its records only move towards
//! ACKNOWLEDGED or ARCHIVED, so where batches overlap the one further along wins: the
//! larger delivery count, then the larger state. That makes the result independent of
//! the order the batches come in. Offsets below the start offset are dropped, and
//! neighbouring batches with the same count and state become one.

use super::StateBatch;

/// `old` and `new`, each sorted and without overlaps, combined: for every offset at or
/// above `start_offset` (or every offset, if it is -1) the batch further along, sorted,
/// without overlaps, neighbours with the same delivery state and count merged.
pub fn combine(old: &[StateBatch], new: &[StateBatch], start_offset: i64) -> Vec<StateBatch> {
    let mut pieces = Vec::with_capacity(old.len() + new.len());
    let mut bounds: Vec<i64> = Vec::with_capacity(2 * (old.len() + new.len()));
    for b in old.iter().chain(new) {
        let first = if start_offset >= 0 { b.first_offset.max(start_offset) } else { b.first_offset };
        if first > b.last_offset {
            continue;
        }
        bounds.push(first);
        bounds.push(b.last_offset.saturating_add(1));
        pieces.push(StateBatch { first_offset: first, ..*b });
    }
    bounds.sort_unstable();
    bounds.dedup();
    // Longest first within a start: a piece covering an elementary range is found by
    // scanning pieces that start at or before it, which `active` keeps.
    pieces.sort_unstable_by_key(|b| (b.first_offset, std::cmp::Reverse(b.last_offset)));

    let mut out: Vec<StateBatch> = Vec::new();
    let mut active: Vec<StateBatch> = Vec::new();
    let mut next_piece = 0;
    for window in bounds.windows(2) {
        let (from, to) = (window[0], window[1] - 1);
        while next_piece < pieces.len() && pieces[next_piece].first_offset <= from {
            active.push(pieces[next_piece]);
            next_piece += 1;
        }
        active.retain(|b| b.last_offset >= from);
        let Some(best) = active.iter().max_by_key(|b| further_along(b)) else {
            continue;
        };
        let piece = StateBatch { first_offset: from, last_offset: to, ..*best };
        match out.last_mut() {
            Some(last) if last.last_offset + 1 == from && further_along(last) == further_along(&piece) => {
                last.last_offset = to;
            }
            _ => out.push(piece),
        }
    }
    out
}

/// Kafka's order between two batches' delivery information: delivery count, then state.
fn further_along(b: &StateBatch) -> (i16, i8) {
    (b.delivery_count, b.delivery_state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn b(first: i64, last: i64, state: i8, count: i16) -> StateBatch {
        StateBatch { first_offset: first, last_offset: last, delivery_state: state, delivery_count: count }
    }

    #[test]
    fn the_batch_further_along_wins_where_batches_overlap() {
        // Kafka's cases: an acknowledged range inside an available one splits it.
        assert_eq!(combine(&[b(0, 9, 0, 1)], &[b(3, 5, 2, 1)], -1), vec![b(0, 2, 0, 1), b(3, 5, 2, 1), b(6, 9, 0, 1)]);
        // A later write with a lower delivery count does not undo a higher one.
        assert_eq!(combine(&[b(0, 9, 0, 3)], &[b(0, 9, 2, 1)], -1), vec![b(0, 9, 0, 3)]);
        // Same information, overlapping or touching: one batch.
        assert_eq!(combine(&[b(0, 4, 2, 1)], &[b(5, 9, 2, 1), b(3, 6, 2, 1)], -1), vec![b(0, 9, 2, 1)]);
        // Nothing below the start offset; a batch across it is cut there.
        assert_eq!(combine(&[b(0, 9, 0, 1)], &[b(12, 12, 4, 2)], 5), vec![b(5, 9, 0, 1), b(12, 12, 4, 2)]);
        assert_eq!(combine(&[b(0, 9, 0, 1)], &[], 10), vec![]);
    }

    fn batches() -> impl Strategy<Value = Vec<StateBatch>> {
        // Non-overlapping, sorted: gaps and lengths drawn, states and counts small.
        prop::collection::vec((0i64..4, 0i64..6, prop::sample::select(vec![0i8, 2, 4]), 1i16..4), 0..8).prop_map(
            |spec| {
                let mut at = 0;
                spec.into_iter()
                    .map(|(gap, len, state, count)| {
                        let first = at + gap;
                        at = first + len + 1;
                        b(first, first + len, state, count)
                    })
                    .collect()
            },
        )
    }

    proptest! {
        /// Offset by offset, the result holds the larger (count, state) of the inputs
        /// covering it, nothing where none does or below the start, and it is sorted,
        /// without overlaps, with equal neighbours merged.
        #[test]
        fn combine_takes_the_maximum_offset_by_offset(old in batches(), new in batches(), start in -1i64..20) {
            let out = combine(&old, &new, start);
            for pair in out.windows(2) {
                prop_assert!(pair[0].last_offset < pair[1].first_offset);
                prop_assert!(pair[0].last_offset + 1 < pair[1].first_offset || further_along(&pair[0]) != further_along(&pair[1]));
            }
            let at = |list: &[StateBatch], offset: i64| {
                list.iter().find(|b| b.first_offset <= offset && offset <= b.last_offset).map(further_along)
            };
            for offset in 0..80 {
                let expected = if start >= 0 && offset < start { None } else { at(&old, offset).max(at(&new, offset)) };
                prop_assert_eq!(at(&out, offset), expected, "offset {}", offset);
            }
            prop_assert_eq!(combine(&new, &old, start), out, "independent of the order");
        }
    }
}
