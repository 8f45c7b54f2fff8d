//! Outrider in Envoy's place under a real istio-agent (`pilot-agent proxy sidecar`), with a
//! real istiod (`pilot-discovery`, file mode): the agent writes its bootstrap from Istio's
//! template, starts Outrider with Envoy's command line, proxies xDS and SDS to it over its
//! Unix sockets, reports ready on 15021 once Outrider's admin stats say so, and on SIGTERM
//! drains Outrider's inbound listeners and stops it.
//!
//! Istio's sidecar ports (15000, 15001, 15006, 15020, 15021, 15090) are fixed, so each
//! sidecar runs in a network namespace of its own, made by the test (root and iproute2
//! needed, else SKIPPED). The workload certificates are made with rcgen and mounted where
//! the agent looks for them (`./var/run/secrets/workload-spiffe-credentials`), so that this
//! test is about pilot-agent driving Outrider, not about the CA. (A file-mode istiod can
//! run its CA with `JWT_RULE`: `tests/mesh/agent_istiod.rs` does, for Outrider's own agent.)

use crate::common;
use crate::tls_support::pki;

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use crate::common::skip::{Tool, skipped};
use common::WAIT;
use common::istiod::Istiod;
use common::wait;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// Starting pilot-agent, which starts Outrider and waits for xDS, takes longer than one step.
const START: Duration = Duration::from_secs(60);

/// The pods' addresses in [`Netns::pair`].
const POD_A: &str = "198.18.7.1";
const POD_B: &str = "198.18.7.2";

/// A network namespace made by the test, deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn new(tag: &str) -> Netns {
        // Unique per process and per namespace: the tests of this file run in parallel.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("oagent-{}-{n}{tag}", std::process::id());
        run("ip", &["netns", "add", &name]);
        let netns = Netns { name };
        run("ip", &["-n", &netns.name, "link", "set", "lo", "up"]);
        netns
    }

    /// Two namespaces joined by a veth pair, `a` with [`POD_A`], `b` with [`POD_B`]
    /// (addresses from the benchmarking range, never routed anywhere).
    fn pair() -> (Netns, Netns) {
        let (a, b) = (Netns::new("a"), Netns::new("b"));
        // Interface names are per namespace: the same in every pair.
        let (a_if, b_if) = ("pod-a".to_owned(), "pod-b".to_owned());
        run("ip", &["link", "add", &a_if, "netns", &a.name, "type", "veth", "peer", "name", &b_if, "netns", &b.name]);
        for (ns, dev, ip) in [(&a, &a_if, POD_A), (&b, &b_if, POD_B)] {
            run("ip", &["-n", &ns.name, "addr", "add", &format!("{ip}/24"), "dev", dev]);
            run("ip", &["-n", &ns.name, "link", "set", dev, "up"]);
        }
        (a, b)
    }

    /// Runs `f` in this namespace on a thread of its own for the rest of the test.
    fn spawn(&self, f: impl AsyncFnOnce() + Send + 'static) {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap();
            rustix::thread::move_into_link_name_space(file.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))
                .unwrap();
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f())
        });
    }

    /// Runs `f` on a thread inside this namespace, on a runtime of its own: every socket
    /// it opens and every process it starts belong to the namespace.
    fn run<T: Send + 'static>(&self, f: impl AsyncFnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap();
            rustix::thread::move_into_link_name_space(file.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))
                .unwrap();
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f())
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = StdCommand::new("ip").args(["netns", "del", &self.name]).status();
    }
}

fn run(program: &str, args: &[&str]) {
    let output = StdCommand::new(program).args(args).output().unwrap();
    assert!(output.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// Why the test cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")) {
        return Some("not running as root (network namespaces)".into());
    }
    if StdCommand::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        return Some("iproute2 is not installed".into());
    }
    None
}

/// Istio's bootstrap template, from the istio source `tests/peers/build.sh` builds from.
fn bootstrap_template() -> PathBuf {
    common::peers::peers_dir().join("../build/istio/istio-src/tools/packaging/common/envoy_bootstrap.json")
}

/// One pod: pilot-agent running Outrider, in its own working directory.
struct Sidecar {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// What differs between the pods.
struct Pod<'a> {
    name: &'a str,
    ip: &'a str,
    service_account: &'a str,
    /// The namespace to start in, when not the calling thread's.
    netns: Option<&'a Netns>,
}

