//! One accepted connection: restore the original destination (hand-off), run the TLS
//! inspector if the listener has one, choose the
//! filter chain, terminate TLS if the chain has a TLS context, then hand the connection to
//! its terminal filter (HTTP connection manager or TCP proxy).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio::net::TcpStream;

use super::context::WorkerContext;
use super::filter_chain::{self, ConnectionInfo};
use super::filters::{Callouts, DownstreamConnection, NetworkFilterStatus};
use super::hcm::Secure;
use super::stream_info::StreamState;
use super::transport::SnapshotSecrets;
use super::{hcm, original_dst, proxy_protocol, tcp_proxy};
use crate::config::Listener;
use crate::config::listener::{FilterChain, ListenerFilterKind, ProxyProtocolConfig, TerminalFilter};
use crate::config::tls::DownstreamTlsContext;
use crate::store::Versioned;
use crate::tls::{self, Inspection, PrefixedStream, Refusal};

/// How long a TLS handshake may take when the chain sets no
/// `transport_socket_connect_timeout`. Envoy has no limit by default; Outrider bounds it
/// so that a client that connects and never finishes its handshake cannot hold a
/// connection slot forever (10 s is far beyond any real handshake).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<Versioned<Listener>>,
    context: Rc<WorkerContext>,
) {
    let _ = stream.set_nodelay(true);
    // Restores the original destination and hands off to the listener bound to it.
    let Some(original_dst::Accepted { listener, local, restored }) =
        original_dst::accept(&stream, listener, &context.listener_index, &context.clusters.store)
    else {
        return;
    };
    let info = ConnectionInfo::new(&listener.resource, local, restored, peer);
    serve_accepted(stream, info, listener, context).await
}

/// A connection to an internal listener (`internal_listener`), opened by this worker to an
/// `envoy_internal_address` endpoint (see `internal_listener`), with the filter state and
/// metadata it `carried` across. It has no IP addresses at either end, as in Envoy, whose
/// internal connections have `envoy://` addresses; here both are the unspecified
/// `0.0.0.0:0`, which no filter chain's prefix or port match takes for another. An
/// `original_dst` listener filter restores them from what was carried, as Envoy's does on
/// internal connections: the destination from the metadata's
/// `envoy.filters.listener.original_dst.local` or the filter state's `…local_ip`, the source
/// from the filter state's `…remote_ip` (Istio's HBONE sets them from the tunnel).
///
/// Returns `None` when no filter chain can take the connection, known before any byte is
/// read when no listener filter reads bytes for it: the connection is then refused, as
/// Envoy's opener sees it fail (a terminated `CONNECT` answers 503).
pub fn serve_internal(
    stream: DuplexStream,
    listener: Arc<Versioned<Listener>>,
    carried: StreamState,
    context: Rc<WorkerContext>,
) -> Option<impl Future<Output = ()>> {
    let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
    let (mut local, mut peer, mut restored) = (unspecified, unspecified, false);
    if listener.resource.listener_filters.iter().any(|f| f.kind == ListenerFilterKind::OriginalDst) {
        if let Some(destination) = carried.original_destination() {
            (local, restored) = (destination, true);
        }
        peer = carried.original_source().unwrap_or(peer);
    }
    let mut info = ConnectionInfo::new(&listener.resource, local, restored, peer);
    info.stream = (!carried.is_empty()).then(|| Arc::new(carried));
    let inspects = [ListenerFilterKind::TlsInspector, ListenerFilterKind::HttpInspector]
        .into_iter()
        .any(|kind| runs_listener_filter(&listener.resource, kind, local.port()))
        || proxy_protocol_filter(&listener.resource, local.port()).is_some();
    if !inspects && filter_chain::select(&listener.resource, &info).is_none() {
        return None;
    }
    Some(serve_accepted(stream, info, listener, context))
}

