//! HBONE between a sidecar and ztunnel, Istio's proxy for ambient workloads, built from its
//! source (`tests/peers/ztunnel/build.sh`). Each runs in a pod of its own: a network namespace
//! with the pod's address, the two joined by a veth pair. Both identities come from one root,
//! ztunnel's test CA (`FAKE_CA`), whose key signs the sidecar's certificate here.
//!
//! - **Sidecar → ztunnel**: the sidecar pod's application calls the ambient pod's through
//!   the sidecar, with Istio's outbound HBONE shapes: an endpoint that is the internal
//!   listener `connect_originate` carrying the destination, a TCP proxy tunnelling it as an
//!   HTTP/2 `CONNECT` over mutual TLS to ztunnel's 15008. ztunnel checks the sidecar's
//!   identity against its authorization policy; the sidecar checks ztunnel's certificate
//!   names the workload it expects.
//! - **ztunnel → sidecar**: the ambient pod's application calls the sidecar pod's through
//!   ztunnel (its SOCKS5 port stands in for its traffic capture). ztunnel opens HBONE to the
//!   sidecar's 15008 and checks the certificate is the destination workload's; the
//!   sidecar's `connect_terminate` and `main_internal` send the tunnel to the inbound chain of
//!   its port, whose RBAC sees ztunnel's identity (`io.istio.peer_principal`).
//!
//! The same bootstrap runs Envoy 1.40 as the sidecar in a second pair of pods, and what the
//! applications saw is compared.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use crate::common;
use crate::netns::{self, CLIENT_V4, Lab, POD_V4, in_netns, serve, wait_for_listener};
use crate::tls_support::pki;
use common::differential::{INTERNAL, INTERNAL_LISTENER_EXTENSION, on_loopback, static_cluster, tcp_proxy_listener};
use common::tunnel::{Certificates, MAIN_INTERNAL_CLUSTER, connect_originate_cluster, connect_terminate_at};

/// The pod where ztunnel serves the ambient workload `ambient` (the lab's "client" side).
const AMBIENT: &str = CLIENT_V4;
/// The sidecar pod's workload `sidecar` (the lab's "pod" side).
const SIDECAR: &str = POD_V4;
/// One more address of the sidecar pod, which ztunnel's workload table gives to a workload of
/// another identity: what answers there has the sidecar's certificate, not that one's.
const IMPOSTOR: &str = "198.18.0.3";
/// Istio's HBONE port, which ztunnel always dials.
const HBONE: u16 = 15008;
/// Application ports: `OPEN` is allowed to the other side's identity on both pods, `PRIVATE`
/// to an identity no one has.
const OPEN: u16 = 8080;
const PRIVATE: u16 = 9090;
/// The sidecar's outbound listeners, each standing for the captured call it names.
const TO_AMBIENT_OPEN: u16 = 15101;
const TO_AMBIENT_PRIVATE: u16 = 15102;
const TO_AMBIENT_AS_IMPOSTOR: u16 = 15103;

fn spiffe(service_account: &str) -> String {
    pki::spiffe(service_account)
}

/// ztunnel's workloads and policy (its `LOCAL_XDS_PATH` file): `ambient`, served by this
/// ztunnel; `sidecar` and `impostor`, reached over HBONE. `ambient` takes `OPEN` from the
/// identity `sidecar` and `PRIVATE` from `nobody`.
fn ztunnel_config() -> String {
    let workload = |name: &str, ip: &str| {
        format!(
            r#"
- uid: Kubernetes//Pod/default/{name}
  name: {name}
  namespace: default
  serviceAccount: {name}
  trustDomain: cluster.local
  workloadIps: ["{ip}"]
  protocol: HBONE
  node: node
  services: {{}}"#
        )
    };
    let allow = |name: &str, principal: &str, port: u16| {
        format!(
            r#"
- name: {name}
  namespace: default
  scope: Namespace
  action: Allow
  dryRun: false
  rules: [[[{{ principals: [!Exact "cluster.local/ns/default/sa/{principal}"] }}], [{{ destinationPorts: [{port}] }}]]]"#
        )
    };
    format!(
        "workloads:{}{}{}\npolicies:{}{}\n",
        workload("ambient", AMBIENT),
        workload("sidecar", SIDECAR),
        workload("impostor", IMPOSTOR),
        allow("sidecar-to-open", "sidecar", OPEN),
        allow("nobody-to-private", "nobody", PRIVATE),
    )
}

