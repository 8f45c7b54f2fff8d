//! The overload manager's state as workers read it: the scale (0 to 1) of each action and
//! load-shed point, set by the refresh loop (`control::overload`) from the monitors' pressure,
//! and the global count of downstream connections against its limit.
//!
//! Workers only load atomics (and accept loops, which `stop_accepting_connections` must
//! wake, watch a channel): no lock on the request or accept path.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use tokio::sync::watch;

use crate::config::overload::{ActionKind, LoadShedKind, OverloadConfig, Trigger, TriggerKind};
use crate::telemetry::stats::Scope;
use crate::telemetry::{Counter, Stats};

/// Shared by every worker and the refresh loop.
#[derive(Debug)]
pub struct OverloadState {
    config: OverloadConfig,
    /// Each action's scale, as `f32` bits, by its position in [`ActionKind::ALL`].
    actions: [AtomicU32; ActionKind::ALL.len()],
    /// Each load-shed point's scale, by its position in [`LoadShedKind::ALL`].
    shed_points: [AtomicU32; LoadShedKind::ALL.len()],
    /// `stop_accepting_connections` is saturated: accept loops wait.
    accept_paused: watch::Sender<bool>,
    connections: AtomicU64,
    /// `overload.<point>.shed_load_count`, by position in [`LoadShedKind::ALL`].
    shed_load_counts: [Counter; LoadShedKind::ALL.len()],
}

impl Default for OverloadState {
    fn default() -> Self {
        Self::new(OverloadConfig::default())
    }
}

impl OverloadState {
    pub fn new(config: OverloadConfig) -> Self {
        Self {
            config,
            actions: Default::default(),
            shed_points: Default::default(),
            accept_paused: watch::Sender::new(false),
            connections: AtomicU64::new(0),
            shed_load_counts: Default::default(),
        }
    }

    /// Registers `overload.<point>.shed_load_count` for the configured load-shed points.
    pub fn with_stats(mut self, stats: &Stats) -> Self {
        for point in &self.config.load_shed_points {
            let scope = Scope::envoy().child("overload").child(point.kind.name());
            self.shed_load_counts[point.kind.index()] = stats.counter(scope.name("shed_load_count"));
        }
        self
    }

    pub fn config(&self) -> &OverloadConfig {
        &self.config
    }

    /// Evaluates every trigger on the monitors' pressures (by monitor index) and stores
    /// the new scales. Returns each configured action's and load-shed point's name and
    /// scale, for the stats.
    pub fn update(&self, pressures: &[f64]) -> Vec<(&'static str, f32)> {
        let mut scales = Vec::with_capacity(self.config.actions.len() + self.config.load_shed_points.len());
        for action in &self.config.actions {
            let scale = state(&action.triggers, pressures);
            self.actions[action.kind.index()].store(scale.to_bits(), Ordering::Relaxed);
            scales.push((action.kind.name(), scale));
        }
        for point in &self.config.load_shed_points {
            let scale = state(&point.triggers, pressures);
            self.shed_points[point.kind.index()].store(scale.to_bits(), Ordering::Relaxed);
            scales.push((point.kind.name(), scale));
        }
        let saturated = |kind| self.is_saturated(kind);
        self.accept_paused.send_if_modified(|v| replace(v, saturated(ActionKind::StopAcceptingConnections)));
        scales
    }

    pub fn scale(&self, kind: ActionKind) -> f32 {
        f32::from_bits(self.actions[kind.index()].load(Ordering::Relaxed))
    }

    pub fn is_saturated(&self, kind: ActionKind) -> bool {
        self.scale(kind) >= 1.0
    }

    /// Whether a load-shed point sheds this time: always when saturated, never at 0, and
    /// with probability `scale` between, as Envoy's; `draw` is uniform in [0, 1).
    pub fn sheds(&self, kind: LoadShedKind, draw: impl FnOnce() -> f32) -> bool {
        let i = kind.index();
        let sheds = drawn(f32::from_bits(self.shed_points[i].load(Ordering::Relaxed)), draw);
        if sheds {
            self.shed_load_counts[i].inc();
        }
        sheds
    }

    /// Whether an action applies this time, for the actions Envoy applies with
    /// probability their scale (`reject_incoming_connections`, `disable_http_keepalive`):
    /// always when saturated, never at 0; `draw` is uniform in [0, 1).
    pub fn applies(&self, kind: ActionKind, draw: impl FnOnce() -> f32) -> bool {
        drawn(self.scale(kind), draw)
    }

    /// Whether a new connection is rejected by `reject_incoming_connections`.
    pub fn rejects_connection(&self, draw: impl FnOnce() -> f32) -> bool {
        self.applies(ActionKind::RejectIncomingConnections, draw)
    }

    /// Resolves once `stop_accepting_connections` is not saturated.
    pub async fn accepting(&self) {
        // The sender lives as long as `self`: `wait_for` cannot fail while it is borrowed.
        let mut paused = self.accept_paused.subscribe();
        let _ = paused.wait_for(|v| !*v).await;
    }

