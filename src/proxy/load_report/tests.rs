use super::*;

/// `n` answers of `latency` each on worker 0.
fn answer(load: &InboundLoad, n: usize, latency: Duration) {
    for _ in 0..n {
        let arrival = load.started(0);
        load.answered(0, arrival, latency);
    }
}

fn cpu(spent: f64, at: Instant) -> Option<CpuSample> {
    Some(CpuSample { spent, cpus: 2.0, at })
}

fn parsed(text: &str) -> crate::lb::load::LoadReport {
    let mut headers = HeaderMap::new();
    headers.insert(ENDPOINT_LOAD_METRICS, HeaderValue::from_str(text).unwrap());
    crate::orca::from_headers(&headers).unwrap().unwrap()
}

#[test]
fn a_report_comes_from_the_counts_and_the_cpu_and_parses_as_orca() {
    let load = InboundLoad::new(2);
    let mut reporter = Reporter::default();
    let t0 = Instant::now();
    assert_eq!(reporter.tick(&load, cpu(0.0, t0), t0), None, "one tick is no rate");
    let mut report = None;
    // 10 answers of 4 ms every 250 ms (40 per second), the pod using half of its 2 CPUs.
    for i in 1..=20u32 {
        answer(&load, 10, Duration::from_millis(4));
        let at = t0 + REFRESH * i;
        report = reporter.tick(&load, cpu(f64::from(i) * 0.25, at), at);
    }
    load.started(1);
    let at = t0 + REFRESH * 21;
    answer(&load, 10, Duration::from_millis(4));
    let text = reporter.tick(&load, cpu(21.0 * 0.25, at), at).unwrap();
    assert!(report.is_some());
    let report = parsed(&text);
    assert!((report.rps_fractional - 40.0).abs() < 1.0, "{text}");
    assert!((report.cpu_utilization - 0.5).abs() < 1e-6 && report.application_utilization == report.cpu_utilization);
    assert_eq!(report.named_metrics.get("in_flight"), Some(&1.0), "worker 1's request is in the application");
    assert!((report.named_metrics["latency_ms"] - 4.0).abs() < 1e-6, "{text}");
    let crate::lb::load::Capacity::Measured(capacity) = report.capacity() else { panic!("{text}") };
    assert!((capacity - 80.0).abs() < 2.0, "40 per second at half the CPU: {capacity}");
}

#[test]
fn a_pool_that_queues_reports_its_requests_over_its_size() {
    // A pool of 2 serving 10 ms requests: arrivals to 3 or 4 in it wait for one or two to
    // leave. Per 250 ms: 10 arrivals to an empty pool, 8 to one busy slot, 2 to a full
    // one, 1 behind a queue of one.
    let load = InboundLoad::new(1);
    let mut reporter = Reporter::default();
    let t0 = Instant::now();
    let cpu_at = |i: u32| cpu(f64::from(i) * 0.05, t0 + REFRESH * i);
    reporter.tick(&load, cpu_at(0), t0);
    let mut text = None;
    for i in 1..=80u32 {
        for (k, arrivals, millis) in [(1, 10, 10), (2, 8, 10), (3, 2, 15), (4, 1, 20)] {
            for _ in 0..arrivals {
                load.started(0);
                load.answered(0, Arrival(k - 1), Duration::from_millis(millis));
            }
        }
        text = reporter.tick(&load, cpu_at(i), t0 + REFRESH * i);
    }
    let text = text.unwrap();
    let report = parsed(&text);
    // 230 ms in the pool every 250 ms: 0.92 requests in it on average, of 2.
    assert!((report.application_utilization - 0.46).abs() < 0.01, "{text}");
    assert!((report.cpu_utilization - 0.1).abs() < 1e-6, "the CPU is reported as it is: {text}");
}

#[test]
fn a_pool_that_never_queued_is_taken_for_more_than_the_largest_count_seen() {
    // Arrivals to 1 to 6 in it, all answered in 10 ms: 600 ms in it every 250 ms, 2.4
    // requests of at least 6¾ (6 seen, none waited: an eighth more), 0.36; below the
    // CPU's 0.5, which is what it reports then.
    for (cpu_used, expected) in [(Some(0.25), 0.5), (None, 2.4 / 6.75)] {
        let load = InboundLoad::new(1);
        let mut reporter = Reporter::default();
        let t0 = Instant::now();
        let cpu_at = |i: u32| cpu_used.and_then(|used| cpu(f64::from(i) * used, t0 + REFRESH * i));
        reporter.tick(&load, cpu_at(0), t0);
        let mut text = None;
        for i in 1..=80u32 {
            for k in 1..=6 {
                for _ in 0..10 {
                    load.started(0);
                    load.answered(0, Arrival(k - 1), Duration::from_millis(10));
                }
            }
            text = reporter.tick(&load, cpu_at(i), t0 + REFRESH * i);
        }
        let text = text.unwrap();
        let report = parsed(&text);
        assert!((report.application_utilization - expected).abs() < 0.01, "{text}");
    }
}

