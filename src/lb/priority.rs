//! Priority levels, overprovisioning and panic, as Envoy computes them
//! (`LoadBalancerBase::recalculatePerPriorityState`, `recalculatePerPriorityPanic`,
//! `recalculateLoadInTotalPanic`, `choosePriority`).
//!
//! A level's health is `min(100, overprovisioning × healthy / total)` percent; load fills
//! levels in order (healthy first, then degraded) normalised by the total availability; a
//! level whose healthy + degraded share is under the panic threshold is in panic and
//! balances over all its hosts; when every level panics, load follows raw host counts.

/// Host counts of one priority level (or weights, with `weighted_priority_health`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LevelCounts {
    pub healthy: u64,
    pub degraded: u64,
    pub total: u64,
}

/// Per-level load in percent (healthy and degraded columns sum to 100 together) and
/// panic flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriorityLoad {
    pub healthy: Vec<u32>,
    pub degraded: Vec<u32>,
    pub panic: Vec<bool>,
}

/// Which of a level's host lists a pick uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Healthy,
    Degraded,
}

impl PriorityLoad {
    /// Computes loads and panic flags. `overprovisioning` is in percent (140 = 1.4),
    /// `panic_threshold` in percent (0 disables panic).
    pub fn compute(levels: &[LevelCounts], overprovisioning: u32, panic_threshold: f64) -> Self {
        let n = levels.len().max(1);
        let mut load = PriorityLoad { healthy: vec![0; n], degraded: vec![0; n], panic: vec![false; n] };
        let share = |count: u64, total: u64| -> u32 {
            (u64::from(overprovisioning) * count).checked_div(total).map_or(0, |share| share.min(100) as u32)
        };
        let health: Vec<u32> = levels.iter().map(|l| share(l.healthy, l.total)).collect();
        let degraded: Vec<u32> = levels.iter().map(|l| share(l.degraded, l.total)).collect();
        let availability = health.iter().chain(&degraded).sum::<u32>().min(100);

        if availability > 0 {
            let (first_healthy, remaining) = distribute(&mut load.healthy, &health, 100, availability);
            let (first_degraded, remaining) = distribute(&mut load.degraded, &degraded, remaining, availability);
            // Rounding leaves a few percent: Envoy gives them to the first level with load.
            if remaining > 0 {
                match (first_healthy, first_degraded) {
                    (Some(p), _) => load.healthy[p] += remaining,
                    (None, Some(p)) => load.degraded[p] += remaining,
                    (None, None) => {}
                }
            }
        }

        if panic_threshold <= 0.0 {
            if availability == 0 {
                // Nothing is healthy and panic is off: all load to P0, which has no
                // healthy host to give; the pick fails as Envoy's does.
                load.healthy[0] = 100;
            }
            return load;
        }
        for (i, level) in levels.iter().enumerate() {
            let usable = if level.total == 0 {
                0.0
            } else {
                100.0 * (level.healthy + level.degraded) as f64 / level.total as f64
            };
            load.panic[i] = availability < 100 && usable < panic_threshold;
        }
        if levels.is_empty() || load.panic.iter().all(|p| *p) {
            load.split_by_host_count(levels);
        }
        load
    }

    /// Total panic: load proportional to each level's host count, regardless of health.
    fn split_by_host_count(&mut self, levels: &[LevelCounts]) {
        let total: u64 = levels.iter().map(|l| l.total).sum();
        self.degraded.iter_mut().for_each(|d| *d = 0);
        if total == 0 {
            self.healthy.iter_mut().for_each(|h| *h = 0);
            self.healthy[0] = 100;
            return;
        }
        let mut remaining = 100u32;
        let mut first = None;
        for (i, level) in levels.iter().enumerate() {
            if first.is_none() && level.total > 0 {
                first = Some(i);
            }
            let share = (100 * level.total / total) as u32;
            self.healthy[i] = share;
            remaining -= share;
        }
        if let Some(first) = first {
            self.healthy[first] += remaining;
        }
    }

