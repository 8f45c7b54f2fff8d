//! `envoy.config.endpoint.v3.ClusterLoadAssignment` → [`ClusterLoadAssignment`].

use std::collections::BTreeMap;
use std::sync::Arc;

use super::common;
use crate::config::Address;
use crate::config::endpoint::{
    ClusterLoadAssignment, DEFAULT_OVERPROVISIONING_FACTOR, EndpointHealthCheck, EndpointMetadata, HealthStatus,
    LbEndpoint, Locality, LocalityLbEndpoints,
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
    let proto::Endpoint { address, health_check_config, hostname, additional_addresses, observability_name: _ } =
        endpoint;
    let address = address.ok_or_else(|| ConfigError::new("endpoint.address", "is required"))?;
    let address = common::address(&address, true).map_err(|e| e.at("endpoint.address"))?;
    let additional_addresses = additional_addresses
        .into_iter()
        .enumerate()
        .map(|(i, extra)| {
            let at = format!("endpoint.additional_addresses[{i}].address");
            let proto = extra.address.ok_or_else(|| ConfigError::new(&at, "is required"))?;
            match common::address(&proto, false).map_err(|e| e.at(&at))? {
                Address::Socket(address) => Ok(address),
                _ => Err(ConfigError::new(&at, "must be an IP address")),
            }
        })
        .collect::<Result<Box<[_]>>>()?;
    // Happy eyeballs races IP addresses: a name or a pipe has no place among them.
    if !additional_addresses.is_empty() && !matches!(address, Address::Socket(_)) {
        return Err(ConfigError::new(
            "endpoint.additional_addresses",
            "only an endpoint whose address is an IP address may have additional addresses",
        ));
    }
    let health_check = match health_check_config {
        None => None,
        Some(config) => endpoint_health_check(config, &address).map_err(|e| e.at("endpoint.health_check_config"))?,
    };
    let weight = match load_balancing_weight {
        None => 1,
        Some(gpb::UInt32Value { value: 0 }) => {
            return Err(ConfigError::new("load_balancing_weight", "must be at least 1"));
        }
        Some(w) => w.value,
    };
    let health = health_status_of(health_status).map_err(|e| e.at("health_status"))?;
    let internal_metadata = match (&address, metadata.as_ref()) {
        (Address::Internal { .. }, Some(metadata)) => Some(Box::new(internal_metadata(metadata)?)),
        _ => None,
    };
    Ok(LbEndpoint {
        address,
        weight,
        health,
        hash_key: hash_key(metadata.as_ref()),
        transport_socket_match: transport_socket_match(metadata.as_ref()),
        hostname,
        health_check,
        additional_addresses,
        metadata: internal_metadata,
    })
}

/// The metadata of an internal endpoint, namespace by namespace, as JSON text.
fn internal_metadata(metadata: &core::Metadata) -> Result<EndpointMetadata> {
    let namespaces = metadata.filter_metadata.iter().map(|(name, fields)| {
        let json = super::common::struct_to_json(fields)
            .map_err(|e| ConfigError::new(format!("metadata.filter_metadata.{name}"), e.to_string()))?;
        Ok((name.clone(), json.to_string()))
    });
    Ok(EndpointMetadata(namespaces.collect::<Result<_>>()?))
}

