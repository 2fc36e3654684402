//! The cluster keys (roles, controller quorum, controller listeners, broker membership):
//! Kafka's names and defaults, the layouts issue 14 asks for, and each of Kafka's
//! cross-key rules failing with an error that names the key.

use osprey_server::config::{BrokerConfig, ConfigError, Origin, ProcessRoles, RawConfig};
use std::path::PathBuf;

fn resolve(overrides: &[&str]) -> Result<BrokerConfig, ConfigError> {
    let mut settings = RawConfig::new();
    for o in overrides {
        settings.add_override(o).unwrap();
    }
    settings.resolve().map(|(c, unknown)| {
        assert!(unknown.is_empty(), "unknown keys: {unknown:?}");
        c
    })
}

/// Asserts the error is about `key`, from `--override`, and says `fragment`.
fn assert_rejected(overrides: &[&str], key: &str, fragment: &str) {
    let err = resolve(overrides).expect_err("config should be rejected");
    let message = err.to_string();
    match &err {
        ConfigError::InvalidValue { key: k, origin, .. } => {
            assert_eq!(k, key, "{message}");
            // A key left at its default is reported as such; one set, as --override.
            assert!(matches!(origin, Origin::Override | Origin::Default), "{message}");
        }
        other => panic!("not an InvalidValue: {other:?}"),
    }
    assert!(message.contains(key) && message.contains(fragment), "`{fragment}` not in: {message}");
}

const VOTERS: &str = "controller.quorum.voters=1@127.0.0.1:19093,2@127.0.0.1:29093,3@127.0.0.1:39093";

