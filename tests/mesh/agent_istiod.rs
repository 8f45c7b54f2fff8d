//! One process per pod, against a real istiod: Outrider does istio-agent's job
//! (`outrider::agent`) beside its own. istiod (`pilot-discovery`, file mode, no Kubernetes)
//! runs its CA from a signing CA on disk (`ROOT_CA_DIR`, made here with rcgen) and
//! authenticates callers by JWT (`JWT_RULE`: an RS256 token whose `sub` is
//! `system:serviceaccount:default:default`, its keys served by the test) — the same check
//! it makes of a projected service-account token, minus the Kubernetes lookup. The agent
//! gets the workload certificate from `CreateCertificate` on istiod's TLS port and relays
//! ADS there with the same token; the proxy reads both from the agent's Unix sockets, as
//! under pilot-agent. istiod's config sends the sidecar's outbound traffic back to its own
//! STRICT inbound port over Istio mTLS, so each request is one mTLS handshake between two
//! holders of istiod-issued certificates. The certificate lives 20 s: it is renewed while
//! requests flow, and none fails.

use crate::common;
use crate::tls_support;

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use common::istiod::{Istiod, IstiodCa, sidecar_node_id};
use common::jwt::{RsaSigner, now};
use common::{backends, wait};
use http_body_util::Full;
use outrider::agent::{Agent, AgentSettings};
use outrider::config::bootstrap::Bootstrap;
use outrider::config::secret::{DataSource, SecretKind};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
use serde_json::json;

use super::istiod_file_mode::{get, mesh_loop_configs, named_backend, xds_updates};

const ISSUER: &str = "https://outrider.test/issuer";
const HOST: &str = "app.default.svc.cluster.local";
const IDENTITY: &str = "spiffe://cluster.local/ns/default/sa/default";

/// istiod's plugged-in CA: a root and the intermediate istiod signs with, in
/// `ROOT_CA_DIR`'s four files. Returns the root's PEM.
fn write_ca_dir(dir: &Path) -> String {
    let ca_params = |name: &str, path_len: Option<u8>| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(path_len.map_or(BasicConstraints::Unconstrained, BasicConstraints::Constrained));
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params
    };
    let root =
        CertifiedIssuer::self_signed(ca_params("Outrider test root", None), KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let intermediate = ca_params("Outrider test istiod CA", Some(0)).signed_by(&key, &root).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("root-cert.pem"), root.pem()).unwrap();
    std::fs::write(dir.join("ca-cert.pem"), intermediate.pem()).unwrap();
    std::fs::write(dir.join("ca-key.pem"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("cert-chain.pem"), format!("{}{}", intermediate.pem(), root.pem())).unwrap();
    root.pem()
}

/// A sidecar's bootstrap whose xDS and SDS are the agent's Unix sockets, as Istio's
/// template writes it (interception NONE: istiod's listeners bind their ports).
fn agentless_bootstrap(xds: &Path, sds: &Path) -> Bootstrap {
    let node = sidecar_node_id("127.0.0.1", "app-1", "default");
    let pipe = |name: &str, path: &Path| {
        format!(
            r#"
  - name: {name}
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{}} }}
    load_assignment:
      cluster_name: {name}
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ pipe: {{ path: "{}" }} }} }} }}] }}]"#,
            path.display()
        )
    };
    let clusters = pipe("xds-grpc", xds) + &pipe("sds-grpc", sds);
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
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}
dynamic_resources:
  ads_config:
    api_type: DELTA_GRPC
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

