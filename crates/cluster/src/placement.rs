//! Replica placement for new partitions: Kafka's `StripedReplicaPlacer`
//! (`org.apache.kafka.metadata.placement`, as in 4.4), ported step for step.
//!
//! Goals, in Kafka's order: spread each partition's replicas over racks; spread
//! replicas (and so leaders) over brokers, by striping: each partition starts one rack
//! (and one broker within a rack) further than the previous one; prefer unfenced
//! brokers, using fenced ones only once every unfenced broker of the rack was used in
//! this round. Constraints: no broker twice in a partition, and the first replica (the
//! preferred leader) is always unfenced.
//!
//! The random source is injected, so that a seed replays a placement exactly (Kafka
//! passes a `java.util.Random`; the draws are the same in number and bound, the values
//! differ).

use crate::controller::ControllerError;
use osprey_protocol::ErrorCode;
use std::collections::BTreeMap;

/// A broker replicas may be placed on: registered and not in controlled shutdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsableBroker {
    pub id: i32,
    pub rack: Option<String>,
    pub fenced: bool,
}

/// The random draws placement makes (Kafka's `Random.nextInt(bound)`).
pub trait PlacementRandom {
    /// A value in `0..bound`; `bound` is at least 1.
    fn next_below(&mut self, bound: usize) -> usize;
}

/// A seeded SplitMix64: deterministic placement in tests and simulations, and a fresh
/// seed per controller in production (`SeededRandom::from_entropy`).
#[derive(Debug, Clone)]
pub struct SeededRandom(u64);

impl SeededRandom {
    pub fn new(seed: u64) -> SeededRandom {
        SeededRandom(seed)
    }

    /// Seeded from the operating system; falls back to a fixed seed if it has none
    /// (placement is then still valid, only predictable).
    pub fn from_entropy() -> SeededRandom {
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        SeededRandom(u64::from_le_bytes(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl PlacementRandom for SeededRandom {
    fn next_below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound.max(1) as u64) as usize
    }
}

/// Places `partitions` partitions of `replication_factor` replicas each over `brokers`
/// (Kafka's `StripedReplicaPlacer.place`). The error is Kafka's
/// INVALID_REPLICATION_FACTOR with Kafka's message (without the "Unable to replicate the
/// partition N time(s): " prefix, which the CreateTopics path adds, as Kafka's
/// `ReplicationControlManager` does).
pub fn place(
    random: &mut dyn PlacementRandom,
    brokers: &[UsableBroker],
    partitions: usize,
    replication_factor: i16,
) -> Result<Vec<Vec<i32>>, ControllerError> {
    let mut racks = RackList::new(random, brokers);
    check_positive(replication_factor)?;
    check_any_unfenced(racks.unfenced_brokers)?;
    check_enough_brokers(replication_factor, racks.total_brokers)?;
    let rf = replication_factor as usize;
    (0..partitions).map(|_| racks.place(random, rf)).collect()
}

fn invalid_replication_factor(message: String) -> ControllerError {
    ControllerError::new(ErrorCode::INVALID_REPLICATION_FACTOR, message)
}

fn check_positive(replication_factor: i16) -> Result<(), ControllerError> {
    if replication_factor <= 0 {
        return Err(invalid_replication_factor(format!(
            "Invalid replication factor {replication_factor}: the replication factor must be positive."
        )));
    }
    Ok(())
}

fn check_any_unfenced(unfenced: usize) -> Result<(), ControllerError> {
    if unfenced == 0 {
        return Err(invalid_replication_factor(
            "All brokers are currently fenced, or have all their log directories cordoned.".into(),
        ));
    }
    Ok(())
}

fn check_enough_brokers(replication_factor: i16, total: usize) -> Result<(), ControllerError> {
    if replication_factor as usize > total {
        return Err(invalid_replication_factor(format!(
            "The target replication factor of {replication_factor} cannot be reached because only {total} broker(s) are registered."
        )));
    }
    Ok(())
}

/// Fisher-Yates, drawing as `java.util.Collections.shuffle` does.
fn shuffle<T>(random: &mut dyn PlacementRandom, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = random.next_below(i + 1);
        items.swap(i, j);
    }
}

/// Brokers iterated round-robin from a moving offset, once per iteration epoch.
#[derive(Debug, Default)]
struct BrokerList {
    brokers: Vec<i32>,
    /// How many brokers were returned in the current epoch.
    index: usize,
    /// Added to `index` (modulo the size) to pick the next broker.
    offset: usize,
    epoch: u64,
}

impl BrokerList {
    /// Sorts the brokers and draws a random start.
    fn initialize(&mut self, random: &mut dyn PlacementRandom) {
        if !self.brokers.is_empty() {
            self.brokers.sort_unstable();
            self.offset = random.next_below(self.brokers.len());
        }
    }