/// The rest of a connection's way once the listener that serves it is known.
async fn serve_accepted<S>(
    stream: S,
    mut info: ConnectionInfo,
    listener: Arc<Versioned<Listener>>,
    context: Rc<WorkerContext>,
) where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let (mut local, mut peer) = (info.local, info.peer);
    // The listener filters of the listener that serves the connection (after a hand-off,
    // the one bound to the original destination), as Envoy runs them.
    let (mut stream, mut read) = (stream, Vec::new());
    if let Some(config) = proxy_protocol_filter(&listener.resource, local.port()) {
        match Box::pin(read_proxy_header(&mut stream, &mut read, &listener.resource, &config)).await {
            Ok(proxy_protocol::Header::Proxied { source, destination }) => {
                (info.peer, info.local, info.local_restored) = (source, destination, true);
                (local, peer) = (destination, source);
            }
            Ok(proxy_protocol::Header::Local | proxy_protocol::Header::Absent) => {}
            Err(reason) => {
                tracing::debug!(listener = %listener.resource.name, %peer, %reason, "PROXY protocol filter closed the connection");
                return;
            }
        }
    }
    if runs_listener_filter(&listener.resource, ListenerFilterKind::TlsInspector, local.port()) {
        // Boxed, as each step below: the connection's task then keeps no room for a step
        // that is over (see the end of this function).
        match Box::pin(inspect(&mut stream, &mut read, &listener.resource)).await {
            Ok(Some(Inspection::Tls { server_name, application_protocols })) => {
                info.transport_protocol = Some("tls".to_owned());
                info.server_name = server_name;
                info.application_protocols = application_protocols;
            }
            Ok(Some(Inspection::NotTls) | None) => {}
            Err(reason) => {
                tracing::debug!(listener = %listener.resource.name, %peer, %reason, "TLS inspector closed the connection");
                return;
            }
        }
    }
    let tls = info.transport_protocol.as_deref() == Some("tls");
    if !tls && runs_listener_filter(&listener.resource, ListenerFilterKind::HttpInspector, local.port()) {
        match Box::pin(inspect_http(&mut stream, &mut read, &listener.resource)).await {
            Ok(Some(protocol)) => info.application_protocols = vec![protocol.to_owned()],
            Ok(None) => {}
            Err(reason) => {
                tracing::debug!(listener = %listener.resource.name, %peer, %reason, "HTTP inspector closed the connection");
                return;
            }
        }
    }
    let stream = PrefixedStream::new(read, stream);
    let Some(chain) = filter_chain::select(&listener.resource, &info) else {
        tracing::debug!(listener = %listener.resource.name, %peer, transport = ?info.transport_protocol, "no filter chain matches; closing");
        return;
    };
    // Connection limit filters run first, before TLS, as Envoy's network filters see the
    // connection as soon as its chain is chosen.
    let _admitted = match context.connection_limits.admit(
        &listener.resource.name,
        &chain.name,
        &chain.connection_limits,
    ) {
        Ok(admitted) => admitted,
        Err(limit) => {
            tracing::debug!(listener = %listener.resource.name, %peer, prefix = %limit.stat_prefix, "connection limit reached; closing");
            if let Some(delay) = limit.delay {
                Box::pin(tokio::time::sleep(delay)).await;
            }
            return;
        }
    };
    let drain = context
        .chain_drains
        .borrow_mut()
        .signal(&listener, chain, || context.clusters.store.load().listeners.get(&listener.resource.name).cloned());
    info.chain_drain = Some(drain.clone());
    let inbound_drain = info.inbound.then(|| context.draining_inbound.clone());
    let drain_time = context.drain_time;
    // Each way on is boxed: the task of an idle connection then holds only the state of
    // the way it took (plaintext or TLS, HTTP or TCP), not room for the largest of them.
    let serve = async {
        match &chain.tls {
            None => Box::pin(terminal(stream, info, chain, Secure::Plain, context)).await,
            Some(tls) => Box::pin(terminate_tls(stream, info, &listener, chain, tls, context)).await,
        }
    };
    // A connection whose chain an update changed or removed, or an inbound one when the
    // inbound listeners drain, has the drain time to end (HTTP connections are asked to
    // close); then it is closed, as Envoy closes what is left of a drained listener.
    let closed = Box::pin(async move {
        match inbound_drain {
            Some(inbound) => tokio::select! { () = drain.triggered() => {}, () = inbound.triggered() => {} },
            None => drain.triggered().await,
        }
        tokio::time::sleep(drain_time).await;
    });
    tokio::select! {
        () = serve => {}
        () = closed => tracing::debug!(%peer, "closed at the end of its listener's drain"),
    }
}

