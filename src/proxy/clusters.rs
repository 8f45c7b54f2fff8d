//! A worker's way to the upstream clusters, as Envoy's thread-local cluster manager is: the
//! published clusters, their balancers with this worker's pickers, its connection pools
//! and upstream TLS. The router, the TCP proxy, filters' callouts, shadows and the gRPC
//! access loggers all reach a cluster through it.
//!
//! It uses none of them: a filter's callout borrows it for a request and a logger's
//! stream keeps a weak handle to it, while the worker's context holds both the filters and
//! the loggers' buffers.

mod thread_local;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use super::transport::WorkerTls;
use super::upstream::Upstreams;
use crate::core::hash::FastMap;
use crate::lb::Balancers;
use crate::store::{Snapshot, Store};

pub use thread_local::ThreadLocalCluster;

/// One worker's means of reaching any cluster. Not `Send`: it never leaves its thread.
pub struct WorkerClusters {
    pub store: Arc<Store>,
    pub balancers: Arc<Balancers>,
    /// This worker's connection pools.
    pub upstreams: Upstreams,
    /// The worker's TLS cache and handshake counts, for upstream connections and for the
    /// worker's listeners alike.
    pub tls: WorkerTls,
    /// The clusters this worker has sent traffic to, as last resolved.
    locals: RefCell<FastMap<String, Rc<ThreadLocalCluster>>>,
    /// The next picker's seed: pickers of one worker (and of different workers) do not
    /// move in lockstep.
    seed: Cell<u64>,
}

impl WorkerClusters {
    pub fn new(store: Arc<Store>, balancers: Arc<Balancers>, upstreams: Upstreams, tls: WorkerTls, seed: u64) -> Self {
        Self { store, balancers, upstreams, tls, locals: RefCell::default(), seed: Cell::new(seed) }
    }

    /// The cluster `name` of `snapshot` as this worker reaches it; `None` when the snapshot
    /// has no such cluster. While neither a configuration nor a balancer was published
    /// since it was last resolved, this is one look-up in the worker's own map (no lock,
    /// no shared write). After a publication it is checked again: the cluster and its
    /// balancer are compared by pointer, and a new [`ThreadLocalCluster`] is made only
    /// when one of them was replaced (its picker's state carries over).
    pub fn get(&self, snapshot: &Snapshot, name: &str) -> Option<Rc<ThreadLocalCluster>> {
        let seen = (snapshot.generation, self.balancers.publications());
        let mut locals = self.locals.borrow_mut();
        let known = locals.get(name);
        if let Some(local) = known
            && local.seen.get() == seen
        {
            return Some(local.clone());
        }
        let Some(config) = snapshot.clusters.get(name) else {
            locals.remove(name); // the cluster left: its pools are drained by the worker
            return None;
        };
        let balancer = self.balancers.get(name);
        if let Some(local) = known
            && local.is(config, balancer.as_ref())
        {
            local.seen.set(seen);
            return Some(local.clone());
        }
        let seed = self.seed.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        self.seed.set(seed);
        let pool = self.upstreams.pool(name);
        let local = Rc::new(ThreadLocalCluster::new(config.clone(), balancer, pool, known.map(|l| &**l), seed, seen));
        locals.insert(name.to_owned(), local.clone());
        Some(local)
    }

    /// Forgets the clusters `snapshot` no longer has, of `names` (those that changed since
    /// the snapshot applied last) or of all when `names` is `None`.
    pub fn forget_removed<'a>(&self, snapshot: &Snapshot, names: Option<impl Iterator<Item = &'a String>>) {
        let mut locals = self.locals.borrow_mut();
        match names {
            Some(names) => {
                for name in names {
                    if !snapshot.clusters.contains_key(name.as_str()) {
                        locals.remove(name.as_str());
                    }
                }
            }
            None => locals.retain(|name, _| snapshot.clusters.contains_key(name.as_str())),
        }
    }
}
