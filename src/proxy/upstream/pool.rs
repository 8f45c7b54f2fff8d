//! The connection pools of one worker, per cluster and endpoint address:
//!
//! - HTTP/1.1: a stack of idle keep-alive connections. A connection leaves the stack for
//!   one request and comes back when its response body has ended (see `UpstreamBody`);
//!   the most recently used is taken first, so surplus connections age out.
//! - HTTP/2: one multiplexed connection per endpoint. Concurrent first requests share one
//!   connect (a shared future) instead of racing to open several.
//!
//! A request that finds no ready connection is pending until it has one, and new
//! connections need room under the cluster's `max_connections` (see `limits`).
//!
//! The pools sit behind a `Mutex` only because hyper needs `Send` types: a response body
//! hands its connection back to them (`Checkin`), and upstreams used outside a worker spawn
//! on the runtime. Each worker owns its own pools and one thread uses them, so the lock is
//! never contended and never held across an `.await`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use hyper::client::conn::http1;

use super::RequestBody;
use super::activity::Activity;
use super::connect::Target;
use super::error::UpstreamError;
use super::limits::{self, Breakers, EndpointConns};
use crate::config::Address;
use crate::core::hash::FastMap;

mod http2;

use http2::Http2Entry;

/// Which endpoints of a cluster may keep pooled connections.
#[derive(Debug)]
pub(crate) enum Membership<'a> {
    /// The cluster is gone: every connection drains.
    Removed,
    /// Endpoints are not known in advance (DNS, original destination): idle timeouts decide.
    Open,
    Endpoints(std::collections::HashSet<&'a Address>),
}

impl Membership<'_> {
    fn keeps(&self, address: &Address) -> bool {
        match self {
            Self::Removed => false,
            Self::Open => true,
            Self::Endpoints(endpoints) => endpoints.contains(address),
        }
    }
}

/// The pools of one worker, one [`ClusterPool`] per cluster it has sent requests to.
#[derive(Debug, Default)]
pub(crate) struct Pools {
    clusters: Mutex<FastMap<Arc<str>, Arc<ClusterPool>>>,
}

/// One cluster's connections on one worker. A worker's thread-local cluster holds it, so a
/// request reaches its pool without looking the cluster up by name; the pools' map only
/// finds it for the worker's drains and prunes, and for requests sent by cluster name.
#[derive(Debug, Default)]
pub struct ClusterPool {
    endpoints: Mutex<EndpointPools>,
    /// Set when the cluster left the configuration: nothing is handed back to it, and the
    /// pools' map no longer finds it.
    removed: AtomicBool,
}

#[derive(Debug, Default)]
struct EndpointPools {
    http1: FastMap<Address, Vec<Http1Conn>>,
    http2: FastMap<Address, Http2Entry>,
    /// This worker's connections per endpoint, for the circuit breakers.
    endpoints: FastMap<Address, Arc<EndpointConns>>,
}

impl EndpointPools {
    /// Drops the pools of endpoints `membership` does not keep; returns how many
    /// connections left.
    fn retain(&mut self, membership: &Membership<'_>) -> usize {
        let mut drained = 0;
        self.http1.retain(|address, idle| {
            let kept = membership.keeps(address);
            drained += if kept { 0 } else { idle.len() };
            kept
        });
        self.http2.retain(|address, _| {
            let kept = membership.keeps(address);
            drained += usize::from(!kept);
            kept
        });
        self.endpoints.retain(|address, _| membership.keeps(address));
        drained
    }

    /// Forgets connections found closed.
    fn prune(&mut self) {
        for idle in self.http1.values_mut() {
            idle.retain(|conn| !conn.sender.is_closed());
        }
        self.http2.retain(|_, entry| match entry {
            Http2Entry::Ready { conn, .. } => !conn.sender.is_closed(),
            Http2Entry::Connecting(..) => true,
        });
        // Kept while a connection or a pending request holds it.
        self.endpoints.retain(|_, endpoint| Arc::strong_count(endpoint) > 1);
    }

    fn is_empty(&self) -> bool {
        self.http1.is_empty() && self.http2.is_empty() && self.endpoints.is_empty()
    }
}

