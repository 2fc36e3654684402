//! TLS on SSL client listeners (issue 18): the rustls server config built from a
//! listener's `ssl.*` settings, the handshake with its deadline, the principal from the
//! client certificate, and reload when the key store or trust store files change.
//!
//! When the inter-broker listener is an SSL one, its settings also give the client side
//! ([`InterBrokerTls`]): the replica fetchers and the transaction marker sender connect to
//! other brokers with TLS, verify them against the listener's trust store and the name
//! they are advertised under (Kafka's `ssl.endpoint.identification.algorithm=https`), and
//! present the listener's key store when the peer asks for a client certificate.
//!
//! Reload is by file watch: every [`RELOAD_CHECK_INTERVAL`] the listener looks at the
//! modification time and size of its PEM files, and when either changed it builds a
//! new server config from them. New connections get the new certificate; open ones keep
//! the one they shook hands with. A file that does not load (half written, a key that
//! does not match) is logged and the listener keeps serving the last good config.

use crate::config::principal_mapping::PrincipalMapping;
use crate::config::{ClientAuth, Keystore, TlsProtocol, TlsSettings, Truststore};
use crate::telemetry;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// A TLS handshake must finish within this (or `connections.max.idle.ms`, if shorter).
/// Kafka has no such key: its handshake waits for the idle timeout, ten minutes by
/// default, which lets a thousand connections that never send a ClientHello hold their
/// slots (and their buffers) that long. A real client finishes in a few round trips.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often an SSL listener looks at its PEM files for a new certificate.
pub const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The principal of a connection without a client certificate (Kafka's `KafkaPrincipal.ANONYMOUS`).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// One SSL listener's TLS: its settings and the server config new connections get.
#[derive(Debug)]
pub struct ListenerTls {
    settings: TlsSettings,
    current: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    config: Arc<ServerConfig>,
    /// The client side, for the inter-broker listener only.
    client: Option<Arc<rustls::ClientConfig>>,
    /// The files' stamps when `config` was built (or last tried).
    stamps: Vec<FileStamp>,
}

/// A file's modification time and size, `None` when it cannot be read.
type FileStamp = Option<(SystemTime, u64)>;

/// Why a handshake failed, as the `reason` label of `osprey_tls_handshake_failures_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// Not finished within the deadline.
    Timeout,
    /// Bytes that are not TLS (a plaintext client, garbage).
    NotTls,
    /// The client sent an alert: it refused the server's certificate (unknown CA, expired).
    ClientAlert,
    /// The client's certificate is missing (when required) or does not verify.
    ClientCertificate,
    /// No principal mapping rule applies to the client certificate's subject.
    PrincipalMapping,
    /// Anything else: a version or cipher suite in common is missing, the peer closed.
    Other,
}

impl HandshakeFailure {
    pub fn label(self) -> &'static str {
        match self {
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::NotTls => "not_tls",
            HandshakeFailure::ClientAlert => "client_alert",
            HandshakeFailure::ClientCertificate => "client_certificate",
            HandshakeFailure::PrincipalMapping => "principal_mapping",
            HandshakeFailure::Other => "other",
        }
    }
}

impl ListenerTls {
    /// Reads the listener's PEM files and builds its server config; the error says which
    /// file or key is wrong and how.
    /// `inter_broker`: this is the inter-broker listener, whose settings also make the
    /// client config other brokers are reached with.
    pub fn load(settings: TlsSettings, inter_broker: bool) -> Result<Arc<ListenerTls>, String> {
        let stamps = stamps(&settings);
        let config = Arc::new(build_server_config(&settings)?);
        let client = if inter_broker { Some(Arc::new(build_client_config(&settings)?)) } else { None };
        Ok(Arc::new(ListenerTls { settings, current: Mutex::new(Loaded { config, client, stamps }) }))
    }

    /// The listener's name.
    pub fn listener(&self) -> &str {
        &self.settings.listener
    }

