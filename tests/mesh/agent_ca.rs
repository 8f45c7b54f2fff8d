//! pilot-agent's certificate job, done by Outrider (`src/agent`): a CSR for the pod's SPIFFE
//! identity sent to `istio.v1.auth.IstioCertificateService/CreateCertificate` over TLS with
//! the pod's token, the chain checked and served, and renewed before it expires while
//! traffic flows. The CA here is istiod's service definition served by the test over real
//! TLS (tonic + rustls) and signing with a real CA (rcgen): it authenticates the bearer
//! token and authorizes the CSR's SAN against it, as istiod's CA server does.

use crate::common;
use crate::tls_support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{WAIT, wait_snapshot};
use outrider::agent::{AgentSettings, CaClient, certificates};
use outrider::config::secret::{DataSource, SecretKind};
use outrider::pb::istio_ca::istio_certificate_service_server::{
    IstioCertificateService, IstioCertificateServiceServer,
};
use outrider::pb::istio_ca::{IstioCertificateRequest, IstioCertificateResponse};
use serde_json::{Value, json};
use tls_support::pki::{self, Ca};
use tls_support::yaml::{self, Http};
use tls_support::*;
use tonic::{Request, Response, Status};

const TOKEN: &str = "a-projected-service-account-token";
const ISTIOD: &str = "istiod.istio-system.svc";

/// istiod's certificate service over TLS on an ephemeral loopback port.
struct TestCa {
    ca: Arc<Ca>,
    port: u16,
    /// The mesh root, as the `istio-ca-root-cert` ConfigMap mounts it.
    root_file: tempfile::NamedTempFile,
    issued: Arc<Mutex<Vec<String>>>,
    metadata: Arc<Mutex<Vec<BTreeMap<String, String>>>>,
}

#[derive(Clone)]
struct Service {
    ca: Arc<Ca>,
    identity: String,
    max_ttl: Duration,
    issued: Arc<Mutex<Vec<String>>>,
    metadata: Arc<Mutex<Vec<BTreeMap<String, String>>>>,
}

