//! The active controller's gauges (Kafka's ActiveControllerCount, FencedBrokerCount,
//! ActiveBrokerCount, OfflinePartitionsCount), read through a recorder installed for
//! this test binary alone: the gauges are process-wide and other tests' controllers
//! would write them too.

#[path = "support/controller_cluster.rs"]
mod controller_cluster;

use controller_cluster::*;
use metrics::{Counter, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Values = Arc<Mutex<BTreeMap<String, f64>>>;

/// Keeps the last value each gauge was set to.
struct Capture(Values);

struct CapturedGauge(String, Values);

impl GaugeFn for CapturedGauge {
    fn increment(&self, value: f64) {
        *self.1.lock().unwrap().entry(self.0.clone()).or_default() += value;
    }
    fn decrement(&self, value: f64) {
        *self.1.lock().unwrap().entry(self.0.clone()).or_default() -= value;
    }
    fn set(&self, value: f64) {
        self.1.lock().unwrap().insert(self.0.clone(), value);
    }
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(Arc::new(CapturedGauge(key.name().to_string(), self.0.clone())))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn gauges_follow_brokers_and_offline_partitions() {
    let values = Values::default();
    metrics::set_global_recorder(Capture(values.clone())).expect("the only recorder of this binary");
    let gauge = |name: &str| values.lock().unwrap().get(name).copied();
    let c = Cluster::start().await;
    let at = c.active().await;
    assert_eq!(gauge("osprey_controller_active"), Some(1.0));
    c.three_unfenced_brokers().await;
    assert_eq!(c.create_topic(at, "t", 4, 3).await.error_code, 0);
    // Refreshed at most once a second; the timer brings them up to date.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(gauge("osprey_controller_active_brokers"), Some(3.0));
    assert_eq!(gauge("osprey_controller_fenced_brokers"), Some(0.0));
    assert_eq!(gauge("osprey_controller_offline_partitions"), Some(0.0));
    // No heartbeats: every session expires, every broker is fenced, every partition
    // loses its last leader.
    tokio::time::sleep(Duration::from_millis(2 * SESSION_TIMEOUT_MS as u64)).await;
    assert!(c.image(at).brokers().all(|b| b.fenced));
    assert_eq!(gauge("osprey_controller_active_brokers"), Some(0.0));
    assert_eq!(gauge("osprey_controller_fenced_brokers"), Some(3.0));
    assert_eq!(gauge("osprey_controller_offline_partitions"), Some(4.0));
    assert_eq!(gauge("osprey_controller_active"), Some(1.0));
}
