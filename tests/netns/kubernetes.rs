//! A Kubernetes cluster in network namespaces, for the tests that run Outrider as Istio users
//! do: etcd, kube-apiserver and kube-controller-manager built from their Go modules
//! (`tests/peers/build.sh kubernetes`), istiod in its Kubernetes mode with Istio's own
//! CRDs and injection, and pods run by [`super::kubelet::Kubelet`].
//!
//! The control plane lives in a "node" namespace of its own (the API server, etcd and istiod
//! on its loopback and on the bridge 10.244.0.1/24 the pods hang from), so nothing listens
//! on the host. The API server signs service-account tokens with a key made here, so
//! TokenRequest and TokenReview are the real ones; istiod's CA is a root made here
//! (`ROOT_CA_DIR`), whose certificate is the injection webhook's CA bundle. There is no
//! scheduler (pod templates name the node) and no kube-proxy (Services' cluster IPs are
//! reached through the sidecars, which capture them).
//!
//! Needs root, iproute2, iptables and the built binaries; [`Cluster::unavailable`] says why
//! not. Everything is removed when the [`Cluster`] drops.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose, SanType};
use serde_json::{Value, json};

use super::kubelet::Kubelet;
use super::{in_netns, sh};
use crate::tls_support::pki::Ca;

/// The node namespace's address on the pods' bridge: the pods' gateway, and where they
/// reach istiod (`istiod.istio-system.svc` in their hosts file).
pub const NODE_IP: &str = "10.244.0.1";
/// Services' cluster IPs.
pub const SERVICE_RANGE: &str = "10.96.0.0/16";
/// The one node's name, which pod templates give as `nodeName` (there is no scheduler).
pub const NODE_NAME: &str = "node-1";
/// The image the kubelet runs as the Outrider binary (the last path segment's name).
pub const OUTRIDER_IMAGE: &str = "example.com/mesh/outrider:test";

/// The binaries the cluster runs.
struct Binaries {
    etcd: PathBuf,
    apiserver: PathBuf,
    controller_manager: PathBuf,
    kubectl: PathBuf,
    istiod: PathBuf,
    /// The patched istio source `tests/peers/build.sh` keeps: Istio's CRDs and its
    /// injection template and values come from it.
    istio_src: PathBuf,
}

/// How Istio's injection adds the proxy (istiod's `ENABLE_NATIVE_SIDECARS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sidecars {
    /// A container beside the application's (Istio's default).
    Containers,
    /// A native sidecar: an init container with `restartPolicy: Always`, started (and
    /// through its startup probe) before the application.
    Native,
}

/// Whether istiod runs with ambient mode on (`PILOT_ENABLE_AMBIENT`): the Gateway API's CRDs
/// installed, and Istio's own `waypoint` template in the injector's configuration, from which
/// istiod's deployment controller makes a waypoint's Deployment and Service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ambient {
    Off,
    On,
}

/// A running cluster.
pub struct Cluster {
    pub node: String,
    dir: tempfile::TempDir,
    bin: Binaries,
    control_plane: Vec<(&'static str, Child)>,
    kubeconfig: PathBuf,
    /// istiod's root (the mesh's trust anchor), PEM.
    pub mesh_root: String,
    pub kubelet: Kubelet,
}

impl Cluster {
    /// Why the cluster cannot run here, if it cannot: not root, tools missing, or the
    /// binaries not built.
    pub fn unavailable() -> Option<(crate::common::skip::Tool, String)> {
        if let Some(why) = super::unavailable() {
            return Some((crate::common::skip::Tool::Netns, why));
        }
        match Self::binaries() {
            Ok(_) => None,
            Err(why) => Some((crate::common::skip::Tool::Peers, why)),
        }
    }

