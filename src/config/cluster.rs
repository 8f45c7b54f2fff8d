//! Clusters: a named group of upstream endpoints, how they are found, balanced, checked and
//! reached.
//!
//! One [`Cluster`] is one validated `envoy.config.cluster.v3.Cluster`. Every default Envoy
//! documents has already been applied, so consumers never re-derive them.

pub mod circuit_breakers;
pub mod health_check;
pub mod lb_policy;
pub mod outlier;
pub mod upstream;

use std::net::SocketAddr;
use std::time::Duration;

pub use circuit_breakers::{CircuitBreakers, RetryBudget, Thresholds};
pub use health_check::{GrpcHealthCheck, HealthCheck, HealthChecker, HttpHealthCheck, TcpHealthCheck};
pub use lb_policy::{
    CswrrConfig, HashKeySource, LbPolicy, LeastRequestConfig, LoadBalancing, MaglevConfig, OobReportingConfig,
    ProxyLbPolicy, RingHashConfig, RoundRobinConfig, SlowStartConfig,
};
pub use outlier::OutlierDetection;
pub use upstream::{
    Http2Keepalive, Http2Settings, InternalUpstream, TransportSocketMatch, UpstreamHttpOptions, UpstreamProtocol,
    UpstreamTransport,
};

use super::endpoint::ClusterLoadAssignment;
use super::tls::SdsSecretConfig;

/// Envoy's `connect_timeout` when the cluster does not set one.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Envoy's `initial_fetch_timeout` of a config source when it is not set.
pub const DEFAULT_INITIAL_FETCH_TIMEOUT: Duration = Duration::from_secs(15);
/// The header an ORIGINAL_DST cluster reads when `use_http_header` is set and no name is given.
pub const DEFAULT_ORIGINAL_DST_HEADER: &str = "x-envoy-original-dst-host";
/// How often an ORIGINAL_DST cluster forgets hosts no connection picked since the last sweep.
pub const DEFAULT_ORIGINAL_DST_CLEANUP_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub name: String,
    pub discovery: DiscoveryType,
    /// Endpoints given inline (STATIC, STRICT_DNS, LOGICAL_DNS); EDS clusters get theirs
    /// from EDS and ORIGINAL_DST clusters have none.
    pub load_assignment: Option<ClusterLoadAssignment>,
    pub connect_timeout: Duration,
    /// How an endpoint is picked. `None` only for ORIGINAL_DST clusters, where the
    /// connection's own destination is the endpoint (Envoy's `CLUSTER_PROVIDED`).
    pub load_balancing: Option<LoadBalancing>,
    /// Set only on STRICT_DNS and LOGICAL_DNS clusters.
    pub dns: Option<DnsSettings>,
    /// Set only on ORIGINAL_DST clusters.
    pub original_dst: Option<OriginalDstConfig>,
    pub outlier_detection: Option<OutlierDetection>,
    pub health_checks: Vec<HealthCheck>,
    pub circuit_breakers: CircuitBreakers,
    /// The transport of endpoints that no [`TransportSocketMatch`] selects.
    pub transport_socket: UpstreamTransport,
    /// Per-endpoint transports chosen by endpoint metadata (Istio's `tlsMode`), first match
    /// wins; empty when the cluster has one transport for all endpoints.
    pub transport_socket_matches: Vec<TransportSocketMatch>,
    pub http: UpstreamHttpOptions,
    /// `upstream_bind_config`: the local address upstream connections are made from.
    /// Istio binds inbound clusters to 127.0.0.6 (and ::6 on dual-stack pods) so that its
    /// iptables rules can tell the proxy's own traffic to the application apart.
    pub upstream_bind: Option<SourceAddresses>,
    /// `track_cluster_stats.per_endpoint_stats`: export each endpoint's stats. Off by
    /// default, as in Envoy: at mesh scale they would be most of the series.
    pub per_endpoint_stats: bool,
    /// Istio's upstream `istio.metadata_exchange` filter: the TCP proxy exchanges node
    /// metadata in-band on connections whose ALPN is its protocol.
    pub metadata_exchange: Option<crate::config::filters::metadata_exchange::TcpMetadataExchange>,
    /// `metadata.filter_metadata.istio.services[0].host`: the service istiod rendered the
    /// cluster for (`istio.stats` reports it as `destination_service` on inbound).
    pub istio_service_host: Option<String>,
    /// `per_connection_buffer_limit_bytes` (Envoy's default 1 MiB): what one upstream
    /// connection may make Outrider hold (its HTTP/2 windows and send buffers, its HTTP/1.1
    /// read buffer); see `proxy::flow_control`. 0: no limit, as in Envoy.
    pub per_connection_buffer_limit_bytes: u32,
}

