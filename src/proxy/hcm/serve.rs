//! Serving one downstream HTTP connection: the codec (HTTP/1.1 or HTTP/2), the stream
//! limits around each request, and the connection's end — by the client, by a drain, or
//! by one of Envoy's connection limits (see [`super::lifetime`]).

use crate::proxy::byte_count::ByteCounted;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::{HttpService, service_fn};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

use super::super::context::WorkerContext;
use super::super::exec::LocalExec;
use super::super::filter_chain::ConnectionInfo;
use super::super::headers::Downstream;
use super::codec::{self, Protocol};
use super::lifetime::{Close, Lifetime};
use super::metered::Metered;
use super::observed::handle;
use super::stream::StreamReset;
use super::stream_timer::StreamTimer;
use super::upgrade::UpgradeSlot;
use super::{Exchange, ProxyBody, Secure, stream};
use crate::config::listener::HttpConnectionManager;
use crate::config::overload::ActionKind;
use crate::core::shutdown::Signal;
use crate::proxy::filters::DownstreamConnection;
use crate::telemetry::HttpStats;
use crate::tls::PrefixedStream;

type Served = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, StreamReset>>>>;

/// Serves one downstream connection until it closes. The codec type decides the protocol,
/// or with `AUTO` ALPN over TLS (`h2` → HTTP/2, `http/1.1` → HTTP/1.1), else the first
/// bytes (the HTTP/2 preface or not), as Envoy's codecs do.
pub async fn serve<S>(
    stream: S,
    connection: Rc<DownstreamConnection>,
    info: ConnectionInfo,
    secure: Secure,
    manager: Arc<HttpConnectionManager>,
    context: Rc<WorkerContext>,
) where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let alpn = match &secure {
        Secure::Tls { alpn, .. } => alpn.as_deref(),
        Secure::Plain => None,
    };
    let downstream = Downstream { peer: info.peer, local: info.local, tls: secure != Secure::Plain };
    // Resolved once per connection from the worker's cache: no look-up per request.
    let stats = context.telemetry.http(&manager.stat_prefix);
    let access_logs = context.telemetry.access_logs(&manager.access_log, &context.clusters);
    // Built once per connection manager and shared; found once per connection.
    let filters = context.filters.http_of(&manager, info.inbound);
    let tracer = context.telemetry.tracer(&manager, &context.clusters.store).map(Rc::new);
    let (inbound, outbound) = (info.inbound, info.outbound);
    let overloadable = info.overloadable;
    let keepalive = context.overload.config().actions.iter().any(|a| a.kind == ActionKind::DisableHttpKeepalive);
    // Told by a request answered while `disable_http_keepalive` is in force, or while the
    // server fails health checks on a DEFAULT-drain listener.
    let health_check_drain = info.drains_on_health_check_failure;
    let overload_drain = ((overloadable && keepalive) || health_check_drain).then(|| Rc::new(Notify::new()));
    let buffer_limit = info.buffer_limit;
    let _connection = stats.connection();
    // A full drain closes every connection (HTTP/1.1 at once when idle); an inbound-only
    // drain, and an update of the connection's filter chain, ask it to close after its
    // responses (see `Ends`).
    let draining = context.draining.clone();
    let soft_drains = SoftDrains([info.inbound.then(|| context.draining_inbound.clone()), info.chain_drain.clone()]);
    let close_after_response = Rc::new(soft_drains.clone());
    let original_dst = info.local_restored.then_some(info.local);
    let lifetime = Lifetime::new(&manager.common);
    let stream = ByteCounted::new(stream, &stats.downstream_cx_rx_bytes_total, &stats.downstream_cx_tx_bytes_total);
    let mut stream = Metered::new(stream, lifetime.clone());
    let (protocol, read) = match codec::known(&manager, alpn) {
        Some(protocol) => (protocol, Vec::new()),
        None => {
            // A client that never speaks is bounded by the idle timeout, as in Envoy.
            let limit = manager.common.idle_timeout.unwrap_or(codec::SNIFF_LIMIT);
            // Boxed: a timer and a read that are over once the protocol is known.
            match Box::pin(tokio::time::timeout(limit, codec::sniff(&mut stream))).await {
                Ok(Ok(found)) => found,
                Ok(Err(_)) => return,
                Err(_) => {
                    stats.downstream_cx_idle_timeout.inc();
                    return;
                }
            }
        }
    };
    let io = TokioIo::new(PrefixedStream::new(read, stream));
    let upgrades: Rc<UpgradeSlot> = Rc::default();
    let service = {
        let (manager, stats, lifetime, upgrades) = (manager.clone(), stats.clone(), lifetime.clone(), upgrades.clone());
        let (tracer, overload_drain) = (tracer.clone(), overload_drain.clone());
        let close_after_response = close_after_response.clone();
        service_fn(move |request: Request<Incoming>| -> Served {
            let (manager, context, stats, access_logs, lifetime) =
                (manager.clone(), context.clone(), stats.clone(), access_logs.clone(), lifetime.clone());
            let (filters, connection, upgrades) = (filters.clone(), connection.clone(), upgrades.clone());
            let (tracer, overload_drain) = (tracer.clone(), overload_drain.clone());
            let close_after_response = close_after_response.clone();
            let timer = StreamTimer::default();
            Box::pin(async move {
                let mut request = request;
                let http1 = request.version() == http::Version::HTTP_11;
                let version = request.version();
                if version == http::Version::HTTP_10 {
                    http10_host(&mut request, &manager.http1.default_host_for_http_10);
                }
                if version != http::Version::HTTP_2
                    && !request.headers().contains_key(http::header::HOST)
                    && request.uri().authority().is_none()
                {
                    // Envoy's 400 for a request with no authority to route by
                    // (`missing_host_header`): empty, and the connection closes.
                    stats.downstream_rq_total.inc();
                    stats.downstream_rq_http1_total.inc();
                    stats.charge(400);
                    return Ok(missing_host(&manager.server_name));
                }
                // What follows a CONNECT's head would be its tunnel: never read as a request.
                let closes = request.method() == http::Method::CONNECT && version != http::Version::HTTP_2;
                let exchange = Exchange {
                    downstream,
                    connection: &connection,
                    original_dst,
                    manager: &manager,
                    context: &context,
                    filters: &filters,
                    upgrades: http1.then_some(&*upgrades),
                    tracer: tracer.as_deref(),
                    inbound,
                    outbound,
                    overloadable,
                    overload_drain: overload_drain.as_deref(),
                    health_check_drain,
                    buffer_limit,
                    timer: &timer,
                };
                let run = |request| handle(request, exchange, stats.clone(), &access_logs);
                let mut response = stream::limited(request, &timer, &lifetime, &manager, &stats, run).await?;
                if response.status() == http::StatusCode::SWITCHING_PROTOCOLS && upgrades.borrow().is_none() {
                    // A 101 that no allowed upgrade asked for (an upstream switching on a
                    // plain request): never a tunnel, Envoy's protocol error instead.
                    response = upstream_protocol_error(&manager.server_name);
                }
                if closes || (http1 && close_after_response.asked()) {
                    response.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
                }
                Ok(response)
            })
        })
    };
    let ends = Ends {
        draining,
        soft_drains,
        lifetime,
        stats: stats.clone(),
        peer: info.peer,
        overload_drain: overload_drain.clone(),
    };
    // Boxed, so that an HTTP/1.1 connection's task holds no room for HTTP/2's state.
    match protocol {
        Protocol::Http1 => {
            let connection = codec::http1(&manager).serve_connection(io, service);
            Box::pin(serve_http1(connection, &ends, &manager, &upgrades)).await
        }
        Protocol::Http2 => {
            let connection = codec::http2(&manager, buffer_limit).serve_connection(io, service);
            Box::pin(serve_http2(connection, &ends)).await
        }
    }
}

