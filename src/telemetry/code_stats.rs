//! Counters by exact response code (`cluster.<name>.upstream_rq_200`, Prometheus
//! `envoy_cluster_upstream_rq{envoy_response_code="200"}`), created on the first response
//! with that code, as Envoy's `CodeStats` creates them: a cluster that only ever answered
//! 200 has no `upstream_rq_503`.
//!
//! The request path reads a small copy-on-write list (one atomic load and a scan of the
//! codes seen so far); only a code's first response takes the store's lock to register.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::metrics::Counter;
use super::stats::{Scope, Stats};

/// Codes outside this range are not HTTP status codes and are not counted.
const CODES: std::ops::RangeInclusive<u16> = 100..=599;

/// `<stat>_<code>` counters of one scope. `Default` counts nowhere.
#[derive(Clone, Default)]
pub struct CodeCounters(Option<Arc<Inner>>);

struct Inner {
    stats: Arc<Stats>,
    scope: Scope,
    /// `upstream_rq`: the flat name's stem and the Prometheus family's.
    stat: &'static str,
    seen: ArcSwap<Vec<(u16, Counter)>>,
}

impl std::fmt::Debug for CodeCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let codes: Vec<u16> =
            self.0.iter().flat_map(|i| i.seen.load().iter().map(|(c, _)| *c).collect::<Vec<_>>()).collect();
        f.debug_tuple("CodeCounters").field(&codes).finish()
    }
}

impl CodeCounters {
    pub fn new(stats: &Arc<Stats>, scope: Scope, stat: &'static str) -> Self {
        Self(Some(Arc::new(Inner { stats: stats.clone(), scope, stat, seen: ArcSwap::default() })))
    }

    /// Counts one response with `code`.
    pub fn charge(&self, code: u16) {
        let Some(inner) = &self.0 else { return };
        if !CODES.contains(&code) {
            return;
        }
        if let Some((_, counter)) = inner.seen.load().iter().find(|(c, _)| *c == code) {
            counter.inc();
            return;
        }
        let value = code.to_string();
        let name =
            inner.scope.name_tagged(&format!("{}_{value}", inner.stat), inner.stat, "envoy_response_code", &value);
        // Two workers seeing a new code at once get the same cell from the store.
        let counter = inner.stats.counter(name);
        counter.inc();
        inner.seen.rcu(|seen| {
            let mut next = Vec::clone(seen);
            if !next.iter().any(|(c, _)| *c == code) {
                next.push((code, counter.clone()));
            }
            next
        });
    }

    /// The count of `code` so far (0 if never seen).
    pub fn get(&self, code: u16) -> u64 {
        self.0.as_ref().and_then(|i| i.seen.load().iter().find(|(c, _)| *c == code).map(|(_, n)| n.get())).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_exists_once_answered() {
        let stats = Arc::new(Stats::default());
        let scope = Scope::envoy().child("cluster").tagged("envoy_cluster_name", "a");
        let codes = CodeCounters::new(&stats, scope, "upstream_rq");
        assert!(stats.samples().is_empty());
        codes.charge(200);
        codes.charge(200);
        codes.charge(503);
        codes.charge(1000);
        assert_eq!((codes.get(200), codes.get(503), codes.get(404)), (2, 1, 0));
        let samples = stats.samples();
        let names: Vec<_> = samples.iter().map(|(n, _)| n.flat.as_str()).collect();
        assert_eq!(names, ["cluster.a.upstream_rq_200", "cluster.a.upstream_rq_503"]);
        assert_eq!(samples[0].0.family, "envoy_cluster_upstream_rq");
        assert_eq!(samples[0].0.labels[0], ("envoy_response_code".to_owned(), "200".to_owned()));
    }
}