    /// Chooses a level from a number in any range (`hash % 100 + 1` walks the cumulative
    /// healthy loads, then the degraded ones).
    pub fn choose(&self, hash: u64) -> (usize, Availability) {
        let point = (hash % 100 + 1) as u32;
        let mut cumulative = 0;
        for (i, load) in self.healthy.iter().enumerate() {
            cumulative += load;
            if point <= cumulative {
                return (i, Availability::Healthy);
            }
        }
        for (i, load) in self.degraded.iter().enumerate() {
            cumulative += load;
            if point <= cumulative {
                return (i, Availability::Degraded);
            }
        }
        (0, Availability::Healthy)
    }
}

/// Envoy's `distributeLoad`: each level takes `availability × 100 / total` of what is left.
fn distribute(out: &mut [u32], availability: &[u32], mut total: u32, normalized: u32) -> (Option<usize>, u32) {
    let mut first = None;
    for (i, a) in availability.iter().enumerate() {
        if first.is_none() && *a > 0 {
            first = Some(i);
        }
        out[i] = (a * 100 / normalized).min(total);
        total -= out[i];
    }
    (first, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(healthy: u64, degraded: u64, total: u64) -> LevelCounts {
        LevelCounts { healthy, degraded, total }
    }

    #[test]
    fn a_healthy_first_level_takes_everything() {
        let load = PriorityLoad::compute(&[level(4, 0, 4), level(4, 0, 4)], 140, 50.0);
        assert_eq!(load.healthy, [100, 0]);
        assert_eq!(load.panic, [false, false]);
    }

    #[test]
    fn overprovisioning_keeps_load_until_below_71_percent() {
        // 3 of 4 healthy: 140 × 0.75 = 105 → capped at 100, no spill.
        assert_eq!(PriorityLoad::compute(&[level(3, 0, 4), level(4, 0, 4)], 140, 50.0).healthy, [100, 0]);
        // 2 of 4 healthy: 70 % stays, 30 % spills to P1.
        assert_eq!(PriorityLoad::compute(&[level(2, 0, 4), level(4, 0, 4)], 140, 50.0).healthy, [70, 30]);
    }

    #[test]
    fn degraded_hosts_take_what_healthy_ones_cannot() {
        let load = PriorityLoad::compute(&[level(1, 2, 4)], 140, 50.0);
        assert_eq!(load.healthy, [35]);
        assert_eq!(load.degraded, [65]);
        assert_eq!(load.choose(34), (0, Availability::Healthy));
        assert_eq!(load.choose(35), (0, Availability::Degraded));
    }

    #[test]
    fn panic_below_the_threshold_unless_the_total_is_full() {
        // P0: 1 of 4 healthy (25 % < 50 %) but P1 covers everything: no panic.
        let covered = PriorityLoad::compute(&[level(1, 0, 4), level(4, 0, 4)], 140, 50.0);
        assert_eq!(covered.panic, [false, false]);
        // Alone, 1 of 4 is panic: all hosts are used.
        let alone = PriorityLoad::compute(&[level(1, 0, 4)], 140, 50.0);
        assert_eq!(alone.panic, [true]);
        assert_eq!(alone.healthy, [100]);
    }

    #[test]
    fn total_panic_splits_by_host_count() {
        let load = PriorityLoad::compute(&[level(0, 0, 2), level(0, 0, 6)], 140, 50.0);
        assert_eq!(load.panic, [true, true]);
        assert_eq!(load.healthy, [25, 75]);
    }

    #[test]
    fn panic_disabled_with_nothing_healthy_sends_to_p0() {
        let load = PriorityLoad::compute(&[level(0, 0, 2)], 140, 0.0);
        assert_eq!(load.panic, [false]);
        assert_eq!(load.healthy, [100]);
    }
}
