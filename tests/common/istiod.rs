//! A real istiod (`pilot-discovery`, built by `tests/peers/build.sh`) without Kubernetes: file
//! mode (`--registries= --configDir=DIR`), plaintext ADS on loopback, serving the Istio
//! resources (ServiceEntry, DestinationRule, VirtualService, ...) the test writes as YAML.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::{Child, Command};

use super::lab::free_port;
use super::wait;

/// A running istiod, killed when dropped.
pub struct Istiod {
    binary: PathBuf,
    child: Option<Child>,
    /// Plaintext ADS (istiod's `--grpcAddr`, 15010 in a mesh).
    pub grpc: SocketAddr,
    /// Debug HTTP (`--httpAddr`, 8080 in a mesh); set so that it binds no fixed port.
    pub http: SocketAddr,
    monitoring: SocketAddr,
    webhook: SocketAddr,
    /// istiod's CA and TLS discovery (`--secureGRPCAddr`, 15012 in a mesh), when started so.
    pub secure: Option<SocketAddr>,
    ca: Option<IstiodCa>,
    /// More environment for istiod (feature flags such as `PILOT_ENABLE_AMBIENT`).
    env: Vec<(&'static str, &'static str)>,
    dir: tempfile::TempDir,
}

/// istiod as a CA without Kubernetes: its signing CA from `ROOT_CA_DIR` (`ca-cert.pem`,
/// `ca-key.pem`, `root-cert.pem`, `cert-chain.pem`) and callers authenticated by JWTs
/// (`JWT_RULE`: issuer, `jwks_uri`, audiences; RS256, `sub` =
/// `system:serviceaccount:NS:SA`), which also authenticate ADS on the secure port.
#[derive(Debug, Clone)]
pub struct IstiodCa {
    pub root_ca_dir: PathBuf,
    pub jwt_rule: String,
}

impl Istiod {
    /// The istiod binary, or `None` after printing that `test` is skipped.
    pub fn binary(test: &str) -> Option<PathBuf> {
        super::peers::peer("pilot-discovery", test)
    }

    /// Starts istiod with the default mesh config, serving `configs` (file name, YAML), and
    /// waits until it is ready.
    pub async fn start(binary: &Path, configs: &[(&str, &str)]) -> Istiod {
        Self::start_with_mesh(binary, "", configs).await
    }

    /// As [`Istiod::start`], with `mesh` (MeshConfig YAML; empty for Istio's defaults).
    pub async fn start_with_mesh(binary: &Path, mesh: &str, configs: &[(&str, &str)]) -> Istiod {
        Self::start_with_ca(binary, mesh, configs, None).await
    }

    /// As [`Istiod::start`], with ambient mode on (`PILOT_ENABLE_AMBIENT`): istiod renders
    /// HBONE for sidecars whose node metadata has `ENABLE_HBONE`. (Without Kubernetes its
    /// ambient index is off; `tests/peers/istio/file-mode-ambient.patch`.)
    pub async fn start_ambient(binary: &Path, configs: &[(&str, &str)]) -> Istiod {
        Self::start_with_env(binary, "", configs, None, vec![("PILOT_ENABLE_AMBIENT", "true")]).await
    }

    /// As [`Istiod::start_with_mesh`], and with `ca`: its CA and TLS discovery on `secure`.
    pub async fn start_with_ca(binary: &Path, mesh: &str, configs: &[(&str, &str)], ca: Option<IstiodCa>) -> Istiod {
        Self::start_with_env(binary, mesh, configs, ca, Vec::new()).await
    }