impl Sidecar {
    /// Starts `pilot-agent proxy sidecar` with Outrider as its proxy binary, its workload
    /// certificate signed by `ca`, talking to istiod at `discovery`.
    fn start(agent: &Path, discovery: SocketAddr, ca: &pki::Ca, pod: &Pod) -> Sidecar {
        let dir = tempfile::tempdir().unwrap();
        let credentials = dir.path().join("var/run/secrets/workload-spiffe-credentials");
        std::fs::create_dir_all(&credentials).unwrap();
        let leaf = ca.leaf(&pki::spiffe(pod.service_account));
        std::fs::write(credentials.join("cert-chain.pem"), &leaf.cert_pem).unwrap();
        std::fs::write(credentials.join("key.pem"), &leaf.key_pem).unwrap();
        std::fs::write(credentials.join("root-cert.pem"), ca.pem()).unwrap();
        // ProxyConfig, as istiod's injector would put it in the pod: Outrider is the binary.
        let proxy_config = serde_json::json!({
            "binaryPath": env!("CARGO_BIN_EXE_outrider"),
            "discoveryAddress": discovery.to_string(),
            "controlPlaneAuthPolicy": "NONE",
            "concurrency": 1,
            "drainDuration": "5s",
            "terminationDrainDuration": "2s",
        });
        let log = std::fs::File::create(dir.path().join("agent.log")).unwrap();
        let mut command = match pod.netns {
            Some(netns) => {
                // `ip netns exec` execs the agent: the child is the agent itself.
                let mut command = Command::new("ip");
                command.args(["netns", "exec", &netns.name]).arg(agent);
                command
            }
            None => Command::new(agent),
        };
        let child = command
            .args(["proxy", "sidecar", "--domain", "default.svc.cluster.local", "--proxyLogLevel", "info"])
            .arg("--serviceCluster")
            .arg(format!("{}.default", pod.name))
            .arg("--templateFile")
            .arg(bootstrap_template())
            .current_dir(dir.path())
            .env("PROXY_CONFIG", proxy_config.to_string())
            .env("POD_NAME", format!("{}-0", pod.name))
            .env("POD_NAMESPACE", "default")
            .env("INSTANCE_IP", pod.ip)
            .env("SERVICE_ACCOUNT", pod.service_account)
            .env("ISTIO_META_INTERCEPTION_MODE", "NONE")
            .env("ISTIO_METAJSON_LABELS", serde_json::json!({ "app": pod.name }).to_string())
            .env("ISTIO_META_CLUSTER_ID", "Kubernetes")
            .env("PILOT_CERT_PROVIDER", "istiod")
            .env("CA_ADDR", discovery.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            // Its own process group, which Outrider joins: a failed test stops both.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Sidecar { dir, child: Some(child) }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }

    /// Bounded wait until the agent's `/healthz/ready` on 15021 (the bootstrap's static
    /// listener, routed to the agent, which asks Outrider's admin) answers 200. Polled:
    /// the agent and the Outrider it starts are processes of their own.
    async fn wait_ready(&mut self, ip: &str) {
        let status_port = SocketAddr::new(ip.parse().unwrap(), 15021);
        let ready = wait::within_for(START, async || {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("pilot-agent exited ({status}):\n{}", self.log());
            }
            matches!(http_get(status_port, "/healthz/ready", "localhost").await, Ok((200, _))).then_some(())
        })
        .await;
        assert!(ready.is_some(), "not ready:\n{}", self.log());
    }

    /// SIGTERM, as the kubelet sends when the pod terminates; waits for the agent to exit.
    async fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let pid = child.id().unwrap().to_string();
        run("kill", &["-TERM", &pid]);
        match tokio::time::timeout(START, child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => panic!("pilot-agent did not exit after SIGTERM:\n{}", self.log()),
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        // A test that failed before `terminate`: the agent and the Outrider it started.
        if let Some(pid) = self.child.as_ref().and_then(Child::id) {
            let _ = StdCommand::new("kill").args(["-KILL", "--", &format!("-{pid}")]).status();
        }
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// One HTTP/1.1 GET with `host`; (status, body).
async fn http_get(address: SocketAddr, path: &str, host: &str) -> std::io::Result<(u16, String)> {
    http_request("GET", address, path, host).await
}

async fn http_request(method: &str, address: SocketAddr, path: &str, host: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::time::timeout(WAIT, tokio::net::TcpStream::connect(address)).await??;
    let request = format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut response)).await??;
    let response = String::from_utf8_lossy(&response);
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// An HTTP/1.1 server on `address` answering every request with `name`, for the test's life.
async fn backend(address: SocketAddr, name: &'static str) {
    let listener = tokio::net::TcpListener::bind(address).await.unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let response =
                    format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{name}", name.len());
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
}

/// Bounded wait until a request through the sidecar's outbound listener reaches `expected`
/// (istiod pushes the ServiceEntry's listener, route and endpoints after readiness may
/// already have been reported for the first push).
async fn wait_reaches(sidecar: &Sidecar, port: u16, host: &str, expected: &str) {
    let mut got = None;
    let reached = wait::within(async || {
        let answer = http_get(loopback(port), "/", host).await;
        let reached = matches!(&answer, Ok((200, body)) if body == expected);
        got = Some(answer);
        reached.then_some(())
    })
    .await;
    assert!(reached.is_some(), "{host}:{port} never reached {expected}: {got:?}\n{}", sidecar.log());
}

/// A plaintext ServiceEntry whose endpoint is a backend on this host.
fn plain_service_entry(backend_port: u16) -> String {
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: backend
  namespace: default
spec:
  hosts: [backend.example.com]
  location: MESH_EXTERNAL
  ports:
  - number: 18080
    name: http
    protocol: HTTP
  resolution: STATIC
  endpoints:
  - address: 127.0.0.1
    ports:
      http: {backend_port}
"#
    )
}

#[test]
fn outrider_runs_as_the_proxy_of_a_real_istio_agent() {
    const NAME: &str = "outrider_runs_as_the_proxy_of_a_real_istio_agent";
    let Some(agent) = common::peers::peer("pilot-agent", NAME) else { return };
    let Some(istiod) = Istiod::binary(NAME) else { return };
    if let Some(why) = unavailable() {
        skipped(Tool::Netns, NAME, &why);
        return;
    }
    if !bootstrap_template().is_file() {
        skipped(Tool::Peers, NAME, &format!("{} not found (tests/peers/build.sh)", bootstrap_template().display()));
        return;
    }
    let pod = Netns::new("a");
    pod.run(async move || {
        let backend_port = common::lab::free_port();
        backend(loopback(backend_port), "backend").await;
        let istiod = Istiod::start(&istiod, &[("backend.yaml", &plain_service_entry(backend_port))]).await;
        let ca = pki::Ca::new("test mesh CA");
        let client = Pod { name: "client", ip: "127.0.0.1", service_account: "client", netns: None };
        let mut sidecar = Sidecar::start(&agent, istiod.grpc, &ca, &client);

        sidecar.wait_ready("127.0.0.1").await;
        let log = sidecar.log();
        // The command line pilot-agent built (`pkg/envoy/proxy.go`) was taken as Envoy's.
        assert!(log.contains("--drain-strategy immediate"), "{log}");
        assert!(log.contains("Envoy flags accepted without effect"), "{log}");

        // Outbound through the listener istiod rendered for the ServiceEntry.
        wait_reaches(&sidecar, 18080, "backend.example.com", "backend").await;

        // What the agent and istioctl read from the admin port.
        let (status, stats) = http_get(
            loopback(15000),
            "/stats?usedonly&filter=^(server\\.state|listener_manager\\.workers_started)",
            "localhost",
        )
        .await
        .unwrap();
        assert_eq!((status, stats.as_str()), (200, "listener_manager.workers_started: 1\nserver.state: 0\n"));
        let (status, dump) = http_get(loopback(15000), "/config_dump", "localhost").await.unwrap();
        assert_eq!(status, 200);
        assert!(dump.contains("outbound|18080||backend.example.com"), "{dump}");
        // Prometheus stats through the bootstrap's 15090 listener, and merged by the agent on 15020.
        let (status, prometheus) = http_get(loopback(15090), "/stats/prometheus", "localhost").await.unwrap();
        assert_eq!(status, 200);
        assert!(prometheus.contains("envoy_server_state"), "{prometheus}");
        let (status, merged) = http_get(loopback(15020), "/stats/prometheus", "localhost").await.unwrap();
        assert_eq!(status, 200);
        assert!(merged.contains("envoy_server_state"), "{merged}");

        // An inbound-only drain leaves the outbound listeners serving the application.
        let drained = http_request("POST", loopback(15000), "/drain_listeners?inboundonly", "localhost").await;
        assert_eq!(drained.unwrap().0, 200);
        let (status, body) = http_get(loopback(18080), "/", "backend.example.com").await.unwrap();
        assert_eq!((status, body.as_str()), (200, "backend"));

        // The pod terminates: the agent drains Outrider's inbound listeners, then stops it.
        let status = sidecar.terminate().await;
        let log = sidecar.log();
        assert!(status.success(), "pilot-agent exit {status}:\n{log}");
        assert!(!log.contains("failed draining listeners"), "{log}");
        assert!(log.contains("draining listeners (admin request) inbound_only=true graceful=false"), "{log}");
        assert!(log.contains("draining listeners (admin request) inbound_only=true graceful=true"), "{log}");
        assert!(http_get(loopback(15000), "/ready", "localhost").await.is_err(), "Outrider stopped");
        drop(istiod);
    });
}

/// Forwards every connection to `listen` on to `target`, for the test's life: pod B reaches
/// istiod, which listens on pod A's loopback, through it.
async fn relay(listen: SocketAddr, target: SocketAddr) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    address
}

