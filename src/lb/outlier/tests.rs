use std::sync::Arc;
use std::time::{Duration, Instant};

use super::rates::{self, Sample};
use super::*;
use crate::lb::endpoint::outlier_counters::{OutlierResult, Thresholds};
use crate::lb::test_hosts::hosts;

const SECOND: Duration = Duration::from_secs(1);

fn detector(config: OutlierDetection, hosts: &[Arc<Host>]) -> Detector {
    let mut d = Detector::new(config, 7);
    d.sync_hosts(hosts);
    d
}

fn fail(host: &Host, times: u32, config: &OutlierDetection) {
    for _ in 0..times {
        host.stats.outlier().record(OutlierResult::Status(500), &Thresholds::of(config));
    }
}

fn serve(host: &Host, ok: u64, failed: u64, config: &OutlierDetection) {
    let t = Thresholds { consecutive_5xx: 0, consecutive_gateway_failure: 0, ..Thresholds::of(config) };
    (0..ok).for_each(|_| host.stats.outlier().record(OutlierResult::Status(200), &t));
    (0..failed).for_each(|_| host.stats.outlier().record(OutlierResult::Status(500), &t));
}

#[test]
fn five_consecutive_5xx_eject_and_the_host_returns_after_base_ejection_time() {
    let t0 = Instant::now();
    let config = OutlierDetection::default();
    let hosts = hosts(10, t0);
    let mut d = detector(config.clone(), &hosts);
    fail(&hosts[3], 4, &config);
    assert!(!d.on_events(t0));
    fail(&hosts[3], 1, &config);
    assert!(d.on_events(t0));
    assert!(hosts[3].stats.is_ejected(t0 + 1000 * SECOND));
    // Unejection happens on the interval timer once 30 s have passed.
    assert!(!d.sweep(t0 + 20 * SECOND));
    assert!(d.sweep(t0 + 30 * SECOND));
    assert!(!hosts[3].stats.is_ejected(t0 + 30 * SECOND));
}

#[test]
fn ejection_time_grows_with_repeat_ejections_and_is_capped() {
    let t0 = Instant::now();
    let config = OutlierDetection {
        base_ejection_time: 10 * SECOND,
        max_ejection_time: 25 * SECOND,
        interval: SECOND,
        ..OutlierDetection::default()
    };
    let hosts = hosts(10, t0);
    let mut d = detector(config.clone(), &hosts);
    let mut now = t0;
    // Each round: eject right after return; the time in ejection is 10 s, 20 s, then 25 s (cap).
    for expected in [10, 20, 25, 25] {
        fail(&hosts[0], 5, &config);
        assert!(d.on_events(now));
        let ejected_at = now;
        loop {
            now += SECOND;
            if d.sweep(now) {
                break;
            }
            assert!(now - ejected_at < 100 * SECOND);
        }
        assert_eq!(now - ejected_at, expected * SECOND);
    }
    // Intervals in rotation decay the multiplier back: the next ejection is short again.
    for _ in 0..5 {
        now += SECOND;
        d.sweep(now);
    }
    fail(&hosts[0], 5, &config);
    assert!(d.on_events(now));
    assert!(!d.sweep(now + 9 * SECOND));
    assert!(d.sweep(now + 10 * SECOND));
}

#[test]
fn jitter_adds_up_to_its_maximum() {
    let t0 = Instant::now();
    let config = OutlierDetection { max_ejection_time_jitter: 5 * SECOND, ..OutlierDetection::default() };
    let hosts = hosts(10, t0);
    let mut d = detector(config.clone(), &hosts);
    fail(&hosts[0], 5, &config);
    assert!(d.on_events(t0));
    assert!(!d.sweep(t0 + 30 * SECOND - Duration::from_millis(1)));
    let returned = (30..=36).map(|s| t0 + s * SECOND).find(|at| d.sweep(*at));
    assert!(returned.is_some_and(|at| at <= t0 + 35 * SECOND), "{returned:?}");
}

#[test]
fn max_ejection_percent_limits_ejections_but_one_host_may_always_go() {
    let t0 = Instant::now();
    let config = OutlierDetection::default(); // 10 %
    let five = hosts(5, t0);
    let mut d = detector(config.clone(), &five);
    fail(&five[0], 5, &config);
    fail(&five[1], 5, &config);
    assert!(d.on_events(t0));
    assert_eq!(d.ejected_count(), 1, "10 % of 5 is under one host, yet one goes; the second does not");

    let config = OutlierDetection { max_ejection_percent: 20, ..OutlierDetection::default() };
    let ten = hosts(10, t0);
    let mut d = detector(config.clone(), &ten);
    (0..4).for_each(|i| fail(&ten[i], 5, &config));
    d.on_events(t0);
    assert_eq!(d.ejected_count(), 2);
}

