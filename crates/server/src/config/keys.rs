//! The table of every broker and topic config key Osprey knows: Kafka's names, types,
//! defaults and ranges. Everything else in `config` (parsing, `--help`, DescribeConfigs,
//! topic validation) is driven from these two tables, so a key is added in one place.

use super::value::Validator::{self, *};

/// A config's type as DescribeConfigs (v3+) reports it; the discriminants are Kafka's
/// `DescribeConfigsResponse.ConfigType` ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i8)]
pub enum ConfigType {
    /// Not known.
    Unknown = 0,
    /// `true` / `false` (case-insensitive).
    Boolean = 1,
    /// Free text.
    String = 2,
    /// 32-bit signed integer.
    Int = 3,
    /// 16-bit signed integer.
    Short = 4,
    /// 64-bit signed integer.
    Long = 5,
    /// 64-bit float.
    Double = 6,
    /// Comma-separated list.
    List = 7,
    /// A Java class name (Osprey has none).
    Class = 8,
    /// Secret text, reported as sensitive with a null value.
    Password = 9,
}

impl ConfigType {
    /// The id DescribeConfigs puts on the wire.
    pub fn id(self) -> i8 {
        self as i8
    }

    /// Lower-case name, as Kafka's docs print it.
    pub fn name(self) -> &'static str {
        match self {
            ConfigType::Unknown => "unknown",
            ConfigType::Boolean => "boolean",
            ConfigType::String => "string",
            ConfigType::Int => "int",
            ConfigType::Short => "short",
            ConfigType::Long => "long",
            ConfigType::Double => "double",
            ConfigType::List => "list",
            ConfigType::Class => "class",
            ConfigType::Password => "password",
        }
    }
}

/// Where a config value came from, as DescribeConfigs reports it; the discriminants are
/// Kafka's `DescribeConfigsResponse.ConfigSource` ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i8)]
pub enum ConfigSource {
    /// Not known.
    Unknown = 0,
    /// Set on the topic (CreateTopics / AlterConfigs).
    DynamicTopicConfig = 1,
    /// Set dynamically for this broker.
    DynamicBrokerConfig = 2,
    /// Set dynamically as the cluster-wide broker default.
    DynamicDefaultBrokerConfig = 3,
    /// Set in `server.properties` or by `--override`.
    StaticBrokerConfig = 4,
    /// The built-in default.
    DefaultConfig = 5,
    /// A broker logger level.
    DynamicBrokerLoggerConfig = 6,
    /// A client metrics subscription (Kafka 3.7+).
    ClientMetricsConfig = 7,
    /// A consumer group config (Kafka 3.8+).
    GroupConfig = 8,
}

impl ConfigSource {
    /// The id DescribeConfigs puts on the wire.
    pub fn id(self) -> i8 {
        self as i8
    }
}

/// Sections of `--help`, in the order they are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    /// Identity and roles.
    Server,
    /// The controller quorum and broker membership (KRaft).
    Cluster,
    /// Where the broker listens and what it advertises.
    Listeners,
    /// Socket and request limits.
    Network,
    /// Defaults for new topics.
    Topics,
    /// Log directories, segments and flushing.
    Log,
    /// Retention and compaction.
    Retention,
    /// Replication.
    Replication,
    /// The group coordinator and `__consumer_offsets`.
    Groups,
    /// The transaction coordinator and producer ids.
    Transactions,
    /// Metrics.
    Metrics,
}

impl Group {
    /// Every group, in `--help` order.
    pub const ALL: [Group; 11] = [
        Group::Server,
        Group::Cluster,
        Group::Listeners,
        Group::Network,
        Group::Topics,
        Group::Log,
        Group::Retention,
        Group::Replication,
        Group::Groups,
        Group::Transactions,
        Group::Metrics,
    ];

    /// Section title in `--help`.
    pub fn title(self) -> &'static str {
        match self {
            Group::Server => "Server",
            Group::Cluster => "Cluster (controller quorum and brokers; checked now, acted on once multi-node clusters exist: issue 14)",
            Group::Listeners => "Listeners",
            Group::Network => "Network and request limits",
            Group::Topics => "Topic defaults",
            Group::Log => "Log storage",
            Group::Retention => "Retention and compaction",
            Group::Replication => "Replication",
            Group::Groups => "Group coordinator",
            Group::Transactions => "Transactions and producer ids",
            Group::Metrics => "Metrics",
        }
    }
}

/// One broker config key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConfigKey {
    /// Kafka's exact key (`log.retention.ms`); Osprey-only keys start with `osprey.`.
    pub name: &'static str,
    /// Kafka's type for it.
    pub config_type: ConfigType,
    /// Osprey's default as text; `None` is Kafka's `null` (unset; another key or rule
    /// decides, see `doc`).
    pub default: Option<&'static str>,
    /// Kafka's default, only where Osprey deliberately uses a different one.
    pub kafka_default: Option<&'static str>,
    /// Allowed values beyond the type.
    pub validator: Validator,
    /// One line for `--help` and DescribeConfigs.
    pub doc: &'static str,
    /// `--help` section.
    pub group: Group,
    /// Secrets (passwords and inline private keys) are reported with a null value.
    pub sensitive: bool,
}

impl ConfigKey {
    const fn new(
        name: &'static str,
        config_type: ConfigType,
        default: Option<&'static str>,
        validator: Validator,
        group: Group,
        doc: &'static str,
    ) -> ConfigKey {
        ConfigKey { name, config_type, default, kafka_default: None, validator, doc, group, sensitive: false }
    }

    /// Marks a default Osprey chose over Kafka's (`kafka` is Kafka's).
    const fn osprey_default(mut self, kafka: &'static str) -> ConfigKey {
        self.kafka_default = Some(kafka);
        self
    }

    /// Marks a secret: DescribeConfigs reports it with a null value.
    const fn secret(mut self) -> ConfigKey {
        self.sensitive = true;
        self
    }

    /// The per-topic config this broker key is the default for (`log.retention.ms` →
    /// `retention.ms`), if any.
    pub fn topic_name(&self) -> Option<&'static str> {
        TOPIC_KEYS.iter().find(|t| t.broker_synonyms.contains(&self.name)).map(|t| t.name)
    }
}

/// One per-topic config key (CreateTopics / AlterConfigs / DescribeConfigs on a topic).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TopicKey {
    /// Kafka's topic-level name (`retention.ms`).
    pub name: &'static str,
    /// Kafka's type for it.
    pub config_type: ConfigType,
    /// Allowed values beyond the type (Kafka's `LogConfig` ranges).
    pub validator: Validator,
    /// The broker keys that supply its default, highest precedence first.
    pub broker_synonyms: &'static [&'static str],
    /// One line for DescribeConfigs.
    pub doc: &'static str,
}

/// Looks a broker key up by its exact name.
pub fn broker_key(name: &str) -> Option<&'static ConfigKey> {
    BROKER_KEYS.iter().find(|k| k.name == name)
}

/// Broker keys Kafka lets change while the broker runs (its dynamic broker configs) and
/// Osprey applies live, beyond the topic defaults: the connection limit (the acceptor's
/// slots are resized), the cleaner's dedupe buffer (read at each compaction round), the
/// idle producer expiry (read at each retention pass) and, Osprey's own, the
/// decompression bound (read at each produce).
const DYNAMIC_NON_TOPIC_KEYS: &[&str] = &[
    "max.connections",
    "log.cleaner.dedupe.buffer.size",
    "producer.id.expiration.ms",
    "osprey.produce.decompressed.max.bytes",
    "errors.deadletterqueue.auto.create.topics.enable",
    "errors.deadletterqueue.topic.name.prefix",
];

