//! The overload manager's refresh loop: every `refresh_interval` it samples the resource
//! monitors, evaluates the triggers into the shared [`OverloadState`] the workers read, and
//! reports Envoy's `overload.*` stats.
//!
//! `fixed_heap` measures the allocator's committed memory (mimalloc's `current_commit`: the
//! heap's pages in use, as Envoy's tcmalloc figure of mapped minus free bytes is), or the
//! resident set when another allocator serves the process. `cgroup_memory` reads the
//! cgroup's usage and limit (v2, else v1); with no limit its pressure is 0, as Envoy's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::overload::{ActionKind, MonitorKind, OverloadConfig};
use crate::core::allocator;
use crate::core::shutdown;
use crate::proxy::overload::OverloadState;
use crate::telemetry::stats::Scope;
use crate::telemetry::{Gauge, Stats};

/// How often `shrink_heap` returns free memory while it is in force (Envoy's default
/// `timer_interval`).
const SHRINK_HEAP_INTERVAL: Duration = Duration::from_secs(10);

/// The state for `config`, evaluated once so that what is in force at start-up applies to
/// the first connection.
pub fn state(config: OverloadConfig, stats: &Stats) -> Arc<OverloadState> {
    let state = Arc::new(OverloadState::new(config).with_stats(stats));
    state.update(&pressures(state.config()));
    state
}

/// Runs until `stop`; nothing to do when no action or load-shed point is configured.
pub async fn refresh(state: Arc<OverloadState>, stats: Arc<Stats>, stop: shutdown::Signal) {
    let config = state.config().clone();
    if !config.is_active() {
        return;
    }
    let scope = Scope::envoy().child("overload");
    let pressure_gauges: Vec<Gauge> =
        config.monitors.iter().map(|m| stats.gauge(scope.child(&m.name).name("pressure"))).collect();
    // Held here: the store forgets the cells nobody holds.
    let action_names = config.actions.iter().map(|a| (a.kind.name(), true));
    let point_names = config.load_shed_points.iter().map(|p| (p.kind.name(), false));
    let scale_gauges: Vec<(Option<Gauge>, Gauge)> = action_names
        .chain(point_names)
        .map(|(name, is_action)| {
            let named = scope.child(name);
            (is_action.then(|| stats.gauge(named.name("active"))), stats.gauge(named.name("scale_percent")))
        })
        .collect();
    let mut interval = tokio::time::interval(config.refresh_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_shrink: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = stop.clone().triggered() => return,
        }
        let pressures = pressures(&config);
        for (gauge, pressure) in pressure_gauges.iter().zip(&pressures) {
            gauge.set(percent(*pressure));
        }
        // In the order `update` reports them: actions, then load-shed points.
        for ((active, scale_percent), (_, scale)) in scale_gauges.iter().zip(state.update(&pressures)) {
            if let Some(active) = active {
                active.set(i64::from(scale >= 1.0));
            }
            scale_percent.set(percent(f64::from(scale)));
        }
        if state.is_saturated(ActionKind::ShrinkHeap)
            && last_shrink.is_none_or(|at| at.elapsed() >= SHRINK_HEAP_INTERVAL)
        {
            allocator::release_free_memory();
            last_shrink = Some(Instant::now());
        }
    }
}

/// A pressure (0 to 1) as Envoy's gauges show it: a whole percent.
fn percent(pressure: f64) -> i64 {
    (pressure.clamp(0.0, 1.0) * 100.0).round() as i64
}

/// Each monitor's pressure, clamped to [0, 1].
fn pressures(config: &OverloadConfig) -> Vec<f64> {
    config
        .monitors
        .iter()
        .map(|monitor| match monitor.kind {
            MonitorKind::FixedHeap { max_heap_size_bytes } => ratio(heap_in_use(), max_heap_size_bytes),
            MonitorKind::CgroupMemory { max_memory_bytes } => match cgroup_memory() {
                Some((usage, limit)) => ratio(usage, max_memory_bytes.map_or(limit, |max| max.min(limit))),
                None => 0.0,
            },
        })
        .collect()
}

fn ratio(used: u64, max: u64) -> f64 {
    if max == 0 { 0.0 } else { (used as f64 / max as f64).clamp(0.0, 1.0) }
}

/// The heap in use: mimalloc's committed memory, or the resident set without it.
fn heap_in_use() -> u64 {
    let usage = allocator::usage();
    if usage.committed > 0 {
        return usage.committed;
    }
    resident_bytes().unwrap_or(0)
}

fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// The cgroup's memory usage and limit, when it has a limit.
fn cgroup_memory() -> Option<(u64, u64)> {
    let read = |path: &str| std::fs::read_to_string(path).ok().map(|s| s.trim().to_owned());
    if let (Some(usage), Some(limit)) = (read("/sys/fs/cgroup/memory.current"), read("/sys/fs/cgroup/memory.max")) {
        return Some((usage.parse().ok()?, limit.parse().ok()?)); // "max" (no limit) does not parse
    }
    let usage: u64 = read("/sys/fs/cgroup/memory/memory.usage_in_bytes")?.parse().ok()?;
    let limit: u64 = read("/sys/fs/cgroup/memory/memory.limit_in_bytes")?.parse().ok()?;
    // cgroup v1 says "no limit" with a number near i64::MAX rounded to a page.
    (limit < (1 << 62)).then_some((usage, limit))
}
