//! Istio's standard metrics between two Outrider sidecars, configured as istiod configures
//! Envoy: a client sidecar (outbound listener: `istio.metadata_exchange` with upstream
//! discovery and propagation, `istio.stats`) originates mutual TLS to a server sidecar
//! (inbound listener: downstream discovery and propagation, `istio.stats` without the
//! host fallback), which forwards to real HTTP and gRPC backends on loopback. After
//! HTTP/1.1, HTTP/2 and gRPC requests, both `/stats/prometheus` pages are read with a
//! Prometheus parser: each side names the other's workload, which only the metadata
//! exchange can tell it.

use crate::common;
use crate::tls_support;

use std::collections::HashMap;
use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use outrider::config::ResourceType;
use outrider::core::shutdown;
use outrider::testkit::backends::{BackendBehaviour, serve_backend};
use serde_json::{Value, json};
use tls_support::pki::{self, Ca};
use tls_support::yaml::{self, Http};
use tls_support::{addr, free_port};

use common::{ControlPlane, WAIT, wait, wait_snapshot};

const OUTBOUND_CLUSTER: &str = "outbound|9080||reviews.bookinfo.svc.cluster.local";

/// Node metadata as istio-agent writes it for a pod.
pub(crate) fn node_metadata(workload: &str, app: &str, namespace: &str) -> serde_json::Map<String, Value> {
    let value = json!({
        "NAME": format!("{workload}-5d8c7f9b6-x2k4q"),
        "NAMESPACE": namespace,
        "WORKLOAD_NAME": workload,
        "CLUSTER_ID": "Kubernetes",
        "MESH_ID": "cluster.local",
        "ISTIO_VERSION": "1.29.0",
        "OWNER": format!("kubernetes://apis/apps/v1/namespaces/{namespace}/deployments/{workload}"),
        "LABELS": {
            "app": app,
            "version": "v1",
            "service.istio.io/canonical-name": app,
            "service.istio.io/canonical-revision": "v1",
        },
        "SERVICE_ACCOUNT": app,
    });
    value.as_object().unwrap().clone()
}

/// Istio's HTTP filters of a sidecar listener, as istiod renders them.
fn istio_filters(inbound: bool) -> Value {
    let mx = if inbound {
        json!({
            "downstream_discovery": [{ "istio_headers": {} }, { "workload_discovery": {} }],
            "downstream_propagation": [{ "istio_headers": {} }],
        })
    } else {
        json!({
            "upstream_discovery": [{ "istio_headers": {} }, { "workload_discovery": {} }],
            "upstream_propagation": [{ "istio_headers": {} }],
        })
    };
    let mut stats = json!({ "@type": "type.googleapis.com/stats.PluginConfig" });
    if inbound {
        stats["disable_host_header_fallback"] = json!(true);
    }
    json!([
        { "name": "istio.metadata_exchange", "typed_config": {
            "@type": "type.googleapis.com/udpa.type.v1.TypedStruct",
            "type_url": "type.googleapis.com/io.istio.http.peer_metadata.Config",
            "value": mx,
        } },
        { "name": "istio.stats", "typed_config": stats },
        { "name": "envoy.filters.http.router", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
        } },
    ])
}

pub(crate) fn hcm(routes: Value, inbound: bool) -> Value {
    json!([{
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": if inbound { "inbound_0.0.0.0_9080" } else { "outbound_0.0.0.0_9080" },
            "route_config": { "name": "9080", "virtual_hosts": [{ "name": "all", "domains": ["*"], "routes": routes }] },
            "http_filters": istio_filters(inbound),
        },
    }])
}

pub(crate) fn route(prefix: &str, cluster: &str) -> Value {
    json!({ "name": "default", "match": { "prefix": prefix }, "route": { "cluster": cluster } })
}

/// One Outrider with its own control plane and node metadata.
pub(crate) struct Sidecar {
    pub(crate) control_plane: ControlPlane,
    pub(crate) outrider: outrider::app::Running,
}

impl Sidecar {
    async fn start(
        node_id: &str,
        metadata: serde_json::Map<String, Value>,
        resources: [(&[String], ResourceType); 3],
    ) -> Self {
        Self::start_with(node_id, metadata, resources, "").await
    }

