//! `envoy.config.listener.v3.Listener` → [`Listener`]: address, listener filters, filter
//! chains and their matches, downstream TLS, and the terminal network filter.

pub(super) mod access_log;
mod access_log_filter;
mod access_log_grpc;
mod access_log_otel;
mod chain_matcher;
mod connection_limit;
mod filter_chain;
mod hcm;
mod hcm_tracing;
mod protocol_options;
mod tcp_proxy;
#[cfg(test)]
mod tests;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

pub(super) use hcm_tracing::opentelemetry as opentelemetry_tracer;

use super::common;
use crate::config::address::Address;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::listener::{
    DEFAULT_BUFFER_LIMIT_BYTES, DEFAULT_LISTENER_FILTERS_TIMEOUT, DrainType, Listener, ListenerFilter,
    ListenerFilterKind, ListenerFilterPredicate, ProxyProtocolConfig, TrafficDirection,
};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::config::listener::v3 as proto;
use crate::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use protocol_options::ignore_all;

const TLS_INSPECTOR: &str = "envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector";
const HTTP_INSPECTOR: &str = "envoy.extensions.filters.listener.http_inspector.v3.HttpInspector";
const ORIGINAL_DST: &str = "envoy.extensions.filters.listener.original_dst.v3.OriginalDst";
const PROXY_PROTOCOL: &str = "envoy.extensions.filters.listener.proxy_protocol.v3.ProxyProtocol";

