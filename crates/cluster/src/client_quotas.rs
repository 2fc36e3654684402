//! Client quotas as the cluster metadata keeps them (Kafka's ClientQuotaRecord and
//! `ClientQuotasImage`): for each entity, a user, a client id, or a user with a client
//! id, each either named or the default, a map from quota key to value.
//!
//! Which quota applies to a connection is Kafka's precedence (KIP-55), answered by
//! [`ClientQuotasImage::quota_for`]; what a quota's sensor is shared by (Kafka's metric
//! tags) comes with it, as Kafka's `DefaultQuotaCallback.quotaMetricTags`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Kafka's entity type names, as DescribeClientQuotas and AlterClientQuotas carry them.
pub const ENTITY_USER: &str = "user";
pub const ENTITY_CLIENT_ID: &str = "client-id";
pub const ENTITY_IP: &str = "ip";

/// The quota keys of user and client-id entities (Kafka's `QuotaConfig`).
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";

/// The most entities with quotas the cluster keeps (Osprey's bound; Kafka has none): an
/// AlterClientQuotas that would add one past it fails that entity with POLICY_VIOLATION.
pub const MAX_QUOTA_ENTITIES: usize = 100_000;

/// One part of an entity: a name, or the default for its type (Kafka's null name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EntityName {
    Default,
    Named(String),
}

impl EntityName {
    /// From the wire, where the default is a null name.
    pub fn from_wire(name: Option<&str>) -> EntityName {
        name.map_or(EntityName::Default, |n| EntityName::Named(n.to_string()))
    }

    /// As the wire carries it: `None` for the default.
    pub fn to_wire(&self) -> Option<String> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n.clone()),
        }
    }
}

/// A quota entity: a user, a client id, or both (Kafka's `ClientQuotaEntity` without
/// the IP entity, which Osprey does not keep).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub struct ClientQuotaEntity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<EntityName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<EntityName>,
}

impl ClientQuotaEntity {
    pub fn new(user: Option<EntityName>, client_id: Option<EntityName>) -> ClientQuotaEntity {
        ClientQuotaEntity { user, client_id }
    }

    /// The entity's parts as (type, name) pairs, user first, as the wire carries them.
    pub fn parts(&self) -> Vec<(&'static str, Option<String>)> {
        let mut parts = Vec::with_capacity(2);
        if let Some(user) = &self.user {
            parts.push((ENTITY_USER, user.to_wire()));
        }
        if let Some(client_id) = &self.client_id {
            parts.push((ENTITY_CLIENT_ID, client_id.to_wire()));
        }
        parts
    }
}

/// A quota value. Kafka's values are doubles; the controller only writes values greater
/// than zero (never NaN), so equality is total over what the metadata holds.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct QuotaValue(pub f64);

impl Eq for QuotaValue {}

/// The quota that applies to a (user, client id) pair for one key, and who shares its
/// measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedQuota {
    /// The bound (bytes per second, percent, or mutations per second).
    pub limit: f64,
    /// Kafka's metric tags for the sensor: the user when the entity that set the quota
    /// names a user part (named or default), the client id when it names a client part.
    /// Every connection with the same tags is measured together.
    pub user_tag: String,
    pub client_id_tag: String,
}

/// Every entity's quotas.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "Vec<EntityQuotas>", into = "Vec<EntityQuotas>")]
pub struct ClientQuotasImage {
    quotas: BTreeMap<ClientQuotaEntity, BTreeMap<String, f64>>,
}

/// One entity's quotas as a snapshot stores them (JSON maps need string keys).
#[derive(Serialize, Deserialize)]
struct EntityQuotas {
    entity: ClientQuotaEntity,
    quotas: BTreeMap<String, f64>,
}

impl From<Vec<EntityQuotas>> for ClientQuotasImage {
    fn from(list: Vec<EntityQuotas>) -> ClientQuotasImage {
        ClientQuotasImage { quotas: list.into_iter().map(|e| (e.entity, e.quotas)).collect() }
    }
}

impl From<ClientQuotasImage> for Vec<EntityQuotas> {
    fn from(image: ClientQuotasImage) -> Vec<EntityQuotas> {
        image.quotas.into_iter().map(|(entity, quotas)| EntityQuotas { entity, quotas }).collect()
    }
}

impl ClientQuotasImage {
    pub fn is_empty(&self) -> bool {
        self.quotas.is_empty()
    }

    /// Every entity with at least one quota, with its quotas, in entity order.
    pub fn entities(&self) -> impl Iterator<Item = (&ClientQuotaEntity, &BTreeMap<String, f64>)> {
        self.quotas.iter()
    }

    /// One entity's quotas (`None` when it has none).
    pub fn get(&self, entity: &ClientQuotaEntity) -> Option<&BTreeMap<String, f64>> {
        self.quotas.get(entity)
    }

    /// Applies a ClientQuota record: sets `key`, or removes it (and the entity with its
    /// last key), as Kafka's `ClientQuotaControlManager.replay`.
    pub fn apply(&mut self, entity: &ClientQuotaEntity, key: &str, value: QuotaValue, remove: bool) {
        if remove {
            if let Some(quotas) = self.quotas.get_mut(entity) {
                quotas.remove(key);
                if quotas.is_empty() {
                    self.quotas.remove(entity);
                }
            }
        } else {
            self.quotas.entry(entity.clone()).or_default().insert(key.to_string(), value.0);
        }
    }

