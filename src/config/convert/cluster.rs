//! `envoy.config.cluster.v3.Cluster` → [`Cluster`].
//!
//! This file owns the cluster's shape (discovery, DNS, EDS source, original destination,
//! binding, the fields that are refused or ignored); balancing, outlier detection, health
//! checks, circuit breakers, transport and HTTP protocol each have their own file.

// Exhaustive destructuring names deprecated fields too; several are what Istio still sends.
#![allow(deprecated)]

mod circuit_breakers;
mod discovery;
mod health_check;
mod http_codec;
mod lb_policy;
mod lb_shared;
mod lb_typed;
mod outlier;
mod protocol;
mod transport;

#[cfg(test)]
mod tests;

use discovery::{DnsFields, check_load_assignment, discovery_kind, dns_settings, eds_config, original_dst_config};

use crate::config::cluster::{CircuitBreakers, Cluster, DEFAULT_CONNECT_TIMEOUT, DiscoveryType, UpstreamTransport};
use crate::config::convert::common;
use crate::config::error::{AtField, ConfigError, Result, Warnings};
use crate::pb::envoy::config::cluster::v3 as proto;

use proto::cluster::{DiscoveryType as D, LbConfig};

/// Cluster filters Istio adds for telemetry only (peer metadata exchange).
const TELEMETRY_FILTERS: [&str; 2] = ["istio.metadata_exchange", "envoy.filters.network.upstream.metadata_exchange"];

