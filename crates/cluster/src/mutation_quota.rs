//! The controller mutation quota (KIP-599, `controller_mutation_rate`): how many
//! partitions a user or client id may create or delete per second, as Kafka's
//! `ControllerMutationQuotaManager` enforces it on the controller. Pure: every instant is
//! passed in, in milliseconds.
//!
//! Each sensor is a token bucket (Kafka's `TokenBucket`): it holds at most `burst =
//! samples × window × rate` tokens, starts full, and refills at the rate; a topic costs
//! one token per partition it creates or deletes, and the bucket may go below zero. A
//! request is decided in one of two ways, by its version:
//! - **strict** (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+, whose clients
//!   know THROTTLING_QUOTA_EXCEEDED): a topic is refused with that error while the bucket
//!   is below zero, and accepted otherwise, however many partitions it has; the response
//!   is throttled only when something was refused;
//! - **permissive** (older versions): every topic is accepted, and the response is
//!   throttled for as long as the bucket takes to refill to zero.
//!
//! The throttle time is Kafka's: the tokens missing over the rate.

use crate::client_quotas::{quota_user, ClientQuotasImage, CONTROLLER_MUTATION_RATE};
use std::collections::HashMap;

/// Kafka's `controller.quota.window.num` default: samples of the rate's window.
pub const CONTROLLER_QUOTA_WINDOW_NUM: u32 = 11;
/// Kafka's `controller.quota.window.size.seconds` default.
pub const CONTROLLER_QUOTA_WINDOW_SIZE_SECONDS: u32 = 1;
/// A bucket nobody drew from for this long is dropped (it would be full again anyway
/// after `burst / rate` seconds; an hour, as Kafka expires idle sensors).
const IDLE_EXPIRY_MS: i64 = 3600 * 1000;
/// The most buckets kept: a client cycling through client ids cannot grow the map past
/// it (the least recently used goes first; a dropped bucket comes back full).
const MAX_BUCKETS: usize = 100_000;

/// The error message Kafka gives with THROTTLING_QUOTA_EXCEEDED.
pub const THROTTLED_MESSAGE: &str = "The throttling quota has been exceeded.";

/// Whether a request of `api` (CreateTopics 19, DeleteTopics 20, CreatePartitions 37)
/// at `version` is decided strictly (its client understands THROTTLING_QUOTA_EXCEEDED).
pub fn is_strict(api_key: i16, version: i16) -> bool {
    match api_key {
        19 => version >= 6,
        20 => version >= 5,
        37 => version >= 3,
        _ => false,
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last_ms: i64,
}

impl Bucket {
    /// Refills at `rate` per second since the last update, up to `burst`.
    fn refill(&mut self, rate: f64, burst: f64, now_ms: i64) {
        let elapsed_s = (now_ms - self.last_ms).max(0) as f64 / 1000.0;
        self.tokens = (self.tokens + rate * elapsed_s).min(burst);
        self.last_ms = now_ms;
    }
}

/// The buckets of one controller, by Kafka's metric tags (user, client id).
#[derive(Debug, Default)]
pub struct MutationQuotas {
    buckets: HashMap<(String, String), Bucket>,
    last_purge_ms: i64,
}

/// Who asks, and how their request is decided: one per request.
#[derive(Debug, Clone)]
pub struct MutationRequest {
    pub principal: String,
    pub client_id: String,
    pub strict: bool,
    /// The longest throttle this request has earned so far (ms).
    pub throttle_ms: u64,
}

impl MutationRequest {
    pub fn new(principal: &str, client_id: &str, strict: bool) -> MutationRequest {
        MutationRequest { principal: principal.to_string(), client_id: client_id.to_string(), strict, throttle_ms: 0 }
    }
}

/// The most tokens a bucket holds at `rate` (Kafka's `TokenBucket` burst).
fn burst(rate: f64) -> f64 {
    f64::from(CONTROLLER_QUOTA_WINDOW_NUM * CONTROLLER_QUOTA_WINDOW_SIZE_SECONDS) * rate
}

/// The time the bucket takes to refill to zero from `tokens` (Kafka's
/// `ControllerMutationQuotaManager.throttleTimeMs`).
fn throttle_ms(tokens: f64, rate: f64) -> u64 {
    (-tokens / rate * 1000.0).round().max(0.0) as u64
}

/// A topic refused by a strict quota: answer THROTTLING_QUOTA_EXCEEDED for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    pub throttle_ms: u64,
}