/// The listener's PROXY protocol filter, if it runs for connections to `port`.
fn proxy_protocol_filter(listener: &Listener, port: u16) -> Option<ProxyProtocolConfig> {
    listener.listener_filters.iter().find_map(|f| match f.kind {
        ListenerFilterKind::ProxyProtocol(config) if !f.disabled_when.as_ref().is_some_and(|p| p.matches(port)) => {
            Some(config)
        }
        _ => None,
    })
}

/// Whether the listener has a listener filter of `kind` that runs for connections to `port`.
fn runs_listener_filter(listener: &Listener, kind: ListenerFilterKind, port: u16) -> bool {
    listener
        .listener_filters
        .iter()
        .any(|f| f.kind == kind && !f.disabled_when.as_ref().is_some_and(|p| p.matches(port)))
}

/// The PROXY protocol header within `listener_filters_timeout`. On a timeout the
/// connection goes on without one only where the filter allows that; otherwise it closes
/// (continuing would take the header's bytes for the application's).
async fn read_proxy_header<S: AsyncRead + Unpin>(
    stream: &mut S,
    read: &mut Vec<u8>,
    listener: &Listener,
    config: &ProxyProtocolConfig,
) -> Result<proxy_protocol::Header, String> {
    let on_timeout = config.allow_without_header.then_some(proxy_protocol::Header::Absent);
    within_filters_timeout(listener, proxy_protocol::read_header(stream, read, config), on_timeout).await
}

/// The HTTP inspector within `listener_filters_timeout`. `Ok(None)`: not HTTP, or timed
/// out with `continue_on_listener_filters_timeout`.
async fn inspect_http<S: AsyncRead + Unpin>(
    stream: &mut S,
    read: &mut Vec<u8>,
    listener: &Listener,
) -> Result<Option<&'static str>, String> {
    let inspection = async { super::http_inspector::inspect(stream, read).await.map_err(|e| e.to_string()) };
    within_filters_timeout(listener, inspection, Some(None)).await
}

/// The TLS inspector within `listener_filters_timeout`. `Ok(None)`: it timed out and the
/// listener continues without what it would have found.
async fn inspect<S: AsyncRead + Unpin>(
    stream: &mut S,
    read: &mut Vec<u8>,
    listener: &Listener,
) -> Result<Option<Inspection>, String> {
    let inspection = async { tls::inspect(stream, read).await.map(Some).map_err(|e| e.to_string()) };
    within_filters_timeout(listener, inspection, Some(None)).await
}

/// `filter` within the listener's `listener_filters_timeout` (none: no limit). On a
/// timeout, `on_timeout` when the listener continues (`continue_on_listener_filters_timeout`)
/// and the filter can go on without its finding; otherwise the connection closes.
async fn within_filters_timeout<T>(
    listener: &Listener,
    filter: impl Future<Output = Result<T, String>>,
    on_timeout: Option<T>,
) -> Result<T, String> {
    let Some(limit) = listener.listener_filters_timeout else {
        return filter.await;
    };
    match tokio::time::timeout(limit, filter).await {
        Ok(result) => result,
        Err(_) => match on_timeout {
            Some(value) if listener.continue_on_listener_filters_timeout => Ok(value),
            _ => Err(format!("listener filters timed out after {limit:?}")),
        },
    }
}

