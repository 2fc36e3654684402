//! The authorizer as one request sees it: the connection's principal and address, the
//! ACLs of this broker's metadata image, and the broker's `authorizer.class.name`
//! settings. Without an authorizer everything is allowed, as in Kafka. Each refusal is
//! counted (`osprey_authorization_failures_total`); the `authorized_operations` fields
//! (KIP-430) ask without counting.

use crate::authorizer::{Authorizer, Requester};
use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::dispatch::Client;
use osprey_cluster::acl::{operation, resource_type, CLUSTER_NAME};
use osprey_cluster::MetadataImage;
use std::sync::Arc;

pub use osprey_cluster::acl::operation as op;
pub use osprey_cluster::acl::resource_type as kind;

/// One request's view of the authorizer; cheap to clone into a later part of a handler.
#[derive(Clone, Debug)]
pub struct Access {
    config: Arc<BrokerConfig>,
    image: Arc<MetadataImage>,
    principal: Arc<str>,
    host: String,
    /// `auto.create.topics.enable`: whether Metadata may create the topics it names.
    auto_create_topics: bool,
}

impl Access {
    pub fn of(broker: &Broker, client: &Client) -> Access {
        Access {
            config: broker.settings.config.clone(),
            image: broker.image(),
            principal: client.principal.clone(),
            host: host_address(client.peer.ip()),
            auto_create_topics: broker.settings.auto_create_topics,
        }
    }

    /// The request's access when the broker has an authorizer, else `None`: for hot
    /// paths (Fetch, ConsumerGroupHeartbeat) that skip building one without it.
    pub fn if_enabled(broker: &Broker, client: &Client) -> Option<Access> {
        broker.settings.config.authorizer.is_some().then(|| Access::of(broker, client))
    }

    /// A controller listener's access: `config`'s authorizer over `image`, for a
    /// connection of `principal` from `address` (a controller creates no topics on
    /// Metadata).
    pub fn on_controller(
        config: Arc<BrokerConfig>,
        image: Arc<MetadataImage>,
        principal: Arc<str>,
        address: std::net::SocketAddr,
    ) -> Access {
        let host = host_address(address.ip());
        Access { config, image, principal, host, auto_create_topics: false }
    }

    /// An access for tests: `authorizer` over `image`, for `principal` from `host`.
    #[cfg(test)]
    pub fn for_test(authorizer: Option<Authorizer>, image: MetadataImage, principal: &str, host: &str) -> Access {
        let mut config = BrokerConfig::default();
        config.authorizer = authorizer;
        Access {
            config: Arc::new(config),
            image: Arc::new(image),
            principal: principal.into(),
            host: host.into(),
            auto_create_topics: true,
        }
    }

    /// The broker has an authorizer (`authorizer.class.name` is set).
    pub fn enabled(&self) -> bool {
        self.authorizer().is_some()
    }

    /// The metadata image the request is decided on.
    pub fn image(&self) -> &MetadataImage {
        &self.image
    }

    /// `auto.create.topics.enable`.
    pub fn auto_create_topics(&self) -> bool {
        self.auto_create_topics
    }

    fn authorizer(&self) -> Option<&Authorizer> {
        self.config.authorizer.as_ref()
    }

