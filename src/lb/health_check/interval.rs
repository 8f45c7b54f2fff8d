//! When a host's next probe is due: Envoy's `HealthCheckerImplBase::interval` and
//! `intervalWithJitter`. Time is not read here and randomness comes from the caller's
//! (seeded) RNG, so schedules are reproducible.

use std::time::Duration;

use rand::Rng;

use super::Transition;
use crate::config::cluster::HealthCheck;

/// The delay before a host's first probe: at once, or a random part of `initial_jitter`.
pub fn initial_delay(config: &HealthCheck, rng: &mut impl Rng) -> Duration {
    if config.initial_jitter.is_zero() {
        return Duration::ZERO;
    }
    with_jitter(config, Duration::ZERO, config.initial_jitter, rng)
}

/// The delay after a probe whose result was `passed` and did `transition` to the host.
///
/// Until the cluster has carried traffic (`traffic`), hosts are probed every
/// `no_traffic_interval` (`no_traffic_healthy_interval` for settled healthy hosts). After,
/// a failed probe waits `unhealthy_edge_interval` while a healthy host counts towards
/// `unhealthy_threshold`, else `unhealthy_interval`; a passed probe waits
/// `healthy_edge_interval` while a failed host counts towards `healthy_threshold`, else
/// `interval`. (Envoy's code chooses the edge intervals this way, on a pending change; its
/// API text describes them as the interval right after a change.)
pub fn next_interval(
    config: &HealthCheck,
    traffic: bool,
    passed: bool,
    transition: Transition,
    rng: &mut impl Rng,
) -> Duration {
    let pending = transition == Transition::ChangePending;
    let base = match (traffic, passed, pending) {
        (false, true, false) => config.no_traffic_healthy_interval,
        (false, _, _) => config.no_traffic_interval,
        (true, false, true) => config.unhealthy_edge_interval,
        (true, false, false) => config.unhealthy_interval,
        (true, true, true) => config.healthy_edge_interval,
        (true, true, false) => config.interval,
    };
    with_jitter(config, base, config.interval_jitter, rng)
}

/// `base` plus a random part of `interval_jitter_percent` of it and a random part of
/// `jitter`, in whole milliseconds as Envoy counts them, and never 0 (no busy loop).
fn with_jitter(config: &HealthCheck, base: Duration, jitter: Duration, rng: &mut impl Rng) -> Duration {
    let base_ms = base.as_millis() as u64;
    let mut ms = base_ms;
    let percent_ms = u64::from(config.interval_jitter_percent).saturating_mul(base_ms) / 100;
    if percent_ms > 0 {
        ms = ms.saturating_add(rng.random_range(0..percent_ms));
    }
    let jitter_ms = jitter.as_millis() as u64;
    if jitter_ms > 0 {
        ms = ms.saturating_add(rng.random_range(0..jitter_ms));
    }
    Duration::from_millis(ms.max(1))
}
