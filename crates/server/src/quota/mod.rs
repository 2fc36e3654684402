//! Client quota enforcement, as Kafka's `ClientQuotaManager` does it (KIP-13, KIP-55,
//! KIP-124, KIP-219): a Produce's request bytes are measured against
//! `producer_byte_rate`, a consumer's Fetch response bytes against `consumer_byte_rate`,
//! the time a handler spends on each request against `request_percentage`, each over
//! Kafka's sampled windows ([`rate`]); a client over its quota gets its response at
//! once, with `throttle_time_ms` set to how long it would take at the quota to make up
//! the excess (the larger of the two when a Produce or Fetch is over both), and its
//! connection is then muted, no further request handled, for that long.
//!
//! The quota that applies comes from the metadata image with Kafka's precedence
//! (`ClientQuotasImage::quota_for`), and with it who shares the measurement: every
//! connection of a user with a `/users/alice` quota is measured together, whereas a
//! `/users/default` quota measures each user apart (Kafka's metric tags).
//!
//! Followers' fetches and WriteTxnMarkers are brokers' traffic, not clients', and are
//! never metered (Kafka exempts inter-broker principals).

pub mod mutations;
pub mod rate;

use crate::broker::Broker;
use crate::dispatch::{Answer, Reply};
use crate::telemetry;
use osprey_cluster::client_quotas::{
    quota_user, ClientQuotasImage, CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE,
};
use osprey_protocol::{RequestBody, ResponseBody};
use rate::SampledRate;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A sensor nobody recorded into for this long is dropped (Kafka's
/// `inactiveSensorExpirationTimeSeconds`, an hour).
const SENSOR_IDLE_EXPIRY_MS: i64 = 3600 * 1000;
/// Idle sensors are looked for at most this often.
const SENSOR_PURGE_INTERVAL_MS: i64 = 60 * 1000;
/// The most sensors kept: a client cycling through client ids cannot grow the map past
/// it (the least recently used one goes first).
const MAX_SENSORS: usize = 100_000;
/// A request-time throttle is at most one quota window, as Kafka's
/// `ClientRequestQuotaManager` bounds it: one slow request does not mute a client for long.
const MAX_REQUEST_THROTTLE_MS: u64 = rate::QUOTA_WINDOW_SIZE_MS as u64;

/// The quotas Osprey enforces, with the key that sets each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaType {
    Produce,
    Fetch,
    Request,
}

impl QuotaType {
    /// The quota key (`producer_byte_rate`, ...).
    pub fn key(self) -> &'static str {
        match self {
            QuotaType::Produce => PRODUCER_BYTE_RATE,
            QuotaType::Fetch => CONSUMER_BYTE_RATE,
            QuotaType::Request => REQUEST_PERCENTAGE,
        }
    }

    /// Kafka's quota type name, the `quota` label of the metrics.
    pub fn label(self) -> &'static str {
        match self {
            QuotaType::Produce => "produce",
            QuotaType::Fetch => "fetch",
            QuotaType::Request => "request",
        }
    }
}

/// What one request is metered for, decided from the request before it is handled:
/// always its handler time (`request_percentage`), and for some its bytes.
#[derive(Debug, Clone)]
pub struct Metered {
    /// `Produce` or `Fetch` when the request's bytes count too.
    pub bandwidth: Option<QuotaType>,
    /// The request's client id (empty when it sent none).
    pub client_id: String,
    /// The size of the request (for a Produce, what is measured).
    pub request_bytes: usize,
}

/// The metering of a request; `None` for brokers' requests.
pub fn metered(body: &RequestBody, version: i16, client_id: Option<&str>, request_bytes: usize) -> Option<Metered> {
    let bandwidth = match body {
        RequestBody::Produce(_) => Some(QuotaType::Produce),
        RequestBody::Fetch(r) => {
            let replica_id = if version >= 15 { r.replica_state.replica_id } else { r.replica_id };
            if replica_id >= 0 {
                return None;
            }
            Some(QuotaType::Fetch)
        }
        RequestBody::WriteTxnMarkers(_) => return None,
        _ => None,
    };
    Some(Metered { bandwidth, client_id: client_id.unwrap_or_default().to_string(), request_bytes })
}

