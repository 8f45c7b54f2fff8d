//! What Istio's pilot-agent does for a sidecar, done inside Outrider so that a pod needs one
//! process: the workload certificate from istiod's CA (a CSR for the pod's SPIFFE identity,
//! authenticated with the pod's service-account token, renewed before expiry), served to
//! the proxy over the SDS socket Istio's bootstrap names, and the proxy's xDS relayed to
//! istiod's secure port from the xDS socket it names. The proxy itself is unchanged: it
//! reads the same two sockets it reads under pilot-agent.
//!
//! - [`settings`]: pilot-agent's environment (`CA_ADDR`, `SECRET_TTL`, …) read once.
//! - [`channel`]: the gRPC channel to istiod's 15012, TLS verified against the mesh root.
//! - [`ca_client`]: one `CreateCertificate` call: key, CSR, token, chain back.
//! - [`certificates`]: the renewal loop, publishing `default` and `ROOTCA` over SDS.
//! - [`xds_proxy`]: the ADS relay to istiod.
//! - [`dns`]: the DNS proxy (`ISTIO_META_DNS_CAPTURE`), fed by the relay.
//! - [`status`], [`probers`]: the status port (15020): readiness, the application's
//!   rewritten probes, merged metrics.

pub mod ca_client;
pub mod certificates;
pub mod channel;
pub mod dns;
pub mod probers;
pub mod settings;
pub mod status;
pub mod xds_proxy;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::UnixListener;

pub use ca_client::{CaClient, CaError, Issued};
pub use settings::AgentSettings;

use crate::core::shutdown::{self, Trigger};
use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryServiceServer;
use crate::xds::server::{Serving, XdsServer};

/// Requests and responses the agent's SDS server remembers, of each.
const AGENT_JOURNAL_LIMIT: usize = 256;

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("socket {0}: {1}")]
    Socket(PathBuf, std::io::Error),
    #[error(transparent)]
    Ca(#[from] CaError),
    #[error("channel to istiod: {0}")]
    Channel(#[from] channel::ChannelError),
}

/// The running agent: its two sockets served and the certificate kept fresh until dropped
/// or [`Agent::stop`]ped.
pub struct Agent {
    settings: Arc<AgentSettings>,
    signal: shutdown::Signal,
    stop: Trigger,
    sds: Option<Serving>,
    /// The SDS server's resources (the published secrets), for tests and the admin view.
    pub secrets: XdsServer,
    /// The DNS proxy, when DNS capture is on.
    pub dns: Option<Arc<dns::Dns>>,
}

impl Agent {
    /// Binds `sds_socket` and `xds_socket` (replacing stale socket files, creating their
    /// directories) and starts the certificate's renewal loop and the xDS relay. Must run
    /// inside a Tokio runtime.
    pub fn start(settings: AgentSettings, sds_socket: &Path, xds_socket: &Path) -> Result<Agent, AgentError> {
        let settings = Arc::new(settings);
        let sds_listener = bind(sds_socket)?;
        let xds_listener = bind(xds_socket)?;
        let (stop, signal) = shutdown::channel();

        // The proxy's SDS streams: two secrets, re-requested at each reconnection. The
        // journal is for tests; a pod's lifetime of it must stay small.
        let secrets = XdsServer::with_journal_limit(AGENT_JOURNAL_LIMIT);
        let sds = secrets.serve_unix(sds_listener);
        let client = CaClient::new(settings.clone())?;
        tokio::spawn(certificates::rotate(client, settings.clone(), secrets.clone(), signal.clone()));

        let channel =
            channel::secure_channel(&settings.discovery_address, &settings.discovery_server_name, &settings.root_cert)?;
        let dns = match &settings.dns {
            None => None,
            Some(dns) => Some(
                dns::Dns::start(dns, signal.clone())
                    .map_err(|e| AgentError::Socket(PathBuf::from(dns.address.to_string()), e))?,
            ),
        };
        let relay =
            AggregatedDiscoveryServiceServer::new(xds_proxy::XdsProxy::new(settings.clone(), channel, dns.clone()))
                .max_encoding_message_size(usize::MAX);
        let stopped = signal.clone().triggered();
        tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(relay)
                .serve_with_incoming_shutdown(tokio_stream::wrappers::UnixListenerStream::new(xds_listener), stopped)
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "the xDS relay stopped");
            }
        });
        Ok(Agent { settings, signal, stop, sds: Some(sds), secrets, dns })
    }

    /// Serves the status port for the proxy whose admin server is at `admin`; returns the
    /// address bound.
    pub async fn serve_status(&self, admin: std::net::SocketAddr) -> Result<std::net::SocketAddr, AgentError> {
        let address = self.settings.status_address;
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|e| AgentError::Socket(PathBuf::from(address.to_string()), e))?;
        let bound = listener.local_addr().map_err(|e| AgentError::Socket(PathBuf::from(address.to_string()), e))?;
        let config = status::StatusConfig {
            admin,
            probes: self.settings.probes.clone(),
            app_metrics: self.settings.app_metrics.clone(),
            limits: crate::core::control_server::ServerLimits::default(),
        };
        tokio::spawn(status::serve(listener, config, self.signal.clone()));
        Ok(bound)
    }

    /// Stops renewing and serving.
    pub async fn stop(mut self) {
        self.stop.trigger();
        if let Some(sds) = self.sds.take() {
            let _ = sds.shutdown().await;
        }
    }
}

fn bind(path: &Path) -> Result<UnixListener, AgentError> {
    let failed = |e| AgentError::Socket(path.to_owned(), e);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed(e)),
    }
    UnixListener::bind(path).map_err(failed)
}
