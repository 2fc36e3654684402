//! The TLS settings of one SSL listener, from Kafka's `ssl.*` keys, each of which
//! `listener.name.<lower-case listener name>.<key>` overrides for that listener (Kafka's
//! per-listener prefix). Checked when the config is resolved, so that a missing key
//! store, a JKS store or an unknown cipher suite stops the start with the key to fix;
//! the files themselves are read when the listener is bound (`crate::tls`).

use std::path::PathBuf;

use super::principal_mapping::PrincipalMapping;
use super::value::Value;
use super::{ConfigError, Origin};

/// Where the server's private key and certificate chain come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keystore {
    /// `ssl.keystore.location`: one PEM file with the key and the chain.
    File(PathBuf),
    /// `ssl.keystore.certificate.chain` and `ssl.keystore.key`, inline PEM.
    Inline { chain: String, key: String },
}

/// Where the trusted CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Truststore {
    /// `ssl.truststore.location`: a PEM file of certificates.
    File(PathBuf),
    /// `ssl.truststore.certificates`: inline PEM.
    Inline(String),
}

/// A secret (`ssl.key.password`): its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([hidden])")
    }
}

/// `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    None,
    /// Asked for and verified if sent; a client without one is `User:ANONYMOUS`.
    Requested,
    /// A client without a certificate the trust store verifies is refused.
    Required,
}

/// A TLS version of `ssl.enabled.protocols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsProtocol {
    Tls12,
    Tls13,
}

/// Everything an SSL listener needs, checked (the files are not read yet).
#[derive(Debug, Clone, PartialEq)]
pub struct TlsSettings {
    /// The listener's name (upper case, as in `listeners`).
    pub listener: String,
    pub keystore: Keystore,
    /// `ssl.key.password`: the key store's private key is encrypted PKCS#8 with it.
    pub key_password: Option<Secret>,
    pub truststore: Option<Truststore>,
    pub client_auth: ClientAuth,
    pub protocols: Vec<TlsProtocol>,
    /// rustls's names of the suites `ssl.cipher.suites` asked for (`TLS13_AES_128_GCM_SHA256`);
    /// empty: rustls's defaults.
    pub cipher_suites: Vec<String>,
    pub principal_mapping: PrincipalMapping,
}

/// One `ssl.*` setting as it applies to a listener: its value and where it came from
/// (the prefixed key when the listener overrides it).
#[derive(Debug, Clone)]
pub(crate) struct Setting {
    /// The key as set: `ssl.keystore.location` or `listener.name.ssl.ssl.keystore.location`.
    pub key: String,
    pub value: Option<Value>,
    pub raw: Option<String>,
    pub origin: Origin,
}

impl Setting {
    fn invalid(&self, expected: impl Into<String>) -> ConfigError {
        ConfigError::InvalidValue {
            key: self.key.clone(),
            value: self.raw.clone().unwrap_or_default(),
            expected: expected.into(),
            origin: self.origin.clone(),
        }
    }

    fn string(&self) -> Option<String> {
        match &self.value {
            Some(Value::Str(s)) if !s.is_empty() => Some(s.clone()),
            _ => None,
        }
    }

    fn list(&self) -> Vec<String> {
        match &self.value {
            Some(Value::List(items)) => items.iter().filter(|i| !i.is_empty()).cloned().collect(),
            Some(Value::Str(s)) if !s.is_empty() => vec![s.clone()],
            _ => Vec::new(),
        }
    }
}

/// The JSSE/IANA cipher suite names rustls (ring provider) implements, with rustls's
/// name for each. TLS 1.3 suites are `TLS_AES_...` in JSSE and `TLS13_AES_...` in rustls.
pub fn rustls_suite_name(jsse: &str) -> Option<String> {
    let supported: Vec<String> =
        rustls::crypto::ring::ALL_CIPHER_SUITES.iter().map(|s| format!("{:?}", s.suite())).collect();
    let candidates = [jsse.to_string(), jsse.replacen("TLS_", "TLS13_", 1)];
    candidates.into_iter().find(|c| supported.contains(c))
}