    /// [`start`](Self::start) with `extra` top-level keys in the bootstrap.
    pub(crate) async fn start_with(
        node_id: &str,
        metadata: serde_json::Map<String, Value>,
        resources: [(&[String], ResourceType); 3],
        extra: &str,
    ) -> Self {
        let control_plane = ControlPlane::start().await;
        let mut listeners = 0;
        for (yamls, kind) in resources {
            let refs: Vec<&str> = yamls.iter().map(String::as_str).collect();
            control_plane.set(kind, &refs);
            if kind == ResourceType::Listener {
                listeners = yamls.len();
            }
        }
        let text = format!("{}{extra}", common::bootstrap_text(control_plane.port, "DELTA_GRPC"));
        let mut bootstrap = outrider::config::bootstrap::Bootstrap::parse(&text).unwrap();
        bootstrap.node.id = node_id.to_owned();
        bootstrap.node.metadata = metadata;
        let outrider = outrider::app::start_with(bootstrap, 1).await.unwrap();
        wait_snapshot(&outrider.store, |s| s.ready && s.listeners.len() == listeners).await;
        outrider.listeners_ready().await;
        Self { control_plane, outrider }
    }

    /// `/stats/prometheus`, parsed.
    pub(crate) async fn prometheus(&self) -> prometheus_parse::Scrape {
        let (status, body) = common::admin_get(self.outrider.admin_address, "/stats/prometheus").await;
        assert_eq!(status, 200);
        prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap()
    }

    async fn flat_stats(&self) -> String {
        common::admin_get(self.outrider.admin_address, "/stats").await.1
    }
}

/// An HTTP backend answering with whether Istio's peer headers reached it.
pub(crate) async fn header_backend() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|request: http::Request<Incoming>| async move {
                    let seen = request.headers().contains_key("x-envoy-peer-metadata")
                        || request.headers().contains_key("x-envoy-peer-metadata-id");
                    let body = if seen { "peer headers reached the app" } else { "clean" };
                    Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(body))))
                });
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let _ = builder.serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    port
}

/// A GET through the client sidecar over HTTP/1.1 or HTTP/2 (prior knowledge): the
/// status, the body and whether the peer headers came back to the app.
async fn get(port: u16, h2: bool) -> (u16, String, bool) {
    let stream = tokio::net::TcpStream::connect(addr(port)).await.unwrap();
    let request = http::Request::get("/reviews/1")
        .header("host", "reviews.bookinfo.svc.cluster.local:9080")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let exchange = async {
        let response = if h2 {
            let (mut sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
            tokio::spawn(connection);
            let mut request = request;
            *request.uri_mut() = "http://reviews.bookinfo.svc.cluster.local:9080/reviews/1".parse().unwrap();
            sender.send_request(request).await.unwrap()
        } else {
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
            tokio::spawn(connection);
            sender.send_request(request).await.unwrap()
        };
        let status = response.status().as_u16();
        let leaked = response.headers().contains_key("x-envoy-peer-metadata")
            || response.headers().contains_key("x-envoy-peer-metadata-id");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned(), leaked)
    };
    tokio::time::timeout(WAIT, exchange).await.unwrap()
}

/// The samples of `family` whose labels include all of `labels`.
fn samples<'a>(
    scrape: &'a prometheus_parse::Scrape,
    family: &str,
    labels: &[(&str, &str)],
) -> Vec<&'a prometheus_parse::Sample> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == family && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect()
}

fn counter(sample: &prometheus_parse::Sample) -> f64 {
    match sample.value {
        prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
        ref other => panic!("{} is not a counter: {other:?}", sample.metric),
    }
}

pub(crate) fn total(scrape: &prometheus_parse::Scrape, family: &str, labels: &[(&str, &str)]) -> f64 {
    samples(scrape, family, labels).into_iter().map(counter).sum()
}

