//! The TCP proxy filter: pick a host of the cluster (the original destination for an
//! ORIGINAL_DST cluster), connect (originating TLS when the endpoint's transport socket
//! says so), copy bytes both ways. Istio's TCP telemetry rides on the bytes: the metadata
//! exchange frames at the front of each direction, and the connection's metrics
//! ([`crate::proxy::filters::istio_tcp`]).

mod timeouts;
mod tunnel;

use tunnel::PooledTunnelError;

use crate::proxy::byte_count::ByteCounted;
use crate::telemetry::ConnectionLife;
use std::rc::Rc;
use std::time::Instant;

use rand::Rng;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::either::Either;

use super::context::WorkerContext;
use super::filter_chain::ConnectionInfo;
use super::original_dst::DestinationSources;
use super::upstream::raw;
use crate::config::cluster::UpstreamProtocol;
use crate::config::listener::TcpProxy;
use crate::config::listener::tcp_proxy::TcpCluster;
use crate::config::listener::tcp_proxy::Tunneling;
use crate::lb::PickContext;
use crate::proxy::filters::istio_tcp::stream::{Counted, OnPeer, PeerReader};
use crate::proxy::filters::istio_tcp::{self, TcpSession};
use crate::tls::ClientAlpn;
use timeouts::{Active, Activity};

/// Reports the connection's Istio TCP metrics however `serve` ends.
struct ReportOnClose(Rc<TcpSession>);

impl Drop for ReportOnClose {
    fn drop(&mut self) {
        self.0.close();
    }
}

pub async fn serve<S>(
    downstream: S,
    info: ConnectionInfo,
    proxy: &TcpProxy,
    context: &Rc<WorkerContext>,
    session: Option<Rc<TcpSession>>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let activity = Activity::new();
    let max_duration = proxy.max_downstream_connection_duration.map(|limit| {
        timeouts::with_jitter(limit, proxy.max_downstream_connection_duration_jitter, &mut *context.rng.borrow_mut())
    });
    let downstream = Active::new(downstream, activity.clone());
    let proxied = proxy_connection(downstream, info, proxy, context, session, &activity);
    if let Err(limit) = timeouts::bounded(proxied, &activity, proxy.idle_timeout, max_duration).await {
        tracing::debug!(?limit, "tcp proxy: connection limit reached; closing both connections");
    }
}

