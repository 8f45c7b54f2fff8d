//! The served configuration: one immutable [`Snapshot`], replaced whole.
//!
//! The xDS client feeds accepted resources into a [`ConfigState`], which builds the next
//! snapshot off the hot path (applying cluster and listener warming), and [`Store::publish`]
//! swaps it in with one `ArcSwap::store`. Readers load it without locking. Each snapshot
//! says what changed since the previous one ([`Changes`]); the store keeps the latest
//! records so a watcher that skipped generations gets their union.

mod changes;
mod raw;
mod reconcile;
mod snapshot;
mod state;
mod workloads;

use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;
use tokio::sync::watch;

pub use raw::Raw;
pub use reconcile::reconcile_endpoints;
pub use snapshot::{Changes, Resources, Snapshot, TypeVersion, Versioned};
pub use state::{ConfigState, WarmingTimeouts};
pub use workloads::{WORKLOAD_TYPE, WorkloadIndex};

/// Holds the current snapshot and tells watchers when it changes.
#[derive(Debug)]
pub struct Store {
    current: ArcSwap<Snapshot>,
    generation: watch::Sender<u64>,
    history: Mutex<changes::History>,
}

impl Store {
    pub fn new(initial: Snapshot) -> Self {
        let generation = initial.generation;
        Self {
            current: ArcSwap::from_pointee(initial),
            generation: watch::Sender::new(generation),
            history: Mutex::default(),
        }
    }

    /// The current snapshot. Wait-free; call once per connection or request.
    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Replaces the served snapshot and wakes watchers.
    pub fn publish(&self, snapshot: Snapshot) {
        let generation = snapshot.generation;
        self.history().record(generation, snapshot.changes.clone());
        self.current.store(Arc::new(snapshot));
        self.generation.send_replace(generation);
    }

    /// A receiver that sees the generation of every published snapshot.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// What changed after generation `from` up to `to` (the union over the generations in
    /// between); `None` when that is not known, and everything must be compared.
    pub fn changes_since(&self, from: u64, to: u64) -> Option<Changes> {
        self.history().since(from, to)
    }

    fn history(&self) -> MutexGuard<'_, changes::History> {
        // The history holds plain data: a panic elsewhere leaves it usable.
        self.history.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