/// The rate sensors of one broker, by quota type and Kafka's metric tags.
#[derive(Debug, Default)]
pub struct ClientQuotaManager {
    sensors: Mutex<Sensors>,
}

#[derive(Debug, Default)]
struct Sensors {
    by_tags: HashMap<SensorKey, Sensor>,
    last_purge_ms: i64,
}

/// (quota type, user tag, client-id tag).
type SensorKey = (QuotaType, String, String);

#[derive(Debug, Default)]
struct Sensor {
    rate: SampledRate,
    last_record_ms: i64,
}

impl ClientQuotaManager {
    /// Records `value` for the client and answers its throttle time in milliseconds (0:
    /// within its quota, or no quota applies), as Kafka's
    /// `recordAndGetThrottleTimeMs`. `now_ms` is any monotonic clock in milliseconds.
    pub fn record(
        &self,
        quotas: &ClientQuotasImage,
        quota: QuotaType,
        principal: &str,
        client_id: &str,
        value: f64,
        now_ms: i64,
    ) -> u64 {
        if quotas.is_empty() {
            return 0;
        }
        let Some(applied) = quotas.quota_for(quota.key(), quota_user(principal), client_id) else { return 0 };
        let key = (quota, applied.user_tag, applied.client_id_tag);
        let mut sensors = self.sensors.lock().expect("quota sensors poisoned");
        sensors.purge_idle(now_ms);
        if !sensors.by_tags.contains_key(&key) {
            sensors.make_room();
        }
        let sensor = sensors.by_tags.entry(key).or_default();
        sensor.last_record_ms = now_ms;
        rate::record_and_throttle_ms(&mut sensor.rate, value, applied.limit, now_ms)
    }

    #[cfg(test)]
    fn sensor_count(&self) -> usize {
        self.sensors.lock().unwrap().by_tags.len()
    }
}

impl Sensors {
    /// Drops idle sensors, at most once a [`SENSOR_PURGE_INTERVAL_MS`].
    fn purge_idle(&mut self, now_ms: i64) {
        if now_ms - self.last_purge_ms >= SENSOR_PURGE_INTERVAL_MS {
            self.last_purge_ms = now_ms;
            self.by_tags.retain(|_, s| now_ms - s.last_record_ms < SENSOR_IDLE_EXPIRY_MS);
        }
    }

    /// Before a new sensor: drops the least recently used one when at [`MAX_SENSORS`].
    fn make_room(&mut self) {
        if self.by_tags.len() >= MAX_SENSORS {
            let oldest = self.by_tags.iter().min_by_key(|(_, s)| s.last_record_ms).map(|(k, _)| k.clone());
            if let Some(key) = oldest {
                self.by_tags.remove(&key);
            }
        }
    }
}

/// When a connection may next have a request handled (KIP-219's muted channel).
#[derive(Debug, Default)]
pub struct Mute {
    until: Mutex<Option<Instant>>,
}

impl Mute {
    /// Mutes the connection for `ms` from now, unless it already is for longer.
    pub fn extend(&self, ms: u64) {
        if ms == 0 {
            return;
        }
        let end = Instant::now() + Duration::from_millis(ms);
        let mut until = self.until.lock().expect("mute poisoned");
        if until.is_none_or(|u| u < end) {
            *until = Some(end);
        }
    }

    /// Waits until the connection is no longer muted.
    pub async fn wait(&self) {
        let until = self.until.lock().expect("mute poisoned").take();
        if let Some(until) = until {
            tokio::time::sleep_until(until).await;
        }
    }
}

