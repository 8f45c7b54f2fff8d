//! Earliest-deadline-first scheduling, Envoy's weighted round robin
//! (`source/common/upstream/edf_scheduler.h`): each entry's next deadline is the current
//! virtual time plus 1/weight; the smallest deadline is picked (ties in insertion order)
//! and re-inserted with its weight computed at that moment, which is how slow start and
//! least-request's active-request bias take effect.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

#[derive(Debug, Clone, Copy)]
struct Entry {
    deadline: f64,
    /// Insertion order: breaks deadline ties first-in first-out.
    order: u64,
    index: usize,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest deadline must come out first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.deadline.total_cmp(&self.deadline).then_with(|| other.order.cmp(&self.order))
    }
}

/// A per-worker EDF scheduler over indices `0..n`.
#[derive(Debug, Clone, Default)]
pub struct Edf {
    heap: BinaryHeap<Entry>,
    now: f64,
    order: u64,
}

impl Edf {
    /// A scheduler over `weights` (each > 0), after `skip` picks: starting every worker
    /// at a different point is Envoy's fix for the start-up skew of #31378, where every
    /// proxy sent its first requests to the same heavy host.
    pub fn new(weights: impl Iterator<Item = f64>, skip: usize, mut weight_now: impl FnMut(usize) -> f64) -> Self {
        let mut edf = Edf::default();
        for (index, weight) in weights.enumerate() {
            edf.push(index, weight);
        }
        for _ in 0..skip {
            edf.next(&mut weight_now);
        }
        edf
    }

    fn push(&mut self, index: usize, weight: f64) {
        let weight = if weight.is_finite() && weight > 0.0 { weight } else { f64::MIN_POSITIVE };
        self.heap.push(Entry { deadline: self.now + 1.0 / weight, order: self.order, index });
        self.order += 1;
    }

    /// The next index; it is re-inserted with `weight_now(index)`.
    pub fn next(&mut self, weight_now: &mut impl FnMut(usize) -> f64) -> Option<usize> {
        let entry = self.heap.pop()?;
        self.now = entry.deadline;
        self.push(entry.index, weight_now(entry.index));
        Some(entry.index)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_in_proportion_to_weight() {
        let weights = [1.0, 2.0, 5.0];
        let mut edf = Edf::new(weights.iter().copied(), 0, |i| weights[i]);
        let mut counts = [0; 3];
        for _ in 0..800 {
            counts[edf.next(&mut |i| weights[i]).unwrap_or(0)] += 1;
        }
        assert_eq!(counts, [100, 200, 500]);
    }

    #[test]
    fn the_heavy_host_does_not_take_the_whole_start() {
        let weights = [100.0, 10.0];
        let mut edf = Edf::new(weights.iter().copied(), 0, |i| weights[i]);
        let first: Vec<_> = (0..22).map(|_| edf.next(&mut |i| weights[i]).unwrap_or(9)).collect();
        assert_eq!(first.iter().filter(|i| **i == 1).count(), 2, "{first:?}");
    }
}