#[test]
fn an_idle_pod_reports_nothing() {
    let load = InboundLoad::new(1);
    let mut reporter = Reporter::default();
    let t0 = Instant::now();
    reporter.tick(&load, None, t0);
    assert_eq!(reporter.tick(&load, None, t0 + REFRESH), None, "no answers");
    answer(&load, 100, Duration::from_millis(1));
    assert!(reporter.tick(&load, None, t0 + REFRESH * 2).is_some());
    // The rate fades once the answers stop, and so does the report.
    let silent = (3..40u32).map(|i| reporter.tick(&load, None, t0 + REFRESH * i)).last().flatten();
    assert_eq!(silent, None);
}

#[test]
fn workers_copy_the_report_when_it_changes() {
    let load = InboundLoad::new(1);
    let worker = WorkerReport::default();
    assert_eq!(worker.current(&load), None);
    load.publish(Some(HeaderValue::from_static("TEXT rps_fractional=1")));
    assert_eq!(worker.current(&load).unwrap(), "TEXT rps_fractional=1");
    load.publish(None);
    assert_eq!(worker.current(&load), None);
}

#[test]
fn only_an_mtls_caller_that_asks_gets_a_report_and_the_application_keeps_its_own() {
    let ask = || {
        let mut headers = HeaderMap::new();
        headers.insert(LOAD_REPORT_REQUEST, HeaderValue::from_static("1"));
        headers
    };
    let mut headers = ask();
    assert!(take_request(&mut headers, true));
    assert!(headers.is_empty(), "the application never sees the ask");
    let mut headers = ask();
    assert!(!take_request(&mut headers, false), "a plaintext caller is outside the mesh");
    assert!(headers.is_empty());
    assert!(!take_request(&mut HeaderMap::new(), true));

    let ours = HeaderValue::from_static("TEXT rps_fractional=5");
    let mut answer = HeaderMap::new();
    add_to_answer(&mut answer, ours.clone());
    assert_eq!(answer[ENDPOINT_LOAD_METRICS], "TEXT rps_fractional=5");
    let mut answer = HeaderMap::new();
    answer.insert(ENDPOINT_LOAD_METRICS_BIN, HeaderValue::from_static("AAAA"));
    add_to_answer(&mut answer, ours);
    assert!(!answer.contains_key(ENDPOINT_LOAD_METRICS), "the application's own report wins");
}

#[test]
fn the_first_answers_are_reported_whole_not_smoothed_from_zero() {
    // A pod flooded from its first requests: 100 answers of 20 ms in the first 250 ms,
    // 400 a second with 8 in it on average. Smoothed from zero, the first report said a
    // fifth of that (and a 2-slot pool with 5 to 15 in it read under half busy).
    let load = InboundLoad::new(1);
    let mut reporter = Reporter::default();
    let t0 = Instant::now();
    assert_eq!(reporter.tick(&load, None, t0), None);
    assert_eq!(reporter.tick(&load, None, t0 + REFRESH), None, "nothing answered yet");
    answer(&load, 100, Duration::from_millis(20));
    let text = reporter.tick(&load, None, t0 + REFRESH * 2).unwrap();
    assert!((parsed(&text).rps_fractional - 400.0).abs() < 1e-6, "{text}");
    assert!((reporter.in_app - 8.0).abs() < 1e-6, "{}", reporter.in_app);
    // Later ticks are smoothed again: an idle quarter second takes a fifth off, not all.
    let text = reporter.tick(&load, None, t0 + REFRESH * 3).unwrap();
    let rps = parsed(&text).rps_fractional;
    assert!(rps > 300.0 && rps < 330.0, "{text}");
}

#[test]
fn the_window_in_which_traffic_began_is_counted_from_its_first_request() {
    // The lab's S5 through two hops: a 2-slot backend's first report said 24 requests a
    // second where it was being sent about 115, its traffic having begun late in the
    // window; callers dividing the requests inside by that rate read a wait five times
    // too long. Here the window is 250 ms and the requests came in its last 50 at most.
    let load = InboundLoad::new(1);
    let mut reporter = Reporter::default();
    let began = Instant::now();
    let window_start = began.checked_sub(Duration::from_millis(200)).unwrap_or(began);
    assert_eq!(reporter.tick(&load, None, window_start), None);
    answer(&load, 24, Duration::from_millis(10));
    let first = parsed(&reporter.tick(&load, None, began + Duration::from_millis(50)).unwrap());
    // 24 over at most 50 ms (the window's whole 250 ms would say 96 a second); the margin
    // below is for the time the test itself takes between its first request and `began`'s
    // reading, never the machine's speed.
    assert!(first.rps_fractional >= 480.0 - 1e-6 && first.rps_fractional < 2_400.0, "{first:?}");
    assert_eq!(first.named_metrics.get(IN_FLIGHT_METRIC), Some(&0.0), "{first:?}");
}
