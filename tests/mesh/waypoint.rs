//! Outrider as an Istio waypoint: a real API server, istiod in Kubernetes mode with ambient
//! mode on, and a Gateway of class `istio-waypoint`, from which istiod's deployment
//! controller makes the waypoint's Deployment and Service with Istio's own `waypoint`
//! template, Outrider's image as the proxy image: it runs the template's pilot-agent
//! command line (`proxy waypoint …`) as it stands. The Service `echo` is bound to the
//! waypoint (`istio.io/use-waypoint`); its pods have Outrider sidecars that accept HBONE.
//!
//! ztunnel's part (the client's node proxy) is played by an Outrider with a static bootstrap
//! in the node namespace: a TCP proxy that tunnels each connection to the waypoint's 15008
//! as an HTTP/2 `CONNECT` to echo's cluster IP, over mutual TLS with a certificate of the
//! mesh's CA for the service account `sleep`. So a request goes: client → HBONE → waypoint
//! (`connect_terminate`, `main_internal` by the Service's address, its routes and policies,
//! `connect_originate`) → HBONE → echo's sidecar → echo.

use std::time::Duration;

use serde_json::Value;

use crate::common::differential::{on_loopback, tcp_proxy_listener};
use crate::common::skip::skipped;
use crate::common::tunnel::Certificates;
use crate::netns::kubernetes::{Cluster, NODE_NAME, wait_for};
use crate::tls_support::pki::{Ca, spiffe};

/// Where the HBONE client listens in the node namespace: each connection to it is tunnelled
/// to echo through the waypoint.
const CLIENT: &str = "127.0.0.1:18080";
/// … and tunnelled to echo's pod directly, past the waypoint.
const CLIENT_DIRECT: &str = "127.0.0.1:18081";

/// `echo` (bound to the waypoint), its pods (an Outrider sidecar accepting HBONE:
/// `ENABLE_HBONE`, `networking.istio.io/tunnel: http`), the waypoint's Gateway, and what
/// the waypoint enforces for echo: an HTTPRoute that adds a header, and an
/// AuthorizationPolicy that denies `sleep` the path `/denied`; and echo's own policy, run by
/// its sidecar, that admits only the waypoint's identity.
fn manifests() -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{ name: default, labels: {{ istio-injection: enabled }} }}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{ name: echo, namespace: default }}
---
apiVersion: v1
kind: Service
metadata: {{ name: echo, namespace: default, labels: {{ istio.io/use-waypoint: waypoint }} }}
spec:
  selector: {{ app: echo }}
  ports: [{{ name: http, port: 80, targetPort: 5678 }}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{ name: echo, namespace: default }}
spec:
  replicas: 1
  selector: {{ matchLabels: {{ app: echo }} }}
  template:
    metadata:
      labels: {{ app: echo, networking.istio.io/tunnel: http }}
      annotations: {{ proxy.istio.io/config: '{{"proxyMetadata": {{"ISTIO_META_ENABLE_HBONE": "true"}}}}' }}
    spec:
      nodeName: {NODE_NAME}
      serviceAccountName: echo
      containers:
      - name: echo
        image: example.com/apps/echo:1
        ports: [{{ containerPort: 5678, name: http, protocol: TCP }}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{ name: waypoint, namespace: default, labels: {{ istio.io/waypoint-for: service }} }}
spec:
  gatewayClassName: istio-waypoint
  listeners:
  - {{ name: mesh, port: 15008, protocol: HBONE }}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{ name: echo, namespace: default }}
spec:
  parentRefs: [{{ group: "", kind: Service, name: echo, port: 80 }}]
  rules:
  - filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {{ add: [{{ name: x-waypoint-route, value: echo }}] }}
    backendRefs: [{{ name: echo, port: 80 }}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{ name: echo, namespace: default }}
spec:
  targetRefs: [{{ group: "", kind: Service, name: echo }}]
  action: DENY
  rules:
  - from: [{{ source: {{ principals: ["cluster.local/ns/default/sa/sleep"] }} }}]
    to: [{{ operation: {{ paths: ["/denied"] }} }}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{ name: echo-from-the-waypoint, namespace: default }}
