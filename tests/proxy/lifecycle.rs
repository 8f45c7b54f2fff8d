//! Stopping a real Outrider process: SIGTERM (or SIGINT) while requests are in flight.
//! `/ready` turns 503, the listener stops accepting, every request already accepted is
//! answered, and the process exits 0.

use std::convert::Infallible;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::{Notify, mpsc, watch};

use crate::common::wait;

const WAIT: Duration = Duration::from_secs(20);
/// Requests held by the backend when the signal arrives: over HTTP/1.1 connections of
/// their own, and multiplexed on one HTTP/2 connection.
const HTTP1_REQUESTS: usize = 12;
const HTTP2_REQUESTS: usize = 8;

/// Two distinct free ports (the admin server's and the proxy's), from the one place tests
/// take ports (`common::lab::free_port`, below the kernel's ephemeral range).
fn free_ports() -> (u16, u16) {
    let first = crate::common::lab::free_port();
    let second = (0..64).map(|_| crate::common::lab::free_port()).find(|&p| p != first).unwrap();
    (first, second)
}

/// A backend that answers only once `release` says so, counting the requests it holds.
async fn holding_backend(received: Arc<AtomicUsize>, arrived: Arc<Notify>, release: watch::Receiver<bool>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (received, arrived, release) = (received.clone(), arrived.clone(), release.clone());
            tokio::spawn(async move {
                let service = service_fn(move |_request| {
                    let (received, arrived, mut release) = (received.clone(), arrived.clone(), release.clone());
                    async move {
                        received.fetch_add(1, Ordering::SeqCst);
                        arrived.notify_one();
                        release.wait_for(|r| *r).await.unwrap();
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"done"))))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    port
}

fn bootstrap(admin: u16, proxy: u16, backend: u16) -> String {
    format!(
        r#"
node: {{ id: lifecycle, cluster: test }}
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }} }}
static_resources:
  listeners:
  - name: http
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {proxy} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: http
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes: [{{ match: {{ prefix: "/" }}, route: {{ cluster: backend, timeout: 0s }} }}]
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {backend} }} }} }}
"#
    )
}

/// Lines of the child's stderr, as they come.
fn stderr_lines(child: &mut std::process::Child) -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

async fn wait_for_line(lines: &mut mpsc::UnboundedReceiver<String>, needle: &str) {
    let found = async {
        while let Some(line) = lines.recv().await {
            if line.contains(needle) {
                return;
            }
        }
        panic!("stderr ended before {needle:?}");
    };
    tokio::time::timeout(WAIT, found).await.unwrap_or_else(|_| panic!("no {needle:?} in stderr"));
}

async fn admin_get(port: u16, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(WAIT, stream.read_to_string(&mut response)).await.unwrap().unwrap();
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
}

fn request() -> http::Request<Full<Bytes>> {
    http::Request::get("http://example.com/held").body(Full::new(Bytes::new())).unwrap()
}

async fn drains_on(signal: &str) {
    let received = Arc::new(AtomicUsize::new(0));
    let arrived = Arc::new(Notify::new());
    let (release, released) = watch::channel(false);
    let backend = holding_backend(received.clone(), arrived.clone(), released).await;
    let (admin, proxy) = free_ports();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bootstrap.yaml");
    std::fs::write(&config, bootstrap(admin, proxy, backend)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_outrider"))
        .args(["run", "--concurrency", "1", "--drain-time-s", "30", "--log-level", "info", "--config"])
        .arg(&config)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = stderr_lines(&mut child);
    wait_for_line(&mut lines, "admin server listening").await;
    // The worker binds just after: the first connection may find no listener yet.
    let first = wait::connect(proxy).await;

    // Requests in flight, each accepted by Outrider and held by the backend.
    let mut in_flight = tokio::task::JoinSet::new();
    let mut streams = vec![first];
    for _ in 1..HTTP1_REQUESTS {
        streams.push(tokio::net::TcpStream::connect(("127.0.0.1", proxy)).await.unwrap());
    }
    for stream in streams {
        in_flight.spawn(async move {
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(connection);
            let response = sender.send_request(request()).await?;
            let status = response.status().as_u16();
            response.into_body().collect().await?;
            Ok::<u16, hyper::Error>(status)
        });
    }
    let h2 = tokio::net::TcpStream::connect(("127.0.0.1", proxy)).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(h2)).await.unwrap();
    tokio::spawn(connection);
    for _ in 0..HTTP2_REQUESTS {
        let mut sender = sender.clone();
        in_flight.spawn(async move {
            let response = sender.send_request(request()).await?;
            let status = response.status().as_u16();
            response.into_body().collect().await?;
            Ok::<u16, hyper::Error>(status)
        });
    }
    let all_held = async {
        while received.load(Ordering::SeqCst) < HTTP1_REQUESTS + HTTP2_REQUESTS {
            arrived.notified().await;
        }
    };
    // A request answered before the backend releases any went wrong: say how.
    let held = async {
        tokio::select! {
            () = all_held => {}
            early = in_flight.join_next() => panic!("a request ended before the drain: {early:?}"),
        }
    };
    if tokio::time::timeout(WAIT, held).await.is_err() {
        panic!(
            "only {} of {} requests reached the backend",
            received.load(Ordering::SeqCst),
            HTTP1_REQUESTS + HTTP2_REQUESTS
        );
    }
    assert_eq!(admin_get(admin, "/ready").await, (200, "LIVE\n".to_owned()));

    let status = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    wait_for_line(&mut lines, "stopped accepting; draining connections").await;
    assert_eq!(admin_get(admin, "/ready").await, (503, "DRAINING\n".to_owned()));
    assert!(tokio::net::TcpStream::connect(("127.0.0.1", proxy)).await.is_err(), "the listener is closed");

    release.send_replace(true);
    let mut answered = 0;
    let mut failed = Vec::new();
    while let Some(result) = in_flight.join_next().await {
        match result.unwrap() {
            Ok(200) => answered += 1,
            other => failed.push(format!("{other:?}")),
        }
    }
    assert!(failed.is_empty(), "accepted requests failed during the drain: {failed:?}");
    assert_eq!(answered, HTTP1_REQUESTS + HTTP2_REQUESTS);

    let exit = tokio::time::timeout(WAIT, tokio::task::spawn_blocking(move || child.wait())).await.unwrap();
    assert_eq!(exit.unwrap().unwrap().code(), Some(0));
}

#[tokio::test]
async fn sigterm_drains_in_flight_requests_then_exits_0() {
    drains_on("-TERM").await;
}

#[tokio::test]
async fn sigint_drains_the_same_way() {
    drains_on("-INT").await;
}
