//! Initial-fetch timers: how long start-up waits for a resource before serving without it.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::ResourceType;

/// Pending deadlines, ordered by time. One per awaited (type, name).
#[derive(Debug, Default)]
pub struct Timers {
    pending: BTreeSet<(Instant, ResourceType, String)>,
    /// Each pending timer's deadline, to stop it.
    deadlines: HashMap<(ResourceType, String), Instant>,
    armed: BTreeSet<(ResourceType, String)>,
}

impl Timers {
    /// Arms a timer for `name` unless one was armed before (a timer fires at most once:
    /// the initial fetch happens once).
    pub fn arm(&mut self, resource_type: ResourceType, name: &str, after: Duration) {
        if self.armed.insert((resource_type, name.to_owned())) {
            let at = Instant::now() + after;
            self.pending.insert((at, resource_type, name.to_owned()));
            self.deadlines.insert((resource_type, name.to_owned()), at);
        }
    }

    /// Stops the timer of `name`, if one is pending: its resource arrived.
    pub fn disarm(&mut self, resource_type: ResourceType, name: &str) {
        if self.deadlines.is_empty() {
            return;
        }
        if let Some(at) = self.deadlines.remove(&(resource_type, name.to_owned())) {
            self.pending.remove(&(at, resource_type, name.to_owned()));
        }
    }

    /// Waits for the next deadline and returns every timer due by then. Pending forever
    /// when no timer is armed.
    pub async fn fired(&mut self) -> Vec<(ResourceType, String)> {
        let Some((deadline, _, _)) = self.pending.first().cloned() else {
            return std::future::pending().await;
        };
        tokio::time::sleep_until(deadline).await;
        let now = Instant::now();
        let mut due = Vec::new();
        while let Some(first) = self.pending.first() {
            if first.0 > now {
                break;
            }
            if let Some((_, resource_type, name)) = self.pending.pop_first() {
                self.deadlines.remove(&(resource_type, name.clone()));
                due.push((resource_type, name));
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn fires_in_deadline_order_and_only_once_per_name() {
        let mut timers = Timers::default();
        timers.arm(ResourceType::ClusterLoadAssignment, "b", Duration::from_secs(15));
        timers.arm(ResourceType::ClusterLoadAssignment, "a", Duration::from_secs(5));
        timers.arm(ResourceType::ClusterLoadAssignment, "a", Duration::from_secs(1)); // already armed
        let start = Instant::now();
        assert_eq!(timers.fired().await, vec![(ResourceType::ClusterLoadAssignment, "a".to_owned())]);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert_eq!(timers.fired().await, vec![(ResourceType::ClusterLoadAssignment, "b".to_owned())]);
        assert_eq!(start.elapsed(), Duration::from_secs(15));
        timers.arm(ResourceType::ClusterLoadAssignment, "a", Duration::from_secs(1));
        let nothing = tokio::time::timeout(Duration::from_secs(3600), timers.fired()).await;
        assert!(nothing.is_err(), "a name's initial fetch times out once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_whose_resource_arrived_never_fires() {
        let mut timers = Timers::default();
        timers.arm(ResourceType::RouteConfiguration, "80", Duration::from_secs(15));
        timers.arm(ResourceType::ClusterLoadAssignment, "a", Duration::from_secs(15));
        timers.disarm(ResourceType::RouteConfiguration, "80");
        timers.disarm(ResourceType::RouteConfiguration, "never armed");
        assert_eq!(timers.fired().await, vec![(ResourceType::ClusterLoadAssignment, "a".to_owned())]);
        let nothing = tokio::time::timeout(Duration::from_secs(3600), timers.fired()).await;
        assert!(nothing.is_err(), "the arrived resource's timer was stopped");
    }
}
