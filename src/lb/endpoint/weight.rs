//! CSWRR's state for one endpoint (`lb::cswrr`): the weight from its last usable load report
//! and the times that decide blackout and expiry. It lives in the endpoint's stats rather
//! than in a balancer so that it outlives balancer rebuilds on EDS pushes
//! (grpc/proposal#343).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One endpoint's weight state, kept in its `EndpointStats` so that it outlives balancer
/// rebuilds. Times are nanoseconds since the stats' epoch plus one; 0 means unset. Every
/// CSWRR host set holding the endpoint (all/healthy/locality sets) derives the same values
/// from the same report, so concurrent updaters agree.
#[derive(Debug, Default)]
pub struct WeightState {
    /// The weight from the last usable report (f64 bits).
    weight: AtomicU64,
    /// When the endpoint started reporting usable load without a gap longer than the
    /// expiration period (blackout counts from here).
    non_empty_since: AtomicU64,
    /// When the last usable report arrived.
    last_update: AtomicU64,
}

impl WeightState {
    /// The weight computed from the last usable report (0: none yet), before blackout,
    /// expiry and slow start; for the admin views.
    pub fn reported_weight(&self) -> f64 {
        f64::from_bits(self.weight.load(Ordering::Relaxed))
    }

    /// Folds in the `weight` of a usable report that arrived at `received`. Idempotent per
    /// report: the same report gives the same state, so updating twice (or from two host
    /// sets) changes nothing.
    pub fn fold_report(&self, weight: f64, received: u64) {
        if self.last_update.load(Ordering::Relaxed) < received {
            self.weight.store(weight.to_bits(), Ordering::Relaxed);
            self.last_update.store(received, Ordering::Relaxed);
        }
        if self.non_empty_since.load(Ordering::Relaxed) == 0 {
            self.non_empty_since.store(received, Ordering::Relaxed);
        }
    }

    /// The weight valid at `now`, or 0 (unknown): no usable report yet, the last one older
    /// than `expiration`, or the endpoint reporting for less than `blackout`.
    pub fn valid_weight(&self, now: u64, expiration: Duration, blackout: Duration) -> f64 {
        let last_update = self.last_update.load(Ordering::Relaxed);
        if last_update == 0 {
            return 0.0;
        }
        let age = Duration::from_nanos(now.saturating_sub(last_update));
        if age >= expiration {
            // Expired: blackout starts again with the next report.
            self.non_empty_since.store(0, Ordering::Relaxed);
            return 0.0;
        }
        let since = self.non_empty_since.load(Ordering::Relaxed);
        if since == 0 || Duration::from_nanos(now.saturating_sub(since)) < blackout {
            return 0.0;
        }
        f64::from_bits(self.weight.load(Ordering::Relaxed))
    }
}
