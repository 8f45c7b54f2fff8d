//! `outrider lab-backend`: the scenario lab's backends, one loopback port each with the
//! behaviour its scenario file gives it, and optionally the file-backed control plane that
//! Envoy and Outrider are both pointed at, so the two proxies see the same xDS resources,
//! the same backends and the same clock. On SIGTERM or SIGINT it writes what each backend
//! served, per second, to the report file (JSON), for the lab's share tables and charts.

pub mod scenario;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use super::AppError;
use crate::core::shutdown;
use crate::testkit::backends::{Epoch, Observed, Tally, serve_observed};
use crate::xds::server::XdsServer;
use crate::xds::server::files::FileSource;

/// `outrider lab-backend` options.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// The scenario file; its `backends` section is read.
    pub scenario: PathBuf,
    /// Serve ADS here, from `resources` (watched: rewrite the file to push a change).
    pub xds: Option<(SocketAddr, PathBuf)>,
    /// Where to write the per-second counts on exit.
    pub report: Option<PathBuf>,
}

/// Runs the lab's backends until SIGINT or SIGTERM.
pub fn run(options: LabOptions) -> Result<(), AppError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("outrider-lab")
        .build()
        .map_err(AppError::Runtime)?;
    runtime.block_on(lab(options))
}

async fn lab(options: LabOptions) -> Result<(), AppError> {
    let path = options.scenario.display().to_string();
    let text = std::fs::read_to_string(&options.scenario).map_err(|e| AppError::Lab(format!("{path}: {e}")))?;
    let backends = scenario::backends(&text).map_err(|e| AppError::Lab(format!("{path}: {e}")))?;
    let epoch = Arc::new(Epoch::default());
    let (stop, signal) = shutdown::channel();
    let mut served = Vec::new();
    for (port, behaviour) in backends {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|e| AppError::Lab(format!("backend {} on 127.0.0.1:{port}: {e}", behaviour.name)))?;
        let tally = Arc::new(Tally::default());
        served.push((behaviour.name.clone(), port, tally.clone()));
        let observed = Observed { epoch: epoch.clone(), tally };
        tokio::spawn(serve_observed(listener, behaviour, observed, signal.clone()));
    }
    let _control_plane = match options.xds {
        Some((address, resources)) => {
            FileSource::new(resources.clone(), XdsServer::new())
                .reload()
                .map_err(|e| AppError::Lab(format!("{}: {e}", resources.display())))?;
            let server = XdsServer::new();
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(|e| AppError::Lab(format!("control plane on {address}: {e}")))?;
            let serving = server.serve(listener);
            Some((serving, FileSource::watch(resources, server)))
        }
        None => None,
    };
    println!("ready: {} backends", served.len());
    super::terminate().await;
    stop.trigger();
    if let Some(report) = options.report {
        let backends: Vec<_> = served
            .iter()
            .map(|(name, port, tally)| {
                let seconds = tally.seconds();
                serde_json::json!({
                    "name": name,
                    "port": port,
                    "ok": seconds.iter().map(|s| s[0]).collect::<Vec<_>>(),
                    "failed": seconds.iter().map(|s| s[1]).collect::<Vec<_>>(),
                })
            })
            .collect();
        let text = serde_json::json!({ "backends": backends }).to_string();
        std::fs::write(&report, text).map_err(|e| AppError::Lab(format!("{}: {e}", report.display())))?;
    }
    Ok(())
}