    fn binaries() -> Result<Binaries, String> {
        let bin = crate::common::peers::peers_dir();
        let istio_src = bin.parent().map(|p| p.join("build/istio/istio-src")).unwrap_or_default();
        let found = |name: &str| {
            let path = bin.join(name);
            if path.is_file() { Ok(path) } else { Err(format!("{} not built (tests/peers/build.sh)", path.display())) }
        };
        let binaries = Binaries {
            etcd: found("etcd")?,
            apiserver: found("kube-apiserver")?,
            controller_manager: found("kube-controller-manager")?,
            kubectl: found("kubectl")?,
            istiod: found("pilot-discovery")?,
            istio_src,
        };
        if !binaries.istio_src.join("manifests").is_dir() {
            return Err(format!("{} missing (tests/peers/build.sh istio)", binaries.istio_src.display()));
        }
        Ok(binaries)
    }

    /// Starts the control plane and istiod, with Istio's injection set to Outrider, and
    /// returns once the injection webhook answers.
    pub fn start() -> Cluster {
        Self::start_with(Sidecars::Containers)
    }

    /// [`start`](Self::start), with istiod injecting the proxy as `sidecars` says.
    pub fn start_with(sidecars: Sidecars) -> Cluster {
        Self::start_configured(sidecars, Ambient::Off)
    }

    /// [`start`](Self::start) with ambient mode on: Istio's waypoints can be made.
    pub fn start_ambient() -> Cluster {
        Self::start_configured(Sidecars::Containers, Ambient::On)
    }

    fn start_configured(sidecars: Sidecars, ambient: Ambient) -> Cluster {
        let bin = Self::binaries().unwrap();
        let dir = tempfile::tempdir().unwrap();
        // The pods' sidecars run as uid 1337 and read what the kubelet writes under here.
        chmod(dir.path(), 0o755);
        // A copy, as the netns lab keeps one: uid 1337 can run it, and no rebuild replaces it.
        let outrider = dir.path().join("outrider");
        let built = std::env::var("OUTRIDER_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_outrider").to_owned());
        std::fs::copy(built, &outrider).unwrap();
        chmod(&outrider, 0o755);
        // Unique per cluster, also when one test process starts several.
        static CLUSTERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let cluster = CLUSTERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let node = format!("k8s-{}-{cluster}-node", std::process::id());
        sh("ip", &["netns", "add", &node]);
        let mut cluster = Cluster {
            kubelet: Kubelet::new(&node, dir.path().join("pods"), &outrider),
            node,
            dir,
            bin,
            control_plane: Vec::new(),
            kubeconfig: PathBuf::new(),
            mesh_root: String::new(),
        };
        cluster.network();
        cluster.certificates();
        cluster.start_etcd();
        cluster.start_apiserver();
        cluster.start_controller_manager();
        cluster.install_istio(sidecars, ambient);
        cluster
    }

    /// The node namespace: loopback, the pods' bridge, and the names its processes resolve.
    fn network(&self) {
        let ip = |args: &[&str]| {
            let mut all = vec!["-n", self.node.as_str()];
            all.extend_from_slice(args);
            sh("ip", &all);
        };
        ip(&["link", "set", "lo", "up"]);
        ip(&["link", "add", "pods", "type", "bridge"]);
        ip(&["addr", "add", &format!("{NODE_IP}/24"), "dev", "pods"]);
        ip(&["link", "set", "pods", "up"]);
        // `ip netns exec` mounts /etc/netns/NAME/hosts over /etc/hosts: the API server calls
        // the injection webhook by istiod's Service name, as in a cluster.
        write_hosts(&self.node, &[("127.0.0.1", "localhost"), (NODE_IP, "istiod.istio-system.svc")]);
    }

