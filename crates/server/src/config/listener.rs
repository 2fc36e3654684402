//! Listener URLs (`NAME://host:port`), the listener → security protocol map and
//! `host:port` addresses, parsed the way Kafka's `SocketServerConfigs` does.

use std::fmt;

/// A listener's security protocol (`listener.security.protocol.map`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    /// Unauthenticated, unencrypted.
    Plaintext,
    /// TLS (rustls; `ssl.*` keys, see `config::tls`).
    Ssl,
    /// SASL over plaintext (`sasl.*` keys, see `config::sasl`).
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Every protocol, in Kafka's order.
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    /// Kafka's name for it.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether connections shake hands in TLS first (SSL, SASL_SSL).
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether clients authenticate with SASL before any other request.
    pub fn uses_sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }

    /// The protocol with this name (case-insensitive, as Kafka accepts it).
    pub fn from_name(name: &str) -> Option<SecurityProtocol> {
        SecurityProtocol::ALL.into_iter().find(|p| p.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry of `listeners` or `advertised.listeners`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Listener {
    /// Listener name, upper-cased as Kafka normalises it (`PLAINTEXT`, `CONTROLLER`).
    pub name: String,
    /// From `listener.security.protocol.map`.
    pub security_protocol: SecurityProtocol,
    /// Host or IP without IPv6 brackets; empty means every interface when binding.
    pub host: String,
    /// TCP port; 0 binds any free port.
    pub port: u16,
}

impl Listener {
    /// `host:port` to bind, with IPv6 bracketed and an empty host as `0.0.0.0`.
    pub fn bind_address(&self) -> String {
        host_port(if self.host.is_empty() { "0.0.0.0" } else { &self.host }, self.port)
    }
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.name, host_port(&self.host, self.port))
    }
}

/// Formats `host:port`, bracketing IPv6 literals.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A listener URL before its name is looked up in the security protocol map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListenerUrl {
    pub name: String,
    pub host: String,
    pub port: u16,
}

/// Parses `NAME://host:port`, `NAME://:port` or `NAME://[v6]:port`.
pub(crate) fn parse_listener_url(url: &str) -> Result<ListenerUrl, String> {
    let (name, address) = url.split_once("://").ok_or_else(|| format!("`{url}` has no `://`"))?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(format!("`{url}`: the listener name must be letters, digits, `_` or `-`"));
    }
    let (host, port) = parse_host_port(address).map_err(|e| format!("`{url}`: {e}"))?;
    Ok(ListenerUrl { name: name.to_ascii_uppercase(), host, port })
}

/// Parses `host:port`, `:port` or `[v6]:port` into a bracket-free host and a port.
pub(crate) fn parse_host_port(address: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = address.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or("unclosed `[` in the host")?;
        (host, after.strip_prefix(':').ok_or("expected `:port` after `]`")?)
    } else {
        address.rsplit_once(':').ok_or("expected host:port")?
    };
    if !host.chars().all(|c| c.is_ascii_alphanumeric() || "-%._:".contains(c)) {
        return Err(format!("`{host}` is not a host name or IP address"));
    }
    let port = port.parse::<u16>().map_err(|_| format!("`{port}` is not a port (0-65535)"))?;
    Ok((host.to_string(), port))
}

/// One entry of `controller.quorum.voters`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QuorumVoter {
    /// The voter's `node.id`.
    pub id: i32,
    /// Host of its controller listener, without IPv6 brackets.
    pub host: String,
    /// Port of its controller listener.
    pub port: u16,
}

impl fmt::Display for QuorumVoter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.id, host_port(&self.host, self.port))
    }
}

