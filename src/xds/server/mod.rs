//! A small xDS control plane: an ADS server (SotW and Delta), and SDS on its own service as
//! Istio's agent serves it, over the resources it is given: the in-process agent's SDS
//! socket (`crate::agent`), Outrider's tests and `outrider demo`.
//!
//! It follows Envoy's xDS protocol as go-control-plane does, so that Envoy itself and
//! Outrider's client can be pointed at it: responses carry a version and a fresh nonce, a
//! request echoing the last nonce is an ACK or (with `error_detail`) a NACK and gets no
//! reply, stale nonces are ignored (SotW), and every change is pushed to every stream that
//! is subscribed to it. [`files::FileSource`] feeds it from Envoy-format YAML/JSON files.
//!
//! The requests received and responses sent are kept in a [`Journal`], so tests can
//! assert ACKs, NACKs and nonces without sleeping: see [`XdsServer::wait_until`]. It keeps
//! the latest [`DEFAULT_JOURNAL_LIMIT`] of each (or the limit given to
//! [`XdsServer::with_journal_limit`]), not everything: the agent's SDS server lives as long
//! as the pod.

mod delta;
#[cfg(feature = "testkit")]
pub mod files;
mod requests;
mod resources;
mod service;
mod sotw;
mod stream_handler;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};

use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::AggregatedDiscoveryServiceServer;
use crate::pb::envoy::service::secret::v3::secret_discovery_service_server::SecretDiscoveryServiceServer;
use crate::pb::google::protobuf::Any;

pub use requests::{ErrorDetail, Journal, Protocol, ReceivedRequest, SentResponse};
pub use resources::{TypeResources, Versioned};

/// How many requests, and how many responses, a server's journal keeps by default.
pub const DEFAULT_JOURNAL_LIMIT: usize = 4096;

/// The ADS server's state; cheap to clone (all clones share it).
#[derive(Debug, Clone, Default)]
pub struct XdsServer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    resources: Mutex<resources::Resources>,
    /// Carries the server version; every stream wakes on a change and diffs.
    changes: watch::Sender<u64>,
    journal: Mutex<Journal>,
    /// Entries of each kind the journal keeps.
    journal_limit: usize,
    /// Bumped on every journal entry so waiters re-check their predicate.
    journal_changed: watch::Sender<u64>,
    requests: broadcast::Sender<ReceivedRequest>,
    next_nonce: AtomicU64,
    next_stream: AtomicU64,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            resources: Mutex::default(),
            changes: watch::Sender::new(0),
            journal: Mutex::default(),
            journal_limit: DEFAULT_JOURNAL_LIMIT,
            journal_changed: watch::Sender::new(0),
            requests: broadcast::Sender::new(1024),
            next_nonce: AtomicU64::new(1),
            next_stream: AtomicU64::new(1),
        }
    }
}

/// The wait in [`XdsServer::wait_until`] ran out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("timed out after {0:?} waiting for the xDS journal")]
pub struct WaitTimeout(pub Duration);

impl XdsServer {
    pub fn new() -> Self {
        Self::default()
    }

    /// A server whose journal keeps the latest `limit` requests and `limit` responses.
    pub fn with_journal_limit(limit: usize) -> Self {
        XdsServer { inner: Arc::new(Inner { journal_limit: limit, ..Inner::default() }) }
    }

    /// Replaces every resource of `type_url` with `resources` (name, packed message). If
    /// anything changed, the server version is bumped and changed or removed resources are
    /// pushed to every connected stream.
    pub fn set_resources(&self, type_url: &str, resources: Vec<(String, Any)>) {
        self.change(|r| r.set(type_url, resources));
    }

    /// Adds or replaces one resource of `type_url`.
    pub fn upsert(&self, type_url: &str, name: &str, resource: Any) {
        self.change(|r| r.upsert(type_url, name, resource));
    }

    /// Removes one resource of `type_url`, if present.
    pub fn remove(&self, type_url: &str, name: &str) {
        self.change(|r| r.remove(type_url, name));
    }

    /// The current resources of `type_url` with their versions.
    pub fn resources(&self, type_url: &str) -> TypeResources {
        lock(&self.inner.resources).get(type_url).1
    }

    /// The server version: bumped once per effective change.
    pub fn version(&self) -> u64 {
        lock(&self.inner.resources).version()
    }

    /// Every request received from now on. A lagging receiver loses the oldest ones; the
    /// [`journal`](Self::journal) keeps the latest ones.
    pub fn requests(&self) -> broadcast::Receiver<ReceivedRequest> {
        self.inner.requests.subscribe()
    }

    /// A copy of what was received and sent so far (the latest entries, see [`Journal`]).
    pub fn journal(&self) -> Journal {
        lock(&self.inner.journal).clone()
    }