/// An outbound cluster whose one endpoint is the internal listener `originate`, carrying the
/// destination `ip:port` in its metadata (Istio's `tunnel: http` endpoint).
fn hbone_service(name: &str, originate: &str, ip: &str, port: u16) -> String {
    format!(
        r#"
  - name: {name}
    type: STATIC
    connect_timeout: 5s
    transport_socket_matches:
    - name: hbone
      match: {{ tunnel: http }}
      transport_socket:
        name: envoy.transport_sockets.internal_upstream
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.internal_upstream.v3.InternalUpstreamTransport
          passthrough_metadata: [{{ kind: {{ host: {{}} }}, name: envoy.filters.listener.original_dst }}]
          transport_socket:
            name: envoy.transport_sockets.raw_buffer
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer }}
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ envoy_internal_address: {{ server_listener_name: {originate}, endpoint_id: "{ip}:{port}" }} }} }}
          metadata:
            filter_metadata:
              envoy.filters.listener.original_dst: {{ local: "{ip}:{port}" }}
              envoy.transport_socket_match: {{ tunnel: http }}"#
    )
}

/// The internal listener `name` and its ORIGINAL_DST cluster: the restored destination
/// tunnelled as an HTTP/2 `CONNECT` to its HBONE port over mutual TLS, the server's
/// certificate required to name `expected`.
fn originate(name: &str, certificates: &Certificates, expected: &str) -> (String, String) {
    let listener = tcp_proxy_listener(
        name,
        &format!(
            "{INTERNAL}
    listener_filters:
    - name: envoy.filters.listener.original_dst
      typed_config: {{ \"@type\": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst }}"
        ),
        name,
        "\n          tunneling_config: { hostname: \"%DOWNSTREAM_LOCAL_ADDRESS%\" }",
    );
    let transport = format!(
        r#"
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext{}"#,
        certificates.tls(8, &format!("{{ exact: \"{expected}\" }}"))
    );
    let cluster = connect_originate_cluster(name, HBONE, &transport);
    (listener, cluster)
}

/// Istio's `connect_terminate` on 0.0.0.0:15008: mutual TLS (a client certificate of the
/// trust domain required), HTTP/2 `CONNECT` to `main_internal`, with the tunnel's
/// destination, source and peer identity as filter state shared with the upstream once.
fn connect_terminate(certificates: &Certificates) -> String {
    let state = |key: &str, factory: &str, format: &str| {
        format!(
            r#"
              - object_key: {key}{factory}
                format_string: {{ text_format_source: {{ inline_string: "{format}" }} }}
                shared_with_upstream: ONCE"#
        )
    };
    let filters = format!(
        r#"
          - name: connect_authority
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.set_filter_state.v3.Config
              on_request_headers:{}{}{}"#,
        state("envoy.filters.listener.original_dst.local_ip", "", "%REQ(:AUTHORITY)%"),
        state("envoy.filters.listener.original_dst.remote_ip", "", "%DOWNSTREAM_REMOTE_ADDRESS%"),
        state("io.istio.peer_principal", "\n                factory_key: envoy.string", "%DOWNSTREAM_PEER_URI_SAN%"),
    );
    let transport = format!(
        r#"
      transport_socket:
        name: tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          require_client_certificate: true{}"#,
        certificates.tls(10, "{ prefix: \"spiffe://cluster.local/\" }")
    );
    let address = format!("{{ socket_address: {{ address: 0.0.0.0, port_value: {HBONE} }} }}");
    connect_terminate_at("connect_terminate", &address, &transport, &filters)
}

/// The inbound side's Istio telemetry (Outrider only: Envoy 1.40 has no Istio filters): the
/// connection manager that serves `OPEN` inside `main_internal`, with Istio's metadata
/// exchange (headers, then the workload at the peer's address) and `istio.stats`.
const TELEMETRY_HCM: &str = r#"
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: inbound_8080
          route_config: { virtual_hosts: [{ name: all, domains: ["*"], routes: [{ match: { prefix: "/" }, route: { cluster: inbound_8080 } }] }] }
          http_filters:
          - name: istio.metadata_exchange
            typed_config:
              "@type": type.googleapis.com/udpa.type.v1.TypedStruct
              type_url: type.googleapis.com/io.istio.http.peer_metadata.Config
              value: { downstream_discovery: [{ istio_headers: {} }, { workload_discovery: {} }], downstream_propagation: [{ istio_headers: {} }] }
          - name: istio.stats
            typed_config: { "@type": type.googleapis.com/stats.PluginConfig, disable_host_header_fallback: true }
          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }"#;

/// `main_internal`: the tunnel's destination restored; per application port of this pod's
/// address, RBAC on the tunnel's peer identity (`allowed`), then the application (over HTTP
/// with Istio's telemetry for `OPEN` when `telemetry` is set).
fn main_internal(telemetry: bool) -> String {
    let chain = |port: u16, allowed: &str| {
        let serve = if telemetry && port == OPEN {
            TELEMETRY_HCM.to_owned()
        } else {
            format!(
                r#"
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: inbound_{port}
          cluster: inbound_{port}"#
            )
        };
        format!(
            r#"
    - filter_chain_match: {{ destination_port: {port}, prefix_ranges: [{{ address_prefix: {SIDECAR}, prefix_len: 32 }}] }}
      filters:
      - name: envoy.filters.network.rbac
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.rbac.v3.RBAC
          stat_prefix: tcp.
          rules:
            policies:
              allow:
                permissions: [{{ any: true }}]
                principals:
                - filter_state: {{ key: io.istio.peer_principal, string_match: {{ exact: "{allowed}" }} }}{serve}"#
        )
    };
    let direction = if telemetry { "\n    traffic_direction: INBOUND" } else { "" };
    format!(
        r#"
  - name: main_internal{INTERNAL}{direction}
    listener_filters:
    - name: envoy.filters.listener.original_dst
      typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst }}
    filter_chains:{}{}"#,
        chain(OPEN, &spiffe("ambient")),
        chain(PRIVATE, &spiffe("nobody")),
    )
}