/// `upstream_bind_config.source_address`, and the `extra_source_addresses` entry of the
/// other IP family (Envoy's default local address selector).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceAddresses {
    pub source: SocketAddr,
    pub other_family: Option<SocketAddr>,
}

impl SourceAddresses {
    /// The address to connect to `peer` from: the one of `peer`'s family, else `source`.
    pub fn for_peer(&self, peer: SocketAddr) -> SocketAddr {
        match self.other_family {
            Some(other) if other.is_ipv4() == peer.is_ipv4() && self.source.is_ipv4() != peer.is_ipv4() => other,
            _ => self.source,
        }
    }
}

/// How a cluster learns its endpoints.
#[derive(Debug, Clone, PartialEq)]
pub enum DiscoveryType {
    Static,
    /// Every address each host name resolves to is an endpoint.
    StrictDns,
    Eds(EdsConfig),
    /// The endpoint is the original destination of the downstream connection (or a header).
    OriginalDst,
    /// One address at a time: the first address of the first host name; connections keep
    /// their address across re-resolution.
    LogicalDns,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EdsConfig {
    /// The ClusterLoadAssignment name to subscribe to: `eds_cluster_config.service_name`,
    /// or the cluster's own name when that is empty.
    pub service_name: String,
    /// How long the cluster may wait for its endpoints before it is served without them.
    /// `None` (Envoy's `0s`) waits forever.
    pub initial_fetch_timeout: Option<Duration>,
}

/// Name resolution of STRICT_DNS and LOGICAL_DNS clusters. Names are resolved (by the
/// system resolver) at each new connection, never cached here: `dns_refresh_rate` and
/// `respect_dns_ttl` have nothing to pace.
#[derive(Debug, Clone, PartialEq)]
pub struct DnsSettings {
    pub lookup_family: DnsLookupFamily,
}

/// Which address families a DNS cluster resolves, as Envoy's `dns_lookup_family`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DnsLookupFamily {
    /// IPv6 if there is any, else IPv4.
    Auto,
    V4Only,
    V6Only,
    /// IPv4 if there is any, else IPv6.
    V4Preferred,
    /// Both families.
    All,
}

impl DnsLookupFamily {
    /// The address a connection goes to among `resolved` (in the resolver's order), as
    /// Envoy's `dns_lookup_family` chooses: `None` when the family wanted has none.
    pub fn pick(self, resolved: impl IntoIterator<Item = SocketAddr>) -> Option<SocketAddr> {
        let resolved: Vec<SocketAddr> = resolved.into_iter().collect();
        let first = |v6: bool| resolved.iter().copied().find(|a| a.is_ipv6() == v6);
        match self {
            Self::Auto => first(true).or_else(|| first(false)),
            Self::V4Only => first(false),
            Self::V6Only => first(true),
            Self::V4Preferred => first(false).or_else(|| first(true)),
            Self::All => resolved.first().copied(),
        }
    }
}

impl Cluster {
    /// The `dns_lookup_family` names of this cluster resolve with (Envoy's default `AUTO`
    /// for clusters that do not resolve names themselves).
    pub fn lookup_family(&self) -> DnsLookupFamily {
        self.dns.as_ref().map_or(DnsLookupFamily::Auto, |d| d.lookup_family)
    }
}

/// `envoy.type.metadata.v3.MetadataKey`: a namespace of metadata and the keys into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataKey {
    pub key: String,
    /// At least one key.
    pub path: Vec<String>,
}