    /// The API server's serving and client certificates, the service-account signing key,
    /// istiod's CA, and the kubeconfig every client uses.
    fn certificates(&mut self) {
        let pki = self.path("pki");
        std::fs::create_dir_all(&pki).unwrap();
        let ca = Ca::new("kubernetes");
        std::fs::write(pki.join("ca.crt"), ca.pem()).unwrap();
        let mut serving = CertificateParams::new(Vec::<String>::new()).unwrap();
        serving.subject_alt_names = vec![
            SanType::IpAddress([127, 0, 0, 1].into()),
            SanType::IpAddress([10, 96, 0, 1].into()),
            SanType::DnsName("localhost".try_into().unwrap()),
            SanType::DnsName("kubernetes.default.svc".try_into().unwrap()),
        ];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let serving = ca.sign(serving, KeyPair::generate().unwrap());
        std::fs::write(pki.join("apiserver.crt"), &serving.cert_pem).unwrap();
        std::fs::write(pki.join("apiserver.key"), &serving.key_pem).unwrap();
        // The cluster administrator (group system:masters), for kubectl, the controller
        // manager and istiod alike.
        let mut admin = CertificateParams::new(Vec::<String>::new()).unwrap();
        admin.distinguished_name.push(DnType::CommonName, "admin");
        admin.distinguished_name.push(DnType::OrganizationName, "system:masters");
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        admin.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let admin = ca.sign(admin, KeyPair::generate().unwrap());
        std::fs::write(pki.join("admin.crt"), &admin.cert_pem).unwrap();
        std::fs::write(pki.join("admin.key"), &admin.key_pem).unwrap();
        let signing = KeyPair::generate().unwrap();
        std::fs::write(pki.join("sa.key"), signing.serialize_pem()).unwrap();
        std::fs::write(pki.join("sa.pub"), signing.public_key_pem()).unwrap();
        self.kubeconfig = pki.join("kubeconfig");
        let kubeconfig = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{ "name": "test", "cluster": {
                "server": "https://127.0.0.1:6443",
                "certificate-authority": pki.join("ca.crt"),
            } }],
            "users": [{ "name": "admin", "user": {
                "client-certificate": pki.join("admin.crt"),
                "client-key": pki.join("admin.key"),
            } }],
            "contexts": [{ "name": "test", "context": { "cluster": "test", "user": "admin" } }],
            "current-context": "test",
        });
        std::fs::write(&self.kubeconfig, kubeconfig.to_string()).unwrap();
        self.mesh_root = crate::tls_support::pki::write_istio_ca_dir(&self.path("cacerts"));
    }

    fn start_etcd(&mut self) {
        let data = self.path("etcd");
        self.spawn(
            "etcd",
            &self.bin.etcd.clone(),
            &[
                "--name=node",
                &format!("--data-dir={}", data.display()),
                "--listen-client-urls=http://127.0.0.1:2379",
                "--advertise-client-urls=http://127.0.0.1:2379",
                "--listen-peer-urls=http://127.0.0.1:2380",
                "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                "--initial-cluster=node=http://127.0.0.1:2380",
                "--log-level=warn",
            ],
            &[],
        );
        self.wait_for_port("etcd", 2379);
    }

    fn start_apiserver(&mut self) {
        let pki = self.path("pki");
        let file = |name: &str| pki.join(name).display().to_string();
        self.spawn(
            "kube-apiserver",
            &self.bin.apiserver.clone(),
            &[
                "--etcd-servers=http://127.0.0.1:2379",
                "--secure-port=6443",
                &format!("--advertise-address={NODE_IP}"),
                &format!("--cert-dir={}", self.path("apiserver").display()),
                &format!("--tls-cert-file={}", file("apiserver.crt")),
                &format!("--tls-private-key-file={}", file("apiserver.key")),
                &format!("--client-ca-file={}", file("ca.crt")),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                &format!("--service-account-key-file={}", file("sa.pub")),
                &format!("--service-account-signing-key-file={}", file("sa.key")),
                &format!("--service-cluster-ip-range={SERVICE_RANGE}"),
                "--authorization-mode=Node,RBAC",
                // No kubelet reports the API server's own endpoints.
                "--endpoint-reconciler-type=none",
            ],
            &[],
        );
        let ready = wait_for(Duration::from_secs(90), || self.kubectl_try(&["get", "--raw", "/readyz"]).ok());
        assert!(ready.is_some(), "kube-apiserver not ready:\n{}", self.log_tail("kube-apiserver"));
    }

    fn start_controller_manager(&mut self) {
        let pki = self.path("pki");
        let kubeconfig = format!("--kubeconfig={}", self.kubeconfig.display());
        self.spawn(
            "kube-controller-manager",
            &self.bin.controller_manager.clone(),
            &[
                &kubeconfig,
                // What turns Deployments into pods and pods into EndpointSlices, and cleans up.
                "--controllers=deployment-controller,replicaset-controller,endpointslice-controller,\
                 serviceaccount-controller,garbage-collector-controller,namespace-controller,\
                 root-ca-certificate-publisher-controller",
                &format!("--root-ca-file={}", pki.join("ca.crt").display()),
                "--leader-elect=false",
                "--secure-port=0",
                "--use-service-account-credentials=false",
            ],
            &[],
        );
    }

    /// istio-system, Istio's CRDs from its own manifests, the injector's configuration (Istio's
    /// `sidecar` template with Outrider's after it), istiod, and the injection webhook.
    fn install_istio(&mut self, sidecars: Sidecars, ambient: Ambient) {
        self.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{ name: istio-system }}\n---\n\
             apiVersion: v1\nkind: Node\nmetadata: {{ name: {NODE_NAME} }}\n"
        ));
        let crds = self.bin.istio_src.join("manifests/charts/base/files/crd-all.gen.yaml");
        self.kubectl(&["apply", "--server-side", "-f", &crds.display().to_string()]);
        if ambient == Ambient::On {
            // The Gateway API's CRDs, as Istio's own integration tests install them.
            let gateway_api = self.bin.istio_src.join("tests/integration/pilot/testdata/gateway-api-crd.yaml");
            self.kubectl(&["apply", "--server-side", "-f", &gateway_api.display().to_string()]);
        }
        self.kubectl(&["wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"]);
        let (config, values) = self.injector_config();
        let (config_path, values_path) = (self.path("inject-config"), self.path("inject-values"));
        std::fs::write(&config_path, config).unwrap();
        std::fs::write(&values_path, values).unwrap();
        self.kubectl(&[
            "create",
            "configmap",
            "istio-sidecar-injector",
            "-n",
            "istio-system",
            &format!("--from-file=config={}", config_path.display()),
            &format!("--from-file=values={}", values_path.display()),
        ]);
        self.start_istiod(sidecars, ambient);
        let bundle = base64::engine::general_purpose::STANDARD.encode(&self.mesh_root);
        self.apply(&format!(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: istio-sidecar-injector
  labels: {{ app: sidecar-injector, istio.io/rev: default }}
webhooks:
- name: namespace.sidecar-injector.istio.io
  clientConfig: {{ url: "https://istiod.istio-system.svc:15017/inject", caBundle: "{bundle}" }}
  rules: [{{ operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods] }}]
  namespaceSelector: {{ matchLabels: {{ istio-injection: enabled }} }}
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: Fail
"#
        ));
    }

    /// The injector's `config` and `values`, as Istio's chart writes them into the
    /// `istio-sidecar-injector` ConfigMap, with `defaultTemplates: [sidecar, outrider]` and
    /// Outrider's image as the proxy's.
    fn injector_config(&self) -> (String, String) {
        let chart = self.bin.istio_src.join("manifests/charts/istio-control/istio-discovery");
        let sidecar = std::fs::read_to_string(chart.join("files/injection-template.yaml")).unwrap();
        let waypoint = std::fs::read_to_string(chart.join("files/waypoint.yaml")).unwrap();
        let outrider =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/istio/injection-template.yaml"))
                .unwrap();
        let config = json!({
            "policy": "enabled",
            "alwaysInjectSelector": [],
            "neverInjectSelector": [],
            "injectedAnnotations": {},
            "defaultTemplates": ["sidecar", "outrider"],
            "templates": { "sidecar": sidecar, "outrider": outrider, "waypoint": waypoint },
        });
        let chart_values: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(chart.join("values.yaml")).unwrap()).unwrap();
        let defaults = &chart_values["_internal_defaults_do_not_set"];
        let mut values = json!({
            "global": defaults["global"],
            "sidecarInjectorWebhook": defaults["sidecarInjectorWebhook"],
            "revision": defaults["revision"],
            "pilot": { "cni": defaults["cni"], "env": defaults["env"] },
            "gateways": {
                "securityContext": defaults["gateways"]["securityContext"],
                "seccompProfile": defaults["gateways"]["seccompProfile"],
            },
        });
        values["global"]["proxy"]["image"] = json!(OUTRIDER_IMAGE);
        values["global"]["proxy_init"]["image"] = json!(OUTRIDER_IMAGE);
        (config.to_string(), values.to_string())
    }

    fn start_istiod(&mut self, sidecars: Sidecars, ambient: Ambient) {
        let kubeconfig = format!("--kubeconfig={}", self.kubeconfig.display());
        let ca_dir = self.path("cacerts").display().to_string();
        // Access logs on every sidecar's standard output: what a failed request went through.
        let mesh = self.path("mesh.yaml");
        std::fs::write(&mesh, "accessLogFile: /dev/stdout\n").unwrap();
        let mesh = format!("--meshConfig={}", mesh.display());
        self.spawn(
            "istiod",
            &self.bin.istiod.clone(),
            &[
                "discovery",
                &kubeconfig,
                &mesh,
                "--grpcAddr=:15010",
                "--secureGRPCAddr=:15012",
                "--httpsAddr=:15017",
                "--httpAddr=127.0.0.1:8080",
                "--monitoringAddr=127.0.0.1:15014",
                "--log_output_level=default:info",
            ],
            &[
                ("POD_NAMESPACE", "istio-system"),
                ("POD_NAME", "istiod-0"),
                ("REVISION", "default"),
                ("ROOT_CA_DIR", &ca_dir),
                ("PILOT_CERT_PROVIDER", "istiod"),
                // The test's webhook configuration carries the bundle; no validation webhook.
                ("VALIDATION_WEBHOOK_CONFIG_NAME", ""),
                ("ENABLE_NATIVE_SIDECARS", if sidecars == Sidecars::Native { "true" } else { "false" }),
                ("PILOT_ENABLE_AMBIENT", if ambient == Ambient::On { "true" } else { "false" }),
            ],
        );
        // istiod's /ready waits for its caches and the injection webhook.
        let node = self.node.clone();
        let ready = wait_for(Duration::from_secs(90), || {
            let node = node.clone();
            in_netns(&node, || http_status("127.0.0.1:8080", "/ready")).filter(|status| *status == 200)
        });
        assert!(ready.is_some(), "istiod not ready:\n{}", self.log_tail("istiod"));
    }

    /// Starts `program args` in the node namespace with `env`, logging to its own file.
    pub fn spawn(&mut self, name: &'static str, program: &Path, args: &[&str], env: &[(&str, &str)]) {
        let log = std::fs::File::create(self.path(&format!("{name}.log"))).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.node])
            .arg(program)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.control_plane.push((name, child));
    }

    fn wait_for_port(&self, name: &str, port: u16) {
        let node = self.node.clone();
        let open = wait_for(Duration::from_secs(30), || {
            let node = node.clone();
            in_netns(&node, move || std::net::TcpStream::connect(("127.0.0.1", port)).ok()).map(|_| ())
        });
        assert!(open.is_some(), "{name} not listening on {port}:\n{}", self.log_tail(name));
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The last lines of a control-plane process's log.
    pub fn log_tail(&self, name: &str) -> String {
        let log = std::fs::read_to_string(self.path(&format!("{name}.log"))).unwrap_or_default();
        let lines: Vec<_> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `kubectl args` against the cluster: its standard output, or why it failed.
    pub fn kubectl_try(&self, args: &[&str]) -> Result<String, String> {
        kubectl_in(&self.node, &self.bin.kubectl, &self.kubeconfig, args, None)
    }

    /// `kubectl args`, failing the test when kubectl fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_try(args).unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) {
        kubectl_in(&self.node, &self.bin.kubectl, &self.kubeconfig, &["apply", "-f", "-"], Some(yaml))
            .unwrap_or_else(|e| panic!("kubectl apply: {e}\n{yaml}"));
    }

    /// `kubectl get args -o json`, parsed.
    pub fn get(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.kubectl(&all)).unwrap()
    }

    /// A Service's cluster IP.
    pub fn cluster_ip(&self, namespace: &str, service: &str) -> String {
        self.get(&["service", service, "-n", namespace])["spec"]["clusterIP"].as_str().unwrap().to_owned()
    }

    /// Runs the kubelet's loop once: starts the pods bound to the node that do not run yet,
    /// stops and removes those being deleted, reports the others' readiness.
    pub fn sync_pods(&mut self) {
        let pods = self.get(&["pods", "-A"]);
        let client = KubeClient { node: &self.node, kubectl: &self.bin.kubectl, kubeconfig: &self.kubeconfig };
        self.kubelet.sync(&client, pods["items"].as_array().map(Vec::as_slice).unwrap_or_default());
    }

    /// Runs the kubelet until `done` holds of the pods' list (bounded): each round starts,
    /// readies and removes pods as the controllers ask.
    pub fn sync_until(&mut self, what: &str, mut done: impl FnMut(&Cluster) -> bool) {
        let synced = wait_for(Duration::from_secs(120), || {
            self.sync_pods();
            done(self).then_some(())
        });
        assert!(synced.is_some(), "timed out waiting for {what}\n{}", self.kubelet.describe());
    }

    /// The pods of `namespace` whose labels include `app=<app>`, by name, with whether they
    /// are ready and not being deleted.
    pub fn pods(&self, namespace: &str, app: &str) -> Vec<(String, bool)> {
        self.pods_matching(namespace, &format!("app={app}"))
    }

    /// [`pods`](Self::pods) whose labels match `selector` (`kubectl -l`).
    pub fn pods_matching(&self, namespace: &str, selector: &str) -> Vec<(String, bool)> {
        let pods = self.get(&["pods", "-n", namespace, "-l", selector]);
        pods["items"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|pod| {
                let ready = pod["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
                let name = pod["metadata"]["name"].as_str().unwrap_or_default().to_owned();
                (name, ready && pod["metadata"]["deletionTimestamp"].is_null())
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kubelet.stop_all();
        for (name, child) in self.control_plane.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
            if std::thread::panicking() {
                let log = std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default();
                let lines: Vec<_> = log.lines().collect();
                eprintln!("--- {name}:\n{}", lines[lines.len().saturating_sub(30)..].join("\n"));
            }
        }
        let _ = Command::new("ip").args(["netns", "del", &self.node]).status();
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.node));
    }
}

