//! The adaptive policy's queue term: how long the request being placed waits behind the
//! ones already at the endpoint, from its reported capacity when a recent report measured
//! one, else from its latency alone.

use std::time::{Duration, Instant};

use super::SAINTE_LAGUE;
use crate::config::cluster::lb_policy::AdaptiveConfig;
use crate::lb::EndpointStats;

/// A capacity is kept for at least this many of the endpoint's own round trips without a
/// newer report: a slow endpoint's reports come no faster than its responses.
const REFRESH_ROUND_TRIPS: u32 = 4;

/// The queue term in nanoseconds, for an endpoint with `in_flight` requests and a mean
/// round trip of `latency` nanoseconds at `now`.
///
/// With a capacity measured less than the refresh window ago: `(in_flight + ½)` requests
/// at that capacity, but never more than `(in_flight + ½)` round trips. An endpoint that
/// answers in `latency` serves at least one request per `latency` (Little's law with one
/// in flight), whatever a report said, so the floor costs nothing where reports are right
/// and undoes one taken at a load too light to tell: the demo's `busy`, whose report made
/// 2 requests a second of a 5 ms backend and starved it.
///
/// Without one: `in_flight × latency`, the endpoint taken for one that serves a request
/// at a time (Linkerd's `latency × (in_flight + 1)` once the latency is added).
pub(super) fn queue(stats: &EndpointStats, now: Instant, latency: f64, in_flight: f64, config: &AdaptiveConfig) -> f64 {
    // `as` saturates: a latency is ours, finite and not negative, but never a panic here.
    let round_trips = Duration::from_nanos((latency * f64::from(REFRESH_ROUND_TRIPS)) as u64);
    let max_age = config.report_refresh.max(round_trips).min(config.report_expiration);
    match stats.capacity(now, max_age) {
        Some(per_second) => (in_flight + SAINTE_LAGUE) * (1e9 / per_second).min(latency),
        None => in_flight * latency,
    }
}
