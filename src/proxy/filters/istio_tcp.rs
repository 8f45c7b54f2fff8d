//! Istio's TCP telemetry, run by the TCP proxy on a connection's bytes: the in-band
//! metadata exchange (`istio.metadata_exchange` on the listener, for the downstream peer,
//! and on the cluster, for the upstream one; ALPN `istio-peer-exchange`) and the TCP
//! metrics of `istio.stats` (`istio_tcp_connections_opened_total`, `…_closed_total`,
//! `istio_tcp_sent_bytes_total`, `istio_tcp_received_bytes_total`).
//!
//! Each end writes its frame as soon as the connection is up and reads the peer's off the
//! front of what the peer sends ([`stream::PeerReader`]). A connection is reported open
//! once the peer it reports about is known (or known not to come), and its bytes and close
//! when it ends.

pub mod stream;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use super::context::DownstreamConnection;
use super::http::FactoryContext;
use super::istio_stats::labels::{self, Facts, Reporter};
use super::istio_stats::series::SeriesCache;
use super::peer_metadata::tcp_frame;
use crate::config::filters::istio_stats::{IstioStats, StatsReporter, TagOverride, TagValue};
use crate::config::filters::metadata_exchange::TcpMetadataExchange;
use crate::config::filters::peer_metadata::WorkloadMetadata;
use crate::config::filters::{NetworkFilter, NetworkFilterConfig};
use crate::proxy::response_flags::ResponseFlags;
use crate::store::WorkloadIndex;
use stream::{Meter, OnPeer};

/// The TCP telemetry of one filter chain: built once, shared by its connections.
pub struct TcpTelemetry {
    /// The listener's exchange, for the downstream peer.
    exchange: Option<TcpMetadataExchange>,
    stats: Option<Arc<TcpStats>>,
    /// istiod's workload metadata, for `enable_discovery`.
    workloads: Option<Arc<WorkloadIndex>>,
}

struct TcpStats {
    config: Arc<IstioStats>,
    reporter: Reporter,
    local: WorkloadMetadata,
    series: SeriesCache,
}

impl TcpTelemetry {
    /// From a chain's network filters; `None` when it has no TCP telemetry filter.
    pub fn build(configs: &[NetworkFilter], factory: FactoryContext<'_>) -> Option<Self> {
        let mut out = Self { exchange: None, stats: None, workloads: factory.workloads.cloned() };
        for filter in configs {
            match &filter.config {
                NetworkFilterConfig::MetadataExchange(exchange) => out.exchange = Some((**exchange).clone()),
                NetworkFilterConfig::IstioStats(config) => {
                    let reporter = match config.reporter {
                        StatsReporter::ServerGateway => Reporter::ServerGateway,
                        StatsReporter::ByDirection if factory.inbound => Reporter::ServerSidecar,
                        StatsReporter::ByDirection => Reporter::ClientSidecar,
                    };
                    out.stats = Some(Arc::new(TcpStats {
                        config: config.clone(),
                        reporter,
                        local: factory.node.workload.clone(),
                        series: SeriesCache::new(factory.stats.clone(), config.clone()),
                    }));
                }
                _ => {}
            }
        }
        (out.exchange.is_some() || out.stats.is_some()).then_some(out)
    }

    /// A new connection's session; `alpn` is what its TLS handshake settled on.
    pub fn session(&self, connection: &DownstreamConnection, alpn: Option<&[u8]>) -> Rc<TcpSession> {
        let downstream_exchange =
            self.exchange.as_ref().is_some_and(|e| !e.protocol.is_empty() && alpn == Some(e.protocol.as_bytes()));
        // A peer that does not speak the exchange (an ambient workload over HBONE, whose
        // tunnel's source is the connection's peer here) is looked up by its address.
        let discovered = self
            .exchange
            .as_ref()
            .filter(|e| e.enable_discovery && !downstream_exchange)
            .and(self.workloads.as_ref())
            .and_then(|index| index.peer(connection.peer.ip()));
        // Over HBONE the tunnel's peer, carried to the internal listener; else the TLS peer.
        let peer_san = match connection.carried_peer_principal() {
            Some(principal) => Some(principal.to_owned()),
            None => connection.peer_identity.as_ref().and_then(|p| p.uri_sans.first().cloned()),
        };
        Rc::new(TcpSession {
            stats: self.stats.clone(),
            downstream_exchange,
            peer_san,
            local_san: connection.local_uri_san.clone(),
            upstream_san: RefCell::new(None),
            downstream_peer: RefCell::new(discovered),
            upstream_peer: RefCell::new(None),
            pending: Cell::new(Pending { downstream: downstream_exchange, upstream: false }),
            cluster: RefCell::new(None),
            opened: Cell::new(false),
            meter: Rc::new(Meter::default()),
            reported: Cell::new((0, 0)),
        })
    }
}