#[tokio::test]
async fn two_sidecars_report_istios_standard_metrics_naming_each_other() {
    let ca = Ca::new("cluster.local root");
    let http_backend = header_backend().await;
    let grpc_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let grpc_backend = grpc_listener.local_addr().unwrap().port();
    let (_stop_backends, signal) = shutdown::channel();
    tokio::spawn(serve_backend(grpc_listener, BackendBehaviour::new("reviews"), signal));
    let (client_port, server_port) = (free_port(), free_port());
    let client_sa = pki::spiffe("productpage");
    let server_sa = format!("{}/ns/bookinfo/sa/reviews", pki::TRUST_DOMAIN);

    // The server sidecar: STRICT mTLS inbound, gRPC to an HTTP/2 backend, the rest to the app.
    let tls = yaml::common_tls(&["h2", "http/1.1"], json!({ "exact": client_sa }));
    let chain = yaml::chain(
        "mtls",
        json!({ "transport_protocol": "tls" }),
        yaml::downstream_tls(tls, true),
        hcm(json!([route("/outrider.echo.v1.Echo/", "inbound|9080|grpc|"), route("/", "inbound|9080||")]), true),
    );
    let inbound =
        yaml::listener("virtualInbound", server_port, true, vec![chain], json!({ "traffic_direction": "INBOUND" }));
    let server_clusters = [
        yaml::cluster("inbound|9080||", http_backend, Http::Downstream, Value::Null, Value::Null),
        yaml::cluster("inbound|9080|grpc|", grpc_backend, Http::Http2, Value::Null, Value::Null),
    ];
    let server_secrets = [yaml::certificate_secret(&ca.leaf(&server_sa)), yaml::roots_secret(&ca)];
    let server = Sidecar::start(
        "sidecar~10.0.0.2~reviews-v1-5d8c7f9b6-x2k4q.bookinfo~bookinfo.svc.cluster.local",
        node_metadata("reviews-v1", "reviews", "bookinfo"),
        [
            (&server_secrets, ResourceType::Secret),
            (&server_clusters, ResourceType::Cluster),
            (&[inbound], ResourceType::Listener),
        ],
    )
    .await;

    // The client sidecar: plaintext from the app, mTLS to the server sidecar.
    let tls = yaml::common_tls(&[], json!({ "exact": server_sa }));
    let transport = yaml::upstream_tls(tls, "outbound_.9080_._.reviews.bookinfo.svc.cluster.local");
    let client_clusters = [yaml::cluster(OUTBOUND_CLUSTER, server_port, Http::Downstream, transport, Value::Null)];
    let chain = yaml::chain("http", json!({}), Value::Null, hcm(json!([route("/", OUTBOUND_CLUSTER)]), false));
    let outbound =
        yaml::listener("0.0.0.0_9080", client_port, false, vec![chain], json!({ "traffic_direction": "OUTBOUND" }));
    let client_secrets = [yaml::certificate_secret(&ca.leaf(&client_sa)), yaml::roots_secret(&ca)];
    let client = Sidecar::start(
        "sidecar~10.0.0.1~productpage-v1-6b746f74dc-9stvs.default~default.svc.cluster.local",
        node_metadata("productpage-v1", "productpage", "default"),
        [
            (&client_secrets, ResourceType::Secret),
            (&client_clusters, ResourceType::Cluster),
            (&[outbound], ResourceType::Listener),
        ],
    )
    .await;

    // HTTP/1.1 and HTTP/2: the app on either side never sees the peer headers.
    for h2 in [false, true] {
        for _ in 0..2 {
            assert_eq!(get(client_port, h2).await, (200, "clean".to_owned(), false), "h2: {h2}");
        }
    }
    // gRPC: one OK, one NOT_FOUND from the backend's trailers.
    {
        use outrider::pb::echo::EchoRequest;
        use outrider::pb::echo::echo_client::EchoClient;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{client_port}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut grpc = EchoClient::new(channel);
        let reply = grpc.echo(EchoRequest { payload: "ping".into(), ..Default::default() }).await.unwrap();
        assert_eq!(reply.into_inner().backend, "reviews");
        let failed = grpc.echo(EchoRequest { fail_with_code: 5, ..Default::default() }).await.unwrap_err();
        assert_eq!(failed.code(), tonic::Code::NotFound);
    }

    let client_scrape = client.prometheus().await;
    let server_scrape = server.prometheus().await;

    // The client reports as the source and names the server's workload (from the
    // response's metadata), and the service from its Istio cluster name.
    let source: [(&str, &str); 12] = [
        ("reporter", "source"),
        ("destination_principal", server_sa.as_str()),
        ("source_workload", "productpage-v1"),
        ("source_workload_namespace", "default"),
        ("source_app", "productpage"),
        ("source_canonical_service", "productpage"),
        ("source_cluster", "Kubernetes"),
        ("destination_workload", "reviews-v1"),
        ("destination_workload_namespace", "bookinfo"),
        ("destination_canonical_service", "reviews"),
        ("destination_service", "reviews.bookinfo.svc.cluster.local"),
        ("destination_service_name", "reviews"),
    ];
    let http_ok = [("request_protocol", "http"), ("response_code", "200"), ("grpc_response_status", "")];
    let client_http: Vec<_> = source.iter().chain(&http_ok).copied().collect();
    assert_eq!(total(&client_scrape, "istio_requests_total", &client_http), 4.0, "{client_scrape:#?}");
    assert_eq!(
        total(
            &client_scrape,
            "istio_requests_total",
            &[("reporter", "source"), ("connection_security_policy", "unknown")]
        ),
        6.0
    );
    for status in ["0", "5"] {
        let grpc: Vec<_> =
            source.iter().copied().chain([("request_protocol", "grpc"), ("grpc_response_status", status)]).collect();
        assert_eq!(total(&client_scrape, "istio_requests_total", &grpc), 1.0, "grpc-status {status}");
    }

    // The server reports as the destination, names the client's workload (from the
    // request's metadata) and its SPIFFE identity from the client certificate.
    let destination: [(&str, &str); 10] = [
        ("reporter", "destination"),
        ("source_workload", "productpage-v1"),
        ("source_workload_namespace", "default"),
        ("source_app", "productpage"),
        ("source_principal", client_sa.as_str()),
        ("destination_workload", "reviews-v1"),
        ("destination_workload_namespace", "bookinfo"),
        ("destination_app", "reviews"),
        ("destination_service", "reviews"),
        ("connection_security_policy", "mutual_tls"),
    ];
    let server_http: Vec<_> = destination.iter().chain(&http_ok).copied().collect();
    assert_eq!(total(&server_scrape, "istio_requests_total", &server_http), 4.0, "{server_scrape:#?}");
    for status in ["0", "5"] {
        let grpc: Vec<_> = destination
            .iter()
            .copied()
            .chain([("request_protocol", "grpc"), ("response_code", "200"), ("grpc_response_status", status)])
            .collect();
        assert_eq!(total(&server_scrape, "istio_requests_total", &grpc), 1.0, "grpc-status {status}");
    }

    // The histograms have Envoy's default buckets and count every request; gRPC answers
    // are one message each.
    for scrape in [&client_scrape, &server_scrape] {
        for family in ["istio_request_duration_milliseconds", "istio_request_bytes", "istio_response_bytes"] {
            let histograms = samples(scrape, family, &[]);
            let count: u64 = histograms
                .iter()
                .map(|s| match &s.value {
                    prometheus_parse::Value::Histogram(buckets) => {
                        let bounds: Vec<f64> = buckets.iter().map(|b| b.less_than).collect();
                        assert_eq!(bounds.first(), Some(&0.5), "{family}");
                        assert!(bounds.contains(&3_600_000.0), "{family}");
                        buckets.iter().map(|b| b.count as u64).max().unwrap_or(0)
                    }
                    other => panic!("{family} is not a histogram: {other:?}"),
                })
                .sum();
            assert_eq!(count, 6, "{family}");
        }
        let messages = total(scrape, "istio_response_messages_total", &[("request_protocol", "grpc")]);
        assert_eq!(messages, 1.0, "the OK answer's one message (the failure has none)");
        let sent = total(scrape, "istio_request_messages_total", &[("request_protocol", "grpc")]);
        assert_eq!(sent, 2.0, "each of the two unary calls sent one message");
        assert!(!samples(scrape, "istio_build", &[("component", "proxy"), ("tag", "1.29.0")]).is_empty());
    }

    // The flat names are Istio's, so the bootstrap's `reporter=` inclusion prefix keeps them.
    let flat = server.flat_stats().await;
    let istio_line = |l: &&str| {
        l.starts_with("reporter=.=destination;.;source_workload=.=productpage-v1;.;")
            && l.contains(";.;connection_security_policy=.=mutual_tls;.;istio_requests_total: ")
    };
    assert!(flat.lines().any(|l| istio_line(&l)), "{flat}");
    let labels: HashMap<_, _> =
        samples(&server_scrape, "istio_requests_total", &server_http)[0].labels.iter().collect();
    assert_eq!(labels.len(), 25, "Istio's 25 standard labels");

    client.outrider.stop();
    server.outrider.stop();
}

