//! The change record each published snapshot carries: which served names differ from the
//! previous generation, so that whoever follows the configuration (the balancing task,
//! workers) does work for what changed instead of comparing everything.

use std::collections::{BTreeSet, VecDeque};

/// Names whose served entry was added, replaced or removed between generation `since` and
/// the snapshot that carries this record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// The generation these changes are relative to; `None`: unknown, compare everything.
    pub since: Option<u64>,
    /// Served clusters whose `Cluster` changed (or that appeared or left).
    pub clusters: BTreeSet<String>,
    /// Served clusters whose endpoints changed (or that appeared or left).
    pub endpoints: BTreeSet<String>,
    pub listeners: BTreeSet<String>,
    pub routes: BTreeSet<String>,
    pub secrets: BTreeSet<String>,
}

impl Changes {
    /// Clusters whose balancer may differ: their cluster or their endpoints changed.
    pub fn balanced_clusters(&self) -> impl Iterator<Item = &String> {
        let more = self.endpoints.iter().filter(|n| !self.clusters.contains(*n));
        self.clusters.iter().chain(more)
    }

    pub fn is_empty(&self) -> bool {
        self.clusters.is_empty()
            && self.endpoints.is_empty()
            && self.listeners.is_empty()
            && self.routes.is_empty()
            && self.secrets.is_empty()
    }

    fn absorb(&mut self, other: &Changes) {
        self.clusters.extend(other.clusters.iter().cloned());
        self.endpoints.extend(other.endpoints.iter().cloned());
        self.listeners.extend(other.listeners.iter().cloned());
        self.routes.extend(other.routes.iter().cloned());
        self.secrets.extend(other.secrets.iter().cloned());
    }
}

/// How many generations of change records the store keeps for subscribers that skipped
/// some (a watch channel shows only the latest). One further behind compares everything.
const KEPT: usize = 256;

/// The change records of the latest generations, oldest first.
#[derive(Debug, Default)]
pub(super) struct History {
    records: VecDeque<(u64, std::sync::Arc<Changes>)>,
}

impl History {
    pub(super) fn record(&mut self, generation: u64, changes: std::sync::Arc<Changes>) {
        if self.records.len() == KEPT {
            self.records.pop_front();
        }
        self.records.push_back((generation, changes));
    }

    /// Everything that changed after generation `from` up to `to`, or `None` when a record
    /// in between is missing or says nothing (the caller then compares everything).
    pub(super) fn since(&self, from: u64, to: u64) -> Option<Changes> {
        let mut union = Changes { since: Some(from), ..Changes::default() };
        if from == to {
            return Some(union);
        }
        let start = self.records.iter().position(|(generation, _)| *generation > from)?;
        let mut expected = from;
        for (generation, changes) in self.records.iter().skip(start) {
            if *generation > to {
                break;
            }
            if changes.since != Some(expected) {
                return None;
            }
            union.absorb(changes);
            expected = *generation;
        }
        (expected == to).then_some(union)
    }
}
