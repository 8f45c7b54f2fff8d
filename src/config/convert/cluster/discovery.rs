//! Where a cluster's endpoints come from: the discovery type, the EDS config source, DNS
//! resolution settings, ORIGINAL_DST settings, the inline endpoints each type allows, and
//! the local address upstream connections bind to.

// Exhaustive destructuring names deprecated fields too; several are what Istio still sends.
#![allow(deprecated)]

use std::time::Duration;

use crate::config::address::Address;
use crate::config::cluster::{
    DEFAULT_INITIAL_FETCH_TIMEOUT, DEFAULT_ORIGINAL_DST_CLEANUP_INTERVAL, DEFAULT_ORIGINAL_DST_HEADER, DnsLookupFamily,
    DnsSettings, EdsConfig, MetadataKey, OriginalDstConfig, SourceAddresses,
};
use crate::config::convert::common;
use crate::config::endpoint::ClusterLoadAssignment;
use crate::config::error::{AtField, ConfigError, Result, Warnings};
use crate::pb::envoy::config::cluster::v3::cluster::{self as c, DiscoveryType as D};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::google::protobuf as gpb;

pub(super) fn discovery_kind(proto: Option<c::ClusterDiscoveryType>) -> Result<D> {
    match proto {
        None => Ok(D::Static),
        Some(c::ClusterDiscoveryType::Type(t)) => {
            D::try_from(t).map_err(|_| ConfigError::new("type", format!("unknown discovery type {t}")))
        }
        Some(c::ClusterDiscoveryType::ClusterType(custom)) => {
            Err(ConfigError::new("cluster_type", format!("custom cluster type {:?} is not supported", custom.name)))
        }
    }
}

/// EDS needs `eds_config: {ads: {}}`: Outrider takes every resource over its one ADS stream.
pub(super) fn eds_config(proto: Option<c::EdsClusterConfig>, cluster_name: &str) -> Result<EdsConfig> {
    use core::config_source::ConfigSourceSpecifier as S;
    let c::EdsClusterConfig { eds_config, service_name } =
        proto.ok_or_else(|| ConfigError::new("", "EDS clusters need eds_cluster_config"))?;
    let core::ConfigSource { authorities, initial_fetch_timeout, resource_api_version, config_source_specifier } =
        eds_config.ok_or_else(|| ConfigError::new("eds_config", "is required"))?;
    let at = |field: &str| format!("eds_config.{field}");
    if !authorities.is_empty() {
        return Err(ConfigError::new(at("authorities"), "xDS federation is not supported"));
    }
    match core::ApiVersion::try_from(resource_api_version) {
        Ok(core::ApiVersion::Auto | core::ApiVersion::V3) => {}
        _ => return Err(ConfigError::new(at("resource_api_version"), "only V3 resources are supported")),
    }
    let refused = match config_source_specifier {
        Some(S::Ads(_)) => None,
        Some(S::Path(_)) => Some("path"),
        Some(S::PathConfigSource(_)) => Some("path_config_source"),
        Some(S::ApiConfigSource(_)) => Some("api_config_source"),
        Some(S::Self_(_)) => Some("self"),
        None => return Err(ConfigError::new(at("ads"), "is required")),
    };
    if let Some(field) = refused {
        return Err(ConfigError::new(at(field), "endpoints are only taken over ADS (eds_config: {ads: {}})"));
    }
    let initial_fetch_timeout =
        match common::opt_duration(&initial_fetch_timeout, "").at_field(at("initial_fetch_timeout"))? {
            None => Some(DEFAULT_INITIAL_FETCH_TIMEOUT),
            Some(d) if d.is_zero() => None,
            Some(d) => Some(d),
        };
    let service_name = if service_name.is_empty() { cluster_name.to_owned() } else { service_name };
    Ok(EdsConfig { service_name, initial_fetch_timeout })
}

pub(super) struct DnsFields {
    pub dns_refresh_rate: Option<gpb::Duration>,
    pub dns_jitter: Option<gpb::Duration>,
    pub dns_failure_refresh_rate: Option<c::RefreshRate>,
    pub respect_dns_ttl: bool,
    pub dns_lookup_family: i32,
    pub dns_resolvers: Vec<core::Address>,
    pub use_tcp_for_dns_lookups: bool,
    pub dns_resolution_config: Option<core::DnsResolutionConfig>,
    pub typed_dns_resolver_config: Option<core::TypedExtensionConfig>,
}

