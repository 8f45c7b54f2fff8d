//! xDS protos → domain types. The only module that reads Envoy's protobuf messages.
#![allow(deprecated)] // every field is destructured, deprecated ones included
//!
//! Every message is destructured so that a new upstream field cannot slip by unnoticed;
//! each field is either converted, refused with its path (when ignoring it would change
//! what Outrider does), or recorded in [`Warnings`] (when ignoring it is harmless).

pub mod bootstrap;
pub mod cluster;
pub mod common;
pub mod constraints;
mod custom_tags;
pub mod endpoint;
mod filter_kind;
pub mod filters;
mod header_value_option;
pub mod listener;
mod log_format;
mod matchers;
mod rate_limit;
pub mod route;
pub mod secret;
pub mod tls;
mod upgrade;
pub mod workload;

use prost::Message;

use super::error::{ConfigError, Result, Warnings};
use super::{Resource, ResourceType};
use crate::pb::envoy;

/// Decodes and converts one resource received as protobuf bytes of type `resource_type`.
pub fn decode_resource(resource_type: ResourceType, bytes: &[u8], warnings: &mut Warnings) -> Result<Resource> {
    fn decode<M: Message + Default>(bytes: &[u8]) -> Result<M> {
        M::decode(bytes).map_err(|e| ConfigError::new("", format!("cannot decode: {e}")))
    }
    Ok(match resource_type {
        ResourceType::Cluster => {
            Resource::Cluster(cluster::cluster(decode::<envoy::config::cluster::v3::Cluster>(bytes)?, warnings)?)
        }
        ResourceType::ClusterLoadAssignment => Resource::ClusterLoadAssignment(endpoint::cluster_load_assignment(
            decode::<envoy::config::endpoint::v3::ClusterLoadAssignment>(bytes)?,
            warnings,
        )?),
        ResourceType::Listener => {
            Resource::Listener(listener::listener(decode::<envoy::config::listener::v3::Listener>(bytes)?, warnings)?)
        }
        ResourceType::RouteConfiguration => Resource::RouteConfiguration(route::route_configuration(
            decode::<envoy::config::route::v3::RouteConfiguration>(bytes)?,
            warnings,
        )?),
        ResourceType::Secret => Resource::Secret(secret::secret(
            decode::<envoy::extensions::transport_sockets::tls::v3::Secret>(bytes)?,
            warnings,
        )?),
    })
}

/// The name of a resource that failed to convert, for the NACK (SotW carries no names
/// beside the resources). `None` when the bytes do not even decode.
pub fn resource_name(resource_type: ResourceType, bytes: &[u8]) -> Option<String> {
    fn name<M: Message + Default>(bytes: &[u8], get: impl FnOnce(M) -> String) -> Option<String> {
        M::decode(bytes).ok().map(get).filter(|n| !n.is_empty())
    }
    match resource_type {
        ResourceType::Cluster => name(bytes, |c: envoy::config::cluster::v3::Cluster| c.name),
        ResourceType::ClusterLoadAssignment => {
            name(bytes, |c: envoy::config::endpoint::v3::ClusterLoadAssignment| c.cluster_name)
        }
        ResourceType::Listener => name(bytes, |l: envoy::config::listener::v3::Listener| l.name),
        ResourceType::RouteConfiguration => name(bytes, |r: envoy::config::route::v3::RouteConfiguration| r.name),
        ResourceType::Secret => name(bytes, |s: envoy::extensions::transport_sockets::tls::v3::Secret| s.name),
    }
}
