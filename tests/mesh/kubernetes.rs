//! Outrider in the mesh as Istio users run it: a real Kubernetes API server (with etcd and
//! the controller manager), istiod in its Kubernetes mode, Istio's own injection webhook with
//! Outrider's template (`deploy/istio/injection-template.yaml`), and pods run in network
//! namespaces by the test's kubelet (`tests/netns/kubelet.rs`). Everything is applied with
//! `kubectl`: ordinary Deployments, Services and Istio resources. The workload certificates
//! come from istiod's CA, which checks each pod's projected token with the API server's
//! TokenReview.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::common::skip::skipped;
use crate::netns::kubelet::WrongToken;
use crate::netns::kubernetes::{Cluster, NODE_NAME, OUTRIDER_IMAGE, Sidecars, wait_for};

/// Two workloads that call each other by Service name: `sleep` and `echo` (two versions),
/// each with its own service account, in the injected `default` namespace, and STRICT mutual
/// TLS for the whole mesh. Pod templates name the node: the cluster has no scheduler.
fn workloads(echo_v1_replicas: u32) -> String {
    let deployment = |name: &str, app: &str, version: &str, account: &str, port: u16, replicas: u32| {
        format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{ name: {name}, namespace: default }}
spec:
  replicas: {replicas}
  selector: {{ matchLabels: {{ app: {app}, version: {version} }} }}
  template:
    metadata: {{ labels: {{ app: {app}, version: {version} }} }}
    spec:
      nodeName: {NODE_NAME}
      serviceAccountName: {account}
      terminationGracePeriodSeconds: 30
      containers:
      - name: {app}
        image: example.com/apps/{app}:1
        ports: [{{ containerPort: {port}, name: http, protocol: TCP }}]
---
"#
        )
    };
    let service = |name: &str, port: u16| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{ name: {name}, namespace: default }}\nspec:\n  \
             selector: {{ app: {name} }}\n  ports: [{{ name: http, port: 80, targetPort: {port} }}]\n---\n"
        )
    };
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{ name: default, labels: {{ istio-injection: enabled }} }}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{ name: sleep, namespace: default }}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{ name: echo, namespace: default }}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {{ name: default, namespace: istio-system }}
spec: {{ mtls: {{ mode: STRICT }} }}
---
{}{}{}{}{}"#,
        service("echo", 5678),
        service("sleep", 8080),
        deployment("sleep", "sleep", "v1", "sleep", 8080, 1),
        deployment("echo-v1", "echo", "v1", "echo", 5678, echo_v1_replicas),
        deployment("echo-v2", "echo", "v2", "echo", 5678, 1),
    )
}

/// What the test application answered: the pod that served, and the headers it received.
#[derive(Debug)]
struct Answer {
    status: u16,
    pod: String,
    headers: Value,
}

/// `GET /` from inside pod `from` to `service`'s cluster IP (port 80), as its application
/// would call `http://<service>`: captured by the pod's sidecar.
fn call(cluster: &Cluster, from: &(String, String), service: &str) -> Result<Answer, String> {
    let ip = cluster.cluster_ip("default", service);
    let host: &'static str = Box::leak(format!("{service}.default.svc.cluster.local").into_boxed_str());
    let reply = crate::netns::get(&from.0, &format!("{ip}:80"), host).map_err(|e| e.to_string())?;
    let body: Value = serde_json::from_str(&reply.body).unwrap_or(Value::Null);
    Ok(Answer {
        status: reply.status,
        pod: body["pod"].as_str().unwrap_or_default().to_owned(),
        headers: body["headers"].clone(),
    })
}

/// Calls until `holds` of an answer (bounded): configuration reaches the sidecars in its
/// own time.
fn call_until(
    cluster: &Cluster,
    from: &(String, String),
    service: &str,
    what: &str,
    holds: impl Fn(&Answer) -> bool,
) -> Answer {
    let mut last = None;
    let found = wait_for(Duration::from_secs(60), || match call(cluster, from, service) {
        Ok(answer) if holds(&answer) => Some(answer),
        other => {
            last = Some(other);
            None
        }
    });
    found.unwrap_or_else(|| panic!("{what}: last answer {last:?}\n{}", cluster.kubelet.describe()))
}