pub(super) fn dns_settings(kind: D, fields: DnsFields, warnings: &mut Warnings) -> Result<Option<DnsSettings>> {
    let DnsFields {
        dns_refresh_rate,
        dns_jitter,
        dns_failure_refresh_rate,
        respect_dns_ttl,
        dns_lookup_family,
        dns_resolvers,
        use_tcp_for_dns_lookups,
        dns_resolution_config,
        typed_dns_resolver_config,
    } = fields;
    let resolver = [
        ("dns_resolvers", !dns_resolvers.is_empty()),
        ("use_tcp_for_dns_lookups", use_tcp_for_dns_lookups),
        ("dns_resolution_config", dns_resolution_config.is_some()),
        ("typed_dns_resolver_config", typed_dns_resolver_config.is_some()),
    ];
    if !matches!(kind, D::StrictDns | D::LogicalDns) {
        let timing = [
            ("dns_refresh_rate", dns_refresh_rate.is_some()),
            ("dns_jitter", dns_jitter.is_some()),
            ("dns_failure_refresh_rate", dns_failure_refresh_rate.is_some()),
            ("respect_dns_ttl", respect_dns_ttl),
            ("dns_lookup_family", dns_lookup_family != c::DnsLookupFamily::Auto as i32),
        ];
        for (field, _) in resolver.iter().chain(&timing).filter(|(_, set)| *set) {
            warnings.ignored(*field, "only DNS clusters resolve names");
        }
        return Ok(None);
    }
    if let Some((field, _)) = resolver.iter().find(|(_, set)| *set) {
        return Err(ConfigError::new(*field, "custom DNS resolvers are not supported; the system resolver is used"));
    }
    // Outrider resolves an endpoint's name at each new connection (and health check
    // connection) and keeps no answers: there is no refresh for the refresh rate, its jitter,
    // its failure rate or the records' TTL (`respect_dns_ttl`) to pace, and no answer older
    // than the resolver's own.
    if dns_jitter.is_some() {
        warnings.ignored("dns_jitter", "names are resolved at each new connection");
    }
    if dns_failure_refresh_rate.is_some() {
        warnings.ignored("dns_failure_refresh_rate", "names are resolved at each new connection");
    }
    // Envoy's proto constraint (`gt: 1ms`) still refuses what Envoy refuses.
    if common::opt_duration(&dns_refresh_rate, "dns_refresh_rate")?.is_some_and(|d| d < Duration::from_millis(1)) {
        return Err(ConfigError::new("dns_refresh_rate", "must be at least 1ms"));
    }
    use c::DnsLookupFamily as F;
    let lookup_family = match F::try_from(dns_lookup_family) {
        Ok(F::Auto) => DnsLookupFamily::Auto,
        Ok(F::V4Only) => DnsLookupFamily::V4Only,
        Ok(F::V6Only) => DnsLookupFamily::V6Only,
        Ok(F::V4Preferred) => DnsLookupFamily::V4Preferred,
        Ok(F::All) => DnsLookupFamily::All,
        Err(_) => return Err(ConfigError::new("dns_lookup_family", format!("unknown family {dns_lookup_family}"))),
    };
    Ok(Some(DnsSettings { lookup_family }))
}

/// The inline endpoints each discovery type allows.
pub(super) fn check_load_assignment(
    kind: D,
    assignment: Option<ClusterLoadAssignment>,
    warnings: &mut Warnings,
) -> Result<Option<ClusterLoadAssignment>> {
    match (kind, assignment) {
        (D::Eds, Some(_)) => {
            warnings.ignored("load_assignment", "EDS clusters take their endpoints from EDS");
            Ok(None)
        }
        (D::OriginalDst, Some(_)) => Err(ConfigError::new("", "ORIGINAL_DST clusters have no endpoints of their own")),
        (D::LogicalDns, assignment) => {
            let single = assignment.as_ref().is_some_and(|a| a.localities.len() == 1 && a.endpoint_count() == 1);
            if !single {
                return Err(ConfigError::new("", "LOGICAL_DNS clusters need exactly one locality with one endpoint"));
            }
            Ok(assignment)
        }
        (D::Static, Some(assignment)) => {
            for (i, locality) in assignment.localities.iter().enumerate() {
                for (j, endpoint) in locality.endpoints.iter().enumerate() {
                    if let Address::Dns { host, .. } = &endpoint.address {
                        return Err(ConfigError::new(
                            format!("endpoints[{i}].lb_endpoints[{j}].endpoint.address.socket_address.address"),
                            format!("STATIC clusters need IP addresses, not {host:?}"),
                        ));
                    }
                }
            }
            Ok(Some(assignment))
        }
        (_, assignment) => Ok(assignment),
    }
}

