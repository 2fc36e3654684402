//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's `ScramSaslServer`
//! runs them: no channel binding (`n,,`), an optional authorization id that must equal
//! the user name, no `tokenauth` extension (delegation tokens are not served), and the
//! credential's iteration count at least 4096.
//!
//! The primitives are RustCrypto's (`sha2`, `hmac`, `pbkdf2`, and `subtle` for the
//! constant-time comparison of the stored key); this file only composes them as the RFC
//! says. No I/O: the caller passes the messages in and sends what comes out.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// Kafka's least iteration count of a SCRAM credential (`ScramMechanism.minIterations`).
pub const MIN_ITERATIONS: i32 = 4096;
/// Kafka's greatest iteration count (`ScramMechanism.maxIterations`): beyond it the
/// broker's PBKDF2 work per attempt is the client's to choose.
pub const MAX_ITERATIONS: i32 = 16384;

/// A SCRAM hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    Sha256,
    Sha512,
}

/// What the broker keeps of a user's SCRAM password (Kafka's `ScramCredential`): never
/// the password itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

impl ScramMechanism {
    /// The IANA name: `SCRAM-SHA-256`.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// Kafka's `ScramMechanism` type id, as AlterUserScramCredentials carries it.
    pub fn type_id(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub fn from_type_id(id: i8) -> Option<ScramMechanism> {
        match id {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    /// The digest's length in bytes.
    pub fn hash_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => {
                let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            ScramMechanism::Sha512 => {
                let mut mac = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes keys of any length");
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
        }
    }

    /// `SaltedPassword := Hi(password, salt, i)`: PBKDF2 with this hash's HMAC.
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0; self.hash_len()];
        match self {
            ScramMechanism::Sha256 => pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out),
            ScramMechanism::Sha512 => pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out),
        }
        out
    }

    /// The stored key and server key of `password` with `salt` and `iterations`, as
    /// Kafka's `ScramFormatter.generateCredential` derives them.
    pub fn credential(self, password: &[u8], salt: &[u8], iterations: i32) -> ScramCredential {
        let salted = self.salted_password(password, salt, iterations.max(1) as u32);
        self.credential_from_salted_password(&salted, salt, iterations)
    }

    /// The credential from an already salted password (AlterUserScramCredentials sends
    /// the salted password, never the password).
    pub fn credential_from_salted_password(self, salted: &[u8], salt: &[u8], iterations: i32) -> ScramCredential {
        let client_key = self.hmac(salted, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            stored_key: self.hash(&client_key),
            server_key: self.hmac(salted, b"Server Key"),
            iterations,
        }
    }
}

/// What the server answers to a client message.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this (the server-first message) and wait for the client-final message.
    Continue(Vec<u8>),
    /// Authenticated as `user`; send `server_final` (the server's signature).
    Done { user: String, server_final: Vec<u8> },
}

/// One SCRAM exchange on the server side.
#[derive(Debug)]
pub struct ScramServer {
    mechanism: ScramMechanism,
    server_nonce: String,
    stage: Stage,
}

#[derive(Debug)]
enum Stage {
    ClientFirst,
    ClientFinal {
        user: String,
        credential: ScramCredential,
        gs2_header: String,
        client_first_bare: String,
        server_first: String,
        nonce: String,
    },
    Finished,
}

impl ScramServer {
    /// `server_nonce`: fresh random printable characters, no `,` (appended to the
    /// client's nonce).
    pub fn new(mechanism: ScramMechanism, server_nonce: String) -> ScramServer {
        ScramServer { mechanism, server_nonce, stage: Stage::ClientFirst }
    }

    /// Takes the next client message; `lookup` gives a user's credential for this
    /// mechanism. An error says why the exchange failed, for the log only.
    pub fn evaluate(
        &mut self,
        message: &[u8],
        lookup: &dyn Fn(&str) -> Option<ScramCredential>,
    ) -> Result<Step, String> {
        let message = std::str::from_utf8(message).map_err(|_| "SCRAM message is not UTF-8".to_string())?;
        match std::mem::replace(&mut self.stage, Stage::Finished) {
            Stage::ClientFirst => self.client_first(message, lookup),
            Stage::ClientFinal { user, credential, gs2_header, client_first_bare, server_first, nonce } => {
                let auth = Exchange { gs2_header, client_first_bare, server_first, nonce };
                self.client_final(message, user, &credential, &auth)
            }
            Stage::Finished => Err("SCRAM message after the exchange finished".into()),
        }
    }