/// The running pod of `app` (the first), as (network namespace, address).
fn pod_of(cluster: &Cluster, app: &str) -> (String, String) {
    let (name, _) = cluster.pods("default", app).into_iter().find(|(_, ready)| *ready).unwrap();
    cluster.kubelet.pod("default", &name).unwrap()
}

fn all_ready(cluster: &Cluster, app: &str, count: usize) -> bool {
    let pods = cluster.pods("default", app);
    pods.len() == count && pods.iter().all(|(_, ready)| *ready)
}

/// The differences between Istio's injection with Outrider's template and `outrider inject`
/// for the same workload, as `docs/istio.md` lists them: the same command lines, and these
/// names of environment variables and volumes only one of them has.
fn compare_with_outrider_inject(injected: &Value) {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("sleep.yaml");
    let sleep = workloads(1)
        .split("---\n")
        .find(|d| d.contains("name: sleep, namespace: default }\nspec:\n  replicas"))
        .unwrap()
        .to_owned();
    std::fs::write(&manifest, sleep).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_outrider"))
        .args(["inject", "--image", OUTRIDER_IMAGE, "-f"])
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let ours: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&output.stdout)).unwrap();
    let ours = &ours["spec"]["template"]["spec"];
    let containers = |spec: &Value| -> Vec<Value> {
        ["initContainers", "containers"].iter().flat_map(|k| spec[k].as_array().cloned().unwrap_or_default()).collect()
    };
    let find = |spec: &Value, names: &[&str]| {
        containers(spec).into_iter().find(|c| names.iter().any(|n| c["name"] == *n)).unwrap()
    };
    let (istio_proxy, our_proxy) = (find(&injected["spec"], &["istio-proxy"]), find(ours, &["outrider"]));
    let (istio_init, our_init) = (find(&injected["spec"], &["istio-init"]), find(ours, &["outrider-init"]));
    assert_eq!(istio_proxy["args"], our_proxy["args"]);
    assert_eq!(istio_init["args"], our_init["args"]);
    let names = |list: &Value| -> BTreeSet<String> {
        list.as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|v| v["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let difference = |a: &BTreeSet<String>, b: &BTreeSet<String>| a.difference(b).cloned().collect::<Vec<_>>();
    let (istio_env, our_env) = (names(&istio_proxy["env"]), names(&our_proxy["env"]));
    let (istio_volumes, our_volumes) = (names(&injected["spec"]["volumes"]), names(&ours["volumes"]));
    assert_eq!(
        difference(&istio_env, &our_env),
        ["CA_ADDR", "GOMAXPROCS", "GOMEMLIMIT", "ISTIO_CPU_LIMIT", "PILOT_CERT_PROVIDER", "TRUST_DOMAIN"]
    );
    assert_eq!(difference(&our_env, &istio_env), ["ISTIO_METAJSON_LABELS"]);
    // The API server's ServiceAccount admission adds `kube-api-access-*` to every pod.
    let istio_volumes: BTreeSet<String> =
        istio_volumes.into_iter().filter(|v| !v.starts_with("kube-api-access-")).collect();
    assert_eq!(difference(&istio_volumes, &our_volumes), ["istio-ca-crl"]);
    assert_eq!(difference(&our_volumes, &istio_volumes), Vec::<String>::new());
}

fn start(test: &str) -> Option<Cluster> {
    start_with(test, Sidecars::Containers)
}

fn start_with(test: &str, sidecars: Sidecars) -> Option<Cluster> {
    if let Some((tool, why)) = Cluster::unavailable() {
        skipped(tool, test, &why);
        return None;
    }
    Some(Cluster::start_with(sidecars))
}

#[test]
fn istio_injects_outrider_and_pods_call_each_other_by_service_name_with_istiod_identities() {
    // Native sidecars here; the other tests run Istio's default, a container beside the app.
    let test = "istio_injects_outrider_and_pods_call_each_other_by_service_name";
    let Some(mut cluster) = start_with(test, Sidecars::Native) else {
        return;
    };
    cluster.apply(&workloads(1));
    cluster.sync_until("sleep and two echo pods ready", |c| all_ready(c, "sleep", 1) && all_ready(c, "echo", 2));

    // Istio's webhook injected Outrider: Istio's containers, running Outrider.
    let (sleep_name, _) = cluster.pods("default", "sleep").remove(0);
    let pod = cluster.get(&["pod", &sleep_name, "-n", "default"]);
    let init: Vec<&Value> = pod["spec"]["initContainers"].as_array().unwrap().iter().collect();
    let containers: Vec<&Value> = pod["spec"]["containers"].as_array().unwrap().iter().collect();
    // A native sidecar, as istiod's ENABLE_NATIVE_SIDECARS asks.
    let proxy = init.iter().find(|c| c["name"] == "istio-proxy").expect("istio-proxy as a native sidecar");
    assert_eq!(proxy["restartPolicy"], "Always");
    assert!(containers.iter().all(|c| c["name"] != "istio-proxy"));
    assert_eq!(proxy["image"], OUTRIDER_IMAGE);
    assert_eq!(proxy["args"][0], "sidecar");
    assert!(proxy["lifecycle"].is_null(), "pilot-agent's preStop is dropped: {}", proxy["lifecycle"]);
    let capture = init.iter().find(|c| c["name"] == "istio-init").unwrap();
    assert_eq!(capture["args"][0], "capture");
    compare_with_outrider_inject(&pod);

    // sleep → echo over STRICT mutual TLS: the echo pod's sidecar names the caller by the
    // identity istiod's CA put in its certificate (after TokenReview of its projected token).
    let sleep = pod_of(&cluster, "sleep");
    let answer = call_until(&cluster, &sleep, "echo", "sleep calls echo", |a| a.status == 200);
    assert!(answer.pod.starts_with("echo-v"), "{answer:?}");
    let xfcc = answer.headers["x-forwarded-client-cert"].as_str().unwrap_or_default().to_owned();
    assert!(xfcc.contains("URI=spiffe://cluster.local/ns/default/sa/sleep"), "{xfcc}");
    assert!(xfcc.contains("By=spiffe://cluster.local/ns/default/sa/echo"), "{xfcc}");
    // … and echo → sleep.
    let echo = pod_of(&cluster, "echo");
    let answer = call_until(&cluster, &echo, "sleep", "echo calls sleep", |a| a.status == 200);
    assert!(answer.pod.starts_with("sleep-"), "{answer:?}");
    let xfcc = answer.headers["x-forwarded-client-cert"].as_str().unwrap_or_default().to_owned();
    assert!(xfcc.contains("URI=spiffe://cluster.local/ns/default/sa/echo"), "{xfcc}");

    // A VirtualService split: all of echo's traffic to v2, then half and half.
    let split = |v1: u32, v2: u32| {
        format!(
            r#"apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{ name: echo, namespace: default }}
spec:
  host: echo.default.svc.cluster.local
  subsets:
  - {{ name: v1, labels: {{ version: v1 }} }}
  - {{ name: v2, labels: {{ version: v2 }} }}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{ name: echo, namespace: default }}
spec:
  hosts: [echo.default.svc.cluster.local]
  http:
  - route:
    - {{ destination: {{ host: echo.default.svc.cluster.local, subset: v1 }}, weight: {v1} }}
    - {{ destination: {{ host: echo.default.svc.cluster.local, subset: v2 }}, weight: {v2} }}
"#
        )
    };
    cluster.apply(&split(0, 100));
    // Both versions answered before: the split holds once 20 answers in a row are v2's.
    let mut served = Vec::new();
    let only_v2 = wait_for(Duration::from_secs(60), || {
        served = (0..20).map(|_| call(&cluster, &sleep, "echo").map(|a| a.pod)).collect();
        served.iter().all(|p| p.as_ref().is_ok_and(|p| p.starts_with("echo-v2"))).then_some(())
    });
    assert!(only_v2.is_some(), "the split never sent everything to v2: {served:?}");
    cluster.apply(&split(50, 50));
    let mut versions = BTreeSet::new();
    let both = wait_for(Duration::from_secs(60), || {
        versions.insert(call(&cluster, &sleep, "echo").ok()?.pod.split('-').nth(1)?.to_owned());
        (versions.len() == 2).then_some(())
    });
    assert!(both.is_some(), "a 50/50 split reached only {versions:?}");

    // An AuthorizationPolicy by service account, applied with the API: only another
    // account may call echo, so sleep is refused; then sleep's account, so it is served.
    let policy = |account: &str| {
        format!(
            r#"apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {{ name: echo, namespace: default }}
spec:
  selector: {{ matchLabels: {{ app: echo }} }}
  action: ALLOW
  rules:
  - from: [{{ source: {{ principals: ["cluster.local/ns/default/sa/{account}"] }} }}]
"#
        )
    };
    cluster.apply(&policy("other"));
    call_until(&cluster, &sleep, "echo", "the policy refusing sleep", |a| a.status == 403);
    cluster.apply(&policy("sleep"));
    call_until(&cluster, &sleep, "echo", "the policy admitting sleep", |a| a.status == 200);
}

