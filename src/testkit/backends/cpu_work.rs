//! CPU work of a fixed size, for lab backends whose capacity is their CPU: a request that
//! costs `cpu` runs a computation that takes that long on an unthrottled CPU, so under a
//! cgroup's quota it takes longer and the pod serves what its limit allows, as a CPU-bound
//! application does. A fixed amount of computation, not a spin until the wall clock has
//! moved on: a throttled thread does no work while the clock runs, and a spin would then
//! cost the pod less CPU than the request it stands for.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Rounds of the computation per calibration sample.
const SAMPLE_ROUNDS: u64 = 20_000;
/// Samples taken; the fastest one counts (the others may have been preempted or throttled).
const SAMPLES: u32 = 25;

/// Rounds per nanosecond, measured once per process.
fn rounds_per_ns() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        let fastest = (0..SAMPLES)
            .map(|_| {
                let started = Instant::now();
                compute(SAMPLE_ROUNDS);
                started.elapsed()
            })
            .min()
            .unwrap_or(Duration::from_micros(100))
            .max(Duration::from_nanos(1));
        SAMPLE_ROUNDS as f64 / fastest.as_nanos() as f64
    })
}

/// Does `cpu` worth of computation on this thread (blocking it).
pub fn spend(cpu: Duration) {
    if cpu.is_zero() {
        return;
    }
    // `as` saturates; the product is a lab's setting, finite and small.
    compute((cpu.as_nanos() as f64 * rounds_per_ns()) as u64);
}

/// Measures the rate now, so the first request does not pay for it.
pub fn calibrate() {
    rounds_per_ns();
}

fn compute(rounds: u64) {
    let mut x = black_box(0x9e37_79b9_7f4a_7c15_u64);
    for i in 0..rounds {
        x = x.rotate_left(5) ^ i.wrapping_mul(0xff51_afd7_ed55_8ccd);
    }
    black_box(x);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_measured_and_work_of_zero_costs_nothing() {
        calibrate();
        assert!(rounds_per_ns() > 0.0 && rounds_per_ns().is_finite());
        spend(Duration::ZERO);
        spend(Duration::from_micros(10));
    }
}
