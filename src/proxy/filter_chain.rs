//! Choosing a listener's filter chain for a connection, in Envoy's order of criteria:
//! destination port, destination IP (longest prefix), server name, transport protocol,
//! application protocols, direct source IP (longest prefix), source type, source IP
//! (longest prefix), source port. At each
//! step the chains that match most specifically survive; a chain that does not constrain a
//! criterion matches any value but loses to one that names it.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::proxy::stream_info::StreamState;

use crate::config::listener::chain_matcher::NetworkInput;
use crate::config::listener::{
    CidrRange, ConnectionSourceType, DrainType, FilterChain, FilterChainMatch, Listener, TrafficDirection,
};

/// What is known about a connection when its chain is chosen.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    /// The local address, or the original destination once restored (listener filter
    /// `original_dst`, or `use_original_dst`), as Envoy's chain matching sees it.
    pub local: SocketAddr,
    /// Whether `local` is a restored original destination (Envoy's
    /// `localAddressRestored()`): only then does an ORIGINAL_DST cluster connect to it.
    pub local_restored: bool,
    pub peer: SocketAddr,
    /// SNI, when a TLS inspector saw a ClientHello.
    pub server_name: Option<String>,
    /// `tls` or `raw_buffer` when inspected.
    pub transport_protocol: Option<String>,
    pub application_protocols: Vec<String>,
    /// The serving listener's `traffic_direction` is INBOUND: `/drain_listeners?inboundonly`
    /// drains this connection.
    pub inbound: bool,
    /// The serving listener's `traffic_direction` is OUTBOUND (Envoy's egress operation:
    /// its spans are client spans).
    pub outbound: bool,
    /// The overload manager's actions apply (the listener does not bypass it).
    pub overloadable: bool,
    /// The serving listener's `drain_type` is DEFAULT: while the server fails health checks
    /// (`/healthcheck/fail`) its connections drain, as Envoy drains them. MODIFY_ONLY
    /// listeners drain only when changed or removed, or when the whole server drains.
    pub drains_on_health_check_failure: bool,
    /// The serving listener's `per_connection_buffer_limit_bytes` (see
    /// [`super::flow_control`]).
    pub buffer_limit: u32,
    /// The filter state and metadata an internal connection arrived with (see
    /// `stream_info`); `None` for a socket's.
    pub stream: Option<Arc<StreamState>>,
    /// Triggered when an LDS update changes or removes the connection's filter chain (see
    /// `chain_drain`); `None` until the chain is chosen.
    pub chain_drain: Option<crate::core::shutdown::Signal>,
}

impl ConnectionInfo {
    /// A connection `listener` accepted, before its listener filters ran.
    pub fn new(listener: &Listener, local: SocketAddr, local_restored: bool, peer: SocketAddr) -> Self {
        Self {
            local,
            local_restored,
            peer,
            server_name: None,
            transport_protocol: None,
            application_protocols: Vec::new(),
            inbound: listener.traffic_direction == TrafficDirection::Inbound,
            outbound: listener.traffic_direction == TrafficDirection::Outbound,
            overloadable: !listener.bypass_overload_manager,
            drains_on_health_check_failure: listener.drain_type == DrainType::Default,
            buffer_limit: listener.per_connection_buffer_limit_bytes,
            stream: None,
            chain_drain: None,
        }
    }
}

