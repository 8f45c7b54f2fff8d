//! A real istiod drives Outrider: pilot-discovery in file mode (no Kubernetes) serves Istio
//! resources written as YAML — ServiceEntry endpoints that are backends on loopback,
//! DestinationRule, VirtualService, Sidecar, PeerAuthentication, AuthorizationPolicy,
//! Telemetry — over plaintext ADS, and Outrider connects with an Istio sidecar's node id and
//! metadata. Every resource istiod sends must be ACKed, and the traffic through the
//! listeners istiod renders must reach the backends it names, in the shares it names.

use crate::common;

use crate::tls_support;

use std::collections::BTreeMap;

use bytes::Bytes;
use common::differential::{grpc_cluster, raw_http1, stat_value};
use common::istiod::{Istiod, sidecar_node_id};
use common::load::Load;
use common::wait;
use common::{ControlPlane, admin_get, backends};
use http_body_util::Full;
use outrider::app::{self, Running};
use outrider::config::ResourceType;
use outrider::config::bootstrap::Bootstrap;
use tls_support::pki::{self, Ca};
use tls_support::yaml as tls_yaml;

/// The agent's part, played by the test: an SDS server (Outrider's embedded control plane)
/// serving Istio's two secrets, `default` (the workload certificate) and `ROOTCA`.
pub(crate) struct Agent {
    sds: ControlPlane,
    pub(crate) ca: Ca,
}

impl Agent {
    pub(crate) async fn start() -> Agent {
        let ca = Ca::new("cluster.local");
        let sds = ControlPlane::start().await;
        let leaf = ca.leaf(&pki::spiffe("default"));
        sds.set(ResourceType::Secret, &[&tls_yaml::certificate_secret(&leaf), &tls_yaml::roots_secret(&ca)]);
        Agent { sds, ca }
    }
}

/// Outrider's bootstrap as an injected sidecar's (the node id and metadata istiod keys on),
/// with ADS to `istiod` in SotW (`GRPC`) or Delta (`DELTA_GRPC`) and SDS from `agent`.
/// Interception mode NONE: istiod then renders listeners that bind their ports (no
/// iptables in a test).
fn sidecar_bootstrap(istiod: &Istiod, agent: &Agent, api_type: &str) -> Bootstrap {
    sidecar_bootstrap_with(istiod, agent, api_type, "")
}

/// [`sidecar_bootstrap`] with more node metadata (`metadata`: YAML lines, each indented
/// four spaces).
pub(crate) fn sidecar_bootstrap_with(istiod: &Istiod, agent: &Agent, api_type: &str, metadata: &str) -> Bootstrap {
    let node = sidecar_node_id("127.0.0.1", "app-1", "default");
    let clusters = grpc_cluster("xds-grpc", istiod.grpc.port()) + &grpc_cluster("sds-grpc", agent.sds.port);
    Bootstrap::parse(&format!(
        r#"
node:
  id: "{node}"
  cluster: app.default
  metadata:
    ISTIO_VERSION: "1.29.6"
    CLUSTER_ID: Kubernetes
    NAMESPACE: default
    MESH_ID: cluster.local
    SERVICE_ACCOUNT: default
    WORKLOAD_NAME: app
    NAME: app-1
    INSTANCE_IPS: 127.0.0.1
    INTERCEPTION_MODE: NONE
    LABELS: {{ app: app, version: v1 }}
{metadata}admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
dynamic_resources:
  ads_config:
    api_type: {api_type}
    transport_api_version: V3
    set_node_on_first_message_only: true
    grpc_services: [{{ envoy_grpc: {{ cluster_name: xds-grpc }} }}]
  lds_config: {{ ads: {{}}, initial_fetch_timeout: 0s, resource_api_version: V3 }}
  cds_config: {{ ads: {{}}, initial_fetch_timeout: 0s, resource_api_version: V3 }}
static_resources:
  clusters:{clusters}
"#
    ))
    .unwrap()
}