    /// Shakes hands on a new connection within the deadline, and names its principal.
    pub async fn accept(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        idle: Duration,
    ) -> Result<(TlsStream<TcpStream>, String), HandshakeFailure> {
        let acceptor = TlsAcceptor::from(self.config());
        let deadline = HANDSHAKE_TIMEOUT.min(idle);
        let result = match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
            Err(_) => Err((HandshakeFailure::Timeout, "not finished in time".to_string())),
            Ok(Err(e)) => Err((classify(&e), e.to_string())),
            Ok(Ok(tls)) => match self.principal(&tls) {
                Ok(principal) => Ok((tls, principal)),
                Err(why) => Err((HandshakeFailure::PrincipalMapping, why)),
            },
        };
        match result {
            Ok((tls, principal)) => {
                tracing::debug!(%peer, listener = %self.settings.listener, %principal, "TLS connection");
                Ok((tls, principal))
            }
            Err((reason, why)) => {
                telemetry::tls_handshake_failed(&self.settings.listener, reason.label());
                tracing::debug!(%peer, listener = %self.settings.listener, reason = reason.label(), error = %why, "TLS handshake failed; closing");
                Err(reason)
            }
        }
    }

    /// `User:<name>` from the client certificate's subject through
    /// `ssl.principal.mapping.rules`, or `User:ANONYMOUS` without one.
    fn principal(&self, tls: &TlsStream<TcpStream>) -> Result<String, String> {
        let (_, connection) = tls.get_ref();
        let Some(leaf) = connection.peer_certificates().and_then(|c| c.first()) else {
            return Ok(ANONYMOUS.to_string());
        };
        let subject = distinguished_name(leaf)?;
        principal_name(&self.settings.principal_mapping, &subject)
    }

    fn config(&self) -> Arc<ServerConfig> {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).config.clone()
    }

    /// Watches the PEM files until `shutdown`, reloading the server config when one
    /// changes. The files are looked at on a blocking thread, never on a worker.
    pub async fn watch(self: Arc<ListenerTls>, mut shutdown: watch::Receiver<bool>) {
        if stamps(&self.settings).is_empty() {
            return; // inline PEM only: nothing to watch
        }
        let mut tick = tokio::time::interval(RELOAD_CHECK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tick.tick() => {}
            }
            let this = self.clone();
            let _ = tokio::task::spawn_blocking(move || this.reload_if_changed()).await;
        }
    }

    /// Rebuilds the server config if a file's stamp changed since the last try.
    fn reload_if_changed(&self) {
        let now = stamps(&self.settings);
        {
            let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
            if current.stamps == now {
                return;
            }
            // Tried once per change: a bad file is logged once, not every second.
            current.stamps = now.clone();
        }
        let listener = &self.settings.listener;
        let inter_broker = self.current.lock().unwrap_or_else(|e| e.into_inner()).client.is_some();
        let built = build_server_config(&self.settings).and_then(|server| {
            let client = if inter_broker { Some(Arc::new(build_client_config(&self.settings)?)) } else { None };
            Ok((server, client))
        });
        match built {
            Ok((config, client)) => {
                let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
                current.config = Arc::new(config);
                current.client = client;
                drop(current);
                telemetry::tls_reloaded(listener, "success");
                tracing::info!(%listener, "TLS key store or trust store changed: new connections use the new files");
            }
            Err(e) => {
                telemetry::tls_reloaded(listener, "failure");
                tracing::error!(%listener, error = %e, "TLS files changed but do not load; the listener keeps the previous ones");
            }
        }
    }
}

/// How this broker reaches other brokers over the SSL inter-broker listener: a handle on
/// the listener's TLS, so a reloaded key store or trust store serves new connections to
/// peers too. Equal when it is the same listener's.
#[derive(Debug, Clone)]
pub struct InterBrokerTls(Arc<ListenerTls>);

impl PartialEq for InterBrokerTls {
    fn eq(&self, other: &InterBrokerTls) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for InterBrokerTls {}

impl InterBrokerTls {
    /// The inter-broker side of `listener`, which must have been loaded with `inter_broker`.
    pub fn new(listener: Arc<ListenerTls>) -> InterBrokerTls {
        InterBrokerTls(listener)
    }

    /// Shakes hands with a peer at `host` (the name or IP it is advertised under, which
    /// its certificate must carry).
    pub async fn connect(
        &self,
        stream: TcpStream,
        host: &str,
    ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let config = self.0.current.lock().unwrap_or_else(|e| e.into_inner()).client.clone().ok_or_else(|| {
            io::Error::other("the inter-broker listener's TLS was loaded without its client side (a bug)")
        })?;
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("`{host}` is not a TLS server name: {e}"))
        })?;
        tokio_rustls::TlsConnector::from(config).connect(name, stream).await
    }
}

/// The principal for a certificate subject: `User:` and the mapped name.
fn principal_name(mapping: &PrincipalMapping, subject: &str) -> Result<String, String> {
    mapping.name(subject).map(|name| format!("User:{name}")).map_err(|e| e.to_string())
}

