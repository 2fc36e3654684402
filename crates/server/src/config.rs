//! The broker's configuration, with Kafka's key names, defaults and file format.
//!
//! `osprey path/to/server.properties --override key=value ...` reads a Java properties
//! file, applies each `--override` after it, then checks every value against the key
//! table ([`keys::BROKER_KEYS`]) and Kafka's precedence rules (`log.retention.ms` over
//! `.minutes` over `.hours`, `log.roll.ms` over `log.roll.hours`, `log.dirs` over
//! `log.dir`, `node.id` and `broker.id`). With no arguments every key has its default: one
//! process acting as broker and controller on `127.0.0.1:9092`, data under `./data`,
//! topics auto-created, metrics on `127.0.0.1:9644`.
//!
//! Keys Osprey does not know are returned, not rejected: a Kafka `server.properties`
//! full of `ssl.*` or `zookeeper.*` still starts, with a warning. A known key with a bad
//! value stops startup with an error naming the key, the value, what was expected, and
//! the file and line (or `--override`) it came from.
//!
//! Where Osprey's default differs from Kafka's the table says so (`kafka_default`):
//! loopback `listeners`, `./data`, `process.roles` and `node.id` so a single node needs
//! no config, replication factor 1 for the internal topics, and `log.flush.interval.*`
//! unset, which means fsync before every acknowledgement.
//!
//! # Use from `main`
//!
//! ```no_run
//! use osprey_server::config::{parse_cli, validate_topic_config, ConfigError};
//!
//! let (config, unknown_keys) = match parse_cli(std::env::args_os()) {
//!     Ok(parsed) => parsed,
//!     Err(ConfigError::Help(text)) => {
//!         print!("{text}");
//!         std::process::exit(0);
//!     }
//!     Err(e) => {
//!         eprintln!("osprey: {e}");
//!         std::process::exit(e.exit_code());
//!     }
//! };
//! if !unknown_keys.is_empty() {
//!     // tracing::warn!(keys = ?unknown_keys, "unknown config keys are ignored");
//! }
//! for listener in &config.listeners {
//!     let _bind = listener.bind_address(); // "127.0.0.1:9092"
//! }
//! // CreateTopics: start from the broker's defaults, then the request's configs.
//! let mut topic = config.topic_defaults();
//! if let Err(e) = topic.set("retention.ms", "3600000") {
//!     let _code = e.error_code(); // INVALID_CONFIG
//! }
//! // The controller's `Fn(&str, &str) -> Result<(), String>` topic config validator:
//! let _validator = |k: &str, v: &str| validate_topic_config(k, v).map_err(|e| e.to_string());
//! // DescribeConfigs on the broker resource:
//! let _entries = config.describe();
//! ```

use std::fmt;
use std::path::PathBuf;

use osprey_protocol::ErrorCode;

mod broker;
mod cli;
pub mod keys;
mod listener;
pub mod principal_mapping;
mod properties;
pub mod sasl;
pub mod tls;
mod topic;
mod value;

pub use broker::{BrokerConfig, ClusterConfig, ProcessRoles, RawConfig};
pub use cli::{help_text, parse_cli, parse_command, Command};
pub use keys::{is_dynamic, ConfigKey, ConfigSource, ConfigType, TopicKey};
pub use listener::{Listener, QuorumVoter, SecurityProtocol};
pub use properties::{parse_properties, PropertiesError, Property};
pub use sasl::{SaslLogin, SaslMechanism, SaslSettings};
pub use tls::{ClientAuth, Keystore, TlsProtocol, TlsSettings, Truststore};
pub use topic::{validate_topic_config, TopicConfig};
pub use value::{Validator, Value};

/// Where a setting came from, for error messages and DescribeConfigs sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The built-in default.
    Default,
    /// A properties file, at a 1-based line.
    File {
        /// The file as given on the command line.
        path: PathBuf,
        /// Line where the entry starts.
        line: usize,
    },
    /// `--override key=value`.
    Override,
    /// A client request (CreateTopics, AlterConfigs).
    Request,
    /// A dynamic config of this broker (AlterConfigs on resource BROKER, its id).
    DynamicBroker,
    /// A dynamic cluster-wide default (AlterConfigs on resource BROKER, empty name).
    DynamicDefault,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("the built-in default"),
            Origin::File { path, line } => write!(f, "{}:{line}", path.display()),
            Origin::Override => f.write_str("--override"),
            Origin::Request => f.write_str("the request"),
            Origin::DynamicBroker => f.write_str("this broker's dynamic config"),
            Origin::DynamicDefault => f.write_str("the cluster-wide dynamic config"),
        }
    }
}

/// One config as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// Kafka's key.
    pub name: &'static str,
    /// The value; `None` when unset or sensitive.
    pub value: Option<String>,
    /// Where the value came from.
    pub source: ConfigSource,
    /// A secret: the value is withheld.
    pub is_sensitive: bool,
    /// Cannot be changed by AlterConfigs.
    pub read_only: bool,
    /// Kafka's type.
    pub config_type: ConfigType,
    /// One line of documentation (DescribeConfigs v3+ `include_documentation`).
    pub documentation: &'static str,
    /// The settings this value was chosen from, highest precedence first
    /// (`include_synonyms`).
    pub synonyms: Vec<ConfigSynonym>,
}

impl ConfigEntry {
    /// DescribeConfigs v0's `is_default`.
    pub fn is_default(&self) -> bool {
        self.source == ConfigSource::DefaultConfig
    }
}

/// One synonym of a [`ConfigEntry`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSynonym {
    /// The key (a broker key for a topic config's defaults).
    pub name: &'static str,
    /// Its value.
    pub value: Option<String>,
    /// Where it came from.
    pub source: ConfigSource,
}

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The properties file cannot be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Malformed properties syntax (a bad `\u` escape).
    #[error("{origin}: {message}")]
    Syntax {
        /// File and line.
        origin: Origin,
        /// What is wrong.
        message: String,
    },
    /// A known key has a value of the wrong type, out of range, or inconsistent with
    /// another key.
    #[error("invalid value `{value}` for `{key}` (from {origin}): expected {expected}")]
    InvalidValue {
        /// The key.
        key: String,
        /// The value as given.
        value: String,
        /// What a valid value looks like.
        expected: String,
        /// Where the value came from.
        origin: Origin,
    },
    /// A topic config name Osprey does not know (CreateTopics / AlterConfigs).
    #[error("unknown topic config `{name}`")]
    UnknownTopicConfig {
        /// The name as given.
        name: String,
    },
    /// An `--override` argument without `=`.
    #[error("--override `{arg}`: expected key=value")]
    BadOverride {
        /// The argument as given.
        arg: String,
    },
    /// The command line does not parse; the text is clap's message with usage.
    #[error("{0}")]
    Usage(String),
    /// `--help` or `--version`: print the text to stdout and exit 0.
    #[error("{0}")]
    Help(String),
}

impl ConfigError {
    /// The Kafka error code for a request carrying this config: INVALID_CONFIG.
    pub fn error_code(&self) -> ErrorCode {
        ErrorCode::INVALID_CONFIG
    }

    /// Process exit status: 0 for `--help`, 2 for a bad command line, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            ConfigError::Help(_) => 0,
            ConfigError::Usage(_) | ConfigError::BadOverride { .. } => 2,
            _ => 1,
        }
    }
}
