//! Filter chains: their match, their downstream TLS, and their network filters.

use envoy_types::pb::xds::r#type::matcher::v3::Matcher as XdsMatcher;

use super::super::common::cidr;
use super::super::filter_kind::{self, CONNECTION_LIMIT, HTTP_CONNECTION_MANAGER, TCP_PROXY};
use super::super::{common, filters, tls};
use super::{chain_matcher, connection_limit, hcm, tcp_proxy};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::NetworkFilter;
use crate::config::listener::{
    ConnectionLimit, ConnectionSourceType, FilterChain, FilterChainMatch, FilterChainMatcher, SkippedFilter,
    TerminalFilter,
};
use crate::config::tls::DownstreamTlsContext;
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::config::listener::v3 as proto;
use crate::pb::envoy::extensions::filters::network::connection_limit::v3::ConnectionLimit as ProtoConnectionLimit;
use crate::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use crate::pb::envoy::extensions::filters::network::tcp_proxy::v3::TcpProxy;
use crate::pb::envoy::extensions::transport_sockets::tls::v3::DownstreamTlsContext as ProtoDownstreamTls;

const DOWNSTREAM_TLS: &str = "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext";
const RAW_BUFFER: &str = "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer";

type Chains = (Vec<FilterChain>, Option<Box<FilterChain>>, Option<FilterChainMatcher>);

pub fn filter_chains(
    chains: Vec<proto::FilterChain>,
    default: Option<proto::FilterChain>,
    matcher: Option<XdsMatcher>,
    warnings: &mut Warnings,
) -> Result<Chains> {
    let chains = chains
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let at = format!("filter_chains[{i}]");
            warnings.within(&at, |w| filter_chain(c, w)).map_err(|e| e.at(&at))
        })
        .collect::<Result<Vec<_>>>()?;
    let default = default
        .map(|c| {
            warnings
                .within("default_filter_chain", |w| filter_chain(c, w))
                .map(Box::new)
                .map_err(|e| e.at("default_filter_chain"))
        })
        .transpose()?;
    if chains.is_empty() && default.is_none() {
        return Err(ConfigError::new("filter_chains", "at least one filter chain is required"));
    }
    let matcher = matcher
        .map(|m| chain_matcher::filter_chain_matcher(m).map_err(|e| e.at("filter_chain_matcher")))
        .transpose()?;
    match &matcher {
        // With a matcher, chains are chosen by name, which must then be unique.
        Some(m) => {
            for (i, chain) in chains.iter().enumerate() {
                if chains[..i].iter().any(|c| c.name == chain.name) {
                    return Err(ConfigError::new(
                        format!("filter_chains[{i}].name"),
                        format!("duplicate name {:?}", chain.name),
                    ));
                }
            }
            for name in m.root.chain_names() {
                if !chains.iter().any(|c| c.name == name) {
                    warnings.ignored(
                        "filter_chain_matcher",
                        format!(
                            "refers to no filter chain named {name:?}; connections it selects get the default chain"
                        ),
                    );
                }
            }
        }
        // Without one, Envoy refuses two chains with the same match.
        None => {
            for (i, chain) in chains.iter().enumerate() {
                if chains[..i].iter().any(|c| c.filter_chain_match == chain.filter_chain_match) {
                    return Err(ConfigError::new(
                        format!("filter_chains[{i}].filter_chain_match"),
                        "another filter chain has the same match",
                    ));
                }
            }
        }
    }
    Ok((chains, default, matcher))
}

