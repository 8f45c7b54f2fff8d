//! Consistent hashing with bounded loads (`hash_balance_factor`), side by side with Envoy
//! 1.40: the same bootstrap, five loopback backends, requests placed by an `x-key` header.
//! With nothing in flight both proxies place every key where the ring (or maglev table) does;
//! then one hot key's requests are held open one by one, and the host each of them reaches —
//! its own until the bound, then wherever the hash-seeded shuffle spills it — is compared,
//! as is where every other key goes while the hot key's host is full.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::common::differential::{HttpListenerExtra, Pair, http_listener, raw_http1};
use crate::common::wait;

const BACKENDS: usize = 5;
const KEYS: usize = 30;
/// Requests of the hot key held open: enough for its host to reach its bound and spill.
const HOT_REQUESTS: usize = 12;

/// Five backends answering with their index; a request with `x-hold` waits for the gate,
/// and each backend counts the held requests it has.
struct Backends {
    ports: Vec<u16>,
    held: Arc<[AtomicUsize; BACKENDS]>,
    gate: Arc<Semaphore>,
}

impl Backends {
    async fn start() -> Self {
        let held: Arc<[AtomicUsize; BACKENDS]> = Arc::new(Default::default());
        let gate = Arc::new(Semaphore::new(0));
        let mut ports = Vec::new();
        for index in 0..BACKENDS {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            ports.push(listener.local_addr().unwrap().port());
            let (held, gate) = (held.clone(), gate.clone());
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (held, gate) = (held.clone(), gate.clone());
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
                            let (held, gate) = (held.clone(), gate.clone());
                            async move {
                                if request.headers().contains_key("x-hold") {
                                    held[index].fetch_add(1, Ordering::SeqCst);
                                    gate.acquire().await.unwrap().forget();
                                }
                                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(format!("b{index}")))))
                            }
                        });
                        let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                        let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                    });
                }
            });
        }
        Self { ports, held, gate }
    }

    fn held(&self) -> Vec<usize> {
        self.held.iter().map(|n| n.load(Ordering::SeqCst)).collect()
    }
}

fn bootstrap(port: u16, backends: &[u16], policy: &str) -> String {
    let endpoints: String = backends
        .iter()
        .map(|p| {
            format!(
                "\n        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {p} }} }} }}"
            )
        })
        .collect();
    let route = "              routes:\n              - match: { prefix: / }\n                route:\n                  cluster: backend\n                  hash_policy: [{ header: { header_name: x-key } }]\n";
    let listener = http_listener("l", port, "ingress", HttpListenerExtra::default(), route);
    format!(
        r#"static_resources:
  listeners:{listener}
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 1s
    lb_policy: {policy}
    common_lb_config:
      consistent_hashing_lb_config: {{ hash_balance_factor: 150 }}
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:{endpoints}
"#
    )
}

/// Which backend answered each key, nothing held.
async fn placement(port: u16) -> Vec<String> {
    let mut placed = Vec::new();
    for key in 0..KEYS {
        let request = format!("GET / HTTP/1.1\r\nhost: h\r\nx-key: k{key}\r\nconnection: close\r\n\r\n");
        let (status, _, body) = raw_http1(port, &request).await;
        assert_eq!(status, 200, "key k{key}");
        placed.push(body);
    }
    placed
}

/// What one proxy did: the keys' hosts before, the hot key's held requests one by one, the
/// keys' hosts while they were held.
#[derive(Debug, PartialEq)]
struct Run {
    before: Vec<String>,
    hot: Vec<String>,
    during: Vec<String>,
}

/// Holds [`HOT_REQUESTS`] requests of key `k0` open through `port`, one at a time (each
/// reaches its backend before the next is sent, so both proxies count it as active).
async fn run(port: u16, backends: &Backends) -> Run {
    let before = placement(port).await;
    let mut held = Vec::new();
    let mut hot = Vec::new();
    for _ in 0..HOT_REQUESTS {
        let seen = backends.held();
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let request = "GET / HTTP/1.1\r\nhost: h\r\nx-key: k0\r\nx-hold: 1\r\nconnection: close\r\n\r\n";
        stream.write_all(request.as_bytes()).await.unwrap();
        let reached = wait::until("the held request to reach a backend", async || {
            let now = backends.held();
            now.iter().zip(&seen).position(|(now, before)| now > before)
        })
        .await;
        hot.push(format!("b{reached}"));
        held.push(stream);
    }
    let during = placement(port).await;
    backends.gate.add_permits(held.len());
    for mut stream in held {
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        assert!(String::from_utf8_lossy(&response).starts_with("HTTP/1.1 200"));
    }
    Run { before, hot, during }
}

async fn bounded_load_matches_envoy(policy: &str) {
    let backends = Backends::start().await;
    let pair = Pair::start(|port| bootstrap(port, &backends.ports, policy)).await;
    let mut runs = Vec::new();
    for (who, port) in pair.ports() {
        runs.push((who, run(port, &backends).await));
    }
    let (_, outrider) = runs.last().unwrap();
    // The hot key's host takes requests up to its bound, then they spill, to more than one host.
    let home = &outrider.before[0];
    assert_eq!(&outrider.hot[0], home);
    assert!(outrider.hot.iter().filter(|h| *h == home).count() < HOT_REQUESTS, "{outrider:?}");
    let spilled: std::collections::BTreeSet<_> = outrider.hot.iter().filter(|h| *h != home).collect();
    assert!(spilled.len() >= 2, "the excess spreads: {outrider:?}");
    // Keys of the hosts the hot key never reached stay put; keys of its full host move.
    for (before, during) in outrider.before.iter().zip(&outrider.during) {
        if before == home {
            assert_ne!(during, before, "{outrider:?}");
        } else if !outrider.hot.contains(before) {
            assert_eq!(during, before, "{outrider:?}");
        }
    }
    if let [(_, envoy), (_, outrider)] = runs.as_slice() {
        assert_eq!(outrider, envoy, "{policy}: Outrider placed requests differently from Envoy");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_hash_with_bounded_load_matches_envoy() {
    bounded_load_matches_envoy("RING_HASH").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maglev_with_bounded_load_matches_envoy() {
    bounded_load_matches_envoy("MAGLEV").await;
}
