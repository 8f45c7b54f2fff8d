//! Counters under `cluster.<route's cluster>.…` that filters charge per request. The stats
//! store forgets a counter nobody holds, so they are kept here, by name; and since a
//! `cluster_header` route takes its cluster from the client, only so many are kept.

use std::sync::Arc;

use crate::core::cow_map::CowMap;
use crate::telemetry::{Counter, StatName, Stats};

/// More distinct names than this are not counted (a client naming clusters at will must
/// not grow the proxy's memory).
const MAX_COUNTERS: usize = 4096;

pub struct ClusterCounters {
    store: Arc<Stats>,
    /// Read without a lock by every worker; written when a name is first counted.
    counters: CowMap<String, Counter>,
}

impl ClusterCounters {
    pub fn new(store: Arc<Stats>) -> Self {
        Self { store, counters: CowMap::default() }
    }

    pub fn inc(&self, name: StatName) {
        if self.counters.read(|counters| counters.get(&name.flat).map(Counter::inc)).is_some() {
            return;
        }
        if self.counters.len() >= MAX_COUNTERS {
            return;
        }
        let flat = name.flat.clone();
        // The store gives every caller the same cell for a name: a racing worker's copy
        // counts into it too.
        let counter = self.store.counter(name);
        counter.inc();
        self.counters.update(|counters| {
            counters.entry(flat.clone()).or_insert_with(|| counter.clone());
        });
    }
}