/// The proxied connection, with `activity` marked by every byte that moves upstream.
async fn proxy_connection<S>(
    downstream: S,
    info: ConnectionInfo,
    proxy: &TcpProxy,
    context: &Rc<WorkerContext>,
    session: Option<Rc<TcpSession>>,
    activity: &Activity,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let _report = session.clone().map(ReportOnClose);
    let meter = session.as_ref().map(|s| s.meter.clone()).unwrap_or_default();
    let on_peer = session.as_ref().and_then(TcpSession::downstream_reader);
    let mut downstream = PeerReader::new(Counted::new(downstream, meter), on_peer);
    let frame = istio_tcp::own_frame(context.filters.node());
    if session.as_ref().is_some_and(|s| s.exchanges_downstream()) && downstream.write_all(&frame).await.is_err() {
        return;
    }
    let cluster_name = choose_cluster(&proxy.cluster, context);
    let snapshot = context.clusters.store.load();
    let Some(local) = context.clusters.get(&snapshot, &cluster_name) else {
        tracing::debug!(cluster = %cluster_name, "tcp proxy: unknown cluster; closing");
        return;
    };
    let hash = proxy.hash_source_ip.then(|| xxhash_source(&info));
    for _attempt in 0..proxy.max_connect_attempts.max(1) {
        let now = Instant::now();
        let ctx = PickContext { hash, attempt: 0, previous: &[], now };
        let sources = || DestinationSources {
            restored: info.local_restored.then_some(info.local),
            headers: None,
            streams: [None, info.stream.as_deref()],
        };
        let Some(host) = local.pick(&ctx, sources) else {
            if let Some(stats) = local.stats() {
                stats.upstream_cx_none_healthy.inc();
            }
            tracing::debug!(cluster = %cluster_name, "tcp proxy: no healthy upstream; closing");
            return;
        };
        let Ok(tls) = local.tls(&host.endpoint, &snapshot, &context.clusters.tls) else { return };
        let cluster = local.cluster();
        let _in_flight = host.stats.start(Instant::now());
        let stats = &host.cluster_stats;
        if let Some(tunneling) = proxy.tunneling.as_ref().filter(|_| pools_tunnels(cluster, &host)) {
            // A stream of a pooled connection, whose bytes the connection counts.
            let opened = tunnel::open_pooled(&local, &context.clusters.upstreams, &host, tls, tunneling, &info).await;
            let (tunnel, _lease) = match opened {
                Ok(opened) => opened,
                Err(PooledTunnelError::Connect(error)) => {
                    tracing::debug!(cluster = %cluster_name, %error, "tcp proxy: no connection for the tunnel");
                    host.stats.record(Instant::now(), now.elapsed(), false);
                    continue;
                }
                Err(PooledTunnelError::Tunnel(error)) => {
                    tracing::debug!(cluster = %cluster_name, %error, "tcp proxy: tunnel not opened; closing");
                    return;
                }
            };
            host.stats.record(Instant::now(), now.elapsed(), true);
            if let Some(session) = &session {
                session.upstream_connected(&cluster_name, false);
            }
            if let Err(error) = copy(&mut downstream, Active::new(tunnel, activity.clone()), session.as_deref()).await {
                tracing::debug!(cluster = %cluster_name, address = %host.address(), %error, "tcp proxy: tunnel ended");
            }
            return;
        }
        let connect = tokio::time::timeout(
            cluster.connect_timeout,
            raw::connect_host(&host, cluster, [None, info.stream.as_deref()]),
        )
        .await;
        let upstream = match connect {
            Ok(Ok(upstream)) => upstream,
            failed => {
                stats.upstream_cx_connect_fail.inc();
                if failed.is_err() {
                    stats.upstream_cx_connect_timeout.inc();
                }
                host.stats.record(Instant::now(), now.elapsed(), false);
                continue;
            }
        };
        let _life = ConnectionLife::open(
            &stats.upstream_cx_total,
            &stats.upstream_cx_active,
            &stats.upstream_cx_destroy,
            &stats.upstream_cx_length_ms,
        );
        let upstream = ByteCounted::new(upstream, &stats.upstream_cx_rx_bytes_total, &stats.upstream_cx_tx_bytes_total);
        let upstream = Active::new(upstream, activity.clone());
        let worker_tls = &context.clusters.tls.stats.upstream;
        let remaining = cluster.connect_timeout.saturating_sub(now.elapsed());
        let copied = match (&tls, &proxy.tunneling) {
            (None, None) => {
                host.stats.record(Instant::now(), now.elapsed(), true);
                if let Some(session) = &session {
                    session.upstream_connected(&cluster_name, false);
                }
                copy(&mut downstream, upstream, session.as_deref()).await
            }
            (tls, Some(tunneling)) => {
                let http2 = cluster.http.protocol == UpstreamProtocol::Http2;
                let upstream = match tls {
                    None => Either::Left(upstream),
                    Some(tls) => {
                        let alpn = if http2 { ClientAlpn::Http2 } else { ClientAlpn::Http1 };
                        let Some(upstream) = raw::handshake(upstream, tls, alpn, remaining, &host, worker_tls).await
                        else {
                            host.stats.record(Instant::now(), now.elapsed(), false);
                            continue;
                        };
                        Either::Right(upstream)
                    }
                };
                let Some(tunnel) = open_tunnel(upstream, tunneling, http2, &info, &cluster_name).await else { return };
                host.stats.record(Instant::now(), now.elapsed(), true);
                if let Some(session) = &session {
                    session.upstream_connected(&cluster_name, false);
                }
                copy(&mut downstream, tunnel, session.as_deref()).await
            }
            (Some(tls), None) => {
                let Some(mut upstream) =
                    raw::handshake(upstream, tls, ClientAlpn::Tcp, remaining, &host, worker_tls).await
                else {
                    host.stats.record(Instant::now(), now.elapsed(), false);
                    continue;
                };
                host.stats.record(Instant::now(), now.elapsed(), true);
                // Istio's upstream metadata exchange, when the ALPN says the peer speaks it.
                let alpn = upstream.get_ref().1.alpn_protocol();
                let exchange = cluster.metadata_exchange.as_ref();
                let exchange = exchange.is_some_and(|e| alpn == Some(e.protocol.as_bytes()));
                if exchange && upstream.write_all(&frame).await.is_err() {
                    return;
                }
                let on_peer = match &session {
                    Some(session) => {
                        // The upstream's SPIFFE identity, Istio's client-side principal.
                        let certificate = upstream.get_ref().1.peer_certificates().and_then(|c| c.first());
                        let identity = certificate.and_then(|c| crate::tls::PeerIdentity::of(c));
                        session.set_upstream_san(identity.and_then(|i| i.uri_sans.into_iter().next()));
                        session.upstream_connected(&cluster_name, exchange)
                    }
                    None => exchange.then(|| Rc::new(istio_tcp::IgnorePeer) as Rc<dyn OnPeer>),
                };
                copy(&mut downstream, PeerReader::new(upstream, on_peer), session.as_deref()).await
            }
        };
        if let Err(error) = copied {
            tracing::debug!(cluster = %cluster_name, address = %host.address(), %error, "tcp proxy: connection ended");
        }
        return;
    }
}