pub fn cluster(proto: proto::Cluster, warnings: &mut Warnings) -> Result<Cluster> {
    let proto::Cluster {
        transport_socket_matches,
        transport_socket_matcher,
        name,
        alt_stat_name,
        stats_matcher,
        eds_cluster_config,
        connect_timeout,
        per_connection_buffer_limit_bytes,
        per_connection_buffer_high_watermark_timeout,
        lb_policy,
        load_assignment,
        health_checks,
        max_requests_per_connection,
        circuit_breakers,
        upstream_http_protocol_options,
        common_http_protocol_options,
        http_protocol_options,
        http2_protocol_options,
        typed_extension_protocol_options,
        dns_refresh_rate,
        dns_jitter,
        dns_failure_refresh_rate,
        respect_dns_ttl,
        dns_lookup_family,
        dns_resolvers,
        use_tcp_for_dns_lookups,
        dns_resolution_config,
        typed_dns_resolver_config,
        wait_for_warm_on_init,
        outlier_detection,
        cleanup_interval,
        upstream_bind_config,
        lb_subset_config,
        common_lb_config,
        transport_socket,
        metadata,
        protocol_selection,
        upstream_connection_options,
        close_connections_on_host_health_failure,
        ignore_health_on_host_removal,
        filters,
        load_balancing_policy,
        lrs_server,
        lrs_report_endpoint_metrics,
        track_timeout_budgets,
        upstream_config,
        track_cluster_stats,
        preconnect_policy,
        connection_pool_per_downstream_connection,
        queuing_policies,
        cluster_discovery_type,
        lb_config,
    } = proto;
    if name.is_empty() {
        return Err(ConfigError::new("name", "must not be empty"));
    }
    let refused = [
        ("transport_socket_matcher", transport_socket_matcher.is_some()),
        ("upstream_config", upstream_config.is_some()),
        ("close_connections_on_host_health_failure", close_connections_on_host_health_failure),
        ("ignore_health_on_host_removal", ignore_health_on_host_removal),
        ("connection_pool_per_downstream_connection", connection_pool_per_downstream_connection),
        ("queuing_policies", queuing_policies.is_some()),
    ];
    if let Some((field, _)) = refused.iter().find(|(_, set)| *set) {
        return Err(ConfigError::new(*field, "not supported"));
    }
    let mut metadata_exchange = None;
    for (i, filter) in filters.iter().enumerate() {
        let at = format!("filters[{i}]");
        if !TELEMETRY_FILTERS.contains(&filter.name.as_str()) {
            return Err(ConfigError::new(at, format!("upstream filter {:?} is not supported", filter.name)));
        }
        let exchange = filter
            .typed_config
            .as_ref()
            .filter(|any| super::filter_kind::config_type(any) == super::filters::metadata_exchange::TYPE);
        match exchange {
            Some(any) => {
                let at = format!("{at}.typed_config");
                let config = warnings
                    .within(&at, |w| super::filters::metadata_exchange::metadata_exchange(any, w))
                    .map_err(|e| e.at(&at))?;
                metadata_exchange = Some(config);
            }
            None => warnings.ignored(at, "peer metadata exchange only feeds Istio telemetry; not run"),
        }
    }
    let istio_service_host = metadata.as_ref().and_then(istio_service_host);
    let ignored = [
        ("alt_stat_name", !alt_stat_name.is_empty(), "stats use the cluster name"),
        ("stats_matcher", stats_matcher.is_some(), "all cluster stats are kept"),
        (
            "per_connection_buffer_high_watermark_timeout",
            per_connection_buffer_high_watermark_timeout.is_some(),
            "connections are not closed on buffer pressure",
        ),
        ("wait_for_warm_on_init", wait_for_warm_on_init.is_some(), "clusters are always used once converted"),
        (
            "metadata",
            metadata.is_some(),
            "cluster metadata is read only for Istio's service host (istio.services, telemetry) and passed through to internal listeners",
        ),
        (
            "upstream_connection_options",
            upstream_connection_options.is_some(),
            "TCP keepalive and happy eyeballs use system defaults",
        ),
        ("lrs_server", lrs_server.is_some(), "load reports are not sent to the control plane"),
        ("lrs_report_endpoint_metrics", !lrs_report_endpoint_metrics.is_empty(), "load reports are not sent"),
        ("track_timeout_budgets", track_timeout_budgets, "stats only"),
        ("preconnect_policy", preconnect_policy.is_some(), "connections are made on demand"),
    ];
    for (field, set, why) in ignored {
        if set {
            warnings.ignored(field, why);
        }
    }
    let per_endpoint_stats = track_cluster_stats.as_ref().is_some_and(|t| t.per_endpoint_stats);
    if let Some(track) = &track_cluster_stats {
        if track.timeout_budgets {
            warnings.ignored("track_cluster_stats.timeout_budgets", "stats only");
        }
        if track.request_response_sizes {
            warnings.ignored("track_cluster_stats.request_response_sizes", "stats only");
        }
    }

    let kind = discovery_kind(cluster_discovery_type)?;
    if kind != D::Eds && eds_cluster_config.is_some() {
        warnings.ignored("eds_cluster_config", "only EDS clusters read it");
    }
    let discovery = match kind {
        D::Static => DiscoveryType::Static,
        D::StrictDns => DiscoveryType::StrictDns,
        D::LogicalDns => DiscoveryType::LogicalDns,
        D::OriginalDst => DiscoveryType::OriginalDst,
        D::Eds => DiscoveryType::Eds(eds_config(eds_cluster_config, &name).at_field("eds_cluster_config")?),
    };
    let dns_fields = DnsFields {
        dns_refresh_rate,
        dns_jitter,
        dns_failure_refresh_rate,
        respect_dns_ttl,
        dns_lookup_family,
        dns_resolvers,
        use_tcp_for_dns_lookups,
        dns_resolution_config,
        typed_dns_resolver_config,
    };
    let dns = dns_settings(kind, dns_fields, warnings)?;

    let (original_dst_lb_config, lb_config) = match lb_config {
        Some(LbConfig::OriginalDstLbConfig(config)) => (Some(config), None),
        other => (None, other),
    };
    let original_dst = match (kind, original_dst_lb_config) {
        (D::OriginalDst, config) => Some(original_dst_config(config, &cleanup_interval)?),
        (_, Some(_)) => {
            warnings.ignored("original_dst_lb_config", "only ORIGINAL_DST clusters read it");
            None
        }
        (_, None) => None,
    };
    if kind != D::OriginalDst && cleanup_interval.is_some() {
        warnings.ignored("cleanup_interval", "only ORIGINAL_DST clusters read it");
    }

    let load_assignment = load_assignment
        .map(|cla| warnings.within("load_assignment", |w| super::endpoint::cluster_load_assignment(cla, w)))
        .transpose()
        .at_field("load_assignment")?;
    let load_assignment = check_load_assignment(kind, load_assignment, warnings).at_field("load_assignment")?;

    let lb_field = if load_balancing_policy.is_some() { "load_balancing_policy" } else { "lb_policy" };
    let lb_fields =
        lb_policy::LbFields { lb_policy, lb_config, load_balancing_policy, common_lb_config, lb_subset_config };
    let load_balancing = lb_policy::load_balancing(lb_fields, warnings)?;
    match (kind, &load_balancing) {
        (D::OriginalDst, Some(_)) => {
            return Err(ConfigError::new(lb_field, "ORIGINAL_DST clusters need the CLUSTER_PROVIDED policy"));
        }
        (D::OriginalDst, None) | (_, Some(_)) => {}
        (_, None) => {
            return Err(ConfigError::new(lb_field, "CLUSTER_PROVIDED is only valid for ORIGINAL_DST clusters"));
        }
    }

    let connect_timeout = match common::opt_duration(&connect_timeout, "connect_timeout")? {
        None => DEFAULT_CONNECT_TIMEOUT,
        Some(d) if d.is_zero() => return Err(ConfigError::new("connect_timeout", "must be greater than 0")),
        Some(d) => d,
    };
    let outlier_detection =
        outlier_detection.map(outlier::outlier_detection).transpose().at_field("outlier_detection")?;
    let health_checks = health_checks
        .into_iter()
        .enumerate()
        .map(|(i, check)| {
            let at = format!("health_checks[{i}]");
            warnings.within(&at, |w| health_check::health_check(check, w)).at_field(&at)
        })
        .collect::<Result<Vec<_>>>()?;
    let circuit_breakers = match circuit_breakers {
        None => CircuitBreakers::default(),
        Some(cb) => warnings
            .within("circuit_breakers", |w| circuit_breakers::circuit_breakers(cb, w))
            .at_field("circuit_breakers")?,
    };
    let mut transport_socket = match transport_socket {
        None => UpstreamTransport::Plain,
        Some(socket) => warnings
            .within("transport_socket", |w| transport::transport_socket(socket, w))
            .at_field("transport_socket")?,
    };
    let mut transport_socket_matches = warnings
        .within("transport_socket_matches", |w| transport::transport_socket_matches(transport_socket_matches, w))
        .at_field("transport_socket_matches")?;
    transport::resolve_cluster_metadata(&mut transport_socket, metadata.as_ref())?;
    for m in &mut transport_socket_matches {
        transport::resolve_cluster_metadata(&mut m.transport, metadata.as_ref())?;
    }
    let protocol_fields = protocol::ProtocolFields {
        typed_extension_protocol_options,
        http_protocol_options,
        http2_protocol_options,
        common_http_protocol_options,
        upstream_http_protocol_options,
        protocol_selection,
        max_requests_per_connection,
    };
    let http = protocol::http_options(protocol_fields, warnings)?;
    let upstream_bind = match upstream_bind_config {
        None => None,
        Some(bind) => warnings
            .within("upstream_bind_config", |w| discovery::upstream_bind(bind, w))
            .at_field("upstream_bind_config")?,
    };
    Ok(Cluster {
        name,
        discovery,
        load_assignment,
        connect_timeout,
        load_balancing,
        dns,
        original_dst,
        outlier_detection,
        health_checks,
        circuit_breakers,
        transport_socket,
        transport_socket_matches,
        http,
        upstream_bind,
        per_endpoint_stats,
        metadata_exchange,
        istio_service_host,
        per_connection_buffer_limit_bytes: common::u32_or(
            &per_connection_buffer_limit_bytes,
            crate::config::listener::DEFAULT_BUFFER_LIMIT_BYTES,
        ),
    })
}

/// The host of the first service in Istio's cluster metadata
/// (`filter_metadata.istio.services[0].host`), which istiod sets on every cluster it
/// renders: `istio.stats` names the destination service by it on the server side.
fn istio_service_host(metadata: &crate::pb::envoy::config::core::v3::Metadata) -> Option<String> {
    use crate::pb::google::protobuf::value::Kind;
    let istio = metadata.filter_metadata.get("istio")?;
    let Some(Kind::ListValue(services)) = istio.fields.get("services")?.kind.as_ref() else { return None };
    let Some(Kind::StructValue(first)) = services.values.first()?.kind.as_ref() else { return None };
    match first.fields.get("host")?.kind.as_ref()? {
        Kind::StringValue(host) if !host.is_empty() => Some(host.clone()),
        _ => None,
    }
}
