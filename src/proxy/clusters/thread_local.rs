//! One cluster as one worker reaches it (Envoy's `ThreadLocalCluster`): its configuration,
//! its balancer with this worker's picker, its circuit-breaker counts, this worker's pool of
//! connections to it and the upstream TLS its endpoints use. Resolved once per publication
//! by [`WorkerClusters::get`](super::WorkerClusters::get); a request holds it for its
//! attempts and reaches everything of its cluster without a look-up by name.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use http::{Request, Response};

use super::super::original_dst::{DestinationSources, upstream_destination};
use super::super::transport::WorkerTls;
use super::super::upstream::{
    ClusterPool, Destination, RequestBody, ResponseBody, TunnelLease, UpstreamError, Upstreams,
};
use crate::config::Cluster;
use crate::config::cluster::LbPolicy;
use crate::config::endpoint::LbEndpoint;
use crate::lb::resources::ClusterResources;
use crate::lb::{ClusterLb, Host, PickContext, Picker};
use crate::store::{Snapshot, Versioned};
use crate::telemetry::ClusterStats;
use crate::tls::{ClientTls, TlsError};

/// One cluster on one worker. Not `Send`: it never leaves its thread.
pub struct ThreadLocalCluster {
    pub config: Arc<Versioned<Cluster>>,
    /// `None` while the cluster's balancer is not yet published (it is built just after
    /// the configuration): nothing can be picked.
    balanced: Option<Balanced>,
    pool: Arc<ClusterPool>,
    /// The upstream TLS of the transports this worker used, by the context's address in
    /// `config`, with the snapshot generation they were resolved in: a new generation may
    /// carry rotated secrets, and configs read from files are asked for every time.
    tls: RefCell<Vec<(usize, u64, Arc<ClientTls>)>>,
    /// (snapshot generation, balancer publication) this was last checked against.
    pub(super) seen: Cell<(u64, u64)>,
}

struct Balanced {
    picker: RefCell<Picker>,
    resources: Arc<ClusterResources>,
    stats: Arc<ClusterStats>,
}

impl ThreadLocalCluster {
    /// `previous`: the one this replaces, whose picker carries over (switched to
    /// `balancer`, which resets it only when the balancer was rebuilt).
    pub(super) fn new(
        config: Arc<Versioned<Cluster>>,
        balancer: Option<Arc<ClusterLb>>,
        pool: Arc<ClusterPool>,
        previous: Option<&ThreadLocalCluster>,
        seed: u64,
        seen: (u64, u64),
    ) -> Self {
        let balanced = balancer.map(|lb| {
            let carried = previous.and_then(|p| p.balanced.as_ref()).map(|b| {
                let mut picker = b.picker.replace(Picker::new(lb.clone(), seed));
                picker.refresh(&lb);
                picker
            });
            Balanced {
                picker: RefCell::new(carried.unwrap_or_else(|| Picker::new(lb.clone(), seed))),
                resources: lb.resources().clone(),
                stats: lb.stats.clone(),
            }
        });
        Self { config, balanced, pool, tls: RefCell::default(), seen: Cell::new(seen) }
    }

    /// Whether this was resolved from `config` and `balancer` (compared by pointer).
    pub(super) fn is(&self, config: &Arc<Versioned<Cluster>>, balancer: Option<&Arc<ClusterLb>>) -> bool {
        let same_balancer = match (&self.balanced, balancer) {
            (Some(balanced), Some(lb)) => Arc::ptr_eq(balanced.picker.borrow().balancer(), lb),
            (None, None) => true,
            _ => false,
        };
        Arc::ptr_eq(&self.config, config) && same_balancer
    }

    pub fn cluster(&self) -> &Cluster {
        &self.config.resource
    }

    /// The balancing policy that runs (the proxy-wide choice may have replaced the one
    /// received); the received one before the balancer is published.
    pub fn running_policy(&self) -> Option<LbPolicy> {
        match &self.balanced {
            Some(balanced) => balanced.picker.borrow().balancer().policy().cloned(),
            None => self.cluster().load_balancing.as_ref().map(|lb| lb.policy.clone()),
        }
    }

    /// The cluster's stats; `None` before its balancer is published.
    pub fn stats(&self) -> Option<&Arc<ClusterStats>> {
        self.balanced.as_ref().map(|b| &b.stats)
    }

    /// The cluster's circuit-breaker counts; `None` before its balancer is published.
    pub fn resources(&self) -> Option<&Arc<ClusterResources>> {
        self.balanced.as_ref().map(|b| &b.resources)
    }

    /// Picks the upstream host: the host of the destination for an ORIGINAL_DST cluster
    /// (see [`upstream_destination`]; its `sources` are gathered only for such a cluster),
    /// else by the cluster's balancer.
    pub fn pick<'s>(
        &self,
        ctx: &PickContext<'_>,
        sources: impl FnOnce() -> DestinationSources<'s>,
    ) -> Option<Arc<Host>> {
        let mut picker = self.balanced.as_ref()?.picker.borrow_mut();
        match &self.config.resource.original_dst {
            Some(config) => {
                let destination = upstream_destination(config, &sources())?;
                picker.pick_destination(destination, ctx.now)
            }
            None => picker.pick(ctx).cloned(),
        }
    }

    /// The TLS to originate towards `endpoint`; `None` for plaintext. Resolved through the
    /// worker's cache once per snapshot generation and transport.
    pub fn tls(
        &self,
        endpoint: &LbEndpoint,
        snapshot: &Snapshot,
        worker: &WorkerTls,
    ) -> Result<Option<Arc<ClientTls>>, TlsError> {
        let Some(context) = self.config.resource.upstream_tls_context(endpoint) else { return Ok(None) };
        let key = std::ptr::from_ref(context) as usize;
        let generation = snapshot.generation;
        if let Some((_, _, tls)) = self.tls.borrow().iter().find(|(k, g, _)| *k == key && *g == generation) {
            return Ok(Some(tls.clone()));
        }
        let tls = worker.upstream(&self.config, endpoint, snapshot)?;
        let mut kept = self.tls.borrow_mut();
        kept.retain(|(k, g, _)| *k != key && *g == generation);
        if let Some(tls) = tls.as_ref().filter(|tls| !tls.reads_files) {
            kept.push((key, generation, tls.clone()));
        }
        Ok(tls)
    }

    /// Opens an HTTP/2 `CONNECT` tunnel to `host` on this worker's pool of the cluster (see
    /// [`Upstreams::open_connect`]).
    pub async fn open_connect(
        &self,
        upstreams: &Upstreams,
        host: &Host,
        request: Request<RequestBody>,
        tls: Option<Arc<ClientTls>>,
    ) -> Result<(Response<hyper::body::Incoming>, TunnelLease), UpstreamError> {
        upstreams.open_connect(host, &self.config.resource, &self.pool, request, tls).await
    }

    /// Sends `request` to `host` on this worker's pool of the cluster, under its circuit
    /// breakers, and feeds the outcome back into the host's stats (see
    /// [`Upstreams::forward_to`]). The pool's own future, not wrapped in another: a request
    /// future holds each layer's arguments for as long as it runs.
    pub fn forward<'s>(
        &'s self,
        upstreams: &'s Upstreams,
        host: &'s Host,
        downstream_is_h2: bool,
        request: Request<RequestBody>,
        tls: Option<Arc<ClientTls>>,
    ) -> impl Future<Output = Result<Response<ResponseBody>, UpstreamError>> + 's {
        let to = Destination { host, cluster: &self.config.resource, pool: &self.pool, resources: self.resources() };
        upstreams.forward_to(to, downstream_is_h2, request, tls)
    }
}