/// The reply to a metered request, throttled: its handler time recorded, and its bytes
/// (a Produce's request now, a Fetch's response once ready), `throttle_time_ms` set in
/// the response, and the connection muted for it once the response is on its way.
pub fn throttle(
    broker: &Arc<Broker>,
    principal: &Arc<str>,
    metered: Metered,
    handler_time: Duration,
    reply: Reply,
    mute: &Arc<Mute>,
) -> Reply {
    if broker.image().client_quotas().is_empty() {
        // No quota set anywhere: nothing to measure, and the response stays as it is.
        return reply;
    }
    // Kafka records a request's thread time as a percentage of a second, so that the
    // rate per second is a percentage of one thread.
    let percent_seconds = handler_time.as_nanos() as f64 * 100.0 / 1e9;
    let request_ms = record(broker, principal, QuotaType::Request, &metered.client_id, percent_seconds);
    match metered.bandwidth {
        Some(QuotaType::Produce) => {
            let bytes = metered.request_bytes as f64;
            let ms = record(broker, principal, QuotaType::Produce, &metered.client_id, bytes).max(request_ms);
            mute.extend(ms);
            map_body(reply, move |body| set_throttle_time(body, ms))
        }
        Some(QuotaType::Fetch) => {
            mute.extend(request_ms);
            let broker = broker.clone();
            let principal = principal.clone();
            let mute = mute.clone();
            map_answer(reply, move |answer| {
                let bytes = answer.records_bytes() as f64;
                let ms = record(&broker, &principal, QuotaType::Fetch, &metered.client_id, bytes).max(request_ms);
                mute.extend(ms);
                if ms == 0 {
                    return answer;
                }
                // A throttled Fetch is answered without its records, and their bytes are
                // taken back off the consumer's rate, as Kafka's `handleFetchRequest`
                // does: the consumer fetches them again once the throttle is over.
                // Partitions, high watermarks and errors still go out.
                unrecord(&broker, &principal, QuotaType::Fetch, &metered.client_id, bytes);
                Answer { body: set_throttle_time(without_records(answer.body), ms), chunks: Vec::new() }
            })
        }
        _ => {
            mute.extend(request_ms);
            let mute = mute.clone();
            map_body(reply, move |body| {
                // CreateTopics, DeleteTopics and CreatePartitions come back from the
                // controller (this node's, or the cluster's active one) with the
                // controller mutation quota's throttle: the connection is muted for it,
                // as Kafka's brokers mute for a forwarded request's throttle.
                let mutation_ms = mutation_throttle_ms(&body);
                if mutation_ms > 0 {
                    telemetry::quota_throttled("controller_mutation", mutation_ms);
                }
                let ms = request_ms.max(mutation_ms);
                mute.extend(ms);
                set_throttle_time(body, ms)
            })
        }
    }
}

/// The controller mutation quota's throttle a response carries (0 for other APIs).
fn mutation_throttle_ms(body: &ResponseBody) -> u64 {
    let ms = match body {
        ResponseBody::CreateTopics(r) => r.throttle_time_ms,
        ResponseBody::DeleteTopics(r) => r.throttle_time_ms,
        ResponseBody::CreatePartitions(r) => r.throttle_time_ms,
        _ => 0,
    };
    u64::try_from(ms).unwrap_or(0)
}

/// A Fetch response with every partition's records emptied.
fn without_records(mut body: ResponseBody) -> ResponseBody {
    if let ResponseBody::Fetch(r) = &mut body {
        for p in r.responses.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
            if p.records.is_some() {
                p.records = Some(Default::default());
            }
        }
    }
    body
}

/// Takes `value` back off the client's `quota` sensor (Kafka's `unrecordQuotaSensor`).
fn unrecord(broker: &Broker, principal: &str, quota: QuotaType, client_id: &str, value: f64) {
    let image = broker.image();
    broker.client_quotas.record(image.client_quotas(), quota, principal, client_id, -value, monotonic_ms());
}

/// The most record bytes a consumer's Fetch may carry under its `consumer_byte_rate`:
/// what the quota allows over the windows it is measured on (Kafka's
/// `getMaxValueInQuotaWindow`, which caps the fetch's `max_bytes`). Without the cap a
/// fetch larger than that is throttled every time and, answered without its records,
/// never gets any. `None` without a quota (and for followers, never metered).
pub fn fetch_window_bytes(broker: &Broker, principal: &str, client_id: &str) -> Option<i32> {
    let image = broker.image();
    let quotas = image.client_quotas();
    if quotas.is_empty() {
        return None;
    }
    let applied = quotas.quota_for(CONSUMER_BYTE_RATE, quota_user(principal), client_id)?;
    let windows = (rate::QUOTA_WINDOW_NUM - 1) as f64 * rate::QUOTA_WINDOW_SIZE_MS as f64 / 1000.0;
    Some((applied.limit * windows).clamp(1.0, f64::from(i32::MAX)) as i32)
}

