//! `outrider demo`: an embedded control plane serving `deploy/demo/resources.yaml`, and
//! Outrider configured by it over ADS — one command, ready to curl.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::{AppError, start, terminate};
use crate::config::bootstrap::Bootstrap;
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
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            xds_address: SocketAddr::from(([127, 0, 0, 1], 18000)),
            admin_address: SocketAddr::from(([127, 0, 0, 1], 15000)),
            resources: None,
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
    let (resources, _scratch) = resources_file(options.resources)?;
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
    println!("try:           curl -s http://{}/config_dump", running.admin_address);
    let mut changes = running.store.subscribe();
    while !running.store.load().ready {
        if changes.changed().await.is_err() {
            break;
        }
    }
    println!("ready:         the first complete configuration is applied");
    tokio::select! {
        _ = terminate() => {}
        _ = running.quit.notified() => {}
    }
    watcher.abort();
    running.stop();
    Ok(())
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
