//! Outlier detection (passive health checking), Envoy's algorithm: the control-runtime
//! half. Workers count outcomes into each endpoint's
//! [`OutlierCounters`](super::endpoint::outlier_counters::OutlierCounters); a [`Detector`]
//! per cluster turns the consecutive-failure events they raise into ejections at once,
//! and every `interval` unejects hosts whose time is up, decays the ejection multiplier
//! of hosts that stayed in, and runs success-rate and failure-percentage ejection.
//!
//! Deterministic: time is passed in, randomness (enforcement, jitter) comes from a seeded
//! RNG. Ejection is written into the endpoint's stats; the caller rebuilds the balancer
//! when a call reports a change.
//!
//! Differs from Envoy on purpose: one host may always be ejected when none is (Envoy needs
//! `always_eject_one_host`), so a single bad host of a small cluster is not kept in.

mod rates;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::endpoint::EndpointStats;
use super::endpoint::outlier_counters::{PENDING_5XX, PENDING_GATEWAY, PENDING_LOCAL_ORIGIN};
use super::host::Host;
use crate::config::Address;
use crate::config::cluster::OutlierDetection;

/// Why a host was ejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EjectionKind {
    Consecutive5xx,
    ConsecutiveGatewayFailure,
    ConsecutiveLocalOriginFailure,
    SuccessRate,
    FailurePercentage,
    LocalOriginSuccessRate,
    LocalOriginFailurePercentage,
}

/// The outlier state of one cluster.
#[derive(Debug)]
pub struct Detector {
    config: OutlierDetection,
    hosts: HashMap<Address, HostState>,
    rng: SmallRng,
}

#[derive(Debug)]
struct HostState {
    stats: Arc<EndpointStats>,
    /// Envoy's ejection time backoff: grows by one per ejection (while the ejection time
    /// stays under the cap), shrinks by one per interval spent in rotation.
    multiplier: u32,
    /// When the current ejection started, and its jitter; `None` while in rotation.
    ejected: Option<(Instant, Duration)>,
    /// Counters at the previous interval, to take this interval's differences.
    external: (u64, u64),
    local: (u64, u64),
}

impl Detector {
    pub fn new(config: OutlierDetection, seed: u64) -> Self {
        Self { config, hosts: HashMap::new(), rng: SmallRng::seed_from_u64(seed) }
    }

    pub fn config(&self) -> &OutlierDetection {
        &self.config
    }

    /// A changed configuration applies from now on; ejections in force stay.
    pub fn set_config(&mut self, config: OutlierDetection) {
        self.config = config;
    }