    /// The quota `key` that applies to `user` (the principal's name) connecting as
    /// `client_id`, in Kafka's order (KIP-55): /users/u/clients/c,
    /// /users/u/clients/default, /users/u, /users/default/clients/c,
    /// /users/default/clients/default, /users/default, /clients/c, /clients/default.
    /// `None`: no quota, the client is not limited.
    pub fn quota_for(&self, key: &str, user: &str, client_id: &str) -> Option<AppliedQuota> {
        let u = || Some(EntityName::Named(user.to_string()));
        let c = || Some(EntityName::Named(client_id.to_string()));
        let d = || Some(EntityName::Default);
        let order =
            [(u(), c()), (u(), d()), (u(), None), (d(), c()), (d(), d()), (d(), None), (None, c()), (None, d())];
        order.into_iter().find_map(|(user_part, client_part)| {
            let entity = ClientQuotaEntity::new(user_part, client_part);
            let limit = *self.quotas.get(&entity)?.get(key)?;
            Some(AppliedQuota {
                limit,
                user_tag: if entity.user.is_some() { user.to_string() } else { String::new() },
                client_id_tag: if entity.client_id.is_some() { client_id.to_string() } else { String::new() },
            })
        })
    }
}

/// The user part of a quota entity for a principal (`User:alice` is `alice`): Kafka's
/// quota callback takes the principal's name, whatever its type.
pub fn quota_user(principal: &str) -> &str {
    principal.split_once(':').map_or(principal, |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(n: &str) -> Option<EntityName> {
        Some(EntityName::Named(n.into()))
    }

    fn set(image: &mut ClientQuotasImage, user: Option<EntityName>, client: Option<EntityName>, value: f64) {
        image.apply(&ClientQuotaEntity::new(user, client), PRODUCER_BYTE_RATE, QuotaValue(value), false);
    }

    fn limit(image: &ClientQuotasImage, user: &str, client: &str) -> Option<(f64, String, String)> {
        image.quota_for(PRODUCER_BYTE_RATE, user, client).map(|q| (q.limit, q.user_tag, q.client_id_tag))
    }

    #[test]
    fn precedence_follows_kip_55_from_most_to_least_specific() {
        let mut image = ClientQuotasImage::default();
        let d = || Some(EntityName::Default);
        assert_eq!(limit(&image, "alice", "app"), None);
        // Added from the least specific up: each addition takes over.
        type Step = (Option<EntityName>, Option<EntityName>, f64, &'static str, &'static str);
        let steps: [Step; 8] = [
            (None, d(), 8.0, "", "app"),
            (None, named("app"), 7.0, "", "app"),
            (d(), None, 6.0, "alice", ""),
            (d(), d(), 5.0, "alice", "app"),
            (d(), named("app"), 4.0, "alice", "app"),
            (named("alice"), None, 3.0, "alice", ""),
            (named("alice"), d(), 2.0, "alice", "app"),
            (named("alice"), named("app"), 1.0, "alice", "app"),
        ];
        for (user, client, value, user_tag, client_tag) in steps {
            set(&mut image, user, client, value);
            assert_eq!(limit(&image, "alice", "app"), Some((value, user_tag.into(), client_tag.into())));
        }
        // Another user and client id fall back to the defaults that still apply to them.
        assert_eq!(limit(&image, "bob", "other"), Some((5.0, "bob".into(), "other".into())));
    }

    #[test]
    fn quotas_are_removed_key_by_key_and_survive_a_snapshot() {
        let mut image = ClientQuotasImage::default();
        let alice = ClientQuotaEntity::new(named("alice"), None);
        image.apply(&alice, PRODUCER_BYTE_RATE, QuotaValue(1024.0), false);
        image.apply(&alice, CONSUMER_BYTE_RATE, QuotaValue(2048.0), false);
        let back: ClientQuotasImage = serde_json::from_str(&serde_json::to_string(&image).unwrap()).unwrap();
        assert_eq!(back, image);
        image.apply(&alice, PRODUCER_BYTE_RATE, QuotaValue(0.0), true);
        assert_eq!(image.get(&alice).unwrap().len(), 1);
        assert_eq!(image.quota_for(PRODUCER_BYTE_RATE, "alice", "x"), None);
        image.apply(&alice, CONSUMER_BYTE_RATE, QuotaValue(0.0), true);
        assert!(image.is_empty());
        // Removing what is not there changes nothing.
        image.apply(&alice, CONSUMER_BYTE_RATE, QuotaValue(0.0), true);
        assert!(image.is_empty());
    }

    #[test]
    fn the_user_of_a_principal_is_its_name() {
        assert_eq!(quota_user("User:alice"), "alice");
        assert_eq!(quota_user("User:ANONYMOUS"), "ANONYMOUS");
        assert_eq!(quota_user("User:CN=a:b"), "CN=a:b");
    }
}
