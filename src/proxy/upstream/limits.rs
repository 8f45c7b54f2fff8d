//! The cluster's circuit breakers as one worker's pools apply them (Envoy's connection
//! pool semantics, see `lb::resources`):
//!
//! - a request that finds no ready connection is *pending* until it has one (while a
//!   connection is opened for it, or while it waits for one to be handed back), and
//!   `max_pending_requests` bounds how many are: past it the request fails with
//!   [`UpstreamError::Overflow`] (503, flag UO, `upstream_rq_pending_overflow`);
//! - a new connection needs room under `max_connections` (cluster and host); without it
//!   the request keeps waiting for one of the pool's connections to the endpoint, unless
//!   the pool has none, which always gets one.
//!
//! Waiting is bounded by the route's timeouts, which drop the request's future (and so
//! its pending slot).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::sync::Notify;

use super::error::UpstreamError;
use crate::config::cluster::CircuitBreakers;
use crate::lb::EndpointStats;
use crate::lb::resources::{ClusterResources, ConnectionSlot, Priority, Slot};
use crate::telemetry::ClusterStats;

/// What the pools need to apply a cluster's circuit breakers to one request.
#[derive(Debug, Clone, Copy)]
pub struct Breakers<'a> {
    pub resources: &'a Arc<ClusterResources>,
    pub limits: &'a CircuitBreakers,
    /// The endpoint's shared stats, which count its connections across workers.
    pub host: &'a Arc<EndpointStats>,
    pub stats: &'a ClusterStats,
}

/// This worker's connections to one endpoint of one cluster (open or opening), and the
/// wake-up of requests pending for one: a connection handed back or closed wakes one.
#[derive(Debug, Default)]
pub(crate) struct EndpointConns {
    open: AtomicU32,
    released: Notify,
}

impl EndpointConns {
    pub(crate) fn is_empty(&self) -> bool {
        self.open.load(Ordering::Acquire) == 0
    }

    /// Wakes one request waiting for a connection to this endpoint (or the next to wait).
    pub(crate) fn release_one(&self) {
        self.released.notify_one();
    }

    /// Resolves once a connection was handed back or closed.
    pub(crate) async fn released(&self) {
        self.released.notified().await;
    }
}

/// One connection of the pool: its circuit-breaker slot (when the cluster has breakers)
/// and its place in the pool's count, held by the connection's task until the connection
/// ends (or by the connect until it fails). Dropping it wakes one pending request.
#[derive(Debug)]
pub(crate) struct ConnectionPermit {
    _slot: Option<ConnectionSlot>,
    endpoint: Arc<EndpointConns>,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.endpoint.open.fetch_sub(1, Ordering::AcqRel);
        self.endpoint.release_one();
    }
}

/// A pending-request slot, or the overflow error. Unlimited without breakers.
pub(crate) fn pending(breakers: Option<&Breakers<'_>>) -> Result<Option<Slot>, UpstreamError> {
    let Some(breakers) = breakers else { return Ok(None) };
    match breakers.resources.try_pending(breakers.limits, Priority::Default) {
        Some(slot) => Ok(Some(slot)),
        None => {
            breakers.stats.upstream_rq_pending_overflow.inc();
            Err(UpstreamError::Overflow)
        }
    }
}

/// A request slot under `max_requests` for a request that has its connection, or the
/// overflow error (503, UO), as Envoy's pools check it when they attach a request to a
/// ready connection: requests pending for a connection do not count (`max_pending_requests`
/// bounds those), so with HTTP/1.1 the active requests are bounded by the connections.
pub(crate) fn active_request(breakers: Option<&Breakers<'_>>) -> Result<Option<Slot>, UpstreamError> {
    let Some(breakers) = breakers else { return Ok(None) };
    match breakers.resources.try_request(breakers.limits, Priority::Default) {
        Some(slot) => Ok(Some(slot)),
        None => {
            breakers.stats.upstream_rq_pending_overflow.inc();
            Err(UpstreamError::Overflow)
        }
    }
}

/// Room for a new connection to the endpoint of `endpoint`, or `None` when
/// `max_connections` says to wait for one of the pool's own.
pub(crate) fn connection(breakers: Option<&Breakers<'_>>, endpoint: &Arc<EndpointConns>) -> Option<ConnectionPermit> {
    let slot = match breakers {
        Some(b) => {
            let slot = b.resources.try_connection(b.limits, Priority::Default, b.host, endpoint.is_empty());
            let overflowed = slot.as_ref().is_none_or(|s| s.over_limit());
            if overflowed {
                b.stats.upstream_cx_overflow.inc();
            }
            Some(slot?)
        }
        None => None,
    };
    endpoint.open.fetch_add(1, Ordering::AcqRel);
    Some(ConnectionPermit { _slot: slot, endpoint: endpoint.clone() })
}