    fn client_first(
        &mut self,
        message: &str,
        lookup: &dyn Fn(&str) -> Option<ScramCredential>,
    ) -> Result<Step, String> {
        let first = ClientFirst::parse(message)?;
        let credential = lookup(&first.user).ok_or_else(|| format!("unknown user {}", first.user))?;
        if credential.iterations < MIN_ITERATIONS {
            return Err(format!(
                "user {}'s {} credential has {} iterations, fewer than {MIN_ITERATIONS}",
                first.user,
                self.mechanism.name(),
                credential.iterations
            ));
        }
        let nonce = format!("{}{}", first.nonce, self.server_nonce);
        let server_first = format!("r={nonce},s={},i={}", BASE64.encode(&credential.salt), credential.iterations);
        let reply = server_first.clone().into_bytes();
        self.stage = Stage::ClientFinal {
            user: first.user,
            credential,
            gs2_header: first.gs2_header,
            client_first_bare: first.bare,
            server_first,
            nonce,
        };
        Ok(Step::Continue(reply))
    }

    fn client_final(
        &mut self,
        message: &str,
        user: String,
        credential: &ScramCredential,
        exchange: &Exchange,
    ) -> Result<Step, String> {
        // `c=...,r=...[,extensions],p=...`: the proof comes last.
        let (without_proof, proof) =
            message.rsplit_once(",p=").ok_or_else(|| "client-final message without a proof".to_string())?;
        let mut attributes = without_proof.split(',');
        let channel_binding = attributes.next().and_then(|a| a.strip_prefix("c=")).unwrap_or_default();
        let nonce = attributes.next().and_then(|a| a.strip_prefix("r=")).unwrap_or_default();
        if BASE64.decode(channel_binding).ok().as_deref() != Some(exchange.gs2_header.as_bytes()) {
            return Err(format!("user {user}: channel binding does not match the gs2 header"));
        }
        if nonce != exchange.nonce {
            return Err(format!("user {user}: invalid nonce in the client-final message"));
        }
        let proof = BASE64.decode(proof).map_err(|_| format!("user {user}: proof is not base64"))?;
        if proof.len() != self.mechanism.hash_len() {
            return Err(format!("user {user}: proof of {} bytes", proof.len()));
        }
        let auth_message =
            format!("{},{},{}", exchange.client_first_bare, exchange.server_first, without_proof).into_bytes();
        let client_signature = self.mechanism.hmac(&credential.stored_key, &auth_message);
        let client_key: Vec<u8> = proof.iter().zip(&client_signature).map(|(p, s)| p ^ s).collect();
        let valid: bool = self.mechanism.hash(&client_key).ct_eq(&credential.stored_key).into();
        if !valid {
            return Err(format!("wrong password for user {user}"));
        }
        let server_signature = self.mechanism.hmac(&credential.server_key, &auth_message);
        Ok(Step::Done { user, server_final: format!("v={}", BASE64.encode(server_signature)).into_bytes() })
    }
}

