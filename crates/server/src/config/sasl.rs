//! The SASL settings of one SASL_PLAINTEXT or SASL_SSL listener, from Kafka's keys:
//! `sasl.enabled.mechanisms` (which `listener.name.<listener>.sasl.enabled.mechanisms`
//! overrides) and the JAAS config of each mechanism,
//! `listener.name.<listener>.<mechanism>.sasl.jaas.config` (or the mechanism-less
//! `listener.name.<listener>.sasl.jaas.config`). Checked when the config is resolved, so
//! that GSSAPI, a missing PLAIN user list or a malformed JAAS line stops the start naming
//! the key to fix.

use std::collections::BTreeMap;

use super::tls::Secret;
use super::{ConfigError, Origin};

/// A SASL mechanism Osprey serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    /// The IANA name, as clients ask for it in SaslHandshake.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<SaslMechanism> {
        [SaslMechanism::Plain, SaslMechanism::ScramSha256, SaslMechanism::ScramSha512]
            .into_iter()
            .find(|m| m.name() == name)
    }
}

/// The login module PLAIN's JAAS config must name, as Kafka's `PlainLoginModule`.
const PLAIN_LOGIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
/// The login module of SCRAM's JAAS config (its options are the inter-broker client's).
const SCRAM_LOGIN_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";

/// Everything a SASL listener needs, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct SaslSettings {
    /// The listener's name (upper case, as in `listeners`).
    pub listener: String,
    /// `sasl.enabled.mechanisms`, in the order given (SaslHandshake lists them so).
    pub mechanisms: Vec<SaslMechanism>,
    /// PLAIN's users and their passwords: the `user_<name>="<password>"` options of
    /// `PlainLoginModule` (Kafka's `PlainServerCallbackHandler` reads the same).
    pub plain_users: BTreeMap<String, Secret>,
    /// What this broker logs in to other brokers with, by mechanism: the `username` and
    /// `password` options of the mechanism's JAAS config, where it has them.
    pub logins: BTreeMap<SaslMechanism, SaslLogin>,
}

/// A user name and password to log in with (a broker's, to the other brokers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslLogin {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: Secret,
}

/// One setting as it applies to a listener: the key as set, its raw value and origin.
#[derive(Debug, Clone)]
pub(crate) struct RawSetting {
    pub key: String,
    pub raw: String,
    pub origin: Origin,
}

impl RawSetting {
    fn invalid(&self, expected: impl Into<String>) -> ConfigError {
        ConfigError::InvalidValue {
            key: self.key.clone(),
            // A JAAS config holds passwords: never echoed.
            value: if self.key.ends_with("sasl.jaas.config") { "[hidden]".into() } else { self.raw.clone() },
            expected: expected.into(),
            origin: self.origin.clone(),
        }
    }
}

impl SaslSettings {
    /// Checks the settings of SASL listener `listener`; `mechanisms` is
    /// `sasl.enabled.mechanisms` as it applies to the listener, `get` gives a
    /// `listener.name.<listener>.<rest>` setting by its `<rest>`.
    pub(crate) fn resolve(
        listener: &str,
        mechanisms: &RawSetting,
        get: &dyn Fn(&str) -> Option<RawSetting>,
    ) -> Result<SaslSettings, ConfigError> {
        let mut enabled = Vec::new();
        for name in mechanisms.raw.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let mechanism = SaslMechanism::from_name(name).ok_or_else(|| {
                mechanisms.invalid(format!(
                    "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 for SASL listener {listener}: Osprey does not implement \
                     {name} (Kafka's default is GSSAPI: set sasl.enabled.mechanisms)"
                ))
            })?;
            if !enabled.contains(&mechanism) {
                enabled.push(mechanism);
            }
        }
        if enabled.is_empty() {
            return Err(mechanisms.invalid(format!("at least one mechanism for SASL listener {listener}")));
        }
        let mut plain_users = BTreeMap::new();
        let mut logins = BTreeMap::new();
        for &mechanism in &enabled {
            let lower = mechanism.name().to_ascii_lowercase();
            let jaas = get(&format!("{lower}.sasl.jaas.config")).or_else(|| get("sasl.jaas.config"));
            match (mechanism, jaas) {
                (SaslMechanism::Plain, None) => {
                    return Err(ConfigError::InvalidValue {
                        key: format!("listener.name.{}.plain.sasl.jaas.config", listener.to_ascii_lowercase()),
                        value: String::new(),
                        expected: format!(
                            "a PlainLoginModule JAAS config with the users of SASL listener {listener}: \
                             {PLAIN_LOGIN_MODULE} required user_alice=\"alice-secret\";"
                        ),
                        origin: Origin::Default,
                    })
                }
                (SaslMechanism::Plain, Some(setting)) => {
                    let module = parse_jaas(&setting.raw).map_err(|e| setting.invalid(e))?;
                    if module.class != PLAIN_LOGIN_MODULE {
                        return Err(setting.invalid(format!("{PLAIN_LOGIN_MODULE} for PLAIN")));
                    }
                    plain_users = module.users();
                    if plain_users.is_empty() {
                        return Err(setting.invalid("at least one user_<name>=\"<password>\" option"));
                    }
                    logins.extend(module.login(mechanism));
                }
                (_, Some(setting)) => {
                    // Its options are what a broker would log in with to other brokers;
                    // the users themselves live in the cluster metadata.
                    let module = parse_jaas(&setting.raw).map_err(|e| setting.invalid(e))?;
                    if module.class != SCRAM_LOGIN_MODULE && setting.key.contains(".scram-sha-") {
                        return Err(setting.invalid(format!("{SCRAM_LOGIN_MODULE} for {}", mechanism.name())));
                    }
                    logins.extend(module.login(mechanism));
                }
                (_, None) => {}
            }
        }
        Ok(SaslSettings { listener: listener.to_string(), mechanisms: enabled, plain_users, logins })
    }
}