#[allow(deprecated)]
pub fn listener(proto: proto::Listener, warnings: &mut Warnings) -> Result<Listener> {
    let proto::Listener {
        name,
        address,
        additional_addresses,
        stat_prefix,
        stats_matcher,
        filter_chains,
        fcds_config,
        filter_chain_matcher,
        use_original_dst,
        default_filter_chain,
        per_connection_buffer_limit_bytes,
        per_connection_buffer_high_watermark_timeout,
        metadata,
        deprecated_v1,
        drain_type,
        listener_filters,
        listener_filters_timeout,
        continue_on_listener_filters_timeout,
        transparent,
        freebind,
        socket_options,
        tcp_fast_open_queue_length,
        traffic_direction,
        udp_listener_config,
        api_listener,
        connection_balance_config,
        reuse_port: _,
        enable_reuse_port,
        access_log,
        tcp_backlog_size,
        max_connections_to_accept_per_socket_event,
        bind_to_port,
        enable_mptcp,
        ignore_global_conn_limit,
        bypass_overload_manager,
        tcp_keepalive,
        listener_specifier,
    } = proto;
    let refuse = |field: &str, what: &str| Err(ConfigError::new(field, format!("{what} is not supported")));
    if fcds_config.is_some() {
        return refuse("fcds_config", "filter chain discovery (FCDS)");
    }
    if deprecated_v1.is_some() {
        return refuse("deprecated_v1", "the v1 listener options");
    }
    if udp_listener_config.is_some() {
        return refuse("udp_listener_config", "UDP listeners");
    }
    if api_listener.is_some() {
        return refuse("api_listener", "API listeners");
    }
    if enable_mptcp {
        return refuse("enable_mptcp", "MPTCP");
    }
    ignore_all(
        warnings,
        &[
            (!stat_prefix.is_empty(), "stat_prefix", "statistics are named by listener name"),
            (stats_matcher.is_some(), "stats_matcher", "statistics are not filtered"),
            (
                per_connection_buffer_high_watermark_timeout.is_some(),
                "per_connection_buffer_high_watermark_timeout",
                "connections are not closed on buffer pressure",
            ),
            (metadata.is_some(), "metadata", "listener metadata is not used"),
            (!socket_options.is_empty(), "socket_options", "raw socket options are not applied"),
            (tcp_fast_open_queue_length.is_some(), "tcp_fast_open_queue_length", "TCP Fast Open is not enabled"),
            (
                connection_balance_config.is_some(),
                "connection_balance_config",
                "each worker accepts on its own SO_REUSEPORT socket",
            ),
            (
                enable_reuse_port.is_some_and(|v| !v.value),
                "enable_reuse_port",
                "each worker accepts on its own SO_REUSEPORT socket",
            ),
            (!access_log.is_empty(), "access_log", "access logs are written by Outrider's own telemetry"),
            (
                max_connections_to_accept_per_socket_event.is_some(),
                "max_connections_to_accept_per_socket_event",
                "accepting is paced by the runtime",
            ),
            (tcp_keepalive.is_some(), "tcp_keepalive", "the system's keep-alive settings apply"),
        ],
    );
    let internal = matches!(listener_specifier, Some(proto::listener::ListenerSpecifier::InternalListener(_)));
    let address = match (address, internal) {
        (Some(_), true) => return Err(ConfigError::new("address", "must not be set on an internal listener")),
        (None, true) => Address::Socket(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)),
        (Some(a), false) => listener_address(&a).map_err(|e| e.at("address"))?,
        (None, false) => return Err(ConfigError::new("address", "is required")),
    };
    let additional_addresses = additional_addresses
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            let at = format!("additional_addresses[{i}]");
            let proto::AdditionalAddress { address, socket_options, tcp_keepalive } = a;
            if socket_options.is_some() || tcp_keepalive.is_some() {
                warnings.ignored(at.clone(), "per-address socket options are not applied");
            }
            let address = address.ok_or_else(|| ConfigError::new(format!("{at}.address"), "is required"))?;
            listener_address(&address).map_err(|e| e.at(format!("{at}.address")))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut filters: Vec<ListenerFilter> = Vec::new();
    for (i, filter) in listener_filters.into_iter().enumerate() {
        let at = format!("listener_filters[{i}]");
        let filter = listener_filter(filter, &at, warnings).map_err(|e| e.at(&at))?;
        // The header is the connection's first bytes: an inspector before it would read
        // it as TLS or HTTP (Envoy runs them in order and fails those connections).
        let inspected = filters
            .iter()
            .any(|f| matches!(f.kind, ListenerFilterKind::TlsInspector | ListenerFilterKind::HttpInspector));
        if matches!(filter.kind, ListenerFilterKind::ProxyProtocol(_)) && inspected {
            return Err(ConfigError::new(at, "the PROXY protocol filter must come before the TLS and HTTP inspectors"));
        }
        filters.push(filter);
    }
    let (filter_chains, default_filter_chain, filter_chain_matcher) =
        filter_chain::filter_chains(filter_chains, default_filter_chain, filter_chain_matcher, warnings)?;
    let listener_filters_timeout = match common::opt_duration(&listener_filters_timeout, "listener_filters_timeout")? {
        None => Some(DEFAULT_LISTENER_FILTERS_TIMEOUT),
        Some(Duration::ZERO) => None,
        some => some,
    };
    Ok(Listener {
        name,
        address,
        additional_addresses,
        internal,
        bind_to_port: !internal && common::bool_or(&bind_to_port, true),
        use_original_dst: common::bool_or(&use_original_dst, false),
        listener_filters: filters,
        listener_filters_timeout,
        continue_on_listener_filters_timeout,
        filter_chains,
        default_filter_chain,
        filter_chain_matcher,
        per_connection_buffer_limit_bytes: common::u32_or(
            &per_connection_buffer_limit_bytes,
            DEFAULT_BUFFER_LIMIT_BYTES,
        ),
        traffic_direction: match core::TrafficDirection::try_from(traffic_direction) {
            Ok(core::TrafficDirection::Unspecified) => TrafficDirection::Unspecified,
            Ok(core::TrafficDirection::Inbound) => TrafficDirection::Inbound,
            Ok(core::TrafficDirection::Outbound) => TrafficDirection::Outbound,
            Err(_) => return Err(ConfigError::new("traffic_direction", format!("unknown value {traffic_direction}"))),
        },
        drain_type: match proto::listener::DrainType::try_from(drain_type) {
            Ok(proto::listener::DrainType::Default) => DrainType::Default,
            Ok(proto::listener::DrainType::ModifyOnly) => DrainType::ModifyOnly,
            Err(_) => return Err(ConfigError::new("drain_type", format!("unknown value {drain_type}"))),
        },
        transparent: common::bool_or(&transparent, false),
        freebind: common::bool_or(&freebind, false),
        tcp_backlog_size: tcp_backlog_size.map(|v| v.value),
        ignore_global_conn_limit,
        bypass_overload_manager,
    })
}

