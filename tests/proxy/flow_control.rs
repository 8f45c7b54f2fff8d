//! Flow control: `per_connection_buffer_limit_bytes` (left at Envoy's default, 1 MiB, on
//! both the listener and the cluster) bounds what a slow peer makes an Outrider process
//! hold, in both directions, over HTTP/1.1 and HTTP/2.
//!
//! What is measured, in a separate `outrider` process per test (its RSS read from
//! `/proc/<pid>/status`):
//!
//! - Slow readers: 200 clients each GET a 100 MB response from a fast backend, read the
//!   first MiB, then stop reading. Once every backend writer is blocked (its socket full:
//!   nothing anywhere between it and its client takes more), the process's resident set
//!   (and its peak so far) must be under [`rss_bound`]. Then a subset of the clients reads
//!   its response to the end (length and xxHash64 of all 100 MB checked) while the others
//!   go away; the peak over the whole run is checked again. Reading all 200 × 100 MB
//!   through a debug build would take minutes and prove nothing more: the bound is about
//!   what is held while the readers are stalled.
//! - Slow uploads: 200 clients each POST a 100 MB body to a backend that reads the first
//!   MiB of each, then stops reading. Once every client is blocked (HTTP/1.1: its socket
//!   full; HTTP/2: no flow-control window left), the same bound. Then the backend reads on,
//!   a subset of the uploads completes (the backend answers each body's length and hash),
//!   the others are abandoned.
//! - Window caps (HTTP/2 on both sides): a client that never reads one response stops
//!   Outrider reading from the upstream after about the limit; a client whose upstream
//!   never reads its request can send only about the limit. Both wait until the sender is
//!   out of window (a warm-up exchange first, so that the windows seen are the final
//!   ones): with Envoy's 256 MiB windows advertised, the whole 64 MiB would go through.
//!
//! No assertion is about timing: each waits for a state (every sender blocked) that a
//! bounded proxy reaches and an unbounded one does not, then checks sizes.

use std::convert::Infallible;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::common::differential::envoy_binary;
use crate::common::skip::{Tool, skipped};
use crate::common::wait;

const LIMIT: u64 = 1024 * 1024;
const CLIENTS: usize = 200;
const BODY: u64 = 100_000_000;
/// Each slow reader reads this much before it stalls; each slow upstream, this much of
/// each request body.
const READ_FIRST: u64 = 1024 * 1024;
/// The clients that read (or upload) to the end once the measurement is taken.
const COMPLETE: usize = 4;
/// The body's pattern repeats with this (prime) period, so that a lost, repeated or
/// reordered chunk changes the hash.
const PERIOD: usize = 1_000_003;
const CHUNK: usize = 64 * 1024;
/// Waits for a state never last longer than this (then the test fails).
const WAIT: Duration = Duration::from_secs(120);

/// What stalled streams may make one process hold: 64 MiB for the process itself, plus
/// 1.25 times the buffer limit per stream: five buffers of a quarter of the limit (the
/// HTTP/2 send buffer, the chunk waiting for it and the one beyond it, the upstream
/// HTTP/1.1 read buffer and the chunk taken from it). The README's "Limits" states it.
fn rss_bound_kib(streams: u64) -> u64 {
    (64 * 1024 * 1024 + streams * 5 * LIMIT / 4) / 1024
}

/// `PERIOD` bytes of a seeded xorshift, then its first `CHUNK` again, so that any chunk
/// of the endless repetition is one slice.
fn pattern() -> Bytes {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut bytes: Vec<u8> = (0..PERIOD)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    bytes.extend_from_within(..CHUNK);
    Bytes::from(bytes)
}

/// The chunks of `length` bytes of the pattern.
fn chunks(pattern: Bytes, length: u64) -> impl futures::Stream<Item = Bytes> + Send + 'static {
    futures::stream::unfold(0u64, move |offset| {
        let pattern = pattern.clone();
        async move {
            if offset >= length {
                return None;
            }
            let len = (length - offset).min(CHUNK as u64) as usize;
            let start = (offset % PERIOD as u64) as usize;
            Some((pattern.slice(start..start + len), offset + len as u64))
        }
    })
}

