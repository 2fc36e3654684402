//! DescribeClientQuotas and AlterClientQuotas (KIP-546): client quotas live in the
//! cluster metadata as Kafka keeps them (ClientQuotaRecord), written by the controller
//! and read by every broker from the image, which enforces them (`crate::quota`).
//! `kafka-configs.sh --entity-type users/clients --alter/--describe` drives these.
//!
//! Checks and messages are Kafka's (`ClientQuotaControlManager`, `ClientQuotasImage`);
//! entities succeed or fail apart from each other. IP entities
//! (`connection_creation_rate`) are refused: Osprey does not enforce them, and keeping
//! them would say it did.

use crate::broker::Broker;
use osprey_cluster::client_quotas::{
    ClientQuotaEntity, EntityName, QuotaValue, CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE, ENTITY_CLIENT_ID,
    ENTITY_IP, ENTITY_USER, MAX_QUOTA_ENTITIES, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE,
};
use osprey_cluster::{ControllerError, MetadataImage, MetadataRecord};
use osprey_protocol::messages::alter_client_quotas_request::EntryData as AlterEntry;
use osprey_protocol::messages::{
    alter_client_quotas_response, describe_client_quotas_request::ComponentData, describe_client_quotas_response,
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
};
use osprey_protocol::{ErrorCode, ResponseBody};
use std::collections::BTreeMap;
use std::sync::Arc;

/// DescribeClientQuotas match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

pub fn describe(broker: &Broker, request: DescribeClientQuotasRequest) -> ResponseBody {
    ResponseBody::DescribeClientQuotas(describe_in(&broker.image(), &request))
}

/// The entities the filter matches, with their quotas, as Kafka's
/// `ClientQuotasImage.describe`: an exact component names the entity's part (or its
/// default), a specified one asks only that the part exists; `strict` asks that the
/// entity has no other part. A bad filter is an error for the whole request.
fn describe_in(image: &MetadataImage, request: &DescribeClientQuotasRequest) -> DescribeClientQuotasResponse {
    let filter = match Filter::parse(&request.components) {
        Ok(f) => f,
        Err((code, message)) => {
            return DescribeClientQuotasResponse {
                error_code: code.code(),
                error_message: Some(message),
                entries: None,
                ..Default::default()
            }
        }
    };
    let entries = image
        .client_quotas()
        .entities()
        .filter(|(entity, _)| filter.matches(entity, request.strict))
        .map(|(entity, quotas)| describe_client_quotas_response::EntryData {
            entity: entity
                .parts()
                .into_iter()
                .map(|(entity_type, entity_name)| describe_client_quotas_response::EntityData {
                    entity_type: entity_type.to_string(),
                    entity_name,
                    ..Default::default()
                })
                .collect(),
            values: quotas
                .iter()
                .map(|(key, value)| describe_client_quotas_response::ValueData {
                    key: key.clone(),
                    value: *value,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    DescribeClientQuotasResponse { entries: Some(entries), ..Default::default() }
}

/// A DescribeClientQuotas filter: by entity type, the name asked for (`Some`, where
/// `EntityName::Default` asks for the default), or any name (`None`).
struct Filter {
    components: BTreeMap<String, Option<EntityName>>,
}

impl Filter {
    fn parse(components: &[ComponentData]) -> Result<Filter, (ErrorCode, String)> {
        let invalid = |message: String| (ErrorCode::INVALID_REQUEST, message);
        let mut parsed = BTreeMap::new();
        for c in components {
            let entity_type = c.entity_type.as_str();
            if entity_type.is_empty() {
                return Err(invalid("Invalid empty entity type.".into()));
            }
            if parsed.contains_key(entity_type) {
                return Err(invalid(format!("Entity type {entity_type} cannot appear more than once in the filter.")));
            }
            if ![ENTITY_USER, ENTITY_CLIENT_ID, ENTITY_IP].contains(&entity_type) {
                return Err((ErrorCode::UNSUPPORTED_VERSION, format!("Unsupported entity type {entity_type}")));
            }
            let wanted = match (c.match_type, &c.r#match) {
                (MATCH_EXACT, Some(name)) => Some(EntityName::Named(name.clone())),
                (MATCH_EXACT, None) => {
                    return Err(invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.".into()))
                }
                (MATCH_DEFAULT, None) => Some(EntityName::Default),
                (MATCH_DEFAULT, Some(_)) => {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.".into(),
                    ))
                }
                (MATCH_SPECIFIED, None) => None,
                (MATCH_SPECIFIED, Some(_)) => {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.".into(),
                    ))
                }
                (other, _) => return Err((ErrorCode::UNSUPPORTED_VERSION, format!("Unknown match type {other}"))),
            };
            parsed.insert(entity_type.to_string(), wanted);
        }
        if parsed.contains_key(ENTITY_IP) && parsed.len() > 1 {
            return Err(invalid(
                "Invalid entity filter component combination. IP filter component should not be used with user or \
                 clientId filter component."
                    .into(),
            ));
        }
        Ok(Filter { components: parsed })
    }

    fn matches(&self, entity: &ClientQuotaEntity, strict: bool) -> bool {
        let parts = [(ENTITY_USER, &entity.user), (ENTITY_CLIENT_ID, &entity.client_id)];
        if strict && parts.iter().filter(|(_, p)| p.is_some()).count() != self.components.len() {
            return false;
        }
        self.components.iter().all(|(entity_type, wanted)| {
            let part = parts.iter().find(|(t, _)| t == entity_type).and_then(|(_, p)| p.as_ref());
            match (part, wanted) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(name), Some(wanted)) => name == wanted,
            }
        })
    }
}