/// A ServiceEntry `host` on `port` whose endpoints are `backends` (port, version label).
pub(crate) fn service_entry(name: &str, host: &str, port: u16, backends: &[(u16, &str)]) -> String {
    let endpoints: String = backends
        .iter()
        .map(|(port, version)| {
            format!("  - {{ address: 127.0.0.1, ports: {{ http: {port} }}, labels: {{ version: {version} }} }}\n")
        })
        .collect();
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{ name: {name}, namespace: default }}
spec:
  hosts: [{host}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {{ number: {port}, name: http, protocol: HTTP }}
  endpoints:
{endpoints}"#
    )
}

/// Outrider's xDS counters by type: (applied, rejected).
pub(crate) async fn xds_updates(outrider: &Running) -> BTreeMap<&'static str, (u64, u64)> {
    let (_, body) = admin_get(outrider.admin_address, "/stats").await;
    [
        ("lds", "listener_manager.lds"),
        ("cds", "cluster_manager.cds"),
        ("rds", "outrider.xds.rds"),
        ("eds", "outrider.xds.eds"),
    ]
    .into_iter()
    .map(|(short, prefix)| {
        let value = |suffix: &str| stat_value(&body, &format!("{prefix}.{suffix}"));
        (short, (value("update_success"), value("update_rejected")))
    })
    .collect()
}

/// Starts Outrider against `istiod` and waits until the listener on `port` serves: its
/// route and clusters applied, their endpoints and secrets in (warming over).
pub(crate) async fn start_sidecar(istiod: &Istiod, agent: &Agent, api_type: &str, port: u16, host: &str) -> Running {
    let outrider = app::start(sidecar_bootstrap(istiod, agent, api_type)).await.unwrap();
    wait::until_true("the generated listener serves", async || {
        let (status, _, _) = get(port, host, "/").await;
        status == 200
    })
    .await;
    outrider
}

pub(crate) async fn get(port: u16, host: &str, path: &str) -> (u16, Vec<(String, String)>, String) {
    let request = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(_) => raw_http1(port, &request).await,
        Err(_) => (0, Vec::new(), String::new()),
    }
}

/// `requests` GETs of `path`, counted by status and body (the body names the backend).
pub(crate) async fn spread(port: u16, host: &str, path: &str, requests: usize) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for _ in 0..requests {
        let (status, _, body) = get(port, host, path).await;
        *seen.entry(format!("{status} {body}")).or_insert(0) += 1;
    }
    seen
}

/// A backend answering with `name`, and the path and headers it was sent as headers
/// (`x-seen-path`, `x-seen-host`), so a test sees rewrites.
pub(crate) async fn named_backend(name: &'static str) -> backends::Backend {
    backends::http(move |request: http::Request<hyper::body::Incoming>| async move {
        let host = request.headers().get("host").and_then(|h| h.to_str().ok()).unwrap_or("").to_owned();
        http::Response::builder()
            .header("x-seen-path", request.uri().path_and_query().map(|p| p.as_str()).unwrap_or(""))
            .header("x-seen-host", host)
            .body(Full::new(Bytes::from_static(name.as_bytes())))
            .unwrap()
    })
    .await
}

const HOST: &str = "reviews.default.svc.cluster.local";

/// DestinationRule: subsets v1/v2, least request, outlier detection, connection pool,
/// locality settings, as an Istio user writes them.
fn destination_rule() -> String {
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{ name: reviews, namespace: default }}
spec:
  host: {HOST}
  trafficPolicy:
    loadBalancer:
      simple: LEAST_REQUEST
      localityLbSetting: {{ enabled: true }}
    connectionPool:
      tcp: {{ maxConnections: 100, connectTimeout: 2s }}
      http: {{ http1MaxPendingRequests: 100, maxRequestsPerConnection: 10, idleTimeout: 60s }}
    outlierDetection:
      consecutive5xxErrors: 5
      interval: 10s
      baseEjectionTime: 30s
      maxEjectionPercent: 50
  subsets:
  - name: v1
    labels: {{ version: v1 }}
  - name: v2
    labels: {{ version: v2 }}
    trafficPolicy:
      loadBalancer:
        consistentHash: {{ httpHeaderName: x-user }}
