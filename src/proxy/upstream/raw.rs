//! The socket under every upstream connection: TCP to an IP endpoint (its
//! `additional_addresses` raced with it, as Envoy's happy eyeballs; from the cluster's
//! `upstream_bind_config` source address when it has one: Istio binds inbound passthrough
//! connections to 127.0.0.6, which its iptables rules let through instead of capturing
//! them again), TCP to the address a name resolves to, a Unix socket for a `pipe`, or a
//! pipe to an internal listener of this worker. The HTTP pools put TLS and HTTP on it; the
//! TCP proxy and a terminated `CONNECT` take its bytes as they are, after the upstream TLS
//! handshake ([`handshake`]) when the endpoint's transport socket asks for one.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio_util::either::Either;

use crate::config::Address;
use crate::config::cluster::{Cluster, DnsLookupFamily, SourceAddresses, UpstreamTransport};
use crate::config::endpoint::LbEndpoint;
use crate::lb::Host;
use crate::proxy::internal_listener;
use crate::proxy::stream_info::StreamState;
use crate::tls::TlsStats;
use crate::tls::{ClientAlpn, ClientTls, Refusal};

/// What a connection runs over, when it is not TCP.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A socket: TCP, the common case, or one of the rare others, boxed.
pub type RawConnection = Either<TcpStream, Box<dyn Io>>;

/// A socket to `address`, with the endpoint's `additional` addresses, the cluster's
/// source address and its `dns_lookup_family`; a connection to an internal listener starts
/// with `carried` (see [`carried`]).
pub async fn connect(
    address: &Address,
    additional: &[SocketAddr],
    bind: Option<SourceAddresses>,
    lookup_family: DnsLookupFamily,
    carried: impl FnOnce() -> StreamState,
) -> std::io::Result<RawConnection> {
    let bind_for = |peer| bind.map(|b| b.for_peer(peer));
    let tcp = match address {
        Address::Socket(addr) if !additional.is_empty() => {
            let addresses: Vec<SocketAddr> = std::iter::once(*addr).chain(additional.iter().copied()).collect();
            crate::core::net::connect_any(&addresses, bind_for).await?
        }
        Address::Socket(addr) => crate::core::net::connect_tcp(*addr, bind_for(*addr)).await?,
        Address::Dns { host, port } => {
            let resolved = tokio::net::lookup_host((host.as_str(), *port)).await?;
            let addr = lookup_family.pick(resolved).ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, "the name resolved to no address of its family")
            })?;
            crate::core::net::connect_tcp(addr, bind_for(addr)).await?
        }
        Address::Pipe(path) => return Ok(Either::Right(Box::new(UnixStream::connect(path).await?))),
        Address::Internal { server_listener_name, .. } => {
            return Ok(Either::Right(Box::new(internal_listener::connect(server_listener_name, carried())?)));
        }
    };
    Ok(Either::Left(tcp))
}

/// [`connect`] to `host` of `cluster`, for a request and connection whose filter state is
/// `downstream` (the request's, then the connection's).
pub async fn connect_host(
    host: &Host,
    cluster: &Cluster,
    downstream: [Option<&StreamState>; 2],
) -> std::io::Result<RawConnection> {
    let LbEndpoint { additional_addresses, .. } = host.endpoint.as_ref();
    let carried = || carried(cluster, &host.endpoint, downstream);
    connect(host.address(), additional_addresses, cluster.upstream_bind, cluster.lookup_family(), carried).await
}

/// What a connection to the internal listener `endpoint` carries across: the filter state
/// of `downstream` (a request's, then its connection's) shared with the upstream, and the
/// metadata that the endpoint's transport socket passes through (`internal_upstream`'s
/// `passthrough_metadata`, the endpoint's then the cluster's, as Envoy copies them).
pub fn carried(cluster: &Cluster, endpoint: &LbEndpoint, downstream: [Option<&StreamState>; 2]) -> StreamState {
    let mut carried = StreamState::default();
    // Only the internal upstream transport carries anything, as in Envoy.
    if let UpstreamTransport::Internal(internal) = cluster.upstream_transport(endpoint) {
        for state in downstream.into_iter().flatten() {
            carried.filter_state.extend_absent(state.filter_state.shared_with_upstream());
        }
        for namespace in &internal.host_metadata {
            if let Some(fields) = endpoint.metadata.as_ref().and_then(|m| m.namespace(namespace)) {
                carried.metadata.0.insert(namespace.clone(), fields);
            }
        }
        for (namespace, fields) in &internal.cluster_metadata {
            carried.metadata.0.entry(namespace.clone()).or_insert_with(|| fields.clone());
        }
    }
    carried
}

/// The upstream TLS handshake of a raw connection within `remaining` of the connect
/// timeout, counted in the worker's (`worker`) and the cluster's TLS stats; `None` when it
/// was refused or timed out.
pub async fn handshake<IO>(
    upstream: IO,
    tls: &ClientTls,
    alpn: ClientAlpn,
    remaining: Duration,
    host: &Host,
    worker: &TlsStats,
) -> Option<tokio_rustls::client::TlsStream<IO>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let cluster = &host.cluster_stats.ssl;
    match tokio::time::timeout(remaining, crate::tls::connect(upstream, tls, alpn)).await {
        Ok(Ok(upstream)) => {
            worker.handshake();
            cluster.handshake(true);
            Some(upstream)
        }
        Ok(Err(refused)) => {
            worker.refused(refused.refusal);
            cluster.refused(refused.refusal.stat_name());
            tracing::info!(address = %host.address(), reason = %refused, "upstream TLS handshake refused");
            None
        }
        Err(_) => {
            worker.refused(Refusal::Timeout);
            cluster.refused(Refusal::Timeout.stat_name());
            None
        }
    }
}
