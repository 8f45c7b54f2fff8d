use std::time::Duration;

use rand::SeedableRng;

use super::*;
use crate::config::cluster::SlowStartConfig;
use crate::lb::test_hosts::hosts;

fn report(qps: f64, utilization: f64, eps: f64) -> LoadReport {
    LoadReport { rps_fractional: qps, application_utilization: utilization, eps, ..Default::default() }
}

fn shares(cswrr: &Cswrr, hosts: &[Arc<Host>], picks: usize) -> Vec<f64> {
    let mut cursor = cswrr.cursor(&mut SmallRng::seed_from_u64(1));
    let mut counts = vec![0usize; hosts.len()];
    for _ in 0..picks {
        counts[cswrr.pick(hosts, &mut cursor).unwrap()] += 1;
    }
    counts.iter().map(|c| *c as f64 / picks as f64).collect()
}

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn weight_is_qps_over_utilization_plus_error_penalty() {
    let config = CswrrConfig::default();
    assert_eq!(report_weight(&report(100.0, 0.5, 0.0), &config), Some(200.0));
    // 100 / (0.5 + 50/100 × 1.0) = 100.
    assert_eq!(report_weight(&report(100.0, 0.5, 50.0), &config), Some(100.0));
    let no_penalty = CswrrConfig { error_utilization_penalty: 0.0, ..config.clone() };
    assert_eq!(report_weight(&report(100.0, 0.5, 50.0), &no_penalty), Some(200.0));
    assert_eq!(report_weight(&report(0.0, 0.5, 0.0), &config), None, "no qps");
    assert_eq!(report_weight(&report(100.0, 0.0, 0.0), &config), None, "no utilization");
    // A black hole: no work, every request failed. 100 / (0 + 100/100 × 1.0) = 100, far
    // below a healthy endpoint's 100 / 0.1 = 1000 (Envoy's order; gRPC would ignore it).
    assert_eq!(report_weight(&report(100.0, 0.0, 100.0), &config), Some(100.0));
    assert_eq!(report_weight(&report(100.0, 0.0, 100.0), &no_penalty), None, "no penalty, no utilization");
}

#[test]
fn utilization_prefers_named_metrics_then_application_then_cpu() {
    let mut r = LoadReport { cpu_utilization: 0.3, ..Default::default() };
    assert_eq!(r.utilization(&[]), 0.3);
    r.application_utilization = 0.6;
    assert_eq!(r.utilization(&[]), 0.6);
    r.named_metrics.insert("queue".into(), 0.8);
    r.utilization.insert("disk".into(), 0.9);
    let names = ["named_metrics.queue".to_owned(), "utilization.disk".to_owned(), "named_metrics.absent".to_owned()];
    assert_eq!(r.utilization(&names), 0.9, "the maximum of the configured metrics");
    r.utilization.insert("disk".into(), 0.0);
    r.named_metrics.insert("queue".into(), 0.0);
    assert_eq!(r.utilization(&names), 0.6, "configured metrics at 0 fall back to application utilization");
    assert_eq!(r.utilization(&["mem_utilization".to_owned()]), 0.6);
}

#[test]
fn stride_shares_follow_the_weights() {
    let now = Instant::now();
    let hosts = hosts(3, now);
    let cswrr = Cswrr::new(&hosts, &CswrrConfig::default(), now);
    cswrr.weights.store(Arc::new(scale(&[1.0, 2.0, 4.0])));
    let Weights::Stride(w) = &*cswrr.weights() else { panic!("stride expected") };
    assert_eq!(&w[..], &[16384, 32768, 65535]);
    let got = shares(&cswrr, &hosts, 70_000);
    for (share, want) in got.iter().zip([1.0 / 7.0, 2.0 / 7.0, 4.0 / 7.0]) {
        assert!((share - want).abs() < 0.005, "{got:?}");
    }
}

#[test]
fn weights_are_clamped_to_ten_times_the_mean() {
    let mut weights = vec![1.0; 99];
    weights.push(1e6);
    let Weights::Stride(w) = scale(&weights) else { panic!("stride expected") };
    // mean ≈ 10 001; the big one is capped at 10× that, the small ones floored at 1 % of it.
    assert_eq!(w[99], 65535);
    assert_eq!(w[0], 66, "{}", w[0]);
}

/// Why a far weaker endpoint still gets about 0.5 % of the picks (see the module's notes):
/// weights 1 and 10 000 have a mean of 5 000.5, and 1 % of it, scaled, is 328 of 65 535.
#[test]
fn a_far_weaker_endpoint_keeps_the_floor_share() {
    let now = Instant::now();
    let hosts = hosts(2, now);
    let cswrr = Cswrr::new(&hosts, &CswrrConfig::default(), now);
    cswrr.weights.store(Arc::new(scale(&[1.0, 10_000.0])));
    let Weights::Stride(w) = &*cswrr.weights() else { panic!("stride expected") };
    assert_eq!(&w[..], &[328, 65535]);
    let got = shares(&cswrr, &hosts, 100_000);
    assert!((got[0] - 328.0 / 65_863.0).abs() < 0.0005, "{got:?}");
}