"#
    )
}

/// VirtualService: `x-canary: yes` → v2; `/ratings/...` rewritten to `/...` on v1;
/// `/regex/a/b` rewritten by `uriRegexRewrite` to `/b/a`; `/mirrored` served by v1 and
/// mirrored to v2; a `/fault` prefix aborted with 418; everything else 90/10 between v1 and v2, with retries
/// and a timeout.
fn virtual_service(v1: u32, v2: u32) -> String {
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{ name: reviews, namespace: default }}
spec:
  hosts: [{HOST}]
  http:
  - match: [{{ headers: {{ x-canary: {{ exact: "yes" }} }} }}]
    route: [{{ destination: {{ host: {HOST}, subset: v2 }} }}]
  - match: [{{ uri: {{ prefix: /ratings/ }} }}]
    rewrite: {{ uri: / }}
    route: [{{ destination: {{ host: {HOST}, subset: v1 }} }}]
  - match: [{{ uri: {{ prefix: /regex/ }} }}]
    rewrite: {{ uriRegexRewrite: {{ match: "^/regex/([a-z]+)/(.*)$", rewrite: "/\\2/\\1" }} }}
    route: [{{ destination: {{ host: {HOST}, subset: v1 }} }}]
  - match: [{{ uri: {{ prefix: /mirrored }} }}]
    mirror: {{ host: {HOST}, subset: v2 }}
    mirrorPercentage: {{ value: 100 }}
    route: [{{ destination: {{ host: {HOST}, subset: v1 }} }}]
  - match: [{{ uri: {{ prefix: /fault }} }}]
    fault: {{ abort: {{ httpStatus: 418, percentage: {{ value: 100 }} }} }}
    route: [{{ destination: {{ host: {HOST}, subset: v1 }} }}]
  - route:
    - {{ destination: {{ host: {HOST}, subset: v1 }}, weight: {v1} }}
    - {{ destination: {{ host: {HOST}, subset: v2 }}, weight: {v2} }}
    retries: {{ attempts: 2, perTryTimeout: 2s, retryOn: "5xx,connect-failure" }}
    timeout: 10s
"#
    )
}

/// Policy resources istiod turns into filters and transport settings on the inbound side
/// and into the sidecar's scope.
const POLICY: &str = r#"apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: { name: default, namespace: default }
spec:
  mtls: { mode: PERMISSIVE }
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: deny-admin, namespace: default }
spec:
  action: DENY
  rules:
  - to: [{ operation: { paths: ["/admin*"] } }]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: { name: default, namespace: default }
spec:
  egress:
  - hosts: ["./*"]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: { name: default, namespace: default }
spec:
  accessLogging:
  - providers: [{ name: envoy }]
"#;