/// What the kubelet needs of the cluster: kubectl, from the node namespace.
pub struct KubeClient<'a> {
    pub node: &'a str,
    kubectl: &'a Path,
    kubeconfig: &'a Path,
}

impl KubeClient<'_> {
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        kubectl_in(self.node, self.kubectl, self.kubeconfig, args, None)
    }

    /// `kubectl create -f -` of `yaml`.
    pub fn create(&self, yaml: &str) -> Result<String, String> {
        kubectl_in(self.node, self.kubectl, self.kubeconfig, &["create", "-f", "-"], Some(yaml))
    }
}

fn kubectl_in(
    node: &str,
    kubectl: &Path,
    kubeconfig: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, String> {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", node])
        .arg(kubectl)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    }
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// `/etc/netns/<ns>/hosts`, which `ip netns exec` mounts over `/etc/hosts`.
pub fn write_hosts(ns: &str, entries: &[(&str, &str)]) {
    let dir = PathBuf::from(format!("/etc/netns/{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let text: String = entries.iter().map(|(ip, name)| format!("{ip} {name}\n")).collect();
    std::fs::write(dir.join("hosts"), text).unwrap();
}

/// The status of `GET path` on `target` (`ip:port`), from the calling thread's namespace;
/// `None` when nothing answers.
pub fn http_status(target: &str, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let target: std::net::SocketAddr = target.parse().ok()?;
    let mut stream = std::net::TcpStream::connect_timeout(&target, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nhost: {target}\r\nconnection: close\r\n\r\n").as_bytes()).ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// Polls `check` with a growing pause until it returns `Some`, or `None` once `bound`
/// passes: the cluster's processes tell no one when they are ready. Blocking, unlike
/// `wait::within_for`, because these waits nest (the kubelet's round, run until a
/// condition holds, waits for probes inside) and a tokio runtime cannot be entered twice.
pub fn wait_for<T>(bound: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + bound;
    let mut pause = Duration::from_millis(10);
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

pub fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