/// Issue 14's example, for node `n`.
fn issue_example(n: i32) -> Vec<String> {
    vec![
        format!("node.id={n}"),
        "process.roles=broker,controller".into(),
        VOTERS.into(),
        format!("listeners=PLAINTEXT://127.0.0.1:{n}9092,CONTROLLER://127.0.0.1:{n}9093"),
        format!("advertised.listeners=PLAINTEXT://127.0.0.1:{n}9092"),
        "controller.listener.names=CONTROLLER".into(),
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT".into(),
        "inter.broker.listener.name=PLAINTEXT".into(),
        format!("log.dirs=/var/lib/osprey/{n}"),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn defaults_are_kafkas_and_the_single_node() {
    let c = resolve(&[]).unwrap();
    let k = &c.cluster;
    assert_eq!(k.roles, ProcessRoles { broker: true, controller: true });
    assert!(k.voters.is_empty() && k.bootstrap_servers.is_empty());
    assert!(k.controller_listeners.is_empty());
    assert_eq!((k.broker_session_timeout_ms, k.broker_heartbeat_interval_ms), (9000, 2000));
    assert_eq!((k.quorum_election_timeout_ms, k.quorum_fetch_timeout_ms), (1000, 2000));
    assert_eq!(
        (k.quorum_election_backoff_max_ms, k.quorum_request_timeout_ms, k.quorum_retry_backoff_ms),
        (1000, 2000, 20)
    );
    assert_eq!(k.metadata_snapshot_max_new_record_bytes, 20 * 1024 * 1024);
    assert_eq!(k.metadata_snapshot_max_interval_ms, 3_600_000);
    assert_eq!(k.broker_rack, None);
    assert_eq!(k.metadata_log_dir, PathBuf::from("./data"), "the first log.dirs entry");
    assert_eq!(k.beyond_this_node(c.node_id), None);
}

#[test]
fn metadata_log_dir_defaults_to_the_first_log_dir() {
    let c = resolve(&["log.dirs=/a,/b"]).unwrap();
    assert_eq!(c.cluster.metadata_log_dir, PathBuf::from("/a"));
    let c = resolve(&["log.dirs=/a,/b", "metadata.log.dir=/m", "broker.rack=r1"]).unwrap();
    assert_eq!(c.cluster.metadata_log_dir, PathBuf::from("/m"));
    assert_eq!(c.cluster.broker_rack.as_deref(), Some("r1"));
}

#[test]
fn issue_14_example_validates_for_each_of_the_three_nodes() {
    for n in 1..=3 {
        let c = resolve(&strs(&issue_example(n))).unwrap_or_else(|e| panic!("node {n}: {e}"));
        assert_eq!(c.node_id, n);
        assert_eq!(c.cluster.voters.len(), 3);
        assert_eq!(c.cluster.voters[usize::try_from(n - 1).unwrap()].to_string(), format!("{n}@127.0.0.1:{n}9093"));
        assert_eq!(c.cluster.controller_listeners.len(), 1);
        assert_eq!(c.cluster.controller_listeners[0].port, u16::try_from(n * 10_000 + 9093).unwrap());
        assert_eq!(c.cluster.advertised_controller_listeners, c.cluster.controller_listeners);
        assert_eq!(c.advertised_listeners.len(), 1);
        assert_eq!(c.inter_broker_listener_name, "PLAINTEXT");
        let why = c.cluster.beyond_this_node(n).expect("three voters are more than this node");
        assert!(why.contains("controller.quorum.voters"), "{why}");
    }
}

#[test]
fn split_layout_of_three_controllers_and_three_brokers_validates() {
    for n in 1..=3 {
        let controller = [
            format!("node.id={n}"),
            "process.roles=controller".into(),
            VOTERS.into(),
            format!("listeners=CONTROLLER://127.0.0.1:{n}9093"),
            "controller.listener.names=CONTROLLER".into(),
            format!("log.dirs=/var/lib/osprey/c{n}"),
        ];
        let c = resolve(&strs(&controller)).unwrap_or_else(|e| panic!("controller {n}: {e}"));
        assert_eq!(c.cluster.roles, ProcessRoles { broker: false, controller: true });
        assert!(c.advertised_listeners.is_empty());
        assert!(c.cluster.beyond_this_node(n).unwrap().contains("process.roles=controller"));
    }
    for n in 4..=6 {
        let broker = [
            format!("node.id={n}"),
            "process.roles=broker".into(),
            VOTERS.into(),
            format!("listeners=PLAINTEXT://127.0.0.1:{}", 40_000 + n),
            "controller.listener.names=CONTROLLER".into(),
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT".into(),
            format!("broker.rack=rack-{}", n % 2),
            format!("log.dirs=/var/lib/osprey/b{n}"),
        ];
        let c = resolve(&strs(&broker)).unwrap_or_else(|e| panic!("broker {n}: {e}"));
        assert_eq!(c.cluster.roles, ProcessRoles { broker: true, controller: false });
        assert!(c.cluster.controller_listeners.is_empty());
        assert!(c.cluster.beyond_this_node(n).unwrap().contains("process.roles=broker"));
    }
}

#[test]
fn kafkas_dynamic_quorum_form_with_bootstrap_servers_validates() {
    let c = resolve(&[
        "process.roles=broker",
        "node.id=4",
        "controller.quorum.bootstrap.servers=127.0.0.1:19093,127.0.0.1:29093",
        "controller.listener.names=CONTROLLER",
    ])
    .unwrap();
    assert_eq!(c.cluster.bootstrap_servers.len(), 2);
}

#[test]
fn a_single_voter_that_is_this_node_stays_a_single_node() {
    let c = resolve(&[
        "controller.quorum.voters=1@127.0.0.1:9093",
        "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller.listener.names=CONTROLLER",
    ])
    .unwrap();
    assert_eq!(c.cluster.beyond_this_node(1), None);
}

#[test]
fn a_bootstrap_server_elsewhere_is_beyond_this_node() {
    let c = resolve(&[
        "controller.quorum.bootstrap.servers=10.0.0.7:9093",
        "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "controller.listener.names=CONTROLLER",
    ])
    .unwrap();
    assert!(c.cluster.beyond_this_node(1).unwrap().contains("10.0.0.7:9093"));
}

#[test]
fn split_roles_without_voters_or_bootstrap_servers_are_refused() {
    assert_rejected(
        &["process.roles=broker", "controller.listener.names=CONTROLLER"],
        "process.roles",
        "controller.quorum.bootstrap.servers",
    );
    assert_rejected(&["process.roles=controller"], "process.roles", "controller.quorum.voters");
}

#[test]
fn a_controller_must_be_among_the_voters() {
    let mut c = issue_example(4);
    c[1] = "process.roles=broker,controller".into();
    assert_rejected(&strs(&c), "controller.quorum.voters", "this node's id 4");
}

#[test]
fn a_broker_only_node_must_not_be_a_voter() {
    assert_rejected(
        &["process.roles=broker", "node.id=2", VOTERS, "controller.listener.names=CONTROLLER"],
        "controller.quorum.voters",
        "without this node's id 2",
    );
}

#[test]
fn a_broker_only_node_needs_controller_listener_names() {
    assert_rejected(
        &["process.roles=broker", "node.id=4", VOTERS],
        "controller.listener.names",
        "process.roles=broker",
    );
}

#[test]
fn a_broker_only_node_must_not_bind_the_controller_listener() {
    assert_rejected(
        &[
            "process.roles=broker",
            "node.id=4",
            VOTERS,
            "controller.listener.names=CONTROLLER",
            "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        ],
        "listeners",
        "no controller listener when process.roles=broker",
    );
}

#[test]
fn a_controller_only_node_binds_controller_listeners_only() {
    assert_rejected(
        &[
            "process.roles=controller",
            VOTERS,
            "controller.listener.names=CONTROLLER",
            "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        ],
        "listeners",
        "controller listeners only",
    );
}

#[test]
fn a_controller_needs_its_controller_listener_in_listeners() {
    assert_rejected(
        &[
            "process.roles=controller",
            VOTERS,
            "listeners=CONTROLLER://127.0.0.1:9093",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT",
        ],
        "controller.listener.names",
        "controller",
    );
    let mut c = issue_example(1);
    c.push("controller.listener.names=QUORUM".into());
    assert_rejected(&strs(&c), "controller.listener.names", "`QUORUM` is not one");
    // Combined with a quorum configured: a controller listener is required.
    let mut c = issue_example(1);
    c[3] = "listeners=PLAINTEXT://127.0.0.1:19092".into();
    c.retain(|o| !o.starts_with("controller.listener.names"));
    assert_rejected(&strs(&c), "controller.listener.names", "a quorum is configured");
}

#[test]
fn the_inter_broker_listener_cannot_be_the_controller_listener() {
    let mut c = issue_example(1);
    c[7] = "inter.broker.listener.name=CONTROLLER".into();
    assert_rejected(
        &strs(&c),
        "inter.broker.listener.name",
        "the valid options based on the configured listeners are PLAINTEXT",
    );
}

#[test]
fn the_inter_broker_listener_must_be_advertised() {
    let mut c = issue_example(1);
    c[3] = "listeners=PLAINTEXT://127.0.0.1:19092,REPLICATION://127.0.0.1:19094,CONTROLLER://127.0.0.1:19093".into();
    c[6] = "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT,CONTROLLER:PLAINTEXT".into();
    c[7] = "inter.broker.listener.name=REPLICATION".into();
    assert_rejected(&strs(&c), "inter.broker.listener.name", "advertised.listeners");
}

#[test]
fn advertised_controller_listeners_are_kept_apart_from_client_ones() {
    let mut c = issue_example(2);
    c[4] = "advertised.listeners=PLAINTEXT://broker2.example:9092,CONTROLLER://controller2.example:9093".into();
    let c = resolve(&strs(&c)).unwrap();
    assert_eq!(c.advertised_listeners.len(), 1);
    assert_eq!(c.advertised_listeners[0].host, "broker2.example");
    assert_eq!(c.cluster.advertised_controller_listeners[0].host, "controller2.example");
    assert_eq!(c.cluster.controller_listeners[0].host, "127.0.0.1");
}

#[test]
fn malformed_voters_and_bootstrap_servers_name_the_key() {
    assert_rejected(&["controller.quorum.voters=1@127.0.0.1"], "controller.quorum.voters", "{id}@{host}:{port}");
    assert_rejected(&["controller.quorum.voters=one@127.0.0.1:9093"], "controller.quorum.voters", "not a node id");
    assert_rejected(
        &["controller.quorum.voters=1@127.0.0.1:9093:q2QEQBBdQIm2b8eNQfN5Dg"],
        "controller.quorum.voters",
        "{id}@{host}:{port}",
    );
    assert_rejected(
        &[
            "controller.quorum.voters=1@a:9093,1@b:9093",
            "listeners=PLAINTEXT://a:9092,CONTROLLER://a:9093",
            "controller.listener.names=CONTROLLER",
        ],
        "controller.quorum.voters",
        "`1` appears twice",
    );
    assert_rejected(
        &["controller.quorum.bootstrap.servers=localhost"],
        "controller.quorum.bootstrap.servers",
        "host:port",
    );
}

#[test]
fn quorum_timeouts_are_bounded() {
    assert_rejected(&["controller.quorum.election.timeout.ms=0"], "controller.quorum.election.timeout.ms", ">= 1");
    assert_rejected(&["broker.session.timeout.ms=-5"], "broker.session.timeout.ms", ">= 1");
    assert_rejected(
        &["metadata.log.max.record.bytes.between.snapshots=0"],
        "metadata.log.max.record.bytes.between.snapshots",
        ">= 1",
    );
    assert_rejected(&["metadata.log.dir="], "metadata.log.dir", "non-empty");
}

#[test]
fn a_cluster_sasl_inter_broker_listener_needs_an_enabled_mechanism_and_a_login() {
    let sasl_listeners = [
        "node.id=1",
        "process.roles=broker,controller",
        VOTERS,
        "listeners=CLIENT://127.0.0.1:19092,INTERNAL://127.0.0.1:19094,CONTROLLER://127.0.0.1:19093",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CLIENT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "inter.broker.listener.name=CLIENT",
    ];
    let with = |more: &[&'static str]| [&sasl_listeners[..], more].concat();
    // Kafka's default mechanism, GSSAPI, is not served.
    assert_rejected(&with(&[]), "sasl.mechanism.inter.broker.protocol", "enabled on inter-broker listener CLIENT");
    // A mechanism the listener does not enable.
    assert_rejected(
        &with(&["sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256"]),
        "sasl.mechanism.inter.broker.protocol",
        "(SCRAM-SHA-512)",
    );
    // Enabled, but no user to log in as.
    assert_rejected(
        &with(&["sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512"]),
        "listener.name.client.scram-sha-512.sasl.jaas.config",
        "username",
    );
    let jaas =
        "listener.name.client.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \
                required username=\"broker\" password=\"broker-secret\";";
    let config = resolve(&with(&["sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512", jaas])).unwrap();
    let login = config.inter_broker_sasl().unwrap().expect("a login");
    assert_eq!((login.mechanism.name(), login.username.as_str()), ("SCRAM-SHA-512", "broker"));
    assert_eq!(login.password.0, "broker-secret");
    // Clients on SASL, brokers on PLAINTEXT: no login.
    let mut internal_plain = sasl_listeners.to_vec();
    internal_plain.push("inter.broker.listener.name=INTERNAL");
    let config = resolve(&internal_plain).unwrap();
    assert_eq!(config.inter_broker_listener_name, "INTERNAL");
    assert_eq!(config.inter_broker_sasl().unwrap(), None);
    // A single node has no other broker to reach: its only listener may be SASL without
    // a login.
    let single = resolve(&["listeners=SASL_PLAINTEXT://127.0.0.1:9092", "sasl.enabled.mechanisms=SCRAM-SHA-256"]);
    assert_eq!(single.unwrap().inter_broker_listener_name, "SASL_PLAINTEXT");
}

#[test]
fn a_controller_listener_may_be_ssl_with_a_key_store_and_never_sasl() {
    let node = |map: &'static str| {
        vec![
            "node.id=4",
            "process.roles=broker",
            VOTERS,
            "listeners=PLAINTEXT://127.0.0.1:19092",
            "controller.listener.names=CONTROLLER",
            map,
        ]
    };
    // A broker-only node reaches the controllers with the controller listener's TLS: it
    // needs its key store too, and says so before starting.
    assert_rejected(
        &node("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SSL"),
        "ssl.keystore.location",
        "a PEM key store for SSL listener CONTROLLER",
    );
    let combined = |map: &'static str| {
        vec![
            "node.id=1",
            "process.roles=broker,controller",
            VOTERS,
            "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
            "controller.listener.names=CONTROLLER",
            map,
        ]
    };
    assert_rejected(
        &combined("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL"),
        "listener.security.protocol.map",
        "do not authenticate with SASL",
    );
    let plain = resolve(&combined("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT")).unwrap();
    assert!(plain.controller_tls_settings().unwrap().is_none());
}
