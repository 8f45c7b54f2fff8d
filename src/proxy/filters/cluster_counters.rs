//! Counters under `cluster.<route's cluster>.…` that filters charge per request. The stats
//! store forgets a counter nobody holds, so they are kept here, by name; and since a
//! `cluster_header` route takes its cluster from the client, only so many are kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::telemetry::{Counter, StatName, Stats};

/// More distinct names than this are not counted (a client naming clusters at will must
/// not grow the proxy's memory).
const MAX_COUNTERS: usize = 4096;

pub struct ClusterCounters {
    store: Arc<Stats>,
    counters: Mutex<HashMap<String, Counter>>,
}

impl ClusterCounters {
    pub fn new(store: Arc<Stats>) -> Self {
        Self { store, counters: Mutex::new(HashMap::new()) }
    }

    pub fn inc(&self, name: StatName) {
        let mut counters = self.counters.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(counter) = counters.get(&name.flat) {
            counter.inc();
            return;
        }
        if counters.len() >= MAX_COUNTERS {
            return;
        }
        let flat = name.flat.clone();
        let counter = self.store.counter(name);
        counter.inc();
        counters.insert(flat, counter);
    }
}
