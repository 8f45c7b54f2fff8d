//! `envoy.config.endpoint.v3.ClusterLoadAssignment` → [`ClusterLoadAssignment`].

use std::collections::BTreeMap;
use std::sync::Arc;

use super::common;
use crate::config::endpoint::{
    ClusterLoadAssignment, DEFAULT_OVERPROVISIONING_FACTOR, HealthStatus, LbEndpoint, Locality, LocalityLbEndpoints,
};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::config::endpoint::v3 as proto;
use crate::pb::google::protobuf as gpb;

pub fn cluster_load_assignment(
    proto: proto::ClusterLoadAssignment,
    warnings: &mut Warnings,
) -> Result<ClusterLoadAssignment> {
    let proto::ClusterLoadAssignment { cluster_name, endpoints, named_endpoints, policy } = proto;
    if !named_endpoints.is_empty() {
        return Err(ConfigError::new("named_endpoints", "named endpoints are not supported"));
    }
    let (overprovisioning_factor, weighted_priority_health) = match policy {
        None => (DEFAULT_OVERPROVISIONING_FACTOR, false),
        Some(policy) => policy_values(policy, warnings).map_err(|e| e.at("policy"))?,
    };
    let localities = endpoints
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            warnings
                .within(format_args!("endpoints[{i}]"), |w| locality_lb_endpoints(l, w))
                .map_err(|e| e.at(format_args!("endpoints[{i}]")))
        })
        .collect::<Result<Vec<_>>>()
        .map(common::exact)?;
    Ok(ClusterLoadAssignment { cluster_name, localities, overprovisioning_factor, weighted_priority_health })
}

fn policy_values(policy: proto::cluster_load_assignment::Policy, warnings: &mut Warnings) -> Result<(u32, bool)> {
    let proto::cluster_load_assignment::Policy {
        drop_overloads,
        overprovisioning_factor,
        endpoint_stale_after,
        weighted_priority_health,
    } = policy;
    if !drop_overloads.is_empty() {
        return Err(ConfigError::new("drop_overloads", "dropping traffic on overload is not supported"));
    }
    if endpoint_stale_after.is_some() {
        warnings.ignored("endpoint_stale_after", "endpoints do not go stale; the last assignment is kept");
    }
    let factor = common::u32_or(&overprovisioning_factor, DEFAULT_OVERPROVISIONING_FACTOR);
    if factor == 0 {
        return Err(ConfigError::new("overprovisioning_factor", "must be greater than 0"));
    }
    Ok((factor, weighted_priority_health))
}

/// The largest priority an EDS locality may have, as Envoy's `LocalityLbEndpoints` allows.
pub const MAX_PRIORITY: u32 = 128;

fn locality_lb_endpoints(proto: proto::LocalityLbEndpoints, warnings: &mut Warnings) -> Result<LocalityLbEndpoints> {
    let proto::LocalityLbEndpoints {
        locality,
        metadata,
        lb_endpoints,
        load_balancing_weight,
        priority,
        proximity,
        lb_config,
    } = proto;
    if lb_config.is_some() {
        return Err(ConfigError::new("leds_cluster_locality_config", "LEDS is not supported"));
    }
    if metadata.is_some() {
        warnings.ignored("metadata", "locality metadata is not used");
    }
    if proximity.is_some() {
        warnings.ignored("proximity", "locality proximity is not used");
    }
    // Envoy's proto constraint (`lte: 128`); the balancer keeps one level per priority.
    if priority > MAX_PRIORITY {
        return Err(ConfigError::new("priority", format!("{priority} is above the largest priority, {MAX_PRIORITY}")));
    }
    let load_balancing_weight = match load_balancing_weight {
        Some(gpb::UInt32Value { value: 0 }) => {
            return Err(ConfigError::new("load_balancing_weight", "must be at least 1"));
        }
        other => other.map(|w| w.value),
    };
    let locality = locality
        .map(|core::Locality { region, zone, sub_zone }| Locality { region, zone, sub_zone })
        .unwrap_or_default();
    let endpoints = lb_endpoints
        .into_iter()
        .enumerate()
        .map(|(i, e)| lb_endpoint(e).map(Arc::new).map_err(|e| e.at(format_args!("lb_endpoints[{i}]"))))
        .collect::<Result<Vec<_>>>()
        .map(common::exact)?;
    Ok(LocalityLbEndpoints { locality, priority, load_balancing_weight, endpoints })
}

