//! What a backend knows about its own load: requests inside it, completions and busy time
//! of the last second, and the even spreading of injected errors. The ORCA reports it
//! sends, per request and out of band, are computed here.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::pb::orca::OrcaLoadReport;

/// The window `rps_fractional`, `eps` and busy utilization are measured over.
const WINDOW: Duration = Duration::from_secs(1);

/// How a backend measures the utilization it reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Utilization {
    /// Requests inside the backend (served or waiting) / capacity, at the moment of the
    /// report: above 1 when requests queue.
    #[default]
    Inside,
    /// Slot-time spent serving over the last second / (capacity × 1 s): the fraction of
    /// its capacity the backend really used, as a CPU meter would say.
    Busy,
}

/// One backend's load, shared by its connections and its out-of-band report streams.
#[derive(Debug)]
pub(super) struct Load {
    capacity: u32,
    utilization: Utilization,
    inside: AtomicU32,
    recent: Mutex<Recent>,
}

#[derive(Debug, Default)]
struct Recent {
    completions: VecDeque<Completion>,
    error_credit: f64,
}

#[derive(Debug, Clone, Copy)]
struct Completion {
    at: Instant,
    failed: bool,
    busy: Duration,
}

/// Counts a request as inside the backend until dropped.
pub(super) struct Inside<'a>(&'a AtomicU32);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Load {
    pub(super) fn new(capacity: u32, utilization: Utilization) -> Self {
        Self { capacity: capacity.max(1), utilization, inside: AtomicU32::new(0), recent: Mutex::default() }
    }

    pub(super) fn enter(&self) -> Inside<'_> {
        self.inside.fetch_add(1, Ordering::Relaxed);
        Inside(&self.inside)
    }

    /// Whether this request fails: error credit accrues by `rate` per request and each
    /// whole unit is one failure, so failures are spread evenly and runs repeat.
    pub(super) fn injects_error(&self, rate: f64) -> bool {
        let rate = rate.clamp(0.0, 1.0);
        if rate == 0.0 {
            return false;
        }
        let mut recent = self.lock();
        recent.error_credit += rate;
        if recent.error_credit >= 1.0 - 1e-9 {
            recent.error_credit -= 1.0;
            true
        } else {
            false
        }
    }

    /// Records a completion that kept a slot `busy` for that long, and returns the load
    /// report as of now.
    pub(super) fn completed(&self, failed: bool, busy: Duration) -> OrcaLoadReport {
        let now = Instant::now();
        let mut recent = self.lock();
        recent.completions.push_back(Completion { at: now, failed, busy });
        self.report_locked(&mut recent, now)
    }

    /// The load report as of now, for out-of-band streams.
    pub(super) fn report(&self) -> OrcaLoadReport {
        let mut recent = self.lock();
        self.report_locked(&mut recent, Instant::now())
    }

    fn report_locked(&self, recent: &mut Recent, now: Instant) -> OrcaLoadReport {
        while recent.completions.front().is_some_and(|c| now.duration_since(c.at) > WINDOW) {
            recent.completions.pop_front();
        }
        let requests = recent.completions.len() as f64;
        let errors = recent.completions.iter().filter(|c| c.failed).count() as f64;
        let capacity = f64::from(self.capacity);
        let utilization = match self.utilization {
            Utilization::Inside => f64::from(self.inside.load(Ordering::Relaxed)) / capacity,
            Utilization::Busy => {
                let busy: Duration = recent.completions.iter().map(|c| c.busy).sum();
                (busy.as_secs_f64() / (WINDOW.as_secs_f64() * capacity)).min(1.0)
            }
        };
        OrcaLoadReport {
            application_utilization: utilization,
            rps_fractional: requests,
            eps: errors,
            ..Default::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_utilization_is_slot_time_used_over_the_last_second() {
        let load = Load::new(2, Utilization::Busy);
        let report = load.completed(false, Duration::from_millis(500));
        assert_eq!((report.application_utilization, report.rps_fractional), (0.25, 1.0));
        let report = load.completed(true, Duration::from_millis(2500));
        assert_eq!((report.application_utilization, report.eps), (1.0, 1.0), "capped at the capacity");
    }

    #[test]
    fn inside_utilization_counts_waiting_requests_too() {
        let load = Load::new(2, Utilization::Inside);
        let _a = load.enter();
        let _b = load.enter();
        let _c = load.enter();
        assert_eq!(load.report().application_utilization, 1.5);
    }
}