/// The topic configs Osprey acts on: the partition log's (`osprey_storage::LogConfig`)
/// and `min.insync.replicas` (Produce). The others (`compression.type`, `preallocate`,
/// `segment.jitter.ms`, the timestamp bounds, ...) are accepted on a topic, as Kafka
/// names them, but not acted on, so their broker defaults are not dynamic.
const APPLIED_TOPIC_KEYS: &[&str] = &[
    "cleanup.policy",
    "delete.retention.ms",
    "flush.messages",
    "flush.ms",
    "index.interval.bytes",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.index.bytes",
    "segment.ms",
];

/// Whether a broker key may be set dynamically (AlterConfigs on resource BROKER). As in
/// Kafka's `DynamicLogConfig`, a topic default is dynamic under its first broker synonym
/// only (`log.retention.ms`, not `.minutes` or `.hours`), and reaches every partition log
/// live, through the path a topic's own AlterConfigs takes; only the topic configs Osprey
/// acts on qualify. Everything else (listeners, thread counts, bounds set at start-up)
/// is refused rather than stored without effect.
pub fn is_dynamic(name: &str) -> bool {
    DYNAMIC_NON_TOPIC_KEYS.contains(&name)
        || TOPIC_KEYS.iter().any(|t| APPLIED_TOPIC_KEYS.contains(&t.name) && t.broker_synonyms.first() == Some(&name))
}

/// Looks a topic key up by its exact name.
pub fn topic_key(name: &str) -> Option<&'static TopicKey> {
    TOPIC_KEYS.iter().find(|k| k.name == name)
}

use ConfigType::{Boolean, Double, Int, List, Long, Short};
use Group as G;

const I32_MAX: &str = "2147483647";
const I64_MAX: &str = "9223372036854775807";
const SECURITY_PROTOCOL_MAP: &str = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";
const COMPRESSION_TYPES: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];
const TIMESTAMP_TYPES: &[&str] = &["CreateTime", "LogAppendTime"];
const CLEANUP_POLICIES: &[&str] = &["compact", "delete"];