/// What kind of failure a handshake error is.
fn classify(e: &io::Error) -> HandshakeFailure {
    let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) else {
        return HandshakeFailure::Other;
    };
    match tls {
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => HandshakeFailure::NotTls,
        rustls::Error::AlertReceived(_) => HandshakeFailure::ClientAlert,
        rustls::Error::NoCertificatesPresented | rustls::Error::InvalidCertificate(_) => {
            HandshakeFailure::ClientCertificate
        }
        _ => HandshakeFailure::Other,
    }
}

/// The files the settings read, in a fixed order.
fn watched_files(settings: &TlsSettings) -> Vec<&Path> {
    let mut files = Vec::new();
    if let Keystore::File(path) = &settings.keystore {
        files.push(path.as_path());
    }
    if let Some(Truststore::File(path)) = &settings.truststore {
        files.push(path.as_path());
    }
    files
}

fn stamps(settings: &TlsSettings) -> Vec<FileStamp> {
    watched_files(settings)
        .into_iter()
        .map(|path| std::fs::metadata(path).ok().and_then(|m| Some((m.modified().ok()?, m.len()))))
        .collect()
}

/// Builds the rustls server config of an SSL listener.
pub fn build_server_config(settings: &TlsSettings) -> Result<ServerConfig, String> {
    let listener = &settings.listener;
    let (provider, versions) = provider_and_versions(settings);
    let builder =
        ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions).map_err(|e| {
            format!(
                "listener {listener}: ssl.cipher.suites has no suite for the versions of ssl.enabled.protocols ({e})"
            )
        })?;
    let builder = match (settings.client_auth, &settings.truststore) {
        (ClientAuth::None, _) | (_, None) => builder.with_no_client_auth(),
        (auth, Some(truststore)) => {
            let roots = Arc::new(read_truststore(truststore, listener)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let verifier = if auth == ClientAuth::Requested { verifier.allow_unauthenticated() } else { verifier };
            let verifier = verifier
                .build()
                .map_err(|e| format!("listener {listener}: the trust store cannot verify client certificates: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let (chain, key) = read_keystore(settings)?;
    builder.with_single_cert(chain, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => format!(
            "listener {listener}: the private key does not match the certificate in the key store ({}): use the \
             key the certificate was issued for",
            describe_keystore(&settings.keystore)
        ),
        e => {
            format!("listener {listener}: the key store ({}) is not usable: {e}", describe_keystore(&settings.keystore))
        }
    })
}

/// The client config other brokers are reached with: the trust store verifies them, the
/// key store is presented when they ask for a client certificate.
pub fn build_client_config(settings: &TlsSettings) -> Result<rustls::ClientConfig, String> {
    let listener = &settings.listener;
    let (provider, versions) = provider_and_versions(settings);
    let truststore = settings.truststore.as_ref().ok_or_else(|| {
        format!(
            "listener {listener} is the inter-broker listener and SSL: set its ssl.truststore.location (or \
             ssl.truststore.certificates) to the CA that signed the other brokers' certificates"
        )
    })?;
    let roots = read_truststore(truststore, listener)?;
    let (chain, key) = read_keystore(settings)?;
    rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| format!("listener {listener}: ssl.cipher.suites has no suite for ssl.enabled.protocols ({e})"))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("listener {listener}: the key store cannot be presented to other brokers: {e}"))
}

fn provider_and_versions(
    settings: &TlsSettings,
) -> (Arc<rustls::crypto::CryptoProvider>, Vec<&'static rustls::SupportedProtocolVersion>) {
    let mut provider = rustls::crypto::ring::default_provider();
    if !settings.cipher_suites.is_empty() {
        provider.cipher_suites.retain(|s| settings.cipher_suites.contains(&format!("{:?}", s.suite())));
    }
    let versions = settings
        .protocols
        .iter()
        .map(|p| match p {
            TlsProtocol::Tls12 => &rustls::version::TLS12,
            TlsProtocol::Tls13 => &rustls::version::TLS13,
        })
        .collect();
    (Arc::new(provider), versions)
}

fn describe_keystore(keystore: &Keystore) -> String {
    match keystore {
        Keystore::File(path) => format!("ssl.keystore.location={}", path.display()),
        Keystore::Inline { .. } => "ssl.keystore.certificate.chain and ssl.keystore.key".into(),
    }
}

fn read_file(path: &Path, key: &str, listener: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("listener {listener}: cannot read {key}={}: {e}", path.display()))
}