/// Where the sidecar's node, ADS and workload metadata discovery come from, for the inbound
/// side's telemetry: an xDS server on a Unix socket (which crosses network namespaces) that
/// sends istiod's workload metadata.
fn telemetry_bootstrap(xds_socket: &str) -> String {
    let xds = common::differential::grpc_pipe_cluster("xds-grpc", Path::new(xds_socket));
    let extensions = INTERNAL_LISTENER_EXTENSION.to_owned()
        + r#"- name: metadata_discovery
  typed_config:
    "@type": type.googleapis.com/udpa.type.v1.TypedStruct
    type_url: type.googleapis.com/istio.workload.BootstrapExtension
    value: { config_source: { ads: {} } }
"#;
    format!(
        r#"{extensions}node:
  id: sidecar~{SIDECAR}~sidecar-6f7d9c.default~default.svc.cluster.local
  cluster: sidecar.default
  metadata: {{ NAME: sidecar-6f7d9c, NAMESPACE: default, WORKLOAD_NAME: sidecar, CLUSTER_ID: Kubernetes, LABELS: {{ app: sidecar }} }}
dynamic_resources:
  ads_config: {{ api_type: DELTA_GRPC, transport_api_version: V3, grpc_services: [{{ envoy_grpc: {{ cluster_name: xds-grpc }} }}] }}
XDS_CLUSTER{xds}
"#
    )
}

