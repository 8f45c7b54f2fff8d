//! Issue 36 item 5: no endpoint is starved by its own stale or light-load report. The
//! demo's case: three clients in a loop; `busy` (2 slots, 5 ms) once reported 1 request a
//! second at utilization 0.5, which made its capacity 2 a second and its queue term 250 ms
//! with nothing in flight, against two backends answering in 55 and 112 ms.

use std::collections::VecDeque;
use std::time::Duration;

use rand::SeedableRng;

use super::super::*;
use super::{Backend, simulate};
use crate::lb::InFlight;
use crate::lb::load::LoadReport;
use crate::lb::test_hosts::hosts;

const MS: Duration = Duration::from_millis(1);

/// A backend as `outrider demo` runs one: `slots` requests served at once, the rest
/// queued, and an ORCA report with every response as `testkit::backends::load` makes it:
/// the requests completed over the last second, and the requests inside (this one
/// included) over its slots.
struct DemoBackend {
    service: Duration,
    slots: usize,
    busy_until: Vec<Instant>,
    completions: VecDeque<Instant>,
    /// Requests inside: when each is answered, how long it took, its in-flight count.
    inside: Vec<(Instant, Duration, InFlight)>,
}

impl DemoBackend {
    fn new(service_ms: u64, slots: usize, t0: Instant) -> Self {
        let service = MS * u32::try_from(service_ms).unwrap_or(u32::MAX);
        Self { service, slots, busy_until: vec![t0; slots], completions: VecDeque::new(), inside: Vec::new() }
    }

    /// Takes a request at `now`.
    fn enter(&mut self, now: Instant, in_flight: InFlight) {
        let done = self.busy_until.iter_mut().min().map(|free| {
            let start = (*free).max(now);
            *free = start + self.service;
            *free
        });
        let done = done.unwrap_or(now + self.service);
        self.inside.push((done, done - now, in_flight));
    }

    /// Answers what is due at `now`, each response with its report; how many it answered.
    fn answer(&mut self, now: Instant) -> usize {
        let (due, inside): (Vec<_>, Vec<_>) = self.inside.drain(..).partition(|(done, _, _)| *done <= now);
        self.inside = inside;
        for (index, (_, latency, in_flight)) in due.iter().enumerate() {
            self.completions.push_back(now);
            while self.completions.front().is_some_and(|at| now.saturating_duration_since(*at) > Duration::from_secs(1))
            {
                self.completions.pop_front();
            }
            let inside = due.len() - index + self.inside.len();
            let report = LoadReport {
                rps_fractional: self.completions.len() as f64,
                application_utilization: inside as f64 / self.slots as f64,
                ..Default::default()
            };
            let stats = in_flight.stats();
            stats.record(now, *latency, true);
            stats.record_load(report, now);
        }
        due.len()
    }
}

/// Where requests come from.
#[derive(Clone, Copy)]
enum Load {
    /// Clients in a loop, each sending its next request the moment the last is answered.
    Clients(usize),
    /// Requests per millisecond, whatever happens to them.
    PerMs(usize),
}

/// `load` for `seconds`, one millisecond a step. Returns each backend's requests and the
/// most it had in flight after the first second.
fn demo(
    backends: &mut [DemoBackend],
    all: &[Arc<Host>],
    t0: Instant,
    load: Load,
    seconds: u64,
) -> (Vec<u64>, Vec<u32>) {
    let lb = Adaptive::new(all, &AdaptiveConfig::default());
    let mut rng = SmallRng::seed_from_u64(7);
    let mut requests = vec![0; all.len()];
    let mut max_in_flight = vec![0; all.len()];
    let mut waiting = match load {
        Load::Clients(clients) => clients,
        Load::PerMs(_) => 0,
    };
    for ms in 0..seconds * 1000 {
        let now = t0 + MS * u32::try_from(ms).unwrap_or(u32::MAX);
        let answered = backends.iter_mut().map(|backend| backend.answer(now)).sum::<usize>();
        waiting += match load {
            Load::Clients(_) => answered,
            Load::PerMs(rate) => rate,
        };
        for _ in 0..std::mem::take(&mut waiting) {
            let Some(picked) = lb.pick(all, &mut rng, &PickContext::at(now)) else { continue };
            requests[picked] += 1;
            backends[picked].enter(now, all[picked].stats.start(now));
            if ms >= 1000 {
                // After the first second: the latency mean has caught up with the queue.
                max_in_flight[picked] = max_in_flight[picked].max(all[picked].stats.in_flight());
            }
        }
    }
    (requests, max_in_flight)
}