/// The JSSE names of every suite rustls implements, for error messages.
fn supported_suites() -> String {
    rustls::crypto::ring::ALL_CIPHER_SUITES
        .iter()
        .map(|s| format!("{:?}", s.suite()).replacen("TLS13_", "TLS_", 1))
        .collect::<Vec<_>>()
        .join(", ")
}

impl TlsSettings {
    /// Checks the settings of listener `listener`; `get` gives each `ssl.*` key as it
    /// applies to the listener.
    pub(crate) fn resolve(listener: &str, get: &dyn Fn(&str) -> Setting) -> Result<TlsSettings, ConfigError> {
        let truststore = truststore(get)?;
        let client_auth = client_auth(get)?;
        if client_auth != ClientAuth::None && truststore.is_none() {
            return Err(get("ssl.client.auth").invalid(format!(
                "`none` unless a trust store is set for listener {listener} (ssl.truststore.location or \
                 ssl.truststore.certificates): client certificates are verified against it"
            )));
        }
        let rules = get("ssl.principal.mapping.rules");
        let principal_mapping = PrincipalMapping::parse(&rules.string().unwrap_or_else(|| "DEFAULT".into()))
            .map_err(|e| rules.invalid(format!("RULE:pattern/replacement/[LU] or DEFAULT rules ({e})")))?;
        Ok(TlsSettings {
            listener: listener.to_string(),
            keystore: keystore(listener, get)?,
            key_password: get("ssl.key.password").string().map(Secret),
            truststore,
            client_auth,
            protocols: protocols(get)?,
            cipher_suites: cipher_suites(get)?,
            principal_mapping,
        })
    }
}

fn pem_only(setting: &Setting) -> Result<(), ConfigError> {
    match setting.string().as_deref() {
        None | Some("PEM") => Ok(()),
        Some(other) => Err(setting.invalid(format!(
            "PEM: Osprey reads PEM stores only, not {other} (convert it: `keytool -importkeystore -deststoretype \
             PKCS12` then `openssl pkcs12 -nodes` gives PEM)"
        ))),
    }
}

fn keystore(listener: &str, get: &dyn Fn(&str) -> Setting) -> Result<Keystore, ConfigError> {
    pem_only(&get("ssl.keystore.type"))?;
    let password = get("ssl.keystore.password");
    if password.string().is_some() {
        return Err(password.invalid(
            "unset with a PEM key store (Kafka: SSL key store password cannot be specified with PEM format, only \
             key password may be specified)",
        ));
    }
    let location = get("ssl.keystore.location");
    let chain = get("ssl.keystore.certificate.chain");
    let key = get("ssl.keystore.key");
    match (location.string(), chain.string(), key.string()) {
        (Some(path), None, None) => Ok(Keystore::File(PathBuf::from(path))),
        (None, Some(chain), Some(key)) => Ok(Keystore::Inline { chain, key }),
        (Some(_), _, _) => Err(location
            .invalid("either ssl.keystore.location or ssl.keystore.certificate.chain with ssl.keystore.key, not both")),
        (None, Some(_), None) => {
            Err(key.invalid("the private key in PEM, since ssl.keystore.certificate.chain is set"))
        }
        (None, None, Some(_)) => Err(chain.invalid("the certificate chain in PEM, since ssl.keystore.key is set")),
        (None, None, None) => Err(location.invalid(format!(
            "a PEM key store for SSL listener {listener}: set ssl.keystore.location (a PEM file with the key and \
             the certificate chain) or ssl.keystore.certificate.chain and ssl.keystore.key, or \
             listener.name.{}.ssl.* for this listener only",
            listener.to_ascii_lowercase()
        ))),
    }
}