#[allow(deprecated)]
fn filter_chain(proto: proto::FilterChain, warnings: &mut Warnings) -> Result<FilterChain> {
    let proto::FilterChain {
        filter_chain_match,
        filters,
        use_proxy_proto,
        metadata,
        transport_socket,
        transport_socket_connect_timeout,
        name,
    } = proto;
    if use_proxy_proto.is_some_and(|v| v.value) {
        return Err(ConfigError::new("use_proxy_proto", "the PROXY protocol is not supported"));
    }
    if metadata.is_some() {
        warnings.ignored("metadata", "filter chain metadata is not used");
    }
    let filter_chain_match = match filter_chain_match {
        None => FilterChainMatch::default(),
        Some(m) => chain_match(m).map_err(|e| e.at("filter_chain_match"))?,
    };
    let tls = match transport_socket {
        None => None,
        Some(socket) => {
            warnings.within("transport_socket", |w| downstream_tls(socket, w)).map_err(|e| e.at("transport_socket"))?
        }
    };
    let transport_socket_connect_timeout =
        common::opt_duration(&transport_socket_connect_timeout, "transport_socket_connect_timeout")?
            .filter(|d| !d.is_zero());
    let NetworkFilters { terminal, run, skipped: skipped_filters, connection_limits } =
        network_filters(filters, warnings)?;
    Ok(FilterChain {
        name,
        filter_chain_match,
        tls,
        transport_socket_connect_timeout,
        terminal,
        network_filters: run.into(),
        skipped_filters,
        connection_limits,
    })
}

fn chain_match(proto: proto::FilterChainMatch) -> Result<FilterChainMatch> {
    use proto::filter_chain_match::ConnectionSourceType as S;
    let proto::FilterChainMatch {
        destination_port,
        prefix_ranges,
        address_suffix,
        suffix_len,
        direct_source_prefix_ranges,
        source_type,
        source_prefix_ranges,
        source_ports,
        server_names,
        transport_protocol,
        application_protocols,
    } = proto;
    if !address_suffix.is_empty() || suffix_len.is_some() {
        return Err(ConfigError::new("address_suffix", "address suffix matching is not supported"));
    }
    let port = |p: u32, field: String| match u16::try_from(p) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(ConfigError::new(field, format!("{p} is not a port"))),
    };
    let ranges = |list: Vec<core::CidrRange>, field: &str| {
        let mut out = list
            .iter()
            .enumerate()
            .map(|(i, r)| {
                cidr(&r.address_prefix, r.prefix_len.map(|l| l.value)).map_err(|e| e.at(format!("{field}[{i}]")))
            })
            .collect::<Result<Vec<_>>>()?;
        out.sort();
        out.dedup();
        Ok::<_, ConfigError>(out)
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v.dedup();
        v
    };
    let mut source_ports = source_ports
        .into_iter()
        .enumerate()
        .map(|(i, p)| port(p, format!("source_ports[{i}]")))
        .collect::<Result<Vec<_>>>()?;
    source_ports.sort_unstable();
    source_ports.dedup();
    Ok(FilterChainMatch {
        destination_port: destination_port.map(|p| port(p.value, "destination_port".into())).transpose()?,
        prefix_ranges: ranges(prefix_ranges, "prefix_ranges")?,
        direct_source_prefix_ranges: ranges(direct_source_prefix_ranges, "direct_source_prefix_ranges")?,
        source_type: match S::try_from(source_type) {
            Ok(S::Any) => ConnectionSourceType::Any,
            Ok(S::SameIpOrLoopback) => ConnectionSourceType::SameIpOrLoopback,
            Ok(S::External) => ConnectionSourceType::External,
            Err(_) => return Err(ConfigError::new("source_type", format!("unknown value {source_type}"))),
        },
        source_prefix_ranges: ranges(source_prefix_ranges, "source_prefix_ranges")?,
        source_ports,
        server_names: sorted(server_names.into_iter().map(|s| s.to_ascii_lowercase()).collect()),
        transport_protocol: (!transport_protocol.is_empty()).then_some(transport_protocol),
        application_protocols: sorted(application_protocols),
    })
}

/// A filter chain's `transport_socket`: downstream TLS, or plaintext (`raw_buffer`).
fn downstream_tls(proto: core::TransportSocket, warnings: &mut Warnings) -> Result<Option<DownstreamTlsContext>> {
    let core::TransportSocket { name, config_type } = proto;
    let any = match config_type {
        Some(core::transport_socket::ConfigType::TypedConfig(any)) => any,
        None if name == "envoy.transport_sockets.raw_buffer" || name == "raw_buffer" => return Ok(None),
        None => return Err(ConfigError::new("typed_config", format!("transport socket {name:?} has no config"))),
    };
    match common::type_name(&any.type_url) {
        DOWNSTREAM_TLS => {
            let proto = common::unpack::<ProtoDownstreamTls>(&any).map_err(|e| e.at("typed_config"))?;
            let tls = warnings
                .within("typed_config", |w| tls::downstream_tls_context(proto, w))
                .map_err(|e| e.at("typed_config"))?;
            Ok(Some(tls))
        }
        RAW_BUFFER => Ok(None),
        other => Err(ConfigError::new("typed_config", format!("transport socket {other} is not supported"))),
    }
}