/// The sidecar's bootstrap: outbound listeners for the calls to the ambient pod, both HBONE
/// originators (one expecting ztunnel's identity, one another), and the inbound HBONE side;
/// with `telemetry` (an xDS socket), Istio's telemetry inbound (see [`telemetry_bootstrap`]).
fn sidecar_bootstrap(certificates: &Certificates, telemetry: Option<&str>) -> String {
    let (originator, originate_cluster) = originate("connect_originate", certificates, &spiffe("ambient"));
    let (impostor, impostor_cluster) = originate("connect_originate_impostor", certificates, &spiffe("impostor"));
    let outbound =
        |port: u16, cluster: &str| tcp_proxy_listener(&format!("outbound_{port}"), &on_loopback(port), cluster, "");
    // The telemetry variant's head, and its ADS cluster among the static ones.
    let (head, xds) = match telemetry.map(telemetry_bootstrap) {
        Some(text) => {
            let (head, xds) = text.split_once("XDS_CLUSTER").unwrap();
            (head.to_owned(), xds.trim_end().to_owned())
        }
        None => (INTERNAL_LISTENER_EXTENSION.to_owned(), String::new()),
    };
    format!(
        r#"{head}admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 15000 }} }} }}
static_resources:
  listeners:{}{}{}{originator}{impostor}{}{}
  clusters:{xds}{}{}{}{originate_cluster}{impostor_cluster}{MAIN_INTERNAL_CLUSTER}{}{}
"#,
        outbound(TO_AMBIENT_OPEN, "ambient_open"),
        outbound(TO_AMBIENT_PRIVATE, "ambient_private"),
        outbound(TO_AMBIENT_AS_IMPOSTOR, "ambient_as_impostor"),
        connect_terminate(certificates),
        main_internal(telemetry.is_some()),
        hbone_service("ambient_open", "connect_originate", AMBIENT, OPEN),
        hbone_service("ambient_private", "connect_originate", AMBIENT, PRIVATE),
        hbone_service("ambient_as_impostor", "connect_originate_impostor", AMBIENT, OPEN),
        static_cluster(&format!("inbound_{OPEN}"), OPEN),
        static_cluster(&format!("inbound_{PRIVATE}"), PRIVATE),
    )
}

