//! Set-up shared by the unit tests: a single-node broker, a broker whose image puts it in
//! a cluster, and runtimes that count where work runs.

use crate::broker::{Broker, Settings};
use crate::config::BrokerConfig;
use crate::dispatch::{Client, Reply, Request};
use osprey_cluster::image::NO_LEADER;
use osprey_cluster::{BrokerListener, MetadataRecord};
use osprey_protocol::{ApiKey, RequestBody, RequestHeader, ResponseBody};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A single-node broker on a fresh data directory named for the test (removed first),
/// listening nowhere yet: its address is a port 0 binding's.
pub fn broker_in(name: &str) -> (Arc<Broker>, PathBuf) {
    broker_with_config(name, |_| {})
}

/// As [`broker_in`], with its static configuration changed by `configure` first.
pub fn broker_with_config(name: &str, configure: impl FnOnce(&mut BrokerConfig)) -> (Arc<Broker>, PathBuf) {
    let dir = std::env::temp_dir().join(format!("osprey-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut settings = Settings::single_node(addr, dir.clone());
    let mut config = (*settings.config).clone();
    configure(&mut config);
    settings.config = Arc::new(config);
    let broker = Broker::open(settings, Box::new(|_: &str, _: &str| Ok(()))).unwrap();
    (broker, dir)
}

/// `body` handled as a request of `api_key` v`version` from an anonymous client on the
/// default listener (authorization included, when the broker has an authorizer), and
/// its answer once it comes.
pub async fn answer(broker: &Arc<Broker>, api_key: ApiKey, version: i16, body: RequestBody) -> ResponseBody {
    let header = RequestHeader { request_api_version: version, ..RequestHeader::default() };
    let client = Client {
        peer: "127.0.0.1:1".parse().unwrap(),
        listener: crate::broker::DEFAULT_LISTENER.into(),
        principal: crate::tls::ANONYMOUS.into(),
    };
    match crate::handlers::handle(broker, Request { api_key, header, body }, &client) {
        Reply::Now(body) => body,
        Reply::Later(pending) | Reply::Ordered(pending) => pending.await,
        other => panic!("{other:?}"),
    }
}

/// A current-thread runtime: it runs its tasks on the thread that blocks on it, so any
/// thread it starts is a blocking-pool thread, counted in the second value.
pub fn counting_runtime() -> (tokio::runtime::Runtime, Arc<AtomicUsize>) {
    let blocking_threads = Arc::new(AtomicUsize::new(0));
    let counted = blocking_threads.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_start(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    (runtime, blocking_threads)
}

/// A broker in a cluster, as its metadata image would have it once it follows the
/// quorum: node 1 (this broker) and 2 registered and unfenced, 3 registered and fenced,
/// 4 never registered, with a topic `t` whose partitions are led here (0), by broker 2
/// (1), and by nobody (2). Internal topics are sized `INTERNAL_PARTITIONS`, so that tests
/// can place them.
pub fn broker_in_cluster(name: &str) -> (Arc<Broker>, PathBuf) {
    let dir = std::env::temp_dir().join(format!("osprey-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut settings = Settings::single_node(addr, dir.clone());
    settings.offsets_topic_num_partitions = INTERNAL_PARTITIONS;
    let mut config = (*settings.config).clone();
    config.transaction_state_log_num_partitions = INTERNAL_PARTITIONS;
    settings.config = Arc::new(config);
    let broker = Broker::open(settings, Box::new(|_: &str, _: &str| Ok(()))).unwrap();
    let this_node = registration(1, "127.0.0.1", addr.port(), "rack-a", false);
    let mut records = vec![
        this_node,
        registration(2, "b2.example", 9092, "rack-b", false),
        registration(3, "b3.example", 9092, "rack-c", true),
    ];
    records.push(create_topic("t", TOPIC_T, vec![vec![1, 2, 3], vec![2, 3, 1], vec![3, 4]]));
    records.push(partition_change(TOPIC_T, 1, 2, vec![2, 1], vec![2, 3, 1], 5));
    records.push(partition_change(TOPIC_T, 2, NO_LEADER, vec![3], vec![3, 4], 7));
    broker.apply_records_for_test(&records);
    (broker, dir)
}

/// Partitions of `__consumer_offsets` and `__transaction_state` on a broker of
/// [`broker_in_cluster`].
pub const INTERNAL_PARTITIONS: i32 = 3;

/// The id of topic `t` of [`broker_in_cluster`].
pub const TOPIC_T: [u8; 16] = [7; 16];

/// Broker `id` registering with one PLAINTEXT listener, as Kafka's RegisterBrokerRecord.
pub fn registration(id: i32, host: &str, port: u16, rack: &str, fenced: bool) -> MetadataRecord {
    let listener = BrokerListener { name: "PLAINTEXT".into(), host: host.into(), port, security_protocol: 0 };
    MetadataRecord::RegisterBroker {
        id,
        epoch: i64::from(id) * 10,
        incarnation: [id as u8; 16],
        listeners: vec![listener],
        rack: Some(rack.into()),
        fenced,
        in_controlled_shutdown: false,
    }
}

/// A topic whose partitions have these replica lists, every replica in the ISR and the
/// first leading.
pub fn create_topic(name: &str, id: [u8; 16], replicas: Vec<Vec<i32>>) -> MetadataRecord {
    MetadataRecord::CreateTopic { name: name.into(), id, replicas, configs: Default::default(), isrs: None }
}

/// A partition's new leader, ISR and replicas at `leader_epoch` (the partition epoch
/// moves with it).
pub fn partition_change(
    topic_id: [u8; 16],
    partition: i32,
    leader: i32,
    isr: Vec<i32>,
    replicas: Vec<i32>,
    leader_epoch: i32,
) -> MetadataRecord {
    MetadataRecord::PartitionChange {
        topic_id,
        partition,
        leader,
        isr,
        elr: Vec::new(),
        last_known_elr: Vec::new(),
        leader_epoch,
        partition_epoch: leader_epoch,
        replicas,
        leader_recovery_state: 0,
        adding_replicas: vec![],
        removing_replicas: vec![],
    }
}