/// The server pod's service (its endpoint labelled for Istio mutual TLS, with the server's
/// identity), the server's inbound listener (a Sidecar ingress: no iptables capture), and
/// STRICT mutual TLS for the namespace.
fn mesh_configs() -> Vec<(&'static str, String)> {
    let service = format!(
        r#"apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: server
  namespace: default
spec:
  hosts: [server.default.svc.cluster.local]
  location: MESH_INTERNAL
  ports:
  - number: 9080
    name: http
    protocol: HTTP
  resolution: STATIC
  endpoints:
  - address: {POD_B}
    labels:
      app: server
      security.istio.io/tlsMode: istio
    serviceAccount: server
"#
    );
    let sidecar = r#"apiVersion: networking.istio.io/v1
kind: Sidecar
metadata:
  name: server
  namespace: default
spec:
  workloadSelector:
    labels:
      app: server
  ingress:
  - port:
      number: 9080
      protocol: HTTP
      name: http
    defaultEndpoint: 127.0.0.1:8080
  egress:
  - hosts: ["./*"]
"#;
    let strict = r#"apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: default
  namespace: default
spec:
  mtls:
    mode: STRICT
"#;
    vec![("server.yaml", service), ("sidecar.yaml", sidecar.to_owned()), ("strict.yaml", strict.to_owned())]
}