/// Runs on the blocking pool: it writes to the metadata log, through this node's own
/// controller, or the active controller of the cluster (which decides with [`decide`]).
pub fn alter(broker: &Arc<Broker>, request: AlterClientQuotasRequest) -> ResponseBody {
    let decided = match broker.cluster_link() {
        Some(link) => link.alter_client_quotas(request.clone()),
        None => broker.with_controller(|c| {
            let (response, records) = decide(c.image(), &request);
            if !request.validate_only && !records.is_empty() {
                c.commit_records(records)?;
            }
            Ok(response)
        }),
    };
    // The metadata log could not be written, or the controller not reached: every
    // entity gets the error.
    let response = decided.unwrap_or_else(|ControllerError { code, message }| failed(&request, code, &message));
    ResponseBody::AlterClientQuotas(response)
}

/// The answer when nothing was committed: `code` and `message` for every entity.
pub(crate) fn failed(request: &AlterClientQuotasRequest, code: ErrorCode, message: &str) -> AlterClientQuotasResponse {
    let entries = request.entries.iter().map(|e| result(&e.entity, code, Some(message.to_string()))).collect();
    AlterClientQuotasResponse { entries, ..Default::default() }
}

/// Each entity's result, in request order, and the records of the valid alterations,
/// as Kafka's `ClientQuotaControlManager.alterClientQuotas` decides: an invalid entity,
/// a key named twice, or a bad key or value fails the entity and none of its changes
/// apply; removing a key the entity does not have and setting a key to the value it
/// has write nothing. The caller commits the records unless the request is
/// `validate_only`.
pub(crate) fn decide(
    image: &MetadataImage,
    request: &AlterClientQuotasRequest,
) -> (AlterClientQuotasResponse, Vec<MetadataRecord>) {
    let mut records = Vec::new();
    let mut seen: Vec<ClientQuotaEntity> = Vec::new();
    let mut entries = Vec::with_capacity(request.entries.len());
    let mut entity_count = image.client_quotas().entities().count();
    for entry in &request.entries {
        let outcome = entity_of(entry).and_then(|entity| {
            if seen.contains(&entity) {
                return Err(format!("Ignoring duplicate entity {entity:?}"));
            }
            seen.push(entity.clone());
            let changes = alterations(image, &entity, entry)?;
            Ok((image.client_quotas().get(&entity).is_none() && !changes.is_empty(), changes))
        });
        let (code, message) = match outcome {
            Ok((true, _)) if entity_count >= MAX_QUOTA_ENTITIES => (
                ErrorCode::POLICY_VIOLATION,
                Some(format!(
                    "The cluster holds quotas for {MAX_QUOTA_ENTITIES} entities, the most Osprey keeps; \
                     remove some before adding more."
                )),
            ),
            Ok((new, mut changes)) => {
                entity_count += usize::from(new);
                records.append(&mut changes);
                (ErrorCode::NONE, None)
            }
            Err(message) => (ErrorCode::INVALID_REQUEST, Some(message)),
        };
        entries.push(result(&entry.entity, code, message));
    }
    (AlterClientQuotasResponse { entries, ..Default::default() }, records)
}

