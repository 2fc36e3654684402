//! Reconnect back-off, as Kafka's `ExponentialBackoff` computes it for
//! `reconnect.backoff.ms` / `reconnect.backoff.max.ms`: the base doubled per failed
//! attempt, the exponent capped where it reaches the maximum, times a random factor in
//! `[1 - jitter, 1 + jitter)`, and never above the maximum. The jitter spreads the
//! retries of brokers that lost the same peer at the same moment.

use std::time::Duration;

/// Kafka's `CommonClientConfigs.RECONNECT_BACKOFF_JITTER`.
pub const RECONNECT_BACKOFF_JITTER: f64 = 0.2;

/// Kafka's multiplier for connection back-off.
const MULTIPLIER: f64 = 2.0;

/// The wait before the next connection attempt after `failures` consecutive failed
/// ones (0 after the first failure). `random_unit` is a uniform draw from `[0, 1)`;
/// passing it in keeps this a pure function that a test can drive.
pub fn reconnect_backoff(base: Duration, max: Duration, failures: u32, random_unit: f64) -> Duration {
    let base_ms = base.as_millis() as f64;
    let max_ms = max.as_millis() as f64;
    if max_ms <= base_ms {
        return base;
    }
    let exponent_max = (max_ms / base_ms.max(1.0)).ln() / MULTIPLIER.ln();
    let term = base_ms * MULTIPLIER.powf(f64::from(failures).min(exponent_max));
    let factor = 1.0 - RECONNECT_BACKOFF_JITTER + 2.0 * RECONNECT_BACKOFF_JITTER * random_unit.clamp(0.0, 1.0);
    Duration::from_millis((term * factor).min(max_ms) as u64)
}

/// A uniform draw from `[0, 1)` for the jitter: one per failed connection attempt, so
/// the OS's randomness costs nothing that matters. Without it, no jitter (the middle).
pub fn random_unit() -> f64 {
    getrandom::u64().map_or(0.5, |x| (x >> 11) as f64 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_millis(1000);

    #[test]
    fn doubles_per_failure_within_the_jitter_band() {
        for failures in 0..4 {
            let term = 50.0 * 2f64.powi(failures as i32);
            let low = reconnect_backoff(BASE, MAX, failures, 0.0).as_millis() as f64;
            let mid = reconnect_backoff(BASE, MAX, failures, 0.5).as_millis() as f64;
            let high = reconnect_backoff(BASE, MAX, failures, 0.999_999).as_millis() as f64;
            assert!((low - term * 0.8).abs() <= 1.0, "failures {failures}: {low}");
            assert!((mid - term).abs() <= 1.0, "failures {failures}: {mid}");
            assert!(high < term * 1.2 && high >= (term * 1.2).floor() - 1.0, "failures {failures}: {high}");
        }
    }

    #[test]
    fn never_exceeds_the_maximum_however_many_failures() {
        for failures in [5, 10, 64, u32::MAX] {
            for unit in [0.0, 0.5, 0.999] {
                assert!(reconnect_backoff(BASE, MAX, failures, unit) <= MAX);
            }
        }
        // At the cap the exponent stops growing, so the low edge of the band stays at
        // 0.8 x max rather than collapsing to the max itself.
        assert_eq!(reconnect_backoff(BASE, MAX, 100, 0.0), Duration::from_millis(800));
    }

    #[test]
    fn a_maximum_at_or_below_the_base_gives_the_base() {
        assert_eq!(reconnect_backoff(BASE, BASE, 7, 0.3), BASE);
        assert_eq!(reconnect_backoff(BASE, Duration::from_millis(10), 7, 0.3), BASE);
    }

    #[test]
    fn jitter_draws_stay_in_the_unit_interval_and_vary() {
        let draws: Vec<f64> = (0..1000).map(|_| random_unit()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        assert!(draws.iter().any(|&d| d < 0.1) && draws.iter().any(|&d| d > 0.9));
    }
}