/// Which peers' frames are still awaited.
#[derive(Debug, Clone, Copy)]
struct Pending {
    downstream: bool,
    upstream: bool,
}

/// One connection's telemetry.
pub struct TcpSession {
    stats: Option<Arc<TcpStats>>,
    downstream_exchange: bool,
    peer_san: Option<String>,
    /// The certificate this sidecar presented downstream (server side's own principal).
    local_san: Option<Arc<str>>,
    /// The upstream certificate's first URI SAN (client side).
    upstream_san: RefCell<Option<String>>,
    downstream_peer: RefCell<Option<Arc<WorkloadMetadata>>>,
    upstream_peer: RefCell<Option<Arc<WorkloadMetadata>>>,
    pending: Cell<Pending>,
    cluster: RefCell<Option<String>>,
    opened: Cell<bool>,
    /// The downstream connection's bytes.
    pub meter: Rc<Meter>,
    /// The bytes (sent, received) already reported.
    reported: Cell<(u64, u64)>,
}

/// The end a frame came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Downstream,
    Upstream,
}

struct PeerFrom(Rc<TcpSession>, Side);

impl OnPeer for PeerFrom {
    fn on_peer(&self, peer: Option<WorkloadMetadata>) {
        let PeerFrom(session, side) = self;
        let mut pending = session.pending.get();
        let slot = match side {
            Side::Downstream => {
                pending.downstream = false;
                &session.downstream_peer
            }
            Side::Upstream => {
                pending.upstream = false;
                &session.upstream_peer
            }
        };
        session.pending.set(pending);
        *slot.borrow_mut() = peer.map(Arc::new);
        session.maybe_open();
    }
}

impl TcpSession {
    /// Whether this end exchanges metadata with the downstream peer (its ALPN matched).
    pub fn exchanges_downstream(&self) -> bool {
        self.downstream_exchange
    }

    /// What reads the downstream peer's frame.
    pub fn downstream_reader(self: &Rc<Self>) -> Option<Rc<dyn OnPeer>> {
        self.downstream_exchange.then(|| Rc::new(PeerFrom(self.clone(), Side::Downstream)) as Rc<dyn OnPeer>)
    }

    /// The upstream connection to `cluster` is up; `exchange` says whether its peer's
    /// frame is to be read. Returns what reads it.
    pub fn upstream_connected(self: &Rc<Self>, cluster: &str, exchange: bool) -> Option<Rc<dyn OnPeer>> {
        *self.cluster.borrow_mut() = Some(cluster.to_owned());
        let mut pending = self.pending.get();
        pending.upstream = exchange;
        self.pending.set(pending);
        self.maybe_open();
        exchange.then(|| Rc::new(PeerFrom(self.clone(), Side::Upstream)) as Rc<dyn OnPeer>)
    }

    /// The upstream's identity, from its TLS certificate.
    pub fn set_upstream_san(&self, san: Option<String>) {
        *self.upstream_san.borrow_mut() = san;
    }

    /// Reports the connection open once the peer it reports about is settled.
    fn maybe_open(&self) {
        let Some(stats) = &self.stats else { return };
        if self.opened.get() || self.cluster.borrow().is_none() {
            return;
        }
        let pending = self.pending.get();
        let waiting = match stats.reporter {
            Reporter::ClientSidecar => pending.upstream,
            Reporter::ServerSidecar | Reporter::ServerGateway => pending.downstream,
        };
        if !waiting {
            self.open(stats);
        }
    }

    fn open(&self, stats: &TcpStats) {
        self.opened.set(true);
        if let Some(counter) = &stats.series.tcp(&self.labels(stats)).connections_opened_total {
            counter.inc();
        }
    }