/// One HTTP/1.1 `GET /` through ztunnel's SOCKS5 port in `ns` to `destination`: the whole
/// answer, empty when the connection closed without one.
fn get_through_ztunnel(ns: &str, destination: &str) -> String {
    let destination: SocketAddr = destination.parse().unwrap();
    in_netns(ns, move || {
        let mut stream =
            TcpStream::connect_timeout(&"127.0.0.1:15080".parse().unwrap(), Duration::from_secs(5)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        // RFC 1928: no authentication, then CONNECT to an IPv4 address.
        let SocketAddr::V4(v4) = destination else { panic!("IPv4 only") };
        let mut hello = [0u8; 2];
        stream.write_all(&[5, 1, 0]).unwrap();
        stream.read_exact(&mut hello).unwrap();
        assert_eq!(hello, [5, 0], "SOCKS5 greeting");
        let mut request = vec![5, 1, 0, 1];
        request.extend_from_slice(&v4.ip().octets());
        request.extend_from_slice(&v4.port().to_be_bytes());
        stream.write_all(&request).unwrap();
        let mut reply = [0u8; 10];
        if stream.read_exact(&mut reply).is_err() || reply[1] != 0 {
            return String::new();
        }
        let _ = stream.write_all(b"GET / HTTP/1.1\r\nhost: sidecar\r\nconnection: close\r\n\r\n");
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    })
}

/// The body of an HTTP answer (empty without one), without the peer address the test
/// servers add (it differs between runs).
fn body(answer: &str) -> String {
    let body = answer.split_once("\r\n\r\n").map(|(_, body)| body).unwrap_or_default();
    without_peer(body)
}

fn without_peer(body: &str) -> String {
    body.split(" peer=").next().unwrap_or_default().to_owned()
}

/// The sidecar proxy under test.
#[derive(Clone, Copy, Debug)]
enum Sidecar {
    Outrider,
    Envoy,
}

/// The two pods, ztunnel and the sidecar running in them.
struct Pods {
    // The lab first: it stops the processes and reads their logs before the files go.
    lab: Lab,
    files: netns::Files,
    sidecar: Sidecar,
}

impl Pods {
    /// Both pods with their applications, ztunnel, and `sidecar` with the bootstrap made
    /// of `bootstrap(certificates, files)`.
    fn start(ztunnel: &Path, sidecar: Sidecar, bootstrap: impl FnOnce(&Certificates, &netns::Files) -> String) -> Self {
        let files = netns::Files::new("");
        let mut lab = Lab::new();
        lab.exec(&lab.pod, "ip", &["addr", "add", &format!("{IMPOSTOR}/32"), "dev", "lo"]);
        let ca = pki::Ca::from_pem(
            &std::fs::read_to_string(ztunnel.join("root-cert.pem")).unwrap(),
            &std::fs::read_to_string(ztunnel.join("ca-key.pem")).unwrap(),
        );
        let leaf = ca.leaf(&spiffe("sidecar"));
        let certificates = Certificates {
            chain: files.write("cert-chain.pem", &leaf.cert_pem),
            key: files.write("key.pem", &leaf.key_pem),
            root: files.write("root-cert.pem", &ca.pem()),
        };
        let bootstrap = files.write("sidecar.yaml", &bootstrap(&certificates, &files));
        let local_xds = files.write("ztunnel.yaml", &ztunnel_config());

        serve(&lab.client, &format!("{AMBIENT}:{OPEN}"), "ambient-open");
        serve(&lab.client, &format!("{AMBIENT}:{PRIVATE}"), "ambient-private");
        serve(&lab.pod, &format!("127.0.0.1:{OPEN}"), "sidecar-open");
        serve(&lab.pod, &format!("127.0.0.1:{PRIVATE}"), "sidecar-private");

        let ztunnel_binary = ztunnel.join("ztunnel");
        let client_ns = lab.client.clone();
        lab.spawn_with(
            &client_ns,
            ztunnel_binary.to_str().unwrap(),
            &["proxy"],
            &[
                ("PROXY_MODE", "dedicated"),
                ("PROXY_WORKLOAD_INFO", "default/ambient/ambient"),
                ("FAKE_CA", "true"),
                ("LOCAL_XDS_PATH", &local_xds),
                ("XDS_ADDRESS", ""),
                ("UNSTABLE_ENABLE_SOCKS5", "true"),
                // The application sees ztunnel's address: spoofing the caller's would need the
                // routing that Istio's CNI sets up in a real pod.
                ("ENABLE_ORIG_SRC", "false"),
                ("RUST_LOG", "info"),
            ],
            files.path("ztunnel.log"),
        );
        let pod_ns = lab.pod.clone();
        match sidecar {
            Sidecar::Outrider => {
                lab.spawn_with(&pod_ns, &files.binary, &["run", "-c", &bootstrap], &[], files.path("sidecar.log"));
            }
            Sidecar::Envoy => {
                let envoy = common::differential::envoy_binary().unwrap();
                let args = ["-c", &bootstrap, "--concurrency", "1", "--use-dynamic-base-id", "--disable-hot-restart"];
                lab.spawn_with(&pod_ns, envoy.to_str().unwrap(), &args, &[], files.path("sidecar.log"));
            }
        }
        wait_for_listener(&lab.client, &format!("{AMBIENT}:{HBONE}"));
        wait_for_listener(&lab.client, "127.0.0.1:15080");
        wait_for_listener(&lab.pod, &format!("{SIDECAR}:{HBONE}"));
        wait_for_listener(&lab.pod, &format!("127.0.0.1:{TO_AMBIENT_AS_IMPOSTOR}"));
        Self { lab, files, sidecar }
    }

    /// A call through the sidecar's outbound listener on `port`: the answer's body.
    fn through_sidecar(&self, port: u16) -> String {
        let reply = netns::get(&self.lab.pod, &format!("127.0.0.1:{port}"), "ambient");
        reply.map(|reply| without_peer(&reply.body)).unwrap_or_default()
    }

    /// A call through ztunnel to `destination`: the answer's body.
    fn through_ztunnel(&self, destination: &str) -> String {
        body(&get_through_ztunnel(&self.lab.client, destination))
    }

    /// What the applications saw, each call's answer's body.
    fn calls(&self) -> Vec<(&'static str, String)> {
        let seen = vec![
            ("sidecar → ztunnel, allowed", self.through_sidecar(TO_AMBIENT_OPEN)),
            ("sidecar → ztunnel, a port ztunnel allows another identity", self.through_sidecar(TO_AMBIENT_PRIVATE)),
            ("sidecar → ztunnel, expecting another identity", self.through_sidecar(TO_AMBIENT_AS_IMPOSTOR)),
            ("ztunnel → sidecar, allowed", self.through_ztunnel(&format!("{SIDECAR}:{OPEN}"))),
            (
                "ztunnel → sidecar, a port the sidecar allows another identity",
                self.through_ztunnel(&format!("{SIDECAR}:{PRIVATE}")),
            ),
            (
                "ztunnel → a workload of another identity, answered with the sidecar's certificate",
                self.through_ztunnel(&format!("{IMPOSTOR}:{OPEN}")),
            ),
        ];
        if std::env::var_os("OUTRIDER_TEST_LOGS").is_some() {
            for log in ["ztunnel.log", "sidecar.log"] {
                let text = std::fs::read_to_string(self.files.path(log)).unwrap_or_default();
                eprintln!("--- {:?} {log}:\n{text}", self.sidecar);
            }
        }
        seen
    }

    /// The sidecar's admin page `path`, read from inside its pod.
    fn admin(&self, path: &'static str) -> String {
        in_netns(&self.lab.pod, move || {
            let mut stream = TcpStream::connect("127.0.0.1:15000").unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            stream
                .write_all(format!("GET {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n").as_bytes())
                .unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            answer
        })
    }
}

/// What the applications saw with `sidecar` beside ztunnel.
fn run(ztunnel: &Path, sidecar: Sidecar) -> Vec<(&'static str, String)> {
    Pods::start(ztunnel, sidecar, |certificates, _| sidecar_bootstrap(certificates, None)).calls()
}

#[test]
fn hbone_both_ways_between_a_sidecar_and_ztunnel() {
    let test = "hbone_both_ways_between_a_sidecar_and_ztunnel";
    if let Some(why) = netns::unavailable() {
        common::skip::skipped(common::skip::Tool::Netns, test, &why);
        return;
    }
    let Some(ztunnel) = common::peers::ztunnel(test) else { return };
    let outrider = run(&ztunnel, Sidecar::Outrider);
    let expected = vec![
        ("sidecar → ztunnel, allowed", "ambient-open".to_owned()),
        ("sidecar → ztunnel, a port ztunnel allows another identity", String::new()),
        ("sidecar → ztunnel, expecting another identity", String::new()),
        ("ztunnel → sidecar, allowed", "sidecar-open".to_owned()),
        ("ztunnel → sidecar, a port the sidecar allows another identity", String::new()),
        ("ztunnel → a workload of another identity, answered with the sidecar's certificate", String::new()),
    ];
    assert_eq!(outrider, expected, "Outrider beside ztunnel");
    if common::differential::envoy_binary().is_none() {
        common::skip::skipped(
            common::skip::Tool::Envoy,
            test,
            "envoy not found (bench/install-envoy.sh): no comparison",
        );
        return;
    }
    let envoy = run(&ztunnel, Sidecar::Envoy);
    assert_eq!(envoy, outrider, "Envoy 1.40 and Outrider beside ztunnel differ");
}

/// istiod's workload metadata for the ambient pod, as WDS sends it.
fn ambient_workload() -> (String, outrider::pb::google::protobuf::Any) {
    use outrider::pb::istio_workload::{Workload, WorkloadType};
    let workload = Workload {
        name: "ambient-5b8f7c".into(),
        namespace: "default".into(),
        addresses: vec![AMBIENT.parse::<std::net::Ipv4Addr>().unwrap().octets().to_vec()],
        canonical_name: "ambient".into(),
        canonical_revision: "v1".into(),
        workload_type: WorkloadType::Deployment as i32,
        workload_name: "ambient".into(),
        cluster_id: "Kubernetes".into(),
    };
    let any = outrider::pb::google::protobuf::Any {
        type_url: outrider::store::WORKLOAD_TYPE.into(),
        value: prost::Message::encode_to_vec(&workload),
    };
    ("Kubernetes//Pod/default/ambient-5b8f7c".into(), any)
}

/// Over HBONE the caller sends no peer headers; the sidecar's inbound telemetry names it by
/// the tunnel's source address (restored from the `CONNECT`) through istiod's workload
/// metadata, and its principal from the tunnel's certificate, as Envoy does in Istio.
#[test]
fn hbone_from_ztunnel_is_reported_as_the_callers_workload() {
    let test = "hbone_from_ztunnel_is_reported_as_the_callers_workload";
    if let Some(why) = netns::unavailable() {
        common::skip::skipped(common::skip::Tool::Netns, test, &why);
        return;
    }
    let Some(ztunnel) = common::peers::ztunnel(test) else { return };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = outrider::xds::server::XdsServer::new();
    server.set_resources(outrider::store::WORKLOAD_TYPE, vec![ambient_workload()]);
    let mut requests = server.requests();
    let mut serving = None;
    let pods = Pods::start(&ztunnel, Sidecar::Outrider, |certificates, files| {
        let socket = files.path("xds.sock");
        let _entered = runtime.enter();
        serving = Some(server.serve_unix(tokio::net::UnixListener::bind(&socket).unwrap()));
        sidecar_bootstrap(certificates, Some(socket.to_str().unwrap()))
    });
    let acked = runtime.block_on(common::wait::until("the workload metadata ACKed", async || {
        loop {
            let request = requests.recv().await.ok()?;
            if request.type_url == outrider::store::WORKLOAD_TYPE && !request.response_nonce.is_empty() {
                return Some(request.error_detail.is_none());
            }
        }
    }));
    assert!(acked, "the workload metadata was NACKed");

    assert_eq!(pods.through_ztunnel(&format!("{SIDECAR}:{OPEN}")), "sidecar-open");
    let page = pods.admin("/stats/prometheus");
    let text = page.split_once("\r\n\r\n").map(|(_, body)| body).unwrap_or_default();
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let from_ambient = [
        ("reporter", "destination"),
        ("source_workload", "ambient"),
        ("source_workload_namespace", "default"),
        ("source_canonical_service", "ambient"),
        ("source_principal", "spiffe://cluster.local/ns/default/sa/ambient"),
        ("destination_workload", "sidecar"),
        ("response_code", "200"),
    ];
    let total = crate::istio_stats::total(&scrape, "istio_requests_total", &from_ambient);
    assert_eq!(total, 1.0, "{text}");
    drop(serving);
}