spec:
  selector: {{ matchLabels: {{ app: echo }} }}
  action: ALLOW
  rules:
  - from: [{{ source: {{ principals: ["cluster.local/ns/default/sa/waypoint"] }} }}]
"#
    )
}

/// The HBONE client's bootstrap: `CLIENT` tunnelled as `CONNECT <echo>` to the waypoint's
/// 15008, and `CLIENT_DIRECT` as `CONNECT <echo pod>:5678` to the pod's 15008, presenting
/// `certificates`; each peer's certificate is required to name its service account.
fn hbone_client(echo: &str, waypoint: &str, echo_pod: &str, certificates: &Certificates) -> String {
    let listener = |name: &str, address: &str, cluster: &str, authority: &str| {
        let port = address.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap();
        tcp_proxy_listener(
            name,
            &on_loopback(port),
            cluster,
            &format!("\n          tunneling_config: {{ hostname: \"{authority}\" }}"),
        )
    };
    let cluster = |name: &str, address: &str, account: &str| {
        format!(
            r#"
  - name: {name}
    type: STATIC
    connect_timeout: 5s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: {name}
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: {address}, port_value: 15008 }} }} }} }}] }}]
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext{}"#,
            certificates.tls(8, &format!("{{ exact: \"{}\" }}", spiffe(account)))
        )
    };
    format!(
        "admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 15100 }} }} }}\n\
         static_resources:\n  listeners:{}{}\n  clusters:{}{}\n",
        listener("to_echo", CLIENT, "waypoint", &format!("{echo}:80")),
        listener("to_echo_pod", CLIENT_DIRECT, "echo_pod", &format!("{echo_pod}:5678")),
        cluster("waypoint", waypoint, "waypoint"),
        cluster("echo_pod", echo_pod, "echo"),
    )
}

/// Whether there is a pod matching `selector` in `default` and every one is Ready.
fn ready(cluster: &Cluster, selector: &str) -> bool {
    let pods = cluster.pods_matching("default", selector);
    !pods.is_empty() && pods.iter().all(|(_, ready)| *ready)
}

/// The name of the first pod matching `selector` in `default`.
fn pod_name(cluster: &Cluster, selector: &str) -> String {
    cluster.pods_matching("default", selector).into_iter().next().map(|(name, _)| name).unwrap_or_default()
}

/// What the echo application answered to `GET path` through the HBONE client.
#[derive(Debug)]
struct Answer {
    status: u16,
    pod: String,
    headers: Value,
    body: String,
}

fn call(cluster: &Cluster, path: &'static str) -> Result<Answer, String> {
    call_via(cluster, CLIENT, path)
}

fn call_via(cluster: &Cluster, client: &str, path: &'static str) -> Result<Answer, String> {
    let reply = crate::netns::get_path(&cluster.node, client, "echo.default.svc.cluster.local", path)
        .map_err(|e| e.to_string())?;
    let body: Value = serde_json::from_str(&reply.body).unwrap_or(Value::Null);
    Ok(Answer {
        status: reply.status,
        pod: body["pod"].as_str().unwrap_or_default().to_owned(),
        headers: body["headers"].clone(),
        body: reply.body,
    })
}

/// Calls until `holds` of an answer (bounded): configuration reaches the proxies in its time.
fn call_until(cluster: &Cluster, path: &'static str, what: &str, holds: impl Fn(&Answer) -> bool) -> Answer {
    let mut last = None;
    let found = wait_for(Duration::from_secs(60), || match call(cluster, path) {
        Ok(answer) if holds(&answer) => Some(answer),
        other => {
            last = Some(other);
            None
        }
    });
    found.unwrap_or_else(|| panic!("{what}: last answer {last:?}\n{}", cluster.kubelet.describe()))
}