/// Records `value` against the client's `quota`; its throttle time (bounded for request
/// time), counted in the metrics.
fn record(broker: &Broker, principal: &str, quota: QuotaType, client_id: &str, value: f64) -> u64 {
    let image = broker.image();
    let mut ms = broker.client_quotas.record(image.client_quotas(), quota, principal, client_id, value, monotonic_ms());
    if quota == QuotaType::Request {
        ms = ms.min(MAX_REQUEST_THROTTLE_MS);
    }
    if ms > 0 {
        telemetry::quota_throttled(quota.label(), ms);
    }
    ms
}

/// Milliseconds on a monotonic clock (since the first call).
pub(crate) fn monotonic_ms() -> i64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(std::time::Instant::now);
    i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX)
}

/// `reply` with `f` applied to its response, now or once it resolves.
fn map_body(reply: Reply, f: impl FnOnce(ResponseBody) -> ResponseBody + Send + 'static) -> Reply {
    match reply {
        Reply::Now(body) => Reply::Now(f(body)),
        Reply::Later(pending) => Reply::Later(Box::pin(async move { f(pending.await) })),
        Reply::Ordered(pending) => Reply::Ordered(Box::pin(async move { f(pending.await) })),
        Reply::Records(pending) => Reply::Records(Box::pin(async move {
            let Answer { body, chunks } = pending.await;
            Answer { body: f(body), chunks }
        })),
        other @ (Reply::Nothing | Reply::Close(_)) => other,
    }
}

/// `reply` with `f` applied to its answer (record chunks included), now or once it
/// resolves.
fn map_answer(reply: Reply, f: impl FnOnce(Answer) -> Answer + Send + 'static) -> Reply {
    match reply {
        Reply::Records(pending) => Reply::Records(Box::pin(async move { f(pending.await) })),
        other => map_body(other, move |body| f(Answer { body, chunks: Vec::new() }).body),
    }
}

