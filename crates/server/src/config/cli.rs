//! `osprey [server.properties] [--override key=value]... [--help]`, the command line of
//! Kafka's `kafka-server-start.sh`, and the two `kafka-storage.sh` subcommands operators
//! script against: `osprey format` and `osprey random-uuid`.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser};

use super::broker::{BrokerConfig, RawConfig};
use super::keys::{Group, BROKER_KEYS, TOPIC_KEYS};
use super::value::expected;
use super::ConfigError;

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "osprey",
    version,
    about = "A Kafka wire-protocol compatible broker.",
    long_about = "A Kafka wire-protocol compatible broker. With no arguments: one process acting as broker and \
                  controller on 127.0.0.1:9092, data under ./data, topics created on first use, Prometheus \
                  metrics on http://127.0.0.1:9644/metrics.\n\n\
                  Other commands, as kafka-storage.sh has them:\n  \
                  osprey format --cluster-id ID [-c server.properties] [--override KEY=VALUE]... [--ignore-formatted]\n  \
                  osprey random-uuid"
)]
struct Cli {
    /// A Kafka-style server.properties file; keys it does not set keep their defaults.
    #[arg(value_name = "server.properties")]
    config: Option<PathBuf>,
    /// Set KEY to VALUE, after the file is read (repeatable).
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
}

/// `osprey format`: `kafka-storage.sh format`'s options that apply to Osprey.
#[derive(Debug, Parser)]
#[command(
    name = "osprey format",
    about = "Writes meta.properties (cluster.id, node.id, a new directory.id) into every log.dirs entry and \
             metadata.log.dir, as kafka-storage.sh format does. Never required: osprey writes it at first start; \
             formatting fixes the cluster id in advance."
)]
struct FormatCli {
    /// The cluster id: 22 characters of URL-safe base64, as `osprey random-uuid` prints.
    #[arg(short = 't', long = "cluster-id", value_name = "ID")]
    cluster_id: String,
    /// The server.properties the broker will start with (its log.dirs, metadata.log.dir, node.id).
    #[arg(short = 'c', long = "config", value_name = "server.properties")]
    config: Option<PathBuf>,
    /// Set KEY to VALUE, after the file is read (repeatable), as for the broker.
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Leave directories that are already formatted as they are instead of failing.
    #[arg(short = 'g', long = "ignore-formatted")]
    ignore_formatted: bool,
}

/// `osprey random-uuid`.
#[derive(Debug, Parser)]
#[command(name = "osprey random-uuid", about = "Prints a new random cluster id, as kafka-storage.sh random-uuid.")]
struct RandomUuidCli {}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Run the broker (`osprey [server.properties] [--override ...]`).
    Serve {
        /// The checked configuration.
        config: BrokerConfig,
        /// Keys Osprey does not know, to log.
        unknown: Vec<String>,
    },
    /// `osprey format`.
    Format {
        /// The checked configuration whose directories are formatted.
        config: BrokerConfig,
        /// Keys Osprey does not know, to print.
        unknown: Vec<String>,
        /// `--cluster-id`.
        cluster_id: String,
        /// `--ignore-formatted`.
        ignore_formatted: bool,
    },
    /// `osprey random-uuid`.
    RandomUuid,
}

/// Parses the command line (`args` includes the program name): a subcommand (`format`,
/// `random-uuid`) when the first argument names one, else the broker's own command line
/// ([`parse_cli`]). A properties file named `format` can still be given as `./format`.
pub fn parse_command<I, T>(args: I) -> Result<Command, ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    match args.get(1).and_then(|a| a.to_str()) {
        Some("format") => {
            let matches = FormatCli::command().try_get_matches_from(&args[1..]).map_err(from_clap)?;
            let cli = FormatCli::from_arg_matches(&matches).map_err(from_clap)?;
            let (config, unknown) = resolve(cli.config.as_deref(), &cli.overrides)?;
            Ok(Command::Format { config, unknown, cluster_id: cli.cluster_id, ignore_formatted: cli.ignore_formatted })
        }
        Some("random-uuid") => {
            RandomUuidCli::command().try_get_matches_from(&args[1..]).map_err(from_clap)?;
            Ok(Command::RandomUuid)
        }
        _ => parse_cli(args).map(|(config, unknown)| Command::Serve { config, unknown }),
    }
}

/// Parses the command line (`args` includes the program name), reads the properties
/// file, applies the overrides and checks everything. Returns the config and the keys
/// Osprey does not know (to be logged as a warning). `--help` and `--version` come back
/// as [`ConfigError::Help`] carrying the text to print.
pub fn parse_cli<I, T>(args: I) -> Result<(BrokerConfig, Vec<String>), ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = command().try_get_matches_from(args).map_err(from_clap)?;
    let cli = Cli::from_arg_matches(&matches).map_err(from_clap)?;
    resolve(cli.config.as_deref(), &cli.overrides)
}

/// Reads the properties file (if any), applies the overrides and checks everything.
fn resolve(file: Option<&std::path::Path>, overrides: &[String]) -> Result<(BrokerConfig, Vec<String>), ConfigError> {
    let mut settings = RawConfig::new();
    if let Some(path) = file {
        settings.load_file(path)?;
    }
    for arg in overrides {
        settings.add_override(arg)?;
    }
    settings.resolve()
}

/// Usage followed by every key, grouped, with its default and one line of doc.
pub fn help_text() -> String {
    command().render_long_help().to_string()
}

fn command() -> clap::Command {
    Cli::command().after_long_help(keys_help()).after_help("Run with --help for every configuration key.")
}

fn from_clap(e: clap::Error) -> ConfigError {
    match e.kind() {
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
            // `-h` gets the short form; `--help` the long one with the key table.
            ConfigError::Help(e.render().to_string())
        }
        _ => ConfigError::Usage(e.render().to_string()),
    }
}

/// The key table, from `keys::BROKER_KEYS`.
fn keys_help() -> String {
    let mut out = String::from(
        "Configuration keys (server.properties or --override KEY=VALUE), with Kafka's names.\n\
         Defaults marked \"Kafka:\" are where Osprey deliberately differs from Kafka.\n",
    );
    for group in Group::ALL {
        let _ = write!(out, "\n{}:\n", group.title());
        for key in BROKER_KEYS.iter().filter(|k| k.group == group) {
            let default = key.default.unwrap_or("(unset)");
            let default = if default.is_empty() { "\"\"" } else { default };
            let _ = write!(out, "  {} = {}\n      {}", key.name, default, expected(key.config_type, key.validator));
            if let Some(kafka) = key.kafka_default {
                let _ = write!(out, "; Kafka: {}", if kafka.is_empty() { "(required)" } else { kafka });
            }
            if let Some(topic) = key.topic_name() {
                let _ = write!(out, "; per topic: {topic}");
            }
            let _ = writeln!(out, "\n      {}", key.doc);
        }
    }
    // Topic configs no broker key supplies (CreateTopics / AlterConfigs only).
    let _ = write!(out, "\nTopic configs with no broker default:\n");
    for topic in TOPIC_KEYS.iter().filter(|t| t.broker_synonyms.is_empty()) {
        let _ = writeln!(out, "  per topic: {}\n      {}", topic.name, topic.doc);
    }
    out
}
