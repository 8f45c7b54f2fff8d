//! A worker's way to the upstream clusters, as Envoy's thread-local cluster manager is: the
//! published clusters, their balancers with this worker's pickers, its connection pools
//! and upstream TLS. The router, the TCP proxy, filters' callouts, shadows and the gRPC
//! access loggers all reach a cluster through it.
//!
//! It uses none of them: a filter's callout borrows it for a request and a logger's
//! stream keeps a weak handle to it, while the worker's context holds both the filters and
//! the loggers' buffers.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;

use http::HeaderMap;

use super::original_dst::upstream_destination;
use super::transport::WorkerTls;
use super::upstream::Upstreams;
use crate::config::Cluster;
use crate::lb::{Balancers, Host, PickContext, WorkerPickers};
use crate::store::Store;

/// One worker's means of reaching any cluster. Not `Send`: it never leaves its thread.
pub struct WorkerClusters {
    pub store: Arc<Store>,
    pub balancers: Arc<Balancers>,
    /// This worker's cursors over the published balancers.
    pub pickers: RefCell<WorkerPickers>,
    /// This worker's connection pools.
    pub upstreams: Upstreams,
    /// The worker's TLS cache and handshake counts, for upstream connections and for the
    /// worker's listeners alike.
    pub tls: WorkerTls,
}

impl WorkerClusters {
    /// Picks the upstream host of `cluster`: the host of the destination for an
    /// ORIGINAL_DST cluster (see [`upstream_destination`]), else by the cluster's balancer.
    pub fn pick_host(
        &self,
        cluster: &Cluster,
        ctx: &PickContext<'_>,
        restored: Option<SocketAddr>,
        headers: Option<&HeaderMap>,
    ) -> Option<Arc<Host>> {
        let mut pickers = self.pickers.borrow_mut();
        match &cluster.original_dst {
            Some(config) => {
                let destination = upstream_destination(config, restored, headers)?;
                pickers.pick_destination(&self.balancers, &cluster.name, destination, ctx.now)
            }
            None => pickers.pick(&self.balancers, &cluster.name, ctx),
        }
    }
}
