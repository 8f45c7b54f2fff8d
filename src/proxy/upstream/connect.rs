//! Opening one upstream connection: the socket (TCP with `TCP_NODELAY`, optionally bound
//! to the cluster's source address; a Unix socket for `pipe` endpoints, an in-process pipe
//! for `envoy_internal_address` ones), TLS when the
//! endpoint's transport socket asks for it, the cluster's connect timeout (over both), the
//! HTTP/1.1 or HTTP/2 handshake, and the task that drives the connection until it fails,
//! is dropped by the pool, or stays idle too long.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::either::Either;

use super::RequestBody;
use super::activity::Activity;
use super::error::UpstreamError;
use super::limits::ConnectionPermit;
use super::raw::{self, RawConnection};
use crate::config::Address;
use crate::config::cluster::SourceAddresses;
use crate::config::cluster::{Cluster, DnsLookupFamily, Http2Settings};
use crate::config::endpoint::LbEndpoint;
use crate::proxy::byte_count::ByteCounted;
use crate::proxy::exec::Spawner;
use crate::proxy::flow_control;
use crate::proxy::stream_info::StreamState;
use crate::proxy::transport::HandshakeStats;
use crate::telemetry::{ClusterStats, ConnectionLife};
use crate::tls::{ClientAlpn, ClientTls, Refusal};

/// Where a request goes, borrowed: a request that finds a pooled connection copies
/// nothing (before, each request built a [`Dial`], cloning the cluster's stats and TLS
/// handles, reference counts that every worker writes). [`Target::dial`] makes the owned
/// settings only when a connection is opened.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub address: &'a Address,
    /// Its `additional_addresses` are tried by happy eyeballs with `address`.
    endpoint: &'a LbEndpoint,
    cluster: &'a Cluster,
    stats: &'a Arc<ClusterStats>,
    tls: Option<(&'a Arc<ClientTls>, &'a Arc<HandshakeStats>)>,
    spawner: Spawner,
}

impl<'a> Target<'a> {
    pub(crate) fn new(
        address: &'a Address,
        endpoint: &'a LbEndpoint,
        cluster: &'a Cluster,
        stats: &'a Arc<ClusterStats>,
        tls: Option<(&'a Arc<ClientTls>, &'a Arc<HandshakeStats>)>,
        spawner: Spawner,
    ) -> Self {
        Self { address, endpoint, cluster, stats, tls, spawner }
    }

    /// Which transport a pooled connection must have been made with (see
    /// [`Dial::transport_id`]).
    pub(crate) fn transport_id(&self) -> u64 {
        self.tls.map_or(0, |(tls, _)| tls.transport_id)
    }

    /// How long a pooled HTTP/1.1 connection may have been idle and still be used.
    pub(crate) fn idle_timeout(&self) -> Option<Duration> {
        self.cluster.http.idle_timeout
    }

    /// The owned settings to open a connection with.
    pub(crate) fn dial(&self) -> Dial {
        let tls = self.tls.map(|(tls, stats)| (tls.clone(), stats.clone()));
        Dial::new(self.address, self.endpoint, self.cluster, self.stats, tls, self.spawner)
    }
}

/// What a connection needs from its cluster, copied so that a connect in progress owns it.
#[derive(Debug, Clone)]
pub(crate) struct Dial {
    pub address: Address,
    /// The endpoint's `additional_addresses` (see [`crate::core::net::connect_any`]).
    pub additional: Box<[SocketAddr]>,
    pub connect_timeout: Duration,
    pub idle_timeout: Option<Duration>,
    pub bind: Option<SourceAddresses>,
    pub http2: Http2Settings,
    /// The cluster's `per_connection_buffer_limit_bytes` (see [`flow_control`]).
    pub buffer_limit: u32,
    /// The cluster's `dns_lookup_family`, for an endpoint that is a name.
    pub lookup_family: DnsLookupFamily,
    /// TLS to originate, with the counters its handshakes go to; `None` is plaintext.
    pub tls: Option<(Arc<ClientTls>, Arc<HandshakeStats>)>,
    /// `upstream_cx_*` of the cluster.
    pub stats: Arc<ClusterStats>,
    /// Where the connection's task runs.
    pub spawner: Spawner,
    /// What a connection to an internal listener carries across: the metadata its transport
    /// passes through. (A pooled connection is shared by requests, so no request's filter
    /// state crosses on it; that needs a raw connection, as a terminated `CONNECT` has.)
    pub carried: Option<Arc<StreamState>>,
}