/// One JAAS login module entry: `<class> <flag> key="value" ...;`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JaasModule {
    pub class: String,
    pub flag: String,
    pub options: Vec<(String, String)>,
}

impl JaasModule {
    /// The `user_<name>` options: PLAIN's users and their passwords.
    fn users(&self) -> BTreeMap<String, Secret> {
        self.options
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("user_")?.to_string(), Secret(v.clone()))))
            .filter(|(name, _)| !name.is_empty())
            .collect()
    }

    /// The `username` and `password` options, as a login with `mechanism`.
    fn login(&self, mechanism: SaslMechanism) -> Option<(SaslMechanism, SaslLogin)> {
        let option = |name: &str| self.options.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let login = SaslLogin { mechanism, username: option("username")?, password: Secret(option("password")?) };
        Some((mechanism, login))
    }
}

/// Parses a `sasl.jaas.config` value as Kafka's `JaasConfig` does: exactly one login
/// module, its control flag, then `key=value` options (values quoted with `"`, in which
/// `\` escapes the next character, or bare words), ended by `;`. The error never quotes
/// the input, which holds passwords.
pub fn parse_jaas(text: &str) -> Result<JaasModule, String> {
    let tokens = tokenize(text)?;
    let mut it = tokens.into_iter().peekable();
    let Some(Token::Word(class)) = it.next() else {
        return Err("a JAAS login module: <LoginModule class> required <options>;".into());
    };
    let flag = match it.next() {
        Some(Token::Word(f)) if ["required", "requisite", "sufficient", "optional"].contains(&f.as_str()) => f,
        _ => return Err(format!("a control flag after {class} (required, requisite, sufficient or optional)")),
    };
    let mut options = Vec::new();
    loop {
        match it.next() {
            Some(Token::Semicolon) => break,
            Some(Token::Word(key)) => {
                if it.next() != Some(Token::Equals) {
                    return Err(format!("`=` after option `{key}` of the JAAS config"));
                }
                match it.next() {
                    Some(Token::Word(value)) | Some(Token::Quoted(value)) => options.push((key, value)),
                    _ => return Err(format!("a value for option `{key}` of the JAAS config")),
                }
            }
            _ => return Err("a JAAS config ending with `;`".into()),
        }
    }
    if it.next().is_some() {
        return Err("exactly one login module in sasl.jaas.config (Kafka refuses more)".into());
    }
    Ok(JaasModule { class, flag, options })
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Quoted(String),
    Equals,
    Semicolon,
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '=' => {
                chars.next();
                tokens.push(Token::Equals);
            }
            ';' => {
                chars.next();
                tokens.push(Token::Semicolon);
            }
            '"' => {
                chars.next();
                let mut value = String::new();
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => value.push(chars.next().ok_or("a closing `\"` in the JAAS config")?),
                        Some(c) => value.push(c),
                        None => return Err("a closing `\"` in the JAAS config".into()),
                    }
                }
                tokens.push(Token::Quoted(value));
            }
            c if is_word_char(c) => {
                let mut word = String::new();
                while let Some(&c) = chars.peek().filter(|c| is_word_char(**c)) {
                    word.push(c);
                    chars.next();
                }
                tokens.push(Token::Word(word));
            }
            _ => return Err(format!("no `{c}` outside quotes in the JAAS config")),
        }
    }
    Ok(tokens)
}