/// The entity an alteration names, checked as Kafka's `validateEntity` and
/// `configKeysForEntityType`.
fn entity_of(entry: &AlterEntry) -> Result<ClientQuotaEntity, String> {
    if entry.entity.is_empty() {
        return Err("Invalid empty client quota entity".into());
    }
    let mut entity = ClientQuotaEntity::default();
    for part in &entry.entity {
        let entity_type = part.entity_type.as_str();
        let slot = match entity_type {
            ENTITY_USER => &mut entity.user,
            ENTITY_CLIENT_ID => &mut entity.client_id,
            ENTITY_IP => return Err("IP quotas (connection_creation_rate) are not supported by Osprey".into()),
            other => return Err(format!("Unhandled client quota entity type: {other}")),
        };
        if slot.is_some() {
            return Err(format!("Invalid client quota entity, duplicate entity entry {entity_type}"));
        }
        if part.entity_name.as_deref() == Some("") {
            return Err(format!("Empty {entity_type} not supported"));
        }
        *slot = Some(EntityName::from_wire(part.entity_name.as_deref()));
    }
    Ok(entity)
}

/// The records that make `entry`'s operations on `entity`, all or none.
fn alterations(
    image: &MetadataImage,
    entity: &ClientQuotaEntity,
    entry: &AlterEntry,
) -> Result<Vec<MetadataRecord>, String> {
    let mut keys: Vec<&str> = Vec::new();
    for op in &entry.ops {
        if keys.contains(&op.key.as_str()) {
            return Err(format!("Duplicate quota key {} not updating quota for this entity {entity:?}", op.key));
        }
        keys.push(&op.key);
    }
    let current = image.client_quotas().get(entity);
    let mut records = Vec::new();
    for op in &entry.ops {
        let now = current.and_then(|q| q.get(&op.key)).copied();
        if op.remove {
            if now.is_some() {
                records.push(record(entity, &op.key, 0.0, true));
            }
            continue;
        }
        check_value(&op.key, op.value)?;
        if now != Some(op.value) {
            records.push(record(entity, &op.key, op.value, false));
        }
    }
    Ok(records)
}

/// Kafka's `validateQuotaKeyValue` for user and client-id entities: a known key, a
/// value above zero, and a whole number for the byte rates (Kafka's LONG keys).
fn check_value(key: &str, value: f64) -> Result<(), String> {
    let integral = match key {
        PRODUCER_BYTE_RATE | CONSUMER_BYTE_RATE => true,
        REQUEST_PERCENTAGE | CONTROLLER_MUTATION_RATE => false,
        _ => return Err(format!("Invalid configuration key {key}")),
    };
    // NaN and infinity would make every comparison with a measured rate meaningless.
    if !value.is_finite() || value <= 0.0 {
        return Err(format!("Quota {key} must be greater than 0"));
    }
    if integral && value > i64::MAX as f64 {
        return Err(format!("Proposed value for {key} is too large for a LONG."));
    }
    if integral && (value % 1.0).abs() > 1e-6 {
        return Err(format!("{key} cannot be a fractional value."));
    }
    Ok(())
}

fn record(entity: &ClientQuotaEntity, key: &str, value: f64, remove: bool) -> MetadataRecord {
    MetadataRecord::ClientQuota { entity: entity.clone(), key: key.to_string(), value: QuotaValue(value), remove }
}