/// A TCP backend that echoes what it reads until the client closes.
async fn tcp_echo() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    port
}

fn typed_struct(type_url: &str, value: Value) -> Value {
    json!({ "@type": "type.googleapis.com/udpa.type.v1.TypedStruct", "type_url": type_url, "value": value })
}

const MX_TYPE: &str = "type.googleapis.com/envoy.tcp.metadataexchange.config.MetadataExchange";

/// Istio's TCP filters: (inbound) the metadata exchange, then the stats, then the proxy.
fn tcp_filters(inbound: bool, cluster: &str) -> Value {
    let mut filters = Vec::new();
    if inbound {
        filters.push(json!({ "name": "istio.metadata_exchange", "typed_config":
            typed_struct(MX_TYPE, json!({ "protocol": "istio-peer-exchange", "enable_discovery": true })) }));
    }
    filters.push(json!({ "name": "istio.stats", "typed_config": typed_struct("type.googleapis.com/stats.PluginConfig", json!({})) }));
    filters.extend(yaml::tcp_proxy(cluster).as_array().unwrap().iter().cloned());
    Value::Array(filters)
}

/// Waits until `done` holds for the sidecar's page (polled: a stat has no change
/// notification): the close is reported when the proxy's copy ends, just after the
/// client saw its end.
async fn scrape_until(sidecar: &Sidecar, done: impl Fn(&prometheus_parse::Scrape) -> bool) -> prometheus_parse::Scrape {
    wait::until("the sidecar to report the connection's close", async || {
        let scrape = sidecar.prometheus().await;
        done(&scrape).then_some(scrape)
    })
    .await
}

