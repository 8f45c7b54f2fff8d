//! The adaptive policy's queue term: how long the request being placed waits behind the
//! ones already at the endpoint, from its reported capacity and utilization when a recent
//! report measured them, else from its latency alone.

use std::time::{Duration, Instant};

use super::SAINTE_LAGUE;
use crate::config::cluster::lb_policy::AdaptiveConfig;
use crate::lb::EndpointStats;
use crate::lb::endpoint::MeasuredLoad;

/// The utilization the queue term reads at most: at 0.9 a request takes ten times as long
/// as on the idle endpoint by M/M/1's formula, enough to send the next one anywhere else;
/// above it the formula runs to infinity on a report's noise (and a queued endpoint
/// reports more than 1).
const MAX_QUEUEING_UTILIZATION: f64 = 0.9;

/// A capacity is kept for at least this many of the endpoint's own round trips without a
/// newer report: a slow endpoint's reports come no faster than its responses.
const REFRESH_ROUND_TRIPS: u32 = 4;

/// The queue term in nanoseconds, for an endpoint with `in_flight` requests and a mean
/// round trip of `latency` nanoseconds at `now`.
///
/// With a capacity measured less than the refresh window ago: the time the request would
/// take if the endpoint were this caller's alone, stretched by how busy it is.
/// - Alone: its round trip, plus the wait behind this caller's requests, `(in_flight + ½)`
///   requests at that capacity but never more than `(in_flight + ½)` round trips. An
///   endpoint that answers in `latency` serves at least one request per `latency`
///   (Little's law with one in flight), whatever a report said, so the floor costs nothing
///   where reports are right and undoes one taken at a load too light to tell: the demo's
///   `busy`, whose report made 2 requests a second of a 5 ms backend and starved it.
/// - Stretched by M/M/1's `1 / (1 − u)`, where `u` is the larger of the report's
///   utilization and what this caller alone sent in the last half second over the
///   capacity. The caller's in-flight count sees none of the other callers' requests nor
///   a neighbour's use of the pod's CPU, and at a few requests in flight it cannot tell a
///   pod at a tenth of a CPU from one at four tenths (the floor above charges both a round
///   trip): the lab's S8 left its medium pod at 96 % of its CPU limit beside a large one
///   at 67 %. Between endpoints of one latency the lowest stretch is the lowest
///   utilization, so the picks even the utilizations out (Robinhood's aim) as they even
///   out the waits. The rate sent is there because a report is smoothed over a second and
///   a quarter of a second old: read alone, every pick in between goes to the pod that
///   looked idlest, and a burst of them uses up a CPU-limited pod's quota for the period
///   (throttled, its round trips then keep it from its share for a second).
///
/// The whole is stretched, not the round trip alone. Stretching only the round trip (the
/// rule before) weighed it up to ten times against the wait behind this caller's requests;
/// in an overload every endpoint is at the cap, and the round trip is a mean of the last
/// second's answers, which waited in queues that have moved since: picks left whichever
/// endpoint's last answers had waited longest, its queue ran dry while the others' grew,
/// and it was left for a second at a time (the lab's S10: a saturated backend served 5
/// requests in a second against about 173; the simulation in `tests.rs`, whole seconds of
/// nothing, p99 3.5–3.7 s after the scale-up against 2.0 s stretched whole). Stretched
/// whole, the round trip and the wait behind this caller's requests keep their weights
/// whatever the utilization, and the count in flight, which moves with every pick, still
/// steers.
///
/// Neither is the wait behind everyone's taken as the larger of the two parts: that let
/// the utilization hide the wait behind this caller's requests wherever pods were busy,
/// so picks herded onto the pod whose last report looked best until a report caught up
/// (the lab's S9, four pods at 70 % of their CPU: p99 1.3–1.9 s where least request had
/// 0.3 s; the simulation in `tests.rs`, 48 ms against 3 ms).
///
/// Without one: `in_flight × latency`, the endpoint taken for one that serves a request
/// at a time (Linkerd's `latency × (in_flight + 1)` once the latency is added).
/// `load` is what a report received within [`report_max_age`] measured, if one did.
pub(super) fn queue(
    stats: &EndpointStats,
    now: Instant,
    latency: f64,
    in_flight: f64,
    load: Option<MeasuredLoad>,
) -> f64 {
    match load {
        Some(load) => {
            let per_request = (1e9 / load.capacity).min(latency);
            let behind_ours = (in_flight + SAINTE_LAGUE) * per_request;
            // What this caller alone has sent in the last half second is a utilization
            // too, and one that moves with every pick: a burst is seen at once.
            let sent = stats.sent_rate(now) / load.capacity;
            let u = load.utilization.max(sent).clamp(0.0, MAX_QUEUEING_UTILIZATION);
            // The queue term is what the stretch adds to the round trip.
            let alone = latency + behind_ours;
            alone / (1.0 - u) - latency
        }
        None => in_flight * latency,
    }
}

/// How long a report is read for, for an endpoint whose requests take `latency`
/// nanoseconds: `report_refresh`, or [`REFRESH_ROUND_TRIPS`] round trips if longer, at most
/// `report_expiration`.
pub(super) fn report_max_age(latency: f64, config: &AdaptiveConfig) -> Duration {
    // `as` saturates: a latency is ours, finite and not negative, but never a panic here.
    let round_trips = Duration::from_nanos((latency * f64::from(REFRESH_ROUND_TRIPS)) as u64);
    config.report_refresh.max(round_trips).min(config.report_expiration)
}