fn truststore(get: &dyn Fn(&str) -> Setting) -> Result<Option<Truststore>, ConfigError> {
    pem_only(&get("ssl.truststore.type"))?;
    let password = get("ssl.truststore.password");
    if password.string().is_some() {
        return Err(password.invalid("unset with a PEM trust store (Kafka refuses a password with PEM)"));
    }
    let location = get("ssl.truststore.location");
    let certificates = get("ssl.truststore.certificates");
    match (location.string(), certificates.string()) {
        (Some(_), Some(_)) => {
            Err(location.invalid("either ssl.truststore.location or ssl.truststore.certificates, not both"))
        }
        (Some(path), None) => Ok(Some(Truststore::File(PathBuf::from(path)))),
        (None, Some(pem)) => Ok(Some(Truststore::Inline(pem))),
        (None, None) => Ok(None),
    }
}

fn client_auth(get: &dyn Fn(&str) -> Setting) -> Result<ClientAuth, ConfigError> {
    let setting = get("ssl.client.auth");
    match setting.string().as_deref() {
        None | Some("none") => Ok(ClientAuth::None),
        Some("requested") => Ok(ClientAuth::Requested),
        Some("required") => Ok(ClientAuth::Required),
        Some(_) => Err(setting.invalid("none, requested or required")),
    }
}

fn protocols(get: &dyn Fn(&str) -> Setting) -> Result<Vec<TlsProtocol>, ConfigError> {
    let setting = get("ssl.enabled.protocols");
    let mut out = Vec::new();
    for name in setting.list() {
        let protocol = match name.as_str() {
            "TLSv1.2" => TlsProtocol::Tls12,
            "TLSv1.3" => TlsProtocol::Tls13,
            other => {
                return Err(setting.invalid(format!(
                    "TLSv1.2 and/or TLSv1.3 (`{other}` is not offered: rustls implements no older version)"
                )))
            }
        };
        if !out.contains(&protocol) {
            out.push(protocol);
        }
    }
    if out.is_empty() {
        return Err(setting.invalid("at least one of TLSv1.2 and TLSv1.3"));
    }
    Ok(out)
}

