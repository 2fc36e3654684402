//! `osprey [server.properties] [--override key=value]... [--help]`, the command line of
//! Kafka's `kafka-server-start.sh`.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser};

use super::broker::{BrokerConfig, RawConfig};
use super::keys::{Group, BROKER_KEYS};
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
                  metrics on http://127.0.0.1:9644/metrics."
)]
struct Cli {
    /// A Kafka-style server.properties file; keys it does not set keep their defaults.
    #[arg(value_name = "server.properties")]
    config: Option<PathBuf>,
    /// Set KEY to VALUE, after the file is read (repeatable).
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
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
    let mut settings = RawConfig::new();
    if let Some(path) = &cli.config {
        settings.load_file(path)?;
    }
    for arg in &cli.overrides {
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
    out
}