/// An address a listener binds. Refused where Outrider would not serve it as Envoy does:
/// a Unix socket (`pipe`; Outrider binds TCP sockets only, and a listener accepted but
/// never bound would serve nothing without saying so), and `ipv4_compat` (Envoy accepts
/// IPv4 on such an IPv6 socket and sees its peers as IPv4; Outrider's IPv6 sockets are
/// IPv6-only, and Istio binds IPv4 through `additional_addresses` instead).
fn listener_address(proto: &core::Address) -> Result<Address> {
    use core::address::Address as A;
    match &proto.address {
        Some(A::Pipe(_)) => Err(ConfigError::new("pipe", "Unix socket (pipe) listeners are not supported")),
        Some(A::EnvoyInternalAddress(_)) => Err(ConfigError::new(
            "envoy_internal_address",
            "a listener is made internal by internal_listener, with no address",
        )),
        Some(A::SocketAddress(socket)) if socket.ipv4_compat => {
            Err(ConfigError::new("socket_address.ipv4_compat", "IPv4 on an IPv6 listener socket is not supported"))
        }
        _ => common::address(proto, false),
    }
}

/// A listener filter Outrider implements, `None` for one it skips (with a warning at `at`).
fn listener_filter(proto: proto::ListenerFilter, at: &str, warnings: &mut Warnings) -> Result<ListenerFilter> {
    use proto::listener_filter::ConfigType;
    let proto::ListenerFilter { name, filter_disabled, config_type } = proto;
    let any = match &config_type {
        Some(ConfigType::TypedConfig(any)) => Some(any),
        Some(ConfigType::ConfigDiscovery(_)) => {
            return Err(ConfigError::new("config_discovery", "extension config discovery is not supported"));
        }
        None => None,
    };
    let type_name = any.map(super::filter_kind::config_type).unwrap_or_default();
    let is = |type_url: &str, filter_name: &str| type_name == type_url || (any.is_none() && name == filter_name);
    let kind = if is(TLS_INSPECTOR, "envoy.filters.listener.tls_inspector") {
        if let Some(any) = any {
            let at = format!("{at}.typed_config");
            warnings.within(&at, |w| tls_inspector(any, w)).map_err(|e| e.at("typed_config"))?;
        }
        ListenerFilterKind::TlsInspector
    } else if is(HTTP_INSPECTOR, "envoy.filters.listener.http_inspector") {
        ListenerFilterKind::HttpInspector
    } else if is(ORIGINAL_DST, "envoy.filters.listener.original_dst") {
        ListenerFilterKind::OriginalDst
    } else if is(PROXY_PROTOCOL, "envoy.filters.listener.proxy_protocol") {
        let config = match any {
            Some(any) => proxy_protocol(any, warnings).map_err(|e| e.at("typed_config"))?,
            None => ProxyProtocolConfig::default(),
        };
        ListenerFilterKind::ProxyProtocol(config)
    } else {
        // A listener filter decides what a connection gets before any chain sees it (its
        // destination, its limits, who may connect): one not run would fail open.
        let shown = if type_name.is_empty() { "no known config".to_owned() } else { type_name };
        return Err(ConfigError::new("", format!("listener filter {name:?} ({shown}) is not supported")));
    };
    let disabled_when = filter_disabled.map(|p| predicate(p).map_err(|e| e.at("filter_disabled"))).transpose()?;
    Ok(ListenerFilter { kind, disabled_when })
}

