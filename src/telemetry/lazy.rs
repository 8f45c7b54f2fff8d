//! Stats registered on first use, as Envoy creates a cluster's `upstream_rq_2xx` and
//! `upstream_rq_time` on its first response: a cluster that never served a request has
//! none of them, which at thousands of clusters is most of the series.
//!
//! The request path pays one `OnceLock` read once the cell exists.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::metrics::{Counter, Histogram};
use super::stats::{StatName, Stats};

/// A cell of kind `T` named `name`, registered in `stats` the first time it is used.
/// `Default` counts nowhere.
pub struct Lazy<T>(Option<Arc<Pending<T>>>);

struct Pending<T> {
    stats: Arc<Stats>,
    name: StatName,
    register: fn(&Stats, StatName) -> T,
    cell: OnceLock<T>,
}

pub type LazyCounter = Lazy<Counter>;
pub type LazyHistogram = Lazy<Histogram>;

impl<T> Clone for Lazy<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> Default for Lazy<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<T> std::fmt::Debug for Lazy<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.0.as_ref().map(|p| (p.name.flat.as_str(), p.cell.get().is_some()));
        f.debug_tuple("Lazy").field(&name).finish()
    }
}

impl<T: Clone> Lazy<T> {
    fn new(stats: &Arc<Stats>, name: StatName, register: fn(&Stats, StatName) -> T) -> Self {
        // A name the stats matcher rejects would never be registered: keep nothing for it
        // (its name is most of what a pending stat holds, thousands of clusters over).
        if !stats.accepts(&name.flat) {
            return Self(None);
        }
        Self(Some(Arc::new(Pending { stats: stats.clone(), name, register, cell: OnceLock::new() })))
    }

    /// The cell, registered now if it was not yet.
    pub fn cell(&self) -> Option<&T> {
        let pending = self.0.as_ref()?;
        Some(pending.cell.get_or_init(|| (pending.register)(&pending.stats, pending.name.clone())))
    }

    /// The cell if it was ever used.
    fn existing(&self) -> Option<&T> {
        self.0.as_ref()?.cell.get()
    }
}

impl Lazy<Counter> {
    pub fn counter(stats: &Arc<Stats>, name: StatName) -> Self {
        Self::new(stats, name, Stats::counter)
    }

    pub fn inc(&self) {
        if let Some(counter) = self.cell() {
            counter.inc();
        }
    }

    /// The count so far (0 when never used).
    pub fn get(&self) -> u64 {
        self.existing().map_or(0, Counter::get)
    }
}

impl Lazy<Histogram> {
    pub fn histogram(stats: &Arc<Stats>, name: StatName) -> Self {
        Self::new(stats, name, Stats::histogram)
    }

    pub fn record(&self, elapsed: Duration) {
        if let Some(histogram) = self.cell() {
            histogram.record(elapsed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::Scope;

    #[test]
    fn registered_on_first_use_only() {
        let stats = Arc::new(Stats::default());
        let counter = LazyCounter::counter(&stats, Scope::envoy().name("a"));
        let histogram = LazyHistogram::histogram(&stats, Scope::envoy().name("b"));
        assert!(stats.samples().is_empty());
        assert_eq!(counter.get(), 0);
        counter.inc();
        histogram.record(Duration::from_millis(1));
        assert_eq!(counter.get(), 1);
        assert_eq!(stats.samples().len(), 2);
        LazyCounter::default().inc();
    }

    #[test]
    fn a_name_the_matcher_rejects_keeps_nothing() {
        let stats = Arc::new(Stats::with_matcher(|flat| flat.starts_with("cluster.")));
        let counter = LazyCounter::counter(&stats, Scope::envoy().name("cluster.a.upstream_rq_2xx"));
        assert!(counter.0.is_none());
        counter.inc();
        assert_eq!(counter.get(), 0);
        assert!(stats.samples().is_empty());
    }
}