/// The key store's certificate chain and private key.
fn read_keystore(settings: &TlsSettings) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let listener = &settings.listener;
    let (chain_pem, key_pem, what) = match &settings.keystore {
        Keystore::File(path) => {
            let text = read_file(path, "ssl.keystore.location", listener)?;
            (text.clone(), text, format!("ssl.keystore.location={}", path.display()))
        }
        Keystore::Inline { chain, key } => {
            (chain.clone(), key.clone(), "ssl.keystore.certificate.chain / ssl.keystore.key".to_string())
        }
    };
    let chain_pem = normalize_pem(&chain_pem);
    let key_pem = normalize_pem(&key_pem);
    let chain = certificates(&chain_pem).map_err(|e| format!("listener {listener}: {what}: {e}"))?;
    if chain.is_empty() {
        return Err(format!("listener {listener}: {what} holds no certificate (-----BEGIN CERTIFICATE-----)"));
    }
    let key = private_key(&key_pem, settings.key_password.as_ref().map(|p| p.0.as_str()))
        .map_err(|e| format!("listener {listener}: {what}: {e}"))?;
    Ok((chain, key))
}

/// The private key of a key store's PEM: plain (PKCS#8, PKCS#1, SEC1), or encrypted
/// PKCS#8 (`ENCRYPTED PRIVATE KEY`, PBES2) with `ssl.key.password`, as Kafka reads it.
fn private_key(pem: &str, password: Option<&str>) -> Result<PrivateKeyDer<'static>, String> {
    const BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
    const END: &str = "-----END ENCRYPTED PRIVATE KEY-----";
    if pem.contains("Proc-Type: 4,ENCRYPTED") {
        return Err("the private key is encrypted in OpenSSL's legacy format, which Kafka does not read either: \
                    convert it to encrypted PKCS#8 (`openssl pkcs8 -topk8 -v2 aes-256-cbc -in key.pem -out \
                    key.p8.pem`)"
            .into());
    }
    let Some(start) = pem.find(BEGIN) else {
        if password.is_some() {
            return Err("ssl.key.password is set but the private key is not encrypted (no ENCRYPTED PRIVATE KEY \
                        block): unset ssl.key.password, or store the key encrypted"
                .into());
        }
        return PrivateKeyDer::from_pem_slice(pem.as_bytes())
            .map_err(|e| format!("no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"));
    };
    let Some(password) = password else {
        return Err("the private key is encrypted: set ssl.key.password".into());
    };
    let end =
        pem[start..].find(END).map(|e| start + e + END.len()).ok_or("the encrypted private key has no END line")?;
    let (_, der) = pkcs8::der::pem::decode_vec(&pem.as_bytes()[start..end])
        .map_err(|e| format!("the encrypted private key is not valid PEM: {e}"))?;
    let info = <pkcs8::EncryptedPrivateKeyInfo<'_> as pkcs8::der::Decode<'_>>::from_der(&der)
        .map_err(|e| format!("the encrypted private key is not PKCS#8 EncryptedPrivateKeyInfo: {e}"))?;
    let plain = info.decrypt(password).map_err(|e| {
        format!("cannot decrypt the private key with ssl.key.password (a wrong password, or a scheme other than PBES2 with AES): {e}")
    })?;
    Ok(PrivateKeyDer::Pkcs8(plain.as_bytes().to_vec().into()))
}

/// The trust store's CA certificates.
fn read_truststore(truststore: &Truststore, listener: &str) -> Result<RootCertStore, String> {
    let (pem, what) = match truststore {
        Truststore::File(path) => (
            read_file(path, "ssl.truststore.location", listener)?,
            format!("ssl.truststore.location={}", path.display()),
        ),
        Truststore::Inline(pem) => (pem.clone(), "ssl.truststore.certificates".to_string()),
    };
    let certs = certificates(&normalize_pem(&pem)).map_err(|e| format!("listener {listener}: {what}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("listener {listener}: {what} holds no certificate (-----BEGIN CERTIFICATE-----)"));
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| format!("listener {listener}: {what}: a certificate is not a usable CA: {e}"))?;
    }
    Ok(roots)
}

fn certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("a certificate is not valid PEM: {e}"))
}

