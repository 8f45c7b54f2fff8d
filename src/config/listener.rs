//! Listeners: where Outrider accepts connections, how it picks a filter chain for each
//! connection, and what that chain does with it (HTTP connection manager or TCP proxy).

pub mod chain_matcher;
pub mod connection_limit;
pub mod http_connection_manager;
pub mod tcp_proxy;

use std::time::Duration;

use super::address::Address;
use super::tls::{DownstreamTlsContext, SdsSecretConfig};
pub use chain_matcher::FilterChainMatcher;
pub use connection_limit::ConnectionLimit;
pub use http_connection_manager::{HttpConnectionManager, RouteSource};
pub use tcp_proxy::TcpProxy;

/// Filter chains match source and destination prefixes, as RBAC does.
pub use super::address::CidrRange;

/// Envoy's default `per_connection_buffer_limit_bytes` (1 MiB).
pub const DEFAULT_BUFFER_LIMIT_BYTES: u32 = 1024 * 1024;
/// Envoy's default `listener_filters_timeout`.
pub const DEFAULT_LISTENER_FILTERS_TIMEOUT: Duration = Duration::from_secs(15);

/// `envoy.config.listener.v3.Listener`.
#[derive(Debug, Clone, PartialEq)]
pub struct Listener {
    pub name: String,
    /// Where to bind. An internal listener (`internal_listener`) has no address; it gets
    /// the unspecified `0.0.0.0:0` here, with `internal` set and `bind_to_port` false,
    /// so that nothing binds it or hands connections to it by address.
    pub address: Address,
    pub additional_addresses: Vec<Address>,
    /// `internal_listener`: reachable only from inside the proxy, never bound.
    pub internal: bool,
    /// Default true. A listener that does not bind only receives connections handed
    /// over by a `use_original_dst` listener whose original destination matches it.
    pub bind_to_port: bool,
    /// `use_original_dst`: restore each connection's original destination (the
    /// `SO_ORIGINAL_DST` of an iptables-redirected connection) and hand the connection to
    /// the listener bound to it, if there is one (Istio's `virtualOutbound` on 15001). The
    /// `envoy.filters.listener.original_dst` listener filter alone only restores the
    /// address, for filter chain matching (Istio's `virtualInbound` on 15006); see
    /// [`Listener::restores_original_dst`].
    pub use_original_dst: bool,
    pub listener_filters: Vec<ListenerFilter>,
    /// `None`: listener filters may wait forever for bytes (configured 0).
    pub listener_filters_timeout: Option<Duration>,
    /// On timeout, continue with what the filters found instead of closing.
    pub continue_on_listener_filters_timeout: bool,
    pub filter_chains: Vec<FilterChain>,
    /// Chosen when no chain's match fits (or the matcher selects none).
    pub default_filter_chain: Option<Box<FilterChain>>,
    /// `filter_chain_matcher`: when set, it alone selects the chain by name, and the
    /// chains' `filter_chain_match` are ignored (as in Envoy).
    pub filter_chain_matcher: Option<FilterChainMatcher>,
    pub per_connection_buffer_limit_bytes: u32,
    pub traffic_direction: TrafficDirection,
    pub drain_type: DrainType,
    /// `IP_TRANSPARENT` on the socket (TPROXY interception).
    pub transparent: bool,
    /// `IP_FREEBIND` on the socket.
    pub freebind: bool,
    pub tcp_backlog_size: Option<u32>,
    /// Connections are let in past the overload manager's global connection limit (but
    /// still counted towards it).
    pub ignore_global_conn_limit: bool,
    /// The overload manager's actions and load-shed points do not apply to this listener.
    pub bypass_overload_manager: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrafficDirection {
    #[default]
    Unspecified,
    Inbound,
    Outbound,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DrainType {
    /// Drain on hot restart and on listener modification/removal.
    #[default]
    Default,
    /// Drain only on modification/removal.
    ModifyOnly,
}

/// A listener filter Outrider implements. Others are reported and skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct ListenerFilter {
    pub kind: ListenerFilterKind,
    /// `filter_disabled`: the filter does not run for connections this matches.
    pub disabled_when: Option<ListenerFilterPredicate>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerFilterKind {
    /// Peeks at a TLS ClientHello for SNI and ALPN (`server_names`,
    /// `transport_protocol: tls`, `application_protocols`).
    TlsInspector,
    /// Peeks at plaintext for HTTP/1.x or h2c (`application_protocols`).
    HttpInspector,
    /// Restores the original destination address (see [`Listener::use_original_dst`]).
    OriginalDst,
    /// Reads the HAProxy PROXY protocol header a load balancer puts before the
    /// connection's bytes: the client's address becomes the connection's peer, and the
    /// address the client connected to its (restored) local address.
    ProxyProtocol(ProxyProtocolConfig),
}

/// `envoy.filters.listener.proxy_protocol`'s settings (the default: a header required,
/// either version).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyProtocolConfig {
    /// `allow_requests_without_proxy_protocol`: a connection that does not start with a
    /// header goes on unchanged (against the standard, as Envoy allows it).
    pub allow_without_header: bool,
    /// `disallowed_versions`: a header of version 1 / 2 closes the connection.
    pub v1_disallowed: bool,
    pub v2_disallowed: bool,
}

/// `ListenerFilterChainMatchPredicate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenerFilterPredicate {
    Or(Vec<ListenerFilterPredicate>),
    And(Vec<ListenerFilterPredicate>),
    Not(Box<ListenerFilterPredicate>),
    Any,
    /// Destination port in `[start, end)`.
    DestinationPortRange {
        start: u32,
        end: u32,
    },
}

