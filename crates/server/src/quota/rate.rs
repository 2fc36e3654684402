//! A rate over sampled windows and the throttle time of a quota violation, as Kafka's
//! `Rate` over a `SampledStat` (`WindowedSum`) and `QuotaUtils.throttleTime` compute
//! them. Pure arithmetic: every instant is passed in, in milliseconds.

/// Kafka's `quota.window.num`: samples kept.
pub const QUOTA_WINDOW_NUM: usize = 11;
/// Kafka's `quota.window.size.seconds`, in milliseconds: the span of one sample.
pub const QUOTA_WINDOW_SIZE_MS: i64 = 1000;

/// Values recorded into up to `samples` windows of `window_ms` each; the rate is their
/// sum over the time they span.
#[derive(Debug, Clone)]
pub struct SampledRate {
    samples: Vec<Sample>,
    /// The sample being recorded into.
    current: usize,
    max_samples: usize,
    window_ms: i64,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    /// When the sample's window began.
    start_ms: i64,
    value: f64,
}

impl Sample {
    fn new(start_ms: i64) -> Sample {
        Sample { start_ms, value: 0.0 }
    }
}

impl Default for SampledRate {
    fn default() -> SampledRate {
        SampledRate::new(QUOTA_WINDOW_NUM, QUOTA_WINDOW_SIZE_MS)
    }
}

impl SampledRate {
    pub fn new(max_samples: usize, window_ms: i64) -> SampledRate {
        assert!(max_samples >= 2 && window_ms > 0, "a rate needs two samples of a positive window");
        SampledRate { samples: Vec::with_capacity(max_samples), current: 0, max_samples, window_ms }
    }

    /// Adds `value` at `now_ms` (Kafka's `SampledStat.record`): into the current sample,
    /// or a new one when the current one's window is over.
    pub fn record(&mut self, value: f64, now_ms: i64) {
        if self.samples.is_empty() {
            self.samples.push(Sample::new(now_ms));
            self.current = 0;
        }
        if now_ms - self.samples[self.current].start_ms >= self.window_ms {
            self.current = (self.current + 1) % self.max_samples;
            if self.current >= self.samples.len() {
                self.samples.push(Sample::new(now_ms));
            } else {
                self.samples[self.current] = Sample::new(now_ms);
            }
        }
        self.samples[self.current].value += value;
    }

    /// The rate per second at `now_ms` (Kafka's `Rate.measure`): the sum of the samples
    /// not yet obsolete over [`Self::window_size_ms`].
    pub fn measure(&mut self, now_ms: i64) -> f64 {
        self.purge_obsolete(now_ms);
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        total / (self.window_size_ms(now_ms) as f64 / 1000.0)
    }

    /// The span the rate is measured over (Kafka's `Rate.windowSize`): from the oldest
    /// sample to now, but at least `samples - 1` whole windows plus the part of the
    /// current one, so that a burst into a new sensor is not measured over a few
    /// milliseconds; never zero.
    pub fn window_size_ms(&mut self, now_ms: i64) -> i64 {
        self.purge_obsolete(now_ms);
        let oldest = self.samples.iter().map(|s| s.start_ms).min().unwrap_or(now_ms);
        let mut elapsed = now_ms - oldest;
        let full_windows = elapsed / self.window_ms;
        let min_full_windows = (self.max_samples - 1) as i64;
        if full_windows < min_full_windows {
            elapsed += (min_full_windows - full_windows) * self.window_ms;
        }
        elapsed.max(1)
    }

    /// Resets samples older than all the windows together (Kafka's
    /// `purgeObsoleteSamples`).
    fn purge_obsolete(&mut self, now_ms: i64) {
        let expire_age = self.max_samples as i64 * self.window_ms;
        for s in &mut self.samples {
            if now_ms - s.start_ms >= expire_age {
                *s = Sample::new(now_ms);
            }
        }
    }
}

/// How long to throttle a client whose measured rate is `measured` against a quota of
/// `bound` over `window_ms` (Kafka's `QuotaUtils.throttleTime`): the time it would take
/// at the bound to make up the excess. Zero when within the quota.
pub fn throttle_time_ms(measured: f64, bound: f64, window_ms: i64) -> u64 {
    if measured <= bound || bound <= 0.0 {
        return 0;
    }
    let ms = (measured - bound) / bound * window_ms as f64;
    ms.round() as u64
}

/// Records `value` at `now_ms` and checks the quota `bound` after it, as Kafka's sensor
/// does: the throttle time in milliseconds (0 within the quota).
pub fn record_and_throttle_ms(rate: &mut SampledRate, value: f64, bound: f64, now_ms: i64) -> u64 {
    rate.record(value, now_ms);
    let measured = rate.measure(now_ms);
    let window_ms = rate.window_size_ms(now_ms);
    throttle_time_ms(measured, bound, window_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_rate_is_measured_over_all_but_one_window() {
        let mut rate = SampledRate::default();
        rate.record(10_000.0, 0);
        // 10 whole windows assumed: 10 s.
        assert_eq!(rate.window_size_ms(0), 10_000);
        assert_eq!(rate.measure(0), 1000.0);
        assert_eq!(rate.window_size_ms(500), 10_500);
    }

    #[test]
    fn samples_roll_and_old_ones_are_forgotten() {
        let mut rate = SampledRate::default();
        for second in 0..20 {
            rate.record(1000.0, second * 1000);
        }
        // Eleven samples of 1000 each, the oldest starting at 9 s: 11000 over 10.5 s.
        let measured = rate.measure(19_500);
        assert!((measured - 11_000.0 / 10.5).abs() < 1e-9, "{measured}");
        // After all windows have passed, nothing is left.
        assert_eq!(rate.measure(19_000 + 11_000), 0.0);
    }

    #[test]
    fn throttle_time_makes_up_the_excess_at_the_bound() {
        assert_eq!(throttle_time_ms(1000.0, 1000.0, 10_000), 0);
        assert_eq!(throttle_time_ms(500.0, 1000.0, 10_000), 0);
        assert_eq!(throttle_time_ms(2000.0, 1000.0, 10_000), 10_000);
        assert_eq!(throttle_time_ms(1100.0, 1000.0, 10_000), 1000);
    }

    #[test]
    fn a_client_at_twice_its_quota_is_throttled_for_the_excess() {
        let mut rate = SampledRate::default();
        // 20 KiB at once against 1 KiB/s: measured over 10 s, 2 KiB/s, so 10 s to make
        // up the extra 10 KiB.
        assert_eq!(record_and_throttle_ms(&mut rate, 20_480.0, 1024.0, 0), 10_000);
        // Within the quota from the start: never throttled.
        let mut steady = SampledRate::default();
        let throttled: u64 = (0..100).map(|i| record_and_throttle_ms(&mut steady, 900.0, 1024.0, i * 1000)).sum();
        assert_eq!(throttled, 0);
    }

    #[test]
    fn a_client_that_waits_out_its_throttle_is_back_within_the_quota() {
        let mut rate = SampledRate::default();
        let bound = 1000.0;
        let mut now = 0;
        let mut sent = 0.0;
        // Sends 5000 at a time, waiting each throttle out (as a muted connection does).
        for _ in 0..50 {
            let throttle = record_and_throttle_ms(&mut rate, 5000.0, bound, now);
            sent += 5000.0;
            now += throttle.max(10) as i64;
        }
        let achieved = sent / (now as f64 / 1000.0);
        // The first ten windows' allowance lets it above the bound at first; over 50
        // sends it stays close.
        assert!(achieved < bound * 1.5, "{achieved}");
        assert!(achieved > bound * 0.5, "{achieved}");
    }
}