#[test]
fn enforcement_zero_detects_but_never_ejects() {
    let t0 = Instant::now();
    let config = OutlierDetection::default(); // gateway failures: enforcing 0 %
    let hosts = hosts(10, t0);
    let mut d = detector(OutlierDetection { consecutive_5xx: 100, ..config.clone() }, &hosts);
    let t = Thresholds { consecutive_5xx: 100, ..Thresholds::of(&config) };
    (0..5).for_each(|_| hosts[0].stats.outlier().record(OutlierResult::Status(503), &t));
    assert!(!d.on_events(t0));
    assert_eq!(d.ejected_count(), 0);
}

#[test]
fn success_rate_threshold_is_mean_minus_factor_sigma() {
    let address = |i: u8| Address::Socket(format!("10.0.0.{i}:80").parse().unwrap());
    let samples: Vec<Sample> = [100.0, 100.0, 100.0, 100.0, 50.0]
        .iter()
        .enumerate()
        .map(|(i, sr)| Sample { address: address(i as u8), success_rate: *sr, volume: 100 })
        .collect();
    let refs: Vec<&Sample> = samples.iter().collect();
    // mean 90, population σ = 20 → 90 − 1.9 × 20 = 52.
    assert!((rates::success_rate_threshold(&refs, 1.9) - 52.0).abs() < 1e-9);
    let config = OutlierDetection::default();
    assert_eq!(rates::outliers(&config, &samples), vec![(address(4), true)]);
    // Four hosts are under success_rate_minimum_hosts (5): nothing.
    assert!(rates::outliers(&config, &samples[1..]).is_empty());
    // Not enough volume: the host does not count.
    let mut low = samples.clone();
    low[4].volume = 99;
    assert!(rates::outliers(&config, &low).is_empty());
}

#[test]
fn failure_percentage_needs_its_threshold_hosts_and_volume() {
    let address = |i: u8| Address::Socket(format!("10.0.0.{i}:80").parse().unwrap());
    let config = OutlierDetection { success_rate_minimum_hosts: 100, ..OutlierDetection::default() };
    let sample = |i: u8, sr: f64, volume: u64| Sample { address: address(i), success_rate: sr, volume };
    let samples = vec![
        sample(0, 15.0, 50),
        sample(1, 16.0, 50),
        sample(2, 100.0, 50),
        sample(3, 100.0, 50),
        sample(4, 100.0, 50),
    ];
    assert_eq!(rates::outliers(&config, &samples), vec![(address(0), false)], "85 % failures is enough, 84 % is not");
    let few = &samples[..4];
    assert!(rates::outliers(&config, few).is_empty(), "failure_percentage_minimum_hosts 5");
    let mut quiet = samples.clone();
    quiet[0].volume = 49;
    assert!(rates::outliers(&config, &quiet).is_empty(), "failure_percentage_request_volume 50");
}

#[test]
fn the_interval_sweep_ejects_by_success_rate_on_the_interval_counts() {
    let t0 = Instant::now();
    let config = OutlierDetection { max_ejection_percent: 50, ..OutlierDetection::default() };
    let hosts = hosts(6, t0);
    let mut d = detector(config.clone(), &hosts);
    hosts[..5].iter().for_each(|h| serve(h, 100, 0, &config));
    serve(&hosts[5], 40, 60, &config);
    assert!(d.sweep(t0 + 10 * SECOND));
    assert!(d.is_ejected(hosts[5].address()));
    assert_eq!(d.ejected_count(), 1);
    // The next interval has no traffic: nothing more happens.
    assert!(!d.sweep(t0 + 20 * SECOND));
}

#[test]
fn a_passing_health_check_returns_an_ejected_host() {
    let t0 = Instant::now();
    let config = OutlierDetection::default();
    let hosts = hosts(3, t0);
    let mut d = detector(config.clone(), &hosts);
    fail(&hosts[1], 5, &config);
    assert!(d.on_events(t0));
    assert!(d.on_health_check_pass(hosts[1].address()));
    assert!(!hosts[1].stats.is_ejected(t0));
}
