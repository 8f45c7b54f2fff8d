//! The connection limit filter at run time: one counter per filter (listener, chain,
//! position), shared by every worker, so that `max_connections` holds for the listener as
//! a whole, as Envoy's filter config is shared by its workers. Stats:
//! `connection_limit.<stat_prefix>.active_connections` and `limited_connections`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::listener::ConnectionLimit;
use crate::telemetry::{Counter, Gauge, Scope, Stats};

/// Which filter: listener name, filter chain name, index among the chain's limits.
type Key = (String, String, usize);

/// Every worker's view of the limits. Created once for all workers.
#[derive(Debug, Default)]
pub struct ConnectionLimits {
    stats: Arc<Stats>,
    counters: Mutex<HashMap<Key, Arc<LimitCounter>>>,
}

impl ConnectionLimits {
    pub fn new(stats: Arc<Stats>) -> Self {
        Self { stats, counters: Mutex::default() }
    }

    fn counter(&self, key: &Key, limit: &ConnectionLimit) -> Arc<LimitCounter> {
        // Taken once per filter and worker (then cached by the worker): never per connection.
        let mut counters = self.counters.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        counters.entry(key.clone()).or_insert_with(|| Arc::new(LimitCounter::register(&self.stats, limit))).clone()
    }
}

/// One worker's cache of the shared counters.
#[derive(Debug)]
pub struct WorkerLimits {
    shared: Arc<ConnectionLimits>,
    cached: RefCell<HashMap<Key, Arc<LimitCounter>>>,
}

impl WorkerLimits {
    pub fn new(shared: Arc<ConnectionLimits>) -> Self {
        Self { shared, cached: RefCell::default() }
    }

    /// Admits a connection through every limit of a filter chain, or says which refused it.
    pub fn admit<'a>(
        &self,
        listener: &str,
        chain: &str,
        limits: &'a [ConnectionLimit],
    ) -> Result<Vec<Admitted>, &'a ConnectionLimit> {
        let mut admitted = Vec::with_capacity(limits.len());
        for (i, limit) in limits.iter().enumerate() {
            let key = (listener.to_owned(), chain.to_owned(), i);
            let counter = self.cached.borrow().get(&key).cloned();
            let counter = counter.unwrap_or_else(|| {
                let counter = self.shared.counter(&key, limit);
                self.cached.borrow_mut().insert(key, counter.clone());
                counter
            });
            match counter.try_admit(limit.max_connections) {
                Some(one) => admitted.push(one),
                None => return Err(limit),
            }
        }
        Ok(admitted)
    }
}

#[derive(Debug)]
struct LimitCounter {
    connections: AtomicU64,
    active_connections: Gauge,
    limited_connections: Counter,
}

impl LimitCounter {
    fn register(stats: &Stats, limit: &ConnectionLimit) -> Self {
        let scope =
            Scope::envoy().child("connection_limit").tagged("envoy_connection_limit_prefix", &limit.stat_prefix);
        Self {
            connections: AtomicU64::new(0),
            active_connections: stats.gauge(scope.name("active_connections")),
            limited_connections: stats.counter(scope.name("limited_connections")),
        }
    }

    /// One more connection, unless `max` are open.
    fn try_admit(self: &Arc<Self>, max: u64) -> Option<Admitted> {
        let admitted =
            self.connections.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1));
        match admitted {
            Ok(_) => {
                self.active_connections.inc();
                Some(Admitted(self.clone()))
            }
            Err(_) => {
                self.limited_connections.inc();
                None
            }
        }
    }
}

/// A connection counted by one limit until it drops.
#[derive(Debug)]
pub struct Admitted(Arc<LimitCounter>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::AcqRel);
        self.0.active_connections.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_shared_by_workers_and_released_on_drop() {
        let stats = Arc::new(Stats::default());
        let shared = Arc::new(ConnectionLimits::new(stats.clone()));
        let (a, b) = (WorkerLimits::new(shared.clone()), WorkerLimits::new(shared));
        let limits = [ConnectionLimit { stat_prefix: "in".into(), max_connections: 2, delay: None }];
        let first = a.admit("l", "c", &limits).unwrap();
        let second = b.admit("l", "c", &limits).unwrap();
        assert!(a.admit("l", "c", &limits).is_err());
        assert!(b.admit("l", "other-chain", &limits).is_ok());
        drop(first);
        assert!(b.admit("l", "c", &limits).is_ok());
        drop(second);
        let limited = stats.samples().into_iter().find(|(n, _)| n.flat == "connection_limit.in.limited_connections");
        assert_eq!(limited.map(|(_, v)| v), Some(crate::telemetry::Value::Counter(1)));
    }
}
