//! The upstream connection manager against real hyper servers on loopback: connection
//! reuse, HTTP/2 multiplexing, failure classification, and the feedback responses give
//! the endpoint's stats (latency, outcome, ORCA, in-flight).
//!
//! Not tested: the connect timeout. It needs a peer that never answers a SYN, and on
//! loopback every closed port refuses at once; an unroutable address would leave the
//! machine.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use outrider::config::Address;
use outrider::config::cluster::{
    CircuitBreakers, Cluster, DEFAULT_CONNECT_TIMEOUT, DiscoveryType, UpstreamHttpOptions, UpstreamProtocol,
    UpstreamTransport,
};
use outrider::config::endpoint::{ClusterLoadAssignment, HealthStatus, LbEndpoint, LocalityLbEndpoints};
use outrider::lb::{EndpointStats, Host};
use outrider::proxy::upstream::{RequestBody, UpstreamError, Upstreams};
use outrider::store::{Snapshot, Versioned};
use tokio::net::TcpListener;

type ServerBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A loopback server (HTTP/1.1 and HTTP/2 on one port) counting accepted connections.
struct Server {
    address: SocketAddr,
    accepted: Arc<AtomicUsize>,
    /// How many connections have ended, as seen by the server.
    closed: tokio::sync::watch::Receiver<usize>,
}

async fn server<F, Fut>(handler: F) -> Server
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<ServerBody>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let (closed_tx, closed) = tokio::sync::watch::channel(0);
    let closed_tx = Arc::new(closed_tx);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            let handler = handler.clone();
            let closed_tx = closed_tx.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let handler = handler.clone();
                    async move { Ok::<_, Infallible>(handler(request).await) }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                closed_tx.send_modify(|n| *n += 1);
            });
        }
    });
    Server { address, accepted, closed }
}

fn text(body: &'static str) -> Response<ServerBody> {
    Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed())
}

fn cluster(protocol: UpstreamProtocol) -> Cluster {
    Cluster {
        name: "backend".into(),
        discovery: DiscoveryType::Static,
        load_assignment: None,
        connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        load_balancing: None,
        dns: None,
        original_dst: None,
        outlier_detection: None,
        health_checks: Vec::new(),
        circuit_breakers: CircuitBreakers::default(),
        transport_socket: UpstreamTransport::Plain,
        transport_socket_matches: Vec::new(),
        http: UpstreamHttpOptions { protocol, ..UpstreamHttpOptions::default() },
        upstream_bind: None,
        per_endpoint_stats: false,
        metadata_exchange: None,
        istio_service_host: None,
        per_connection_buffer_limit_bytes: 1024 * 1024,
    }
}

fn host(address: SocketAddr) -> Host {
    Host {
        endpoint: Arc::new(LbEndpoint {
            address: Address::Socket(address),
            weight: 1,
            health: HealthStatus::Healthy,
            hash_key: None,
            transport_socket_match: BTreeMap::new(),
            hostname: String::new(),
            health_check: None,
            additional_addresses: Box::default(),
            metadata: None,
        }),
        stats: Arc::new(EndpointStats::new(Instant::now())),
        cluster_stats: Default::default(),
        priority: 0,
        locality: 0,
    }
}

fn get(path: &str) -> Request<RequestBody> {
    Request::get(path).body(Empty::new().map_err(|e| match e {}).boxed()).unwrap()
}

#[tokio::test]
async fn http1_connections_are_kept_alive_and_reused() {
    let server = server(|_| async { text("hello") }).await;
    let upstreams = Upstreams::new();
    let (host, cluster) = (host(server.address), cluster(UpstreamProtocol::Http1));
    for _ in 0..5 {
        let response = upstreams.forward(&host, &cluster, false, get("/")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.into_body().collect().await.unwrap().to_bytes(), "hello");
    }
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(upstreams.pooled(), (1, 0));
    assert_eq!(host.stats.successes(), 5);
    assert_eq!(host.stats.in_flight(), 0);
    assert!(host.stats.rtt_estimate(Instant::now()).is_some());
}

/// A handler's wait until `barrier` has all its requests: proof that they were in flight
/// together. Bounded, so that a client that sends them one at a time fails the test.
async fn all_arrived(barrier: &tokio::sync::Barrier) {
    tokio::time::timeout(crate::common::WAIT, barrier.wait()).await.expect("every request at the server at once");
}

