//! Upstream connections of one worker: pools per cluster and endpoint, HTTP/1.1 keep-alive
//! and multiplexed HTTP/2, the cluster's connect and idle timeouts and request limits, and
//! the feedback each response gives the balancers (latency, outcome, ORCA load reports).
//!
//! Built on hyper's connection-level client (`client::conn::{http1, http2}`) rather than
//! hyper-util's pooled `Client`: that one keys its pool by URI authority (an endpoint is an
//! address chosen by the balancer, and a pool belongs to a cluster), hides when a
//! connection is handed back, and has no per-connection request limit. Owning the pool is
//! a few hundred lines and keeps every decision visible here.

mod activity;
mod body;
mod connect;
mod error;
mod feedback;
mod limits;
mod pool;
pub mod raw;
mod request;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::BoxBody;

pub use body::UpstreamBody;

/// In a response's extensions: the upstream certificate's first URI SAN, when the
/// connection it came on is TLS (what Istio's client-side telemetry names as the
/// destination principal).
#[derive(Debug, Clone)]
pub struct UpstreamPeerUriSan(pub Arc<str>);

/// In a response's extensions: the first URI SAN of the client certificate Outrider
/// presented on the connection it came on (Istio's client-side source principal).
#[derive(Debug, Clone)]
pub struct UpstreamLocalUriSan(pub Arc<str>);

fn with_peer<B>(mut response: Response<B>, activity: &activity::Activity) -> Response<B> {
    if let Some(san) = activity.peer_uri_san() {
        response.extensions_mut().insert(UpstreamPeerUriSan(san));
    }
    if let Some(san) = activity.local_uri_san() {
        response.extensions_mut().insert(UpstreamLocalUriSan(san));
    }
    response
}
pub use error::UpstreamError;
pub use feedback::{Feedback, ObservedBody};

use connect::{Dial, Target};
use limits::Breakers;
pub use pool::ClusterPool;
use pool::{Membership, Pools};

use super::exec::Spawner;
use super::transport::HandshakeStats;
use crate::config::cluster::DiscoveryType;
use crate::config::cluster::{Cluster, UpstreamProtocol};
use crate::lb::Host;
use crate::lb::resources::ClusterResources;
use crate::store::Snapshot;
use crate::tls::ClientTls;

/// The error type of request bodies sent upstream.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body of a request sent upstream: the downstream body, or a buffered copy of it for
/// retries, boxed so that one pool serves both.
pub type RequestBody = BoxBody<Bytes, BoxError>;

/// Keeps a pooled connection busy while a tunnel on it lasts (see
/// [`Upstreams::open_connect`]).
pub struct TunnelLease {
    _lease: activity::Lease,
}
/// The body of a response handed downstream.
pub type ResponseBody = ObservedBody<UpstreamBody>;

/// The HTTP version spoken to an endpoint for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Http1,
    Http2,
}

impl Protocol {
    /// The cluster's protocol; `UseDownstream` follows the downstream request.
    pub fn for_request(cluster: &Cluster, downstream_is_h2: bool) -> Self {
        match cluster.http.protocol {
            UpstreamProtocol::Http1 => Self::Http1,
            UpstreamProtocol::Http2 => Self::Http2,
            UpstreamProtocol::UseDownstream if downstream_is_h2 => Self::Http2,
            UpstreamProtocol::UseDownstream => Self::Http1,
        }
    }
}

/// Where one request goes: the endpoint, its cluster, the cluster's pool on this worker
/// and its circuit-breaker counts (none: no breakers apply).
#[derive(Clone, Copy)]
pub struct Destination<'a> {
    pub host: &'a Host,
    pub cluster: &'a Cluster,
    pub pool: &'a Arc<ClusterPool>,
    pub resources: Option<&'a Arc<ClusterResources>>,
}

/// The upstream connections of one worker. Clones share the pools.
#[derive(Debug, Clone, Default)]
pub struct Upstreams {
    pools: Arc<Pools>,
    tls_stats: Arc<HandshakeStats>,
    spawner: Spawner,
}

impl Upstreams {
    pub fn new() -> Self {
        Self::default()
    }

    /// Upstreams whose TLS handshakes are counted in `stats`.
    pub fn with_tls_stats(stats: Arc<HandshakeStats>) -> Self {
        Self { pools: Arc::default(), tls_stats: stats, spawner: Spawner::Runtime }
    }

    /// Upstreams whose connection tasks run on the current thread's local set: a worker's
    /// (must be used within one). A response then wakes its request without leaving the
    /// local set.
    pub fn on_local_set(self) -> Self {
        Self { spawner: Spawner::Local, ..self }
    }