/// Characters of an unquoted JAAS word (class names, flags, option names, bare values).
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '$' | '/' | ':' | '@' | '+' | '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_jaas_config_gives_its_users() {
        let module = parse_jaas(
            "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" \
             password=\"admin-secret\" user_admin=\"admin-secret\" user_alice=\"alice-secret\";",
        )
        .unwrap();
        assert_eq!(module.class, PLAIN_LOGIN_MODULE);
        assert_eq!(module.flag, "required");
        let users = module.users();
        assert_eq!(users.len(), 2);
        assert_eq!(users["admin"].0, "admin-secret");
        assert_eq!(users["alice"].0, "alice-secret");
    }

    #[test]
    fn jaas_quoted_values_keep_escaped_quotes_and_semicolons() {
        let module = parse_jaas(r#"a.B required user_bob="p\"w;d" user_eve=bare-word;"#).unwrap();
        assert_eq!(module.options, vec![("user_bob".into(), "p\"w;d".into()), ("user_eve".into(), "bare-word".into())]);
    }

    #[test]
    fn malformed_jaas_is_refused_without_quoting_the_password() {
        for bad in [
            "",
            "a.B",
            "a.B mandatory;",
            "a.B required user_x=\"secret-pw\"",
            "a.B required user_x \"secret-pw\";",
            "a.B required user_x=\"secret-pw;",
            "a.B required; c.D required;",
        ] {
            let err = parse_jaas(bad).unwrap_err();
            assert!(!err.contains("secret-pw"), "{bad}: {err}");
        }
    }

    fn raw(key: &str, value: &str) -> RawSetting {
        RawSetting { key: key.into(), raw: value.into(), origin: Origin::Default }
    }

    #[test]
    fn gssapi_and_oauthbearer_are_refused_naming_the_mechanism() {
        for m in ["GSSAPI", "PLAIN,OAUTHBEARER"] {
            let err = SaslSettings::resolve("SASL", &raw("sasl.enabled.mechanisms", m), &|_| None).unwrap_err();
            assert!(err.to_string().contains("does not implement"), "{err}");
        }
    }

    #[test]
    fn plain_needs_a_jaas_config_with_users() {
        let mechanisms = raw("sasl.enabled.mechanisms", "PLAIN");
        let err = SaslSettings::resolve("SASL", &mechanisms, &|_| None).unwrap_err();
        assert!(err.to_string().contains("listener.name.sasl.plain.sasl.jaas.config"), "{err}");
        let jaas = |rest: &str| {
            (rest == "sasl.jaas.config").then(|| {
                raw("listener.name.sasl.sasl.jaas.config", &format!("{PLAIN_LOGIN_MODULE} required user_a=\"b\";"))
            })
        };
        let settings = SaslSettings::resolve("SASL", &mechanisms, &jaas).unwrap();
        assert_eq!(settings.plain_users["a"].0, "b");
        let no_users = |_: &str| {
            Some(raw("listener.name.sasl.plain.sasl.jaas.config", &format!("{PLAIN_LOGIN_MODULE} required;")))
        };
        assert!(SaslSettings::resolve("SASL", &mechanisms, &no_users).is_err());
    }

    fn resolve(args: &[&str]) -> Result<crate::config::BrokerConfig, ConfigError> {
        let mut raw = crate::config::RawConfig::new();
        for a in args {
            raw.add_override(a).unwrap();
        }
        raw.resolve().map(|(c, _)| c)
    }

    #[test]
    fn a_sasl_listener_takes_its_users_from_the_prefixed_jaas_config() {
        let config = resolve(&[
            "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" user_alice=\"alice-secret\";",
        ])
        .unwrap();
        let settings = config.sasl_settings("SASL_PLAINTEXT").unwrap();
        assert_eq!(settings.mechanisms, vec![SaslMechanism::Plain, SaslMechanism::ScramSha512]);
        assert_eq!(settings.plain_users.keys().collect::<Vec<_>>(), vec!["admin", "alice"]);
    }

    #[test]
    fn the_default_gssapi_stops_the_start_of_a_sasl_listener() {
        let err = resolve(&["listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"]).unwrap_err();
        assert!(err.to_string().contains("does not implement GSSAPI"), "{err}");
        // A listener's own mechanisms win over the broker's.
        let config = resolve(&[
            "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-256",
        ])
        .unwrap();
        assert_eq!(config.sasl_settings("SASL_PLAINTEXT").unwrap().mechanisms, vec![SaslMechanism::ScramSha256]);
    }

    #[test]
    fn scram_needs_no_jaas_config() {
        let settings =
            SaslSettings::resolve("SASL", &raw("sasl.enabled.mechanisms", "SCRAM-SHA-512, SCRAM-SHA-256"), &|_| None)
                .unwrap();
        assert_eq!(settings.mechanisms, vec![SaslMechanism::ScramSha512, SaslMechanism::ScramSha256]);
    }
}
