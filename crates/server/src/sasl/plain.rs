//! SASL/PLAIN (RFC 4616) as Kafka's `PlainSaslServer` checks it: one message,
//! `[authzid] NUL authcid NUL password`, against the `user_<name>` options of the
//! listener's `PlainLoginModule` JAAS config.

use crate::config::tls::Secret;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use subtle::ConstantTimeEq;

/// The user name the client authenticated as, or why it did not (for the log only: the
/// client is told no more than "Invalid username or password").
pub fn authenticate(token: &[u8], users: &BTreeMap<String, Secret>) -> Result<String, String> {
    let parts: Vec<&[u8]> = token.split(|&b| b == 0).collect();
    let [authzid, username, password] = parts[..] else {
        return Err(format!("invalid SASL/PLAIN message: expected 3 tokens, got {}", parts.len()));
    };
    let username = std::str::from_utf8(username).map_err(|_| "user name is not UTF-8".to_string())?;
    if username.is_empty() {
        return Err("user name not specified".into());
    }
    if password.is_empty() {
        return Err(format!("password not specified for user {username}"));
    }
    if !authzid.is_empty() && authzid != username.as_bytes() {
        return Err(format!("user {username} asked for a different authorization id"));
    }
    // Compared as digests, in constant time, so that neither the password's bytes nor its
    // length show in the timing; an unknown user costs the same comparison.
    let expected = users.get(username).map_or(&[][..], |s| s.0.as_bytes());
    let matches: bool = Sha256::digest(password).ct_eq(&Sha256::digest(expected)).into();
    match (users.contains_key(username), matches) {
        (true, true) => Ok(username.to_string()),
        (false, _) => Err(format!("unknown user {username}")),
        (true, false) => Err(format!("wrong password for user {username}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> BTreeMap<String, Secret> {
        [("alice".to_string(), Secret("alice-secret".into()))].into_iter().collect()
    }

    #[test]
    fn right_password_authenticates_the_user() {
        assert_eq!(authenticate(b"\0alice\0alice-secret", &users()), Ok("alice".into()));
        assert_eq!(authenticate(b"alice\0alice\0alice-secret", &users()), Ok("alice".into()));
    }

    #[test]
    fn wrong_password_unknown_user_and_malformed_messages_fail() {
        for bad in [
            &b"\0alice\0wrong"[..],
            b"\0bob\0alice-secret",
            b"\0alice\0",
            b"\0\0alice-secret",
            b"alice-secret",
            b"\0alice\0alice-secret\0",
            b"mallory\0alice\0alice-secret",
            b"\0alice\0alice-secretx",
        ] {
            assert!(authenticate(bad, &users()).is_err(), "{bad:?}");
        }
    }
}
