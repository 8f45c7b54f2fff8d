//! Slow start (Envoy's `applySlowStartFactor`): a new host's weight grows over the window
//! from `min_weight_percent` to its full weight, faster with higher `aggression`.

use std::time::Instant;

use crate::config::cluster::SlowStartConfig;

/// The weight of a host first seen at `since`, at `now`: `w × max(min%, f^(1/aggression))`
/// with `f = elapsed / window`; the full weight once the window has passed.
pub fn weight(config: &SlowStartConfig, weight: f64, since: Instant, now: Instant) -> f64 {
    let window = config.window.as_secs_f64();
    let elapsed = now.saturating_duration_since(since).as_secs_f64().max(0.001);
    if window <= 0.0 || elapsed >= window {
        return weight;
    }
    let aggression = if config.aggression > 0.0 && config.aggression.is_finite() { config.aggression } else { 1.0 };
    let factor = (elapsed / window).powf(1.0 / aggression);
    weight * factor.max(config.min_weight_percent / 100.0)
}

/// Whether a host first seen at `since` is still ramping up at `now`.
pub fn in_window(config: &SlowStartConfig, since: Instant, now: Instant) -> bool {
    now.saturating_duration_since(since) < config.window
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn config(aggression: f64) -> SlowStartConfig {
        SlowStartConfig { window: Duration::from_secs(60), aggression, min_weight_percent: 10.0 }
    }

    #[test]
    fn ramps_from_the_floor_to_full_weight() {
        let t0 = Instant::now();
        let linear = config(1.0);
        assert!((weight(&linear, 100.0, t0, t0) - 10.0).abs() < 1e-9, "floored at min_weight_percent");
        assert!((weight(&linear, 100.0, t0, t0 + Duration::from_secs(30)) - 50.0).abs() < 1e-6);
        assert_eq!(weight(&linear, 100.0, t0, t0 + Duration::from_secs(60)), 100.0);
        let aggressive = config(2.0);
        let half = weight(&aggressive, 100.0, t0, t0 + Duration::from_secs(15));
        assert!((half - 50.0).abs() < 1e-6, "(1/4)^(1/2) = 1/2: {half}");
    }
}