#[tokio::test]
async fn concurrent_http1_requests_open_more_connections_and_all_come_back() {
    // Each request is held until all three have arrived: none can come back before the
    // others were sent, so each needs a connection of its own.
    let barrier = Arc::new(tokio::sync::Barrier::new(3));
    let server = server(move |_| {
        let barrier = barrier.clone();
        async move {
            all_arrived(&barrier).await;
            text("slow")
        }
    })
    .await;
    let upstreams = Upstreams::new();
    let (host, cluster) = (host(server.address), cluster(UpstreamProtocol::Http1));
    let requests = (0..3).map(|_| async {
        let response = upstreams.forward(&host, &cluster, false, get("/")).await.unwrap();
        response.into_body().collect().await.unwrap();
    });
    futures::future::join_all(requests).await;
    assert_eq!(server.accepted.load(Ordering::SeqCst), 3);
    assert_eq!(upstreams.pooled(), (3, 0));
}

#[tokio::test]
async fn http2_multiplexes_on_one_connection() {
    // Each request is held until all ten have arrived: they are in flight together.
    let barrier = Arc::new(tokio::sync::Barrier::new(10));
    let server = server(move |request: Request<Incoming>| {
        let barrier = barrier.clone();
        async move {
            assert_eq!(request.version(), http::Version::HTTP_2);
            assert_eq!(request.uri().authority().map(|a| a.as_str()), Some("svc.example"));
            all_arrived(&barrier).await;
            text("h2")
        }
    })
    .await;
    let upstreams = Upstreams::new();
    let (host, cluster) = (host(server.address), cluster(UpstreamProtocol::Http2));
    let requests = (0..10).map(|_| async {
        let request = Request::get("/x")
            .header(http::header::HOST, "svc.example")
            .body(Empty::new().map_err(|e| match e {}).boxed())
            .unwrap();
        let response = upstreams.forward(&host, &cluster, false, request).await.unwrap();
        response.into_body().collect().await.unwrap().to_bytes()
    });
    let bodies = futures::future::join_all(requests).await;
    assert!(bodies.iter().all(|b| b == "h2"));
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(upstreams.pooled(), (0, 1));
    assert_eq!(host.stats.successes(), 10);
    assert_eq!(host.stats.in_flight(), 0);
}

#[tokio::test]
async fn use_downstream_protocol_follows_the_request() {
    let server = server(|request: Request<Incoming>| async move {
        text(if request.version() == http::Version::HTTP_2 { "h2" } else { "h1" })
    })
    .await;
    let upstreams = Upstreams::new();
    let (host, cluster) = (host(server.address), cluster(UpstreamProtocol::UseDownstream));
    for (h2, expected) in [(true, "h2"), (false, "h1")] {
        let response = upstreams.send(&host, &cluster, h2, get("/")).await.unwrap();
        assert_eq!(response.into_body().collect().await.unwrap().to_bytes(), expected);
    }
}

#[tokio::test]
async fn max_requests_per_connection_retires_connections() {
    let server = server(|_| async { text("ok") }).await;
    let upstreams = Upstreams::new();
    let host = host(server.address);
    let mut cluster = cluster(UpstreamProtocol::Http1);
    cluster.http.max_requests_per_connection = Some(2);
    for _ in 0..4 {
        let response = upstreams.forward(&host, &cluster, false, get("/")).await.unwrap();
        response.into_body().collect().await.unwrap();
    }
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn idle_connections_are_closed_after_the_idle_timeout() {
    const IDLE: Duration = Duration::from_millis(100);
    let mut server = server(|_| async { text("ok") }).await;
    let upstreams = Upstreams::new();
    let host = host(server.address);
    let mut cluster = cluster(UpstreamProtocol::Http1);
    cluster.http.idle_timeout = Some(IDLE);
    let response = upstreams.forward(&host, &cluster, false, get("/")).await.unwrap();
    response.into_body().collect().await.unwrap();
    // The idle timer is the connection task's tokio sleep, on this test's runtime: the
    // clock is moved past it instead of the test waiting it out. Its deadline is then
    // behind, so the task drops the connection as soon as it runs. Real time resumes
    // before the close is awaited on the socket (a paused clock would jump straight to
    // that wait's timeout while the runtime has nothing else to do).
    tokio::time::pause();
    tokio::time::advance(IDLE * 3).await;
    tokio::time::resume();
    wait_closed(&mut server, 1).await;
    upstreams.prune();
    assert_eq!(upstreams.pooled(), (0, 0), "the idle connection closed itself");
    let response = upstreams.forward(&host, &cluster, false, get("/")).await.unwrap();
    response.into_body().collect().await.unwrap();
    assert_eq!(server.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_closed_port_is_a_connect_failure() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let upstreams = Upstreams::new();
    let host = host(address);
    for protocol in [UpstreamProtocol::Http1, UpstreamProtocol::Http2] {
        let error = upstreams.forward(&host, &cluster(protocol), false, get("/")).await.unwrap_err();
        assert!(matches!(error, UpstreamError::ConnectFailure { .. }), "{error:?}");
        assert!(error.is_connect_failure());
    }
    assert_eq!(host.stats.errors(), 2);
    assert_eq!(host.stats.in_flight(), 0);
}

#[tokio::test]
async fn a_server_closing_before_the_response_is_a_reset() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            let mut buffer = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut buffer).await;
            drop(stream);
        }
    });
    let upstreams = Upstreams::new();
    let host = host(address);
    for protocol in [UpstreamProtocol::Http1, UpstreamProtocol::Http2] {
        let error = upstreams.forward(&host, &cluster(protocol), false, get("/")).await.unwrap_err();
        assert!(error.is_reset(), "{protocol:?}: {error:?}");
    }
    assert_eq!(host.stats.in_flight(), 0);
}