async fn terminate_tls<S>(
    stream: S,
    info: ConnectionInfo,
    listener: &Arc<Versioned<Listener>>,
    chain: &FilterChain,
    context_tls: &DownstreamTlsContext,
    context: Rc<WorkerContext>,
) where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let stats = &context.clusters.tls.stats.downstream;
    // `listener.<address>.ssl.*` of the listener that serves the connection.
    let listener_stats = context.telemetry.listener(&listener.resource);
    let refused = |refusal: Refusal, reason: &dyn std::fmt::Display| {
        stats.refused(refusal);
        listener_stats.ssl.refused(refusal.stat_name());
        tracing::info!(peer = %info.peer, listener = %listener.resource.name, chain = %chain.name, %reason, "TLS handshake refused");
    };
    let config = {
        let snapshot = context.clusters.store.load();
        context.clusters.tls.cache.borrow_mut().server(listener, context_tls, &SnapshotSecrets(&snapshot))
    };
    let config = match config {
        Ok(config) => config,
        Err(error) => return refused(Refusal::NoConfig, &error),
    };
    let timeout = chain.transport_socket_connect_timeout.unwrap_or(DEFAULT_HANDSHAKE_TIMEOUT);
    let accepted = tls::accept(stream, &config, timeout, |error| refused(error.refusal, &error)).await;
    if let Some(accepted) = accepted {
        stats.handshake();
        listener_stats.ssl.handshake(accepted.peer.is_some());
        let secure =
            Secure::Tls { alpn: accepted.alpn, peer: accepted.peer, local_uri_san: config.local_uri_san.clone() };
        terminal(accepted.stream, info, chain, secure, context).await
    }
}

/// The chain's network filters, then its terminal filter.
async fn terminal<S>(
    stream: S,
    mut info: ConnectionInfo,
    chain: &FilterChain,
    secure: Secure,
    context: Rc<WorkerContext>,
) where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let mut connection = DownstreamConnection {
        peer: info.peer,
        local: info.local,
        server_name: info.server_name.clone(),
        tls: secure != Secure::Plain,
        peer_identity: match &secure {
            Secure::Tls { peer, .. } => peer.clone(),
            Secure::Plain => None,
        },
        local_uri_san: match &secure {
            Secure::Tls { local_uri_san, .. } => local_uri_san.clone(),
            Secure::Plain => None,
        },
        stream: info.stream.clone(),
    };
    let mut tcp_session = None;
    if !chain.network_filters.is_empty() {
        let filters = context.filters.network_of(&chain.network_filters, info.inbound);
        let callouts = Callouts::new(&context.clusters);
        // Boxed: the network filters' futures (callouts to ext_authz, say) are done before
        // the connection is served, and would otherwise size every connection's state.
        let status = Box::pin(filters.on_new_connection(&mut connection, &callouts)).await;
        if status == NetworkFilterStatus::Close {
            tracing::debug!(peer = %info.peer, chain = %chain.name, "a network filter closed the connection");
            return;
        }
        let alpn = match &secure {
            Secure::Tls { alpn, .. } => alpn.as_deref(),
            Secure::Plain => None,
        };
        tcp_session = filters.tcp_telemetry.as_ref().map(|t| t.session(&connection, alpn));
        // What the filters set is the connection's from now on: the TCP proxy carries it to
        // an internal upstream.
        info.stream.clone_from(&connection.stream);
    }
    let connection = Rc::new(connection);
    match &chain.terminal {
        TerminalFilter::HttpConnectionManager(manager) => {
            Box::pin(hcm::serve(stream, connection, info, secure, manager.clone(), context)).await
        }
        TerminalFilter::TcpProxy(proxy) => Box::pin(tcp_proxy::serve(stream, info, proxy, &context, tcp_session)).await,
    }
}
