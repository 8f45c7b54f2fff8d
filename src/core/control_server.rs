//! The limits of this process's own HTTP servers that other processes reach: the admin
//! server (15000) and the agent's status port (15020). They run on the control runtime and
//! share the process's descriptors with the data plane, so a client that opens
//! connections and never finishes a request must not be able to hold them: a connection
//! over the cap is closed as soon as it is accepted, and one whose request head does not
//! arrive in time (the first request's, or the next one's on a kept-alive connection) is
//! closed.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many connections a server keeps and how long it waits for a request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections served at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// A request head must be read whole within this, counted from when the server starts
    /// waiting for it (so an idle kept-alive connection is closed after it too).
    pub header_read_timeout: Duration,
}

impl Default for ServerLimits {
    /// Enough for the kubelet's probes, Prometheus and an operator's tools at once; a
    /// head that takes 10 s on loopback or the pod network is not a client's.
    fn default() -> Self {
        ServerLimits { max_connections: 64, header_read_timeout: Duration::from_secs(10) }
    }
}

/// Counts a server's open connections against [`ServerLimits::max_connections`].
#[derive(Debug, Clone)]
pub struct Admission {
    permits: Arc<Semaphore>,
}

impl Admission {
    pub fn new(limits: &ServerLimits) -> Self {
        Admission { permits: Arc::new(Semaphore::new(limits.max_connections.min(Semaphore::MAX_PERMITS))) }
    }

    /// A place for one more connection, held until the connection ends; `None` when the
    /// server is full.
    pub fn admit(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }
}

/// An HTTP/1.1 server connection builder that closes a connection whose request head does
/// not arrive within `limits.header_read_timeout`. (hyper's timeout needs its timer set;
/// without one it silently waits for ever.)
pub fn http1(limits: &ServerLimits) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    builder
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_stops_at_the_cap_and_frees_a_place_when_a_connection_ends() {
        let admission = Admission::new(&ServerLimits { max_connections: 2, ..ServerLimits::default() });
        let first = admission.admit();
        let second = admission.admit();
        assert!(first.is_some() && second.is_some());
        assert!(admission.admit().is_none(), "a third connection over a cap of 2");
        drop(first);
        assert!(admission.admit().is_some(), "a place freed by a closed connection");
    }
}