    /// The next broker of this epoch, or `None` when every broker was returned in it.
    /// A new epoch restarts the count one place further along.
    fn next(&mut self, epoch: u64) -> Option<i32> {
        if self.brokers.is_empty() {
            return None;
        }
        if self.epoch != epoch {
            self.epoch = epoch;
            self.index = 0;
            self.offset = (self.offset + 1) % self.brokers.len();
        }
        if self.index >= self.brokers.len() {
            return None;
        }
        let broker = self.brokers[(self.index + self.offset) % self.brokers.len()];
        self.index += 1;
        Some(broker)
    }
}

#[derive(Debug, Default)]
struct Rack {
    fenced: BrokerList,
    unfenced: BrokerList,
}

impl Rack {
    /// Unfenced brokers first; fenced ones once the unfenced are used up in this epoch.
    fn next(&mut self, epoch: u64) -> Option<i32> {
        self.unfenced.next(epoch).or_else(|| self.fenced.next(epoch))
    }
}

/// The racks (`None` is "no rack", sorted first as Kafka's `OptionalStringComparator`),
/// iterated round-robin from an offset that moves one rack per partition.
struct RackList {
    racks: BTreeMap<Option<String>, Rack>,
    rack_names: Vec<Option<String>>,
    total_brokers: usize,
    unfenced_brokers: usize,
    epoch: u64,
    offset: usize,
}

impl RackList {
    fn new(random: &mut dyn PlacementRandom, brokers: &[UsableBroker]) -> RackList {
        let mut racks: BTreeMap<Option<String>, Rack> = BTreeMap::new();
        let mut unfenced_brokers = 0;
        for broker in brokers {
            let rack = racks.entry(broker.rack.clone()).or_default();
            if broker.fenced {
                rack.fenced.brokers.push(broker.id);
            } else {
                unfenced_brokers += 1;
                rack.unfenced.brokers.push(broker.id);
            }
        }
        for rack in racks.values_mut() {
            rack.fenced.initialize(random);
            rack.unfenced.initialize(random);
        }
        // BTreeMap order is the comparator's order: `None` before every name.
        let rack_names: Vec<Option<String>> = racks.keys().cloned().collect();
        let offset = if rack_names.is_empty() { 0 } else { random.next_below(rack_names.len()) };
        RackList { racks, rack_names, total_brokers: brokers.len(), unfenced_brokers, epoch: 0, offset }
    }

    fn place(
        &mut self,
        random: &mut dyn PlacementRandom,
        replication_factor: usize,
    ) -> Result<Vec<i32>, ControllerError> {
        check_positive(replication_factor.min(i16::MAX as usize) as i16)?;
        check_enough_brokers(replication_factor.min(i16::MAX as usize) as i16, self.total_brokers)?;
        check_any_unfenced(self.unfenced_brokers)?;
        // After as many partitions as there are unfenced brokers, reshuffle so that the
        // same sets of brokers do not repeat; never with one broker, which would loop.
        if self.epoch == self.unfenced_brokers as u64 && self.unfenced_brokers > 1 {
            self.shuffle(random);
            self.epoch = 0;
        }
        if self.offset == self.rack_names.len() {
            self.offset = 0;
        }
        let mut brokers = Vec::with_capacity(replication_factor);
        // The leader: the first unfenced broker from the rack at `offset` onwards. Some
        // rack has an unfenced broker left in this epoch, because the epoch is reset
        // before it exceeds the number of unfenced brokers.
        let mut rack_index = self.offset;
        loop {
            let name = &self.rack_names[rack_index];
            if let Some(b) = self.racks.get_mut(name).and_then(|r| r.unfenced.next(self.epoch)) {
                brokers.push(b);
                break;
            }
            rack_index = (rack_index + 1) % self.rack_names.len();
            if rack_index == self.offset {
                return Err(ControllerError::new(ErrorCode::UNKNOWN_SERVER_ERROR, "no unfenced broker left to lead"));
            }
        }
        let mut leader_rack = Some(rack_index);
        let mut rack_index = self.offset;
        // The followers: one per rack in turn from `offset`, skipping the leader's rack
        // the first time it comes round. Every broker can be returned once per epoch
        // and there are at least `replication_factor` of them, so this ends.
        let mut tries = 0usize;
        for _ in 1..replication_factor {
            loop {
                tries += 1;
                if tries > 2 * (self.total_brokers + self.rack_names.len()) * replication_factor {
                    return Err(ControllerError::new(ErrorCode::UNKNOWN_SERVER_ERROR, "placement did not converge"));
                }
                let mut result = None;
                if leader_rack == Some(rack_index) {
                    leader_rack = None;
                } else {
                    let name = &self.rack_names[rack_index];
                    result = self.racks.get_mut(name).and_then(|r| r.next(self.epoch));
                }
                rack_index = (rack_index + 1) % self.rack_names.len();
                if let Some(b) = result {
                    brokers.push(b);
                    break;
                }
            }
        }
        self.epoch += 1;
        self.offset += 1;
        Ok(brokers)
    }