/// What the AuthMessage is made of, kept between the two client messages.
struct Exchange {
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

/// `gs2-header client-first-message-bare` (Kafka's `ClientFirstMessage`).
#[derive(Debug)]
struct ClientFirst {
    gs2_header: String,
    bare: String,
    user: String,
    nonce: String,
}

impl ClientFirst {
    fn parse(message: &str) -> Result<ClientFirst, String> {
        // `n,[a=authzid],`: Kafka supports no channel binding.
        let rest = message.strip_prefix("n,").ok_or_else(|| "gs2 header is not `n,` (channel binding)".to_string())?;
        let (authzid, bare) = rest.split_once(',').ok_or_else(|| "client-first message without a user".to_string())?;
        let gs2_header = format!("n,{authzid},");
        let mut attributes = bare.split(',');
        let user = attributes
            .next()
            .and_then(|a| a.strip_prefix("n="))
            .ok_or_else(|| "client-first message without n=".to_string())
            .and_then(decode_sasl_name)?;
        let nonce = attributes.next().and_then(|a| a.strip_prefix("r=")).unwrap_or_default();
        if nonce.is_empty() || !nonce.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(format!("user {user}: client nonce missing or not printable"));
        }
        for extension in attributes {
            if extension.starts_with("tokenauth=") {
                return Err(format!("user {user}: delegation tokens (tokenauth) are not served"));
            }
        }
        if let Some(authzid) = authzid.strip_prefix("a=") {
            if decode_sasl_name(authzid)? != user {
                return Err(format!("user {user} asked for a different authorization id"));
            }
        } else if !authzid.is_empty() {
            return Err("malformed gs2 header".into());
        }
        Ok(ClientFirst { gs2_header, bare: bare.to_string(), nonce: nonce.to_string(), user })
    }
}

/// One SCRAM exchange on the client side, as a broker logs in to another broker with
/// Kafka's `ScramSaslClient`: `client_first`, then `client_final` on the server-first
/// message, then `verify_server_final`, which proves the server knew the credential.
#[derive(Debug)]
pub struct ScramClient {
    mechanism: ScramMechanism,
    password: Vec<u8>,
    nonce: String,
    client_first_bare: String,
    /// The server signature expected in the server-final message, once client-final is sent.
    expected_server_signature: Option<Vec<u8>>,
}

impl ScramClient {
    /// `nonce`: fresh random printable characters, no `,` ([`fresh_nonce`]).
    pub fn new(mechanism: ScramMechanism, user: &str, password: &[u8], nonce: String) -> ScramClient {
        let client_first_bare = format!("n={},r={nonce}", encode_sasl_name(user));
        ScramClient {
            mechanism,
            password: password.to_vec(),
            nonce,
            client_first_bare,
            expected_server_signature: None,
        }
    }

    /// The client-first message: no channel binding, no authorization id.
    pub fn client_first(&self) -> Vec<u8> {
        format!("{GS2_HEADER}{}", self.client_first_bare).into_bytes()
    }

    /// The client-final message answering `server_first`; an error says why the server's
    /// message is refused.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let server_first = std::str::from_utf8(server_first).map_err(|_| "server-first message is not UTF-8")?;
        let mut attributes = server_first.split(',');
        let nonce = attributes.next().and_then(|a| a.strip_prefix("r=")).ok_or("server-first message without r=")?;
        let salt = attributes.next().and_then(|a| a.strip_prefix("s=")).ok_or("server-first message without s=")?;
        let iterations =
            attributes.next().and_then(|a| a.strip_prefix("i=")).ok_or("server-first message without i=")?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err("the server's nonce does not extend the client's".into());
        }
        let salt = BASE64.decode(salt).map_err(|_| "the server's salt is not base64")?;
        let iterations: i32 = iterations.parse().map_err(|_| "the server's iteration count is not a number")?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(format!(
                "the server asks for {iterations} iterations, outside {MIN_ITERATIONS}..={MAX_ITERATIONS}"
            ));
        }
        let salted = self.mechanism.salted_password(&self.password, &salt, iterations as u32);
        let credential = self.mechanism.credential_from_salted_password(&salted, &salt, iterations);
        let client_key = self.mechanism.hmac(&salted, b"Client Key");
        let without_proof = format!("c={},r={nonce}", BASE64.encode(GS2_HEADER));
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare).into_bytes();
        let client_signature = self.mechanism.hmac(&credential.stored_key, &auth_message);
        let proof: Vec<u8> = client_key.iter().zip(&client_signature).map(|(k, s)| k ^ s).collect();
        self.expected_server_signature = Some(self.mechanism.hmac(&credential.server_key, &auth_message));
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: `v=` with the signature only a server holding the
    /// credential can make, or `e=` with the server's reason.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), String> {
        let server_final = std::str::from_utf8(server_final).map_err(|_| "server-final message is not UTF-8")?;
        if let Some(error) = server_final.strip_prefix("e=") {
            return Err(format!("the server refused the exchange: {error}"));
        }
        let signature = server_final
            .strip_prefix("v=")
            .and_then(|v| BASE64.decode(v.split(',').next().unwrap_or_default()).ok())
            .ok_or("server-final message without a base64 v=")?;
        let expected = self.expected_server_signature.as_deref().ok_or("server-final message before client-final")?;
        if !bool::from(signature.ct_eq(expected)) {
            return Err("the server's signature does not match: it does not hold this user's credential".into());
        }
        Ok(())
    }
}

