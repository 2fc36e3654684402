//! DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): SCRAM users live
//! in the cluster metadata as Kafka keeps them (UserScramCredentialRecord), written by
//! the controller and read by every SASL listener from the image. A client sends the
//! salt and the salted password (`kafka-configs.sh --add-config
//! 'SCRAM-SHA-512=[password=...]'` derives them); the broker keeps only the stored key,
//! the server key, the salt and the iteration count.
//!
//! Checks and messages are Kafka's (`ScramControlManager`, `ScramImage.describe`); users
//! succeed or fail apart from each other.

use crate::broker::Broker;
use crate::sasl::scram::{ScramMechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use osprey_cluster::{ControllerError, MetadataImage, MetadataRecord};
use osprey_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use osprey_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use osprey_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use osprey_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use osprey_protocol::{ErrorCode, ResponseBody};
use std::collections::BTreeMap;
use std::sync::Arc;

pub fn describe(broker: &Broker, request: DescribeUserScramCredentialsRequest) -> ResponseBody {
    ResponseBody::DescribeUserScramCredentials(describe_in(&broker.image(), request))
}

fn describe_in(
    image: &MetadataImage,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    // No list (or an empty one): every user with a credential.
    let asked: Vec<String> = match request.users {
        Some(users) if !users.is_empty() => users.into_iter().map(|u| u.name).collect(),
        _ => image.scram_users().map(|(user, _)| user.clone()).collect(),
    };
    let mut seen: Vec<(String, bool)> = Vec::new();
    for user in asked {
        match seen.iter_mut().find(|(u, _)| *u == user) {
            Some((_, duplicate)) => *duplicate = true,
            None => seen.push((user, false)),
        }
    }
    let results = seen
        .into_iter()
        .map(|(user, duplicate)| {
            let credentials: Vec<CredentialInfo> = image
                .scram_users()
                .find(|(u, _)| **u == user)
                .map(|(_, by_mechanism)| {
                    by_mechanism
                        .iter()
                        .map(|(&mechanism, c)| CredentialInfo {
                            mechanism,
                            iterations: c.iterations,
                            ..Default::default()
                        })
                        .collect()
                })
                .unwrap_or_default();
            let (error_code, error_message) = if duplicate {
                let message =
                    format!("Cannot describe SCRAM credentials for the same user twice in a single request: {user}");
                (ErrorCode::DUPLICATE_RESOURCE, Some(message))
            } else if credentials.is_empty() {
                let message = format!("Attempt to describe a user credential that does not exist: {user}");
                (ErrorCode::RESOURCE_NOT_FOUND, Some(message))
            } else {
                (ErrorCode::NONE, None)
            };
            DescribeUserScramCredentialsResult {
                user,
                error_code: error_code.code(),
                error_message,
                credential_infos: if error_code == ErrorCode::NONE { credentials } else { Vec::new() },
                ..Default::default()
            }
        })
        .collect();
    DescribeUserScramCredentialsResponse { results, ..Default::default() }
}

/// Runs on the blocking pool: it writes to the metadata log, through this node's own
/// controller, or the active controller of the cluster (which decides with [`decide`]).
pub fn alter(broker: &Arc<Broker>, request: AlterUserScramCredentialsRequest) -> ResponseBody {
    let decided = match broker.cluster_link() {
        Some(link) => link.alter_user_scram_credentials(request.clone()),
        None => broker.with_controller(|c| {
            let (results, records) = decide(c.image(), &request);
            if !records.is_empty() {
                c.commit_records(records)?;
            }
            Ok(AlterUserScramCredentialsResponse { results, ..Default::default() })
        }),
    };
    // The metadata log could not be written, or the controller not reached: every user
    // gets the error.
    let response = decided.unwrap_or_else(|ControllerError { code, message }| failed(&request, code, &message));
    ResponseBody::AlterUserScramCredentials(response)
}

/// The answer when nothing was committed: `code` and `message` for every user.
pub(crate) fn failed(
    request: &AlterUserScramCredentialsRequest,
    code: ErrorCode,
    message: &str,
) -> AlterUserScramCredentialsResponse {
    let results =
        users_in_order(request).into_iter().map(|user| result(user, code, Some(message.to_string()))).collect();
    AlterUserScramCredentialsResponse { results, ..Default::default() }
}

/// The most SCRAM credentials (user and mechanism pairs) the cluster keeps (Osprey's
/// bound; Kafka has none): an upsertion that would add one past it is refused.
pub const MAX_SCRAM_CREDENTIALS: usize = 100_000;
const TOO_MANY: (ErrorCode, &str) = (
    ErrorCode::POLICY_VIOLATION,
    "The cluster holds the most SCRAM credentials Osprey keeps (100,000); delete some first",
);

/// Each user's result, in the order users first appear in the request, and the records
/// of the valid alterations, as Kafka's `ScramControlManager.alterCredentials` decides:
/// a user named twice in one request (whatever the mechanisms) is DUPLICATE_RESOURCE and
/// nothing of it applies; otherwise each alteration is checked on its own.
pub(crate) fn decide(
    image: &MetadataImage,
    request: &AlterUserScramCredentialsRequest,
) -> (Vec<AlterUserScramCredentialsResult>, Vec<MetadataRecord>) {
    let mut errors: BTreeMap<&str, (ErrorCode, &'static str)> = BTreeMap::new();
    let mut deletions: Vec<&ScramCredentialDeletion> = Vec::new();
    let mut upsertions: Vec<&ScramCredentialUpsertion> = Vec::new();
    let mut credentials: usize = image.scram_users().map(|(_, by_mechanism)| by_mechanism.len()).sum();
    for d in &request.deletions {
        let name = d.name.as_str();
        if errors.contains_key(name) {
            continue;
        }
        if take(&mut deletions, |x| x.name == name) {
            errors.insert(name, DUPLICATE);
        } else {
            match check_deletion(image, d) {
                Err(e) => drop(errors.insert(name, e)),
                Ok(()) => deletions.push(d),
            }
        }
    }
    for u in &request.upsertions {
        let name = u.name.as_str();
        if errors.contains_key(name) {
            continue;
        }
        if take(&mut deletions, |x| x.name == name) || take(&mut upsertions, |x| x.name == name) {
            errors.insert(name, DUPLICATE);
        } else {
            let new = image.scram_credential(name, u.mechanism).is_none();
            match check_upsertion(u) {
                Err(e) => drop(errors.insert(name, e)),
                Ok(()) if new && credentials >= MAX_SCRAM_CREDENTIALS => drop(errors.insert(name, TOO_MANY)),
                Ok(()) => {
                    credentials += usize::from(new);
                    upsertions.push(u);
                }
            }
        }
    }
    let mut records: Vec<MetadataRecord> = deletions
        .iter()
        .map(|d| MetadataRecord::RemoveScramCredential { user: d.name.clone(), mechanism: d.mechanism })
        .collect();
    for u in upsertions {
        let Some(mechanism) = ScramMechanism::from_type_id(u.mechanism) else { continue };
        let credential = mechanism.credential_from_salted_password(&u.salted_password, &u.salt, u.iterations);
        records.push(MetadataRecord::SetScramCredential {
            user: u.name.clone(),
            mechanism: u.mechanism,
            salt: credential.salt,
            stored_key: credential.stored_key,
            server_key: credential.server_key,
            iterations: credential.iterations,
        });
    }
    let results = users_in_order(request)
        .into_iter()
        .map(|user| match errors.get(user.as_str()) {
            Some(&(code, message)) => result(user, code, Some(message.to_string())),
            None => result(user, ErrorCode::NONE, None),
        })
        .collect();
    (results, records)
}

const DUPLICATE: (ErrorCode, &str) =
    (ErrorCode::DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request");

/// Removes the first item `matches` picks; whether there was one.
fn take<T>(items: &mut Vec<T>, matches: impl Fn(&T) -> bool) -> bool {
    match items.iter().position(matches) {
        Some(at) => {
            items.remove(at);
            true
        }
        None => false,
    }
}

fn check_name_and_mechanism(name: &str, mechanism: i8) -> Result<ScramMechanism, (ErrorCode, &'static str)> {
    if name.is_empty() {
        return Err((ErrorCode::UNACCEPTABLE_CREDENTIAL, "Username must not be empty"));
    }
    ScramMechanism::from_type_id(mechanism).ok_or((ErrorCode::UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
}

fn check_deletion(image: &MetadataImage, d: &ScramCredentialDeletion) -> Result<(), (ErrorCode, &'static str)> {
    check_name_and_mechanism(&d.name, d.mechanism)?;
    if image.scram_credential(&d.name, d.mechanism).is_none() {
        return Err((ErrorCode::RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"));
    }
    Ok(())
}

fn check_upsertion(u: &ScramCredentialUpsertion) -> Result<(), (ErrorCode, &'static str)> {
    check_name_and_mechanism(&u.name, u.mechanism)?;
    if u.iterations < MIN_ITERATIONS {
        return Err((ErrorCode::UNACCEPTABLE_CREDENTIAL, "Too few iterations"));
    }
    if u.iterations > MAX_ITERATIONS {
        return Err((ErrorCode::UNACCEPTABLE_CREDENTIAL, "Too many iterations"));
    }
    Ok(())
}

fn users_in_order(request: &AlterUserScramCredentialsRequest) -> Vec<String> {
    let mut users: Vec<String> = Vec::new();
    let names = request.deletions.iter().map(|d| &d.name).chain(request.upsertions.iter().map(|u| &u.name));
    for name in names {
        if !users.contains(name) {
            users.push(name.clone());
        }
    }
    users
}

fn result(user: String, code: ErrorCode, message: Option<String>) -> AlterUserScramCredentialsResult {
    AlterUserScramCredentialsResult { user, error_code: code.code(), error_message: message, ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_protocol::messages::describe_user_scram_credentials_request::UserName;

    fn upsert(name: &str, mechanism: i8, iterations: i32) -> ScramCredentialUpsertion {
        let len = ScramMechanism::from_type_id(mechanism).map_or(32, |m| m.hash_len());
        ScramCredentialUpsertion {
            name: name.into(),
            mechanism,
            iterations,
            salt: vec![7; 16].into(),
            salted_password: vec![9; len].into(),
            ..Default::default()
        }
    }

    fn delete(name: &str, mechanism: i8) -> ScramCredentialDeletion {
        ScramCredentialDeletion { name: name.into(), mechanism, ..Default::default() }
    }

    fn codes(results: &[AlterUserScramCredentialsResult]) -> Vec<(&str, i16)> {
        results.iter().map(|r| (r.user.as_str(), r.error_code)).collect()
    }

    #[test]
    fn valid_upsertions_store_keys_not_passwords_and_bad_ones_fail_per_user() {
        let request = AlterUserScramCredentialsRequest {
            deletions: vec![delete("carol", 1)],
            upsertions: vec![
                upsert("alice", 2, 4096),
                upsert("bob", 1, 1000),
                upsert("dave", 1, 20000),
                upsert("erin", 3, 4096),
                upsert("", 1, 4096),
                upsert("frank", 1, 4096),
                upsert("frank", 2, 8192),
            ],
            ..Default::default()
        };
        let (results, records) = decide(&MetadataImage::default(), &request);
        assert_eq!(
            codes(&results),
            vec![
                ("carol", ErrorCode::RESOURCE_NOT_FOUND.code()),
                ("alice", ErrorCode::NONE.code()),
                ("bob", ErrorCode::UNACCEPTABLE_CREDENTIAL.code()),
                ("dave", ErrorCode::UNACCEPTABLE_CREDENTIAL.code()),
                ("erin", ErrorCode::UNSUPPORTED_SASL_MECHANISM.code()),
                ("", ErrorCode::UNACCEPTABLE_CREDENTIAL.code()),
                ("frank", ErrorCode::DUPLICATE_RESOURCE.code()),
            ]
        );
        let expected = ScramMechanism::Sha512.credential_from_salted_password(&[9; 64], &[7; 16], 4096);
        assert_eq!(
            records,
            vec![MetadataRecord::SetScramCredential {
                user: "alice".into(),
                mechanism: 2,
                salt: expected.salt,
                stored_key: expected.stored_key,
                server_key: expected.server_key,
                iterations: 4096,
            }]
        );
    }

    #[test]
    fn no_credential_is_added_past_the_bound_but_existing_ones_still_change() {
        let mut image = MetadataImage::default();
        for n in 0..MAX_SCRAM_CREDENTIALS {
            image.apply(&MetadataRecord::SetScramCredential {
                user: format!("u{n}"),
                mechanism: 1,
                salt: vec![1],
                stored_key: vec![2],
                server_key: vec![3],
                iterations: 4096,
            });
        }
        let request = AlterUserScramCredentialsRequest {
            upsertions: vec![upsert("u0", 1, 8192), upsert("new", 1, 4096)],
            ..Default::default()
        };
        let (results, records) = decide(&image, &request);
        assert_eq!(codes(&results), vec![("u0", 0), ("new", ErrorCode::POLICY_VIOLATION.code())]);
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn describe_lists_mechanisms_and_iterations_and_reports_missing_and_duplicate_users() {
        let mut image = MetadataImage::default();
        for (mechanism, iterations) in [(1, 4096), (2, 8192)] {
            let request = AlterUserScramCredentialsRequest {
                upsertions: vec![upsert("alice", mechanism, iterations)],
                ..Default::default()
            };
            let (_, records) = decide(&image, &request);
            for r in &records {
                image.apply(r);
            }
        }
        let all = describe_in(&image, DescribeUserScramCredentialsRequest { users: None, ..Default::default() });
        assert_eq!(all.results.len(), 1);
        let infos: Vec<(i8, i32)> =
            all.results[0].credential_infos.iter().map(|c| (c.mechanism, c.iterations)).collect();
        assert_eq!(infos, vec![(1, 4096), (2, 8192)]);
        let name = |n: &str| UserName { name: n.into(), ..Default::default() };
        let some = describe_in(
            &image,
            DescribeUserScramCredentialsRequest {
                users: Some(vec![name("bob"), name("alice"), name("alice")]),
                ..Default::default()
            },
        );
        let codes: Vec<(&str, i16)> = some.results.iter().map(|r| (r.user.as_str(), r.error_code)).collect();
        assert_eq!(
            codes,
            vec![("bob", ErrorCode::RESOURCE_NOT_FOUND.code()), ("alice", ErrorCode::DUPLICATE_RESOURCE.code())]
        );
        // Deleting what exists removes it.
        let (results, records) = decide(
            &image,
            &AlterUserScramCredentialsRequest { deletions: vec![delete("alice", 1)], ..Default::default() },
        );
        assert_eq!(codes_of(&results), vec![0]);
        assert_eq!(records, vec![MetadataRecord::RemoveScramCredential { user: "alice".into(), mechanism: 1 }]);
    }

    fn codes_of(results: &[AlterUserScramCredentialsResult]) -> Vec<i16> {
        results.iter().map(|r| r.error_code).collect()
    }
}