#[test]
fn istiod_makes_an_outrider_waypoint_that_routes_and_authorizes_for_the_service_bound_to_it() {
    let test = "istiod_makes_an_outrider_waypoint_that_routes_and_authorizes_for_the_service_bound_to_it";
    if let Some((tool, why)) = Cluster::unavailable() {
        skipped(tool, test, &why);
        return;
    }
    let mut cluster = Cluster::start_ambient();
    cluster.apply(&manifests());
    let waypoint_selector = "gateway.networking.k8s.io/gateway-name=waypoint";
    cluster.sync_until("the waypoint and echo ready", |c| ready(c, waypoint_selector) && ready(c, "app=echo"));

    // istiod's deployment controller made the waypoint from Istio's template, with
    // Outrider's image running pilot-agent's command line.
    let waypoint = pod_name(&cluster, waypoint_selector);
    let pod = cluster.get(&["pod", &waypoint, "-n", "default"]);
    let proxy = &pod["spec"]["containers"][0];
    assert_eq!(proxy["image"], crate::netns::kubernetes::OUTRIDER_IMAGE);
    assert_eq!((&proxy["args"][0], &proxy["args"][1]), (&Value::from("proxy"), &Value::from("waypoint")));
    let (_, waypoint_ip) = cluster.kubelet.pod("default", &waypoint).unwrap();

    // The client's certificate: the mesh's CA (istiod's plugged-in intermediate) for `sleep`.
    let cacerts = cluster.path("cacerts");
    let read = |name: &str| std::fs::read_to_string(cacerts.join(name)).unwrap();
    let ca = Ca::from_pem(&read("ca-cert.pem"), &read("ca-key.pem"));
    let leaf = ca.leaf(&spiffe("sleep"));
    let write = |name: &str, text: &str| {
        let path = cluster.path(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let certificates = Certificates {
        chain: write("sleep-chain.pem", &format!("{}{}", leaf.cert_pem, read("ca-cert.pem"))),
        key: write("sleep-key.pem", &leaf.key_pem),
        root: write("mesh-root.pem", &cluster.mesh_root.clone()),
    };
    let echo = cluster.cluster_ip("default", "echo");
    let (_, echo_pod) = cluster.kubelet.pod("default", &pod_name(&cluster, "app=echo")).unwrap();
    let bootstrap = write("hbone-client.yaml", &hbone_client(&echo, &waypoint_ip, &echo_pod, &certificates));
    let outrider = cluster.path("outrider");
    cluster.spawn("hbone-client", &outrider, &["-c", &bootstrap], &[]);
    crate::netns::wait_for_listener(&cluster.node, CLIENT);

    // Through the waypoint to echo: the waypoint's route added its header, and echo's
    // sidecar admitted the waypoint's identity, the HBONE peer it saw (its policy admits
    // no other).
    let answer = call_until(&cluster, "/", "echo through the waypoint with its route", |a| {
        a.status == 200 && a.headers["x-waypoint-route"] == "echo"
    });
    assert!(answer.pod.starts_with("echo-"), "{answer:?}");

    // The waypoint's policy: `sleep` (the tunnel's peer) is denied /denied, by the waypoint.
    let denied = call_until(&cluster, "/denied", "the waypoint's policy", |a| a.status == 403);
    assert_eq!(denied.body, "RBAC: access denied");
    assert_eq!(call(&cluster, "/allowed").map(|a| a.status), Ok(200));
    // Past the waypoint, straight to echo's pod over HBONE as `sleep`: echo's sidecar sees
    // that identity as the tunnel's peer and its policy refuses it.
    let direct = call_via(&cluster, CLIENT_DIRECT, "/").unwrap();
    assert_eq!((direct.status, direct.body.as_str()), (403, "RBAC: access denied"), "{direct:?}");

    // Everything istiod sent the waypoint and the sidecar was accepted.
    let istiod = std::fs::read_to_string(cluster.path("istiod.log")).unwrap_or_default();
    let rejected: Vec<&str> = istiod.lines().filter(|l| l.contains("ACK ERROR")).collect();
    assert!(rejected.is_empty(), "{rejected:#?}");
}