/// The hash of `length` bytes of the pattern, as a receiver computes it.
fn expected_hash(pattern: &Bytes, length: u64) -> u64 {
    let mut hasher = xxhash_rust::xxh64::Xxh64::new(0);
    let mut offset = 0u64;
    while offset < length {
        let len = (length - offset).min(CHUNK as u64) as usize;
        let start = (offset % PERIOD as u64) as usize;
        hasher.update(&pattern[start..start + len]);
        offset += len as u64;
    }
    hasher.digest()
}

struct Proxy {
    child: Child,
    _dir: tempfile::TempDir,
    port: u16,
    envoy: bool,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proxy {
    /// An Outrider process with one listener (HTTP/1.1 or HTTP/2 by the client's preface)
    /// routing everything to `backend`, spoken to in HTTP/2 when `h2_upstream`. No buffer
    /// limit is configured: Envoy's default applies on both sides.
    fn start(backend: u16, h2_upstream: bool) -> Self {
        Self::start_binary(backend, h2_upstream, None)
    }

    /// [`start`](Self::start) with Envoy's binary instead of Outrider's, when given. The
    /// connect timeout is long: the last of 200 upstream connections is opened by a worker
    /// already pumping the others' bodies, which on a loaded machine took over a second to
    /// see it connected (a 503 with 1 s). The port is [`free_port`]'s, not a port-0 bind's:
    /// the listener uses SO_REUSEPORT, and a port the kernel handed out and took back can
    /// be another test's proxy's too.
    ///
    /// [`free_port`]: crate::common::lab::free_port
    fn start_binary(backend: u16, h2_upstream: bool, envoy: Option<&std::path::Path>) -> Self {
        let port = crate::common::lab::free_port();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("bootstrap.yaml");
        let protocol = if h2_upstream {
            r#"
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: { http2_protocol_options: {} }"#
        } else {
            ""
        };
        std::fs::write(
            &config,
            format!(
                r#"
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
static_resources:
  listeners:
  - name: ingress
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts: [{{ name: all, domains: ["*"], routes: [{{ match: {{ prefix: "/" }}, route: {{ cluster: backend, timeout: 0s }} }}] }}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 60s{protocol}
    load_assignment:
      cluster_name: backend
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {backend} }} }} }} }}] }}]
"#
            ),
        )
        .unwrap();
        let mut command = match envoy {
            None => {
                let mut command = Command::new(env!("CARGO_BIN_EXE_outrider"));
                command.args(["run", "--concurrency", "1", "--config"]).arg(&config);
                command
            }
            Some(envoy) => {
                let mut command = Command::new(envoy);
                command
                    .args(["--concurrency", "1", "--log-level", "error", "--disable-hot-restart", "-c"])
                    .arg(&config);
                command
            }
        };
        let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        Self { child, _dir: dir, port, envoy: envoy.is_some() }
    }

    async fn connect(&self) -> TcpStream {
        wait::connect(self.port).await
    }

    /// (VmRSS, VmHWM) in KiB.
    fn rss_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let field = |name: &str| -> u64 {
            status.lines().find_map(|l| l.strip_prefix(name)).unwrap().trim().trim_end_matches(" kB").parse().unwrap()
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

/// A socket whose writer records whether its last write found the socket full.
struct Watched<S> {
    inner: S,
    blocked: Arc<AtomicBool>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.blocked.store(polled.is_pending(), Ordering::SeqCst);
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Flags of the senders a test waits on.
#[derive(Default, Clone)]
struct Senders(Arc<std::sync::Mutex<Vec<Arc<AtomicBool>>>>);

impl Senders {
    fn add(&self) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        self.0.lock().unwrap().push(flag.clone());
        flag
    }

    fn blocked(&self) -> usize {
        self.0.lock().unwrap().iter().filter(|f| f.load(Ordering::SeqCst)).count()
    }
}

/// Waits until `done` holds (polled: the flags and counters are shared atomics), bounded
/// by this file's [`WAIT`].
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    if wait::within_for(WAIT, async || done().then_some(())).await.is_none() {
        panic!("not reached within {WAIT:?}: {what}");
    }
}