    /// `tcp_reporting_duration`, when this connection reports metrics (zero: only at close).
    pub fn reporting_period(&self) -> Option<std::time::Duration> {
        self.stats.as_ref().map(|s| s.config.tcp_reporting_duration).filter(|d| !d.is_zero())
    }

    /// A long connection's bytes so far, once it is reported open (Istio's report timer).
    pub fn report_progress(&self) {
        if let Some(stats) = &self.stats
            && self.opened.get()
        {
            self.report_bytes(&stats.series.tcp(&self.labels(stats)));
        }
    }

    fn report_bytes(&self, series: &super::istio_stats::series::TcpSeries) {
        let (sent, received) = (self.meter.sent.get(), self.meter.received.get());
        let (reported_sent, reported_received) = self.reported.get();
        if let Some(counter) = &series.sent_bytes_total {
            counter.add(sent.saturating_sub(reported_sent));
        }
        if let Some(counter) = &series.received_bytes_total {
            counter.add(received.saturating_sub(reported_received));
        }
        self.reported.set((sent, received));
    }

    /// The connection ended: its remaining bytes and its close.
    pub fn close(&self) {
        let Some(stats) = &self.stats else { return };
        if !self.opened.get() {
            self.open(stats);
        }
        let series = stats.series.tcp(&self.labels(stats));
        self.report_bytes(&series);
        if let Some(counter) = &series.connections_closed_total {
            counter.inc();
        }
    }

    /// Istio's labels of a TCP connection: those of a request without its response code
    /// and gRPC status, `request_protocol="tcp"`.
    fn labels(&self, stats: &TcpStats) -> Vec<(String, String)> {
        // Once or a few times per connection: owned values keep this simple.
        let downstream = self.downstream_peer.borrow();
        let upstream = self.upstream_peer.borrow();
        let cluster = self.cluster.borrow();
        let upstream_san = self.upstream_san.borrow();
        let peer = match stats.reporter {
            Reporter::ClientSidecar => upstream.as_ref(),
            Reporter::ServerSidecar | Reporter::ServerGateway => downstream.as_ref(),
        };
        let facts = Facts {
            reporter: stats.reporter,
            local: &stats.local,
            peer,
            endpoint_peer: upstream.as_ref(),
            peer_san: match stats.reporter {
                Reporter::ClientSidecar => upstream_san.as_deref(),
                _ => self.peer_san.as_deref(),
            },
            // Server side only: the client side's upstream certificate is not tracked here.
            local_san: match stats.reporter {
                Reporter::ClientSidecar => None,
                _ => self.local_san.as_deref(),
            },
            host: None,
            route_name: None,
            cluster: cluster.as_deref(),
            cluster_service_host: None,
            grpc: false,
            response_code: 0,
            grpc_status: None,
            flags: ResponseFlags::NONE,
        };
        let mut out: Vec<(String, String)> = labels::standard(&facts)
            .into_iter()
            .filter(|(k, _)| !matches!(*k, "response_code" | "grpc_response_status"))
            .map(|(k, v)| (k.to_owned(), if k == "request_protocol" { "tcp".to_owned() } else { v.into_owned() }))
            .collect();
        for (_, change) in &stats.config.overrides {
            let (tag, value) = match change {
                TagOverride::Remove(tag) => ((*tag).to_owned(), String::new()),
                // A connection has no request: only literals have a value.
                TagOverride::Set(tag, TagValue::Literal(text)) => (tag.clone(), text.clone()),
                TagOverride::Set(tag, _) => (tag.clone(), "unknown".to_owned()),
            };
            out.push((tag, value));
        }
        out
    }
}

/// Reads a peer's frame for nobody: a cluster exchanges metadata on a chain that reports
/// no TCP metrics, and the frame must still not reach the application.
pub struct IgnorePeer;

impl OnPeer for IgnorePeer {
    fn on_peer(&self, _: Option<WorkloadMetadata>) {}
}