    pub fn accept_paused(&self) -> bool {
        *self.accept_paused.borrow()
    }

    /// Resolves once `stop_accepting_connections` becomes saturated.
    pub async fn accept_pausing(&self) {
        let mut paused = self.accept_paused.subscribe();
        let _ = paused.wait_for(|v| *v).await;
    }

    /// Counts a new downstream connection against the global limit: `None` when the limit
    /// is reached and the listener does not ignore it. Connections of listeners that
    /// ignore the limit still count, as in Envoy.
    pub fn open_connection(self: &Arc<Self>, ignores_limit: bool) -> Option<GlobalConnection> {
        let Some(max) = self.config.max_downstream_connections else {
            return Some(GlobalConnection(None));
        };
        let before = self.connections.fetch_add(1, Ordering::AcqRel);
        if before >= max && !ignores_limit {
            self.connections.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(GlobalConnection(Some(self.clone())))
    }

    /// Downstream connections open now (counted only under a global limit).
    pub fn open_connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

/// In force at `scale`: always at 1 (saturated), never at 0, with probability `scale`
/// between; `draw` is uniform in [0, 1) and taken only when needed.
fn drawn(scale: f32, draw: impl FnOnce() -> f32) -> bool {
    scale >= 1.0 || (scale > 0.0 && draw() < scale)
}

fn replace(value: &mut bool, new: bool) -> bool {
    let changed = *value != new;
    *value = new;
    changed
}

/// An action's state: the largest of its triggers'.
fn state(triggers: &[Trigger], pressures: &[f64]) -> f32 {
    triggers
        .iter()
        .map(|trigger| {
            let pressure = pressures.get(trigger.monitor).copied().unwrap_or(0.0);
            match trigger.kind {
                TriggerKind::Threshold { value } => {
                    if pressure >= value {
                        1.0
                    } else {
                        0.0
                    }
                }
                TriggerKind::Scaled { scaling_threshold, saturation_threshold } => {
                    if pressure < scaling_threshold {
                        0.0
                    } else if pressure >= saturation_threshold {
                        1.0
                    } else {
                        // The thresholds are ordered (checked at conversion): no division by 0.
                        ((pressure - scaling_threshold) / (saturation_threshold - scaling_threshold)) as f32
                    }
                }
            }
        })
        .fold(0.0, f32::max)
}

/// One downstream connection counted against the global limit, until it drops.
#[derive(Debug)]
pub struct GlobalConnection(Option<Arc<OverloadState>>);

impl Drop for GlobalConnection {
    fn drop(&mut self) {
        if let Some(state) = &self.0 {
            state.connections.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::overload::{Action, Monitor, MonitorKind};

    fn with(kind: ActionKind, trigger: TriggerKind) -> OverloadState {
        OverloadState::new(OverloadConfig {
            monitors: vec![Monitor { name: "heap".into(), kind: MonitorKind::FixedHeap { max_heap_size_bytes: 1 } }],
            actions: vec![Action { kind, triggers: vec![Trigger { monitor: 0, kind: trigger }] }],
            ..OverloadConfig::default()
        })
    }

    #[test]
    fn each_kind_indexes_its_own_slot() {
        assert!(ActionKind::ALL.iter().enumerate().all(|(i, k)| k.index() == i));
        assert!(LoadShedKind::ALL.iter().enumerate().all(|(i, k)| k.index() == i));
    }

    #[test]
    fn a_threshold_saturates_at_its_value_and_a_scaled_trigger_ramps() {
        let state = with(ActionKind::StopAcceptingRequests, TriggerKind::Threshold { value: 0.9 });
        state.update(&[0.89]);
        assert!(!state.is_saturated(ActionKind::StopAcceptingRequests));
        state.update(&[0.9]);
        assert!(state.is_saturated(ActionKind::StopAcceptingRequests));
        let scaled = TriggerKind::Scaled { scaling_threshold: 0.5, saturation_threshold: 0.9 };
        let state = with(ActionKind::RejectIncomingConnections, scaled);
        state.update(&[0.7]);
        assert!((state.scale(ActionKind::RejectIncomingConnections) - 0.5).abs() < 1e-6);
        assert!(state.rejects_connection(|| 0.4) && !state.rejects_connection(|| 0.6));
        state.update(&[0.95]);
        assert!(state.rejects_connection(|| 0.999));
    }

    #[test]
    fn the_global_limit_counts_every_connection_and_exempts_only_the_exempt() {
        let state = Arc::new(OverloadState::new(OverloadConfig {
            max_downstream_connections: Some(2),
            ..OverloadConfig::default()
        }));
        let first = state.open_connection(false).unwrap();
        let _second = state.open_connection(true).unwrap();
        assert!(state.open_connection(false).is_none());
        let exempt = state.open_connection(true);
        assert!(exempt.is_some());
        assert_eq!(state.open_connections(), 3);
        drop((first, exempt));
        assert!(state.open_connection(false).is_some());
    }
}
