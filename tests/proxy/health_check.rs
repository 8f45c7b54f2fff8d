//! Active health checks end to end: real backends on loopback whose health the test
//! controls, a control plane, and Outrider probing them over HTTP, TCP and gRPC. What the
//! checks decide is observed as Envoy shows it: which hosts requests reach, `/clusters`
//! health flags and `cluster.<name>.health_check.*` stats.

use crate::common;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::atomic::{AtomicI32, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::common::lab::free_port;
use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use outrider::config::{Address, ResourceType};
use outrider::health::{HealthCheckResponse, SERVING};
use outrider::lb::{ClusterLb, PickContext, Picker};
use prost::Message;

/// A backend whose `/healthz` answers the status the test sets; any other path answers
/// 200 with the backend's name.
struct HttpBackend {
    port: u16,
    health: Arc<AtomicU16>,
    /// What every other path answers.
    serve: Arc<AtomicU16>,
    /// The `host` headers of the `/healthz` requests received.
    probed_as: Arc<Mutex<BTreeSet<String>>>,
}

async fn http_backend(name: &'static str) -> HttpBackend {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (health, serve) = (Arc::new(AtomicU16::new(200)), Arc::new(AtomicU16::new(200)));
    let (status, serving) = (health.clone(), serve.clone());
    let probed_as = Arc::new(Mutex::new(BTreeSet::new()));
    let seen = probed_as.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (status, serving, seen) = (status.clone(), serving.clone(), seen.clone());
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let probe = request.uri().path() == "/healthz";
                if probe && let Some(host) = request.headers().get("host").and_then(|h| h.to_str().ok()) {
                    seen.lock().unwrap().insert(host.to_owned());
                }
                let answer = if probe { &status } else { &serving };
                let code = answer.load(Ordering::Relaxed);
                let response = Response::builder().status(code).body(Full::new(Bytes::from(name))).unwrap();
                async move { Ok::<_, Infallible>(response) }
            });
            tokio::spawn(async move {
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    HttpBackend { port, health, serve, probed_as }
}

/// A gRPC backend implementing `grpc.health.v1.Health/Check` with the serving status the
/// test sets (1 SERVING, 2 NOT_SERVING).
async fn grpc_backend() -> (u16, Arc<AtomicI32>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let serving = Arc::new(AtomicI32::new(SERVING));
    let status = serving.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let status = status.clone();
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let status = status.load(Ordering::Relaxed);
                async move {
                    assert_eq!(request.uri().path(), "/grpc.health.v1.Health/Check");
                    let _ = request.into_body().collect().await;
                    let message = HealthCheckResponse { status }.encode_to_vec();
                    let mut frame = BytesMut::new();
                    frame.put_u8(0);
                    frame.put_u32(message.len() as u32);
                    frame.put_slice(&message);
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", "0".parse().unwrap());
                    let body = Full::new(frame.freeze())
                        .map_err(|never| match never {})
                        .with_trailers(async move { Some(Ok(trailers)) });
                    let response = Response::builder().header("content-type", "application/grpc").body(body).unwrap();
                    Ok::<_, Infallible>(response)
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (port, serving)
}

const FAST: &str = "interval: 0.05s, no_traffic_interval: 0.05s, timeout: 1s";

struct Lab {
    _control_plane: ControlPlane,
    outrider: outrider::app::Running,
    proxy_port: u16,
}

/// Outrider with cluster `backend` (`cluster_extra` appended) over `assignment`, a
/// listener routing everything to it.
async fn lab(cluster_extra: &str, assignment: &str) -> Lab {
    let proxy_port = free_port();
    let control_plane = ControlPlane::start().await;
    control_plane.set(ResourceType::Cluster, &[&format!("{CLUSTER}{cluster_extra}")]);
    control_plane.set(ResourceType::ClusterLoadAssignment, &[assignment]);
    control_plane
        .set(ResourceType::Listener, &[&LISTENER.replace("port_value: 0 ", &format!("port_value: {proxy_port} "))]);
    control_plane.set(ResourceType::RouteConfiguration, &[ROUTE]);
    let outrider = outrider::app::start_with(bootstrap(control_plane.port, "DELTA_GRPC"), 1).await.unwrap();
    wait_snapshot(&outrider.store, |s| s.ready).await;
    outrider.listeners_ready().await;
    Lab { _control_plane: control_plane, outrider, proxy_port }
}

/// Waits until the published balancer of `backend` satisfies `done`.
async fn wait_balancer(outrider: &outrider::app::Running, mut done: impl FnMut(&Arc<ClusterLb>) -> bool) {
    let mut published = outrider.balancers.subscribe();
    let wait = async {
        while !outrider.balancers.get("backend").is_some_and(|lb| done(&lb)) {
            published.changed().await.unwrap();
        }
    };
    tokio::time::timeout(WAIT, wait).await.expect("balancer condition not reached");
}

/// The ports a balancer picks from: 64 round-robin picks of the published balancer itself,
/// so a host is known to be in or out of rotation, not merely flagged.
fn picked_ports(lb: &Arc<ClusterLb>) -> BTreeSet<u16> {
    let mut picker = Picker::new(lb.clone(), 1);
    (0..64)
        .filter_map(|_| picker.pick(&PickContext::at(Instant::now())).cloned())
        .filter_map(|host| match host.address() {
            Address::Socket(addr) => Some(addr.port()),
            _ => None,
        })
        .collect()
}

/// Every host passes its checks and the published balancer picks them all (in panic, a
/// balancer picks failed hosts too, so the picks alone do not say the checks passed).
fn all_passing(lb: &Arc<ClusterLb>, ports: &BTreeSet<u16>) -> bool {
    lb.hosts().iter().all(|h| !h.stats.health().failed()) && picked_ports(lb) == *ports
}

async fn get_body(port: u16) -> String {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = Request::get("/").header("host", "example.com").body(Full::new(Bytes::new())).unwrap();
    let response = tokio::time::timeout(WAIT, sender.send_request(request)).await.unwrap().unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

/// Which backends `n` requests through the proxy reached.
async fn reached(port: u16, n: usize) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for _ in 0..n {
        names.insert(get_body(port).await);
    }
    names
}

async fn flags(lab: &Lab, port: u16) -> String {
    let (_, body) = admin_get(lab.outrider.admin_address, "/clusters").await;
    let prefix = format!("backend::127.0.0.1:{port}::health_flags::");
    body.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_default().to_owned()
}

async fn stat(lab: &Lab, name: &str) -> u64 {
    let (_, body) = admin_get(lab.outrider.admin_address, "/stats").await;
    let prefix = format!("cluster.backend.health_check.{name}: ");
    body.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn assignment(ports: &[u16]) -> String {
    endpoints("backend", &ports.iter().map(|p| u32::from(*p)).collect::<Vec<_>>())
}

#[tokio::test]
async fn a_host_failing_its_http_check_gets_no_traffic_until_it_passes_again() {
    let (good, flaky) = (http_backend("good").await, http_backend("flaky").await);
    let check = format!(
        "health_checks: [{{ {FAST}, unhealthy_threshold: 2, healthy_threshold: 2, \
         http_health_check: {{ path: /healthz }} }}]"
    );
    let lab = lab(&format!("\n{check}\n"), &assignment(&[good.port, flaky.port])).await;
    let both = BTreeSet::from([good.port, flaky.port]);
    wait_balancer(&lab.outrider, |lb| all_passing(lb, &both)).await;
    assert_eq!(reached(lab.proxy_port, 8).await, BTreeSet::from(["flaky".to_owned(), "good".to_owned()]));
    assert_eq!(flags(&lab, flaky.port).await, "healthy");

    // A 503 is not a retriable status: the host fails at its next check.
    flaky.health.store(503, Ordering::Relaxed);
    wait_balancer(&lab.outrider, |lb| picked_ports(lb) == BTreeSet::from([good.port])).await;
    assert_eq!(reached(lab.proxy_port, 20).await, BTreeSet::from(["good".to_owned()]));
    assert_eq!(flags(&lab, flaky.port).await, "/failed_active_hc");
    assert_eq!(flags(&lab, good.port).await, "healthy");
    assert!(stat(&lab, "failure").await >= 1);

    // Two passes in a row (healthy_threshold) return it.
    flaky.health.store(200, Ordering::Relaxed);
    wait_balancer(&lab.outrider, |lb| all_passing(lb, &both)).await;
    assert!(reached(lab.proxy_port, 8).await.contains("flaky"));
    assert_eq!(flags(&lab, flaky.port).await, "healthy");
    assert!(stat(&lab, "success").await >= 3);
    assert!(stat(&lab, "attempt").await >= stat(&lab, "success").await);
    lab.outrider.stop();
}

#[tokio::test]
async fn a_tcp_check_fails_a_port_that_refuses_and_passes_one_that_accepts() {
    let good = http_backend("good").await;
    let refusing = free_port(); // bound then released: connections are refused
    let check =
        format!("health_checks: [{{ {FAST}, unhealthy_threshold: 1, healthy_threshold: 1, tcp_health_check: {{}} }}]");
    let lab = lab(&format!("\n{check}\n"), &assignment(&[good.port, refusing])).await;
    wait_balancer(&lab.outrider, |lb| picked_ports(lb) == BTreeSet::from([good.port])).await;
    // The refusing host started failed (new host) and its checks keep failing.
    wait::until_true("network failures counted", async || stat(&lab, "network_failure").await >= 2).await;
    assert_eq!(flags(&lab, refusing).await, "/failed_active_hc");
    assert_eq!(flags(&lab, good.port).await, "healthy");
    assert_eq!(reached(lab.proxy_port, 10).await, BTreeSet::from(["good".to_owned()]));
    lab.outrider.stop();
}

#[tokio::test]
async fn a_grpc_check_follows_the_serving_status() {
    let ((steady, _), (flaky, serving)) = (grpc_backend().await, grpc_backend().await);
    let check = format!(
        "health_checks: [{{ {FAST}, unhealthy_threshold: 3, healthy_threshold: 1, \
         grpc_health_check: {{ service_name: echo }} }}]"
    );
    let lab = lab(&format!("\n{check}\n"), &assignment(&[steady, flaky])).await;
    let both = BTreeSet::from([steady, flaky]);
    wait_balancer(&lab.outrider, |lb| all_passing(lb, &both)).await;
    assert_eq!(flags(&lab, flaky).await, "healthy");
    // NOT_SERVING fails the host at once, whatever unhealthy_threshold says.
    serving.store(2, Ordering::Relaxed);
    wait_balancer(&lab.outrider, |lb| picked_ports(lb) == BTreeSet::from([steady])).await;
    assert_eq!(flags(&lab, flaky).await, "/failed_active_hc");
    assert_eq!(flags(&lab, steady).await, "healthy");
    serving.store(SERVING, Ordering::Relaxed);
    wait_balancer(&lab.outrider, |lb| all_passing(lb, &both)).await;
    assert_eq!(flags(&lab, flaky).await, "healthy");
    lab.outrider.stop();
}

#[tokio::test]
async fn eds_unhealthy_overrides_a_passing_check() {
    let (good, marked) = (http_backend("good").await, http_backend("marked").await);
    let check = format!(
        "health_checks: [{{ {FAST}, unhealthy_threshold: 1, healthy_threshold: 1, http_health_check: {{ path: /healthz }} }}]"
    );
    let assignment = format!(
        "cluster_name: backend\nendpoints:\n- lb_endpoints:\n  - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n  - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}\n    health_status: UNHEALTHY\n",
        good.port, marked.port
    );
    let lab = lab(&format!("\n{check}\n"), &assignment).await;
    // Its check passes (both hosts counted healthy by the checker) …
    wait_balancer(&lab.outrider, |lb| lb.hosts().iter().all(|h| !h.stats.health().failed())).await;
    // … yet EDS keeps it out of rotation.
    wait_balancer(&lab.outrider, |lb| picked_ports(lb) == BTreeSet::from([good.port])).await;
    assert_eq!(flags(&lab, marked.port).await, "/failed_eds_health");
    assert_eq!(reached(lab.proxy_port, 10).await, BTreeSet::from(["good".to_owned()]));
    lab.outrider.stop();
}

#[tokio::test]
async fn a_passing_check_returns_a_host_outlier_detection_ejected() {
    let (good, bad) = (http_backend("good").await, http_backend("bad").await);
    // 429 is retriable and the threshold far away: the bad host's checks fail without
    // failing it, and without passing (which would return it) until the test says so.
    let extra = format!(
        "\nhealth_checks: [{{ {FAST}, unhealthy_threshold: 1000, healthy_threshold: 1, \
         http_health_check: {{ path: /healthz, retriable_statuses: [{{ start: 429, end: 430 }}] }} }}]\n\
         outlier_detection: {{ consecutive_5xx: 1, interval: 300s, base_ejection_time: 300s }}\n"
    );
    let lab = lab(&extra, &assignment(&[good.port, bad.port])).await;
    let both = BTreeSet::from([good.port, bad.port]);
    wait_balancer(&lab.outrider, |lb| all_passing(lb, &both)).await;
    bad.health.store(429, Ordering::Relaxed);
    // Once a failure is counted, every later probe of the bad host sees 429.
    wait::until_true("a failed check counted", async || stat(&lab, "failure").await > 0).await;
    bad.serve.store(500, Ordering::Relaxed);
    let ejected = |lb: &Arc<ClusterLb>| lb.hosts().iter().filter(|h| h.stats.is_ejected(Instant::now())).count();
    // Round robin reaches the bad host within two requests; its 500 ejects it.
    reached(lab.proxy_port, 2).await;
    wait_balancer(&lab.outrider, |lb| ejected(lb) == 1 && picked_ports(lb) == BTreeSet::from([good.port])).await;
    assert_eq!(flags(&lab, bad.port).await, "/failed_outlier_check");
    // Its next passing check returns it long before the 300 s ejection time.
    bad.health.store(200, Ordering::Relaxed);
    wait_balancer(&lab.outrider, |lb| ejected(lb) == 0 && picked_ports(lb) == both).await;
    assert_eq!(flags(&lab, bad.port).await, "healthy");
    lab.outrider.stop();
}

/// `endpoint.health_check_config`, as Envoy applies it: `port_value` and `address` move the
/// probes of one endpoint elsewhere, `hostname` becomes their `:authority`, and
/// `disable_active_health_check` leaves an endpoint unprobed and in rotation.
#[tokio::test]
async fn an_endpoints_health_check_config_decides_where_and_whether_it_is_probed() {
    // Every backend's own /healthz fails: only a probe sent elsewhere can pass it.
    let (by_port, by_address, unchecked, checked) = (
        http_backend("by_port").await,
        http_backend("by_address").await,
        http_backend("unchecked").await,
        http_backend("checked").await,
    );
    for backend in [&by_port, &by_address, &unchecked, &checked] {
        backend.health.store(503, Ordering::Relaxed);
    }
    let health_port = http_backend("health").await; // answers 200 to /healthz
    let check = format!(
        "health_checks: [{{ {FAST}, unhealthy_threshold: 1, healthy_threshold: 1, http_health_check: {{ path: /healthz }} }}]"
    );
    let endpoint = |port: u16, health_check_config: &str| {
        format!(
            "  - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}, \
             health_check_config: {{ {health_check_config} }} }}\n"
        )
    };
    let assignment = format!(
        "cluster_name: backend\nendpoints:\n- lb_endpoints:\n{}{}{}{}",
        endpoint(by_port.port, &format!("port_value: {}, hostname: hc.by-port.example", health_port.port)),
        endpoint(
            by_address.port,
            &format!("address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }}", health_port.port)
        ),
        endpoint(unchecked.port, "disable_active_health_check: true"),
        endpoint(checked.port, ""),
    );
    let lab = lab(&format!("\n{check}\n"), &assignment).await;
    let in_rotation = BTreeSet::from([by_port.port, by_address.port, unchecked.port]);
    wait_balancer(&lab.outrider, |lb| picked_ports(lb) == in_rotation).await;
    assert_eq!(flags(&lab, by_port.port).await, "healthy");
    assert_eq!(flags(&lab, by_address.port).await, "healthy");
    assert_eq!(flags(&lab, unchecked.port).await, "healthy");
    assert_eq!(flags(&lab, checked.port).await, "/failed_active_hc");
    let names = ["by_address", "by_port", "unchecked"].map(str::to_owned);
    assert_eq!(reached(lab.proxy_port, 12).await, BTreeSet::from(names));
    // The moved probes never reached their endpoints; the disabled one was never probed.
    for backend in [&by_port, &by_address, &unchecked] {
        assert!(backend.probed_as.lock().unwrap().is_empty());
    }
    // `hostname` is the `:authority` of its endpoint's probes; others use the cluster's name.
    let authorities = health_port.probed_as.lock().unwrap().clone();
    assert_eq!(authorities, BTreeSet::from(["backend".to_owned(), "hc.by-port.example".to_owned()]));
    assert_eq!(*checked.probed_as.lock().unwrap(), BTreeSet::from(["backend".to_owned()]));
    lab.outrider.stop();
}
