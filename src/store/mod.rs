//! The served configuration: one immutable [`Snapshot`], replaced whole.
//!
//! The xDS client feeds accepted resources into a [`ConfigState`], which builds the next
//! snapshot off the hot path (applying cluster and listener warming), and [`Store::publish`]
//! swaps it in with one `ArcSwap::store`. Readers load it without locking.

mod reconcile;
mod snapshot;
mod state;

use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::watch;

pub use reconcile::reconcile_endpoints;
pub use snapshot::{Snapshot, TypeVersion, Versioned};
pub use state::{ConfigState, WarmingTimeouts};

/// Holds the current snapshot and tells watchers when it changes.
#[derive(Debug)]
pub struct Store {
    current: ArcSwap<Snapshot>,
    generation: watch::Sender<u64>,
}

impl Store {
    pub fn new(initial: Snapshot) -> Self {
        let generation = initial.generation;
        Self { current: ArcSwap::from_pointee(initial), generation: watch::Sender::new(generation) }
    }

    /// The current snapshot. Wait-free; call once per connection or request.
    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Replaces the served snapshot and wakes watchers.
    pub fn publish(&self, snapshot: Snapshot) {
        let generation = snapshot.generation;
        self.current.store(Arc::new(snapshot));
        self.generation.send_replace(generation);
    }

    /// A receiver that sees the generation of every published snapshot.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }
}