/// Every broker key, grouped as `--help` prints them.
#[rustfmt::skip]
pub static BROKER_KEYS: &[ConfigKey] = &[
    // Server
    ConfigKey::new("node.id", Int, Some("1"), AtLeast(0), G::Server,
        "This node's id in the cluster (Osprey default 1, so a single node needs no config; Kafka requires it).")
        .osprey_default("-1"),
    ConfigKey::new("broker.id", Int, Some("-1"), AtLeast(-1), G::Server,
        "Legacy name for node.id: if set it must equal node.id, and supplies node.id when that is unset."),
    ConfigKey::new("process.roles", List, Some("broker,controller"), ProcessRoles, G::Server,
        "Roles of this process: broker, controller, or broker,controller (Osprey default, one node needing no config; Kafka requires it).")
        .osprey_default(""),
    // Cluster
    ConfigKey::new("controller.quorum.voters", List, Some(""), QuorumVoters, G::Cluster,
        "The controller quorum's voters, {id}@{host}:{port} of each one's controller listener; empty (with controller.quorum.bootstrap.servers empty): this node is the only controller, in-process."),
    ConfigKey::new("controller.quorum.bootstrap.servers", List, Some(""), HostPortList, G::Cluster,
        "{host}:{port} of controllers to find the quorum through (Kafka's dynamic quorum, KIP-853); used when controller.quorum.voters is empty."),
    ConfigKey::new("controller.quorum.election.timeout.ms", Int, Some("1000"), AtLeast(1), G::Cluster,
        "A voter that has not heard from a leader for this long starts an election."),
    ConfigKey::new("controller.quorum.election.backoff.max.ms", Int, Some("1000"), AtLeast(0), G::Cluster,
        "Upper bound of the random backoff before a voter retries a failed election."),
    ConfigKey::new("controller.quorum.fetch.timeout.ms", Int, Some("2000"), AtLeast(1), G::Cluster,
        "A follower without a successful fetch from the leader for this long becomes a candidate; a leader without fetches from a majority for this long resigns."),
    ConfigKey::new("controller.quorum.request.timeout.ms", Int, Some("2000"), AtLeast(1), G::Cluster,
        "How long a request between controllers waits for its response."),
    ConfigKey::new("controller.quorum.retry.backoff.ms", Int, Some("20"), AtLeast(0), G::Cluster,
        "Pause before retrying a failed request between controllers."),
    ConfigKey::new("broker.heartbeat.interval.ms", Int, Some("2000"), AtLeast(1), G::Cluster,
        "How often a broker heartbeats to the active controller."),
    ConfigKey::new("broker.session.timeout.ms", Int, Some("9000"), AtLeast(1), G::Cluster,
        "A broker with no heartbeat for this long is fenced by the controller."),
    ConfigKey::new("broker.rack", ConfigType::String, None, Any, G::Cluster,
        "Rack of this broker, for rack-aware replica placement; unset: no rack."),
    ConfigKey::new("metadata.log.dir", ConfigType::String, None, NonEmpty, G::Cluster,
        "Directory of the cluster metadata log (__cluster_metadata-0); unset: the first log.dirs entry."),
    ConfigKey::new("metadata.log.max.record.bytes.between.snapshots", Long, Some("20971520"), AtLeast(1), G::Cluster,
        "Write a metadata snapshot once this many bytes of records were appended since the last one."),
    ConfigKey::new("metadata.log.max.snapshot.interval.ms", Long, Some("3600000"), AtLeast(0), G::Cluster,
        "Write a metadata snapshot at least this often while records arrive; 0: no time-based snapshots."),
    // Listeners
    ConfigKey::new("listeners", List, Some("PLAINTEXT://127.0.0.1:9092"), Listeners, G::Listeners,
        "NAME://host:port list to bind (empty host: every interface; port 0: any free port). Osprey binds loopback by default.")
        .osprey_default("PLAINTEXT://:9092"),
    ConfigKey::new("advertised.listeners", List, None, Listeners, G::Listeners,
        "NAME://host:port list given to clients in Metadata; unset: the non-controller listeners."),
    ConfigKey::new("listener.security.protocol.map", ConfigType::String, Some(SECURITY_PROTOCOL_MAP), ProtocolMap, G::Listeners,
        "NAME:PROTOCOL pairs giving each listener's security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."),
    ConfigKey::new("controller.listener.names", ConfigType::String, None, ListenerNames, G::Listeners,
        "Listeners the controller serves: in listeners on a controller, not in listeners on a broker-only node (required there); unset: the single-node controller runs in-process without one."),
    ConfigKey::new("inter.broker.listener.name", ConfigType::String, None, ListenerName, G::Listeners,
        "Listener brokers use to reach each other; unset: PLAINTEXT if listed, else the first non-controller listener."),
    // TLS (SSL listeners). Each can be set for one listener as listener.name.<lower-case name>.<key>.
    ConfigKey::new("ssl.keystore.type", ConfigType::String, Some("PEM"), OneOf(&["PEM", "JKS", "PKCS12"]), G::Listeners,
        "Format of the key store: Osprey reads PEM only, its default (JKS and PKCS12 are refused at startup: convert them to PEM).")
        .osprey_default("JKS"),
    ConfigKey::new("ssl.keystore.location", ConfigType::String, None, Any, G::Listeners,
        "PEM file holding the private key and the certificate chain (server certificate first); reread when it changes."),
    ConfigKey::new("ssl.keystore.certificate.chain", ConfigType::Password, None, Any, G::Listeners,
        "The certificate chain as inline PEM (with ssl.keystore.key), instead of ssl.keystore.location.").secret(),
    ConfigKey::new("ssl.keystore.key", ConfigType::Password, None, Any, G::Listeners,
        "The private key as inline PEM (PKCS#8, PKCS#1 or SEC1), with ssl.keystore.certificate.chain.").secret(),
    ConfigKey::new("ssl.keystore.password", ConfigType::Password, None, Any, G::Listeners,
        "Password of a JKS or PKCS12 key store: refused with PEM, as Kafka does (a PEM key takes ssl.key.password).").secret(),
    ConfigKey::new("ssl.key.password", ConfigType::Password, None, Any, G::Listeners,
        "Password of the key store's private key, encrypted PKCS#8 PEM (ENCRYPTED PRIVATE KEY), as Kafka reads it.").secret(),
    ConfigKey::new("ssl.truststore.type", ConfigType::String, Some("PEM"), OneOf(&["PEM", "JKS", "PKCS12"]), G::Listeners,
        "Format of the trust store: Osprey reads PEM only, its default (JKS and PKCS12 are refused at startup).")
        .osprey_default("JKS"),
    ConfigKey::new("ssl.truststore.location", ConfigType::String, None, Any, G::Listeners,
        "PEM file of the CA certificates that client certificates (and other brokers) are verified against."),
    ConfigKey::new("ssl.truststore.certificates", ConfigType::Password, None, Any, G::Listeners,
        "The trusted CA certificates as inline PEM, instead of ssl.truststore.location.").secret(),
    ConfigKey::new("ssl.truststore.password", ConfigType::Password, None, Any, G::Listeners,
        "Password of a JKS or PKCS12 trust store: refused with PEM, as Kafka does.").secret(),
    ConfigKey::new("ssl.client.auth", ConfigType::String, Some("none"), OneOf(&["none", "requested", "required"]), G::Listeners,
        "Client certificates: none (not asked for), requested (verified if sent) or required (mutual TLS)."),
    ConfigKey::new("ssl.enabled.protocols", List, Some("TLSv1.2,TLSv1.3"), NonEmptyList, G::Listeners,
        "TLS versions accepted: TLSv1.2 and/or TLSv1.3 (older versions are not offered by rustls)."),
    ConfigKey::new("ssl.cipher.suites", List, Some(""), Any, G::Listeners,
        "Cipher suites by their JSSE/IANA names (TLS_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, ...); empty: rustls's defaults."),
    ConfigKey::new("ssl.principal.mapping.rules", ConfigType::String, Some("DEFAULT"), Any, G::Listeners,
        "RULE:pattern/replacement/[LU] and DEFAULT rules mapping a client certificate's distinguished name to the principal's name."),
    // SASL (SASL_PLAINTEXT and SASL_SSL listeners). sasl.enabled.mechanisms can be set for
    // one listener as listener.name.<lower-case name>.sasl.enabled.mechanisms; each
    // mechanism's JAAS config is listener.name.<name>.<lower-case mechanism>.sasl.jaas.config.
    ConfigKey::new("sasl.enabled.mechanisms", List, Some("GSSAPI"), Any, G::Listeners,
        "SASL mechanisms served on SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI, Kafka's default, and OAUTHBEARER are refused at startup)."),
    ConfigKey::new("sasl.mechanism.inter.broker.protocol", ConfigType::String, Some("GSSAPI"), Any, G::Listeners,
        "The mechanism brokers log in to each other with when the inter-broker listener is a SASL one: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, enabled on that listener, whose JAAS config gives the username and password options."),
    ConfigKey::new("sasl.server.max.receive.size", Int, Some("524288"), AtLeast(1), G::Listeners,
        "Largest frame a client may send before it has authenticated; a larger one closes the connection."),
    ConfigKey::new("connections.max.reauth.ms", Long, Some("0"), AtLeast(0), G::Listeners,
        "SASL sessions expire this long after authentication (KIP-368): the client re-authenticates on the same connection before then, or the connection closes at its next request; 0: never."),
    ConfigKey::new("connection.failed.authentication.delay.ms", Int, Some("100"), AtLeast(0), G::Listeners,
        "Delay before answering a failed SASL authentication and closing the connection, to slow down password guessing."),
    // Authorization (authorizer.rs): Kafka's StandardAuthorizer over the ACLs in the metadata.
    ConfigKey::new("authorizer.class.name", ConfigType::String, Some(""), OneOf(&["", crate::authorizer::STANDARD_AUTHORIZER]), G::Listeners,
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer checks every request against the ACLs in the cluster metadata; empty: every request is allowed and the ACL APIs answer SECURITY_DISABLED."),
    ConfigKey::new("super.users", ConfigType::String, Some(""), Any, G::Listeners,
        "Principals allowed everything whatever the ACLs, separated by semicolons (User:admin;User:ANONYMOUS)."),
    ConfigKey::new("allow.everyone.if.no.acl.found", Boolean, Some("false"), Any, G::Listeners,
        "With an authorizer, a resource that no ACL applies to is open to everyone (true) or to super users only (false)."),
    // Network
    ConfigKey::new("socket.request.max.bytes", Int, Some("104857600"), AtLeast(1), G::Network,
        "Largest request frame accepted; a larger declared size closes the connection."),
    ConfigKey::new("socket.send.buffer.bytes", Int, Some("102400"), AtLeast(-1), G::Network,
        "SO_SNDBUF of client sockets; -1: the OS default."),
    ConfigKey::new("socket.receive.buffer.bytes", Int, Some("102400"), AtLeast(-1), G::Network,
        "SO_RCVBUF of client sockets; -1: the OS default."),
    ConfigKey::new("socket.listen.backlog.size", Int, Some("50"), AtLeast(1), G::Network,
        "Pending-connection queue length of each listening socket."),
    ConfigKey::new("max.connections", Int, Some(I32_MAX), AtLeast(0), G::Network,
        "Most client connections open at once across all listeners."),
    ConfigKey::new("max.connections.per.ip", Int, Some(I32_MAX), AtLeast(0), G::Network,
        "Most client connections open at once from one IP address."),
    ConfigKey::new("connections.max.idle.ms", Long, Some("600000"), AtLeast(1), G::Network,
        "Close a connection that has sent nothing for this long."),
    ConfigKey::new("queued.max.requests", Int, Some("500"), AtLeast(1), G::Network,
        "Requests read from sockets but not yet handled, across connections, before reading pauses."),
    ConfigKey::new("queued.max.request.bytes", Long, Some("104857600"), UnlimitedOrAtLeast(1), G::Network,
        "Bytes of requests read and not yet answered, across connections, before reading pauses; at least socket.request.max.bytes; -1: no byte limit. Osprey default 100 MiB (Kafka: -1), so clients cannot make the broker hold unbounded request memory.")
        .osprey_default("-1"),
    ConfigKey::new("num.network.threads", Int, Some("3"), AtLeast(1), G::Network,
        "Threads reading requests from and writing responses to sockets."),
    ConfigKey::new("num.io.threads", Int, Some("8"), AtLeast(1), G::Network,
        "Threads handling requests, including disk I/O."),
    ConfigKey::new("background.threads", Int, Some("10"), AtLeast(1), G::Network,
        "Threads for background work (retention, deletion)."),
    ConfigKey::new("osprey.max.inflight.requests.per.connection", Int, Some("100"), AtLeast(1), G::Network,
        "Osprey: requests read from one connection and not yet answered before reading from it pauses."),
    ConfigKey::new("osprey.max.pending.response.bytes.per.connection", Int, Some("16777216"), AtLeast(1), G::Network,
        "Osprey: response bytes built for one connection and not yet written to it before reading from it pauses (one larger response is still sent alone)."),
    ConfigKey::new("fetch.max.bytes", Int, Some("57671680"), AtLeast(1024), G::Network,
        "Upper bound on the bytes one Fetch response returns, whatever the request asks."),
    ConfigKey::new("max.incremental.fetch.session.cache.slots", Int, Some("1000"), AtLeast(0), G::Network,
        "Incremental fetch sessions kept per broker."),
    // Topic defaults
    ConfigKey::new("num.partitions", Int, Some("1"), AtLeast(1), G::Topics,
        "Partitions of a topic created without a count (auto-created, or CreateTopics with -1)."),
    ConfigKey::new("osprey.max.partitions", Int, Some("100000"), AtLeast(1), G::Topics,
        "Most partitions in the cluster, internal topics included; CreateTopics and CreatePartitions beyond it fail with POLICY_VIOLATION."),
    ConfigKey::new("default.replication.factor", Int, Some("1"), AtLeast(1), G::Topics,
        "Replication factor of a topic created without one."),
    ConfigKey::new("min.insync.replicas", Int, Some("1"), AtLeast(1), G::Topics,
        "Replicas that must acknowledge an acks=all produce; fewer in sync fails it with NOT_ENOUGH_REPLICAS."),
    ConfigKey::new("auto.create.topics.enable", Boolean, Some("true"), Any, G::Topics,
        "Create a topic when a client asks for metadata of or produces to one that does not exist."),
    ConfigKey::new("delete.topic.enable", Boolean, Some("true"), Any, G::Topics,
        "Allow DeleteTopics."),
    ConfigKey::new("auto.leader.rebalance.enable", Boolean, Some("true"), Any, G::Replication,
        "The active controller moves leadership back to each partition's preferred (first) replica when it can lead."),
    ConfigKey::new("leader.imbalance.check.interval.seconds", Long, Some("300"), AtLeast(1), G::Replication,
        "How often the active controller looks for partitions not led by their preferred replica."),
    ConfigKey::new("leader.imbalance.per.broker.percentage", Int, Some("10"), AtLeast(0), G::Replication,
        "Accepted for Kafka's configs; unused, as by Kafka's KRaft controller (every imbalanced partition is moved)."),
    ConfigKey::new("unclean.leader.election.interval.ms", Long, Some("300000"), AtLeast(1), G::Replication,
        "How often the active controller gives offline partitions of topics that allow it an unclean leader."),
    ConfigKey::new("unclean.leader.election.enable", Boolean, Some("false"), Any, G::Topics,
        "Allow a replica outside the ISR to become leader (loses acknowledged data)."),
    ConfigKey::new("compression.type", ConfigType::String, Some("producer"), OneOf(COMPRESSION_TYPES), G::Topics,
        "Compression of stored batches; producer: keep what the producer sent."),
    ConfigKey::new("compression.gzip.level", Int, Some("-1"), GzipLevel, G::Topics,
        "gzip level when compression.type is gzip: 1-9, or -1 for the codec default."),
    ConfigKey::new("compression.lz4.level", Int, Some("9"), Between(1, 17), G::Topics,
        "lz4 level when compression.type is lz4."),
    ConfigKey::new("compression.zstd.level", Int, Some("3"), Between(-131072, 22), G::Topics,
        "zstd level when compression.type is zstd."),
    ConfigKey::new("message.max.bytes", Int, Some("1048588"), AtLeast(0), G::Topics,
        "Largest record batch accepted, after compression, including the batch header."),
    ConfigKey::new("osprey.produce.decompressed.max.bytes", Int, Some("67108864"), AtLeast(1), G::Topics,
        "Osprey: bytes a compressed batch may inflate to while Produce validates its records; past it the batch is refused (MESSAGE_TOO_LARGE)."),
    ConfigKey::new("log.message.timestamp.type", ConfigType::String, Some("CreateTime"), OneOf(TIMESTAMP_TYPES), G::Topics,
        "Timestamp stored in batches: the producer's (CreateTime) or the broker's at append (LogAppendTime)."),
    ConfigKey::new("log.message.timestamp.before.max.ms", Long, Some(I64_MAX), AtLeast(0), G::Topics,
        "Reject a CreateTime batch whose timestamp is further than this in the past."),
    ConfigKey::new("log.message.timestamp.after.max.ms", Long, Some("3600000"), AtLeast(0), G::Topics,
        "Reject a CreateTime batch whose timestamp is further than this in the future."),
    // Log storage
    ConfigKey::new("log.dirs", List, None, NonEmptyList, G::Log,
        "Directories holding partition data; unset: log.dir."),
    ConfigKey::new("log.dir", ConfigType::String, Some("./data"), NonEmpty, G::Log,
        "Data directory used when log.dirs is unset (Osprey default ./data).")
        .osprey_default("/tmp/kafka-logs"),
    ConfigKey::new("log.segment.bytes", Int, Some("1073741824"), AtLeast(1_048_576), G::Log,
        "Roll to a new segment before the active one would exceed this size."),
    ConfigKey::new("log.roll.ms", Long, None, AtLeast(1), G::Log,
        "Roll a segment once its first batch is this old; unset: log.roll.hours."),
    ConfigKey::new("log.roll.hours", Int, Some("168"), AtLeast(1), G::Log,
        "Roll a segment once its first batch is this many hours old (used when log.roll.ms is unset)."),
    ConfigKey::new("log.roll.jitter.ms", Long, None, AtLeast(0), G::Log,
        "Random jitter subtracted from the roll time; unset: log.roll.jitter.hours."),
    ConfigKey::new("log.roll.jitter.hours", Int, Some("0"), AtLeast(0), G::Log,
        "Roll jitter in hours (used when log.roll.jitter.ms is unset)."),
    ConfigKey::new("log.index.size.max.bytes", Int, Some("10485760"), AtLeast(4), G::Log,
        "Roll a segment before its offset or time index would exceed this size."),
    ConfigKey::new("log.index.interval.bytes", Int, Some("4096"), AtLeast(0), G::Log,
        "Bytes of log between two entries of the sparse offset index."),
    ConfigKey::new("log.segment.delete.delay.ms", Long, Some("60000"), AtLeast(0), G::Log,
        "Wait this long after a segment is removed from the log before deleting its files."),
    ConfigKey::new("log.flush.interval.messages", Long, None, AtLeast(1), G::Log,
        "fsync after this many unflushed messages; unset (Osprey default): fsync before every acknowledgement.")
        .osprey_default(I64_MAX),
    ConfigKey::new("log.flush.interval.ms", Long, None, AtLeast(0), G::Log,
        "fsync once the oldest unflushed message is this old; unset (Osprey default): fsync before every acknowledgement.")
        .osprey_default("null (log.flush.scheduler.interval.ms)"),
    ConfigKey::new("log.flush.scheduler.interval.ms", Long, Some(I64_MAX), AtLeast(0), G::Log,
        "How often to check whether a log needs a time-based flush."),
    ConfigKey::new("log.flush.offset.checkpoint.interval.ms", Int, Some("60000"), AtLeast(0), G::Log,
        "How often to write the recovery point checkpoint."),
    ConfigKey::new("log.preallocate", Boolean, Some("false"), Any, G::Log,
        "Preallocate segment files at their full size when created."),
    // Retention and compaction
    ConfigKey::new("log.retention.ms", Long, None, UnlimitedOrAtLeast(1), G::Retention,
        "Delete segments older than this; -1: forever. Takes precedence over log.retention.minutes and .hours."),
    ConfigKey::new("log.retention.minutes", Int, None, UnlimitedOrAtLeast(1), G::Retention,
        "Retention in minutes, used when log.retention.ms is unset; -1: forever."),
    ConfigKey::new("log.retention.hours", Int, Some("168"), UnlimitedOrAtLeast(1), G::Retention,
        "Retention in hours, used when log.retention.ms and .minutes are unset; -1: forever."),
    ConfigKey::new("log.retention.bytes", Long, Some("-1"), AtLeast(-1), G::Retention,
        "Delete the oldest segments while a partition is larger than this; -1: no size limit."),
    ConfigKey::new("log.retention.check.interval.ms", Long, Some("300000"), AtLeast(1), G::Retention,
        "How often to look for segments to delete."),
    ConfigKey::new("log.cleanup.policy", List, Some("delete"), EachOf(CLEANUP_POLICIES), G::Retention,
        "delete: drop old segments; compact: keep the latest record per key; or both."),
    ConfigKey::new("log.cleaner.enable", Boolean, Some("true"), Any, G::Retention,
        "Run the log cleaner, which compacts topics with cleanup.policy compact."),
    ConfigKey::new("log.cleaner.dedupe.buffer.size", Long, Some("134217728"), AtLeast(1024), G::Retention,
        "Memory for the compaction key map of one cleaning pass; larger logs are cleaned over several passes."),
    ConfigKey::new("log.cleaner.backoff.ms", Long, Some("15000"), AtLeast(0), G::Retention,
        "Pause between compaction rounds over all compacted partitions."),
    ConfigKey::new("osprey.log.flusher.threads", Int, Some("4"), AtLeast(1), G::Retention,
        "Threads doing the group-commit fsyncs; several let fsyncs of different partitions overlap."),
    ConfigKey::new("osprey.log.journal.topics", List, Some("__consumer_offsets,__transaction_state,__share_group_state"), Any, G::Retention,
        "Topics whose partitions count an acknowledged append durable once the data directory's commit journal is fsynced: one fsync covers the appends of all of them (offset commits of many groups, say), instead of one fsync per partition. Default: the coordinators' internal topics. `*`: every topic (a producer writing small batches to many partitions at acks=all then waits for one fsync per request rather than one per partition, at the cost of writing its data twice). Empty: none (each partition fsyncs its own segment)."),
    ConfigKey::new("osprey.log.journal.file.bytes", Long, Some("16777216"), AtLeast(4096), G::Retention,
        "Size at which a commit journal file is retired: its partitions fsync their segments and it is deleted."),
    ConfigKey::new("osprey.log.scrub.bytes.per.second", Long, Some("8388608"), AtLeast(0), G::Retention,
        "Read rate of the background scrubber that verifies the CRC of every batch in sealed segments; 0 disables it."),
    ConfigKey::new("osprey.log.scrub.interval.ms", Long, Some("3600000"), AtLeast(0), G::Retention,
        "Pause between two scrubber passes over all partitions."),
    ConfigKey::new("osprey.log.max.open.files", Int, Some("4096"), AtLeast(16), G::Retention,
        "Most segment and index files held open at once across all partitions (least recently used are closed)."),
    ConfigKey::new("num.recovery.threads.per.data.dir", Int, Some("8"), AtLeast(1), G::Retention,
        "Threads opening partition logs (at start-up and topic creation) and closing them at shutdown; the work is mostly fsyncs, which overlap (Kafka's default is 2)."),
    ConfigKey::new("log.cleaner.threads", Int, Some("1"), AtLeast(0), G::Retention,
        "Log cleaner threads."),
    ConfigKey::new("log.cleaner.delete.retention.ms", Long, Some("86400000"), AtLeast(0), G::Retention,
        "Keep tombstones in compacted topics at least this long."),
    ConfigKey::new("log.cleaner.min.cleanable.ratio", Double, Some("0.5"), Fraction, G::Retention,
        "Compact a log once this fraction of it is uncompacted."),
    ConfigKey::new("log.cleaner.min.compaction.lag.ms", Long, Some("0"), AtLeast(0), G::Retention,
        "Leave records uncompacted for at least this long."),
    ConfigKey::new("log.cleaner.max.compaction.lag.ms", Long, Some(I64_MAX), AtLeast(1), G::Retention,
        "Compact records at the latest after this long."),
    // Replication
    ConfigKey::new("replica.lag.time.max.ms", Long, Some("30000"), AtLeast(1), G::Replication,
        "A follower not caught up with its leader for this long leaves the ISR."),
    ConfigKey::new("num.replica.fetchers", Int, Some("1"), Between(1, 64), G::Replication,
        "Fetcher tasks per source broker: a follower's partitions of one leader are spread over them."),
    ConfigKey::new("replica.fetch.max.bytes", Int, Some("1048576"), AtLeast(0), G::Replication,
        "Bytes a follower asks for per partition in one fetch (the first batch comes whole even if larger)."),
    ConfigKey::new("replica.fetch.response.max.bytes", Int, Some("10485760"), AtLeast(0), G::Replication,
        "Bytes a follower asks for in one fetch, over all partitions."),
    ConfigKey::new("replica.fetch.wait.max.ms", Int, Some("500"), AtLeast(0), G::Replication,
        "How long the leader holds a follower's fetch when it has nothing new (keep below replica.lag.time.max.ms)."),
    ConfigKey::new("replica.fetch.min.bytes", Int, Some("1"), AtLeast(1), G::Replication,
        "Bytes a follower's fetch waits for before the leader answers it."),
    ConfigKey::new("replica.fetch.backoff.ms", Int, Some("1000"), AtLeast(0), G::Replication,
        "How long a follower waits after a failed fetch before fetching that partition again."),
    // Group coordinator
    ConfigKey::new("offsets.topic.num.partitions", Int, Some("50"), AtLeast(1), G::Groups,
        "Partitions of __consumer_offsets (fixed once the topic exists)."),
    ConfigKey::new("offsets.topic.replication.factor", Short, Some("3"), AtLeast(1), G::Groups,
        "Replication factor of __consumer_offsets. Left at its default, capped at the brokers registered when the topic is created (so a single node works unconfigured); set, the creation waits for that many brokers, as in Kafka."),
    ConfigKey::new("offsets.topic.segment.bytes", Int, Some("104857600"), AtLeast(1), G::Groups,
        "Segment size of __consumer_offsets."),
    ConfigKey::new("offsets.retention.minutes", Int, Some("10080"), AtLeast(1), G::Groups,
        "Drop a group's committed offsets this long after the group became empty."),
    ConfigKey::new("offsets.retention.check.interval.ms", Long, Some("600000"), AtLeast(1), G::Groups,
        "How often to look for expired offsets."),
    ConfigKey::new("offset.metadata.max.bytes", Int, Some("4096"), AtLeast(0), G::Groups,
        "Largest metadata string accepted with an offset commit."),
    ConfigKey::new("group.initial.rebalance.delay.ms", Int, Some("3000"), AtLeast(0), G::Groups,
        "Wait this long for more members before the first rebalance of an empty group."),
    ConfigKey::new("group.min.session.timeout.ms", Int, Some("6000"), AtLeast(0), G::Groups,
        "Smallest session timeout a member may ask for."),
    ConfigKey::new("group.max.session.timeout.ms", Int, Some("1800000"), AtLeast(0), G::Groups,
        "Largest session timeout a member may ask for."),
    ConfigKey::new("group.max.size", Int, Some(I32_MAX), AtLeast(1), G::Groups,
        "Most members in one consumer group."),
    ConfigKey::new("group.consumer.heartbeat.interval.ms", Int, Some("5000"), AtLeast(1), G::Groups,
        "How often KIP-848 consumer-protocol members heartbeat."),
    ConfigKey::new("group.consumer.session.timeout.ms", Int, Some("45000"), AtLeast(1), G::Groups,
        "A KIP-848 member silent this long is removed from its group."),
    ConfigKey::new("group.consumer.min.session.timeout.ms", Int, Some("45000"), AtLeast(1), G::Groups,
        "Smallest consumer.session.timeout.ms a group config may set."),
    ConfigKey::new("group.consumer.max.session.timeout.ms", Int, Some("60000"), AtLeast(1), G::Groups,
        "Largest consumer.session.timeout.ms a group config may set."),
    ConfigKey::new("group.consumer.min.heartbeat.interval.ms", Int, Some("5000"), AtLeast(1), G::Groups,
        "Smallest consumer.heartbeat.interval.ms a group config may set."),
    ConfigKey::new("group.consumer.max.heartbeat.interval.ms", Int, Some("15000"), AtLeast(1), G::Groups,
        "Largest consumer.heartbeat.interval.ms a group config may set."),
    ConfigKey::new("group.consumer.max.size", Int, Some(I32_MAX), AtLeast(1), G::Groups,
        "Most members in one KIP-848 consumer group."),
    ConfigKey::new("osprey.group.consumer.regex.max.patterns", Int, Some("100"), AtLeast(1), G::Groups,
        "Most distinct SubscribedTopicRegex patterns one KIP-848 consumer group may use at once (each is matched against every topic when topics change)."),
    ConfigKey::new("osprey.group.consumer.regex.max.compiled.bytes", Int, Some("1048576"), AtLeast(1024), G::Groups,
        "Most memory one compiled SubscribedTopicRegex may take; a larger pattern is INVALID_REGULAR_EXPRESSION."),
    ConfigKey::new("group.share.record.lock.duration.ms", Int, Some("30000"), Between(1000, 3600000), G::Groups,
        "How long a record a share consumer acquired stays locked to it; unacknowledged then, it is delivered again. A share group's share.record.lock.duration.ms overrides it."),
    ConfigKey::new("group.share.min.record.lock.duration.ms", Int, Some("15000"), Between(1000, 30000), G::Groups,
        "Smallest share.record.lock.duration.ms a share group config may set."),
    ConfigKey::new("group.share.max.record.lock.duration.ms", Int, Some("60000"), Between(30000, 3600000), G::Groups,
        "Largest share.record.lock.duration.ms a share group config may set."),
    ConfigKey::new("group.share.delivery.count.limit", Int, Some("5"), Between(2, 10), G::Groups,
        "Deliveries of a record to share consumers after which it is archived instead of delivered again. A share group's share.delivery.count.limit overrides it."),
    ConfigKey::new("group.share.partition.max.record.locks", Int, Some("2000"), Between(100, 10000), G::Groups,
        "Records of one partition a share group may have in flight (acquired or awaiting redelivery) at once."),
    ConfigKey::new("group.share.max.share.sessions", Int, Some("2000"), AtLeast(1), G::Groups,
        "Share sessions (share consumers fetching from this broker) the broker keeps; a consumer beyond it gets SHARE_SESSION_LIMIT_REACHED and retries."),
    ConfigKey::new("group.share.session.timeout.ms", Int, Some("45000"), AtLeast(1), G::Groups,
        "A share group member silent this long is removed from its group and its acquired records released. A share group's share.session.timeout.ms overrides it."),
    ConfigKey::new("group.share.min.session.timeout.ms", Int, Some("45000"), AtLeast(1), G::Groups,
        "Smallest share.session.timeout.ms a share group config may set."),
    ConfigKey::new("group.share.max.session.timeout.ms", Int, Some("60000"), AtLeast(1), G::Groups,
        "Largest share.session.timeout.ms a share group config may set."),
    ConfigKey::new("group.share.heartbeat.interval.ms", Int, Some("5000"), AtLeast(1), G::Groups,
        "How often share group members heartbeat. A share group's share.heartbeat.interval.ms overrides it."),
    ConfigKey::new("group.share.min.heartbeat.interval.ms", Int, Some("5000"), AtLeast(1), G::Groups,
        "Smallest share.heartbeat.interval.ms a share group config may set."),
    ConfigKey::new("group.share.max.heartbeat.interval.ms", Int, Some("15000"), AtLeast(1), G::Groups,
        "Largest share.heartbeat.interval.ms a share group config may set."),
    ConfigKey::new("group.share.max.size", Int, Some("200"), Between(1, 1000), G::Groups,
        "Most members in one share group; a member beyond it gets GROUP_MAX_SIZE_REACHED."),
    ConfigKey::new("group.share.min.delivery.count.limit", Int, Some("2"), Between(2, 10), G::Groups,
        "Smallest share.delivery.count.limit a share group config may set."),
    ConfigKey::new("group.share.max.delivery.count.limit", Int, Some("10"), Between(2, 10), G::Groups,
        "Largest share.delivery.count.limit a share group config may set."),
    ConfigKey::new("group.share.min.partition.max.record.locks", Int, Some("100"), Between(100, 10000), G::Groups,
        "Smallest share.partition.max.record.locks a share group config may set."),
    ConfigKey::new("group.share.max.partition.max.record.locks", Int, Some("4000"), Between(100, 10000), G::Groups,
        "Largest share.partition.max.record.locks a share group config may set."),
    ConfigKey::new("errors.deadletterqueue.auto.create.topics.enable", Boolean, Some("false"), Any, G::Groups,
        "Whether a share group's dead-letter queue topic (errors.deadletterqueue.topic.name) that does not exist is created, with the broker's topic defaults and errors.deadletterqueue.group.enable=true (KIP-1191). Off: the group's rejected records are archived without a DLQ record."),
    ConfigKey::new("errors.deadletterqueue.topic.name.prefix", ConfigType::String, Some("dlq."), Any, G::Groups,
        "The prefix every share group's dead-letter queue topic name must have (KIP-1191); empty: any name. A group whose DLQ topic lacks it gets no DLQ records."),
    ConfigKey::new("share.coordinator.state.topic.num.partitions", Int, Some("50"), AtLeast(1), G::Groups,
        "Partitions of __share_group_state, the durable state of share groups' partitions (fixed once the topic exists)."),
    ConfigKey::new("share.coordinator.state.topic.replication.factor", Short, Some("3"), AtLeast(1), G::Groups,
        "Replication factor of __share_group_state. Left at its default, capped at the brokers registered when the topic is created (so a single node works unconfigured); set, the creation waits for that many brokers, as in Kafka."),
    ConfigKey::new("share.coordinator.state.topic.min.isr", Short, Some("2"), AtLeast(1), G::Groups,
        "min.insync.replicas of __share_group_state. Left at its default, capped at the topic's replication factor."),
    ConfigKey::new("share.coordinator.state.topic.segment.bytes", Int, Some("104857600"), AtLeast(1), G::Groups,
        "Segment size of __share_group_state."),
    ConfigKey::new("share.coordinator.snapshot.update.records.per.snapshot", Int, Some("500"), Between(0, 500), G::Groups,
        "How many share-state updates of one share partition are written between two full snapshots of it."),
    ConfigKey::new("group.streams.session.timeout.ms", Int, Some("45000"), AtLeast(1), G::Groups,
        "The timeout to detect client failures when using the streams group protocol (KIP-1071)."),
    ConfigKey::new("group.streams.min.session.timeout.ms", Int, Some("45000"), AtLeast(1), G::Groups,
        "The minimum allowed value for the group-level configuration of streams.session.timeout.ms."),
    ConfigKey::new("group.streams.max.session.timeout.ms", Int, Some("60000"), AtLeast(1), G::Groups,
        "The maximum allowed value for the group-level configuration of streams.session.timeout.ms."),
    ConfigKey::new("group.streams.heartbeat.interval.ms", Int, Some("5000"), AtLeast(1), G::Groups,
        "The heartbeat interval given to the members of streams groups."),
    ConfigKey::new("group.streams.min.heartbeat.interval.ms", Int, Some("5000"), AtLeast(1), G::Groups,
        "The minimum allowed value for the group-level configuration of streams.heartbeat.interval.ms."),
    ConfigKey::new("group.streams.max.heartbeat.interval.ms", Int, Some("15000"), AtLeast(1), G::Groups,
        "The maximum allowed value for the group-level configuration of streams.heartbeat.interval.ms."),
    ConfigKey::new("group.streams.max.size", Int, Some(I32_MAX), AtLeast(1), G::Groups,
        "The maximum number of streams clients (members) one streams group can accommodate."),
    ConfigKey::new("group.streams.num.standby.replicas", Int, Some("0"), AtLeast(0), G::Groups,
        "The number of standby replicas for each task of a stateful subtopology."),
    ConfigKey::new("group.streams.max.standby.replicas", Int, Some("2"), AtLeast(0), G::Groups,
        "The maximum allowed value for the group-level configuration of streams.num.standby.replicas."),
    ConfigKey::new("group.streams.initial.rebalance.delay.ms", Int, Some("3000"), AtLeast(0), G::Groups,
        "How long a new streams group waits for more members before its first task assignment."),
    ConfigKey::new("group.streams.assignment.interval.ms", Int, Some("1000"), AtLeast(0), G::Groups,
        "The least time between two task assignments of a streams group."),
    ConfigKey::new("group.streams.task.offset.interval.ms", Int, Some("60000"), AtLeast(1), G::Groups,
        "How often streams members report their changelog offsets (told to them in every heartbeat)."),
    ConfigKey::new("group.streams.acceptable.recovery.lag", Long, Some("10000"), AtLeast(0), G::Groups,
        "The lag at or below which a streams member counts as caught up on a task (told to members)."),
    ConfigKey::new("osprey.streams.version", Short, Some("1"), Between(0, 1), G::Groups,
        "The finalized streams.version feature: 1 enables streams groups (KIP-1071) as a new Kafka 4.4 cluster has them; at 0 the streams-group APIs are answered UNSUPPORTED_VERSION, as Kafka does with the feature off."),
    ConfigKey::new("osprey.share.version", Short, Some("2"), Between(0, 2), G::Groups,
        "The finalized share.version feature: 1 enables share groups (KIP-932), 2 adds their dead-letter queues (KIP-1191), as a new Kafka 4.4 cluster has them; at 0 the share-group APIs are answered UNSUPPORTED_VERSION, as Kafka does with the feature off."),
    // Transactions
    ConfigKey::new("osprey.transaction.version", Short, Some("2"), Between(1, 2), G::Transactions,
        "The finalized transaction.version feature: 2 lets clients use KIP-890 part 2 (an epoch bump per transaction, implicit partition adds), 1 keeps them on the older protocol."),
    ConfigKey::new("transaction.state.log.num.partitions", Int, Some("50"), AtLeast(1), G::Transactions,
        "Partitions of __transaction_state (fixed once the topic exists)."),
    ConfigKey::new("transaction.state.log.replication.factor", Short, Some("3"), AtLeast(1), G::Transactions,
        "Replication factor of __transaction_state. Left at its default, capped at the brokers registered when the topic is created (so a single node works unconfigured); set, the creation waits for that many brokers, as in Kafka."),
    ConfigKey::new("transaction.state.log.min.isr", Int, Some("2"), AtLeast(1), G::Transactions,
        "min.insync.replicas of __transaction_state. Left at its default, capped at the topic's replication factor."),
    ConfigKey::new("transaction.state.log.segment.bytes", Int, Some("104857600"), AtLeast(1), G::Transactions,
        "Segment size of __transaction_state."),
    ConfigKey::new("transactional.id.expiration.ms", Int, Some("604800000"), AtLeast(1), G::Transactions,
        "Forget a transactional id that has not been used for this long."),
    ConfigKey::new("transaction.max.timeout.ms", Int, Some("900000"), AtLeast(1), G::Transactions,
        "Largest transaction timeout a producer may ask for."),
    ConfigKey::new("transaction.abort.timed.out.transaction.cleanup.interval.ms", Int, Some("10000"), AtLeast(1), G::Transactions,
        "How often to abort transactions that have timed out."),
    ConfigKey::new("transaction.remove.expired.transaction.cleanup.interval.ms", Int, Some("3600000"), AtLeast(1), G::Transactions,
        "How often to remove expired transactional ids."),
    ConfigKey::new("producer.id.expiration.ms", Int, Some("86400000"), AtLeast(1), G::Transactions,
        "Forget an idempotent producer's state once it has not produced for this long."),
    ConfigKey::new("producer.id.expiration.check.interval.ms", Int, Some("600000"), AtLeast(1), G::Transactions,
        "How often to look for expired producer ids."),
    // Metrics
    ConfigKey::new("metrics.listener", ConfigType::String, Some("127.0.0.1:9644"), HostPortOrEmpty, G::Metrics,
        "host:port serving Prometheus metrics at /metrics; empty: no metrics endpoint (Osprey-only key)."),
];

/// Every per-topic config, with the broker keys that supply its default.
#[rustfmt::skip]
pub static TOPIC_KEYS: &[TopicKey] = &[
    TopicKey { name: "cleanup.policy", config_type: List, validator: EachOf(CLEANUP_POLICIES),
        broker_synonyms: &["log.cleanup.policy"], doc: "delete, compact, or both." },
    TopicKey { name: "compression.type", config_type: ConfigType::String, validator: OneOf(COMPRESSION_TYPES),
        broker_synonyms: &["compression.type"], doc: "Compression of stored batches; producer: as sent." },
    TopicKey { name: "compression.gzip.level", config_type: Int, validator: GzipLevel,
        broker_synonyms: &["compression.gzip.level"], doc: "gzip level: 1-9, or -1 for the default." },
    TopicKey { name: "compression.lz4.level", config_type: Int, validator: Between(1, 17),
        broker_synonyms: &["compression.lz4.level"], doc: "lz4 level." },
    TopicKey { name: "compression.zstd.level", config_type: Int, validator: Between(-131072, 22),
        broker_synonyms: &["compression.zstd.level"], doc: "zstd level." },
    TopicKey { name: "delete.retention.ms", config_type: Long, validator: AtLeast(0),
        broker_synonyms: &["log.cleaner.delete.retention.ms"], doc: "Keep tombstones at least this long." },
    TopicKey { name: "errors.deadletterqueue.group.enable", config_type: Boolean, validator: Any,
        broker_synonyms: &[], doc: "Whether share groups may use this topic as their dead-letter queue (KIP-1191); default false." },
    TopicKey { name: "file.delete.delay.ms", config_type: Long, validator: AtLeast(0),
        broker_synonyms: &["log.segment.delete.delay.ms"], doc: "Delay before deleting a removed segment's files." },
    TopicKey { name: "flush.messages", config_type: Long, validator: AtLeast(1),
        broker_synonyms: &["log.flush.interval.messages"],
        doc: "fsync after this many messages; unset: fsync before every acknowledgement (Osprey)." },
    TopicKey { name: "flush.ms", config_type: Long, validator: AtLeast(0),
        broker_synonyms: &["log.flush.interval.ms"],
        doc: "fsync once unflushed data is this old; unset: fsync before every acknowledgement (Osprey)." },
    TopicKey { name: "index.interval.bytes", config_type: Int, validator: AtLeast(0),
        broker_synonyms: &["log.index.interval.bytes"], doc: "Bytes between offset index entries." },
    TopicKey { name: "max.compaction.lag.ms", config_type: Long, validator: AtLeast(1),
        broker_synonyms: &["log.cleaner.max.compaction.lag.ms"], doc: "Compact records at the latest after this long." },
    TopicKey { name: "max.message.bytes", config_type: Int, validator: AtLeast(0),
        broker_synonyms: &["message.max.bytes"], doc: "Largest record batch accepted." },
    TopicKey { name: "message.timestamp.after.max.ms", config_type: Long, validator: AtLeast(0),
        broker_synonyms: &["log.message.timestamp.after.max.ms"], doc: "Reject timestamps further than this in the future." },
    TopicKey { name: "message.timestamp.before.max.ms", config_type: Long, validator: AtLeast(0),
        broker_synonyms: &["log.message.timestamp.before.max.ms"], doc: "Reject timestamps further than this in the past." },
    TopicKey { name: "message.timestamp.type", config_type: ConfigType::String, validator: OneOf(TIMESTAMP_TYPES),
        broker_synonyms: &["log.message.timestamp.type"], doc: "CreateTime or LogAppendTime." },
    TopicKey { name: "min.cleanable.dirty.ratio", config_type: Double, validator: Fraction,
        broker_synonyms: &["log.cleaner.min.cleanable.ratio"], doc: "Compact once this fraction is uncompacted." },
    TopicKey { name: "min.compaction.lag.ms", config_type: Long, validator: AtLeast(0),
        broker_synonyms: &["log.cleaner.min.compaction.lag.ms"], doc: "Leave records uncompacted at least this long." },
    TopicKey { name: "min.insync.replicas", config_type: Int, validator: AtLeast(1),
        broker_synonyms: &["min.insync.replicas"], doc: "Replicas that must acknowledge an acks=all produce." },
    TopicKey { name: "preallocate", config_type: Boolean, validator: Any,
        broker_synonyms: &["log.preallocate"], doc: "Preallocate segment files." },
    TopicKey { name: "retention.bytes", config_type: Long, validator: AtLeast(-1),
        broker_synonyms: &["log.retention.bytes"], doc: "Size limit per partition; -1: none." },
    TopicKey { name: "retention.ms", config_type: Long, validator: AtLeast(-1),
        broker_synonyms: &["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
        doc: "Delete segments older than this; -1: forever." },
    TopicKey { name: "segment.bytes", config_type: Int, validator: AtLeast(1_048_576),
        broker_synonyms: &["log.segment.bytes"], doc: "Segment size." },
    TopicKey { name: "segment.index.bytes", config_type: Int, validator: AtLeast(4),
        broker_synonyms: &["log.index.size.max.bytes"], doc: "Index size per segment." },
    TopicKey { name: "segment.jitter.ms", config_type: Long, validator: AtLeast(0),
        broker_synonyms: &["log.roll.jitter.ms", "log.roll.jitter.hours"], doc: "Random jitter on segment.ms." },
    TopicKey { name: "segment.ms", config_type: Long, validator: AtLeast(1),
        broker_synonyms: &["log.roll.ms", "log.roll.hours"], doc: "Roll segments this old." },
    TopicKey { name: "unclean.leader.election.enable", config_type: Boolean, validator: Any,
        broker_synonyms: &["unclean.leader.election.enable"], doc: "Allow out-of-ISR leaders." },
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn key_names_are_unique() {
        let broker: HashSet<_> = BROKER_KEYS.iter().map(|k| k.name).collect();
        assert_eq!(broker.len(), BROKER_KEYS.len());
        let topic: HashSet<_> = TOPIC_KEYS.iter().map(|k| k.name).collect();
        assert_eq!(topic.len(), TOPIC_KEYS.len());
    }

    #[test]
    fn every_topic_synonym_is_a_broker_key_of_the_same_kind() {
        for topic in TOPIC_KEYS {
            for synonym in topic.broker_synonyms {
                let broker = broker_key(synonym).unwrap_or_else(|| panic!("{synonym} is not a broker key"));
                let numeric = |t: ConfigType| matches!(t, Int | Long | Short);
                assert!(
                    broker.config_type == topic.config_type
                        || (numeric(broker.config_type) && numeric(topic.config_type)),
                    "{} vs {}",
                    topic.name,
                    synonym
                );
            }
        }
    }

    #[test]
    fn every_dynamic_key_is_a_broker_key_and_kafkas_hour_keys_stay_static() {
        let dynamic: Vec<&str> = BROKER_KEYS.iter().map(|k| k.name).filter(|n| is_dynamic(n)).collect();
        for name in DYNAMIC_NON_TOPIC_KEYS {
            assert!(broker_key(name).is_some(), "{name} is not a broker key");
        }
        assert_eq!(dynamic.len(), APPLIED_TOPIC_KEYS.len() + DYNAMIC_NON_TOPIC_KEYS.len());
        let not_applied =
            ["compression.type", "log.preallocate", "log.roll.jitter.ms", "unclean.leader.election.enable"];
        for name in ["log.retention.hours", "log.retention.minutes", "log.roll.hours", "log.dirs", "listeners"]
            .into_iter()
            .chain(not_applied)
        {
            assert!(!is_dynamic(name), "{name}");
        }
        assert!(!is_dynamic("no.such.key"));
    }

    /// A topic config listed as applied must be one the partition log takes (or
    /// `min.insync.replicas`, which Produce reads); otherwise its dynamic broker default
    /// would be stored without effect.
    #[test]
    fn every_applied_topic_key_is_taken_by_the_partition_log() {
        for name in APPLIED_TOPIC_KEYS {
            let key = topic_key(name).unwrap_or_else(|| panic!("{name} is not a topic key"));
            if *name == "min.insync.replicas" {
                continue;
            }
            let broker = broker_key(key.broker_synonyms[0]).unwrap();
            let value = broker.default.unwrap_or("1");
            let taken = osprey_storage::LogConfig::default().set(name, value);
            assert!(taken.is_ok(), "{name}={value}: {taken:?}");
        }
    }

    #[test]
    fn every_default_passes_its_own_validator() {
        for key in BROKER_KEYS {
            if let Some(default) = key.default {
                let checked = super::super::value::check(key.config_type, key.validator, default);
                assert!(checked.is_ok(), "default of {} ({default}) is invalid: {checked:?}", key.name);
            }
        }
    }
}