/// `Endpoint.HealthCheckConfig`; `None` when it sets nothing.
fn endpoint_health_check(
    proto: proto::endpoint::HealthCheckConfig,
    serving: &Address,
) -> Result<Option<Box<EndpointHealthCheck>>> {
    let proto::endpoint::HealthCheckConfig { port_value, hostname, address, disable_active_health_check } = proto;
    let port = match port_value {
        0 => None,
        port => Some(u16::try_from(port).map_err(|_| ConfigError::new("port_value", format!("{port} is not a port")))?),
    };
    // Envoy refuses a health check port on a pipe endpoint ("non-zero port for non-IP address").
    if port.is_some() && matches!(serving, Address::Pipe(_) | Address::Internal { .. }) {
        return Err(ConfigError::new("port_value", "must be 0 for an endpoint that is not an IP address"));
    }
    let address = match address {
        None => None,
        Some(address) => match common::address(&address, false).map_err(|e| e.at("address"))? {
            Address::Socket(address) => Some(address),
            _ => return Err(ConfigError::new("address", "must be an IP address")),
        },
    };
    let config = EndpointHealthCheck { address, port, hostname, disabled: disable_active_health_check };
    Ok((config != EndpointHealthCheck::default()).then(|| Box::new(config)))
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

    fn with_health_check_config(
        address: core::Address,
        config: proto::endpoint::HealthCheckConfig,
    ) -> Result<ClusterLoadAssignment> {
        one_endpoint(proto::Endpoint {
            address: Some(address),
            health_check_config: Some(config),
            ..Default::default()
        })
    }

    /// A cluster load assignment of `endpoint` alone, converted.
    fn one_endpoint(endpoint: proto::Endpoint) -> Result<ClusterLoadAssignment> {
        let lb_endpoint = proto::LbEndpoint {
            host_identifier: Some(proto::lb_endpoint::HostIdentifier::Endpoint(endpoint)),
            ..Default::default()
        };
        let assignment = proto::ClusterLoadAssignment {
            cluster_name: "c".into(),
            endpoints: vec![proto::LocalityLbEndpoints { lb_endpoints: vec![lb_endpoint], ..Default::default() }],
            ..Default::default()
        };
        cluster_load_assignment(assignment, &mut Warnings::new())
    }

    fn socket(ip: &str, port: u32) -> core::Address {
        core::Address {
            address: Some(core::address::Address::SocketAddress(core::SocketAddress {
                address: ip.into(),
                port_specifier: Some(core::socket_address::PortSpecifier::PortValue(port)),
                ..Default::default()
            })),
        }
    }

    fn pipe() -> core::Address {
        core::Address { address: Some(core::address::Address::Pipe(core::Pipe { path: "/tmp/p".into(), mode: 0 })) }
    }

    fn internal(listener: &str) -> core::Address {
        use self::core::envoy_internal_address::AddressNameSpecifier;
        let name = Some(AddressNameSpecifier::ServerListenerName(listener.into()));
        let internal = core::EnvoyInternalAddress { address_name_specifier: name, endpoint_id: "e1".into() };
        core::Address { address: Some(core::address::Address::EnvoyInternalAddress(internal)) }
    }

    #[test]
    fn an_internal_address_names_its_listener() {
        let assignment = with_health_check_config(internal("inner"), Default::default()).unwrap();
        let endpoint = assignment.endpoints().next().unwrap();
        let expected = Address::Internal { server_listener_name: "inner".into(), endpoint_id: "e1".into() };
        assert_eq!(endpoint.address, expected);
        assert_eq!(endpoint.address.to_string(), "envoy://inner/e1");
        let err = with_health_check_config(internal(""), Default::default()).unwrap_err();
        assert_eq!(
            err.path(),
            "endpoints[0].lb_endpoints[0].endpoint.address.envoy_internal_address.server_listener_name"
        );
    }

    fn converted_health_check(config: proto::endpoint::HealthCheckConfig) -> Option<Box<EndpointHealthCheck>> {
        let assignment = with_health_check_config(socket("10.0.0.1", 80), config).unwrap();
        assignment.endpoints().next().unwrap().health_check.clone()
    }

    #[test]
    fn an_endpoints_health_check_config_is_kept_and_an_empty_one_dropped() {
        type Config = proto::endpoint::HealthCheckConfig;
        // Istio sends `health_check_config: {}` on every endpoint.
        assert_eq!(converted_health_check(Config::default()), None);
        let config = Config {
            port_value: 8081,
            hostname: "hc.example".into(),
            address: Some(socket("10.0.0.9", 9000)),
            disable_active_health_check: true,
        };
        let expected = EndpointHealthCheck {
            address: Some("10.0.0.9:9000".parse().unwrap()),
            port: Some(8081),
            hostname: "hc.example".into(),
            disabled: true,
        };
        assert_eq!(converted_health_check(config).as_deref(), Some(&expected));
        let serving = Address::Socket("10.0.0.1:80".parse().unwrap());
        assert_eq!(expected.probe_address(&serving), Address::Socket("10.0.0.9:8081".parse().unwrap()));
        let port_only = EndpointHealthCheck { port: Some(8081), ..Default::default() };
        assert_eq!(port_only.probe_address(&serving), Address::Socket("10.0.0.1:8081".parse().unwrap()));
    }

    #[test]
    fn a_health_check_port_or_address_envoy_refuses_is_refused() {
        type Config = proto::endpoint::HealthCheckConfig;
        let error =
            with_health_check_config(socket("10.0.0.1", 80), Config { port_value: 70_000, ..Default::default() })
                .unwrap_err();
        assert_eq!(error.path(), "endpoints[0].lb_endpoints[0].endpoint.health_check_config.port_value");
        // Envoy: "non-zero port for non-IP address".
        let error = with_health_check_config(pipe(), Config { port_value: 8081, ..Default::default() }).unwrap_err();
        assert_eq!(error.path(), "endpoints[0].lb_endpoints[0].endpoint.health_check_config.port_value");
        let error =
            with_health_check_config(socket("10.0.0.1", 80), Config { address: Some(pipe()), ..Default::default() })
                .unwrap_err();
        assert_eq!(error.path(), "endpoints[0].lb_endpoints[0].endpoint.health_check_config.address");
    }

    #[test]
    fn additional_addresses_must_be_ip_addresses_of_an_ip_endpoint() {
        let with_extra = |address: core::Address, extra: core::Address| {
            one_endpoint(proto::Endpoint {
                address: Some(address),
                additional_addresses: vec![proto::endpoint::AdditionalAddress { address: Some(extra) }],
                ..Default::default()
            })
        };
        let assignment = with_extra(socket("10.0.0.1", 80), socket("fd00::1", 80)).unwrap();
        let endpoint = assignment.endpoints().next().unwrap();
        assert_eq!(*endpoint.additional_addresses, ["[fd00::1]:80".parse().unwrap()]);
        let expected: Vec<std::net::SocketAddr> = vec!["10.0.0.1:80".parse().unwrap(), "[fd00::1]:80".parse().unwrap()];
        assert_eq!(endpoint.connect_addresses(), expected);
        let error = with_extra(socket("10.0.0.1", 80), pipe()).unwrap_err();
        assert_eq!(error.path(), "endpoints[0].lb_endpoints[0].endpoint.additional_addresses[0].address");
        let error = with_extra(pipe(), socket("10.0.0.1", 80)).unwrap_err();
        assert_eq!(error.path(), "endpoints[0].lb_endpoints[0].endpoint.additional_addresses");
    }
}
