//! Istio's TCP metadata exchange (`envoy.tcp.metadataexchange.config.MetadataExchange`,
//! istiod's `istio.metadata_exchange` network filter and cluster filter): when the TLS
//! connection's ALPN is `protocol` (`istio-peer-exchange`), each end sends its node
//! metadata in-band before the first byte of the connection's own data.

/// The filter's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpMetadataExchange {
    /// The ALPN protocol that says the peer speaks the exchange.
    pub protocol: String,
    /// `enable_discovery`: a downstream peer that does not speak the exchange is the
    /// workload at its address, as istiod's workload metadata (WDS) names it.
    pub enable_discovery: bool,
}
