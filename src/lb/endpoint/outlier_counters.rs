//! The worker side of outlier detection: each response's outcome counted into the
//! endpoint's atomics, and a wake-up for the control runtime when a consecutive-failure
//! threshold is reached. No lock: one `fetch_add` or `store` per counter.
//!
//! As in Envoy, a threshold fires when the counter *reaches* it (`==`), once; the detector
//! resets the counter when it has handled the event, so a new run of failures can fire
//! again even without an interleaved success.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use tokio::sync::Notify;

use crate::config::cluster::OutlierDetection;

/// What one request to an endpoint ended with, as outlier detection sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutlierResult {
    /// Response headers came with this HTTP status (gRPC statuses mapped to HTTP first).
    Status(u16),
    /// The connection could not be made (refused, unreachable, connect timeout).
    ConnectFailed,
    /// The request timed out waiting for the upstream.
    Timeout,
    /// The upstream reset the stream or closed the connection before answering.
    Reset,
}

/// The consecutive-failure thresholds of a cluster, copied per request (a few words).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub consecutive_5xx: u32,
    pub consecutive_gateway_failure: u32,
    pub consecutive_local_origin_failure: u32,
    pub split_external_local_origin_errors: bool,
}

impl Thresholds {
    pub fn of(config: &OutlierDetection) -> Self {
        Self {
            consecutive_5xx: config.consecutive_5xx,
            consecutive_gateway_failure: config.consecutive_gateway_failure,
            consecutive_local_origin_failure: config.consecutive_local_origin_failure,
            split_external_local_origin_errors: config.split_external_local_origin_errors,
        }
    }
}

/// Events the workers raised and the detector has not handled yet (bits of `pending`).
pub const PENDING_5XX: u8 = 1;
pub const PENDING_GATEWAY: u8 = 2;
pub const PENDING_LOCAL_ORIGIN: u8 = 4;

/// Per-endpoint outlier counters, shared by all workers.
#[derive(Debug, Default)]
pub struct OutlierCounters {
    consecutive_5xx: AtomicU32,
    consecutive_gateway: AtomicU32,
    consecutive_local: AtomicU32,
    pending: AtomicU8,
    /// Externally originated requests and their successes (all requests when local-origin
    /// errors are not split), for success-rate and failure-percentage ejection.
    external: RateCounts,
    /// Locally originated outcomes (connects, timeouts, resets) when split.
    local: RateCounts,
    wake: Option<Arc<Notify>>,
}

/// Monotonic request and success counts; the detector takes differences per interval.
#[derive(Debug, Default)]
pub struct RateCounts {
    total: AtomicU64,
    success: AtomicU64,
}