#[tokio::test]
async fn tcp_metrics_carry_the_peer_from_the_in_band_exchange() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ca = Ca::new("cluster.local root");
    let backend = tcp_echo().await;
    let (client_port, server_port) = (free_port(), free_port());
    let client_sa = pki::spiffe("productpage");
    let server_sa = format!("{}/ns/bookinfo/sa/reviews", pki::TRUST_DOMAIN);
    let alpn = ["istio-peer-exchange", "istio"];

    let tls = yaml::common_tls(&alpn, json!({ "exact": client_sa }));
    let chain = yaml::chain(
        "mtls",
        json!({ "transport_protocol": "tls" }),
        yaml::downstream_tls(tls, true),
        tcp_filters(true, "inbound|9000||"),
    );
    let inbound =
        yaml::listener("virtualInbound", server_port, true, vec![chain], json!({ "traffic_direction": "INBOUND" }));
    let server_clusters = [yaml::cluster("inbound|9000||", backend, Http::Http1, Value::Null, Value::Null)];
    let server_secrets = [yaml::certificate_secret(&ca.leaf(&server_sa)), yaml::roots_secret(&ca)];
    let server = Sidecar::start(
        "sidecar~10.0.0.2~reviews-v1-5d8c7f9b6-x2k4q.bookinfo~bookinfo.svc.cluster.local",
        node_metadata("reviews-v1", "reviews", "bookinfo"),
        [
            (&server_secrets, ResourceType::Secret),
            (&server_clusters, ResourceType::Cluster),
            (&[inbound], ResourceType::Listener),
        ],
    )
    .await;

    let cluster = "outbound|9000||tcp-echo.bookinfo.svc.cluster.local";
    let tls = yaml::common_tls(&alpn, json!({ "exact": server_sa }));
    let transport = yaml::upstream_tls(tls, "outbound_.9000_._.tcp-echo.bookinfo.svc.cluster.local");
    let mx = json!({ "filters": [{ "name": "istio.metadata_exchange", "typed_config":
        typed_struct(MX_TYPE, json!({ "protocol": "istio-peer-exchange", "enable_discovery": true })) }] });
    let client_clusters = [yaml::cluster(cluster, server_port, Http::Http1, transport, mx)];
    let chain = yaml::chain("tcp", json!({}), Value::Null, tcp_filters(false, cluster));
    let outbound =
        yaml::listener("0.0.0.0_9000", client_port, false, vec![chain], json!({ "traffic_direction": "OUTBOUND" }));
    let client_secrets = [yaml::certificate_secret(&ca.leaf(&client_sa)), yaml::roots_secret(&ca)];
    let client = Sidecar::start(
        "sidecar~10.0.0.1~productpage-v1-6b746f74dc-9stvs.default~default.svc.cluster.local",
        node_metadata("productpage-v1", "productpage", "default"),
        [
            (&client_secrets, ResourceType::Secret),
            (&client_clusters, ResourceType::Cluster),
            (&[outbound], ResourceType::Listener),
        ],
    )
    .await;

    // The application's bytes come back as they were: the frames never reach either app.
    let mut stream = tokio::net::TcpStream::connect(addr(client_port)).await.unwrap();
    let exchange = async {
        stream.write_all(b"hello istio").await.unwrap();
        let mut echoed = [0u8; 11];
        stream.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed, b"hello istio");
        // Both peers are known before the first byte passes: the connection is open on both.
        let opened_client = client.prometheus().await;
        let opened_server = server.prometheus().await;
        stream.shutdown().await.unwrap();
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        (opened_client, opened_server)
    };
    let (opened_client, opened_server) = tokio::time::timeout(WAIT, exchange).await.unwrap();

    let source = [
        ("reporter", "source"),
        ("source_workload", "productpage-v1"),
        ("destination_workload", "reviews-v1"),
        ("destination_workload_namespace", "bookinfo"),
        ("destination_principal", server_sa.as_str()),
        ("destination_service", "tcp-echo.bookinfo.svc.cluster.local"),
        ("request_protocol", "tcp"),
        ("connection_security_policy", "unknown"),
    ];
    let destination = [
        ("reporter", "destination"),
        ("source_workload", "productpage-v1"),
        ("source_workload_namespace", "default"),
        ("source_principal", client_sa.as_str()),
        ("destination_workload", "reviews-v1"),
        ("request_protocol", "tcp"),
        ("connection_security_policy", "mutual_tls"),
    ];
    assert_eq!(total(&opened_client, "istio_tcp_connections_opened_total", &source), 1.0, "{opened_client:#?}");
    assert_eq!(total(&opened_server, "istio_tcp_connections_opened_total", &destination), 1.0, "{opened_server:#?}");

    let closed = |labels: &'static [(&'static str, &'static str)]| {
        move |s: &prometheus_parse::Scrape| total(s, "istio_tcp_connections_closed_total", labels) == 1.0
    };
    let client_closed = scrape_until(&client, closed(&[("reporter", "source")])).await;
    let server_closed = scrape_until(&server, closed(&[("reporter", "destination")])).await;
    // The client's app sent and got 11 bytes; the server's side of its downstream also
    // carries the two exchange frames, so it counts more.
    assert_eq!(total(&client_closed, "istio_tcp_received_bytes_total", &source), 11.0);
    assert_eq!(total(&client_closed, "istio_tcp_sent_bytes_total", &source), 11.0);
    assert!(total(&server_closed, "istio_tcp_received_bytes_total", &destination) > 11.0);
    assert!(total(&server_closed, "istio_tcp_sent_bytes_total", &destination) > 11.0);
    let labels = samples(&server_closed, "istio_tcp_connections_closed_total", &destination)[0].labels.iter().count();
    assert_eq!(labels, 23, "Istio's TCP labels: no response code or gRPC status");

    client.outrider.stop();
    server.outrider.stop();
}