/// An HTTP/1.1 connection and how many requests it has carried.
#[derive(Debug)]
pub(crate) struct Http1Conn {
    pub sender: http1::SendRequest<RequestBody>,
    pub activity: Arc<Activity>,
    pub requests: u32,
    /// See [`Dial::transport_id`]: a connection serves only requests of its transport.
    pub transport: u64,
}

/// Where an HTTP/1.1 connection goes back to once its response has ended.
#[derive(Debug)]
pub(crate) struct Checkin {
    pool: Weak<ClusterPool>,
    address: Address,
    conn: Http1Conn,
}

impl Checkin {
    pub(crate) fn put(self) {
        let Some(pool) = self.pool.upgrade() else { return };
        if pool.removed.load(Ordering::Acquire) {
            return; // the cluster left while this connection carried a response
        }
        // No stack: the endpoint was drained while this connection carried a response.
        let mut pools = pool.lock();
        if let Some(idle) = pools.http1.get_mut(&self.address) {
            idle.push(self.conn);
            if let Some(endpoint) = pools.endpoints.get(&self.address) {
                endpoint.release_one();
            }
        }
    }
}

impl ClusterPool {
    fn lock(&self) -> MutexGuard<'_, EndpointPools> {
        self.endpoints.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle HTTP/1.1 connection that is still open, not past `idle_timeout` and of the
    /// target's transport; the ones found closed, stale or of another transport (the
    /// cluster's TLS changed) on the way are dropped.
    fn take_http1(&self, target: &Target<'_>) -> Option<Http1Conn> {
        let mut pools = self.lock();
        let idle = pools.http1.get_mut(target.address)?;
        let now = tokio::time::Instant::now();
        let (idle_timeout, transport) = (target.idle_timeout(), target.transport_id());
        while let Some(conn) = idle.pop() {
            let stale = idle_timeout.is_some_and(|timeout| conn.activity.idle_for(timeout, now));
            if !conn.sender.is_closed() && !stale && conn.transport == transport {
                return Some(conn);
            }
        }
        None
    }

    /// Where `conn` returns once its response has ended. The endpoint's idle stack is made
    /// here, when the response starts: a drain between now and then removes it, and the
    /// connection then closes instead of returning.
    pub(crate) fn checkin(self: &Arc<Self>, address: &Address, conn: Http1Conn) -> Checkin {
        let mut pools = self.lock();
        if !pools.http1.contains_key(address) {
            pools.http1.insert(address.clone(), Vec::new());
        }
        Checkin { pool: Arc::downgrade(self), address: address.clone(), conn }
    }

    /// This worker's connection count of an endpoint (made on first use).
    fn endpoint(&self, address: &Address) -> Arc<EndpointConns> {
        self.lock().endpoints.entry(address.clone()).or_default().clone()
    }

    /// An HTTP/1.1 connection for one request, and whether it was reused: an idle one;
    /// else, pending, a new one once the circuit breakers allow it or the next one handed
    /// back, whichever comes first. `http1_only`: the cluster speaks only HTTP/1.1 (not
    /// the downstream's protocol), so an HTTP/2 connection to the endpoint is left over
    /// from before a protocol change.
    pub(crate) async fn http1(
        &self,
        target: &Target<'_>,
        breakers: Option<&Breakers<'_>>,
        http1_only: bool,
    ) -> Result<(Http1Conn, bool), UpstreamError> {
        if let Some(conn) = self.idle_http1(target).await {
            return Ok((conn, true));
        }
        let _pending = limits::pending(breakers)?;
        if http1_only {
            self.leave_http2(target.address);
        }
        let endpoint = self.endpoint(target.address);
        loop {
            if let Some(permit) = limits::connection(breakers, &endpoint) {
                // Boxed: connecting (TCP, TLS, the handshake) is the rare case, and inline
                // its state would size every request's future, which is moved as it is built.
                let dial = target.dial();
                let (sender, activity) = Box::pin(dial.http1(permit)).await?;
                return Ok((Http1Conn { sender, activity, requests: 0, transport: dial.transport_id() }, false));
            }
            // Bounded by the route's timeouts, which drop this future.
            endpoint.released().await;
            if let Some(conn) = self.idle_http1(target).await {
                return Ok((conn, true));
            }
        }
    }

