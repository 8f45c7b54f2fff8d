//! Where each filter chain's runtime is built and kept: once per configuration (a
//! connection manager, a filter chain's network filters), shared by every worker, dropped
//! when the configuration is. Looked up once per connection, never per request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use super::http::{FactoryContext, HttpFilterChain};
use super::network::NetworkFilterChain;
use crate::config::filters::NetworkFilter;
use crate::config::filters::peer_metadata::LocalNode;
use crate::config::listener::HttpConnectionManager;
use crate::store::WorkloadIndex;
use crate::telemetry::Stats;

/// The runtime of every filter chain in use, by the address of its configuration.
#[derive(Default)]
pub struct FilterChains {
    stats: Arc<Stats>,
    node: Arc<LocalNode>,
    workloads: Option<Arc<WorkloadIndex>>,
    http: Mutex<Cache<HttpConnectionManager, HttpFilterChain>>,
    network: Mutex<Cache<[NetworkFilter], NetworkFilterChain>>,
}

impl std::fmt::Debug for FilterChains {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilterChains").finish_non_exhaustive()
    }
}

impl FilterChains {
    pub fn new(stats: Arc<Stats>) -> Self {
        Self { stats, ..Self::default() }
    }

    /// The node filters announce (Istio's metadata exchange) and report as (`istio.stats`).
    pub fn with_node(self, node: Arc<LocalNode>) -> Self {
        Self { node, ..self }
    }

    /// Where peers without metadata headers are looked up by address.
    pub fn with_workloads(self, workloads: Option<Arc<WorkloadIndex>>) -> Self {
        Self { workloads, ..self }
    }

    pub fn node(&self) -> &LocalNode {
        &self.node
    }

    /// The HTTP filters of `manager` of an outbound (or undirected) listener, built on
    /// first use.
    pub fn http(&self, manager: &Arc<HttpConnectionManager>) -> Arc<HttpFilterChain> {
        self.http_of(manager, false)
    }

    /// The HTTP filters of `manager`, whose listener is `inbound` or not (a connection
    /// manager belongs to one listener, so this is fixed per manager).
    pub fn http_of(&self, manager: &Arc<HttpConnectionManager>, inbound: bool) -> Arc<HttpFilterChain> {
        let factory = FactoryContext {
            stats: &self.stats,
            stat_prefix: &manager.stat_prefix,
            filter_name: "",
            node: &self.node,
            workloads: self.workloads.as_ref(),
            inbound,
        };
        lock(&self.http).get_or_build(manager, || HttpFilterChain::build(&manager.http_filters, factory))
    }

    /// The network filters of a filter chain, built on first use. `stat_prefix` is unused
    /// by the chain itself; each filter has its own.
    pub fn network(&self, filters: &Arc<[NetworkFilter]>) -> Arc<NetworkFilterChain> {
        self.network_of(filters, false)
    }

    /// [`network`](Self::network) of a listener that is `inbound` or not.
    pub fn network_of(&self, filters: &Arc<[NetworkFilter]>, inbound: bool) -> Arc<NetworkFilterChain> {
        let factory = FactoryContext {
            stats: &self.stats,
            stat_prefix: "",
            filter_name: "",
            node: &self.node,
            workloads: self.workloads.as_ref(),
            inbound,
        };
        lock(&self.network).get_or_build(filters, || NetworkFilterChain::build(filters, factory))
    }
}

/// A poisoned lock only means another worker panicked while building; the map is still
/// consistent (an insert is the last step), so go on with it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runtimes by configuration address; an entry whose configuration is gone is dropped
/// when another is added.
struct Cache<K: ?Sized, V> {
    entries: HashMap<usize, (Weak<K>, Arc<V>)>,
}

impl<K: ?Sized, V> Default for Cache<K, V> {
    fn default() -> Self {
        Self { entries: HashMap::new() }
    }
}

impl<K: ?Sized, V> Cache<K, V> {
    fn get_or_build(&mut self, key: &Arc<K>, build: impl FnOnce() -> V) -> Arc<V> {
        let address = Arc::as_ptr(key).cast::<()>() as usize;
        if let Some((weak, value)) = self.entries.get(&address)
            && weak.upgrade().is_some_and(|live| Arc::ptr_eq(&live, key))
        {
            return value.clone();
        }
        self.entries.retain(|_, (weak, _)| weak.strong_count() > 0);
        let value = Arc::new(build());
        self.entries.insert(address, (Arc::downgrade(key), value.clone()));
        value
    }
}