/// Every resource istiod renders for this mesh is applied (none rejected), in SotW and in
/// Delta, and the traffic through the generated listener follows the VirtualService:
/// header match, rewrite, fault, and a 90/10 split measured over 1 000 requests.
async fn istiod_resources_apply_and_route(api_type: &str) {
    let Some(binary) = Istiod::binary(&format!("istiod_resources_apply_and_route ({api_type})")) else { return };
    let (v1, v2) = (named_backend("v1").await, named_backend("v2").await);
    let port = common::lab::free_port();
    let se = service_entry("reviews", HOST, port, &[(v1.port, "v1"), (v2.port, "v2")]);
    let (dr, vs) = (destination_rule(), virtual_service(90, 10));
    let configs = [("reviews.yaml", se.as_str()), ("dr.yaml", &dr), ("vs.yaml", &vs), ("policy.yaml", POLICY)];
    let istiod = Istiod::start(&binary, &configs).await;
    let agent = Agent::start().await;
    let outrider = start_sidecar(&istiod, &agent, api_type, port, HOST).await;

    let updates = xds_updates(&outrider).await;
    assert!(updates.values().all(|(_, rejected)| *rejected == 0), "rejected: {updates:?}");
    assert!(updates.values().all(|(applied, _)| *applied > 0), "nothing applied for a type: {updates:?}");
    // `istioctl proxy-config` reads the dump: every resource istiod sent shows in full,
    // Istio's own typed filter configs (`istio.alpn`, `istio.stats`) included.
    let (_, dump) = admin_get(outrider.admin_address, "/config_dump").await;
    assert!(!dump.contains("\"error\""), "a resource the dump cannot show: {dump}");
    assert!(dump.contains("istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig"), "{dump}");

    let (status, _, body) = get_with(port, "/", &[("x-canary", "yes")]).await;
    assert_eq!((status, body.as_str()), (200, "v2"));
    let (status, headers, body) = get(port, HOST, "/ratings/stars?x=1").await;
    assert_eq!((status, body.as_str()), (200, "v1"));
    assert_eq!(header(&headers, "x-seen-path"), Some("/stars?x=1"));
    let (status, headers, body) = get(port, HOST, "/regex/stars/five?x=1").await;
    assert_eq!((status, body.as_str()), (200, "v1"));
    assert_eq!(header(&headers, "x-seen-path"), Some("/five/stars?x=1"));
    let (status, _, _) = get(port, HOST, "/fault").await;
    assert_eq!(status, 418);
    // Istio's `mirror`: v1 answers, v2 gets the shadow (fire and forget).
    let (v1_before, v2_before) = (v1.seen.requests(), v2.seen.requests());
    let (status, _, body) = get(port, HOST, "/mirrored").await;
    assert_eq!((status, body.as_str()), (200, "v1"));
    wait::until_sync("the shadow reaches v2", || v2.seen.requests() == v2_before + 1).await;
    assert_eq!(v1.seen.requests(), v1_before + 1);

    // 90/10: v2's share of 1 000 requests is binomial (p = 0.1, σ ≈ 9.5); the bounds are
    // over 6σ wide, so the split is checked without a flaky threshold.
    let seen = spread(port, HOST, "/", 1000).await;
    let v2_share = seen.get("200 v2").copied().unwrap_or(0);
    assert_eq!(seen.get("200 v1").copied().unwrap_or(0) + v2_share, 1000, "{seen:?}");
    println!("90/10 split over 1000 requests ({api_type}): {seen:?}");
    assert!((40..=160).contains(&v2_share), "v2 took {v2_share} of 1000: {seen:?}");
}