fn cipher_suites(get: &dyn Fn(&str) -> Setting) -> Result<Vec<String>, ConfigError> {
    let setting = get("ssl.cipher.suites");
    let names = setting.list();
    let unknown: Vec<&str> = names.iter().map(String::as_str).filter(|n| rustls_suite_name(n).is_none()).collect();
    if !unknown.is_empty() {
        return Err(setting.invalid(format!(
            "cipher suites Osprey's TLS (rustls) implements; not: {} (supported: {})",
            unknown.join(", "),
            supported_suites()
        )));
    }
    Ok(names.iter().filter_map(|n| rustls_suite_name(n)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;

    fn resolve(args: &[&str]) -> Result<crate::config::BrokerConfig, ConfigError> {
        let mut raw = RawConfig::new();
        for a in args {
            raw.add_override(a).unwrap();
        }
        raw.resolve().map(|(c, _)| c)
    }

    fn ssl_listener(extra: &[&str]) -> Result<TlsSettings, ConfigError> {
        let mut args = vec!["listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"];
        args.extend_from_slice(extra);
        resolve(&args)?.tls_settings("SSL")
    }

    #[test]
    fn keystore_file_with_kafka_defaults() {
        let s = ssl_listener(&["ssl.keystore.location=/k.pem"]).unwrap();
        assert_eq!(s.keystore, Keystore::File("/k.pem".into()));
        assert_eq!(s.truststore, None);
        assert_eq!(s.client_auth, ClientAuth::None);
        assert_eq!(s.protocols, vec![TlsProtocol::Tls12, TlsProtocol::Tls13]);
        assert!(s.cipher_suites.is_empty());
    }

    #[test]
    fn listener_prefix_overrides_the_broker_key() {
        let s = ssl_listener(&[
            "ssl.keystore.location=/broker.pem",
            "listener.name.ssl.ssl.keystore.location=/listener.pem",
            "listener.name.ssl.ssl.truststore.location=/ca.pem",
            "listener.name.ssl.ssl.client.auth=required",
        ])
        .unwrap();
        assert_eq!(s.keystore, Keystore::File("/listener.pem".into()));
        assert_eq!(s.truststore, Some(Truststore::File("/ca.pem".into())));
        assert_eq!(s.client_auth, ClientAuth::Required);
    }

    #[test]
    fn inline_pem_keystore_and_truststore() {
        let s = ssl_listener(&[
            "ssl.keystore.certificate.chain=-----BEGIN CERTIFICATE-----",
            "ssl.keystore.key=-----BEGIN PRIVATE KEY-----",
            "ssl.truststore.certificates=-----BEGIN CERTIFICATE-----",
        ])
        .unwrap();
        assert!(matches!(s.keystore, Keystore::Inline { .. }));
        assert!(matches!(s.truststore, Some(Truststore::Inline(_))));
    }

    #[test]
    fn an_ssl_listener_without_a_keystore_is_refused_naming_the_keys() {
        let err = resolve(&["listeners=SSL://127.0.0.1:0"]).unwrap_err().to_string();
        assert!(err.contains("ssl.keystore.location") && err.contains("SSL"), "{err}");
    }

    #[test]
    fn unknown_cipher_suites_are_named() {
        let err = ssl_listener(&[
            "ssl.keystore.location=/k.pem",
            "ssl.cipher.suites=TLS_AES_128_GCM_SHA256,TLS_BOGUS_SUITE,TLS_RSA_WITH_RC4_128_MD5",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("TLS_BOGUS_SUITE, TLS_RSA_WITH_RC4_128_MD5"), "{err}");
        assert!(!err.contains("not: TLS_AES_128_GCM_SHA256"), "{err}");
    }

    #[test]
    fn jsse_cipher_suite_names_map_to_rustls() {
        let s = ssl_listener(&[
            "ssl.keystore.location=/k.pem",
            "ssl.cipher.suites=TLS_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        ])
        .unwrap();
        assert_eq!(s.cipher_suites, vec!["TLS13_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"]);
    }

    #[test]
    fn jks_stores_old_protocols_and_client_auth_without_truststore_are_refused() {
        let err = ssl_listener(&["ssl.keystore.location=/k.jks", "ssl.keystore.type=JKS"]).unwrap_err();
        assert!(err.to_string().contains("PEM"), "{err}");
        let err = ssl_listener(&["ssl.keystore.location=/k.pem", "ssl.enabled.protocols=TLSv1.1"]).unwrap_err();
        assert!(err.to_string().contains("TLSv1.1"), "{err}");
        let err = ssl_listener(&["ssl.keystore.location=/k.pem", "ssl.client.auth=required"]).unwrap_err();
        assert!(err.to_string().contains("trust store"), "{err}");
        let err = ssl_listener(&["ssl.keystore.location=/k.pem", "ssl.keystore.password=x"]).unwrap_err();
        assert!(err.to_string().contains("ssl.keystore.password"), "{err}");
    }

    #[test]
    fn a_bad_mapping_rule_is_a_config_error() {
        let err =
            ssl_listener(&["ssl.keystore.location=/k.pem", "ssl.principal.mapping.rules=RULE:x/y/Q"]).unwrap_err();
        assert!(err.to_string().contains("ssl.principal.mapping.rules"), "{err}");
    }

    #[test]
    fn sasl_ssl_listeners_need_a_key_store() {
        let err = resolve(&["listeners=SASL_SSL://127.0.0.1:0", "sasl.enabled.mechanisms=SCRAM-SHA-256"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("key store for SSL listener SASL_SSL"), "{err}");
    }

    #[test]
    fn prefixed_ssl_keys_are_not_reported_unknown() {
        let mut raw = RawConfig::new();
        raw.add_override("listener.name.ssl.ssl.keystore.location=/k.pem").unwrap();
        raw.add_override("listener.name.ssl.bogus.key=1").unwrap();
        let (_, unknown) = raw.resolve().unwrap();
        assert_eq!(unknown, vec!["listener.name.ssl.bogus.key".to_string()]);
    }
}