/// The workload certificate the proxy serves now (PEM), from its snapshot.
fn served_certificate(outrider: &outrider::app::Running) -> Option<String> {
    let snapshot = outrider.store.load();
    match &snapshot.secrets.get("default")?.resource.kind {
        SecretKind::TlsCertificate(c) => match &c.certificate_chain {
            DataSource::InlineBytes(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            _ => None,
        },
        SecretKind::ValidationContext(_) => None,
    }
}

/// The URI SANs and issuer CN of a PEM certificate's leaf.
fn leaf_identity(pem: &str) -> (Vec<String>, String) {
    let (_, der) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let cert = der.parse_x509().unwrap();
    let uris = cert
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::URI(u) => Some((*u).to_owned()),
            _ => None,
        })
        .collect();
    let issuer = cert.issuer().iter_common_name().next().unwrap().as_str().unwrap().to_owned();
    (uris, issuer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_per_pod_certificate_and_xds_from_istiod_over_tls_with_renewal_under_traffic() {
    let Some(binary) = Istiod::binary("one_process_per_pod (agent with istiod's CA)") else { return };
    let work = tempfile::tempdir().unwrap();
    let root_pem = write_ca_dir(&work.path().join("cacerts"));

    let signer = Arc::new(RsaSigner::new("outrider-test-key"));
    let jwks = signer.jwks();
    let keys = backends::http(move |_request| {
        let jwks = jwks.clone();
        async move { http::Response::new(Full::new(Bytes::from(jwks))) }
    })
    .await;
    let jwt_rule = json!({
        "issuer": ISSUER,
        "jwks_uri": format!("http://127.0.0.1:{}/jwks.json", keys.port),
        "audiences": ["istio-ca"],
    });
    let app = named_backend("app").await;
    let (outbound, inbound) = (tls_support::free_port(), tls_support::free_port());
    let configs = [("mesh.yaml", mesh_loop_configs(outbound, inbound, app.port))];
    let configs: Vec<(&str, &str)> = configs.iter().map(|(n, y)| (*n, y.as_str())).collect();
    let ca = IstiodCa { root_ca_dir: work.path().join("cacerts"), jwt_rule: jwt_rule.to_string() };
    let istiod = Istiod::start_with_ca(&binary, "", &configs, Some(ca)).await;
    let secure = istiod.secure.unwrap();

    // The pod's token, as the kubelet projects it (audience istio-ca).
    let claims = json!({
        "iss": ISSUER,
        "aud": ["istio-ca"],
        "sub": "system:serviceaccount:default:default",
        "iat": now(),
        "exp": now() + 3600,
    });
    let token = work.path().join("istio-token");
    std::fs::write(&token, signer.rs256(&claims)).unwrap();
    let env = [
        ("POD_NAMESPACE", "default".to_owned()),
        ("SERVICE_ACCOUNT", "default".to_owned()),
        ("CA_ADDR", secure.to_string()),
        ("PROXY_CONFIG", json!({ "discoveryAddress": secure.to_string() }).to_string()),
        ("ISTIOD_SAN", "istiod.istio-system.svc".to_owned()),
        ("OUTRIDER_ROOT_CERT", work.path().join("cacerts/root-cert.pem").display().to_string()),
        ("OUTRIDER_TOKEN_PATH", token.display().to_string()),
        ("SECRET_TTL", "20s".to_owned()),
    ];
    let settings = AgentSettings::from_env(&env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()).unwrap();
    let (xds, sds) = (work.path().join("etc/istio/proxy/XDS"), work.path().join("workload-spiffe-uds/socket"));
    let agent = Agent::start(settings, &sds, &xds).unwrap();
    let outrider = outrider::app::start(agentless_bootstrap(&xds, &sds)).await.unwrap();

    wait::until_true("istiod's listener serves, over istiod-issued mTLS", async || {
        get(outbound, HOST, "/ok").await.0 == 200
    })
    .await;
    let first = served_certificate(&outrider).expect("the agent's certificate is served");
    let (uris, issuer) = leaf_identity(&first);
    assert_eq!(uris, [IDENTITY], "istiod issued the token's identity");
    assert_eq!(issuer, "Outrider test istiod CA", "signed by istiod's signing CA");
    let roots = match &outrider.store.load().secrets["ROOTCA"].resource.kind {
        SecretKind::ValidationContext(v) => match v.trusted_ca.as_ref().unwrap() {
            DataSource::InlineBytes(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("{other:?}"),
        },
        SecretKind::TlsCertificate(_) => panic!("ROOTCA is a validation context"),
    };
    assert_eq!(roots.trim(), root_pem.trim(), "ROOTCA is the mesh root");
    assert!(outrider.tls.upstream.handshakes() >= 1 && outrider.tls.downstream.handshakes() >= 1);

    // Requests all along until the proxy serves a renewed certificate (20 s TTL: renewed
    // about 10 s after issue), then 20 more; every one must succeed.
    let mut failures = Vec::new();
    let mut requests = 0u64;
    let mut renewed_at = None;
    // Bounded, so that a renewal that never comes fails the test instead of hanging it.
    for _ in 0..100_000 {
        let (status, _, body) = get(outbound, HOST, "/ok").await;
        requests += 1;
        if status != 200 {
            failures.push(format!("{status} {body}"));
        }
        match renewed_at {
            None if served_certificate(&outrider).is_some_and(|now| now != first) => renewed_at = Some(requests),
            Some(at) if requests >= at + 20 => break,
            _ => {}
        }
    }
    assert!(renewed_at.is_some(), "the certificate was renewed while requests flowed");
    assert!(failures.is_empty(), "failed requests across the renewal: {failures:?}");
    let (uris, _) = leaf_identity(&served_certificate(&outrider).unwrap());
    assert_eq!(uris, [IDENTITY]);
    println!("{requests} requests, renewal seen after {}", renewed_at.unwrap_or(0));

    let updates = xds_updates(&outrider).await;
    assert!(updates.values().all(|(_, rejected)| *rejected == 0), "rejected: {updates:?}");
    assert!(updates.values().all(|(applied, _)| *applied > 0), "xDS through the relay: {updates:?}");
    outrider.stop();
    agent.stop().await;
}
