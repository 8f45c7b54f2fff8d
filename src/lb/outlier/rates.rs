//! Success-rate and failure-percentage ejection over one interval's counts, as Envoy
//! computes them (`DetectorImpl::processSuccessRateEjections`).

use crate::config::Address;
use crate::config::cluster::OutlierDetection;

/// One host in rotation over the last interval.
#[derive(Debug, Clone)]
pub struct Sample {
    pub address: Address,
    /// Successes in percent of requests, 0–100.
    pub success_rate: f64,
    pub volume: u64,
}

/// Hosts to eject: (address, true for success rate, false for failure percentage).
///
/// Success rate: among hosts with at least `success_rate_request_volume` requests, if
/// there are at least `success_rate_minimum_hosts`, eject those below
/// `mean − stdev_factor/1000 × σ` (population standard deviation). Failure percentage:
/// among hosts with at least `failure_percentage_request_volume` requests, if there are at
/// least `failure_percentage_minimum_hosts`, eject those failing at least
/// `failure_percentage_threshold` percent.
pub fn outliers(config: &OutlierDetection, samples: &[Sample]) -> Vec<(Address, bool)> {
    let mut out = Vec::new();
    let rated: Vec<&Sample> =
        samples.iter().filter(|s| s.volume >= u64::from(config.success_rate_request_volume)).collect();
    if !rated.is_empty() && rated.len() >= config.success_rate_minimum_hosts as usize {
        let threshold = success_rate_threshold(&rated, f64::from(config.success_rate_stdev_factor) / 1000.0);
        out.extend(rated.iter().filter(|s| s.success_rate < threshold).map(|s| (s.address.clone(), true)));
    }
    let counted: Vec<&Sample> =
        samples.iter().filter(|s| s.volume >= u64::from(config.failure_percentage_request_volume)).collect();
    if !counted.is_empty() && counted.len() >= config.failure_percentage_minimum_hosts as usize {
        let threshold = f64::from(config.failure_percentage_threshold);
        out.extend(counted.iter().filter(|s| 100.0 - s.success_rate >= threshold).map(|s| (s.address.clone(), false)));
    }
    out
}

/// `mean − factor × σ` of the hosts' success rates.
pub fn success_rate_threshold(samples: &[&Sample], factor: f64) -> f64 {
    let n = samples.len() as f64;
    let mean = samples.iter().map(|s| s.success_rate).sum::<f64>() / n;
    let variance = samples.iter().map(|s| (s.success_rate - mean).powi(2)).sum::<f64>() / n;
    mean - factor * variance.sqrt()
}