/// Whether every sender is blocked within [`WAIT`]; for Outrider, it must be (the panic
/// says where its memory got to), Envoy is only measured.
async fn wait_stalled(proxy: &Proxy, what: &str, mut done: impl FnMut() -> bool) -> bool {
    let stalled = wait::within_for(WAIT, async || done().then_some(())).await.is_some();
    if !stalled && !proxy.envoy {
        panic!("not reached: {what} (proxy RSS, peak: {:?} KiB)", proxy.rss_kib());
    }
    stalled
}

fn body_of(
    stream: impl futures::Stream<Item = Bytes> + Send + 'static,
) -> http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible> {
    BodyExt::boxed_unsync(StreamBody::new(stream.map(|chunk| Ok::<_, Infallible>(Frame::data(chunk)))))
}

/// An HTTP/1.1 backend: `GET` answers `BODY` bytes of the pattern as fast as the socket
/// takes them (each connection's writer in `writers`); `POST` reads `READ_FIRST` bytes of
/// the body, waits for `resume`, then reads the rest and answers `<length> <hash>`.
async fn backend(
    listener: TcpListener,
    pattern: Bytes,
    writers: Senders,
    paused: Arc<AtomicUsize>,
    resume: watch::Receiver<bool>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { return };
        let io = Watched { inner: stream, blocked: writers.add() };
        let (pattern, resume, paused) = (pattern.clone(), resume.clone(), paused.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
                let (pattern, mut resume, paused) = (pattern.clone(), resume.clone(), paused.clone());
                async move {
                    if request.uri().path() == "/warm" {
                        return Ok(http::Response::new(body_of(futures::stream::iter([Bytes::from_static(b"ok")]))));
                    }
                    if request.method() == http::Method::GET {
                        let mut response = http::Response::new(body_of(chunks(pattern, BODY)));
                        response.headers_mut().insert(http::header::CONTENT_LENGTH, BODY.into());
                        return Ok::<_, Infallible>(response);
                    }
                    let mut body = request.into_body();
                    let mut hasher = xxhash_rust::xxh64::Xxh64::new(0);
                    let mut length = 0u64;
                    let mut held = false;
                    while let Some(frame) = body.frame().await {
                        let Ok(frame) = frame else { break };
                        if let Ok(data) = frame.into_data() {
                            hasher.update(&data);
                            length += data.len() as u64;
                        }
                        if !held && length >= READ_FIRST {
                            held = true;
                            paused.fetch_add(1, Ordering::SeqCst);
                            let _ = resume.wait_for(|go| *go).await;
                        }
                    }
                    let answer = format!("{length} {}", hasher.digest());
                    Ok(http::Response::new(body_of(futures::stream::once(async move { Bytes::from(answer) }))))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), service).await;
        });
    }
}

/// Reads `body` to `READ_FIRST` bytes, waits for `resume`, then, if `to_end`, to its end:
/// returns the length and hash read.
async fn read_slowly(
    mut body: Incoming,
    mut resume: watch::Receiver<bool>,
    to_end: bool,
    read: &AtomicUsize,
) -> Option<(u64, u64)> {
    let mut hasher = xxhash_rust::xxh64::Xxh64::new(0);
    let mut length = 0u64;
    while length < READ_FIRST {
        let data = body.frame().await?.ok()?.into_data().ok()?;
        hasher.update(&data);
        length += data.len() as u64;
    }
    read.fetch_add(1, Ordering::SeqCst);
    let _ = resume.wait_for(|go| *go).await;
    if !to_end {
        return None;
    }
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.ok()?.into_data() {
            hasher.update(&data);
            length += data.len() as u64;
        }
    }
    Some((length, hasher.digest()))
}