fn result(
    entity: &[osprey_protocol::messages::alter_client_quotas_request::EntityData],
    code: ErrorCode,
    message: Option<String>,
) -> alter_client_quotas_response::EntryData {
    alter_client_quotas_response::EntryData {
        error_code: code.code(),
        error_message: message,
        entity: entity
            .iter()
            .map(|p| alter_client_quotas_response::EntityData {
                entity_type: p.entity_type.clone(),
                entity_name: p.entity_name.clone(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprey_protocol::messages::alter_client_quotas_request::{EntityData, OpData};

    fn part(entity_type: &str, name: Option<&str>) -> EntityData {
        EntityData { entity_type: entity_type.into(), entity_name: name.map(str::to_string), ..Default::default() }
    }

    fn op(key: &str, value: f64, remove: bool) -> OpData {
        OpData { key: key.into(), value, remove, ..Default::default() }
    }

    fn entry(entity: Vec<EntityData>, ops: Vec<OpData>) -> AlterEntry {
        AlterEntry { entity, ops, ..Default::default() }
    }

    fn alter_on(image: &mut MetadataImage, entries: Vec<AlterEntry>) -> Vec<i16> {
        let request = AlterClientQuotasRequest { entries, ..Default::default() };
        let (response, records) = decide(image, &request);
        for r in &records {
            image.apply(r);
        }
        response.entries.iter().map(|e| e.error_code).collect()
    }

    fn describe_on(image: &MetadataImage, components: Vec<(&str, i8, Option<&str>)>, strict: bool) -> Vec<String> {
        let components = components
            .into_iter()
            .map(|(t, m, name)| ComponentData {
                entity_type: t.into(),
                match_type: m,
                r#match: name.map(str::to_string),
                ..Default::default()
            })
            .collect();
        let response = describe_in(image, &DescribeClientQuotasRequest { components, strict, ..Default::default() });
        assert_eq!(response.error_code, 0, "{:?}", response.error_message);
        response
            .entries
            .unwrap()
            .iter()
            .map(|e| {
                let entity: Vec<String> = e
                    .entity
                    .iter()
                    .map(|p| format!("{}={}", p.entity_type, p.entity_name.as_deref().unwrap_or("<default>")))
                    .collect();
                let values: Vec<String> = e.values.iter().map(|v| format!("{}={}", v.key, v.value)).collect();
                format!("{} {}", entity.join(","), values.join(","))
            })
            .collect()
    }

    #[test]
    fn alterations_are_checked_per_entity_as_kafka_checks_them() {
        let mut image = MetadataImage::default();
        let invalid = ErrorCode::INVALID_REQUEST.code();
        let codes = alter_on(
            &mut image,
            vec![
                entry(vec![part("user", Some("alice"))], vec![op(PRODUCER_BYTE_RATE, 1024.0, false)]),
                entry(vec![], vec![op(PRODUCER_BYTE_RATE, 1.0, false)]),
                entry(vec![part("user", Some("bob"))], vec![op("producer_byte_rat", 1.0, false)]),
                entry(vec![part("user", Some("carol"))], vec![op(PRODUCER_BYTE_RATE, 1.5, false)]),
                entry(vec![part("user", Some("dave"))], vec![op(REQUEST_PERCENTAGE, 0.0, false)]),
                entry(
                    vec![part("user", Some("erin"))],
                    vec![op(REQUEST_PERCENTAGE, 50.5, false), op(REQUEST_PERCENTAGE, 1.0, false)],
                ),
                entry(vec![part("user", Some("")), part("client-id", None)], vec![op(CONSUMER_BYTE_RATE, 1.0, false)]),
                entry(vec![part("ip", Some("10.0.0.1"))], vec![op("connection_creation_rate", 1.0, false)]),
                entry(vec![part("user", Some("alice"))], vec![op(CONSUMER_BYTE_RATE, 1.0, false)]),
                entry(vec![part("group", Some("g"))], vec![op(CONSUMER_BYTE_RATE, 1.0, false)]),
                entry(vec![part("user", Some("x")), part("user", Some("y"))], vec![op(CONSUMER_BYTE_RATE, 1.0, false)]),
                // A bad value fails the whole entity: the good key beside it is not set.
                entry(
                    vec![part("client-id", Some("app"))],
                    vec![op(CONSUMER_BYTE_RATE, 10.0, false), op(PRODUCER_BYTE_RATE, -1.0, false)],
                ),
            ],
        );
        assert_eq!(
            codes,
            vec![0, invalid, invalid, invalid, invalid, invalid, invalid, invalid, invalid, invalid, invalid, invalid]
        );
        assert_eq!(describe_on(&image, vec![], false), vec!["user=alice producer_byte_rate=1024"]);
    }

    #[test]
    fn no_entity_is_added_past_the_bound_but_existing_ones_still_change() {
        let mut image = MetadataImage::default();
        for n in 0..MAX_QUOTA_ENTITIES {
            let entity = ClientQuotaEntity::new(Some(EntityName::Named(format!("u{n}"))), None);
            image.apply(&record(&entity, PRODUCER_BYTE_RATE, 1.0, false));
        }
        let codes = alter_on(
            &mut image,
            vec![
                entry(vec![part("user", Some("u0"))], vec![op(PRODUCER_BYTE_RATE, 2.0, false)]),
                entry(vec![part("user", Some("new"))], vec![op(PRODUCER_BYTE_RATE, 2.0, false)]),
            ],
        );
        assert_eq!(codes, vec![0, ErrorCode::POLICY_VIOLATION.code()]);
        assert_eq!(image.client_quotas().entities().count(), MAX_QUOTA_ENTITIES);
    }

    #[test]
    fn set_change_and_remove_write_only_what_changes() {
        let mut image = MetadataImage::default();
        let alice = || vec![part("user", Some("alice"))];
        let request = |ops| AlterClientQuotasRequest { entries: vec![entry(alice(), ops)], ..Default::default() };
        let (_, records) = decide(&image, &request(vec![op(PRODUCER_BYTE_RATE, 1024.0, false)]));
        assert_eq!(records.len(), 1);
        image.apply(&records[0]);
        // The same value again, and removing a key the entity does not have: nothing.
        let (response, records) =
            decide(&image, &request(vec![op(PRODUCER_BYTE_RATE, 1024.0, false), op(CONSUMER_BYTE_RATE, 0.0, true)]));
        assert_eq!(response.entries[0].error_code, 0);
        assert!(records.is_empty());
        let (_, records) = decide(&image, &request(vec![op(PRODUCER_BYTE_RATE, 0.0, true)]));
        for r in &records {
            image.apply(r);
        }
        assert!(image.client_quotas().is_empty());
    }

    #[test]
    fn describe_matches_exact_default_and_specified_components() {
        let mut image = MetadataImage::default();
        let set = |entity: Vec<EntityData>| entry(entity, vec![op(PRODUCER_BYTE_RATE, 100.0, false)]);
        let codes = alter_on(
            &mut image,
            vec![
                set(vec![part("user", Some("alice"))]),
                set(vec![part("user", None)]),
                set(vec![part("client-id", Some("app"))]),
                set(vec![part("user", Some("alice")), part("client-id", Some("app"))]),
            ],
        );
        assert_eq!(codes, vec![0, 0, 0, 0]);
        let rate = "producer_byte_rate=100";
        assert_eq!(describe_on(&image, vec![("user", 0, Some("alice"))], true), vec![format!("user=alice {rate}")]);
        assert_eq!(
            describe_on(&image, vec![("user", 0, Some("alice"))], false),
            vec![format!("user=alice {rate}"), format!("user=alice,client-id=app {rate}")]
        );
        assert_eq!(describe_on(&image, vec![("user", 1, None)], true), vec![format!("user=<default> {rate}")]);
        assert_eq!(describe_on(&image, vec![("user", 2, None)], true).len(), 2);
        assert_eq!(describe_on(&image, vec![("client-id", 2, None)], false).len(), 2);
        assert_eq!(describe_on(&image, vec![("user", 2, None), ("client-id", 0, Some("app"))], true).len(), 1);
        assert_eq!(describe_on(&image, vec![], false).len(), 4);
        // A malformed filter is an error for the request.
        let bad =
            ComponentData { entity_type: "user".into(), match_type: MATCH_EXACT, r#match: None, ..Default::default() };
        let response =
            describe_in(&image, &DescribeClientQuotasRequest { components: vec![bad], ..Default::default() });
        assert_eq!(response.error_code, ErrorCode::INVALID_REQUEST.code());
        assert!(response.entries.is_none());
    }
}
