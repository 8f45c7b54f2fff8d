//! `outrider demo`: an embedded control plane serving `deploy/demo/resources.yaml`, and
//! Outrider configured by it over ADS — one command, ready to curl.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::{AppError, start, terminate};
use crate::config::bootstrap::Bootstrap;
use crate::testkit::backends::ADDED_LATENCY_PATH;
use crate::xds::server::XdsServer;
use crate::xds::server::files::FileSource;

/// The demo's resources, used when `deploy/demo/resources.yaml` is not at hand.
const RESOURCES: &str = include_str!("../../deploy/demo/resources.yaml");
/// The bootstrap the demo's sidecar runs with (its control plane address is replaced).
const BOOTSTRAP: &str = include_str!("../../deploy/bootstrap.yaml");

/// `outrider demo` options.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Where the embedded control plane listens.
    pub xds_address: SocketAddr,
    /// Where Outrider's admin server listens.
    pub admin_address: SocketAddr,
    /// The resources file to serve and watch; the built-in copy when `None` and
    /// `deploy/demo/resources.yaml` does not exist.
    pub resources: Option<PathBuf>,
    /// Replaces the demo cluster's balancing policy (`adaptive`, `round_robin`,
    /// `least_request`, `random`, `ring_hash`, `maglev`, `cswrr`, `peak_ewma`).
    pub policy: Option<String>,
    /// Whether to start the three demo backends on 127.0.0.1:18081–18083.
    pub backends: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            xds_address: SocketAddr::from(([127, 0, 0, 1], 18000)),
            admin_address: SocketAddr::from(([127, 0, 0, 1], 15000)),
            resources: None,
            policy: None,
            backends: true,
        }
    }
}

/// Runs the demo until SIGINT, SIGTERM or `POST /quitquitquit`.
pub fn run(options: DemoOptions) -> Result<(), AppError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("outrider-control")
        .build()
        .map_err(AppError::Runtime)?;
    runtime.block_on(demo(options))
}

async fn demo(options: DemoOptions) -> Result<(), AppError> {
    let (mut resources, mut scratch) = resources_file(options.resources)?;
    if let Some(policy) = &options.policy {
        let (patched, dir) = with_policy(&resources, policy)?;
        resources = patched;
        scratch = Some(dir);
    }
    let _scratch = scratch;
    let (stop_backends, backends_signal) = crate::core::shutdown::channel();
    if options.backends {
        start_backends(backends_signal).await?;
    }
    let server = XdsServer::new();
    let listener = tokio::net::TcpListener::bind(options.xds_address)
        .await
        .map_err(|e| AppError::Demo(format!("control plane on {}: {e}", options.xds_address)))?;
    let xds_address = listener.local_addr().map_err(|e| AppError::Demo(e.to_string()))?;
    let _serving = server.serve(listener);
    let watcher = FileSource::watch(resources.clone(), server);

    let text = BOOTSTRAP
        .replace("port_value: 18000", &format!("port_value: {}", xds_address.port()))
        .replace("port_value: 15000", &format!("port_value: {}", options.admin_address.port()));
    let bootstrap = Bootstrap::parse(&text)?;
    let running = start(bootstrap).await?;
    println!("control plane: {xds_address} serving {} (edit it: changes are pushed)", resources.display());
    println!("admin:         http://{}/", running.admin_address);
    println!("try:           curl -s http://127.0.0.1:10000/            # through the sidecar, to a demo backend");
    println!("               for i in $(seq 20); do curl -s http://127.0.0.1:10000/; done | sort | uniq -c");
    println!("               curl -s http://{}/config_dump", running.admin_address);
    println!("               curl -s http://{}/clusters", running.admin_address);
    println!("balancing:     http://{}/balancing   (live; slow a backend down and watch:", running.admin_address);
    println!("               curl -X POST 'http://127.0.0.1:18081{ADDED_LATENCY_PATH}?ms=200')");
    let mut changes = running.store.subscribe();
    while !running.store.load().ready {
        if changes.changed().await.is_err() {
            break;
        }
    }
    running.listeners_ready().await;
    println!("ready:         the first complete configuration is applied");
    tokio::select! {
        _ = terminate() => {}
        _ = running.quit.notified() => {}
    }
    watcher.abort();
    running.stop();
    drop(stop_backends);
    Ok(())
}