/// `envoy.extensions.filters.listener.proxy_protocol.v3.ProxyProtocol`. TLVs are neither
/// turned into metadata (`rules`) nor passed on (`pass_through_tlvs`): refused rather than
/// dropped, since a policy may match on them.
fn proxy_protocol(any: &crate::pb::google::protobuf::Any, warnings: &mut Warnings) -> Result<ProxyProtocolConfig> {
    use crate::pb::envoy::extensions::filters::listener::proxy_protocol::v3::ProxyProtocol;
    let ProxyProtocol {
        rules,
        allow_requests_without_proxy_protocol,
        pass_through_tlvs,
        disallowed_versions,
        stat_prefix,
        tlv_location: _, // where TLVs would go; none are kept
    } = common::unpack::<ProxyProtocol>(any)?;
    if !rules.is_empty() {
        return Err(ConfigError::new("rules", "PROXY protocol TLVs as dynamic metadata are not supported"));
    }
    if pass_through_tlvs.is_some() {
        return Err(ConfigError::new("pass_through_tlvs", "passing PROXY protocol TLVs on is not supported"));
    }
    if !stat_prefix.is_empty() {
        warnings.ignored("stat_prefix", "the PROXY protocol filter keeps no statistics of its own");
    }
    let mut config =
        ProxyProtocolConfig { allow_without_header: allow_requests_without_proxy_protocol, ..Default::default() };
    for (i, version) in disallowed_versions.iter().enumerate() {
        match version {
            0 => config.v1_disallowed = true,
            1 => config.v2_disallowed = true,
            other => {
                return Err(ConfigError::new(format!("disallowed_versions[{i}]"), format!("unknown version {other}")));
            }
        }
    }
    Ok(config)
}

fn tls_inspector(any: &crate::pb::google::protobuf::Any, warnings: &mut Warnings) -> Result<()> {
    let TlsInspector {
        enable_ja3_fingerprinting,
        enable_ja4_fingerprinting,
        initial_read_buffer_size,
        close_connection_on_client_hello_parsing_errors,
        max_client_hello_size,
    } = common::unpack::<TlsInspector>(any)?;
    // Outrider's inspector matches a ClientHello that does not parse as plain text (Envoy's
    // default); closing such connections instead is not done, so asking for it is refused
    // rather than letting them reach a plaintext chain.
    if close_connection_on_client_hello_parsing_errors {
        return Err(ConfigError::new(
            "close_connection_on_client_hello_parsing_errors",
            "closing connections on a ClientHello that does not parse is not supported",
        ));
    }
    ignore_all(
        warnings,
        &[
            (
                enable_ja3_fingerprinting.is_some_and(|v| v.value),
                "enable_ja3_fingerprinting",
                "no fingerprints are computed",
            ),
            (
                enable_ja4_fingerprinting.is_some_and(|v| v.value),
                "enable_ja4_fingerprinting",
                "no fingerprints are computed",
            ),
            (initial_read_buffer_size.is_some(), "initial_read_buffer_size", "the inspector sizes its own buffer"),
            (max_client_hello_size.is_some(), "max_client_hello_size", "the inspector's own ClientHello limit applies"),
        ],
    );
    Ok(())
}

fn predicate(proto: proto::ListenerFilterChainMatchPredicate) -> Result<ListenerFilterPredicate> {
    use proto::listener_filter_chain_match_predicate::{MatchSet, Rule};
    let set = |s: MatchSet, field: &str| {
        s.rules
            .into_iter()
            .enumerate()
            .map(|(i, r)| predicate(r).map_err(|e| e.at(format!("{field}.rules[{i}]"))))
            .collect::<Result<Vec<_>>>()
    };
    Ok(match proto.rule {
        Some(Rule::OrMatch(s)) => ListenerFilterPredicate::Or(set(s, "or_match")?),
        Some(Rule::AndMatch(s)) => ListenerFilterPredicate::And(set(s, "and_match")?),
        Some(Rule::NotMatch(p)) => {
            ListenerFilterPredicate::Not(Box::new(predicate(*p).map_err(|e| e.at("not_match"))?))
        }
        Some(Rule::AnyMatch(true)) => ListenerFilterPredicate::Any,
        Some(Rule::AnyMatch(false)) => return Err(ConfigError::new("any_match", "must be true")),
        Some(Rule::DestinationPortRange(r)) => match (u32::try_from(r.start), u32::try_from(r.end)) {
            (Ok(start), Ok(end)) if start <= end && end <= 65_536 => {
                ListenerFilterPredicate::DestinationPortRange { start, end }
            }
            _ => {
                return Err(ConfigError::new(
                    "destination_port_range",
                    format!("[{}, {}) is not a port range", r.start, r.end),
                ));
            }
        },
        None => return Err(ConfigError::new("rule", "is required")),
    })
}
