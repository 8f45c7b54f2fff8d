//! The kubelet of the test cluster ([`super::kubernetes::Cluster`]): runs the pods the
//! controllers create, each in a network namespace of its own on the node's bridge, from the
//! pod spec the API server stored — after Istio's injection webhook changed it.
//!
//! What a kubelet does, reduced to what these pods use: an address and a hosts file; the
//! pod's volumes (emptyDir, downwardAPI, configMap, and projected service-account tokens
//! from the API server's TokenRequest, bound to the pod) under a directory of the pod's own,
//! seen by each container at its mount paths (the processes run from that directory, as
//! Istio's proxy runs from `/`, and absolute paths in their arguments are mapped into it);
//! the downward API's environment; init containers in order (native sidecars started and
//! their startup probes passed before the next); the readiness probes, reported as the Ready
//! condition; and termination: every Outrider process sent SIGTERM and waited for, then the
//! applications stopped, then the pod object removed.
//!
//! Images: Outrider's image runs the Outrider binary under test as its entrypoint, as the
//! container's user; any other image is the test application, an HTTP server on each of the
//! container's ports that answers every request with the pod's name and the request
//! headers it received (JSON).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::kubernetes::{KubeClient, NODE_IP, NODE_NAME, chmod, http_status, wait_for, write_hosts};
use super::{in_netns, sh};

/// The pods this node runs.
pub struct Kubelet {
    node: String,
    dir: PathBuf,
    outrider: PathBuf,
    next_host: u8,
    pods: BTreeMap<String, RunningPod>,
    /// Pods (by name prefix) whose hosts file sends istiod's name nowhere.
    pub istiod_unreachable: Vec<String>,
    /// Pods (by name prefix) whose projected tokens are not their own.
    pub tokens: Vec<(String, WrongToken)>,
}

/// A projected token a pod should not have.
#[derive(Clone, Debug)]
pub enum WrongToken {
    /// Issued by the API server for this other service account.
    Account(String),
    /// Given as is (one the API server did not issue).
    Forged(String),
}

/// One running pod.
struct RunningPod {
    wrong_token: Option<WrongToken>,
    name: String,
    namespace: String,
    netns: String,
    ip: String,
    root: PathBuf,
    /// Sidecars and Outrider containers, in start order, with their names.
    processes: Vec<(String, Child)>,
    apps: Vec<EchoServer>,
    /// Readiness probes (port, path) of every container.
    readiness: Vec<(u16, String)>,
    ready: bool,
}

impl Kubelet {
    pub fn new(node: &str, dir: PathBuf, outrider: &Path) -> Kubelet {
        Kubelet {
            node: node.to_owned(),
            dir,
            outrider: outrider.to_owned(),
            next_host: 10,
            pods: BTreeMap::new(),
            istiod_unreachable: Vec::new(),
            tokens: Vec::new(),
        }
    }

    /// One round: start what is new, stop what is being deleted, report readiness.
    pub fn sync(&mut self, client: &KubeClient, pods: &[Value]) {
        let mut seen = Vec::new();
        for pod in pods {
            if pod["spec"]["nodeName"].is_null() && pod["metadata"]["deletionTimestamp"].is_null() {
                // The scheduler's part, for pods whose template names no node (those
                // istiod's deployment controller makes): bound here, started next round.
                let (namespace, name) = (text(&pod["metadata"]["namespace"]), text(&pod["metadata"]["name"]));
                let binding = format!(
                    "apiVersion: v1\nkind: Binding\nmetadata: {{ name: {name}, namespace: {namespace} }}\n\
                     target: {{ apiVersion: v1, kind: Node, name: {NODE_NAME} }}\n"
                );
                let _ = client.create(&binding);
                continue;
            }
            if pod["spec"]["nodeName"] != NODE_NAME {
                continue;
            }
            let (namespace, name) = (text(&pod["metadata"]["namespace"]), text(&pod["metadata"]["name"]));
            let key = format!("{namespace}/{name}");
            seen.push(key.clone());
            if !pod["metadata"]["deletionTimestamp"].is_null() {
                if let Some(running) = self.pods.remove(&key) {
                    event(&format!("stopping {key} ({})", running.ip));
                    running.stop();
                    event(&format!("stopped {key}"));
                }
                // The containers are gone: the kubelet removes the object.
                let _ = client.kubectl(&["delete", "pod", &name, "-n", &namespace, "--grace-period=0", "--force"]);
                continue;
            }
            match self.pods.get_mut(&key) {
                None => {
                    event(&format!("starting {key}"));
                    let running = self.start(client, pod);
                    event(&format!("started {key} ({})", running.ip));
                    self.pods.insert(key, running);
                }
                Some(running) if !running.ready => {
                    if running.probe(&self.node) {
                        running.ready = true;
                        report_status(client, pod, &running.ip, true);
                        event(&format!("{key} ready"));
                    }
                }
                Some(_) => {}
            }
        }
        let gone: Vec<String> = self.pods.keys().filter(|key| !seen.contains(key)).cloned().collect();
        for key in gone {
            if let Some(running) = self.pods.remove(&key) {
                running.stop();
            }
        }
    }