/// The demo's three backends at `t0`, each having answered one request: `busy` in 5 ms
/// with the light-load report, the other two in 55 and 112 ms.
fn the_demos_case(t0: Instant) -> (Vec<DemoBackend>, Vec<Arc<Host>>) {
    let all = hosts(3, t0);
    let backends = vec![DemoBackend::new(5, 2, t0), DemoBackend::new(55, 100, t0), DemoBackend::new(112, 100, t0)];
    for (host, latency) in all.iter().zip([5, 55, 112]) {
        host.stats.record(t0, MS * latency, true);
    }
    let light = LoadReport { rps_fractional: 1.0, application_utilization: 0.5, ..Default::default() };
    all[0].stats.record_load(light, t0);
    (backends, all)
}

#[test]
fn the_demos_busy_backend_gets_what_it_can_serve() {
    let t0 = Instant::now();
    let (mut backends, all) = the_demos_case(t0);
    let (requests, _) = demo(&mut backends, &all, t0, Load::Clients(3), 10);
    let total: u64 = requests.iter().sum();
    // Three clients never fill `busy`'s 400 requests a second (2 slots of 5 ms): the third
    // waits 5 ms there, a tenth of the next best. So it should get nearly everything; the
    // other two keep the trickle, about one request a second each.
    assert!(requests[0] * 100 >= total * 95, "busy got {requests:?}");
    assert!(requests[1] >= 5 && requests[2] >= 5, "the others are still measured: {requests:?}");
    assert!(total > 3 * 10 * 100, "the clients' round trips are busy's, not 55 ms: {total} requests");
}

#[test]
fn under_more_load_than_it_can_serve_busy_serves_its_capacity() {
    // 1 000 requests a second: `busy` can serve 400 (2 slots of 5 ms). With its own
    // reports from then on (the requests of the last second over the share of its slots
    // taken) it must be kept near that, not starved by the first one, and not queue far
    // beyond the 55 ms the next backend would take.
    let t0 = Instant::now();
    let (mut backends, all) = the_demos_case(t0);
    let (requests, max_in_flight) = demo(&mut backends, &all, t0, Load::PerMs(1), 10);
    let total: u64 = requests.iter().sum();
    // Its reports say it is full (its queue counts in its utilization), and the wait they
    // charge keeps it a little below: over 80 % of what it can serve, not starved.
    assert!(requests[0] * 100 >= total * 33, "busy got {requests:?}, 40 % is its capacity");
    assert!(requests[1] > requests[2], "the 55 ms backend takes most of the rest: {requests:?}");
    // 2.5 ms a request queued: 25 in flight wait about as long as the 55 ms backend takes.
    assert!(max_in_flight[0] <= 25, "busy queued {} after the first second", max_in_flight[0]);
}

#[test]
fn a_reported_capacity_is_floored_at_one_request_per_round_trip() {
    let t0 = Instant::now();
    let (_, all) = the_demos_case(t0);
    let lb = Adaptive::new(&all, &AdaptiveConfig::default());
    let cost = lb.cost(&all[0], t0);
    // The report said 2 a second, which would charge 250 ms; 5 ms round trips say at least
    // 200 a second: (0 + ½) × 5 ms, 2.5 ms. Its utilization, 0.5, doubles that and the
    // round trip (M/M/1's stretch): a queue term of 10 ms, nowhere near 250.
    assert!((cost.queue - 10e6).abs() < 1.0, "{cost:?}");
    assert!(cost.total() < lb.cost(&all[1], t0).total(), "busy is the cheapest idle endpoint");
}

#[test]
fn a_report_at_light_utilization_measures_no_capacity() {
    let t0 = Instant::now();
    let all = hosts(1, t0);
    let lb = Adaptive::new(&all, &AdaptiveConfig::default());
    all[0].stats.record(t0, MS * 10, true);
    let _one = all[0].stats.start(t0);
    let idle = LoadReport { rps_fractional: 2.0, cpu_utilization: 0.1, ..Default::default() };
    all[0].stats.record_load(idle, t0);
    assert_eq!(all[0].stats.measured_load(t0, Duration::from_secs(180)), None);
    let cost = lb.cost(&all[0], t0);
    assert!((cost.queue - 10e6).abs() < 1.0, "1 in flight × 10 ms, as without a report: {cost:?}");
}