struct Measured {
    /// (VmRSS, VmHWM) in KiB once every sender is blocked.
    stalled: (u64, u64),
    /// The same at the end.
    end: (u64, u64),
    /// Every sender got blocked (else `stalled` is where memory was when the wait ended).
    blocked: bool,
}

fn report(test: &str, measured: &Measured) {
    let bound = rss_bound_kib(CLIENTS as u64);
    println!(
        "{test}: stalled RSS {} KiB (peak {} KiB), after completion peak {} KiB; bound {bound} KiB",
        measured.stalled.0, measured.stalled.1, measured.end.1
    );
    assert!(measured.stalled.1 < bound, "{test}: peak RSS {} KiB over {bound} KiB", measured.stalled.1);
    assert!(measured.end.1 < bound, "{test}: peak RSS {} KiB over {bound} KiB", measured.end.1);
}

/// 200 slow readers over HTTP/1.1 (one connection each) or HTTP/2 (`streams_per_connection`
/// streams on each connection).
async fn slow_readers(h2: Option<usize>, envoy: Option<&std::path::Path>) -> Measured {
    let pattern = pattern();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let writers = Senders::default();
    let (resume, resumed) = watch::channel(false);
    let backend_port = listener.local_addr().unwrap().port();
    tokio::spawn(backend(listener, pattern.clone(), writers.clone(), Arc::default(), resumed.clone()));
    let proxy = Proxy::start_binary(backend_port, false, envoy);
    let read = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    let mut h2_senders = Vec::new();
    for i in 0..CLIENTS {
        let get =
            http::Request::get("/big").header("host", "backend").body(http_body_util::Empty::<Bytes>::new()).unwrap();
        let response = match h2 {
            None => {
                let (mut sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(proxy.connect().await)).await.unwrap();
                tokio::spawn(connection);
                tokio::spawn(async move { sender.send_request(get).await })
            }
            Some(per_connection) => {
                if i % per_connection == 0 {
                    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                        .initial_stream_window_size(64 * 1024)
                        .initial_connection_window_size((per_connection as u32 + 1) * 64 * 1024 + READ_FIRST as u32)
                        .handshake(TokioIo::new(proxy.connect().await))
                        .await
                        .unwrap();
                    tokio::spawn(connection);
                    h2_senders.push(sender);
                }
                let mut sender = h2_senders.last().unwrap().clone();
                tokio::spawn(async move { sender.send_request(get).await })
            }
        };
        let (resumed, read) = (resumed.clone(), read.clone());
        clients.push(tokio::spawn(async move {
            let response = response.await.unwrap().unwrap();
            if response.status() != 200 {
                let status = response.status();
                let body = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                panic!("client {i}: {status} {}", String::from_utf8_lossy(&body));
            }
            read_slowly(response.into_body(), resumed, i < COMPLETE, &read).await
        }));
    }
    wait_until("every client read its first MiB", || read.load(Ordering::SeqCst) == CLIENTS).await;
    if !wait_stalled(&proxy, "every backend writer is blocked", || writers.blocked() >= CLIENTS).await {
        return Measured { stalled: proxy.rss_kib(), end: proxy.rss_kib(), blocked: false };
    }
    let stalled = proxy.rss_kib();
    resume.send(true).unwrap();
    let expected = expected_hash(&pattern, BODY);
    for (i, client) in clients.into_iter().enumerate() {
        let got = client.await.unwrap();
        if i < COMPLETE {
            assert_eq!(got, Some((BODY, expected)), "client {i} got the whole body intact");
        }
    }
    Measured { stalled, end: proxy.rss_kib(), blocked: true }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_http1_readers_hold_bounded_memory() {
    let measured = slow_readers(None, None).await;
    report("HTTP/1.1 slow readers", &measured);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_http2_readers_hold_bounded_memory() {
    let measured = slow_readers(Some(50), None).await;
    report("HTTP/2 slow readers (50 streams a connection)", &measured);
}

/// 200 slow uploads over HTTP/1.1 (one connection each, `Content-Length` bodies) or
/// HTTP/2 (`streams_per_connection` streams on each connection).
async fn slow_uploads(h2: Option<usize>, envoy: Option<&std::path::Path>) -> Measured {
    let pattern = pattern();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (resume, resumed) = watch::channel(false);
    let paused = Arc::new(AtomicUsize::new(0));
    let backend_port = listener.local_addr().unwrap().port();
    tokio::spawn(backend(listener, pattern.clone(), Senders::default(), paused.clone(), resumed));
    let proxy = Proxy::start_binary(backend_port, false, envoy);
    let senders = Senders::default();
    let mut clients = Vec::new();
    let mut h2_clients: Vec<h2::client::SendRequest<Bytes>> = Vec::new();
    for i in 0..CLIENTS {
        let blocked = senders.add();
        let client = match h2 {
            None => {
                let io = Watched { inner: proxy.connect().await, blocked };
                let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await.unwrap();
                tokio::spawn(connection);
                let post = http::Request::post("/upload")
                    .header("host", "backend")
                    .header(http::header::CONTENT_LENGTH, BODY)
                    .body(body_of(chunks(pattern.clone(), BODY)))
                    .unwrap();
                tokio::spawn(async move {
                    let response = sender.send_request(post).await.unwrap();
                    assert_eq!(response.status(), 200);
                    let answer = response.into_body().collect().await.unwrap().to_bytes();
                    String::from_utf8(answer.to_vec()).unwrap()
                })
            }
            Some(per_connection) => {
                if i % per_connection == 0 {
                    h2_clients.push(h2_client(&proxy).await);
                }
                let sender = h2_clients.last().unwrap().clone();
                let pattern = pattern.clone();
                tokio::spawn(async move {
                    let mut sender = sender.ready().await.unwrap();
                    let post = http::Request::post("http://backend/upload").body(()).unwrap();
                    let (response, stream) = sender.send_request(post, false).unwrap();
                    send_h2_body(stream, pattern, BODY, &blocked, &AtomicU64::new(0)).await.unwrap();
                    let response = response.await.unwrap();
                    assert_eq!(response.status(), 200);
                    let mut body = response.into_body();
                    let mut answer = Vec::new();
                    while let Some(data) = body.data().await {
                        let data = data.unwrap();
                        let _ = body.flow_control().release_capacity(data.len());
                        answer.extend_from_slice(&data);
                    }
                    String::from_utf8(answer).unwrap()
                })
            }
        };
        clients.push(client);
    }
    if h2.is_none() {
        // Each upload reached its backend before the backend stopped reading.
        wait_until("every backend paused", || paused.load(Ordering::SeqCst) >= CLIENTS).await;
    }
    if !wait_stalled(&proxy, "every client is blocked", || senders.blocked() == CLIENTS).await {
        return Measured { stalled: proxy.rss_kib(), end: proxy.rss_kib(), blocked: false };
    }
    let stalled = proxy.rss_kib();
    for client in &clients[COMPLETE..] {
        client.abort();
    }
    resume.send(true).unwrap();
    let expected = format!("{BODY} {}", expected_hash(&pattern, BODY));
    for (i, client) in clients.into_iter().enumerate().take(COMPLETE) {
        assert_eq!(client.await.unwrap(), expected, "upload {i} arrived whole");
    }
    Measured { stalled, end: proxy.rss_kib(), blocked: true }
}

/// Sends `length` bytes of the pattern on `stream` as its window allows, `blocked` while
/// there is none; `sent` counts what the window let out.
async fn send_h2_body(
    mut stream: h2::SendStream<Bytes>,
    pattern: Bytes,
    length: u64,
    blocked: &AtomicBool,
    sent: &AtomicU64,
) -> Result<(), h2::Error> {
    let mut offset = 0u64;
    while offset < length {
        stream.reserve_capacity(CHUNK);
        let capacity = loop {
            let available = stream.capacity();
            if available > 0 {
                break available;
            }
            blocked.store(true, Ordering::SeqCst);
            match futures::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
                Some(Ok(_)) => {}
                Some(Err(error)) => return Err(error),
                None => return Err(h2::Error::from(h2::Reason::CANCEL)),
            }
        };
        blocked.store(false, Ordering::SeqCst);
        let len = (capacity as u64).min(length - offset).min(CHUNK as u64) as usize;
        let start = (offset % PERIOD as u64) as usize;
        offset += len as u64;
        stream.send_data(pattern.slice(start..start + len), offset == length)?;
        sent.fetch_add(len as u64, Ordering::SeqCst);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_http1_uploads_hold_bounded_memory() {
    let measured = slow_uploads(None, None).await;
    report("HTTP/1.1 slow uploads", &measured);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_http2_uploads_hold_bounded_memory() {
    let measured = slow_uploads(Some(50), None).await;
    report("HTTP/2 slow uploads (50 streams a connection)", &measured);
}

/// What an HTTP/2 backend saw of its one large response, or of the upload it never reads.
#[derive(Default)]
struct H2Backend {
    sent: AtomicU64,
    blocked: AtomicBool,
    finished: AtomicBool,
    /// Request bodies held unread, with their unanswered streams.
    held: std::sync::Mutex<Vec<(h2::RecvStream, h2::server::SendResponse<Bytes>)>>,
}

const WINDOW_TEST_BODY: u64 = 64 * 1024 * 1024;

/// An HTTP/2 backend: `/warm` answers at once; `/big` answers `WINDOW_TEST_BODY` bytes as
/// Outrider's windows allow (its own send buffer never limits it); `/sink` never reads the
/// request body.
async fn h2_backend(listener: TcpListener, pattern: Bytes, state: Arc<H2Backend>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { return };
        let (pattern, state) = (pattern.clone(), state.clone());
        tokio::spawn(async move {
            let mut connection =
                h2::server::Builder::new().max_send_buffer_size(1 << 30).handshake::<_, Bytes>(stream).await.unwrap();
            while let Some(Ok((request, mut respond))) = connection.accept().await {
                let (pattern, state) = (pattern.clone(), state.clone());
                tokio::spawn(async move {
                    let (parts, body) = request.into_parts();
                    match parts.uri.path() {
                        "/big" => {
                            let stream = respond.send_response(http::Response::new(()), false).unwrap();
                            let sent =
                                send_h2_body(stream, pattern, WINDOW_TEST_BODY, &state.blocked, &state.sent).await;
                            state.finished.store(sent.is_ok(), Ordering::SeqCst);
                        }
                        "/sink" => state.held.lock().unwrap().push((body, respond)),
                        _ => {
                            let mut stream = respond.send_response(http::Response::new(()), false).unwrap();
                            stream.send_data(Bytes::from_static(b"ok"), true).unwrap();
                        }
                    }
                });
            }
        });
    }
}

/// An HTTP/2 client of the proxy whose windows are final (one exchange done), with a send
/// buffer that never limits it.
async fn h2_client(proxy: &Proxy) -> h2::client::SendRequest<Bytes> {
    let (client, connection) =
        h2::client::Builder::new().max_send_buffer_size(1 << 30).handshake(proxy.connect().await).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let (response, _) = client.send_request(http::Request::get("http://backend/warm").body(()).unwrap(), true).unwrap();
    let mut body = response.await.unwrap().into_body();
    while body.data().await.is_some() {}
    client
}

#[tokio::test]
async fn a_stream_that_is_not_read_stops_the_upstream_at_the_window_cap() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_port = listener.local_addr().unwrap().port();
    let state = Arc::new(H2Backend::default());
    tokio::spawn(h2_backend(listener, pattern(), state.clone()));
    let proxy = Proxy::start(backend_port, true);
    let client = h2_client(&proxy).await;
    let mut client = client.ready().await.unwrap();
    // The response's body is never read: the client's 64 KiB window is never given back.
    let (response, _) = client.send_request(http::Request::get("http://backend/big").body(()).unwrap(), true).unwrap();
    let _response = response.await.unwrap();
    wait_until("the backend is out of window or done", || {
        state.blocked.load(Ordering::SeqCst) || state.finished.load(Ordering::SeqCst)
    })
    .await;
    let sent = state.sent.load(Ordering::SeqCst);
    println!("the backend sent {sent} bytes of a response nobody reads");
    assert!(!state.finished.load(Ordering::SeqCst), "the whole {WINDOW_TEST_BODY} bytes went into the proxy");
    assert!(sent <= LIMIT, "{sent} bytes taken from the upstream, over the {LIMIT}-byte limit");
}

#[tokio::test]
async fn an_upload_that_is_not_read_stops_the_client_at_the_window_cap() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_port = listener.local_addr().unwrap().port();
    tokio::spawn(h2_backend(listener, pattern(), Arc::default()));
    let proxy = Proxy::start(backend_port, true);
    let client = h2_client(&proxy).await;
    let mut client = client.ready().await.unwrap();
    let (_response, stream) =
        client.send_request(http::Request::post("http://backend/sink").body(()).unwrap(), false).unwrap();
    let (blocked, sent) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let upload = {
        let (blocked, sent) = (blocked.clone(), sent.clone());
        tokio::spawn(async move { send_h2_body(stream, pattern(), WINDOW_TEST_BODY, &blocked, &sent).await })
    };
    wait_until("the client is out of window or done", || blocked.load(Ordering::SeqCst) || upload.is_finished()).await;
    let sent = sent.load(Ordering::SeqCst);
    println!("the client sent {sent} bytes of an upload nobody reads");
    assert!(!upload.is_finished(), "the whole {WINDOW_TEST_BODY} bytes went into the proxy");
    assert!(sent <= LIMIT, "{sent} bytes taken from the client, over the {LIMIT}-byte limit");
}

/// The four measurements through Envoy 1.40 and through Outrider, one process at a time,
/// for `bench/RESULTS.md` (`cargo test --test proxy -- --ignored --nocapture flow_control::beside_envoy`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement beside Envoy: minutes, and needs Envoy's binary"]
async fn beside_envoy() {
    let Some(envoy) = envoy_binary() else {
        skipped(Tool::Envoy, "beside_envoy", "envoy not found");
        return;
    };
    println!("| test | Envoy RSS stalled (peak) KiB | Outrider RSS stalled (peak) KiB | Outrider / Envoy |");
    println!("| --- | --- | --- | --- |");
    for (name, h2, upload) in [
        ("HTTP/1.1 slow readers", None, false),
        ("HTTP/2 slow readers", Some(50), false),
        ("HTTP/1.1 slow uploads", None, true),
        ("HTTP/2 slow uploads", Some(50), true),
    ] {
        let run = |binary: Option<&std::path::Path>| {
            let binary = binary.map(std::path::Path::to_path_buf);
            async move {
                match upload {
                    false => slow_readers(h2, binary.as_deref()).await,
                    true => slow_uploads(h2, binary.as_deref()).await,
                }
            }
        };
        let on_envoy = run(Some(&envoy)).await;
        let on_outrider = run(None).await;
        let note = |m: &Measured| if m.blocked { "" } else { ", senders never all blocked" };
        println!(
            "| {name} | {} ({}{}) | {} ({}{}) | {:.2} |",
            on_envoy.stalled.0,
            on_envoy.end.1,
            note(&on_envoy),
            on_outrider.stalled.0,
            on_outrider.end.1,
            note(&on_outrider),
            on_outrider.stalled.0 as f64 / on_envoy.stalled.0 as f64
        );
    }
}