    /// A summary of the pods and their sidecars' last log lines, for failure messages.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (key, pod) in &self.pods {
            out.push_str(&format!("pod {key} {} ready={}\n", pod.ip, pod.ready));
            for (name, _) in &pod.processes {
                let log = std::fs::read_to_string(pod.root.join(format!("{name}.log"))).unwrap_or_default();
                let lines: Vec<_> = log.lines().collect();
                out.push_str(&format!("  {name}:\n    {}\n", lines[lines.len().saturating_sub(15)..].join("\n    ")));
            }
        }
        out
    }

    /// The network namespace and address of a running pod.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<(String, String)> {
        self.pods.get(&format!("{namespace}/{name}")).map(|p| (p.netns.clone(), p.ip.clone()))
    }

    /// The log of a running pod's container.
    pub fn log(&self, namespace: &str, name: &str, container: &str) -> String {
        self.pods
            .get(&format!("{namespace}/{name}"))
            .and_then(|p| std::fs::read_to_string(p.root.join(format!("{container}.log"))).ok())
            .unwrap_or_default()
    }

    pub fn stop_all(&mut self) {
        for (_, pod) in std::mem::take(&mut self.pods) {
            pod.stop();
        }
    }

    fn start(&mut self, client: &KubeClient, pod: &Value) -> RunningPod {
        let host = self.next_host;
        self.next_host = self.next_host.checked_add(1).expect("at most 245 pods per test");
        let (namespace, name) = (text(&pod["metadata"]["namespace"]), text(&pod["metadata"]["name"]));
        let netns = format!("{}-{host}", self.node.trim_end_matches("-node"));
        let ip = format!("10.244.0.{host}");
        let root = self.dir.join(format!("{namespace}-{name}"));
        std::fs::create_dir_all(&root).unwrap();
        chmod(&self.dir, 0o755);
        chmod(&root, 0o755);
        self.network(&netns, &ip, host);
        let istiod = if self.istiod_unreachable.iter().any(|prefix| name.starts_with(prefix.as_str())) {
            "10.244.0.254"
        } else {
            NODE_IP
        };
        write_hosts(&netns, &[("127.0.0.1", "localhost"), (&ip, &name), (istiod, "istiod.istio-system.svc")]);
        // The address first, as a kubelet knows it from the network plugin before any
        // container starts: the downward API hands it to the sidecar.
        report_status(client, pod, &ip, false);
        let wrong_token =
            self.tokens.iter().find(|(prefix, _)| name.starts_with(prefix.as_str())).map(|(_, t)| t.clone());
        let mut running = RunningPod {
            wrong_token,
            name: name.clone(),
            namespace,
            netns,
            ip,
            root,
            processes: Vec::new(),
            apps: Vec::new(),
            readiness: Vec::new(),
            ready: false,
        };
        running.volumes(client, pod);
        for container in items(&pod["spec"]["initContainers"]) {
            if container["restartPolicy"] == "Always" {
                running.start_container(&self.outrider, pod, container);
                running.startup_probe(&self.node, container);
            } else {
                running.run_to_completion(&self.outrider, pod, container);
            }
        }
        for container in items(&pod["spec"]["containers"]) {
            running.start_container(&self.outrider, pod, container);
        }
        running
    }

    /// The pod's namespace, a veth pair to the node's bridge, its address and route.
    fn network(&self, netns: &str, ip: &str, host: u8) {
        sh("ip", &["netns", "add", netns]);
        let node_end = format!("vp{host}");
        sh("ip", &["-n", &self.node, "link", "add", &node_end, "type", "veth", "peer", "name", "eth0", "netns", netns]);
        sh("ip", &["-n", &self.node, "link", "set", &node_end, "master", "pods", "up"]);
        sh("ip", &["-n", netns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
        sh("ip", &["-n", netns, "link", "set", "eth0", "up"]);
        sh("ip", &["-n", netns, "link", "set", "lo", "up"]);
        sh("ip", &["-n", netns, "route", "add", "default", "via", NODE_IP]);
    }
}

impl RunningPod {
    fn volume_dir(&self, name: &str) -> PathBuf {
        self.root.join("volumes").join(name)
    }

    /// Every volume of the pod, made under `volumes/` as the kubelet would.
    fn volumes(&self, client: &KubeClient, pod: &Value) {
        for volume in items(&pod["spec"]["volumes"]) {
            let dir = self.volume_dir(&text(&volume["name"]));
            std::fs::create_dir_all(&dir).unwrap();
            chmod(&dir, 0o755);
            if volume.get("emptyDir").is_some() {
                chmod(&dir, 0o777);
            } else if let Some(downward) = volume.get("downwardAPI") {
                self.downward_files(&dir, pod, downward);
            } else if let Some(map) = volume.get("configMap") {
                self.config_map_files(client, &dir, map);
            } else if let Some(projected) = volume.get("projected") {
                for source in items(&projected["sources"]) {
                    if let Some(token) = source.get("serviceAccountToken") {
                        self.token_file(client, &dir, pod, token);
                    } else if let Some(map) = source.get("configMap") {
                        self.config_map_files(client, &dir, map);
                    } else if let Some(downward) = source.get("downwardAPI") {
                        self.downward_files(&dir, pod, downward);
                    }
                }
            }
        }
    }

    /// Labels and annotations as the kubelet writes them: `key="value"` lines, sorted.
    fn downward_files(&self, dir: &Path, pod: &Value, downward: &Value) {
        for item in items(&downward["items"]) {
            let field = text(&item["fieldRef"]["fieldPath"]);
            let contents = match field.as_str() {
                "metadata.labels" | "metadata.annotations" => {
                    let map = &pod["metadata"][field.trim_start_matches("metadata.")];
                    let lines: Vec<String> = map
                        .as_object()
                        .map(|m| {
                            m.iter().map(|(k, v)| format!("{k}={}", serde_json::to_string(&text(v)).unwrap())).collect()
                        })
                        .unwrap_or_default();
                    lines.join("\n")
                }
                "metadata.name" | "metadata.namespace" | "metadata.uid" => {
                    text(&pod["metadata"][field.trim_start_matches("metadata.")])
                }
                other => panic!("downwardAPI volume field {other} is not supported here"),
            };
            write_file(&dir.join(text(&item["path"])), &contents);
        }
    }

    /// A ConfigMap's keys as files; waits for it (istiod publishes its root to every
    /// namespace shortly after the namespace appears).
    fn config_map_files(&self, client: &KubeClient, dir: &Path, map: &Value) {
        let (name, optional) = (text(&map["name"]), map["optional"] == true);
        let found = wait_for(Duration::from_secs(if optional { 1 } else { 60 }), || {
            client.kubectl(&["get", "configmap", &name, "-n", &self.namespace, "-o", "json"]).ok()
        });
        let Some(found) = found else {
            assert!(optional, "ConfigMap {}/{name} never appeared", self.namespace);
            return;
        };
        let data: Value = serde_json::from_str(&found).unwrap();
        let wanted: Vec<(String, String)> = match map["items"].as_array() {
            Some(list) => list.iter().map(|i| (text(&i["key"]), text(&i["path"]))).collect(),
            None => {
                data["data"].as_object().map(|d| d.keys().map(|k| (k.clone(), k.clone())).collect()).unwrap_or_default()
            }
        };
        for (key, path) in wanted {
            write_file(&dir.join(path), &text(&data["data"][&key]));
        }
    }

    /// A service-account token from the API server's TokenRequest, bound to this pod.
    fn token_file(&self, client: &KubeClient, dir: &Path, pod: &Value, token: &Value) {
        let own = pod["spec"]["serviceAccountName"].as_str().unwrap_or("default");
        let account = match &self.wrong_token {
            Some(WrongToken::Forged(forged)) => return write_file(&dir.join(text(&token["path"])), forged),
            Some(WrongToken::Account(other)) => other.as_str(),
            None => own,
        };
        let mut args =
            vec!["create".to_owned(), "token".to_owned(), account.to_owned(), "-n".to_owned(), self.namespace.clone()];
        if account == own {
            // Bound to the pod, as the kubelet's are (a token of another account cannot be).
            args.push("--bound-object-kind=Pod".to_owned());
            args.push(format!("--bound-object-name={}", self.name));
            args.push(format!("--bound-object-uid={}", text(&pod["metadata"]["uid"])));
        }
        if let Some(audience) = token["audience"].as_str() {
            args.push(format!("--audience={audience}"));
        }
        if let Some(seconds) = token["expirationSeconds"].as_u64() {
            args.push(format!("--duration={seconds}s"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let issued = client.kubectl(&args).unwrap_or_else(|e| panic!("TokenRequest for {}: {e}", self.name));
        write_file(&dir.join(text(&token["path"])), issued.trim());
    }

    /// The container's view of the pod's directory: each mount path a link to its volume.
    fn mount(&self, container: &Value) {
        for mount in items(&container["volumeMounts"]) {
            let target = self.root.join(text(&mount["mountPath"]).trim_start_matches('/'));
            if target.symlink_metadata().is_ok() {
                continue;
            }
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            let mut parent = target.parent().map(Path::to_path_buf);
            while let Some(dir) = parent.filter(|d| d.starts_with(&self.root)) {
                chmod(&dir, 0o755);
                parent = dir.parent().map(Path::to_path_buf);
            }
            std::os::unix::fs::symlink(self.volume_dir(&text(&mount["name"])), &target).unwrap();
        }
    }

    /// An argument as the container sees it: `$(VAR)` expanded, and an absolute path under
    /// one of its mounts mapped into the pod's directory.
    fn argument(&self, container: &Value, env: &[(String, String)], arg: &str) -> String {
        let arg = expand(arg, env);
        let mounted = items(&container["volumeMounts"]).iter().any(|m| {
            let path = text(&m["mountPath"]);
            arg.starts_with(&format!("{}/", path.trim_end_matches('/')))
        });
        if mounted { self.root.join(arg.trim_start_matches('/')).display().to_string() } else { arg }
    }

    /// The command for an Outrider container: the binary under test, in the pod's namespace,
    /// as the container's user, from its working directory, with only its environment.
    fn command(&self, outrider: &Path, pod: &Value, container: &Value) -> Command {
        let env = container_env(pod, container, &self.ip);
        let uid = container["securityContext"]["runAsUser"].as_u64().unwrap_or(0).to_string();
        let gid = container["securityContext"]["runAsGroup"].as_u64().unwrap_or(0).to_string();
        self.mount(container);
        let args: Vec<String> =
            items(&container["args"]).iter().map(|a| self.argument(container, &env, &text(a))).collect();
        let workdir = self.root.join(container["workingDir"].as_str().unwrap_or("/").trim_start_matches('/'));
        let name = text(&container["name"]);
        let log = std::fs::File::create(self.root.join(format!("{name}.log"))).unwrap();
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.netns]);
        if uid != "0" {
            command.args(["setpriv", "--reuid", &uid, "--regid", &gid, "--clear-groups"]);
        }
        command
            .arg(outrider)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOSTNAME", &self.name)
            .envs(env)
            .current_dir(workdir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        command
    }

    fn is_outrider(container: &Value) -> bool {
        let image = text(&container["image"]);
        let last = image.rsplit('/').next().unwrap_or_default();
        last.starts_with("outrider")
    }

    fn run_to_completion(&mut self, outrider: &Path, pod: &Value, container: &Value) {
        assert!(Self::is_outrider(container), "init container {} runs an image not known here", container["name"]);
        let status = self.command(outrider, pod, container).status().unwrap();
        let name = text(&container["name"]);
        let log = std::fs::read_to_string(self.root.join(format!("{name}.log"))).unwrap_or_default();
        assert!(status.success(), "init container {name} of {} failed ({status}):\n{log}", self.name);
    }

    fn start_container(&mut self, outrider: &Path, pod: &Value, container: &Value) {
        if let Some(probe) = container["readinessProbe"]["httpGet"].as_object() {
            let port = probe.get("port").and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok());
            if let Some(port) = port {
                self.readiness.push((port, probe.get("path").map(text).unwrap_or_else(|| "/".into())));
            }
        }
        if Self::is_outrider(container) {
            let child = self.command(outrider, pod, container).spawn().unwrap();
            self.processes.push((text(&container["name"]), child));
        } else {
            for port in items(&container["ports"]) {
                let port = port["containerPort"].as_u64().and_then(|p| u16::try_from(p).ok()).unwrap();
                self.apps.push(EchoServer::start(&self.netns, port, &self.name));
            }
        }
    }

    /// A native sidecar's startup probe, from the node as the kubelet probes.
    fn startup_probe(&self, node: &str, container: &Value) {
        let probe = &container["startupProbe"]["httpGet"];
        let Some(port) = probe["port"].as_u64() else { return };
        let (target, path) = (format!("{}:{port}", self.ip), text(&probe["path"]));
        let node = node.to_owned();
        let started = wait_for(Duration::from_secs(60), || {
            let (node, target, path) = (node.clone(), target.clone(), path.clone());
            in_netns(&node, move || http_status(&target, &path)).filter(|s| *s == 200)
        });
        let name = text(&container["name"]);
        let log = std::fs::read_to_string(self.root.join(format!("{name}.log"))).unwrap_or_default();
        assert!(started.is_some(), "{} of {} never passed its startup probe:\n{log}", name, self.name);
    }

    /// Every readiness probe passes once, from the node.
    fn probe(&self, node: &str) -> bool {
        self.readiness.iter().all(|(port, path)| {
            let (node, target, path) = (node.to_owned(), format!("{}:{port}", self.ip), path.clone());
            in_netns(&node, move || http_status(&target, &path)) == Some(200)
        })
    }

    /// Termination: the Outrider processes in reverse start order, each sent SIGTERM and
    /// waited for, then the applications. The kubelet sends every container SIGTERM at once;
    /// the test application is one that keeps serving until its endpoint is surely gone from
    /// its callers (what a `preStop` pause gives), stood in for by "until its sidecar has
    /// exited" — a sidecar drains inbound for its termination drain time first.
    fn stop(mut self) {
        while let Some((name, mut child)) = self.processes.pop() {
            if let Some(pid) = i32::try_from(child.id()).ok().and_then(rustix::process::Pid::from_raw) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let exited = wait_for(Duration::from_secs(30), || child.try_wait().ok().flatten());
            if exited.is_none() {
                eprintln!("{name} of {} ignored SIGTERM for 30 s; killed", self.name);
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        for app in &self.apps {
            app.stop();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.netns]).status();
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.netns));
    }
}

/// What the kubelet did, when: on the test's output, for failures that depend on timing.
fn event(what: &str) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    eprintln!("kubelet {}.{:03}: {what}", now.as_secs() % 86_400, now.subsec_millis());
}