    /// Follows the cluster's membership: new hosts start in rotation, removed ones are
    /// forgotten. A host that stays keeps its state (its stats are the same `Arc`).
    pub fn sync_hosts<'a>(&mut self, hosts: impl IntoIterator<Item = &'a Arc<Host>>) {
        let mut next = HashMap::new();
        for host in hosts {
            let state = self.hosts.remove(host.address()).unwrap_or_else(|| HostState {
                stats: host.stats.clone(),
                multiplier: 0,
                ejected: None,
                external: host.stats.outlier().external().read(),
                local: host.stats.outlier().local().read(),
            });
            next.insert(host.address().clone(), state);
        }
        self.hosts = next;
    }

    /// Handles the consecutive-failure events the workers raised; true if a host was
    /// ejected.
    pub fn on_events(&mut self, now: Instant) -> bool {
        let mut events = Vec::new();
        for (address, state) in &self.hosts {
            let pending = state.stats.outlier().take_pending();
            let kinds = [
                (PENDING_5XX, EjectionKind::Consecutive5xx),
                (PENDING_GATEWAY, EjectionKind::ConsecutiveGatewayFailure),
                (PENDING_LOCAL_ORIGIN, EjectionKind::ConsecutiveLocalOriginFailure),
            ];
            events.extend(kinds.iter().filter(|(bit, _)| pending & bit != 0).map(|(_, k)| (address.clone(), *k)));
        }
        events.sort_by(|a, b| a.0.cmp(&b.0)); // a fixed order keeps the RNG draws deterministic
        let mut changed = false;
        for (address, kind) in events {
            changed |= self.try_eject(&address, kind, now);
        }
        changed
    }

    /// The interval timer: returns hosts whose ejection is over, decays multipliers, then
    /// runs success-rate and failure-percentage ejection on this interval's counts. True
    /// if any host entered or left ejection.
    pub fn sweep(&mut self, now: Instant) -> bool {
        let mut changed = false;
        for state in self.hosts.values_mut() {
            match state.ejected {
                None => state.multiplier = state.multiplier.saturating_sub(1),
                Some((at, jitter))
                    if now.saturating_duration_since(at) >= ejection_time(&self.config, state) + jitter =>
                {
                    uneject(state);
                    changed = true;
                }
                Some(_) => {}
            }
        }
        for (kind_rate, kind_failure, local) in [
            (EjectionKind::SuccessRate, EjectionKind::FailurePercentage, false),
            (EjectionKind::LocalOriginSuccessRate, EjectionKind::LocalOriginFailurePercentage, true),
        ] {
            if local && !self.config.split_external_local_origin_errors {
                continue;
            }
            let samples = self.interval_samples(local);
            let outliers = rates::outliers(&self.config, &samples);
            for (address, by_rate) in outliers {
                let kind = if by_rate { kind_rate } else { kind_failure };
                changed |= self.try_eject(&address, kind, now);
            }
        }
        changed
    }

    /// An active health check passed: the host returns at once when configured so.
    pub fn on_health_check_pass(&mut self, address: &Address) -> bool {
        if !self.config.successful_active_health_check_uneject_host {
            return false;
        }
        match self.hosts.get_mut(address) {
            Some(state) if state.ejected.is_some() => {
                uneject(state);
                true
            }
            _ => false,
        }
    }

    pub fn is_ejected(&self, address: &Address) -> bool {
        self.hosts.get(address).is_some_and(|s| s.ejected.is_some())
    }

    pub fn ejected_count(&self) -> usize {
        self.hosts.values().filter(|s| s.ejected.is_some()).count()
    }

    /// Per host in rotation: (address, successes %, requests) over the last interval.
    fn interval_samples(&mut self, local: bool) -> Vec<rates::Sample> {
        let mut samples = Vec::new();
        for (address, state) in &mut self.hosts {
            let counts = &state.stats.outlier();
            let (now, last) = if local {
                (counts.local().read(), &mut state.local)
            } else {
                (counts.external().read(), &mut state.external)
            };
            let (total, success) = (now.0.saturating_sub(last.0), now.1.saturating_sub(last.1));
            *last = now;
            if state.ejected.is_none() && total > 0 {
                samples.push(rates::Sample {
                    address: address.clone(),
                    success_rate: 100.0 * success as f64 / total as f64,
                    volume: total,
                });
            }
        }
        samples.sort_by(|a, b| a.address.cmp(&b.address));
        samples
    }

    fn try_eject(&mut self, address: &Address, kind: EjectionKind, now: Instant) -> bool {
        let ejected = self.ejected_count();
        let total = self.hosts.len().max(1);
        let within =
            100.0 * (ejected + 1) as f64 / total as f64 <= f64::from(self.config.max_ejection_percent.min(100));
        // Outrider always lets one host go (Envoy only with `always_eject_one_host`).
        if !(within || ejected == 0) {
            return false;
        }
        let enforcing = self.enforcing(kind);
        let max_jitter = self.config.max_ejection_time_jitter.as_millis() as u64;
        let (base, cap) =
            (self.config.base_ejection_time, self.config.max_ejection_time.max(self.config.base_ejection_time));
        let Some(state) = self.hosts.get_mut(address) else { return false };
        if state.ejected.is_some() || self.rng.random_range(0..100) >= enforcing {
            return false;
        }
        if base.saturating_mul(state.multiplier) < cap {
            state.multiplier += 1;
        }
        let jitter = Duration::from_millis(if max_jitter == 0 { 0 } else { self.rng.random_range(0..=max_jitter) });
        state.ejected = Some((now, jitter));
        state.stats.eject();
        state.stats.outlier().reset_consecutive();
        tracing::debug!(host = %address, ?kind, multiplier = state.multiplier, "host ejected");
        true
    }

    fn enforcing(&self, kind: EjectionKind) -> u32 {
        let c = &self.config;
        match kind {
            EjectionKind::Consecutive5xx => c.enforcing_consecutive_5xx,
            EjectionKind::ConsecutiveGatewayFailure => c.enforcing_consecutive_gateway_failure,
            EjectionKind::ConsecutiveLocalOriginFailure => c.enforcing_consecutive_local_origin_failure,
            EjectionKind::SuccessRate => c.enforcing_success_rate,
            EjectionKind::FailurePercentage => c.enforcing_failure_percentage,
            EjectionKind::LocalOriginSuccessRate => c.enforcing_local_origin_success_rate,
            EjectionKind::LocalOriginFailurePercentage => c.enforcing_failure_percentage_local_origin,
        }
    }
}

/// `base_ejection_time × multiplier`, capped at `max(max_ejection_time, base)`.
fn ejection_time(config: &OutlierDetection, state: &HostState) -> Duration {
    let base = config.base_ejection_time;
    base.saturating_mul(state.multiplier).min(config.max_ejection_time.max(base))
}

fn uneject(state: &mut HostState) {
    state.ejected = None;
    state.stats.uneject();
    state.stats.outlier().reset_consecutive();
}

#[cfg(test)]
mod tests;