impl From<Throttled> for crate::ControllerError {
    /// The topic's answer: THROTTLING_QUOTA_EXCEEDED with Kafka's message.
    fn from(_: Throttled) -> crate::ControllerError {
        crate::ControllerError::new(osprey_protocol::ErrorCode::THROTTLING_QUOTA_EXCEEDED, THROTTLED_MESSAGE)
    }
}

impl MutationQuotas {
    /// Before a topic of `request` is changed: in strict mode, refused while the
    /// requester's bucket is below zero (Kafka checks the quota before recording). Always
    /// `Ok` in permissive mode, and without a `controller_mutation_rate` for the requester.
    pub fn admit(
        &mut self,
        quotas: &ClientQuotasImage,
        request: &mut MutationRequest,
        now_ms: i64,
    ) -> Result<(), Throttled> {
        if !request.strict {
            return Ok(());
        }
        let Some((bucket, rate)) = self.bucket(quotas, request, now_ms) else { return Ok(()) };
        if bucket.tokens >= 0.0 {
            return Ok(());
        }
        let ms = throttle_ms(bucket.tokens, rate);
        request.throttle_ms = request.throttle_ms.max(ms);
        Err(Throttled { throttle_ms: ms })
    }

    /// Once a topic of `request` was changed: draws one token per partition created or
    /// deleted. In permissive mode a bucket left below zero throttles the response.
    pub fn draw(&mut self, quotas: &ClientQuotasImage, request: &mut MutationRequest, partitions: u32, now_ms: i64) {
        let strict = request.strict;
        let Some((bucket, rate)) = self.bucket(quotas, request, now_ms) else { return };
        let burst = burst(rate);
        bucket.tokens = (bucket.tokens - f64::from(partitions)).min(burst);
        if !strict && bucket.tokens < 0.0 {
            let ms = throttle_ms(bucket.tokens, rate);
            request.throttle_ms = request.throttle_ms.max(ms);
        }
    }