/// An ORIGINAL_DST cluster's `original_dst_lb_config` and `cleanup_interval` (Envoy: 5 s
/// by default, and it must be positive).
pub(super) fn original_dst_config(
    proto: Option<c::OriginalDstLbConfig>,
    cleanup_interval: &Option<gpb::Duration>,
) -> Result<OriginalDstConfig> {
    let c::OriginalDstLbConfig { use_http_header, http_header_name, upstream_port_override, metadata_key } =
        proto.unwrap_or_default();
    let at = "original_dst_lb_config";
    let metadata_key = metadata_key.map(|k| metadata_key_of(k).map_err(|e| e.at("metadata_key").at(at))).transpose()?;
    let upstream_port_override = upstream_port_override
        .map(|p| u16::try_from(p.value).map_err(|_| ConfigError::new("upstream_port_override", "is not a port")))
        .transpose()
        .map_err(|e| e.at(at))?;
    let http_header_name =
        if http_header_name.is_empty() { DEFAULT_ORIGINAL_DST_HEADER.to_owned() } else { http_header_name };
    let cleanup_interval = match common::opt_duration(cleanup_interval, "cleanup_interval")? {
        None => DEFAULT_ORIGINAL_DST_CLEANUP_INTERVAL,
        Some(Duration::ZERO) => return Err(ConfigError::new("cleanup_interval", "must be greater than 0s")),
        Some(interval) => interval,
    };
    Ok(OriginalDstConfig { use_http_header, http_header_name, upstream_port_override, metadata_key, cleanup_interval })
}

/// `envoy.type.metadata.v3.MetadataKey`: a namespace and a path of keys (no key empty).
fn metadata_key_of(proto: crate::pb::envoy::r#type::metadata::v3::MetadataKey) -> Result<MetadataKey> {
    use crate::pb::envoy::r#type::metadata::v3::metadata_key::path_segment::Segment;
    let crate::pb::envoy::r#type::metadata::v3::MetadataKey { key, path } = proto;
    if key.is_empty() {
        return Err(ConfigError::new("key", "must not be empty"));
    }
    if path.is_empty() {
        return Err(ConfigError::new("path", "must have at least one key"));
    }
    let path = path
        .into_iter()
        .enumerate()
        .map(|(i, segment)| match segment.segment {
            Some(Segment::Key(k)) if !k.is_empty() => Ok(k),
            _ => Err(ConfigError::new(format!("path[{i}].key"), "must not be empty")),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(MetadataKey { key, path })
}

pub(super) fn upstream_bind(proto: core::BindConfig, warnings: &mut Warnings) -> Result<Option<SourceAddresses>> {
    let core::BindConfig {
        source_address,
        freebind,
        socket_options,
        extra_source_addresses,
        additional_source_addresses,
        local_address_selector,
        validate_network_namespaces,
    } = proto;
    let refused = [
        ("freebind", freebind.is_some_and(|f| f.value)),
        ("socket_options", !socket_options.is_empty()),
        ("additional_source_addresses", !additional_source_addresses.is_empty()),
        ("local_address_selector", local_address_selector.is_some()),
    ];
    if let Some((field, _)) = refused.iter().find(|(_, set)| *set) {
        return Err(ConfigError::new(*field, "not supported"));
    }
    if validate_network_namespaces {
        warnings.ignored("validate_network_namespaces", "network namespaces are not used");
    }
    let ip =
        |address: &core::SocketAddress, field: &str| match common::socket_address(address, false).at_field(field)? {
            Address::Socket(addr) => Ok(addr),
            _ => Err(ConfigError::new(field, "must be an IP address")),
        };
    let Some(source) = source_address else {
        if !extra_source_addresses.is_empty() {
            return Err(ConfigError::new("extra_source_addresses", "needs a source_address"));
        }
        return Ok(None);
    };
    let source = ip(&source, "source_address")?;
    // Envoy's default local address selector: one extra address, of the other IP family.
    let other_family = match extra_source_addresses.as_slice() {
        [] => None,
        [extra] => {
            let field = "extra_source_addresses[0]";
            let core::ExtraSourceAddress { address, socket_options } = extra;
            if socket_options.is_some() {
                return Err(ConfigError::new(format!("{field}.socket_options"), "not supported"));
            }
            let Some(address) = address else {
                return Err(ConfigError::new(format!("{field}.address"), "is required"));
            };
            let extra = ip(address, &format!("{field}.address"))?;
            if extra.is_ipv4() == source.is_ipv4() {
                return Err(ConfigError::new(field, "must be of the other IP family than source_address"));
            }
            Some(extra)
        }
        _ => return Err(ConfigError::new("extra_source_addresses", "at most one extra source address is supported")),
    };
    Ok(Some(SourceAddresses { source, other_family }))
}