/// `original_dst_lb_config` of an ORIGINAL_DST cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginalDstConfig {
    /// Take the destination from an HTTP header instead of the connection.
    pub use_http_header: bool,
    /// The header read when `use_http_header` is set; [`DEFAULT_ORIGINAL_DST_HEADER`] unless
    /// the cluster names another.
    pub http_header_name: String,
    /// Replaces the port of the original destination.
    pub upstream_port_override: Option<u16>,
    /// `metadata_key`: the destination (`IP:port`) is read from this key of the request's
    /// dynamic metadata, else of the connection's, before the connection's own original
    /// destination (Istio's `connect_originate` names a waypoint this way).
    pub metadata_key: Option<MetadataKey>,
    /// `cleanup_interval`: hosts are created on demand, one per destination, and removed by
    /// a sweep every interval when nothing picked them since the previous sweep.
    pub cleanup_interval: Duration,
}

impl Cluster {
    /// The TLS context for `endpoint`: the first transport socket match whose criteria the
    /// endpoint's `envoy.transport_socket_match` metadata all carry, else the cluster's
    /// transport socket. `None`: plaintext. (The proxy and health checks choose alike.)
    pub fn upstream_tls_context(
        &self,
        endpoint: &super::endpoint::LbEndpoint,
    ) -> Option<&super::tls::UpstreamTlsContext> {
        self.upstream_transport(endpoint).tls()
    }

    /// The transport socket for `endpoint`: the first transport socket match whose criteria
    /// the endpoint's `envoy.transport_socket_match` metadata all carry, else the cluster's.
    pub fn upstream_transport(&self, endpoint: &super::endpoint::LbEndpoint) -> &UpstreamTransport {
        self.transport_socket_matches
            .iter()
            .find(|m| m.criteria.iter().all(|(k, v)| endpoint.transport_socket_match.get(k) == Some(v)))
            .map_or(&self.transport_socket, |m| &m.transport)
    }

    /// The EDS resource this cluster needs, if it is an EDS cluster.
    pub fn eds_service_name(&self) -> Option<&str> {
        match &self.discovery {
            DiscoveryType::Eds(eds) => Some(&eds.service_name),
            _ => None,
        }
    }

    /// The SDS secrets this cluster's upstream TLS refers to, over its default transport and
    /// every transport socket match, without duplicates.
    pub fn secret_names(&self) -> Vec<&str> {
        self.sds_secret_configs().into_iter().map(|c| c.name.as_str()).collect()
    }

    /// The SDS references behind [`secret_names`](Self::secret_names), with where each is
    /// fetched from and how long the cluster waits for it.
    pub fn sds_secret_configs(&self) -> Vec<&SdsSecretConfig> {
        let mut configs: Vec<&SdsSecretConfig> = Vec::new();
        let transports =
            std::iter::once(&self.transport_socket).chain(self.transport_socket_matches.iter().map(|m| &m.transport));
        for transport in transports {
            if let Some(tls) = transport.tls() {
                for config in tls.common.sds_secret_configs() {
                    if !configs.iter().any(|c| c.name == config.name) {
                        configs.push(config);
                    }
                }
            }
        }
        configs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lookup_family_picks_the_address_envoy_connects_to() {
        let (v4, v6): (SocketAddr, SocketAddr) = ("10.0.0.1:80".parse().unwrap(), "[fd00::1]:80".parse().unwrap());
        let (both, only_v4, only_v6) = (vec![v4, v6], vec![v4], vec![v6]);
        let pick = |family: DnsLookupFamily, resolved: &Vec<SocketAddr>| family.pick(resolved.iter().copied());
        assert_eq!(pick(DnsLookupFamily::Auto, &both), Some(v6));
        assert_eq!(pick(DnsLookupFamily::Auto, &only_v4), Some(v4));
        assert_eq!(pick(DnsLookupFamily::V4Preferred, &both), Some(v4));
        assert_eq!(pick(DnsLookupFamily::V4Preferred, &only_v6), Some(v6));
        assert_eq!(pick(DnsLookupFamily::V4Only, &only_v6), None);
        assert_eq!(pick(DnsLookupFamily::V6Only, &only_v4), None);
        assert_eq!(pick(DnsLookupFamily::V6Only, &both), Some(v6));
        assert_eq!(pick(DnsLookupFamily::All, &both), Some(v4), "the resolver's order");
    }
}