/// PEM as Kafka's `PemStore` reads it: every `-----BEGIN X-----`...`-----END X-----`
/// block, with whitespace anywhere in its base64 (a properties value joined from lines
/// with `\` has spaces where the line breaks were). Each block is rewritten in the
/// usual 64-column form; text outside blocks is dropped, headers (`Proc-Type`) kept.
pub fn normalize_pem(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + "-----BEGIN ".len()..];
        let Some(label_end) = after.find("-----") else { break };
        let label = &after[..label_end];
        let body_and_rest = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let Some(body_end) = body_and_rest.find(&end_marker) else { break };
        let body = &body_and_rest[..body_end];
        out.push_str(&format!("-----BEGIN {label}-----\n"));
        if body.contains(':') {
            // An old-style encrypted key with headers: leave it as written.
            out.push_str(body.trim());
            out.push('\n');
        } else {
            let base64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
            for line in base64.as_bytes().chunks(64) {
                out.push_str(std::str::from_utf8(line).unwrap_or_default());
                out.push('\n');
            }
        }
        out.push_str(&end_marker);
        out.push('\n');
        rest = &body_and_rest[body_end + end_marker.len()..];
    }
    out
}

/// A certificate's subject as Java's `X500Principal.getName()` gives it (RFC 2253):
/// the relative names last to first, `,` between them and `+` inside one, the usual
/// keywords (CN, OU, O, L, ST, C, STREET, DC, UID) and other attributes as `OID=#hex`
/// of their DER encoding. This is the name Kafka's principal mapping rules are written
/// against.
pub fn distinguished_name(cert: &CertificateDer<'_>) -> Result<String, String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|e| format!("the client certificate does not parse: {e}"))?;
    let rdns: Vec<String> =
        parsed.subject().iter().map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+")).collect();
    Ok(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

fn attribute(atv: &x509_parser::x509::AttributeTypeAndValue<'_>) -> String {
    let oid = atv.attr_type().to_id_string();
    let keyword = match oid.as_str() {
        "2.5.4.3" => Some("CN"),
        "2.5.4.6" => Some("C"),
        "2.5.4.7" => Some("L"),
        "2.5.4.8" => Some("ST"),
        "2.5.4.9" => Some("STREET"),
        "2.5.4.10" => Some("O"),
        "2.5.4.11" => Some("OU"),
        "0.9.2342.19200300.100.1.25" => Some("DC"),
        "0.9.2342.19200300.100.1.1" => Some("UID"),
        _ => None,
    };
    match (keyword, atv.as_str()) {
        (Some(keyword), Ok(value)) => format!("{keyword}={}", escape_rfc2253(value)),
        _ => format!("{oid}=#{}", hex_der(atv.attr_value())),
    }
}

/// Java's RFC 2253 escaping: `,=+<>#;"\` anywhere, a leading or trailing space.
fn escape_rfc2253(value: &str) -> String {
    let mut out = String::new();
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        if ",=+<>#;\"\\".contains(c) || (c == ' ' && (i == 0 || i == last)) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The DER encoding of a value (tag, length, content) in lower-case hex.
fn hex_der(value: &x509_parser::der_parser::asn1_rs::Any<'_>) -> String {
    let mut der = value.header.raw_tag().map(<[u8]>::to_vec).unwrap_or_else(|| vec![value.tag().0 as u8]);
    let len = value.data.len();
    if len < 0x80 {
        der.push(len as u8);
    } else {
        let bytes: Vec<u8> = len.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
        der.push(0x80 | bytes.len() as u8);
        der.extend(bytes);
    }
    der.extend_from_slice(value.data);
    der.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a listener's files are, for the startup line.
pub fn describe(settings: &TlsSettings) -> String {
    let files: Vec<PathBuf> = watched_files(settings).into_iter().map(Path::to_path_buf).collect();
    format!("{} ({:?}, client auth {:?})", settings.listener, files, settings.client_auth)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_joined_from_properties_lines_is_read_as_kafka_reads_it() {
        let pem = "-----BEGIN CERTIFICATE----- QUJD REVG\n-----END CERTIFICATE----- junk";
        assert_eq!(normalize_pem(pem), "-----BEGIN CERTIFICATE-----\nQUJDREVG\n-----END CERTIFICATE-----\n");
    }

    #[test]
    fn rfc2253_escapes_specials_and_edge_spaces() {
        assert_eq!(escape_rfc2253("a,b+c"), r"a\,b\+c");
        assert_eq!(escape_rfc2253(" x "), r"\ x\ ");
        assert_eq!(escape_rfc2253("plain name"), "plain name");
    }

    #[test]
    fn principal_is_user_and_the_mapped_name() {
        let mapping = PrincipalMapping::parse("RULE:^CN=([^,]*),.*$/$1/L,DEFAULT").unwrap();
        assert_eq!(principal_name(&mapping, "CN=Client,O=Org").unwrap(), "User:client");
        assert_eq!(principal_name(&PrincipalMapping::default(), "O=Org").unwrap(), "User:O=Org");
    }
}