fn lb_endpoint(proto: proto::LbEndpoint) -> Result<LbEndpoint> {
    use proto::lb_endpoint::HostIdentifier;
    let proto::LbEndpoint { health_status, metadata, load_balancing_weight, host_identifier } = proto;
    let endpoint = match host_identifier {
        Some(HostIdentifier::Endpoint(endpoint)) => endpoint,
        Some(HostIdentifier::EndpointName(_)) => {
            return Err(ConfigError::new("endpoint_name", "named endpoints are not supported"));
        }
        None => return Err(ConfigError::new("endpoint", "is required")),
    };
    let proto::Endpoint { address, health_check_config: _, hostname, additional_addresses: _, observability_name: _ } =
        endpoint;
    let address = address.ok_or_else(|| ConfigError::new("endpoint.address", "is required"))?;
    let address = common::address(&address, true).map_err(|e| e.at("endpoint.address"))?;
    let weight = match load_balancing_weight {
        None => 1,
        Some(gpb::UInt32Value { value: 0 }) => {
            return Err(ConfigError::new("load_balancing_weight", "must be at least 1"));
        }
        Some(w) => w.value,
    };
    let health = health_status_of(health_status).map_err(|e| e.at("health_status"))?;
    Ok(LbEndpoint {
        address,
        weight,
        health,
        hash_key: hash_key(metadata.as_ref()),
        transport_socket_match: transport_socket_match(metadata.as_ref()),
        hostname,
    })
}

fn health_status_of(value: i32) -> Result<HealthStatus> {
    use core::HealthStatus as H;
    match H::try_from(value) {
        Ok(H::Unknown | H::Healthy) => Ok(HealthStatus::Healthy),
        Ok(H::Degraded) => Ok(HealthStatus::Degraded),
        Ok(H::Unhealthy | H::Draining | H::Timeout) => Ok(HealthStatus::Unhealthy),
        Err(_) => Err(ConfigError::new("", format!("unknown health status {value}"))),
    }
}

/// `metadata.filter_metadata["envoy.lb"].hash_key`, which Envoy's ring hash and maglev use
/// in place of the address when set.
fn hash_key(metadata: Option<&core::Metadata>) -> Option<String> {
    use gpb::value::Kind;
    let fields = &metadata?.filter_metadata.get("envoy.lb")?.fields;
    match fields.get("hash_key")?.kind.as_ref()? {
        Kind::StringValue(key) => Some(key.clone()),
        _ => None,
    }
}

/// The string fields of `metadata.filter_metadata["envoy.transport_socket_match"]`.
fn transport_socket_match(metadata: Option<&core::Metadata>) -> BTreeMap<String, String> {
    use gpb::value::Kind;
    let Some(fields) = metadata.and_then(|m| m.filter_metadata.get("envoy.transport_socket_match")) else {
        return BTreeMap::new();
    };
    fields
        .fields
        .iter()
        .filter_map(|(key, value)| match value.kind.as_ref()? {
            Kind::StringValue(s) => Some((key.clone(), s.clone())),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_priority(priority: u32) -> proto::ClusterLoadAssignment {
        proto::ClusterLoadAssignment {
            cluster_name: "c".into(),
            endpoints: vec![proto::LocalityLbEndpoints { priority, ..Default::default() }],
            ..Default::default()
        }
    }

    #[test]
    fn priorities_above_envoys_largest_are_refused() {
        let mut warnings = Warnings::new();
        assert!(cluster_load_assignment(with_priority(MAX_PRIORITY), &mut warnings).is_ok());
        // Before the bound, 4 000 000 000 made the balancer build one level per priority.
        for priority in [MAX_PRIORITY + 1, 4_000_000_000, u32::MAX] {
            let error = cluster_load_assignment(with_priority(priority), &mut warnings).unwrap_err();
            assert_eq!(error.path(), "endpoints[0].priority");
        }
    }
}