    /// An HTTP/2 connection left from before the cluster changed to HTTP/1.1 leaves the pool
    /// and closes once its streams have finished, as Envoy's old pool drains on a cluster
    /// update. Kept, it would count against `max_connections` and keep the request waiting
    /// for a hand-back that never comes.
    fn leave_http2(&self, address: &Address) {
        self.lock().http2.remove(address);
    }

    /// An idle connection ready for a request, if the pool has one.
    async fn idle_http1(&self, target: &Target<'_>) -> Option<Http1Conn> {
        while let Some(mut conn) = self.take_http1(target) {
            if conn.sender.ready().await.is_ok() {
                return Some(conn);
            }
        }
        None
    }

    /// Drops the pools of endpoints `membership` does not keep (all of them when the
    /// cluster is removed); returns how many connections left.
    fn retain(&self, membership: &Membership<'_>) -> usize {
        if matches!(membership, Membership::Removed) {
            self.removed.store(true, Ordering::Release);
        }
        self.lock().retain(membership)
    }

    /// Whether the pools' map may forget this pool: nothing in it, and no thread-local
    /// cluster holding it (the map's own reference is the only one).
    fn forgettable(self: &Arc<Self>) -> bool {
        self.removed.load(Ordering::Acquire) || (Arc::strong_count(self) == 1 && self.lock().is_empty())
    }
}

impl Pools {
    fn lock(&self) -> MutexGuard<'_, FastMap<Arc<str>, Arc<ClusterPool>>> {
        self.clusters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pool of `cluster` (made on first use).
    pub(crate) fn cluster(&self, cluster: &str) -> Arc<ClusterPool> {
        let mut clusters = self.lock();
        if let Some(pool) = clusters.get(cluster) {
            return pool.clone();
        }
        clusters.entry(Arc::from(cluster)).or_default().clone()
    }

    /// Forgets connections found closed. Endpoints that went away are forgotten by
    /// [`retain_endpoints`](Self::retain_endpoints).
    pub(crate) fn prune(&self) {
        let mut clusters = self.lock();
        for pool in clusters.values() {
            pool.lock().prune();
        }
        clusters.retain(|_, pool| !pool.forgettable());
    }

    /// Drains the pools of endpoints and clusters that left the configuration, as Envoy
    /// drains a removed host's pools: idle HTTP/1.1 connections close now, an HTTP/2
    /// connection leaves the pool and closes once the streams still on it have finished,
    /// and an HTTP/1.1 connection carrying a response is not checked back in. Returns how
    /// many connections left the pools.
    pub(crate) fn retain_endpoints<'a>(&self, mut endpoints_of: impl FnMut(&str) -> Membership<'a>) -> usize {
        let mut clusters = self.lock();
        let mut drained = 0;
        for (cluster, pool) in clusters.iter() {
            drained += pool.retain(&endpoints_of(cluster));
        }
        clusters.retain(|_, pool| !pool.forgettable());
        drained
    }

    /// As [`retain_endpoints`](Self::retain_endpoints), for the named clusters only.
    pub(crate) fn retain_endpoints_of<'a, 'n>(
        &self,
        names: impl IntoIterator<Item = &'n String>,
        mut endpoints_of: impl FnMut(&str) -> Membership<'a>,
    ) -> usize {
        let mut clusters = self.lock();
        let mut drained = 0;
        for name in names {
            let Some(pool) = clusters.get(name.as_str()) else { continue };
            drained += pool.retain(&endpoints_of(name));
            if pool.forgettable() {
                clusters.remove(name.as_str());
            }
        }
        drained
    }

    /// Idle HTTP/1.1 connections and HTTP/2 connections held, for tests and stats.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let clusters = self.lock();
        let (mut http1, mut http2) = (0, 0);
        for pool in clusters.values() {
            let pools = pool.lock();
            http1 += pools.http1.values().map(Vec::len).sum::<usize>();
            http2 += pools.http2.values().filter(|e| matches!(e, Http2Entry::Ready { .. })).count();
        }
        (http1, http2)
    }
}