    /// Sends `request` to `host` in plaintext, without circuit breakers, and feeds the
    /// outcome back into the host's stats (see [`forward_to`](Self::forward_to)).
    pub async fn forward(
        &self,
        host: &Host,
        cluster: &Cluster,
        downstream_is_h2: bool,
        request: Request<RequestBody>,
    ) -> Result<Response<ResponseBody>, UpstreamError> {
        let pool = self.pool(&cluster.name);
        let to = Destination { host, cluster, pool: &pool, resources: None };
        self.forward_to(to, downstream_is_h2, request, None).await
    }

    /// The pool of `cluster`'s connections on this worker (made on first use): a worker's
    /// thread-local cluster keeps it, so that its requests need no look-up by name.
    pub fn pool(&self, cluster: &str) -> Arc<ClusterPool> {
        self.pools.cluster(cluster)
    }

    /// Sends `request` to `to.host` on the cluster's pool (over TLS when `tls` is given, see
    /// `ThreadLocalCluster::tls`), under the cluster's circuit breakers
    /// (`max_connections`, `max_pending_requests`) when `to.resources` holds its counts, and
    /// feeds the outcome back into the host's stats: the request counts as in flight until
    /// the returned body ends or is dropped.
    pub async fn forward_to(
        &self,
        to: Destination<'_>,
        downstream_is_h2: bool,
        request: Request<RequestBody>,
        tls: Option<Arc<ClientTls>>,
    ) -> Result<Response<ResponseBody>, UpstreamError> {
        let Destination { host, cluster, pool, resources } = to;
        let feedback = Feedback::start(host, Instant::now()).with_outlier(cluster.outlier_detection.as_ref());
        let breakers = resources.map(|resources| Breakers {
            resources,
            limits: &cluster.circuit_breakers,
            host: &host.stats,
            stats: &host.cluster_stats,
        });
        let result = self.send_limited(host, cluster, pool, (downstream_is_h2, request), tls, breakers.as_ref()).await;
        feedback.observe(result, Instant::now())
    }

    /// Sends `request` to `host` in plaintext on a pooled or new connection, without
    /// touching the host's stats (see [`forward`](Self::forward) and [`Feedback`]). The
    /// request URI may be origin-form; the authority comes from it, the `Host` header or
    /// the address.
    pub async fn send(
        &self,
        host: &Host,
        cluster: &Cluster,
        downstream_is_h2: bool,
        request: Request<RequestBody>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        let pool = self.pool(&cluster.name);
        self.send_limited(host, cluster, &pool, (downstream_is_h2, request), None, None).await
    }

    async fn send_limited(
        &self,
        host: &Host,
        cluster: &Cluster,
        pool: &Arc<ClusterPool>,
        (downstream_is_h2, request): (bool, Request<RequestBody>),
        tls: Option<Arc<ClientTls>>,
        breakers: Option<&Breakers<'_>>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        let tls = tls.as_ref().map(|tls| (tls, &self.tls_stats));
        let target = Target::new(host.address(), &host.endpoint, cluster, &host.cluster_stats, tls, self.spawner);
        let max_requests = cluster.http.max_requests_per_connection;
        match Protocol::for_request(cluster, downstream_is_h2) {
            Protocol::Http1 => {
                let request = request::http1(request, host.address())?;
                let http1_only = cluster.http.protocol == UpstreamProtocol::Http1;
                Self::send_http1(pool, &target, (max_requests, http1_only), request, breakers).await
            }
            Protocol::Http2 => {
                let request = request::http2(request, host.address())?;
                let mut conn = pool.http2(&target, max_requests, breakers).await?;
                let slot = limits::active_request(breakers)?;
                let lease = conn.activity.lease();
                let response = conn.sender.send_request(request).await.map_err(|e| UpstreamError::from_hyper(&e))?;
                let response = with_peer(response, &conn.activity);
                Ok(response.map(|body| UpstreamBody::new(body, lease, None).holding(slot)))
            }
        }
    }

    /// Opens an HTTP/2 `CONNECT` tunnel (`request`, authority-form) to `host` on a pooled
    /// HTTP/2 connection of the cluster: one connection carries many tunnels, as Envoy's
    /// pool and ztunnel's HBONE pool do. Returns the answer (a 2xx is taken over with
    /// `hyper::upgrade::on`) and the lease that keeps its connection from going idle while
    /// the tunnel lasts. Tunnels do not count against the cluster's `max_connections`.
    pub async fn open_connect(
        &self,
        host: &Host,
        cluster: &Cluster,
        pool: &Arc<ClusterPool>,
        request: Request<RequestBody>,
        tls: Option<Arc<ClientTls>>,
    ) -> Result<(Response<hyper::body::Incoming>, TunnelLease), UpstreamError> {
        let tls = tls.as_ref().map(|tls| (tls, &self.tls_stats));
        let target = Target::new(host.address(), &host.endpoint, cluster, &host.cluster_stats, tls, self.spawner);
        let mut conn = pool.http2(&target, cluster.http.max_requests_per_connection, None).await?;
        let lease = conn.activity.lease();
        let response = conn.sender.send_request(request).await.map_err(|e| UpstreamError::from_hyper(&e))?;
        Ok((response, TunnelLease { _lease: lease }))
    }