/// Parses `{id}@{host}:{port}` as Kafka's `QuorumConfig.parseVoterConnections` does,
/// with a non-negative id (a node id) and a non-empty host. Kafka 4's
/// `controller.quorum.voters` has no directory id; `{id}@{host}:{port}:{directory id}`
/// is `kafka-storage.sh format --initial-controllers` syntax, not this key's.
pub(crate) fn parse_voter(entry: &str) -> Result<QuorumVoter, String> {
    let form = "each entry should be in the form {id}@{host}:{port}";
    let (id, address) = match entry.split_once('@') {
        Some((id, address)) if !address.contains('@') => (id, address),
        _ => return Err(format!("`{entry}`: {form}")),
    };
    let id = id
        .parse::<i32>()
        .ok()
        .filter(|id| *id >= 0)
        .ok_or_else(|| format!("`{entry}`: the voter id `{id}` is not a node id (an integer >= 0); {form}"))?;
    let (host, port) = parse_host_port(address).map_err(|e| format!("`{entry}`: {e}; {form}"))?;
    if host.is_empty() {
        return Err(format!("`{entry}`: no host; {form}"));
    }
    Ok(QuorumVoter { id, host, port })
}

/// Parses `listener.security.protocol.map`: `NAME:PROTOCOL,...`, names upper-cased.
pub(crate) fn parse_protocol_map(text: &str) -> Result<Vec<(String, SecurityProtocol)>, String> {
    let mut map: Vec<(String, SecurityProtocol)> = Vec::new();
    for entry in split_list(text) {
        let (name, protocol) = entry.split_once(':').ok_or_else(|| format!("`{entry}` is not NAME:PROTOCOL"))?;
        let name = name.trim().to_ascii_uppercase();
        let protocol = SecurityProtocol::from_name(protocol.trim())
            .ok_or_else(|| format!("`{}` is not a security protocol", protocol.trim()))?;
        if name.is_empty() {
            return Err(format!("`{entry}` has an empty listener name"));
        }
        if map.iter().any(|(n, _)| *n == name) {
            return Err(format!("listener `{name}` is mapped twice"));
        }
        map.push((name, protocol));
    }
    Ok(map)
}

/// Splits a Kafka list value: trimmed, comma-separated, items trimmed; empty text is an
/// empty list (Kafka's `ConfigDef.Type.LIST`). Empty items are kept so validators can
/// reject them.
pub(crate) fn split_list(text: &str) -> Vec<String> {
    let text = text.trim();
    if text.is_empty() {
        return Vec::new();
    }
    text.split(',').map(|item| item.trim().to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listener_urls_parse_like_kafka() {
        let l = parse_listener_url("plaintext://127.0.0.1:9092").unwrap();
        assert_eq!(l, ListenerUrl { name: "PLAINTEXT".into(), host: "127.0.0.1".into(), port: 9092 });
        assert_eq!(parse_listener_url("CLIENT://:0").unwrap().host, "");
        assert_eq!(parse_listener_url("A://[::1]:9092").unwrap().host, "::1");
        assert!(parse_listener_url("127.0.0.1:9092").is_err());
        assert!(parse_listener_url("PLAINTEXT://host:99999").is_err());
        assert!(parse_listener_url("PLAINTEXT://host").is_err());
        assert!(parse_listener_url("://host:1").is_err());
        assert!(parse_listener_url("P://ho st:1").is_err());
    }

    #[test]
    fn bind_address_brackets_ipv6_and_fills_the_wildcard() {
        let mut l =
            Listener { name: "A".into(), security_protocol: SecurityProtocol::Plaintext, host: "::1".into(), port: 1 };
        assert_eq!(l.bind_address(), "[::1]:1");
        l.host.clear();
        assert_eq!(l.bind_address(), "0.0.0.0:1");
    }

    #[test]
    fn protocol_map_rejects_duplicates_and_unknown_protocols() {
        assert_eq!(parse_protocol_map("a:plaintext, B:SSL").unwrap().len(), 2);
        assert!(parse_protocol_map("A:PLAINTEXT,a:SSL").is_err());
        assert!(parse_protocol_map("A:TLS").is_err());
        assert!(parse_protocol_map("A").is_err());
    }
}