    fn requester(&self) -> Requester<'_> {
        Requester { principal: &self.principal, host: &self.host }
    }

    /// May the client perform `op` on the resource? A refusal is counted.
    pub fn allows(&self, resource_type: i8, name: &str, op: i8) -> bool {
        let allowed = self.allows_quietly(resource_type, name, op);
        if !allowed {
            crate::telemetry::authorization_failed(resource_type_name(resource_type), operation_name(op));
        }
        allowed
    }

    /// As [`Access::allows`], on the cluster resource.
    pub fn allows_cluster(&self, op: i8) -> bool {
        self.allows(resource_type::CLUSTER, CLUSTER_NAME, op)
    }

    /// As [`Access::allows`], without counting a refusal.
    pub fn allows_quietly(&self, resource_type: i8, name: &str, op: i8) -> bool {
        let Some(authorizer) = self.authorizer() else { return true };
        authorizer.authorize(self.image.acls().map(|(_, acl)| acl), self.requester(), resource_type, name, op)
    }

    /// May the client perform `op` on some resource of `resource_type` (Kafka's
    /// `authorizeByResourceType`)? Not counted: it is asked as an alternative to another
    /// check, whose refusal is the one counted.
    pub fn allows_any_quietly(&self, resource_type: i8, op: i8) -> bool {
        let Some(authorizer) = self.authorizer() else { return true };
        let acls = self.image.acls().map(|(_, acl)| acl);
        authorizer.authorize_by_resource_type(acls, self.requester(), resource_type, op)
    }

    /// The KIP-430 bit field of the operations in `all` (one of
    /// `authorized_operations::TOPIC`, `GROUP`, `CLUSTER`) the client may perform on the
    /// resource (Kafka's `AuthHelper.authorizedOperations`).
    pub fn authorized_operations(&self, resource_type: i8, name: &str, all: i32) -> i32 {
        if !self.enabled() {
            return all;
        }
        (operation::READ..=operation::MAX)
            .filter(|&op| all & (1 << op) != 0 && self.allows_quietly(resource_type, name, op))
            .fold(0, |field, op| field | (1 << op))
    }
}

/// A client's address as ACL hosts are written: Java's `InetAddress.getHostAddress`, which
/// Kafka's authorizer matches against. An IPv4 client (an IPv4-mapped IPv6 address
/// included) is its dotted quad; an IPv6 one is its eight groups in hex, uncompressed and
/// without leading zeros (`0:0:0:0:0:0:0:1`, where Rust writes `::1`).
pub fn host_address(ip: std::net::IpAddr) -> String {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => v6.segments().iter().map(|g| format!("{g:x}")).collect::<Vec<_>>().join(":"),
    }
}

/// Kafka's `ResourceType` name, for the refusal metric.
pub fn resource_type_name(code: i8) -> &'static str {
    match code {
        resource_type::TOPIC => "TOPIC",
        resource_type::GROUP => "GROUP",
        resource_type::CLUSTER => "CLUSTER",
        resource_type::TRANSACTIONAL_ID => "TRANSACTIONAL_ID",
        resource_type::DELEGATION_TOKEN => "DELEGATION_TOKEN",
        resource_type::USER => "USER",
        _ => "UNKNOWN",
    }
}

/// Kafka's `AclOperation` name, for the refusal metric.
pub fn operation_name(code: i8) -> &'static str {
    match code {
        operation::ALL => "ALL",
        operation::READ => "READ",
        operation::WRITE => "WRITE",
        operation::CREATE => "CREATE",
        operation::DELETE => "DELETE",
        operation::ALTER => "ALTER",
        operation::DESCRIBE => "DESCRIBE",
        operation::CLUSTER_ACTION => "CLUSTER_ACTION",
        operation::DESCRIBE_CONFIGS => "DESCRIBE_CONFIGS",
        operation::ALTER_CONFIGS => "ALTER_CONFIGS",
        operation::IDEMPOTENT_WRITE => "IDEMPOTENT_WRITE",
        operation::CREATE_TOKENS => "CREATE_TOKENS",
        operation::DESCRIBE_TOKENS => "DESCRIBE_TOKENS",
        _ => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::host_address;

    #[test]
    fn hosts_are_written_as_java_writes_them() {
        assert_eq!(host_address("127.0.0.1".parse().unwrap()), "127.0.0.1");
        assert_eq!(host_address("::ffff:10.1.2.3".parse().unwrap()), "10.1.2.3");
        assert_eq!(host_address("::1".parse().unwrap()), "0:0:0:0:0:0:0:1");
        assert_eq!(host_address("fe80::1a:2b".parse().unwrap()), "fe80:0:0:0:0:0:1a:2b");
    }
}