async fn get_with(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>, String) {
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    raw_http1(port, &format!("GET {path} HTTP/1.1\r\nhost: {HOST}\r\n{extra}connection: close\r\n\r\n")).await
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istiod_resources_apply_and_route_sotw() {
    istiod_resources_apply_and_route("GRPC").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istiod_resources_apply_and_route_delta() {
    istiod_resources_apply_and_route("DELTA_GRPC").await;
}

/// A VirtualService edited on disk is pushed by istiod and applied by Outrider: the split
/// moves from all-v1 to all-v2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yaml_change_is_pushed_and_applied() {
    let Some(binary) = Istiod::binary("a_yaml_change_is_pushed_and_applied") else { return };
    let (v1, v2) = (named_backend("v1").await, named_backend("v2").await);
    let port = common::lab::free_port();
    let se = service_entry("reviews", HOST, port, &[(v1.port, "v1"), (v2.port, "v2")]);
    let (dr, vs) = (destination_rule(), virtual_service(100, 0));
    let istiod = Istiod::start(&binary, &[("reviews.yaml", se.as_str()), ("dr.yaml", &dr), ("vs.yaml", &vs)]).await;
    let agent = Agent::start().await;
    let outrider = start_sidecar(&istiod, &agent, "GRPC", port, HOST).await;
    assert_eq!(spread(port, HOST, "/", 20).await, BTreeMap::from([("200 v1".to_owned(), 20)]));

    istiod.write("vs.yaml", &virtual_service(0, 100));
    wait::until_true("the new split is applied", async || get(port, HOST, "/").await.2 == "v2").await;
    assert_eq!(spread(port, HOST, "/", 20).await, BTreeMap::from([("200 v2".to_owned(), 20)]));
    let updates = xds_updates(&outrider).await;
    assert!(updates.values().all(|(_, rejected)| *rejected == 0), "rejected: {updates:?}");
}

/// istiod restarted while requests flow: Outrider keeps serving its last configuration,
/// reconnects, and no request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_istiod_restart_under_load_loses_no_request() {
    let Some(binary) = Istiod::binary("an_istiod_restart_under_load_loses_no_request") else { return };
    let backend = named_backend("v1").await;
    let port = common::lab::free_port();
    // The load generator's requests carry `host: example.com`.
    let se = service_entry("example", "example.com", port, &[(backend.port, "v1")]);
    let mut istiod = Istiod::start(&binary, &[("example.yaml", se.as_str())]).await;
    let agent = Agent::start().await;
    let outrider = start_sidecar(&istiod, &agent, "GRPC", port, "example.com").await;
    let connected = |outrider: &Running| {
        let address = outrider.admin_address;
        async move {
            let (_, body) = admin_get(address, "/stats").await;
            stat_value(&body, "control_plane.connected_state")
        }
    };
    assert_eq!(connected(&outrider).await, 1);

    let load = Load::start(port, 4, 400);
    load.wait_answered(50).await;
    istiod.stop().await;
    wait::until_true("Outrider sees istiod gone", async || connected(&outrider).await == 0).await;
    load.wait_answered(50).await;
    istiod.restart().await;
    wait::until_true("Outrider reconnects", async || connected(&outrider).await == 1).await;
    load.wait_answered(50).await;
    let (sent, succeeded, failed, errors) = load.finish().await;
    assert_eq!((failed, succeeded), (0, sent), "errors: {errors:?}");
    let updates = xds_updates(&outrider).await;
    assert!(updates.values().all(|(_, rejected)| *rejected == 0), "rejected: {updates:?}");
}

/// The inbound side as istiod renders it for a workload: a Sidecar ingress port in front of
/// the application, PeerAuthentication and AuthorizationPolicy selecting the workload.
pub(crate) fn inbound_configs(port: u16, app: u16, mode: &str) -> String {
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{ name: app, namespace: default }}
spec:
  workloadSelector: {{ labels: {{ app: app }} }}
  ingress:
  - port: {{ number: {port}, protocol: HTTP, name: http }}
    defaultEndpoint: 127.0.0.1:{app}
  egress:
  - hosts: ["./*"]
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {{ name: app, namespace: default }}
spec:
  selector: {{ matchLabels: {{ app: app }} }}
  mtls: {{ mode: {mode} }}
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{ name: deny-admin, namespace: default }}
spec:
  selector: {{ matchLabels: {{ app: app }} }}
  action: DENY
  rules:
  - to: [{{ operation: {{ paths: ["/admin*"] }} }}]
"#
    )
}