/// A filter chain's network filters, sorted by what Outrider does with them.
struct NetworkFilters {
    terminal: TerminalFilter,
    run: Vec<NetworkFilter>,
    skipped: Vec<SkippedFilter>,
    connection_limits: Vec<ConnectionLimit>,
}

/// The network filters: connection limits and the filters of [`filters::network_filter`]
/// are run; one that only observes is skipped with a warning; any other is refused. The
/// last must be the HTTP connection manager or TCP proxy.
fn network_filters(filters: Vec<proto::Filter>, warnings: &mut Warnings) -> Result<NetworkFilters> {
    use proto::filter::ConfigType;
    let count = filters.len();
    let mut skipped = Vec::new();
    let mut run = Vec::new();
    let mut connection_limits = Vec::new();
    for (i, filter) in filters.into_iter().enumerate() {
        let at = format!("filters[{i}]");
        let proto::Filter { name, config_type } = filter;
        let any = match config_type {
            Some(ConfigType::TypedConfig(any)) => Some(any),
            Some(ConfigType::ConfigDiscovery(_)) => {
                return Err(ConfigError::new(
                    format!("{at}.config_discovery"),
                    "extension config discovery is not supported",
                ));
            }
            None => None,
        };
        let type_name = any.as_ref().map(filter_kind::config_type).unwrap_or_default();
        let terminal = match (type_name.as_str(), any) {
            (HTTP_CONNECTION_MANAGER, Some(any)) => {
                let proto =
                    common::unpack::<HttpConnectionManager>(&any).map_err(|e| e.at(format!("{at}.typed_config")))?;
                let at = format!("{at}.typed_config");
                Some(TerminalFilter::HttpConnectionManager(std::sync::Arc::new(
                    warnings.within(&at, |w| hcm::http_connection_manager(proto, w)).map_err(|e| e.at(&at))?,
                )))
            }
            (CONNECTION_LIMIT, Some(any)) => {
                let proto =
                    common::unpack::<ProtoConnectionLimit>(&any).map_err(|e| e.at(format!("{at}.typed_config")))?;
                let at = format!("{at}.typed_config");
                let limit =
                    warnings.within(&at, |w| connection_limit::connection_limit(proto, w)).map_err(|e| e.at(&at))?;
                connection_limits.extend(limit);
                None
            }
            (TCP_PROXY, Some(any)) => {
                let proto = common::unpack::<TcpProxy>(&any).map_err(|e| e.at(format!("{at}.typed_config")))?;
                let at = format!("{at}.typed_config");
                Some(TerminalFilter::TcpProxy(
                    warnings.within(&at, |w| tcp_proxy::tcp_proxy(proto, w)).map_err(|e| e.at(&at))?,
                ))
            }
            (_, Some(any)) => {
                let at = format!("{at}.typed_config");
                match warnings.within(&at, |w| filters::network_filter(&any, w)).map_err(|e| e.at(&at))? {
                    Some(config) => run.push(NetworkFilter { name: name.clone(), config }),
                    None => skipped.push(filter_kind::skip(&name, Some(&any), false, &at, warnings)?),
                }
                None
            }
            (_, None) => {
                skipped.push(filter_kind::skip(&name, None, false, &at, warnings)?);
                None
            }
        };
        match terminal {
            Some(terminal) if i + 1 == count => {
                return Ok(NetworkFilters { terminal, run, skipped, connection_limits });
            }
            Some(_) => return Err(ConfigError::new(at, format!("{name:?} is terminal and must be the last filter"))),
            None => {}
        }
    }
    Err(ConfigError::new("filters", "the last filter must be an HTTP connection manager or a TCP proxy"))
}