    /// The requester's bucket, refilled to `now_ms`, and its rate; `None` when no
    /// `controller_mutation_rate` applies to it.
    fn bucket(
        &mut self,
        quotas: &ClientQuotasImage,
        request: &MutationRequest,
        now_ms: i64,
    ) -> Option<(&mut Bucket, f64)> {
        if quotas.is_empty() {
            return None;
        }
        let user = quota_user(&request.principal);
        let applied = quotas.quota_for(CONTROLLER_MUTATION_RATE, user, &request.client_id)?;
        let rate = applied.limit;
        if rate <= 0.0 {
            return None;
        }
        self.purge_idle(now_ms);
        let key = (applied.user_tag, applied.client_id_tag);
        if !self.buckets.contains_key(&key) && self.buckets.len() >= MAX_BUCKETS {
            let oldest = self.buckets.iter().min_by_key(|(_, b)| b.last_ms).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.buckets.remove(&oldest);
            }
        }
        let bucket = self.buckets.entry(key).or_insert(Bucket { tokens: burst(rate), last_ms: now_ms });
        bucket.refill(rate, burst(rate), now_ms);
        Some((bucket, rate))
    }

    fn purge_idle(&mut self, now_ms: i64) {
        if now_ms - self.last_purge_ms >= 60_000 {
            self.last_purge_ms = now_ms;
            self.buckets.retain(|_, b| now_ms - b.last_ms < IDLE_EXPIRY_MS);
        }
    }

    #[cfg(test)]
    fn bucket_count(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client_quotas::{ClientQuotaEntity, EntityName, QuotaValue};

    fn rate_for_user(user: Option<EntityName>, rate: f64) -> ClientQuotasImage {
        let mut image = ClientQuotasImage::default();
        image.apply(&ClientQuotaEntity::new(user, None), CONTROLLER_MUTATION_RATE, QuotaValue(rate), false);
        image
    }

    /// One topic of `partitions` through admit and, if admitted, draw.
    fn record(
        q: &mut MutationQuotas,
        image: &ClientQuotasImage,
        r: &mut MutationRequest,
        partitions: u32,
        now_ms: i64,
    ) -> Result<(), Throttled> {
        q.admit(image, r, now_ms)?;
        q.draw(image, r, partitions, now_ms);
        Ok(())
    }

    fn alice(strict: bool) -> MutationRequest {
        MutationRequest::new("User:alice", "admin", strict)
    }

    #[test]
    fn strict_accepts_while_tokens_remain_then_refuses_until_they_refill() {
        let image = rate_for_user(Some(EntityName::Named("alice".into())), 2.0);
        let mut q = MutationQuotas::default();
        // Burst: 11 windows of 1 s at 2/s = 22 tokens.
        let mut r = alice(true);
        assert_eq!(record(&mut q, &image, &mut r, 20, 0), Ok(()));
        // 2 left: a topic of 30 partitions is still accepted (the bucket was not below
        // zero), leaving -28, with no throttle.
        assert_eq!(record(&mut q, &image, &mut r, 30, 0), Ok(()));
        assert_eq!(r.throttle_ms, 0);
        // The next topic is refused: 28 tokens missing at 2/s is 14 s.
        assert_eq!(record(&mut q, &image, &mut r, 1, 0), Err(Throttled { throttle_ms: 14_000 }));
        assert_eq!(r.throttle_ms, 14_000);
        // Refused topics draw nothing: 4 s later 8 tokens came back, 20 missing.
        let mut later = alice(true);
        assert_eq!(record(&mut q, &image, &mut later, 1, 4_000), Err(Throttled { throttle_ms: 10_000 }));
        // Once refilled to zero it is accepted again.
        let mut refilled = alice(true);
        assert_eq!(record(&mut q, &image, &mut refilled, 1, 14_000), Ok(()));
    }

    #[test]
    fn permissive_accepts_everything_and_throttles_for_the_deficit() {
        let image = rate_for_user(Some(EntityName::Default), 10.0);
        let mut q = MutationQuotas::default();
        let mut r = alice(false);
        // Burst 110: 100 fits, 50 more leaves -40: 4 s.
        assert_eq!(record(&mut q, &image, &mut r, 100, 0), Ok(()));
        assert_eq!(r.throttle_ms, 0);
        assert_eq!(record(&mut q, &image, &mut r, 50, 0), Ok(()));
        assert_eq!(r.throttle_ms, 4_000);
        assert_eq!(record(&mut q, &image, &mut r, 10, 0), Ok(()));
        assert_eq!(r.throttle_ms, 5_000);
    }

    #[test]
    fn the_bucket_never_holds_more_than_the_burst() {
        let mut image = ClientQuotasImage::default();
        let any_client = ClientQuotaEntity::new(None, Some(EntityName::Default));
        image.apply(&any_client, CONTROLLER_MUTATION_RATE, QuotaValue(1.0), false);
        let mut q = MutationQuotas::default();
        let mut r = alice(true);
        // An hour idle refills to 11, not 3600.
        assert_eq!(record(&mut q, &image, &mut r, 11, 3_600_000), Ok(()));
        assert_eq!(record(&mut q, &image, &mut r, 1, 3_600_000), Ok(()));
        assert_eq!(record(&mut q, &image, &mut r, 1, 3_600_000), Err(Throttled { throttle_ms: 1_000 }));
    }

    #[test]
    fn without_a_mutation_rate_nothing_is_counted() {
        let mut image = ClientQuotasImage::default();
        let mut q = MutationQuotas::default();
        let mut r = alice(true);
        assert_eq!(record(&mut q, &image, &mut r, 1_000_000, 0), Ok(()));
        // Another quota key does not count either.
        let any_client = ClientQuotaEntity::new(None, Some(EntityName::Default));
        image.apply(&any_client, "producer_byte_rate", QuotaValue(1.0), false);
        assert_eq!(record(&mut q, &image, &mut r, 1_000_000, 0), Ok(()));
        assert_eq!(q.bucket_count(), 0);
    }

    #[test]
    fn default_user_quotas_measure_each_user_apart() {
        let image = rate_for_user(Some(EntityName::Default), 1.0);
        let mut q = MutationQuotas::default();
        let mut a = alice(true);
        let mut b = MutationRequest::new("User:bob", "admin", true);
        assert_eq!(record(&mut q, &image, &mut a, 12, 0), Ok(()));
        assert!(record(&mut q, &image, &mut a, 1, 0).is_err());
        assert_eq!(record(&mut q, &image, &mut b, 1, 0), Ok(()));
        assert_eq!(q.bucket_count(), 2);
    }

    #[test]
    fn strictness_follows_kafkas_versions() {
        assert!(!is_strict(19, 5) && is_strict(19, 6) && is_strict(19, 7));
        assert!(!is_strict(20, 4) && is_strict(20, 5));
        assert!(!is_strict(37, 2) && is_strict(37, 3));
        assert!(!is_strict(0, 100));
    }
}