/// Three backends, so the policies have something to tell apart: a fast one, a slow one
/// (+50 ms) and one of small capacity that reports high utilization over ORCA.
async fn start_backends(shutdown: crate::core::shutdown::Signal) -> Result<(), AppError> {
    use crate::testkit::backends::{BackendBehaviour, OrcaMode, serve_backend};
    let fast = BackendBehaviour { orca: Some(OrcaMode::TextHeader), ..BackendBehaviour::new("fast") };
    let slow = BackendBehaviour {
        latency: std::time::Duration::from_millis(50),
        orca: Some(OrcaMode::TextHeader),
        ..BackendBehaviour::new("slow")
    };
    let busy = BackendBehaviour {
        latency: std::time::Duration::from_millis(5),
        capacity: 2,
        orca: Some(OrcaMode::BinHeader),
        ..BackendBehaviour::new("busy")
    };
    for (port, behaviour) in [(18081, fast), (18082, slow), (18083, busy)] {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|e| AppError::Demo(format!("demo backend on 127.0.0.1:{port}: {e}")))?;
        tokio::spawn(serve_backend(listener, behaviour, shutdown.clone()));
    }
    Ok(())
}

/// A copy of the resources with the demo cluster's policy replaced, in a scratch dir.
fn with_policy(resources: &std::path::Path, policy: &str) -> Result<(PathBuf, tempfile::TempDir), AppError> {
    let text =
        std::fs::read_to_string(resources).map_err(|e| AppError::Demo(format!("{}: {e}", resources.display())))?;
    let mut document = crate::config::bootstrap::parse_document(&text).map_err(AppError::Demo)?;
    let (lb_policy, typed) = match policy {
        "round_robin" => ("ROUND_ROBIN", None),
        "least_request" => ("LEAST_REQUEST", None),
        "random" => ("RANDOM", None),
        "ring_hash" => ("RING_HASH", None),
        "maglev" => ("MAGLEV", None),
        "cswrr" => (
            "ROUND_ROBIN",
            Some((
                "envoy.load_balancing_policies.client_side_weighted_round_robin",
                serde_json::json!({ "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin", "blackout_period": "2s" }),
            )),
        ),
        "peak_ewma" => (
            "ROUND_ROBIN",
            Some((
                crate::config::cluster::lb_policy::PEAK_EWMA_POLICY_NAME,
                serde_json::json!({ "@type": "type.googleapis.com/google.protobuf.Struct", "value": {} }),
            )),
        ),
        "adaptive" => (
            "ROUND_ROBIN",
            Some((
                crate::config::cluster::lb_policy::ADAPTIVE_POLICY_NAME,
                serde_json::json!({ "@type": "type.googleapis.com/google.protobuf.Struct", "value": {} }),
            )),
        ),
        other => {
            return Err(AppError::Demo(format!(
                "unknown policy {other:?}: adaptive, round_robin, least_request, random, ring_hash, maglev, cswrr or peak_ewma"
            )));
        }
    };
    let items = document["resources"].as_array_mut().ok_or_else(|| AppError::Demo("no resources list".into()))?;
    for item in items.iter_mut().filter(|i| i["@type"].as_str().is_some_and(|t| t.ends_with(".Cluster"))) {
        let Some(cluster) = item.as_object_mut() else { continue };
        cluster.remove("load_balancing_policy");
        cluster.insert("lb_policy".into(), lb_policy.into());
        if let Some((name, config)) = &typed {
            cluster.remove("lb_policy");
            cluster.insert(
                "load_balancing_policy".into(),
                serde_json::json!({ "policies": [{ "typed_extension_config": { "name": name, "typed_config": config } }] }),
            );
        }
    }
    let dir = tempfile::tempdir().map_err(|e| AppError::Demo(e.to_string()))?;
    let path = dir.path().join("resources.json");
    std::fs::write(&path, document.to_string()).map_err(|e| AppError::Demo(e.to_string()))?;
    Ok((path, dir))
}

/// The file to serve: the one asked for, the repository's, or the built-in copy written
/// to a scratch directory (kept alive by the returned guard).
fn resources_file(asked: Option<PathBuf>) -> Result<(PathBuf, Option<tempfile::TempDir>), AppError> {
    if let Some(path) = asked {
        return Ok((path, None));
    }
    let local = PathBuf::from("deploy/demo/resources.yaml");
    if local.exists() {
        return Ok((local, None));
    }
    let scratch = tempfile::tempdir().map_err(|e| AppError::Demo(e.to_string()))?;
    let path = scratch.path().join("resources.yaml");
    std::fs::write(&path, RESOURCES).map_err(|e| AppError::Demo(e.to_string()))?;
    Ok((path, Some(scratch)))
}