/// Opens the socket, runs the TLS handshake if any, then the HTTP handshake `$then`.
macro_rules! over_transport {
    ($dial:expr, $alpn:expr, $then:ident, $permit:expr) => {{
        let started = Instant::now();
        match ($dial.socket().await?, &$dial.tls) {
            (Either::Left(stream), None) => $dial.$then(stream, $permit).await,
            (Either::Right(stream), None) => $dial.$then(stream, $permit).await,
            (Either::Left(stream), Some(tls)) => {
                let stream = $dial.handshake_tls(stream, tls, $alpn, started).await?;
                let san = peer_uri_san(stream.get_ref().1);
                let (sender, activity) = $dial.$then(stream, $permit).await?;
                activity.set_peer_uri_san(san);
                activity.set_local_uri_san(tls.0.local_uri_san.clone());
                Ok((sender, activity))
            }
            (Either::Right(stream), Some(tls)) => {
                let stream = $dial.handshake_tls(stream, tls, $alpn, started).await?;
                let san = peer_uri_san(stream.get_ref().1);
                let (sender, activity) = $dial.$then(stream, $permit).await?;
                activity.set_peer_uri_san(san);
                activity.set_local_uri_san(tls.0.local_uri_san.clone());
                Ok((sender, activity))
            }
        }
    }};
}

/// The first URI SAN of the upstream's certificate (Istio's peer principal).
fn peer_uri_san(session: &rustls::ClientConnection) -> Option<String> {
    let certificate = session.peer_certificates()?.first()?;
    crate::tls::PeerIdentity::of(certificate)?.uri_sans.into_iter().next()
}

impl Dial {
    pub(crate) fn new(
        address: &Address,
        endpoint: &LbEndpoint,
        cluster: &Cluster,
        stats: &Arc<ClusterStats>,
        tls: Option<(Arc<ClientTls>, Arc<HandshakeStats>)>,
        spawner: Spawner,
    ) -> Self {
        let carried = matches!(address, Address::Internal { .. })
            .then(|| Arc::new(raw::carried(cluster, endpoint, [None, None])));
        Self {
            spawner,
            stats: stats.clone(),
            address: address.clone(),
            additional: endpoint.additional_addresses.clone(),
            carried,
            connect_timeout: cluster.connect_timeout,
            idle_timeout: cluster.http.idle_timeout,
            bind: cluster.upstream_bind,
            http2: cluster.http.http2.clone(),
            buffer_limit: cluster.per_connection_buffer_limit_bytes,
            lookup_family: cluster.lookup_family(),
            tls,
        }
    }

    /// Which transport a pooled connection was made with: 0 for plaintext, else the TLS
    /// context's id (the same across secret versions, so rotation keeps the pool).
    pub(crate) fn transport_id(&self) -> u64 {
        self.tls.as_ref().map_or(0, |(tls, _)| tls.transport_id)
    }

    /// Opens an HTTP/1.1 connection; `permit` is its place in the pool, held until the
    /// connection ends.
    pub(crate) async fn http1(
        &self,
        permit: ConnectionPermit,
    ) -> Result<(http1::SendRequest<RequestBody>, Arc<Activity>), UpstreamError> {
        over_transport!(self, ClientAlpn::Http1, handshake1, permit)
    }

    /// Opens an HTTP/1.1 connection for one upgrade request (WebSocket): driven with
    /// upgrades, so that after a `101` the connection's bytes can be taken over.
    pub(crate) async fn http1_upgradable(
        &self,
        permit: ConnectionPermit,
    ) -> Result<(http1::SendRequest<RequestBody>, Arc<Activity>), UpstreamError> {
        over_transport!(self, ClientAlpn::Http1, handshake1_upgradable, permit)
    }

    /// Opens an HTTP/2 connection, as [`http1`](Self::http1).
    pub(crate) async fn http2(
        &self,
        permit: ConnectionPermit,
    ) -> Result<(http2::SendRequest<RequestBody>, Arc<Activity>), UpstreamError> {
        over_transport!(self, ClientAlpn::Http2, handshake2, permit)
    }