/// What istiod renders for the inbound side is enforced: in PERMISSIVE mode plaintext and
/// mutual TLS (Istio's ALPN) both reach the application, the AuthorizationPolicy's DENY
/// answers 403 on either; switched to STRICT, plaintext is refused and mutual TLS still
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbound_peer_authentication_and_authorization_are_enforced() {
    let Some(binary) = Istiod::binary("inbound_peer_authentication_and_authorization_are_enforced") else { return };
    let app = named_backend("app").await;
    let port = tls_support::free_port();
    let istiod = Istiod::start(&binary, &[("inbound.yaml", &inbound_configs(port, app.port, "PERMISSIVE"))]).await;
    let agent = Agent::start().await;
    let outrider = app::start(sidecar_bootstrap(&istiod, &agent, "GRPC")).await.unwrap();
    wait::until_true("the inbound listener serves", async || get(port, "app", "/").await.0 == 200).await;

    let client = agent.ca.leaf(&pki::spiffe("caller"));
    // Istio's client sidecar offers these on a mesh connection.
    let mtls = || tls_support::client_config(&agent.ca, Some(&client), &["istio-http/1.1", "istio", "http/1.1"]);
    let before = app.seen.requests();
    assert_eq!(get(port, "app", "/ok").await.2, "app");
    assert_eq!(tls_support::tls_get(port, mtls()).await, Ok((200, "app".to_owned())));
    let (status, _, body) = get(port, "app", "/admin/users").await;
    assert_eq!((status, body.as_str()), (403, "RBAC: access denied"));
    assert_eq!(app.seen.requests(), before + 2, "the denied request never reaches the application");

    istiod.write("inbound.yaml", &inbound_configs(port, app.port, "STRICT"));
    wait::until_true("STRICT is applied", async || match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(stream) => tls_support::read_until_closed(stream_with_request(stream).await).await.is_empty(),
        Err(_) => false,
    })
    .await;
    assert_eq!(tls_support::tls_get(port, mtls()).await, Ok((200, "app".to_owned())));
    let updates = xds_updates(&outrider).await;
    assert!(updates.values().all(|(_, rejected)| *rejected == 0), "rejected: {updates:?}");
}

async fn stream_with_request(mut stream: tokio::net::TcpStream) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let _ = stream.write_all(b"GET / HTTP/1.1\r\nhost: app\r\nconnection: close\r\n\r\n").await;
    stream
}

/// A sidecar calling its own inbound port through the mesh: the ServiceEntry's endpoint is
/// the inbound listener, labelled as Istio labels injected workloads (`tlsMode: istio`), so
/// istiod renders mutual TLS for it (auto mTLS, and explicitly `ISTIO_MUTUAL` in the
/// DestinationRule), with the endpoint's service account as the SAN to check.
pub(crate) fn mesh_loop_configs(outbound: u16, inbound: u16, app: u16) -> String {
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{ name: app, namespace: default }}
spec:
  hosts: [app.default.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {{ number: {outbound}, name: http, protocol: HTTP, targetPort: {inbound} }}
  endpoints:
  - address: 127.0.0.1
    serviceAccount: default
    labels: {{ app: app, security.istio.io/tlsMode: istio }}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{ name: app, namespace: default }}
spec:
  host: app.default.svc.cluster.local
  trafficPolicy:
    tls: {{ mode: ISTIO_MUTUAL }}
---
{}"#,
        inbound_configs(inbound, app, "STRICT")
    )
}

/// Outbound mutual TLS as istiod renders it: Outrider originates Istio's mTLS (SDS
/// certificate, SPIFFE SAN check) to an inbound port in STRICT mode, which terminates it
/// and reaches the application; AuthorizationPolicy is enforced on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_mutual_tls_between_outbound_and_inbound() {
    let Some(binary) = Istiod::binary("istio_mutual_tls_between_outbound_and_inbound") else { return };
    let app = named_backend("app").await;
    let (outbound, inbound) = (tls_support::free_port(), tls_support::free_port());
    let istiod = Istiod::start(&binary, &[("mesh.yaml", &mesh_loop_configs(outbound, inbound, app.port))]).await;
    let agent = Agent::start().await;
    let host = "app.default.svc.cluster.local";
    let outrider = start_sidecar(&istiod, &agent, "GRPC", outbound, host).await;

    let (status, _, body) = get(outbound, host, "/ok").await;
    assert_eq!((status, body.as_str()), (200, "app"));
    // The only TLS in this test is the hop from the outbound listener to the inbound port
    // (xDS and SDS are plaintext): both of its ends count a completed handshake. (Whether
    // `/ok` opened a new connection or reused the one the readiness wait opened varies.)
    assert!(outrider.tls.upstream.handshakes() >= 1, "the hop to the inbound port is mutual TLS");
    assert!(outrider.tls.downstream.handshakes() >= 1, "the inbound port terminated it");
    let (status, _, body) = get(outbound, host, "/admin").await;
    assert_eq!((status, body.as_str()), (403, "RBAC: access denied"));
    // The inbound port is STRICT: plaintext straight to it is refused.
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", inbound)).await.unwrap();
    assert!(tls_support::read_until_closed(stream_with_request(stream).await).await.is_empty());
    let updates = xds_updates(&outrider).await;
    assert!(updates.values().all(|(_, rejected)| *rejected == 0), "rejected: {updates:?}");
}