#[test]
fn fewer_than_two_known_weights_or_equal_weights_are_round_robin() {
    assert_eq!(schedule(&[0.0, 0.0, 0.0], |_, w| w), Weights::RoundRobin);
    assert_eq!(schedule(&[5.0, 0.0, 0.0], |_, w| w), Weights::RoundRobin, "grpc-java#11407");
    assert_eq!(schedule(&[5.0, 5.0, 0.0], |_, w| w), Weights::RoundRobin, "unknown gets the mean: all equal");
    assert_eq!(
        schedule(&[2.0, 4.0, 0.0], |_, w| w),
        Weights::Stride(Box::new([32768, 65535, 49151])),
        "unknown gets the mean, 3"
    );
    let now = Instant::now();
    let hosts = hosts(4, now);
    let cswrr = Cswrr::new(&hosts, &CswrrConfig::default(), now);
    let got = shares(&cswrr, &hosts, 4000);
    assert!(got.iter().all(|s| (s - 0.25).abs() < 1e-9), "plain rotation: {got:?}");
}

#[test]
fn blackout_then_weights_then_expiry() {
    let t0 = Instant::now();
    let hosts = hosts(2, t0);
    let config = CswrrConfig::default();
    let cswrr = Cswrr::new(&hosts, &config, t0);
    hosts[0].stats.record_load(report(100.0, 1.0, 0.0), t0);
    hosts[1].stats.record_load(report(300.0, 1.0, 0.0), t0);
    cswrr.update_weights(t0 + 9 * SECOND);
    assert_eq!(*cswrr.weights(), Weights::RoundRobin, "in blackout");
    hosts[0].stats.record_load(report(100.0, 1.0, 0.0), t0 + 10 * SECOND);
    hosts[1].stats.record_load(report(300.0, 1.0, 0.0), t0 + 10 * SECOND);
    cswrr.update_weights(t0 + 10 * SECOND);
    assert_eq!(*cswrr.weights(), Weights::Stride(Box::new([21845, 65535])));

    // A rebuilt balancer over the same endpoints keeps the state: no new blackout.
    let rebuilt = Cswrr::new(&hosts, &config, t0 + 11 * SECOND);
    assert_eq!(*rebuilt.weights(), Weights::Stride(Box::new([21845, 65535])));

    // A report without traffic is ignored: the previous weight stays.
    hosts[0].stats.record_load(report(0.0, 1.0, 0.0), t0 + 12 * SECOND);
    cswrr.update_weights(t0 + 12 * SECOND);
    assert_eq!(*cswrr.weights(), Weights::Stride(Box::new([21845, 65535])));

    // Host 0's last usable report is from t0+10 s: it expires at t0+190 s and takes the
    // mean, which with one weight left is plain round robin.
    hosts[1].stats.record_load(report(300.0, 1.0, 0.0), t0 + 190 * SECOND);
    cswrr.update_weights(t0 + 190 * SECOND);
    assert_eq!(*cswrr.weights(), Weights::RoundRobin);
    // Reporting again restarts the blackout.
    hosts[0].stats.record_load(report(100.0, 1.0, 0.0), t0 + 191 * SECOND);
    hosts[1].stats.record_load(report(300.0, 1.0, 0.0), t0 + 195 * SECOND);
    cswrr.update_weights(t0 + 195 * SECOND);
    assert_eq!(*cswrr.weights(), Weights::RoundRobin, "host 0 is in blackout again");
    hosts[1].stats.record_load(report(300.0, 1.0, 0.0), t0 + 201 * SECOND);
    cswrr.update_weights(t0 + 201 * SECOND);
    assert_eq!(*cswrr.weights(), Weights::Stride(Box::new([21845, 65535])));
}

#[test]
fn slow_start_ramps_a_new_host_even_without_reports() {
    let t0 = Instant::now();
    let hosts = hosts(2, t0);
    let window = Duration::from_secs(100);
    let config = CswrrConfig {
        slow_start: Some(SlowStartConfig { window, aggression: 1.0, min_weight_percent: 10.0 }),
        ..Default::default()
    };
    let cswrr = Cswrr::new(&hosts, &config, t0 + 50 * SECOND);
    assert_eq!(*cswrr.weights(), Weights::RoundRobin, "both halfway: equal");
    let newcomer = Arc::new(Host { stats: Arc::new(EndpointStats::new(t0 + 50 * SECOND)), ..(*hosts[1]).clone() });
    let mixed = vec![hosts[0].clone(), newcomer];
    let cswrr = Cswrr::new(&mixed, &config, t0 + 100 * SECOND);
    assert_eq!(*cswrr.weights(), Weights::Stride(Box::new([65535, 32768])));
    cswrr.update_weights(t0 + 150 * SECOND);
    assert_eq!(*cswrr.weights(), Weights::RoundRobin, "ramp over");
}

#[test]
fn workers_start_at_different_points() {
    let now = Instant::now();
    let hosts = hosts(10, now);
    let cswrr = Cswrr::new(&hosts, &CswrrConfig::default(), now);
    let first: Vec<usize> = (0..8)
        .map(|seed| {
            let mut cursor = cswrr.cursor(&mut SmallRng::seed_from_u64(seed));
            cswrr.pick(&hosts, &mut cursor).unwrap()
        })
        .collect();
    assert!(first.iter().any(|i| *i != first[0]), "{first:?}");
}