/// The pod's status as the kubelet reports it: its address, Running, and Ready or not.
fn report_status(client: &KubeClient, pod: &Value, ip: &str, ready: bool) {
    let ready = if ready { "True" } else { "False" };
    let now = "2026-01-01T00:00:00Z";
    let status = json!({ "status": {
        "phase": "Running",
        "hostIP": NODE_IP,
        "hostIPs": [{ "ip": NODE_IP }],
        "podIP": ip,
        "podIPs": [{ "ip": ip }],
        "startTime": now,
        "conditions": [
            { "type": "PodScheduled", "status": "True", "lastTransitionTime": now },
            { "type": "Initialized", "status": "True", "lastTransitionTime": now },
            { "type": "ContainersReady", "status": ready, "lastTransitionTime": now },
            { "type": "Ready", "status": ready, "lastTransitionTime": now },
        ],
    } });
    let (namespace, name) = (text(&pod["metadata"]["namespace"]), text(&pod["metadata"]["name"]));
    client
        .kubectl(&[
            "patch",
            "pod",
            &name,
            "-n",
            &namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ])
        .unwrap_or_else(|e| panic!("status of {namespace}/{name}: {e}"));
}

/// The container's environment from its spec: values, `$(VAR)` references to earlier
/// ones, and the downward API's fields and resources.
fn container_env(pod: &Value, container: &Value, ip: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for var in items(&container["env"]) {
        let name = text(&var["name"]);
        let value = if let Some(value) = var["value"].as_str() {
            expand(value, &env)
        } else if let Some(field) = var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            match field {
                "metadata.name" => text(&pod["metadata"]["name"]),
                "metadata.namespace" => text(&pod["metadata"]["namespace"]),
                "metadata.uid" => text(&pod["metadata"]["uid"]),
                "spec.serviceAccountName" => text(&pod["spec"]["serviceAccountName"]),
                "spec.nodeName" => text(&pod["spec"]["nodeName"]),
                "status.podIP" | "status.podIPs" => ip.to_owned(),
                "status.hostIP" | "status.hostIPs" => NODE_IP.to_owned(),
                other => panic!("env {name}: field {other} is not supported here"),
            }
        } else if let Some(resource) = var["valueFrom"]["resourceFieldRef"].as_object() {
            resource_value(container, resource)
        } else {
            panic!("env {name}: {var} is not supported here");
        };
        env.push((name, value));
    }
    env
}