/// Sets the response's `throttle_time_ms` to at least `ms` (versions without the field
/// do not encode it; the connection is muted all the same).
fn set_throttle_time(mut body: ResponseBody, ms: u64) -> ResponseBody {
    if ms == 0 {
        return body;
    }
    let ms = i32::try_from(ms).unwrap_or(i32::MAX);
    macro_rules! raise {
        ($($api:ident),* $(,)?) => {
            match &mut body {
                $(ResponseBody::$api(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),)*
                _ => {}
            }
        };
    }
    // Every response the broker serves that has the field.
    raise!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        TxnOffsetCommit,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        DescribeConfigs,
        AlterConfigs,
        DescribeLogDirs,
        CreatePartitions,
        DeleteGroups,
        ElectLeaders,
        IncrementalAlterConfigs,
        AlterPartitionReassignments,
        ListPartitionReassignments,
        OffsetDelete,
        DescribeClientQuotas,
        AlterClientQuotas,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeCluster,
        DescribeProducers,
        DescribeTransactions,
        ListTransactions,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        ShareGroupHeartbeat,
        ShareGroupDescribe,
        ShareFetch,
        ShareAcknowledge,
        DescribeShareGroupOffsets,
        AlterShareGroupOffsets,
        DeleteShareGroupOffsets,
        GetTelemetrySubscriptions,
        PushTelemetry,
        DescribeTopicPartitions,
    );
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_cluster::client_quotas::{ClientQuotaEntity, EntityName, QuotaValue};

    fn quotas(entities: &[(Option<EntityName>, Option<EntityName>, f64)]) -> ClientQuotasImage {
        let mut image = ClientQuotasImage::default();
        for (user, client, value) in entities {
            let entity = ClientQuotaEntity::new(user.clone(), client.clone());
            image.apply(&entity, PRODUCER_BYTE_RATE, QuotaValue(*value), false);
        }
        image
    }

    fn named(n: &str) -> Option<EntityName> {
        Some(EntityName::Named(n.into()))
    }

    #[test]
    fn without_a_quota_nothing_is_measured() {
        let manager = ClientQuotaManager::default();
        let none = ClientQuotasImage::default();
        assert_eq!(manager.record(&none, QuotaType::Produce, "User:alice", "app", 1e12, 0), 0);
        let bob_only = quotas(&[(named("bob"), None, 1.0)]);
        assert_eq!(manager.record(&bob_only, QuotaType::Produce, "User:alice", "app", 1e12, 0), 0);
        assert_eq!(manager.record(&bob_only, QuotaType::Fetch, "User:bob", "app", 1e12, 0), 0);
        assert_eq!(manager.sensor_count(), 0);
    }

    #[test]
    fn a_user_quota_is_shared_by_its_clients_and_a_default_one_is_not() {
        let manager = ClientQuotaManager::default();
        let image = quotas(&[(named("alice"), None, 1000.0), (Some(EntityName::Default), None, 1000.0)]);
        // Alice's two clients share one measurement: 6000 + 6000 over 10 s is over 1000/s.
        assert_eq!(manager.record(&image, QuotaType::Produce, "User:alice", "a", 6000.0, 0), 0);
        assert_eq!(manager.record(&image, QuotaType::Produce, "User:alice", "b", 6000.0, 0), 2000);
        // Bob and carol, under the default, are measured apart.
        assert_eq!(manager.record(&image, QuotaType::Produce, "User:bob", "a", 6000.0, 0), 0);
        assert_eq!(manager.record(&image, QuotaType::Produce, "User:carol", "a", 6000.0, 0), 0);
        assert_eq!(manager.sensor_count(), 3);
    }

    #[test]
    fn idle_sensors_are_dropped_after_an_hour() {
        let manager = ClientQuotaManager::default();
        let image = quotas(&[(None, Some(EntityName::Default), 1000.0)]);
        manager.record(&image, QuotaType::Produce, "User:ANONYMOUS", "a", 1.0, 0);
        manager.record(&image, QuotaType::Produce, "User:ANONYMOUS", "b", 1.0, SENSOR_IDLE_EXPIRY_MS - 1);
        assert_eq!(manager.sensor_count(), 2);
        let later = SENSOR_IDLE_EXPIRY_MS + SENSOR_PURGE_INTERVAL_MS;
        manager.record(&image, QuotaType::Produce, "User:ANONYMOUS", "b", 1.0, later);
        assert_eq!(manager.sensor_count(), 1);
    }

    #[test]
    fn followers_fetches_are_not_metered() {
        use osprey_protocol::messages::FetchRequest;
        let follower = RequestBody::Fetch(FetchRequest { replica_id: 2, ..Default::default() });
        assert!(metered(&follower, 12, Some("broker-2"), 100).is_none());
        let consumer = RequestBody::Fetch(FetchRequest { replica_id: -1, ..Default::default() });
        let m = metered(&consumer, 12, Some("app"), 100).unwrap();
        assert_eq!((m.bandwidth, m.client_id.as_str()), (Some(QuotaType::Fetch), "app"));
    }

    #[test]
    fn request_time_is_measured_as_a_percentage_of_one_thread() {
        let manager = ClientQuotaManager::default();
        let mut image = ClientQuotasImage::default();
        let app = ClientQuotaEntity::new(None, named("app"));
        image.apply(&app, REQUEST_PERCENTAGE, QuotaValue(10.0), false);
        // 10% of a thread over the first ten windows is one second of handler time: 500
        // ms twice is within it, a third 500 ms is half a second over, five windows'
        // worth at 10%.
        let half_second_in_percent_seconds = 50.0;
        for expected in [0, 0, 5000] {
            let ms =
                manager.record(&image, QuotaType::Request, "User:ANONYMOUS", "app", half_second_in_percent_seconds, 0);
            assert_eq!(ms, expected);
        }
    }

    #[test]
    fn throttle_time_goes_into_the_response_and_never_lowers_it() {
        use osprey_protocol::messages::ProduceResponse;
        let body = ResponseBody::Produce(ProduceResponse { throttle_time_ms: 50, ..Default::default() });
        let ResponseBody::Produce(r) = set_throttle_time(body, 20) else { unreachable!() };
        assert_eq!(r.throttle_time_ms, 50);
        let ResponseBody::Produce(r) = set_throttle_time(ResponseBody::Produce(r), 700) else { unreachable!() };
        assert_eq!(r.throttle_time_ms, 700);
    }
}