#[test]
fn scaling_a_deployment_up_and_down_and_deleting_a_pod_lose_no_request() {
    let Some(mut cluster) = start("scaling_a_deployment_up_and_down_and_deleting_a_pod_lose_no_request") else {
        return;
    };
    cluster.apply(&workloads(1));
    cluster.sync_until("sleep and two echo pods ready", |c| all_ready(c, "sleep", 1) && all_ready(c, "echo", 2));
    let sleep = pod_of(&cluster, "sleep");
    call_until(&cluster, &sleep, "echo", "sleep calls echo", |a| a.status == 200);

    // Traffic from sleep to echo, one request at a time, for the whole test.
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let served = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let ip = cluster.cluster_ip("default", "echo");
    let traffic = {
        let (stop, sent, failed, failures, served, netns) =
            (stop.clone(), sent.clone(), failed.clone(), failures.clone(), served.clone(), sleep.0.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                sent.fetch_add(1, Ordering::Relaxed);
                match crate::netns::get(&netns, &format!("{ip}:80"), "echo.default.svc.cluster.local") {
                    Ok(reply) if reply.status == 200 => {
                        let body: Value = serde_json::from_str(&reply.body).unwrap_or(Value::Null);
                        served.lock().unwrap().insert(body["pod"].as_str().unwrap_or_default().to_owned());
                    }
                    other => {
                        let now =
                            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                        eprintln!("client {}.{:03}: failed", now.as_secs() % 86_400, now.subsec_millis());
                        failed.fetch_add(1, Ordering::Relaxed);
                        failures.lock().unwrap().push(format!("{other:?}"));
                    }
                }
            }
        })
    };
    // Traffic reaches every one of `pods` (the sidecar's endpoints follow the EndpointSlices).
    let reaches = |pods: Vec<(String, bool)>| {
        let reached = wait_for(Duration::from_secs(60), || {
            let served = served.lock().unwrap();
            pods.iter().all(|(name, _)| served.contains(name)).then_some(())
        });
        assert!(reached.is_some(), "traffic never reached all of {pods:?}: {:?}", served.lock().unwrap());
    };

    // Up to three v1 pods (EndpointSlices grow), then down to one (two pods terminate).
    cluster.kubectl(&["scale", "deployment", "echo-v1", "-n", "default", "--replicas=3"]);
    cluster.sync_until("three echo-v1 pods ready", |c| all_ready(c, "echo", 4));
    reaches(cluster.pods("default", "echo"));
    cluster.kubectl(&["scale", "deployment", "echo-v1", "-n", "default", "--replicas=1"]);
    cluster.sync_until("one echo-v1 pod left", |c| all_ready(c, "echo", 2));
    // A pod deleted mid-traffic: its replacement starts, it is drained.
    let (victim, _) =
        cluster.pods("default", "echo").into_iter().find(|(name, _)| name.starts_with("echo-v2")).unwrap();
    cluster.kubectl(&["delete", "pod", &victim, "-n", "default", "--wait=false"]);
    cluster.sync_until("the deleted pod replaced", |c| {
        all_ready(c, "echo", 2) && c.pods("default", "echo").iter().all(|(name, _)| *name != victim)
    });
    reaches(cluster.pods("default", "echo"));
    stop.store(true, Ordering::Relaxed);
    traffic.join().unwrap();

    let (sent, failed) = (sent.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    let sleep_name = cluster.pods("default", "sleep").remove(0).0;
    let log = cluster.kubelet.log("default", &sleep_name, "istio-proxy");
    let failed_lines: Vec<&str> = log.lines().filter(|l| l.contains("\" 5") || l.contains("WARN")).collect();
    assert_eq!(
        failed,
        0,
        "{failed} of {sent} requests failed: {:?}\nthe client sidecar's log of them:\n{}",
        failures.lock().unwrap(),
        failed_lines.join("\n")
    );
}