/// The Telemetry API's OpenTelemetry providers as istiod renders them: tracing on the
/// connection manager (`tracing.provider`, OTLP/gRPC to `outbound|4317||<collector>`) and
/// the `envoyOtelAls` access logger, both to a collector that is a ServiceEntry whose
/// endpoint is a real OTLP receiver. Everything is ACKed, and a request through the
/// generated listener yields a span and a log record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_api_opentelemetry_tracing_and_access_logs_export() {
    let Some(binary) = Istiod::binary("telemetry_api_opentelemetry_tracing_and_access_logs_export") else { return };
    let (collector, mut spans, mut logs) = common::otlp::receiver().await;
    let v1 = named_backend("v1").await;
    let port = common::lab::free_port();
    let collector_host = "otel-collector.observability.svc.cluster.local";
    let mesh = format!(
        r#"extensionProviders:
- name: otel-tracing
  opentelemetry: {{ service: {collector_host}, port: 4317 }}
- name: otel-als
  envoyOtelAls: {{ service: {collector_host}, port: 4317 }}
"#
    );
    let reviews = service_entry("reviews", HOST, port, &[(v1.port, "v1")]);
    let otel = format!(
        r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{ name: otel-collector, namespace: default }}
spec:
  hosts: [{collector_host}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{{ number: 4317, name: grpc, protocol: GRPC }}]
  endpoints: [{{ address: 127.0.0.1, ports: {{ grpc: {collector} }} }}]
---
apiVersion: telemetry.istio.io/v1
kind: Telemetry
metadata: {{ name: default, namespace: default }}
spec:
  tracing:
  - providers: [{{ name: otel-tracing }}]
    randomSamplingPercentage: 100
  accessLogging:
  - providers: [{{ name: otel-als }}]
"#
    );
    let configs = [("reviews.yaml", reviews.as_str()), ("otel.yaml", otel.as_str())];
    let istiod = Istiod::start_with_mesh(&binary, &mesh, &configs).await;
    let agent = Agent::start().await;
    let outrider = start_sidecar(&istiod, &agent, "DELTA_GRPC", port, HOST).await;
    let updates = xds_updates(&outrider).await;
    assert!(updates.values().all(|(_, rejected)| *rejected == 0), "rejected: {updates:?}");
    let (_, dump) = admin_get(outrider.admin_address, "/config_dump").await;
    assert!(dump.contains("outbound|4317||otel-collector.observability.svc.cluster.local"), "{dump}");

    let (status, _, body) = get(port, HOST, "/traced").await;
    assert_eq!((status, body.as_str()), (200, "v1"));
    // The requests that waited for the listener came first; each receive is bounded.
    let span = loop {
        let (_, span) = common::otlp::next_span(&mut spans).await;
        if span.name == format!("{HOST}/traced") {
            break span;
        }
    };
    let (record, body) = loop {
        let log = common::otlp::next_log(&mut logs).await;
        let body = match log.record.body.as_ref().and_then(|b| b.value.as_ref()) {
            Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s)) => s.clone(),
            other => panic!("a text body: {other:?}"),
        };
        if body.contains("/traced") {
            break (log.record, body);
        }
    };
    assert!(body.contains("\"GET /traced HTTP/1.1\" 200"), "Istio's default format: {body}");
    assert_eq!(record.trace_id, span.trace_id, "the record names the request's trace");
    outrider.stop();
}