impl ListenerFilterPredicate {
    pub fn matches(&self, destination_port: u16) -> bool {
        match self {
            Self::Or(rules) => rules.iter().any(|r| r.matches(destination_port)),
            Self::And(rules) => rules.iter().all(|r| r.matches(destination_port)),
            Self::Not(rule) => !rule.matches(destination_port),
            Self::Any => true,
            Self::DestinationPortRange { start, end } => (*start..*end).contains(&u32::from(destination_port)),
        }
    }
}

/// `envoy.config.listener.v3.FilterChain`.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterChain {
    pub name: String,
    pub filter_chain_match: FilterChainMatch,
    /// `transport_socket` `envoy.transport_sockets.tls`; `None` for plaintext.
    pub tls: Option<DownstreamTlsContext>,
    pub transport_socket_connect_timeout: Option<Duration>,
    /// The terminal network filter, which handles the connection.
    pub terminal: TerminalFilter,
    /// The network filters before the terminal one that Outrider runs, in order (shared:
    /// the proxy builds their runtime once per chain).
    pub network_filters: std::sync::Arc<[crate::config::filters::NetworkFilter]>,
    /// Network filters that Outrider does not run because they only observe (see
    /// [`SkippedFilter`]).
    pub skipped_filters: Vec<SkippedFilter>,
    /// `envoy.filters.network.connection_limit` filters, in their order in the chain.
    pub connection_limits: Vec<ConnectionLimit>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TerminalFilter {
    /// Shared: every connection the chain serves holds it without a copy.
    HttpConnectionManager(std::sync::Arc<HttpConnectionManager>),
    TcpProxy(TcpProxy),
}

/// A filter that was configured but is not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedFilter {
    pub name: String,
    pub kind: SkippedKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkippedKind {
    /// Only observes: produces telemetry or exchanges peer metadata for it (stats,
    /// metadata exchange, ALPN override).
    Harmless,
    /// A filter type neither Outrider nor Envoy knows, marked `is_optional`.
    Unknown,
}

/// `envoy.config.listener.v3.FilterChainMatch`. Empty lists and `None` match anything.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct FilterChainMatch {
    pub destination_port: Option<u16>,
    /// The connection's (original) destination IP.
    pub prefix_ranges: Vec<CidrRange>,
    pub direct_source_prefix_ranges: Vec<CidrRange>,
    pub source_type: ConnectionSourceType,
    pub source_prefix_ranges: Vec<CidrRange>,
    pub source_ports: Vec<u16>,
    /// SNI; `*.example.com` forms match by suffix. Lower-cased.
    pub server_names: Vec<String>,
    /// `raw_buffer` or `tls` (from the TLS inspector); `None` matches any.
    pub transport_protocol: Option<String>,
    /// ALPN (or the HTTP inspector's `http/1.1` / `h2c`).
    pub application_protocols: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum ConnectionSourceType {
    #[default]
    Any,
    SameIpOrLoopback,
    External,
}

impl Listener {
    /// Every filter chain, the default one included.
    pub fn all_filter_chains(&self) -> impl Iterator<Item = &FilterChain> {
        self.filter_chains.iter().chain(self.default_filter_chain.as_deref())
    }

    /// The RDS route configurations this listener's HTTP connection managers refer to,
    /// without duplicates, in order of first appearance.
    pub fn route_config_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for chain in self.all_filter_chains() {
            if let TerminalFilter::HttpConnectionManager(hcm) = &chain.terminal
                && let RouteSource::Rds(name) = &hcm.route_source
                && !names.contains(&name.as_str())
            {
                names.push(name);
            }
        }
        names
    }

    /// The SDS secrets this listener's downstream TLS refers to, without duplicates.
    pub fn secret_names(&self) -> Vec<&str> {
        self.sds_secret_configs().into_iter().map(|c| c.name.as_str()).collect()
    }

    /// The SDS references behind [`secret_names`](Self::secret_names), with where each is
    /// fetched from and how long the listener waits for it.
    pub fn sds_secret_configs(&self) -> Vec<&SdsSecretConfig> {
        let mut configs: Vec<&SdsSecretConfig> = Vec::new();
        for tls in self.all_filter_chains().filter_map(|c| c.tls.as_ref()) {
            for config in tls.common.sds_secret_configs() {
                if !configs.iter().any(|c| c.name == config.name) {
                    configs.push(config);
                }
            }
        }
        configs
    }

    /// Whether connections get their original destination as local address: with
    /// `use_original_dst` (Envoy adds the listener filter for it) or the `original_dst`
    /// listener filter.
    pub fn restores_original_dst(&self) -> bool {
        self.use_original_dst || self.has_listener_filter(ListenerFilterKind::OriginalDst)
    }

    /// Every address the listener binds: `address` then `additional_addresses`.
    pub fn addresses(&self) -> impl Iterator<Item = &Address> {
        std::iter::once(&self.address).chain(&self.additional_addresses)
    }

    pub fn has_listener_filter(&self, kind: ListenerFilterKind) -> bool {
        self.listener_filters.iter().any(|f| f.kind == kind)
    }
}
