//! The composition root: reads the bootstrap, wires the store, the ADS client and the admin
//! server onto the control runtime, and owns start-up and shutdown.

pub mod backends;
pub mod balancing;
pub mod demo;
pub mod lab;
pub mod oob;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::admin::{self, AdminState};
use crate::config::Address;
use crate::config::bootstrap::{Bootstrap, BootstrapError};
use crate::core::shutdown::{self, Trigger};
use crate::store::{ConfigState, Store, WarmingTimeouts};
use crate::xds::client::{AdsClient, AdsClientConfig};

/// `outrider run` options.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub config: PathBuf,
    /// Worker threads; `None` means every CPU this process may use (cgroup quota included).
    pub concurrency: Option<usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("admin address {0}: {1}")]
    Admin(String, std::io::Error),
    #[error("cannot start the control runtime: {0}")]
    Runtime(std::io::Error),
    #[error("demo: {0}")]
    Demo(String),
    #[error("lab: {0}")]
    Lab(String),
}

/// A started Outrider: what tests and the demo need to reach it.
#[derive(Debug)]
pub struct Running {
    pub store: Arc<Store>,
    /// Every cluster's balancer, kept current with the store.
    pub balancers: Arc<crate::lb::Balancers>,
    pub admin_address: SocketAddr,
    /// Notified by `POST /quitquitquit`.
    pub quit: Arc<tokio::sync::Notify>,
    shutdown: Trigger,
    workers: Option<crate::proxy::Workers>,
}

impl Running {
    /// Waits until every worker listens as the current snapshot says.
    pub async fn listeners_ready(&self) {
        let Some(workers) = &self.workers else { return };
        let generation = self.store.load().generation;
        let mut synced = workers.synced();
        let _ = synced.wait_for(|g| g.iter().all(|g| *g >= generation)).await;
    }

    /// Stops the workers, the ADS client and the admin server, and waits for the workers.
    pub fn stop(mut self) {
        self.shutdown.trigger();
        if let Some(workers) = self.workers.take() {
            workers.join();
        }
    }
}

/// Starts the control-plane side on the current tokio runtime (store, ADS client, admin,
/// balancers) and `concurrency` worker threads serving the listeners.
pub async fn start(bootstrap: Bootstrap) -> Result<Running, AppError> {
    start_with(bootstrap, default_concurrency()).await
}

/// [`start`] with an explicit number of workers.
pub async fn start_with(bootstrap: Bootstrap, concurrency: usize) -> Result<Running, AppError> {
    for ignored in &bootstrap.ignored {
        tracing::warn!(path = %ignored.path, "bootstrap field ignored: {}", ignored.what);
    }
    let ads = AdsClientConfig::from_bootstrap(&bootstrap)?;
    let awaited = ads.as_ref().map(AdsClientConfig::awaited).unwrap_or_default();
    let timeouts = ads.as_ref().map(AdsClientConfig::warming_timeouts).unwrap_or(WarmingTimeouts::default());
    let mut state = ConfigState::new(
        bootstrap.static_listeners.clone(),
        bootstrap.static_clusters.clone(),
        bootstrap.static_secrets.clone(),
        awaited,
        timeouts,
    );
    let store = Arc::new(Store::new(state.snapshot()));
    let (trigger, signal) = shutdown::channel();

    let admin_listener = match &bootstrap.admin_address {
        Address::Socket(addr) => {
            tokio::net::TcpListener::bind(addr).await.map_err(|e| AppError::Admin(addr.to_string(), e))?
        }
        other => {
            return Err(AppError::Admin(
                other.to_string(),
                std::io::Error::new(std::io::ErrorKind::Unsupported, "the admin server listens on TCP only"),
            ));
        }
    };
    let admin_address =
        admin_listener.local_addr().map_err(|e| AppError::Admin(bootstrap.admin_address.to_string(), e))?;
    let quit = Arc::new(tokio::sync::Notify::new());
    let admin_state =
        AdminState { store: store.clone(), bootstrap: Arc::new(bootstrap.document.clone()), quit: quit.clone() };
    tokio::spawn(admin::serve(admin_listener, admin_state, signal.clone()));
    tracing::info!(%admin_address, "admin server listening");

    let balancers = Arc::new(crate::lb::Balancers::default());
    tokio::spawn(balancing::keep_balancers(store.clone(), balancers.clone(), signal.clone()));
    let workers = crate::proxy::Workers::start(concurrency, store.clone(), balancers.clone(), signal.clone())
        .map_err(AppError::Runtime)?;

    match ads {
        Some(config) => {
            tokio::spawn(AdsClient::new(config, state, store.clone(), signal.clone()).run(signal));
        }
        None => store.publish(state.snapshot()),
    }
    Ok(Running { store, balancers, admin_address, quit, shutdown: trigger, workers: Some(workers) })
}

/// `outrider run`: blocks until SIGINT, SIGTERM or `POST /quitquitquit`.
pub fn run(options: RunOptions) -> Result<(), AppError> {
    let bootstrap = Bootstrap::load(&options.config)?;
    let concurrency = options.concurrency.unwrap_or_else(default_concurrency);
    tracing::info!(config = %options.config.display(), concurrency, "starting");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("outrider-control")
        .build()
        .map_err(AppError::Runtime)?;
    runtime.block_on(async {
        let running = start_with(bootstrap, concurrency).await?;
        tokio::select! {
            _ = terminate() => tracing::info!("signal received; shutting down"),
            _ = running.quit.notified() => tracing::info!("quitquitquit; shutting down"),
        }
        running.stop();
        Ok(())
    })
}

/// The CPUs this process may use; `available_parallelism` honours cgroup CPU quotas.
pub fn default_concurrency() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

pub(crate) async fn terminate() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