    fn shuffle(&mut self, random: &mut dyn PlacementRandom) {
        shuffle(random, &mut self.rack_names);
        for rack in self.racks.values_mut() {
            shuffle(random, &mut rack.fenced.brokers);
            shuffle(random, &mut rack.unfenced.brokers);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn brokers(racks: &[(&str, usize)], fenced: &[i32]) -> Vec<UsableBroker> {
        let mut out = Vec::new();
        for (rack, n) in racks {
            for _ in 0..*n {
                let id = out.len() as i32;
                let rack = (!rack.is_empty()).then(|| rack.to_string());
                out.push(UsableBroker { id, rack, fenced: fenced.contains(&id) });
            }
        }
        out
    }

    fn rack_of(brokers: &[UsableBroker], id: i32) -> Option<String> {
        brokers.iter().find(|b| b.id == id).and_then(|b| b.rack.clone())
    }

    #[test]
    fn too_few_brokers_is_kafkas_invalid_replication_factor() {
        let err = place(&mut SeededRandom::new(1), &brokers(&[("", 2)], &[]), 3, 3).unwrap_err();
        assert_eq!(err.code, ErrorCode::INVALID_REPLICATION_FACTOR);
        assert_eq!(
            err.message,
            "The target replication factor of 3 cannot be reached because only 2 broker(s) are registered."
        );
        let err = place(&mut SeededRandom::new(1), &brokers(&[("", 2)], &[0, 1]), 1, 1).unwrap_err();
        assert_eq!(err.message, "All brokers are currently fenced, or have all their log directories cordoned.");
        let err = place(&mut SeededRandom::new(1), &brokers(&[("", 2)], &[]), 1, 0).unwrap_err();
        assert_eq!(err.message, "Invalid replication factor 0: the replication factor must be positive.");
    }

    #[test]
    fn one_broker_places_every_partition_on_it() {
        let placed = place(&mut SeededRandom::new(7), &brokers(&[("", 1)], &[]), 5, 1).unwrap();
        assert_eq!(placed, vec![vec![0]; 5]);
    }

    #[test]
    fn three_racks_of_three_stripe_like_kafkas_example() {
        // Kafka's class comment: with racks A, B, C of three brokers, consecutive
        // partitions start one rack further and take each rack's next broker.
        let all = brokers(&[("a", 3), ("b", 3), ("c", 3)], &[]);
        let placed = place(&mut SeededRandom::new(3), &all, 3, 3).unwrap();
        for p in &placed {
            let racks: BTreeSet<_> = p.iter().map(|&b| rack_of(&all, b)).collect();
            assert_eq!(racks.len(), 3, "{placed:?}");
        }
        let leader_racks: BTreeSet<_> = placed.iter().map(|p| rack_of(&all, p[0])).collect();
        assert_eq!(leader_racks.len(), 3, "leaders stripe over the racks: {placed:?}");
        let every: BTreeSet<i32> = placed.iter().flatten().copied().collect();
        assert_eq!(every.len(), 9, "nine replicas on nine brokers: {placed:?}");
    }

    #[test]
    fn same_seed_same_placement() {
        let all = brokers(&[("a", 2), ("b", 3), ("", 1)], &[4]);
        let a = place(&mut SeededRandom::new(99), &all, 20, 3).unwrap();
        let b = place(&mut SeededRandom::new(99), &all, 20, 3).unwrap();
        assert_eq!(a, b);
    }

    /// A cluster: up to four racks (one of them possibly "no rack") of up to four
    /// brokers, some fenced.
    fn cluster() -> impl Strategy<Value = Vec<UsableBroker>> {
        (proptest::collection::vec(0usize..5, 1..5), proptest::collection::vec(any::<bool>(), 16), any::<bool>())
            .prop_map(|(sizes, fenced, named)| {
                let names = ["r0", "r1", "r2", "r3"];
                let mut out = Vec::new();
                for (i, n) in sizes.iter().enumerate() {
                    for _ in 0..*n {
                        let id = out.len() as i32;
                        let rack = (named || i > 0).then(|| names[i].to_string());
                        out.push(UsableBroker { id, rack, fenced: fenced[id as usize % 16] });
                    }
                }
                out
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn every_partition_gets_distinct_brokers_and_an_unfenced_leader(
            all in cluster(), partitions in 1usize..40, rf in 1i16..5, seed in any::<u64>()
        ) {
            let unfenced = all.iter().filter(|b| !b.fenced).count();
            match place(&mut SeededRandom::new(seed), &all, partitions, rf) {
                Err(e) => {
                    prop_assert_eq!(e.code, ErrorCode::INVALID_REPLICATION_FACTOR);
                    prop_assert!(unfenced == 0 || rf as usize > all.len(), "refused a feasible placement: {}", e.message);
                }
                Ok(placed) => {
                    prop_assert!(unfenced > 0 && rf as usize <= all.len());
                    prop_assert_eq!(placed.len(), partitions);
                    let single_rack = all.iter().map(|b| &b.rack).collect::<BTreeSet<_>>().len() == 1;
                    for p in &placed {
                        prop_assert_eq!(p.len(), rf as usize);
                        prop_assert_eq!(p.iter().collect::<BTreeSet<_>>().len(), p.len(), "a broker twice: {:?}", p);
                        let leader = all.iter().find(|b| b.id == p[0]).unwrap();
                        prop_assert!(!leader.fenced, "fenced leader in {:?}", p);
                        if single_rack && unfenced >= rf as usize {
                            // Without racks, fenced brokers are used only once the
                            // unfenced ones are exhausted.
                            prop_assert!(p.iter().all(|&b| !all.iter().any(|x| x.id == b && x.fenced)), "{:?}", p);
                        }
                    }
                }
            }
        }

        #[test]
        fn replicas_spread_over_as_many_racks_as_possible(
            sizes in proptest::collection::vec(1usize..4, 1..5), partitions in 1usize..30, rf in 1i16..5, seed in any::<u64>()
        ) {
            let names = ["a", "b", "c", "d"];
            let racks: Vec<(&str, usize)> = sizes.iter().enumerate().map(|(i, n)| (names[i], *n)).collect();
            let all = brokers(&racks, &[]);
            prop_assume!(rf as usize <= all.len());
            let placed = place(&mut SeededRandom::new(seed), &all, partitions, rf).unwrap();
            for p in &placed {
                let spread = p.iter().map(|&b| rack_of(&all, b)).collect::<BTreeSet<_>>().len();
                prop_assert_eq!(spread, (rf as usize).min(sizes.len()), "{:?}", p);
            }
        }

        #[test]
        fn leaders_are_balanced_over_unfenced_brokers_without_racks(
            n in 1usize..8, rounds in 1usize..6, rf in 1i16..4, seed in any::<u64>()
        ) {
            prop_assume!(rf as usize <= n);
            let all = brokers(&[("", n)], &[]);
            let placed = place(&mut SeededRandom::new(seed), &all, n * rounds, rf).unwrap();
            let mut leaders: BTreeMap<i32, usize> = BTreeMap::new();
            for p in &placed {
                *leaders.entry(p[0]).or_default() += 1;
            }
            prop_assert_eq!(leaders.len(), n, "every broker leads: {:?}", leaders);
            prop_assert!(leaders.values().all(|&c| c == rounds), "{:?}", leaders);
        }
    }
}