/// The chain for `connection`, or `None` when nothing matches (Envoy closes the connection).
pub fn select<'a>(listener: &'a Listener, connection: &ConnectionInfo) -> Option<&'a FilterChain> {
    if let Some(matcher) = &listener.filter_chain_matcher {
        let name = matcher.select(&|input| network_input(input, connection));
        return name
            .and_then(|name| listener.filter_chains.iter().find(|c| c.name == name))
            .or(listener.default_filter_chain.as_deref());
    }
    let mut candidates: Vec<&FilterChain> = listener.filter_chains.iter().collect();
    let port = connection.local.port();
    narrow(&mut candidates, |m| match m.destination_port {
        None => Some(0),
        Some(p) if p == port => Some(1),
        Some(_) => None,
    });
    narrow(&mut candidates, |m| prefix_score(&m.prefix_ranges, connection.local));
    narrow(&mut candidates, |m| server_name_score(&m.server_names, connection.server_name.as_deref()));
    narrow(&mut candidates, |m| match (&m.transport_protocol, &connection.transport_protocol) {
        (None, _) => Some(0),
        (Some(want), Some(have)) if want == have => Some(1),
        (Some(want), None) if want == "raw_buffer" => Some(1),
        _ => None,
    });
    narrow(&mut candidates, |m| {
        if m.application_protocols.is_empty() {
            Some(0)
        } else if m.application_protocols.iter().any(|p| connection.application_protocols.contains(p)) {
            Some(1)
        } else {
            None
        }
    });
    // The direct source is the peer of the socket itself. Outrider has no listener filter
    // that rewrites the source (no PROXY protocol), so it is the same address the source IP
    // step looks at; the step still comes here, before source type, as in Envoy, so a chain
    // naming the direct source beats one naming only the source type.
    narrow(&mut candidates, |m| prefix_score(&m.direct_source_prefix_ranges, connection.peer));
    narrow(&mut candidates, |m| {
        let local = connection.peer.ip().is_loopback() || connection.peer.ip() == connection.local.ip();
        match m.source_type {
            ConnectionSourceType::Any => Some(0),
            ConnectionSourceType::SameIpOrLoopback if local => Some(1),
            ConnectionSourceType::External if !local => Some(1),
            _ => None,
        }
    });
    narrow(&mut candidates, |m| prefix_score(&m.source_prefix_ranges, connection.peer));
    narrow(&mut candidates, |m| match m.source_ports.as_slice() {
        [] => Some(0),
        ports if ports.contains(&connection.peer.port()) => Some(1),
        _ => None,
    });
    candidates.first().copied().or(listener.default_filter_chain.as_deref())
}

/// Keeps the candidates with the best score; `None` means the chain does not match.
fn narrow(candidates: &mut Vec<&FilterChain>, score: impl Fn(&FilterChainMatch) -> Option<u32>) {
    let best = candidates.iter().filter_map(|c| score(&c.filter_chain_match)).max();
    match best {
        Some(best) => candidates.retain(|c| score(&c.filter_chain_match) == Some(best)),
        None => candidates.clear(),
    }
}

/// 0 for no ranges (matches anything), 1 + prefix length for the longest matching range.
fn prefix_score(ranges: &[CidrRange], address: SocketAddr) -> Option<u32> {
    if ranges.is_empty() {
        return Some(0);
    }
    ranges.iter().filter(|r| r.contains(address.ip())).map(|r| 1 + u32::from(r.prefix_len)).max()
}

/// Exact names beat wildcards (`*.example.com`), longer wildcards beat shorter ones.
fn server_name_score(names: &[String], sni: Option<&str>) -> Option<u32> {
    if names.is_empty() {
        return Some(0);
    }
    let sni = sni?;
    names
        .iter()
        .filter_map(|name| match name.strip_prefix('*') {
            None if name.eq_ignore_ascii_case(sni) => Some(u32::MAX),
            Some(suffix)
                if sni.len() > suffix.len() && sni.to_ascii_lowercase().ends_with(&suffix.to_ascii_lowercase()) =>
            {
                Some(suffix.len() as u32)
            }
            _ => None,
        })
        .max()
}

fn network_input(input: NetworkInput, connection: &ConnectionInfo) -> Option<String> {
    match input {
        NetworkInput::DestinationIp => Some(connection.local.ip().to_string()),
        NetworkInput::DestinationPort => Some(connection.local.port().to_string()),
        NetworkInput::SourceIp | NetworkInput::DirectSourceIp => Some(connection.peer.ip().to_string()),
        NetworkInput::SourcePort => Some(connection.peer.port().to_string()),
        NetworkInput::SourceType => {
            let local = connection.peer.ip().is_loopback() || connection.peer.ip() == connection.local.ip();
            local.then(|| "local".to_owned())
        }
        NetworkInput::ServerName => connection.server_name.clone(),
        NetworkInput::TransportProtocol => connection.transport_protocol.clone(),
        NetworkInput::ApplicationProtocol => {
            Some(connection.application_protocols.iter().map(|p| format!("'{p}'")).collect::<Vec<_>>().join(","))
        }
    }
}