/// Envoy's 502 for an upstream response it cannot take as the answer to its request.
fn upstream_protocol_error(server: &str) -> Response<ProxyBody> {
    use http_body_util::BodyExt;
    const BODY: &str = "upstream connect error or disconnect/reset before headers. reset reason: protocol error";
    let body = http_body_util::Full::new(bytes::Bytes::from_static(BODY.as_bytes()))
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut response = Response::new(body);
    *response.status_mut() = http::StatusCode::BAD_GATEWAY;
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain"));
    if let Ok(server) = http::HeaderValue::from_str(server) {
        headers.insert(http::header::SERVER, server);
    }
    response
}

/// Envoy's 400 for an HTTP/1 request without `Host` (and no authority in its target).
fn missing_host(server: &str) -> Response<ProxyBody> {
    use http_body_util::BodyExt;
    let mut response = Response::new(http_body_util::Empty::new().map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = http::StatusCode::BAD_REQUEST;
    let headers = response.headers_mut();
    if let Ok(server) = http::HeaderValue::from_str(server) {
        headers.insert(http::header::SERVER, server);
    }
    headers.insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    response
}

/// `default_host_for_http_10`: the `Host` an HTTP/1.0 request without one is given (the
/// codec takes HTTP/1.0 only with `accept_http_10`), as Envoy's codec gives it.
fn http10_host(request: &mut Request<Incoming>, default_host: &str) {
    // An absolute-form target names its own authority.
    if default_host.is_empty()
        || request.headers().contains_key(http::header::HOST)
        || request.uri().authority().is_some()
    {
        return;
    }
    if let Ok(host) = http::HeaderValue::from_str(default_host) {
        request.headers_mut().insert(http::header::HOST, host);
    }
}

/// What may end a connection besides its client.
#[derive(Clone)]
struct Ends {
    /// The worker drains: the connection closes (HTTP/1.1 at once when idle).
    draining: Signal,
    /// What asks the connection to close after its responses.
    soft_drains: SoftDrains,
    lifetime: Arc<Lifetime>,
    stats: Arc<HttpStats>,
    peer: std::net::SocketAddr,
    /// Set when `disable_http_keepalive` is configured and applies; told when a response
    /// went out while it was in force.
    overload_drain: Option<Rc<Notify>>,
}

impl Ends {
    /// [`next`](Self::next) on a task of its own (the worker's local set). The connection's
    /// task is woken for every request; had it polled `next` itself, each wake would poll
    /// the drain signal, the overload notification and the lifetime's watch again. It
    /// polls one channel instead. The task is aborted with the watch.
    fn watch(&self) -> EndsWatch {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let ends = self.clone();
        let task = tokio::task::spawn_local(async move {
            let _ = tx.send(ends.next().await);
        });
        EndsWatch { rx: Some(rx), task: task.abort_handle() }
    }

    /// Resolves when the connection should stop taking requests.
    async fn next(&self) -> Ending {
        let reason = tokio::select! {
            _ = self.draining.clone().triggered() => return Ending::Drain,
            // As Envoy drains a listener: an HTTP/1.1 connection answers its next request
            // with `connection: close` and an idle one stays until the drain is over (closing
            // it at once races a client sending on it); HTTP/2 gets GOAWAY.
            _ = self.soft_drains.triggered() => return Ending::CloseAfterResponses,
            // Drained as Envoy drains: HTTP/1 closes after its response, HTTP/2 gets GOAWAY.
            _ = told(self.overload_drain.as_deref()) => return Ending::Drain,
            reason = self.lifetime.until_close() => reason,
        };
        let stats = &self.stats;
        match reason {
            Close::Idle => stats.downstream_cx_idle_timeout.inc(),
            Close::MaxDuration => stats.downstream_cx_max_duration_reached.inc(),
            // Counted when the last request arrived.
            Close::MaxRequests => {}
            Close::PrematureResets => {
                stats.downstream_rq_too_many_premature_resets.inc();
                tracing::debug!(peer = %self.peer, "too many premature stream resets; closing");
                return Ending::Drop(reason);
            }
        }
        Ending::Drain
    }

    /// These ends without the requests to close after responses, once one was told.
    fn without_soft_drains(&self) -> Ends {
        Ends { soft_drains: SoftDrains([None, None]), ..self.clone() }
    }
}

/// What asks a connection to close after its responses: the inbound listeners' drain
/// (`/drain_listeners?inboundonly`, a terminating pod's sidecar) for an inbound connection,
/// and an LDS update that changed or removed the connection's filter chain.
#[derive(Clone)]
struct SoftDrains([Option<Signal>; 2]);

impl SoftDrains {
    /// Asked already: each HTTP/1.1 response reads it (no lock, see `Signal::is_triggered`),
    /// so that a response that goes out before the connection's watch has run says
    /// `connection: close` too.
    fn asked(&self) -> bool {
        self.0.iter().flatten().any(Signal::is_triggered)
    }

    async fn triggered(&self) {
        let [first, second] = self.0.clone();
        tokio::select! {
            () = triggered(first) => {}
            () = triggered(second) => {}
        }
    }
}

/// Why a connection stops taking requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Drained: HTTP/1.1 closes after the response in progress (at once when idle), HTTP/2
    /// gets GOAWAY.
    Drain,
    /// HTTP/1.1 answers with `connection: close` from now on; HTTP/2 gets GOAWAY.
    CloseAfterResponses,
    /// Dropped at once.
    Drop(Close),
}