#[tokio::test]
async fn orca_in_headers_reaches_the_stats_and_is_stripped() {
    let server = server(|_| async {
        let mut response = text("loaded");
        let value = "TEXT cpu_utilization=0.5, rps_fractional=10, eps=1".parse().unwrap();
        response.headers_mut().insert("endpoint-load-metrics", value);
        response
    })
    .await;
    let upstreams = Upstreams::new();
    let host = host(server.address);
    let response = upstreams.forward(&host, &cluster(UpstreamProtocol::Http1), false, get("/")).await.unwrap();
    assert!(response.headers().get("endpoint-load-metrics").is_none());
    let report = host.stats.load_report().expect("a report");
    assert_eq!(report.report.cpu_utilization, 0.5);
    assert_eq!(report.report.rps_fractional, 10.0);
    assert_eq!(report.report.eps, 1.0);
}

/// A gRPC-style response: headers, one data frame, trailers with `grpc-status` and ORCA.
fn grpc_response(status: &'static str) -> Response<ServerBody> {
    let report = outrider::pb::orca::OrcaLoadReport { application_utilization: 0.25, ..Default::default() };
    let encoded = base64_encode(&prost::Message::encode_to_vec(&report));
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", status.parse().unwrap());
    trailers.insert("endpoint-load-metrics-bin", encoded.parse().unwrap());
    let frames =
        vec![Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"\0\0\0\0\0"))), Ok(Frame::trailers(trailers))];
    let mut response = Response::new(StreamBody::new(futures::stream::iter(frames)).boxed());
    response.headers_mut().insert(http::header::CONTENT_TYPE, "application/grpc".parse().unwrap());
    response
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn orca_and_grpc_status_in_trailers_are_observed_and_orca_stripped() {
    let server = server(|request: Request<Incoming>| async move {
        grpc_response(if request.uri().path() == "/fail" { "14" } else { "0" })
    })
    .await;
    let upstreams = Upstreams::new();
    let (host, cluster) = (host(server.address), cluster(UpstreamProtocol::Http2));
    let response = upstreams.forward(&host, &cluster, true, get("/ok")).await.unwrap();
    assert_eq!(host.stats.successes() + host.stats.errors(), 0, "the outcome waits for the trailers");
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected.trailers().expect("trailers").clone();
    assert_eq!(trailers["grpc-status"], "0");
    assert!(trailers.get("endpoint-load-metrics-bin").is_none());
    assert_eq!(host.stats.successes(), 1);
    assert_eq!(host.stats.load_report().expect("a report").report.application_utilization, 0.25);
    assert_eq!(host.stats.in_flight(), 0);

    let response = upstreams.forward(&host, &cluster, true, get("/fail")).await.unwrap();
    response.into_body().collect().await.unwrap();
    assert_eq!(host.stats.errors(), 1, "UNAVAILABLE counts against the endpoint");
}

#[tokio::test]
async fn server_errors_count_against_the_endpoint() {
    let server = server(|_| async {
        let mut response = text("down");
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        response
    })
    .await;
    let upstreams = Upstreams::new();
    let host = host(server.address);
    let response = upstreams.forward(&host, &cluster(UpstreamProtocol::Http1), false, get("/")).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(host.stats.errors(), 1);
}

