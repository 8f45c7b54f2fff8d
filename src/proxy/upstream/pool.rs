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

/// The pools of one worker.
#[derive(Debug, Default)]
pub(crate) struct Pools {
    clusters: Mutex<FastMap<Arc<str>, ClusterPools>>,
}

#[derive(Debug, Default)]
struct ClusterPools {
    http1: FastMap<Address, Vec<Http1Conn>>,
    http2: FastMap<Address, Http2Entry>,
    /// This worker's connections per endpoint, for the circuit breakers.
    endpoints: FastMap<Address, Arc<EndpointConns>>,
}

impl ClusterPools {
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
    pools: Weak<Pools>,
    cluster: Arc<str>,
    address: Address,
    conn: Http1Conn,
}

impl Checkin {
    pub(crate) fn put(self) {
        if let Some(pools) = self.pools.upgrade() {
            // No entry: the endpoint was drained while this connection carried a response.
            let mut clusters = pools.lock();
            let Some(pools) = clusters.get_mut(&self.cluster) else { return };
            if let Some(idle) = pools.http1.get_mut(&self.address) {
                idle.push(self.conn);
                if let Some(endpoint) = pools.endpoints.get(&self.address) {
                    endpoint.release_one();
                }
            }
        }
    }
}

impl Pools {
    fn lock(&self) -> MutexGuard<'_, FastMap<Arc<str>, ClusterPools>> {
        self.clusters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle HTTP/1.1 connection that is still open, not past `idle_timeout` and of the
    /// target's transport; the ones found closed, stale or of another transport (the
    /// cluster's TLS changed) on the way are dropped.
    fn take_http1(&self, cluster: &str, target: &Target<'_>) -> Option<Http1Conn> {
        let mut clusters = self.lock();
        let idle = clusters.get_mut(cluster)?.http1.get_mut(target.address)?;
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
    /// connection then closes instead of returning. The cluster's key is shared, so a
    /// check-in needs no allocation.
    pub(crate) fn checkin(self: &Arc<Self>, cluster: &str, address: &Address, conn: Http1Conn) -> Checkin {
        let key = {
            let mut clusters = self.lock();
            let key = match clusters.get_key_value(cluster) {
                Some((key, _)) => key.clone(),
                None => {
                    let key: Arc<str> = Arc::from(cluster);
                    clusters.insert(key.clone(), ClusterPools::default());
                    key
                }
            };
            if let Some(pools) = clusters.get_mut(cluster)
                && !pools.http1.contains_key(address)
            {
                pools.http1.insert(address.clone(), Vec::new());
            }
            key
        };
        Checkin { pools: Arc::downgrade(self), cluster: key, address: address.clone(), conn }
    }

    /// This worker's connection count of an endpoint (made on first use).
    fn endpoint(&self, cluster: &str, address: &Address) -> Arc<EndpointConns> {
        let mut clusters = self.lock();
        let pools = match clusters.get_mut(cluster) {
            Some(pools) => pools,
            None => clusters.entry(Arc::from(cluster)).or_default(),
        };
        pools.endpoints.entry(address.clone()).or_default().clone()
    }

    /// An HTTP/1.1 connection for one request, and whether it was reused: an idle one;
    /// else, pending, a new one once the circuit breakers allow it or the next one handed
    /// back, whichever comes first. `http1_only`: the cluster speaks only HTTP/1.1 (not
    /// the downstream's protocol), so an HTTP/2 connection to the endpoint is left over
    /// from before a protocol change.
    pub(crate) async fn http1(
        &self,
        cluster: &str,
        target: &Target<'_>,
        breakers: Option<&Breakers<'_>>,
        http1_only: bool,
    ) -> Result<(Http1Conn, bool), UpstreamError> {
        if let Some(conn) = self.idle_http1(cluster, target).await {
            return Ok((conn, true));
        }
        let _pending = limits::pending(breakers)?;
        if http1_only {
            self.leave_http2(cluster, target.address);
        }
        let endpoint = self.endpoint(cluster, target.address);
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
            if let Some(conn) = self.idle_http1(cluster, target).await {
                return Ok((conn, true));
            }
        }
    }

    /// An HTTP/2 connection left from before the cluster changed to HTTP/1.1 leaves the pool
    /// and closes once its streams have finished, as Envoy's old pool drains on a cluster
    /// update. Kept, it would count against `max_connections` and keep the request waiting
    /// for a hand-back that never comes.
    fn leave_http2(&self, cluster: &str, address: &Address) {
        if let Some(pools) = self.lock().get_mut(cluster) {
            pools.http2.remove(address);
        }
    }

    /// An idle connection ready for a request, if the pool has one.
    async fn idle_http1(&self, cluster: &str, target: &Target<'_>) -> Option<Http1Conn> {
        while let Some(mut conn) = self.take_http1(cluster, target) {
            if conn.sender.ready().await.is_ok() {
                return Some(conn);
            }
        }
        None
    }

    /// Forgets connections found closed. Endpoints that went away are forgotten by
    /// [`retain_endpoints`](Self::retain_endpoints).
    pub(crate) fn prune(&self) {
        let mut clusters = self.lock();
        for pools in clusters.values_mut() {
            for idle in pools.http1.values_mut() {
                idle.retain(|conn| !conn.sender.is_closed());
            }
            pools.http2.retain(|_, entry| match entry {
                Http2Entry::Ready { conn, .. } => !conn.sender.is_closed(),
                Http2Entry::Connecting(..) => true,
            });
            // Kept while a connection or a pending request holds it.
            pools.endpoints.retain(|_, endpoint| Arc::strong_count(endpoint) > 1);
        }
        clusters.retain(|_, pools| !pools.is_empty());
    }

    /// Drains the pools of endpoints and clusters that left the configuration, as Envoy
    /// drains a removed host's pools: idle HTTP/1.1 connections close now, an HTTP/2
    /// connection leaves the pool and closes once the streams still on it have finished,
    /// and an HTTP/1.1 connection carrying a response is not checked back in. Returns how
    /// many connections left the pools.
    pub(crate) fn retain_endpoints<'a>(&self, mut endpoints_of: impl FnMut(&str) -> Membership<'a>) -> usize {
        let mut clusters = self.lock();
        let mut drained = 0;
        for (cluster, pools) in clusters.iter_mut() {
            drained += pools.retain(&endpoints_of(cluster));
        }
        clusters.retain(|_, pools| !pools.is_empty());
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
            let Some(pools) = clusters.get_mut(name.as_str()) else { continue };
            drained += pools.retain(&endpoints_of(name));
            if pools.is_empty() {
                clusters.remove(name.as_str());
            }
        }
        drained
    }

    /// Idle HTTP/1.1 connections and HTTP/2 connections held, for tests and stats.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let clusters = self.lock();
        let http1 = clusters.values().flat_map(|p| p.http1.values()).map(Vec::len).sum();
        let http2 =
            clusters.values().flat_map(|p| p.http2.values()).filter(|e| matches!(e, Http2Entry::Ready { .. })).count();
        (http1, http2)
    }
}