/// Whether tunnels to `host` are streams of the cluster's pooled HTTP/2 connections: over
/// HTTP/2 to an address that is not an internal listener (a connection to one carries the
/// downstream connection's filter state, so it is that connection's own).
fn pools_tunnels(cluster: &crate::config::Cluster, host: &crate::lb::Host) -> bool {
    cluster.http.protocol == UpstreamProtocol::Http2
        && !matches!(host.address(), crate::config::Address::Internal { .. })
}

/// [`tunnel::open`], logged when it fails: the downstream connection then closes.
async fn open_tunnel<IO>(
    upstream: IO,
    tunneling: &Tunneling,
    http2: bool,
    info: &ConnectionInfo,
    cluster_name: &str,
) -> Option<tunnel::Tunnel<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin + 'static,
{
    match tunnel::open(upstream, tunneling, http2, info).await {
        Ok(tunnel) => Some(tunnel),
        Err(error) => {
            tracing::debug!(cluster = %cluster_name, %error, "tcp proxy: tunnel not opened; closing");
            None
        }
    }
}

/// The cluster of this connection: the one named, or one of the weighted ones drawn by
/// weight.
fn choose_cluster(cluster: &TcpCluster, context: &WorkerContext) -> String {
    match cluster {
        TcpCluster::Cluster(name) => name.clone(),
        TcpCluster::Weighted(clusters) => {
            let total: u64 = clusters.iter().map(|(_, w)| u64::from(*w)).sum();
            let mut point = context.rng.borrow_mut().random_range(0..total.max(1));
            clusters
                .iter()
                .find(|(_, w)| {
                    let hit = point < u64::from(*w);
                    point = point.saturating_sub(u64::from(*w));
                    hit
                })
                .map(|(name, _)| name.clone())
                .unwrap_or_default()
        }
    }
}

/// Copies both ways until both ends close; meanwhile a connection with Istio's TCP
/// metrics reports its bytes every `tcp_reporting_duration`, as Istio does.
async fn copy<D, U>(downstream: &mut D, mut upstream: U, session: Option<&TcpSession>) -> std::io::Result<(u64, u64)>
where
    D: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let copy = tokio::io::copy_bidirectional(downstream, &mut upstream);
    let Some((session, period)) = session.and_then(|s| Some((s, s.reporting_period()?))) else {
        return copy.await;
    };
    tokio::pin!(copy);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        tokio::select! {
            copied = &mut copy => return copied,
            _ = ticks.tick() => session.report_progress(),
        }
    }
}

/// Envoy hashes the source IP as a string with xxHash64 (seed 0).
fn xxhash_source(info: &ConnectionInfo) -> u64 {
    xxhash_rust::xxh64::xxh64(info.peer.ip().to_string().as_bytes(), 0)
}