impl RateCounts {
    fn add(&self, success: bool) {
        self.total.fetch_add(1, Ordering::Relaxed);
        if success {
            self.success.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// (requests, successes) so far.
    pub fn read(&self) -> (u64, u64) {
        (self.total.load(Ordering::Relaxed), self.success.load(Ordering::Relaxed))
    }
}

impl OutlierCounters {
    /// Counters that wake `wake` when a threshold is reached.
    pub fn with_wake(wake: Arc<Notify>) -> Self {
        Self { wake: Some(wake), ..Self::default() }
    }

    /// Counts one outcome. Without the split, local-origin failures count as the HTTP
    /// status Envoy maps them to: connect failure 503, timeout 504, reset 503.
    pub fn record(&self, result: OutlierResult, thresholds: &Thresholds) {
        let status = match (result, thresholds.split_external_local_origin_errors) {
            (OutlierResult::Status(status), split) => {
                if split {
                    self.local_outcome(true, thresholds);
                }
                status
            }
            (_, true) => return self.local_outcome(false, thresholds),
            (OutlierResult::ConnectFailed | OutlierResult::Reset, false) => 503,
            (OutlierResult::Timeout, false) => 504,
        };
        self.http_status(status, thresholds);
    }

    fn http_status(&self, status: u16, thresholds: &Thresholds) {
        let is_5xx = (500..600).contains(&status);
        self.external.add(!is_5xx);
        if !is_5xx {
            self.consecutive_5xx.store(0, Ordering::Relaxed);
            self.consecutive_gateway.store(0, Ordering::Relaxed);
            return;
        }
        if matches!(status, 502..=504) {
            let n = self.consecutive_gateway.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
            self.fire_at(n, thresholds.consecutive_gateway_failure, PENDING_GATEWAY);
        } else {
            self.consecutive_gateway.store(0, Ordering::Relaxed);
        }
        let n = self.consecutive_5xx.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        self.fire_at(n, thresholds.consecutive_5xx, PENDING_5XX);
    }

    fn local_outcome(&self, success: bool, thresholds: &Thresholds) {
        self.local.add(success);
        if success {
            self.consecutive_local.store(0, Ordering::Relaxed);
        } else {
            let n = self.consecutive_local.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
            self.fire_at(n, thresholds.consecutive_local_origin_failure, PENDING_LOCAL_ORIGIN);
        }
    }

    /// `count` is the run's length as the atomic holds it: after 2³² − 1 failures in a row it
    /// wraps to 0, as Envoy's `uint32_t` counters do, and the run counts up again.
    fn fire_at(&self, count: u32, threshold: u32, event: u8) {
        if count == threshold {
            self.pending.fetch_or(event, Ordering::Relaxed);
            if let Some(wake) = &self.wake {
                wake.notify_one();
            }
        }
    }

    /// Takes the events raised since the last call, resetting the counters that raised
    /// them (the detector has handled them, ejected or not).
    pub fn take_pending(&self) -> u8 {
        let pending = self.pending.swap(0, Ordering::Relaxed);
        if pending & PENDING_5XX != 0 {
            self.consecutive_5xx.store(0, Ordering::Relaxed);
        }
        if pending & PENDING_GATEWAY != 0 {
            self.consecutive_gateway.store(0, Ordering::Relaxed);
        }
        if pending & PENDING_LOCAL_ORIGIN != 0 {
            self.consecutive_local.store(0, Ordering::Relaxed);
        }
        pending
    }

    /// Forgets the current runs of failures (an ejected host starts afresh on return).
    pub fn reset_consecutive(&self) {
        self.consecutive_5xx.store(0, Ordering::Relaxed);
        self.consecutive_gateway.store(0, Ordering::Relaxed);
        self.consecutive_local.store(0, Ordering::Relaxed);
    }

    pub fn external(&self) -> &RateCounts {
        &self.external
    }

    pub fn local(&self) -> &RateCounts {
        &self.local
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thresholds(split: bool) -> Thresholds {
        Thresholds {
            consecutive_5xx: 3,
            consecutive_gateway_failure: 2,
            consecutive_local_origin_failure: 2,
            split_external_local_origin_errors: split,
        }
    }

    #[test]
    fn a_run_of_u32_max_failures_wraps_as_envoys_counter() {
        let c = OutlierCounters::default();
        let t = thresholds(false);
        c.consecutive_5xx.store(u32::MAX - 1, Ordering::Relaxed);
        c.consecutive_gateway.store(u32::MAX, Ordering::Relaxed);
        c.record(OutlierResult::Status(502), &t); // 5xx run: u32::MAX; gateway run wraps to 0
        c.record(OutlierResult::Status(502), &t); // 5xx run wraps to 0; gateway 1
        assert_eq!(c.take_pending(), 0);
        c.record(OutlierResult::Status(502), &t); // gateway 2: its threshold
        assert_eq!(c.take_pending(), PENDING_GATEWAY);
        c.record(OutlierResult::Status(502), &t); // 5xx 2; gateway 1 (reset when taken)
        c.record(OutlierResult::Status(502), &t); // 5xx 3 and gateway 2: both thresholds
        assert_eq!(c.take_pending(), PENDING_5XX | PENDING_GATEWAY);
    }

    #[test]
    fn a_success_breaks_the_run() {
        let c = OutlierCounters::default();
        let t = thresholds(false);
        c.record(OutlierResult::Status(500), &t);
        c.record(OutlierResult::Status(500), &t);
        c.record(OutlierResult::Status(200), &t);
        c.record(OutlierResult::Status(500), &t);
        assert_eq!(c.take_pending(), 0);
        c.record(OutlierResult::Status(500), &t);
        c.record(OutlierResult::Status(500), &t);
        assert_eq!(c.take_pending(), PENDING_5XX);
        assert_eq!(c.external().read(), (6, 1));
    }

    #[test]
    fn gateway_failures_count_for_both_and_a_500_breaks_the_gateway_run() {
        let c = OutlierCounters::default();
        let t = thresholds(false);
        c.record(OutlierResult::Status(503), &t);
        c.record(OutlierResult::Status(500), &t);
        c.record(OutlierResult::Status(502), &t);
        assert_eq!(c.take_pending(), PENDING_5XX, "gateway run broken by the 500");
        c.record(OutlierResult::ConnectFailed, &t);
        c.record(OutlierResult::Timeout, &t);
        assert_eq!(c.take_pending(), PENDING_GATEWAY, "unsplit: connect failure 503, timeout 504");
    }

    #[test]
    fn split_local_origin_errors_have_their_own_run() {
        let c = OutlierCounters::default();
        let t = thresholds(true);
        c.record(OutlierResult::ConnectFailed, &t);
        c.record(OutlierResult::Status(500), &t);
        c.record(OutlierResult::Reset, &t);
        assert_eq!(c.take_pending(), 0, "the response was a successful connect");
        c.record(OutlierResult::Timeout, &t);
        assert_eq!(c.take_pending(), PENDING_LOCAL_ORIGIN);
        assert_eq!(c.local().read(), (4, 1));
        assert_eq!(c.external().read(), (1, 0));
    }
}