/// A resource as the downward API gives it: the limit (the node's capacity when there is
/// none: 2 CPUs, 4 GiB) divided by the divisor, rounded up.
fn resource_value(container: &Value, resource: &serde_json::Map<String, Value>) -> String {
    let name = resource.get("resource").map(text).unwrap_or_default();
    let (kind, which) = name.split_once('.').unwrap_or(("limits", "cpu"));
    let quantity = container["resources"][kind][which].as_str().map(str::to_owned);
    let divisor = resource.get("divisor").map(text).unwrap_or_else(|| "1".into());
    let amount = match which {
        "cpu" => millis(quantity.as_deref().unwrap_or("2")),
        _ => bytes(quantity.as_deref().unwrap_or("4Gi")),
    };
    let per = if which == "cpu" { millis(&divisor) } else { bytes(&divisor) }.max(1);
    amount.div_ceil(per).to_string()
}

fn millis(quantity: &str) -> u64 {
    match quantity.strip_suffix('m') {
        Some(m) => m.parse().unwrap(),
        None => quantity.parse::<u64>().unwrap() * 1000,
    }
}

fn bytes(quantity: &str) -> u64 {
    for (suffix, scale) in
        [("Ki", 1u64 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("k", 1000), ("M", 1_000_000), ("G", 1_000_000_000)]
    {
        if let Some(n) = quantity.strip_suffix(suffix) {
            return n.parse::<u64>().unwrap() * scale;
        }
    }
    quantity.parse().unwrap()
}

/// `$(VAR)` replaced by the value of an earlier variable, as the kubelet expands them.
fn expand(text: &str, env: &[(String, String)]) -> String {
    let mut out = text.to_owned();
    for (name, value) in env {
        out = out.replace(&format!("$({name})"), value);
    }
    out
}

fn items(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

fn write_file(path: &Path, contents: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
    chmod(path, 0o644);
}

/// The test application: an HTTP/1.1 server on a pod's port that answers every request with
/// `{"pod": <name>, "headers": {...}}`, one thread per connection. Stopping it closes the
/// listener; requests already read are still answered, as a graceful application does.
pub struct EchoServer {
    stop: Arc<AtomicBool>,
}

impl EchoServer {
    fn start(netns: &str, port: u16, pod: &str) -> EchoServer {
        let listener = in_netns(netns, move || TcpListener::bind(("0.0.0.0", port)).unwrap());
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (stopped, pod) = (stop.clone(), pod.to_owned());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let pod = pod.clone();
                        std::thread::spawn(move || answer(stream, &pod));
                    }
                    // Non-blocking so that a stop is seen: the accept loop naps between polls.
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        EchoServer { stop }
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn answer(mut stream: TcpStream, pod: &str) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&head);
    let headers: serde_json::Map<String, Value> = text
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), Value::String(v.trim().to_owned())))
        .collect();
    let body = json!({ "pod": pod, "headers": headers }).to_string();
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes());
}