    /// The TLS handshake, within what the connect timeout leaves.
    async fn handshake_tls<T>(
        &self,
        io: T,
        (tls, stats): &(Arc<ClientTls>, Arc<HandshakeStats>),
        alpn: ClientAlpn,
        started: Instant,
    ) -> Result<tokio_rustls::client::TlsStream<T>, UpstreamError>
    where
        T: AsyncRead + AsyncWrite + Unpin,
    {
        let left = self.connect_timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, crate::tls::connect(io, tls, alpn)).await {
            Ok(Ok(stream)) => {
                stats.upstream.handshake();
                self.stats.ssl.handshake(true);
                Ok(stream)
            }
            Ok(Err(refused)) => {
                stats.upstream.refused(refused.refusal);
                self.stats.ssl.refused(refused.refusal.stat_name());
                tracing::info!(address = %self.address, reason = %refused, "upstream TLS handshake refused");
                Err(self.failure(format_args!("TLS error: {}", refused.reason)))
            }
            Err(_) => {
                stats.upstream.refused(Refusal::Timeout);
                self.stats.ssl.refused(Refusal::Timeout.stat_name());
                Err(UpstreamError::ConnectTimeout { address: self.address.to_string(), timeout: self.connect_timeout })
            }
        }
    }

    async fn handshake1<T>(
        &self,
        io: T,
        permit: ConnectionPermit,
    ) -> Result<(http1::SendRequest<RequestBody>, Arc<Activity>), UpstreamError>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (sender, connection) =
            self.http1_builder().handshake(TokioIo::new(self.counted(io))).await.map_err(|e| self.failure(e))?;
        let activity = Activity::new();
        self.drive(connection, activity.clone(), permit);
        Ok((sender, activity))
    }

    async fn handshake1_upgradable<T>(
        &self,
        io: T,
        permit: ConnectionPermit,
    ) -> Result<(http1::SendRequest<RequestBody>, Arc<Activity>), UpstreamError>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (sender, connection) =
            self.http1_builder().handshake(TokioIo::new(self.counted(io))).await.map_err(|e| self.failure(e))?;
        let activity = Activity::new();
        // No idle timeout: the tunnel's own end closes it.
        self.drive(connection.with_upgrades(), activity.clone(), permit);
        Ok((sender, activity))
    }

    async fn handshake2<T>(
        &self,
        io: T,
        permit: ConnectionPermit,
    ) -> Result<(http2::SendRequest<RequestBody>, Arc<Activity>), UpstreamError>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let settings = &self.http2;
        // Envoy's windows as far as the cluster's buffer limit allows: a response is held
        // here only up to it while its downstream reads slowly.
        let flow = flow_control::http2(
            self.buffer_limit,
            settings.initial_stream_window_size,
            settings.initial_connection_window_size,
        );
        let mut builder = http2::Builder::new(self.spawner);
        builder
            .timer(TokioTimer::new())
            .initial_stream_window_size(flow.stream_window)
            .initial_connection_window_size(flow.connection_window)
            .max_send_buf_size(flow.send_buffer)
            .header_table_size(settings.hpack_table_size);
        if let Some(keepalive) = &settings.keepalive {
            builder
                .keep_alive_interval(keepalive.interval.or(keepalive.connection_idle_interval))
                .keep_alive_timeout(keepalive.timeout)
                .keep_alive_while_idle(keepalive.interval.is_some());
        }
        let (sender, connection) =
            builder.handshake(TokioIo::new(self.counted(io))).await.map_err(|e| self.failure(e))?;
        let activity = Activity::new();
        self.drive(connection, activity.clone(), permit);
        Ok((sender, activity))
    }

    /// HTTP/1.1 with a read buffer sized by the cluster's buffer limit: how far a response
    /// is read ahead of a slow downstream, and the largest body chunk handed on.
    fn http1_builder(&self) -> http1::Builder {
        let mut builder = http1::Builder::new();
        builder.max_buf_size(flow_control::http1_upstream_buffer(self.buffer_limit));
        builder
    }

    /// Runs the connection on the worker's thread (see [`Spawner`]) until it ends or has been
    /// idle for the idle timeout; dropping it closes the socket, and the pool sees the
    /// sender closed. The permit goes with the connection: its end frees the circuit
    /// breaker's slot and wakes a request pending for a connection.
    fn drive<C>(&self, connection: C, activity: Arc<Activity>, permit: ConnectionPermit)
    where
        C: Future<Output = hyper::Result<()>> + Send + 'static,
    {
        let idle_timeout = self.idle_timeout;
        let address = self.address.clone();
        let life = ConnectionLife::open(
            &self.stats.upstream_cx_total,
            &self.stats.upstream_cx_active,
            &self.stats.upstream_cx_destroy,
            &self.stats.upstream_cx_length_ms,
        );
        self.spawner.spawn(async move {
            let _life = life;
            let _permit = permit;
            let idle = async move {
                match idle_timeout {
                    Some(timeout) => activity.idle_timeout(timeout).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                result = connection => {
                    if let Err(error) = result {
                        tracing::debug!(%address, %error, "upstream connection ended");
                    }
                }
                () = idle => tracing::debug!(%address, "upstream connection idle; closing"),
            }
        });
    }

    /// The connection's bytes count in the cluster's `upstream_cx_{rx,tx}_bytes_total`.
    fn counted<T>(&self, io: T) -> ByteCounted<T> {
        ByteCounted::new(io, &self.stats.upstream_cx_rx_bytes_total, &self.stats.upstream_cx_tx_bytes_total)
    }

    async fn socket(&self) -> Result<RawConnection, UpstreamError> {
        let carried = || self.carried.as_deref().cloned().unwrap_or_default();
        let connect = raw::connect(&self.address, &self.additional, self.bind, self.lookup_family, carried);
        match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(Ok(socket)) => Ok(socket),
            Ok(Err(error)) => Err(self.failure(error)),
            Err(_) => {
                self.stats.upstream_cx_connect_timeout.inc();
                self.stats.upstream_cx_connect_fail.inc();
                Err(UpstreamError::ConnectTimeout { address: self.address.to_string(), timeout: self.connect_timeout })
            }
        }
    }

    fn failure(&self, error: impl std::fmt::Display) -> UpstreamError {
        tracing::debug!(address = %self.address, %error, "upstream connection failed");
        self.stats.upstream_cx_connect_fail.inc();
        UpstreamError::ConnectFailure { address: self.address.to_string(), reason: error.to_string() }
    }
}