    /// Waits, at most `timeout`, until `done` holds for the journal; re-checked after every
    /// request received and response sent.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&Journal) -> bool,
    ) -> Result<(), WaitTimeout> {
        let mut changed = self.inner.journal_changed.subscribe();
        let wait = async {
            loop {
                if done(&lock(&self.inner.journal)) {
                    return;
                }
                if changed.changed().await.is_err() {
                    // Unreachable while `self` holds the sender; wait out the timeout.
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.map_err(|_| WaitTimeout(timeout))
    }

    /// Waits, at most `timeout`, for a received request (past or future) that matches.
    pub async fn wait_for_request(
        &self,
        timeout: Duration,
        mut matches: impl FnMut(&ReceivedRequest) -> bool,
    ) -> Result<ReceivedRequest, WaitTimeout> {
        let mut found = None;
        self.wait_until(timeout, |j| {
            found = j.requests.iter().find(|r| matches(r)).cloned();
            found.is_some()
        })
        .await?;
        found.ok_or(WaitTimeout(timeout))
    }

    /// Serves ADS on `listener` until the returned handle is shut down or dropped. Must be
    /// called within a tokio runtime: the server runs as a task of it.
    pub fn serve(&self, listener: TcpListener) -> Serving {
        self.spawn(TcpListenerStream::new(listener))
    }

    /// Serves ADS on a Unix socket (as Istio's agent does) until the handle is shut down.
    pub fn serve_unix(&self, listener: UnixListener) -> Serving {
        self.spawn(UnixListenerStream::new(listener))
    }

    fn spawn<S, IO, E>(&self, incoming: S) -> Serving
    where
        S: tokio_stream::Stream<Item = Result<IO, E>> + Send + 'static,
        IO: tonic::transport::server::Connected + tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        IO::ConnectInfo: Clone + Send + Sync + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (stop, stopped) = watch::channel(false);
        let service = service::AdsService::new(self.clone(), stopped.clone());
        let mut signal = stopped;
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(AggregatedDiscoveryServiceServer::new(service.clone()))
                .add_service(SecretDiscoveryServiceServer::new(service))
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = signal.wait_for(|stop| *stop).await;
                })
                .await
        });
        Serving { stop, task: Some(task) }
    }

    // === for the stream handlers ===

    fn change(&self, apply: impl FnOnce(&mut resources::Resources) -> bool) {
        let mut resources = lock(&self.inner.resources);
        if apply(&mut resources) {
            // Sent under the lock so streams never see versions out of order.
            self.inner.changes.send_replace(resources.version());
        }
    }

    fn snapshot(&self, type_url: &str) -> (String, TypeResources) {
        lock(&self.inner.resources).get(type_url)
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    fn next_nonce(&self) -> String {
        self.inner.next_nonce.fetch_add(1, Ordering::Relaxed).to_string()
    }

    fn next_stream(&self) -> u64 {
        self.inner.next_stream.fetch_add(1, Ordering::Relaxed)
    }

    fn record_request(&self, request: ReceivedRequest) {
        tracing::debug!(?request, "xds server: request");
        let _ = self.inner.requests.send(request.clone());
        lock(&self.inner.journal).push_request(request, self.inner.journal_limit);
        self.inner.journal_changed.send_modify(|n| *n += 1);
    }

    fn record_response(&self, response: SentResponse) {
        tracing::debug!(?response, "xds server: response");
        lock(&self.inner.journal).push_response(response, self.inner.journal_limit);
        self.inner.journal_changed.send_modify(|n| *n += 1);
    }
}

/// Whether an empty subscription to `type_url` means "everything": LDS and CDS (and types
/// this server does not know), as Envoy's legacy wildcard rule says. RDS, EDS and SDS are
/// always subscribed by name.
fn wildcard_by_default(type_url: &str) -> bool {
    crate::config::ResourceType::from_type_url(type_url).is_none_or(|t| t.is_wildcard())
}

/// Locks a mutex of the server, ignoring poisoning: each critical section leaves the state
/// consistent, so a panic elsewhere does not make it unusable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running ADS listener. Dropping it stops the server (streams end with `UNAVAILABLE`);
/// [`shutdown`](Self::shutdown) also waits until it has stopped.
#[derive(Debug)]
pub struct Serving {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
}

/// Why serving ADS ended.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("xds server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("xds server task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl Serving {
    /// Ends every stream, stops accepting and waits for the server to stop.
    pub async fn shutdown(mut self) -> Result<(), ServeError> {
        self.stop.send_replace(true);
        match self.task.take() {
            Some(task) => Ok(task.await??),
            None => Ok(()),
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}