#[tokio::test]
async fn in_flight_holds_until_the_body_ends_or_is_dropped() {
    let (release, released) = tokio::sync::watch::channel(false);
    let server = server(move |_| {
        let released = released.clone();
        async move {
            let frames = futures::stream::unfold(0, move |step| {
                let mut released = released.clone();
                async move {
                    match step {
                        0 => Some((Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"first"))), 1)),
                        1 => {
                            let _ = released.wait_for(|r| *r).await;
                            Some((Ok(Frame::data(Bytes::from_static(b"last"))), 2))
                        }
                        _ => None,
                    }
                }
            });
            Response::new(StreamBody::new(frames).boxed())
        }
    })
    .await;
    let upstreams = Upstreams::new();
    let host = host(server.address);
    for protocol in [UpstreamProtocol::Http1, UpstreamProtocol::Http2] {
        let cluster = cluster(protocol);
        // Read to the end.
        let response = upstreams.forward(&host, &cluster, false, get("/")).await.unwrap();
        assert_eq!(host.stats.in_flight(), 1, "{protocol:?}");
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "first");
        assert_eq!(host.stats.in_flight(), 1, "{protocol:?}: still streaming");
        release.send_replace(true);
        while body.frame().await.is_some() {}
        assert_eq!(host.stats.in_flight(), 0, "{protocol:?}: ended");
        release.send_replace(false);

        // Dropped early.
        let response = upstreams.forward(&host, &cluster, false, get("/")).await.unwrap();
        assert_eq!(host.stats.in_flight(), 1);
        drop(response);
        assert_eq!(host.stats.in_flight(), 0, "{protocol:?}: dropped");
    }
}

fn versioned<T>(resource: T) -> Arc<Versioned<T>> {
    Arc::new(Versioned {
        resource,
        version: String::new(),
        last_updated: std::time::SystemTime::now(),
        raw: Default::default(),
    })
}

/// A snapshot serving the cluster "backend" with `endpoints`.
fn snapshot_with(endpoints: &[&Host]) -> Snapshot {
    let mut snapshot = Snapshot::default();
    snapshot.clusters.insert("backend".into(), versioned(cluster(UpstreamProtocol::Http1)));
    let assignment = ClusterLoadAssignment {
        cluster_name: "backend".into(),
        localities: vec![LocalityLbEndpoints {
            locality: Default::default(),
            priority: 0,
            load_balancing_weight: None,
            endpoints: endpoints.iter().map(|h| h.endpoint.clone()).collect(),
        }],
        overprovisioning_factor: 140,
        weighted_priority_health: false,
    };
    snapshot.endpoints.insert("backend".into(), versioned(assignment));
    snapshot
}

async fn wait_closed(server: &mut Server, count: usize) {
    tokio::time::timeout(Duration::from_secs(10), server.closed.wait_for(|n| *n >= count))
        .await
        .expect("the upstream sees the connections close")
        .unwrap();
}

#[tokio::test]
async fn a_removed_endpoint_has_its_pooled_connections_drained() {
    let mut leaving = server(|_| async { text("ok") }).await;
    let staying = server(|_| async { text("ok") }).await;
    let upstreams = Upstreams::new();
    let (removed, kept) = (host(leaving.address), host(staying.address));
    for host in [&removed, &kept] {
        for protocol in [UpstreamProtocol::Http1, UpstreamProtocol::Http2] {
            let response = upstreams.forward(host, &cluster(protocol), false, get("/")).await.unwrap();
            response.into_body().collect().await.unwrap();
        }
    }
    assert_eq!(upstreams.pooled(), (2, 2));
    assert_eq!(upstreams.drain_removed(&snapshot_with(&[&removed, &kept])), 0, "both still listed");

    assert_eq!(upstreams.drain_removed(&snapshot_with(&[&kept])), 2);
    assert_eq!(upstreams.pooled(), (1, 1), "the kept endpoint keeps its connections");
    wait_closed(&mut leaving, 2).await;

    assert_eq!(upstreams.drain_removed(&Snapshot::default()), 2, "a removed cluster drains entirely");
    assert_eq!(upstreams.pooled(), (0, 0));
}

#[tokio::test]
async fn a_response_in_flight_finishes_and_its_connection_then_closes() {
    let (release, released) = tokio::sync::watch::channel(false);
    let mut server = server(move |_| {
        let mut released = released.clone();
        async move {
            let body = futures::stream::once(async move {
                let _ = released.wait_for(|r| *r).await;
                Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"done")))
            });
            Response::new(StreamBody::new(body).boxed())
        }
    })
    .await;
    let upstreams = Upstreams::new();
    let host = host(server.address);
    let response = upstreams.forward(&host, &cluster(UpstreamProtocol::Http1), false, get("/")).await.unwrap();

    upstreams.drain_removed(&snapshot_with(&[]));
    release.send(true).unwrap();
    assert_eq!(response.into_body().collect().await.unwrap().to_bytes(), "done", "the request in flight finishes");
    assert_eq!(upstreams.pooled(), (0, 0), "its connection is not checked back in");
    wait_closed(&mut server, 1).await;
}
