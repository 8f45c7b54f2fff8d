//! How busy one upstream connection is, shared between the pool (which hands out leases)
//! and the connection's own task (which closes it once idle for the idle timeout).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Requests in use on one connection and when the last one ended.
#[derive(Debug)]
pub(crate) struct Activity {
    epoch: Instant,
    in_use: AtomicU32,
    /// Nanoseconds after `epoch` when the connection last became idle.
    last_idle: AtomicU64,
    /// The upstream certificate's first URI SAN, on a TLS connection that has one.
    peer_uri_san: std::sync::OnceLock<Arc<str>>,
    /// The first URI SAN of the certificate this side presented on it, if any.
    local_uri_san: std::sync::OnceLock<Arc<str>>,
}

/// One request on a connection; the connection counts as busy until every lease drops.
#[derive(Debug)]
pub(crate) struct Lease {
    activity: Arc<Activity>,
}

impl Activity {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            epoch: Instant::now(),
            in_use: AtomicU32::new(0),
            last_idle: AtomicU64::new(0),
            peer_uri_san: std::sync::OnceLock::new(),
            local_uri_san: std::sync::OnceLock::new(),
        })
    }

    /// Records the upstream's identity (set once, after the TLS handshake).
    pub(crate) fn set_peer_uri_san(&self, san: Option<String>) {
        if let Some(san) = san {
            let _ = self.peer_uri_san.set(san.into());
        }
    }

    pub(crate) fn peer_uri_san(&self) -> Option<Arc<str>> {
        self.peer_uri_san.get().cloned()
    }

    /// Records this side's identity on the connection (set once, after the handshake).
    pub(crate) fn set_local_uri_san(&self, san: Option<Arc<str>>) {
        if let Some(san) = san {
            let _ = self.local_uri_san.set(san);
        }
    }

    pub(crate) fn local_uri_san(&self) -> Option<Arc<str>> {
        self.local_uri_san.get().cloned()
    }

    pub(crate) fn lease(self: &Arc<Self>) -> Lease {
        self.in_use.fetch_add(1, Ordering::Relaxed);
        Lease { activity: Arc::clone(self) }
    }

    /// Whether the connection has been idle for at least `timeout` at `now`.
    pub(crate) fn idle_for(&self, timeout: Duration, now: Instant) -> bool {
        self.in_use.load(Ordering::Relaxed) == 0 && self.idle_since() + timeout <= now
    }

    fn idle_since(&self) -> Instant {
        self.epoch + Duration::from_nanos(self.last_idle.load(Ordering::Relaxed))
    }

    /// Resolves once the connection has been idle for `timeout`; the connection task
    /// then drops the connection, which closes the socket.
    pub(crate) async fn idle_timeout(self: Arc<Self>, timeout: Duration) {
        loop {
            let now = Instant::now();
            if self.idle_for(timeout, now) {
                return;
            }
            let deadline =
                if self.in_use.load(Ordering::Relaxed) > 0 { now + timeout } else { self.idle_since() + timeout };
            tokio::time::sleep_until(deadline).await;
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let activity = &self.activity;
        let nanos = Instant::now().saturating_duration_since(activity.epoch).as_nanos() as u64;
        activity.last_idle.store(nanos, Ordering::Relaxed);
        activity.in_use.fetch_sub(1, Ordering::Relaxed);
    }
}