/// The outcome of [`Ends::next`], from its task.
struct EndsWatch {
    /// `None` once told.
    rx: Option<tokio::sync::oneshot::Receiver<Ending>>,
    task: tokio::task::AbortHandle,
}

impl EndsWatch {
    /// [`Ends::next`]'s answer, once. Pending for ever after (and if the watch ended
    /// without a word).
    async fn next(&mut self) -> Ending {
        if let Some(rx) = self.rx.as_mut()
            && let Ok(close) = rx.await
        {
            self.rx = None;
            return close;
        }
        self.rx = None;
        std::future::pending().await
    }
}

impl Drop for EndsWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn triggered(signal: Option<Signal>) {
    match signal {
        Some(signal) => signal.triggered().await,
        None => std::future::pending().await,
    }
}

async fn told(notify: Option<&Notify>) {
    match notify {
        Some(notify) => notify.notified().await,
        None => std::future::pending().await,
    }
}

type Io<S> = TokioIo<PrefixedStream<Metered<S>>>;

async fn serve_http1<S, Svc>(
    mut connection: hyper::server::conn::http1::Connection<Io<S>, Svc>,
    ends: &Ends,
    manager: &HttpConnectionManager,
    upgrades: &UpgradeSlot,
) where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
    Svc: HttpService<Incoming, ResBody = ProxyBody, Error = StreamReset> + Unpin,
    Svc::Future: Unpin,
{
    let mut watch = ends.watch();
    let result = loop {
        tokio::select! {
            result = std::future::poll_fn(|cx| connection.poll_without_shutdown(cx)) => break result,
            ending = watch.next() => match ending {
                Ending::Drop(_) => return,
                // HTTP/1.1 closes after the response in progress (at once when idle).
                Ending::Drain => Pin::new(&mut connection).graceful_shutdown(),
                // Each response now says `connection: close` (`SoftDrains::asked`); still
                // closed at once by a drain of the worker or the lifetime's end.
                Ending::CloseAfterResponses => watch = ends.without_soft_drains().watch(),
            }
        }
    };
    let stats = &ends.stats;
    let error = result.err();
    let timed_out = error.as_ref().is_some_and(hyper::Error::is_timeout);
    let parts = connection.into_parts();
    let mut io = parts.io.into_inner();
    let upgraded = upgrades.borrow_mut().take();
    if error.is_none()
        && let Some(upstream) = upgraded
    {
        // hyper wrote the `101` and handed the socket back: the tunnel takes it.
        return super::upgrade::tunnel(io, parts.read_buf, upstream).await;
    }
    match &error {
        Some(e) if e.is_parse() => {
            // A head the codec refuses: Envoy's answer (400, 426, 431 or 501) and the
            // connection closes, as Envoy's HTTP/1 codec does; counted as the request it was.
            let status = codec::refusal_status(e, &parts.read_buf, manager.http1.accept_http_10);
            stats.downstream_cx_protocol_error.inc();
            stats.downstream_rq_total.inc();
            stats.downstream_rq_http1_total.inc();
            stats.charge(status.as_u16());
            let _ = io.write_all(&codec::refusal_response(status, &manager.server_name)).await;
        }
        // request_headers_timeout with a head begun: Envoy's 408. Between requests (no
        // byte of the next one yet) the connection just closes.
        Some(_) if timed_out && !parts.read_buf.is_empty() => {
            stats.downstream_rq_header_timeout.inc();
            stats.downstream_rq_total.inc();
            stats.downstream_rq_http1_total.inc();
            stats.charge(408);
            let _ = io.write_all(&codec::header_timeout_response(&manager.server_name)).await;
        }
        Some(e) => tracing::debug!(peer = %ends.peer, error = %e, "downstream connection ended"),
        None => {}
    }
    let _ = io.shutdown().await;
}

async fn serve_http2<S, Svc>(connection: hyper::server::conn::http2::Connection<Io<S>, Svc, LocalExec>, ends: &Ends)
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
    Svc: HttpService<Incoming, ResBody = ProxyBody, Error = StreamReset>,
    Svc::Future: 'static,
{
    tokio::pin!(connection);
    let mut watch = ends.watch();
    let result = loop {
        tokio::select! {
            result = connection.as_mut() => break result,
            ending = watch.next() => {
                if let Ending::Drop(_) = ending {
                    return;
                }
                // GOAWAY; streams already accepted are answered.
                connection.as_mut().graceful_shutdown();
            }
        }
    };
    if let Err(e) = result {
        if protocol_error(&e) {
            ends.stats.downstream_cx_protocol_error.inc();
        }
        tracing::debug!(peer = %ends.peer, error = %e, "downstream connection ended");
    }
}

/// An HTTP/2 connection the h2 library closed for the client's protocol error (it sent
/// GOAWAY).
fn protocol_error(error: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return h2.is_go_away() && h2.is_library();
        }
        source = e.source();
    }
    false
}