/// This node's exchange frame.
pub fn own_frame(node: &crate::config::filters::peer_metadata::LocalNode) -> Vec<u8> {
    tcp_frame::encode(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::filters::peer_metadata::LocalNode;
    use crate::telemetry::{Stats, Value};

    fn counter(stats: &Stats, family: &str) -> u64 {
        stats
            .samples()
            .iter()
            .filter(|(name, _)| name.family == family)
            .map(|(_, value)| match value {
                Value::Counter(n) => *n,
                _ => 0,
            })
            .sum()
    }

    /// The TCP telemetry of an inbound chain of `filters`, reporting into `stats`.
    fn inbound(filters: &[NetworkFilter], stats: &Arc<Stats>, workloads: Option<&Arc<WorkloadIndex>>) -> TcpTelemetry {
        let node = LocalNode::default();
        let factory = FactoryContext { stats, stat_prefix: "", filter_name: "", node: &node, workloads, inbound: true };
        TcpTelemetry::build(filters, factory).unwrap()
    }

    /// A plaintext connection from `peer` to `local`.
    fn connection(peer: &str, local: &str) -> DownstreamConnection {
        DownstreamConnection {
            local_uri_san: None,
            stream: None,
            peer: peer.parse().unwrap(),
            local: local.parse().unwrap(),
            server_name: None,
            tls: false,
            peer_identity: None,
        }
    }

    #[test]
    fn a_long_connection_reports_its_bytes_as_they_pass_and_the_rest_at_close() {
        let stats = Arc::new(Stats::default());
        let config = Arc::new(IstioStats::default());
        let filters = [NetworkFilter { name: "istio.stats".into(), config: NetworkFilterConfig::IstioStats(config) }];
        let telemetry = inbound(&filters, &stats, None);
        let session = telemetry.session(&connection("127.0.0.1:1", "127.0.0.1:2"), None);
        session.report_progress();
        assert_eq!(counter(&stats, "istio_tcp_connections_opened_total"), 0, "not open before its upstream");
        assert!(session.upstream_connected("inbound|9000||", false).is_none());
        assert_eq!(counter(&stats, "istio_tcp_connections_opened_total"), 1);
        session.meter.received.set(100);
        session.meter.sent.set(40);
        session.report_progress();
        assert_eq!(counter(&stats, "istio_tcp_received_bytes_total"), 100);
        session.meter.received.set(150);
        session.close();
        assert_eq!(counter(&stats, "istio_tcp_received_bytes_total"), 150);
        assert_eq!(counter(&stats, "istio_tcp_sent_bytes_total"), 40);
        assert_eq!(counter(&stats, "istio_tcp_connections_closed_total"), 1);
        assert_eq!(counter(&stats, "istio_tcp_connections_opened_total"), 1);
    }

    /// `enable_discovery`: a downstream peer without the in-band exchange (an ambient
    /// workload over HBONE) is the workload at its address in istiod's workload metadata.
    #[test]
    fn a_peer_without_the_exchange_is_found_by_its_address_when_discovery_is_on() {
        use crate::config::convert::workload::DiscoveredWorkload;
        use crate::config::filters::metadata_exchange::TcpMetadataExchange;
        let index = Arc::new(WorkloadIndex::default());
        let ambient = WorkloadMetadata { workload_name: "ambient".into(), ..WorkloadMetadata::default() };
        let found = DiscoveredWorkload { metadata: ambient, addresses: vec!["10.0.0.7".parse().unwrap()] };
        index.apply(vec![("ambient".into(), "1".into(), found)], &[]);
        for discovery in [true, false] {
            let stats = Arc::new(Stats::default());
            let exchange = TcpMetadataExchange { protocol: "istio-peer-exchange".into(), enable_discovery: discovery };
            let filters = [
                NetworkFilter { name: "mx".into(), config: NetworkFilterConfig::MetadataExchange(Arc::new(exchange)) },
                NetworkFilter { name: "stats".into(), config: NetworkFilterConfig::IstioStats(Arc::default()) },
            ];
            let telemetry = inbound(&filters, &stats, Some(&index));
            let session = telemetry.session(&connection("10.0.0.7:40000", "10.0.0.9:9000"), None);
            assert!(session.upstream_connected("inbound|9000||", false).is_none());
            let source = stats
                .samples()
                .into_iter()
                .filter(|(name, _)| name.family == "istio_tcp_connections_opened_total")
                .flat_map(|(name, _)| name.labels)
                .find(|(key, _)| key == "source_workload")
                .map(|(_, value)| value);
            let expected = if discovery { "ambient" } else { "unknown" };
            assert_eq!(source.as_deref(), Some(expected), "discovery {discovery}");
        }
    }
}