#[test]
fn a_capacity_not_refreshed_ages_out_in_seconds() {
    let t0 = Instant::now();
    let all = hosts(2, t0);
    let lb = Adaptive::new(&all, &AdaptiveConfig::default());
    let report = LoadReport { rps_fractional: 100.0, application_utilization: 0.5, ..Default::default() };
    for (host, latency) in all.iter().zip([10, 1000]) {
        host.stats.record(t0, MS * latency, true);
        host.stats.record_load(report.clone(), t0);
    }
    let capacity_used = |host: usize, at: Instant| {
        let cost = lb.cost(&all[host], at);
        // With nothing in flight, only a capacity charges anything: ½ a request's worth.
        cost.queue > 0.0
    };
    let refresh = AdaptiveConfig::default().report_refresh;
    assert!(capacity_used(0, t0 + refresh - MS), "fresh");
    assert!(!capacity_used(0, t0 + refresh), "2 s without a report: the endpoint gets no requests");
    // A 1 s endpoint's reports come no faster than its answers: four round trips (of its
    // mean as the policy sees it, which decays while it answers nothing).
    assert!(capacity_used(1, t0 + Duration::from_millis(2500)), "within 4 of its round trips");
    assert!(!capacity_used(1, t0 + Duration::from_secs(5)), "aged out all the same");
}

#[test]
fn absurd_reports_are_refused_and_counted() {
    let t0 = Instant::now();
    let all = hosts(1, t0);
    let stats = &all[0].stats;
    let fine = LoadReport { rps_fractional: 100.0, application_utilization: 0.5, ..Default::default() };
    stats.record_load(fine, t0);
    let absurd = LoadReport { rps_fractional: 1.0, application_utilization: 1e9, ..Default::default() };
    stats.record_load(absurd, t0);
    assert_eq!(stats.load_reports_refused(), 1);
    assert_eq!(
        stats.measured_load(t0, Duration::from_secs(1)).map(|m| m.capacity),
        Some(200.0),
        "the last sane capacity stands"
    );
    let stored = stats.load_report().map(|r| r.report.application_utilization);
    assert_eq!(stored, Some(0.5), "the absurd report is not stored either");
    let no_rate = LoadReport { application_utilization: 0.5, ..Default::default() };
    stats.record_load(no_rate, t0);
    assert_eq!(stats.load_reports_refused(), 1, "no rate is no capacity, not a broken reporter");
}

#[test]
fn the_trickle_is_about_one_request_a_second() {
    // A 5 ms and a 55 ms backend, both reporting their capacity: by cost alone the slow one
    // gets nothing after its first requests; the trickle sends it one request each time it
    // has been idle a second.
    let backends = [Backend::new(5, 100), Backend::new(55, 100)];
    let run = simulate(&backends, &[Duration::ZERO; 2], 1000, 20, 8);
    let late: u64 = run.per_second[1][10..].iter().sum();
    assert!((8..=10).contains(&late), "the slow one got {late} requests in 10 s: {:?}", run.per_second[1]);
}

#[test]
fn no_trickle_while_nothing_else_is_serving() {
    // One request at a time: each pick is made with nothing in flight, so it is the
    // cheapest endpoint's, however long the others have been idle.
    let t0 = Instant::now();
    let all = hosts(2, t0);
    let lb = Adaptive::new(&all, &AdaptiveConfig::default());
    let mut rng = SmallRng::seed_from_u64(9);
    all[1].stats.record(t0, MS * 55, true);
    let mut slow = 0;
    for ms in 0..10_000u32 {
        let now = t0 + MS * ms;
        all[0].stats.record(now, MS * 5, true);
        let picked = lb.pick(&all, &mut rng, &PickContext::at(now));
        slow += u32::from(picked == Some(1));
    }
    assert_eq!(slow, 0);
    let cost = lb.cost(&all[1], t0 + Duration::from_secs(5));
    assert!(cost.trickle, "it is due one, it just does not get it here: {cost:?}");
}

#[test]
fn a_failing_endpoint_gets_no_trickle() {
    let t0 = Instant::now();
    let all = hosts(2, t0);
    let lb = Adaptive::new(&all, &AdaptiveConfig::default());
    all[1].stats.record(t0, MS, false);
    let _serving = all[0].stats.start(t0);
    let later = t0 + Duration::from_secs(2);
    assert!(!lb.cost(&all[1], later).trickle, "its backoff decides");
    all[1].stats.record(later, MS, true);
    assert!(lb.cost(&all[1], later + Duration::from_secs(1)).trickle, "its last answer was a success");
}