#[test]
fn a_pod_with_a_token_not_its_own_or_cut_off_from_istiod_gets_no_certificate_and_serves_nothing() {
    let test = "a_pod_with_a_token_not_its_own_or_cut_off_from_istiod_gets_no_certificate_and_serves_nothing";
    let Some(mut cluster) = start(test) else {
        return;
    };
    // A token the API server never issued: signed by a key of the test's own, with the
    // claims of a real one.
    let now = crate::common::jwt::now();
    let forged = crate::common::jwt::RsaSigner::new("forged").rs256(&serde_json::json!({
        "iss": "https://kubernetes.default.svc.cluster.local",
        "sub": "system:serviceaccount:default:lonely",
        "aud": ["istio-ca"],
        "iat": now,
        "exp": now + 3600,
        "kubernetes.io": { "namespace": "default", "serviceaccount": { "name": "lonely", "uid": "0" } },
    }));
    cluster.kubelet.tokens =
        vec![("borrowed-".into(), WrongToken::Account("sleep".into())), ("forged-".into(), WrongToken::Forged(forged))];
    cluster.kubelet.istiod_unreachable = vec!["cut-off-".into()];
    let apps = ["borrowed", "forged", "cut-off"];
    let mut manifest = workloads(1);
    manifest.push_str("apiVersion: v1\nkind: ServiceAccount\nmetadata: { name: lonely, namespace: default }\n---\n");
    for app in apps {
        manifest.push_str(&format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{ name: {app}, namespace: default }}
spec:
  selector: {{ matchLabels: {{ app: {app} }} }}
  template:
    metadata: {{ labels: {{ app: {app} }} }}
    spec:
      nodeName: {NODE_NAME}
      serviceAccountName: lonely
      containers:
      - {{ name: {app}, image: example.com/apps/{app}:1, ports: [{{ containerPort: 8080 }}] }}
---
"#
        ));
    }
    cluster.apply(&manifest);
    cluster.sync_until("the pods started", |c| {
        all_ready(c, "sleep", 1)
            && apps.iter().all(|app| {
                let pods = c.pods("default", app);
                pods.len() == 1 && c.kubelet.pod("default", &pods[0].0).is_some()
            })
    });

    for app in apps {
        let (name, _) = cluster.pods("default", app).remove(0);
        let (_, ip) = cluster.kubelet.pod("default", &name).unwrap();
        // istiod's CA refuses the token (or cannot be reached): no certificate, said so.
        let refused = wait_for(Duration::from_secs(60), || {
            cluster.kubelet.log("default", &name, "istio-proxy").contains("no workload certificate").then_some(())
        });
        assert!(refused.is_some(), "{app}: {}", cluster.kubelet.log("default", &name, "istio-proxy"));
        // Not ready, and nothing served: the captured port has no listener behind it.
        cluster.sync_pods();
        assert_eq!(cluster.pods("default", app), [(name.clone(), false)], "{app}");
        let node = cluster.node.clone();
        let (ready, app_port) = crate::netns::in_netns(&node, move || {
            let ready = crate::netns::kubernetes::http_status(&format!("{ip}:15021"), "/healthz/ready");
            let target: std::net::SocketAddr = format!("{ip}:8080").parse().unwrap();
            (ready, std::net::TcpStream::connect_timeout(&target, Duration::from_secs(2)).is_ok())
        });
        assert_ne!(ready, Some(200), "{app}: ready without a certificate");
        assert!(!app_port, "{app}: its application is reachable");
    }
}