#[tonic::async_trait]
impl IstioCertificateService for Service {
    async fn create_certificate(
        &self,
        request: Request<IstioCertificateRequest>,
    ) -> Result<Response<IstioCertificateResponse>, Status> {
        let headers = request
            .metadata()
            .iter()
            .filter_map(|kv| match kv {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => Some((k.to_string(), v.to_str().ok()?.to_owned())),
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect::<BTreeMap<_, _>>();
        self.metadata.lock().unwrap().push(headers.clone());
        if headers.get("authorization").map(String::as_str) != Some(&format!("Bearer {TOKEN}")) {
            return Err(Status::unauthenticated("request authenticate failure"));
        }
        let request = request.into_inner();
        // The token stands for one identity; every SAN of the CSR must be it.
        let csr = rcgen::CertificateSigningRequestParams::from_pem(&request.csr)
            .map_err(|e| Status::invalid_argument(format!("CSR: {e}")))?;
        let wanted = rcgen::SanType::URI(self.identity.as_str().try_into().unwrap());
        if csr.params.subject_alt_names != [wanted] {
            return Err(Status::permission_denied(format!("{:?}", csr.params.subject_alt_names)));
        }
        let ttl = Duration::from_secs(u64::try_from(request.validity_duration).unwrap_or(0)).min(self.max_ttl);
        let leaf = self.ca.sign_csr(&request.csr, ttl).map_err(Status::invalid_argument)?;
        self.issued.lock().unwrap().push(leaf.clone());
        Ok(Response::new(IstioCertificateResponse { cert_chain: vec![leaf, self.ca.pem()] }))
    }
}

/// A TLS server connection, as tonic's incoming stream needs it.
struct Tls(tokio_rustls::server::TlsStream<tokio::net::TcpStream>);

impl tonic::transport::server::Connected for Tls {
    type ConnectInfo = ();
    fn connect_info(&self) {}
}

impl tokio::io::AsyncRead for Tls {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Tls {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl TestCa {
    /// Serves the CA for `identity`, capping lifetimes at `max_ttl`, with a serving
    /// certificate for `serving_name`.
    async fn start(identity: &str, max_ttl: Duration, serving_name: &str) -> Self {
        let ca = Arc::new(Ca::new("istio root"));
        let serving = ca.dns_leaf(serving_name);
        let mut config = rustls::ServerConfig::builder_with_provider(outrider::tls::provider::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![serving.der(), ca.der()], serving.key_der())
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let incoming = async_stream(listener, acceptor);
        let (issued, metadata) = (Arc::default(), Arc::default());
        let service = Service {
            ca: ca.clone(),
            identity: identity.to_owned(),
            max_ttl,
            issued: Arc::clone(&issued),
            metadata: Arc::clone(&metadata),
        };
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(IstioCertificateServiceServer::new(service))
                .serve_with_incoming(incoming),
        );
        let root_file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(root_file.path(), ca.pem()).unwrap();
        Self { ca, port, root_file, issued, metadata }
    }

    fn settings(&self, token_file: &std::path::Path, extra: &[(&str, &str)]) -> AgentSettings {
        let mut env: BTreeMap<String, String> = [
            ("POD_NAMESPACE", "default"),
            ("SERVICE_ACCOUNT", "server"),
            ("ISTIOD_SAN", ISTIOD),
            ("OUTRIDER_ROOT_CERT", self.root_file.path().to_str().unwrap()),
            ("OUTRIDER_TOKEN_PATH", token_file.to_str().unwrap()),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        env.insert("CA_ADDR".into(), format!("127.0.0.1:{}", self.port));
        env.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        AgentSettings::from_env(&env).unwrap()
    }
}

/// Accepted TLS connections; a failed handshake is dropped, as a server does.
fn async_stream(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
) -> impl futures::Stream<Item = Result<Tls, std::io::Error>> {
    futures::stream::unfold((listener, acceptor), |(listener, acceptor)| async move {
        loop {
            let (tcp, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => return Some((Err(e), (listener, acceptor))),
            };
            if let Ok(tls) = acceptor.accept(tcp).await {
                return Some((Ok(Tls(tls)), (listener, acceptor)));
            }
        }
    })
}

fn token_file(token: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), format!("{token}\n")).unwrap();
    file
}

#[tokio::test]
async fn the_ca_issues_the_pods_identity_over_tls_with_its_token_and_nothing_is_written() {
    let identity = pki::spiffe("server");
    let ca = TestCa::start(&identity, Duration::from_secs(3600), ISTIOD).await;
    let token = token_file(TOKEN);
    let settings = Arc::new(ca.settings(token.path(), &[("SECRET_TTL", "600s")]));
    let issued = CaClient::new(settings).unwrap().issue().await.unwrap();

    let lifetime = issued.not_after.duration_since(issued.not_before).unwrap();
    assert_eq!(lifetime, Duration::from_secs(600), "SECRET_TTL asked for, under the CA's cap");
    assert_eq!(issued.chain_pem.trim(), ca.issued.lock().unwrap()[0].trim(), "the leaf, without the root");
    assert_eq!(issued.root_pem.trim(), ca.ca.pem().trim(), "the CA's root becomes ROOTCA");
    let metadata = ca.metadata.lock().unwrap()[0].clone();
    assert_eq!(metadata["clusterid"], "Kubernetes", "pilot-agent's ClusterID header: {metadata:?}");
    assert_eq!(metadata["authorization"], format!("Bearer {TOKEN}"), "the token, trimmed");

    // Published as Istio's two SDS secrets, key and chain inline: never on disk.
    let sds = outrider::xds::server::XdsServer::new();
    certificates::publish(&sds, &issued);
    let secrets = sds.resources("type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret");
    let names: Vec<_> = secrets.keys().cloned().collect();
    assert_eq!(names, ["ROOTCA", "default"]);
}

#[tokio::test]
async fn output_certs_writes_pilot_agents_files_with_a_private_key() {
    use std::os::unix::fs::PermissionsExt;
    let identity = pki::spiffe("server");
    let ca = TestCa::start(&identity, Duration::from_secs(3600), ISTIOD).await;
    let token = token_file(TOKEN);
    let out = tempfile::tempdir().unwrap();
    let settings = Arc::new(ca.settings(token.path(), &[("OUTPUT_CERTS", out.path().to_str().unwrap())]));
    let sds = outrider::xds::server::XdsServer::new();
    let (stop, signal) = outrider::core::shutdown::channel();
    let client = CaClient::new(settings.clone()).unwrap();
    let rotating = tokio::spawn(certificates::rotate(client, settings, sds.clone(), signal));
    common::wait::until("the certificate files", async || out.path().join("root-cert.pem").exists().then_some(()))
        .await;
    let mode = std::fs::metadata(out.path().join("key.pem")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the key is its owner's alone");
    assert_eq!(std::fs::read_to_string(out.path().join("root-cert.pem")).unwrap().trim(), ca.ca.pem().trim());
    stop.trigger();
    rotating.await.unwrap();
}

#[tokio::test]
async fn a_wrong_token_or_an_impostor_ca_gets_no_certificate() {
    let identity = pki::spiffe("server");
    let ca = TestCa::start(&identity, Duration::from_secs(3600), ISTIOD).await;
    let wrong = token_file("someone-elses-token");
    let err = CaClient::new(Arc::new(ca.settings(wrong.path(), &[]))).unwrap().issue().await.unwrap_err();
    assert!(err.to_string().contains("request authenticate failure"), "{err}");

    // Another service account's CSR is the CA's to refuse; this pod asks for its own only.
    let ca_for_other = TestCa::start(&pki::spiffe("other"), Duration::from_secs(3600), ISTIOD).await;
    let token = token_file(TOKEN);
    let err = CaClient::new(Arc::new(ca_for_other.settings(token.path(), &[]))).unwrap().issue().await.unwrap_err();
    assert!(err.to_string().contains("PermissionDenied") || err.to_string().contains("permission"), "{err}");

    // A server whose certificate does not name istiod is not told the token.
    let impostor = TestCa::start(&identity, Duration::from_secs(3600), "not-istiod.example").await;
    let err = CaClient::new(Arc::new(impostor.settings(token.path(), &[]))).unwrap().issue().await.unwrap_err();
    assert!(impostor.metadata.lock().unwrap().is_empty(), "the token never reached it");
    assert!(err.to_string().contains("transport") || err.to_string().contains("certificate"), "{err}");
}

/// Sidecar B serves STRICT mTLS with the certificate the agent keeps renewed (a 4 s TTL:
/// renewed every 2 s); sidecar A calls it all along, checking B's SPIFFE identity. Every
/// request succeeds across the renewals.
#[tokio::test]
async fn renewals_before_expiry_while_traffic_flows_fail_no_request() {
    let identity = pki::spiffe("server");
    let ca = TestCa::start(&identity, Duration::from_secs(3600), ISTIOD).await;
    let mesh = &ca.ca;
    let backend = echo_backend().await;
    let (port_a, port_b) = (free_port(), free_port());

    // B starts with a certificate of its own from the mesh CA; the agent then takes over.
    let tls = yaml::common_tls(&["h2", "http/1.1"], json!({ "exact": pki::spiffe("client") }));
    let chain = yaml::chain(
        "mtls",
        json!({ "transport_protocol": "tls" }),
        yaml::downstream_tls(tls, true),
        yaml::hcm_edge("app"),
    );
    let listener = yaml::listener("inbound", port_b, true, vec![chain], Value::Null);
    let app = yaml::cluster("app", backend, Http::Http1, Value::Null, Value::Null);
    let roots = yaml::roots_secret(mesh);
    let first = mesh.leaf(&identity);
    let b = Sidecar::start(&[&listener], &[&app], &[&yaml::certificate_secret(&first), &roots]).await;

    let tls = yaml::common_tls(&[], json!({ "exact": identity }));
    let extra = json!({ "max_requests_per_connection": 10 });
    let cluster = yaml::cluster("b", port_b, Http::Http1, yaml::upstream_tls(tls, "b.test"), extra);
    let chain = yaml::chain("http", json!({}), Value::Null, yaml::hcm("b"));
    let outbound = yaml::listener("outbound", port_a, false, vec![chain], Value::Null);
    let client = mesh.leaf(&pki::spiffe("client"));
    let a = Sidecar::start(&[&outbound], &[&cluster], &[&yaml::certificate_secret(&client), &roots]).await;

    let done = Arc::new(AtomicU64::new(0));
    let stop_traffic = Arc::new(AtomicBool::new(false));
    let traffic = {
        let (done, stop) = (done.clone(), stop_traffic.clone());
        tokio::spawn(async move {
            let mut failures = Vec::new();
            // Bounded: 20 000 requests at most.
            while !stop.load(Ordering::Relaxed) && done.load(Ordering::Relaxed) < 20_000 {
                match plain_get(port_a).await {
                    Ok((200, _)) => {}
                    other => failures.push(format!("{other:?}")),
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            failures
        })
    };

    let token = token_file(TOKEN);
    let settings = Arc::new(ca.settings(token.path(), &[("SECRET_TTL", "4s")]));
    let (stop_agent, signal) = outrider::core::shutdown::channel();
    let agent = CaClient::new(settings.clone()).unwrap();
    let rotating = tokio::spawn(certificates::rotate(agent, settings, b.control_plane.server.clone(), signal));

    // Three certificates from the CA, the third one served by B.
    common::wait::until("three certificates issued", async || (ca.issued.lock().unwrap().len() >= 3).then_some(()))
        .await;
    let third = ca.issued.lock().unwrap()[2].clone();
    wait_snapshot(&b.outrider.store, |s| {
        s.secrets.get("default").is_some_and(|secret| match &secret.resource.kind {
            SecretKind::TlsCertificate(c) => {
                c.certificate_chain == DataSource::InlineBytes(format!("{}\n", third.trim()).into_bytes())
            }
            SecretKind::ValidationContext(_) => false,
        })
    })
    .await;
    let served_then = done.load(Ordering::Relaxed);
    common::wait::until("traffic after the third certificate", async || {
        (done.load(Ordering::Relaxed) >= served_then + 50).then_some(())
    })
    .await;
    stop_traffic.store(true, Ordering::Relaxed);
    let failures = tokio::time::timeout(WAIT, traffic).await.unwrap().unwrap();
    assert!(failures.is_empty(), "failed requests across renewals: {failures:?}");
    println!("{} requests across {} certificates", done.load(Ordering::Relaxed), ca.issued.lock().unwrap().len());
    stop_agent.trigger();
    rotating.await.unwrap();
    a.stop();
    b.stop();
}
