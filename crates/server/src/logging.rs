//! Where log lines go and how they look: to stderr, as text (ANSI colours only on a
//! terminal, and never with `NO_COLOR` set) or as one JSON object per line
//! (`OSPREY_LOG_FORMAT=json`) for log collectors. `OSPREY_LOG` picks the levels.
//!
//! Colour codes in a file or in journald are noise (`\x1b[2m...`), so a pipe, a file or
//! a service manager gets plain text whatever the terminal type says.

use crate::log_limit::RepeatLimit;
use std::io::IsTerminal;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter, Layer};

/// The environment variable that picks the [`LogFormat`].
pub const LOG_FORMAT_ENV: &str = "OSPREY_LOG_FORMAT";

/// How each log line is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable, one line per event (the default).
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields` (with `message`),
    /// `target`.
    Json,
}

impl LogFormat {
    /// The format named by `OSPREY_LOG_FORMAT`; unset or empty is [`LogFormat::Text`].
    pub fn from_env() -> Result<LogFormat, String> {
        LogFormat::parse(std::env::var(LOG_FORMAT_ENV).ok().as_deref())
    }

    fn parse(value: Option<&str>) -> Result<LogFormat, String> {
        match value.unwrap_or("") {
            "" | "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("{LOG_FORMAT_ENV}={other:?} is not a log format: use text (the default) or json")),
        }
    }
}

/// Installs the global subscriber: levels from `OSPREY_LOG` (default `info`, openraft's
/// `warn`), lines to stderr in `format`.
pub fn init(format: LogFormat) {
    let levels = EnvFilter::try_from_env("OSPREY_LOG").unwrap_or_else(|_| "info,openraft=warn".into());
    let output = match format {
        LogFormat::Text => fmt::layer()
            .with_target(false)
            .with_ansi(colour(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR")))
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => fmt::layer().json().with_ansi(false).with_writer(std::io::stderr).boxed(),
    };
    // openraft logs an error per failed RPC: a stopped peer must not flood the log.
    tracing_subscriber::registry().with(levels).with(output.with_filter(RepeatLimit::openraft())).init();
}

/// Colour only on a terminal, and not when `NO_COLOR` is set to anything but the empty
/// string (no-color.org).
fn colour(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_format_is_text_unless_json_is_asked_for() {
        assert_eq!(LogFormat::parse(None), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(Some("")), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(Some("text")), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(Some("json")), Ok(LogFormat::Json));
    }

    #[test]
    fn an_unknown_log_format_names_the_allowed_ones() {
        let error = LogFormat::parse(Some("JSON")).unwrap_err();
        assert!(error.contains("OSPREY_LOG_FORMAT") && error.contains("text") && error.contains("json"), "{error}");
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("".into())), "an empty NO_COLOR is unset (no-color.org)");
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None));
    }
}