#[test]
fn mutual_tls_between_two_outrider_sidecars_under_istio_agents() {
    const NAME: &str = "mutual_tls_between_two_outrider_sidecars_under_istio_agents";
    let Some(agent) = common::peers::peer("pilot-agent", NAME) else { return };
    let Some(istiod) = Istiod::binary(NAME) else { return };
    if let Some(why) = unavailable() {
        skipped(Tool::Netns, NAME, &why);
        return;
    }
    if !bootstrap_template().is_file() {
        skipped(Tool::Peers, NAME, &format!("{} not found (tests/peers/build.sh)", bootstrap_template().display()));
        return;
    }
    let (a, b) = Netns::pair();
    // The server pod's application, on its loopback, as a container beside the sidecar.
    b.spawn(async || {
        backend(loopback(8080), "server-app").await;
        std::future::pending::<()>().await;
    });
    let b = std::sync::Arc::new(b);
    let in_b = b.clone();
    a.run(async move || {
        let configs = mesh_configs();
        let configs: Vec<(&str, &str)> = configs.iter().map(|(n, y)| (*n, y.as_str())).collect();
        let istiod = Istiod::start(&istiod, &configs).await;
        let discovery_for_b = relay(SocketAddr::new(POD_A.parse().unwrap(), 0), istiod.grpc).await;
        let ca = pki::Ca::new("test mesh CA");
        let server = Pod { name: "server", ip: POD_B, service_account: "server", netns: Some(&in_b) };
        let mut server_sidecar = Sidecar::start(&agent, discovery_for_b, &ca, &server);
        let client = Pod { name: "client", ip: POD_A, service_account: "client", netns: None };
        let mut client_sidecar = Sidecar::start(&agent, istiod.grpc, &ca, &client);
        server_sidecar.wait_ready(POD_B).await;
        client_sidecar.wait_ready(POD_A).await;

        // The client's outbound listener → ISTIO_MUTUAL to the server sidecar's inbound
        // listener → the server's application.
        let mut got = None;
        let answered = wait::within(async || {
            let answer = http_get(loopback(9080), "/", "server.default.svc.cluster.local").await;
            let answered = matches!(&answer, Ok((200, body)) if body == "server-app");
            got = Some(answer);
            answered.then_some(())
        })
        .await;
        assert!(
            answered.is_some(),
            "no answer through the sidecars: {got:?}\n--- client:\n{}\n--- server:\n{}",
            client_sidecar.log(),
            server_sidecar.log()
        );
        // STRICT: the server sidecar refuses plaintext from outside the mesh.
        let plaintext = http_get(SocketAddr::new(POD_B.parse().unwrap(), 9080), "/", "server").await;
        assert!(!matches!(&plaintext, Ok((200, _))), "plaintext reached the server: {plaintext:?}");

        assert!(client_sidecar.terminate().await.success(), "{}", client_sidecar.log());
        assert!(server_sidecar.terminate().await.success(), "{}", server_sidecar.log());
        drop(istiod);
    });
}