    /// Sends an upgrade request (`Upgrade: websocket`) to `host` on a connection of its
    /// own, never pooled: after a `101` the connection belongs to the tunnel
    /// (`hyper::upgrade::on` on the response takes it over). Tunnels do not count against
    /// the cluster's `max_connections`.
    pub async fn open_upgrade(
        &self,
        host: &Host,
        cluster: &Cluster,
        request: Request<RequestBody>,
        tls: Option<Arc<ClientTls>>,
    ) -> Result<Response<hyper::body::Incoming>, UpstreamError> {
        let tls = tls.map(|tls| (tls, self.tls_stats.clone()));
        let dial = Dial::new(host.address(), &host.endpoint, cluster, &host.cluster_stats, tls, self.spawner);
        let endpoint = Arc::new(limits::EndpointConns::default());
        let Some(permit) = limits::connection(None, &endpoint) else { return Err(UpstreamError::Overflow) };
        let (mut sender, _activity) = dial.http1_upgradable(permit).await?;
        let request = request::http1(request, host.address())?;
        sender.send_request(request).await.map_err(|e| UpstreamError::from_hyper(&e))
    }

    /// Idle HTTP/1.1 connections and open HTTP/2 connections in the pools.
    pub fn pooled(&self) -> (usize, usize) {
        self.pools.counts()
    }

    /// Forgets connections found closed.
    pub fn prune(&self) {
        self.pools.prune();
    }

    /// Drains the connections of endpoints and clusters that `snapshot` no longer has (see
    /// [`Pools::retain_endpoints`]); returns how many left the pools. Called by the worker
    /// on every configuration change.
    pub fn drain_removed(&self, snapshot: &Snapshot) -> usize {
        self.pools.retain_endpoints(|cluster| membership(snapshot, cluster))
    }

    /// As [`drain_removed`](Self::drain_removed), for the named clusters only (those whose
    /// endpoints changed or that left).
    pub fn drain_removed_of<'a>(&self, snapshot: &Snapshot, clusters: impl IntoIterator<Item = &'a String>) -> usize {
        self.pools.retain_endpoints_of(clusters, |cluster| membership(snapshot, cluster))
    }

    async fn send_http1(
        pool: &Arc<ClusterPool>,
        target: &Target<'_>,
        (max_requests, http1_only): (Option<u32>, bool),
        mut request: Request<RequestBody>,
        breakers: Option<&Breakers<'_>>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        // A pooled connection may have been closed by the upstream just now. When that
        // happens before the request was written, hyper hands the request back and it goes
        // out on a fresh connection: nothing reached the upstream, so this is not a retry.
        loop {
            let (mut conn, reused) = pool.http1(target, breakers, http1_only).await?;
            let slot = match limits::active_request(breakers) {
                Ok(slot) => slot,
                Err(overflow) => {
                    // The connection stays the pool's, ready for the next request.
                    pool.checkin(target.address, conn).put();
                    return Err(overflow);
                }
            };
            conn.requests += 1;
            let lease = conn.activity.lease();
            match conn.sender.try_send_request(request).await {
                Ok(response) => {
                    let response = with_peer(response, &conn.activity);
                    let reusable = max_requests.is_none_or(|max| conn.requests < max);
                    let checkin = reusable.then(|| pool.checkin(target.address, conn));
                    return Ok(response.map(|body| UpstreamBody::new(body, lease, checkin).holding(slot)));
                }
                Err(mut error) => match error.take_message() {
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(UpstreamError::from_hyper(error.error())),
                },
            }
        }
    }
}

/// The endpoints of `cluster` in `snapshot`, as far as the snapshot knows them.
fn membership<'a>(snapshot: &'a Snapshot, name: &str) -> Membership<'a> {
    let Some(cluster) = snapshot.clusters.get(name) else { return Membership::Removed };
    if cluster.resource.discovery == DiscoveryType::OriginalDst {
        return Membership::Open; // hosts come from connections, not from configuration
    }
    snapshot.endpoints.get(name).map_or(Membership::Open, |assignment| {
        Membership::Endpoints(
            assignment.resource.localities.iter().flat_map(|l| &l.endpoints).map(|e| &e.address).collect(),
        )
    })
}
