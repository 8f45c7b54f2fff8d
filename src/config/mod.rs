//! The validated domain model: what Outrider serves, independent of protobuf.
//!
//! `convert` turns xDS protos into these types field by field and is the only place that
//! sees protos; `bootstrap` reads Envoy's bootstrap file into the same types. A value of
//! any type here has been validated: invalid configuration cannot be represented.

pub mod access_log;
pub mod address;
pub mod bootstrap;
pub mod cluster;
pub mod convert;
pub mod endpoint;
pub mod error;
pub mod filters;
pub mod format;
pub mod header_value;
pub mod listener;
pub mod matcher;
pub mod overload;
pub mod rate_limit;
pub mod route;
pub mod secret;
pub mod stats;
pub mod tls;
pub mod tracing;
pub mod upgrade;

#[cfg(test)]
pub(crate) mod testdata;

pub use address::Address;
pub use cluster::Cluster;
pub use endpoint::ClusterLoadAssignment;
pub use error::{ConfigError, Ignored, Warnings};
pub use listener::Listener;
pub use route::RouteConfiguration;
pub use secret::Secret;

/// The five kinds of resource an ADS stream carries, in Envoy's order of dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    Cluster,
    ClusterLoadAssignment,
    Listener,
    RouteConfiguration,
    Secret,
}

impl ResourceType {
    pub const ALL: [ResourceType; 5] = [
        ResourceType::Cluster,
        ResourceType::ClusterLoadAssignment,
        ResourceType::Listener,
        ResourceType::RouteConfiguration,
        ResourceType::Secret,
    ];

    /// The xDS type URL of the resource.
    pub fn type_url(self) -> &'static str {
        match self {
            ResourceType::Cluster => "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            ResourceType::ClusterLoadAssignment => "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
            ResourceType::Listener => "type.googleapis.com/envoy.config.listener.v3.Listener",
            ResourceType::RouteConfiguration => "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
            ResourceType::Secret => "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
        }
    }

    pub fn from_type_url(type_url: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.type_url() == type_url)
    }

    /// The short name Envoy's logs and stats use (`cds`, `eds`, …).
    pub fn short_name(self) -> &'static str {
        match self {
            ResourceType::Cluster => "cds",
            ResourceType::ClusterLoadAssignment => "eds",
            ResourceType::Listener => "lds",
            ResourceType::RouteConfiguration => "rds",
            ResourceType::Secret => "sds",
        }
    }

    /// LDS and CDS are subscribed by wildcard; the others by the names that accepted
    /// listeners and clusters reference.
    pub fn is_wildcard(self) -> bool {
        matches!(self, ResourceType::Cluster | ResourceType::Listener)
    }
}

/// One validated resource of any type.
///
/// Short-lived (decoded, then moved into the store), so the size gap between a full
/// `Cluster` and the other variants costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Resource {
    Cluster(Cluster),
    ClusterLoadAssignment(ClusterLoadAssignment),
    Listener(Listener),
    RouteConfiguration(RouteConfiguration),
    Secret(Secret),
}

impl Resource {
    pub fn name(&self) -> &str {
        match self {
            Resource::Cluster(c) => &c.name,
            Resource::ClusterLoadAssignment(c) => &c.cluster_name,
            Resource::Listener(l) => &l.name,
            Resource::RouteConfiguration(r) => &r.name,
            Resource::Secret(s) => &s.name,
        }
    }

    pub fn resource_type(&self) -> ResourceType {
        match self {
            Resource::Cluster(_) => ResourceType::Cluster,
            Resource::ClusterLoadAssignment(_) => ResourceType::ClusterLoadAssignment,
            Resource::Listener(_) => ResourceType::Listener,
            Resource::RouteConfiguration(_) => ResourceType::RouteConfiguration,
            Resource::Secret(_) => ResourceType::Secret,
        }
    }
}