/// The gs2 header of a client that does no channel binding and names no authorization id.
const GS2_HEADER: &str = "n,,";

/// A fresh SCRAM nonce: 24 random bytes, base64url without padding (no `,`).
pub fn fresh_nonce() -> String {
    let mut bytes = [0u8; 24];
    if getrandom::fill(&mut bytes).is_err() {
        // The OS has no randomness to give: the nonce is then unique but guessable,
        // which SCRAM tolerates (the proof still needs the password).
        bytes[..16].copy_from_slice(
            &std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
                .to_be_bytes(),
        );
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `saslname` of a user name: `,` as `=2C` and `=` as `=3D`.
fn encode_sasl_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// `saslname`: `=2C` stands for `,` and `=3D` for `=`; any other `=` is malformed.
fn decode_sasl_name(name: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err("malformed user name (a `=` not followed by 2C or 3D)".into()),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err("empty user name".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3: user `user`, password `pencil`.
    const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const SERVER_FIRST: &str = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn pencil() -> ScramCredential {
        ScramMechanism::Sha256.credential(b"pencil", &BASE64.decode(SALT).unwrap(), 4096)
    }

    fn lookup(user: &str) -> Option<ScramCredential> {
        (user == "user").then(pencil)
    }

    #[test]
    fn rfc_7677_sha_256_exchange() {
        let mut server = ScramServer::new(ScramMechanism::Sha256, SERVER_NONCE.into());
        let first = server.evaluate(CLIENT_FIRST.as_bytes(), &lookup).unwrap();
        assert_eq!(first, Step::Continue(SERVER_FIRST.as_bytes().to_vec()));
        let done = server.evaluate(CLIENT_FINAL.as_bytes(), &lookup).unwrap();
        assert_eq!(done, Step::Done { user: "user".into(), server_final: SERVER_FINAL.as_bytes().to_vec() });
        assert!(server.evaluate(CLIENT_FINAL.as_bytes(), &lookup).is_err(), "no message after the end");
    }

    #[test]
    fn the_client_makes_rfc_7677s_messages_and_checks_the_servers_signature() {
        let mut client = ScramClient::new(ScramMechanism::Sha256, "user", b"pencil", "rOprNGfwEbeRWgbNEkqO".into());
        assert_eq!(client.client_first(), CLIENT_FIRST.as_bytes());
        assert_eq!(client.client_final(SERVER_FIRST.as_bytes()).unwrap(), CLIENT_FINAL.as_bytes());
        client.verify_server_final(SERVER_FINAL.as_bytes()).unwrap();
        let forged = SERVER_FINAL.replace("v=6r", "v=7r");
        assert!(client.verify_server_final(forged.as_bytes()).is_err(), "a server without the credential is refused");
        assert!(client.verify_server_final(b"e=invalid-proof").unwrap_err().contains("invalid-proof"));
    }

    #[test]
    fn the_client_and_the_server_agree_on_both_hashes_and_odd_names() {
        for mechanism in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            let credential = mechanism.credential(b"s3cret", b"salt-of-the-earth", 4096);
            let lookup = |user: &str| (user == "broker,=one").then(|| credential.clone());
            let mut client = ScramClient::new(mechanism, "broker,=one", b"s3cret", fresh_nonce());
            let mut server = ScramServer::new(mechanism, fresh_nonce());
            let Step::Continue(server_first) = server.evaluate(&client.client_first(), &lookup).unwrap() else {
                panic!("the server did not answer client-first")
            };
            let client_final = client.client_final(&server_first).unwrap();
            let Step::Done { user, server_final } = server.evaluate(&client_final, &lookup).unwrap() else {
                panic!("the server did not finish")
            };
            assert_eq!(user, "broker,=one");
            client.verify_server_final(&server_final).unwrap();

            let mut wrong = ScramClient::new(mechanism, "broker,=one", b"guess", fresh_nonce());
            let mut server = ScramServer::new(mechanism, fresh_nonce());
            let Step::Continue(server_first) = server.evaluate(&wrong.client_first(), &lookup).unwrap() else {
                panic!("the server did not answer client-first")
            };
            let client_final = wrong.client_final(&server_first).unwrap();
            assert!(server.evaluate(&client_final, &lookup).unwrap_err().contains("wrong password"));
        }
    }

    #[test]
    fn the_client_refuses_a_server_first_that_keeps_its_nonce_or_asks_too_little_work() {
        let mut client = ScramClient::new(ScramMechanism::Sha256, "user", b"pencil", "abc".into());
        assert!(client.client_final(b"r=abc,s=c2FsdA==,i=4096").is_err(), "nonce not extended");
        assert!(client.client_final(b"r=xyzdef,s=c2FsdA==,i=4096").is_err(), "another nonce");
        assert!(client.client_final(b"r=abcdef,s=c2FsdA==,i=1").is_err(), "too few iterations");
        assert!(client.verify_server_final(b"v=AAAA").is_err(), "no client-final sent yet");
    }

    #[test]
    fn a_wrong_proof_fails() {
        let mut server = ScramServer::new(ScramMechanism::Sha256, SERVER_NONCE.into());
        server.evaluate(CLIENT_FIRST.as_bytes(), &lookup).unwrap();
        let forged = CLIENT_FINAL.replace("p=dHzb", "p=dHzc");
        let err = server.evaluate(forged.as_bytes(), &lookup).unwrap_err();
        assert!(err.contains("wrong password"), "{err}");
    }

    #[test]
    fn unknown_users_bad_nonces_and_few_iterations_fail() {
        let mut server = ScramServer::new(ScramMechanism::Sha256, SERVER_NONCE.into());
        assert!(server.evaluate(b"n,,n=nobody,r=abc", &lookup).is_err());
        let mut server = ScramServer::new(ScramMechanism::Sha256, SERVER_NONCE.into());
        server.evaluate(CLIENT_FIRST.as_bytes(), &lookup).unwrap();
        let other_nonce = CLIENT_FINAL.replace("$k0,", "$k1,");
        assert!(server.evaluate(other_nonce.as_bytes(), &lookup).is_err());
        let weak = |_: &str| Some(ScramMechanism::Sha256.credential(b"pencil", b"salt", 1000));
        let mut server = ScramServer::new(ScramMechanism::Sha256, SERVER_NONCE.into());
        assert!(server.evaluate(CLIENT_FIRST.as_bytes(), &weak).unwrap_err().contains("fewer than 4096"));
    }

    #[test]
    fn client_first_messages_kafka_refuses() {
        for bad in [
            "y,,n=user,r=abc",
            "p=tls-unique,,n=user,r=abc",
            "n,a=admin,n=user,r=abc",
            "n,,n=user,r=",
            "n,,n=us=er,r=abc",
            "n,,n=user,r=abc,tokenauth=true",
            "n,,r=abc",
        ] {
            let mut server = ScramServer::new(ScramMechanism::Sha256, SERVER_NONCE.into());
            assert!(server.evaluate(bad.as_bytes(), &lookup).is_err(), "{bad}");
        }
        let mut server = ScramServer::new(ScramMechanism::Sha256, SERVER_NONCE.into());
        assert!(server.evaluate(b"n,a=user,n=user,r=abc", &lookup).is_ok());
    }

    #[test]
    fn sasl_names_decode_commas_and_equals() {
        assert_eq!(decode_sasl_name("a=2Cb=3Dc").unwrap(), "a,b=c");
        assert!(decode_sasl_name("a=2").is_err());
    }
}