    async fn start_with_env(
        binary: &Path,
        mesh: &str,
        configs: &[(&str, &str)],
        ca: Option<IstiodCa>,
        env: Vec<(&'static str, &'static str)>,
    ) -> Istiod {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("config")).unwrap();
        let loopback = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let mut istiod = Istiod {
            binary: binary.to_owned(),
            child: None,
            grpc: loopback(free_port()),
            http: loopback(free_port()),
            monitoring: loopback(free_port()),
            webhook: loopback(free_port()),
            secure: ca.as_ref().map(|_| loopback(free_port())),
            ca,
            env,
            dir,
        };
        if !mesh.is_empty() {
            std::fs::write(istiod.dir.path().join("mesh.yaml"), mesh).unwrap();
        }
        for (name, yaml) in configs {
            istiod.write(name, yaml);
        }
        istiod.spawn().await;
        istiod
    }

    /// The directory istiod watches; `write` and `remove` change what it serves.
    pub fn config_dir(&self) -> PathBuf {
        self.dir.path().join("config")
    }

    /// Writes (or replaces) one config file; istiod's file watcher pushes the change.
    pub fn write(&self, name: &str, yaml: &str) {
        // Written beside, then renamed: the watcher never reads a half-written file.
        let staged = self.dir.path().join(format!("{name}.tmp"));
        std::fs::write(&staged, yaml).unwrap();
        std::fs::rename(&staged, self.config_dir().join(name)).unwrap();
    }

    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.config_dir().join(name)).unwrap();
    }

    /// Kills istiod and starts it again on the same ports (as a rolling istiod restart).
    pub async fn restart(&mut self) {
        self.stop().await;
        self.spawn().await;
    }

    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    async fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log_path()).unwrap();
        let mut command = Command::new(&self.binary);
        // Without a CA the secure port is off: it needs istiod's own certificate, which the
        // CA makes. The plaintext port serves as a sidecar behind istio-agent effectively sees.
        let secure = self.secure.map_or_else(String::new, |a| a.to_string());
        command.arg(format!("--secureGRPCAddr={secure}"));
        if let Some(ca) = &self.ca {
            command.env("ENABLE_CA_SERVER", "true").env("ROOT_CA_DIR", &ca.root_ca_dir).env("JWT_RULE", &ca.jwt_rule);
        }
        command.envs(self.env.iter().copied());
        let child = command
            .arg("discovery")
            .arg("--registries=")
            .arg(format!("--configDir={}", self.config_dir().display()))
            .arg(format!("--grpcAddr={}", self.grpc))
            .arg(format!("--httpAddr={}", self.http))
            .arg(format!("--monitoringAddr={}", self.monitoring))
            .arg(format!("--httpsAddr={}", self.webhook))
            .arg(format!("--meshConfig={}", self.dir.path().join("mesh.yaml").display()))
            .arg("--log_output_level=default:info")
            .current_dir(self.dir.path())
            .env("POD_NAMESPACE", "istio-system")
            .env("REVISION", "default")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        self.child = Some(child);
        self.wait_ready().await;
    }

    /// Bounded wait for istiod's ADS port: istiod opens it once its caches have synced.
    /// (Its `/ready` also waits for the injection webhook, which file mode never serves.)
    /// Polled: istiod is a separate process.
    async fn wait_ready(&mut self) {
        let (grpc, secure) = (self.grpc, self.secure);
        let ready = wait::within(async || {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("istiod exited ({status}):\n{}", self.log_tail());
            }
            if let Some(secure) = secure {
                tokio::net::TcpStream::connect(secure).await.ok()?;
            }
            tokio::net::TcpStream::connect(grpc).await.ok()
        })
        .await;
        assert!(ready.is_some(), "istiod not ready:\n{}", self.log_tail());
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("istiod.log")
    }

    /// The last lines of istiod's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<_> = log.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }
}

/// Istio's node id for a sidecar: `sidecar~IP~POD.NAMESPACE~NAMESPACE.svc.cluster.local`.
pub fn sidecar_node_id(ip: &str, pod: &str, namespace: &str) -> String {
    format!("sidecar~{ip}~{pod}.{namespace}~{namespace}.svc.cluster.local")
}

/// Two workloads, `sleep` and `app`: the service `app.default.svc.cluster.local` on
/// `outbound` whose endpoint is the app pod's inbound port (`app_ip`:`inbound`, labelled as
/// an injected workload so that istiod renders mutual TLS to it), the client's egress, the
/// app sidecar's ingress to the application on 127.0.0.1:`application`, and STRICT mutual
/// TLS for `app`. Documents to add (Telemetry, AuthorizationPolicy) follow a `---`.
pub fn sleep_to_app_mesh(outbound: u16, inbound: u16, application: u16, app_ip: &str) -> String {
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
  - address: {app_ip}
    serviceAccount: app
    labels: {{ app: app, version: v1, security.istio.io/tlsMode: istio }}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{ name: default, namespace: default }}
spec:
  egress:
  - hosts: ["./*"]
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {{ name: app, namespace: default }}
spec:
  workloadSelector: {{ labels: {{ app: app }} }}
  ingress:
  - port: {{ number: {inbound}, protocol: HTTP, name: http }}
    defaultEndpoint: 127.0.0.1:{application}
  egress:
  - hosts: ["istio-system/*"]
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {{ name: app, namespace: default }}
spec:
  selector: {{ matchLabels: {{ app: app }} }}
  mtls: {{ mode: STRICT }}
"#
    )
}
