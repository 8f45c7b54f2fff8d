//! ROUND_ROBIN: plain rotation from a random start when every weight is equal and no host
//! is ramping up; otherwise EDF over the weights (slow start applied at each pick), also
//! from a randomised start.

use std::sync::Arc;

use rand::Rng;
use rand::rngs::SmallRng;

use super::edf::Edf;
use super::host::Host;
use super::pick_context::PickContext;
use super::slow_start;
use crate::config::cluster::SlowStartConfig;

#[derive(Debug)]
pub struct RoundRobin {
    weights: Vec<f64>,
    equal: bool,
    slow_start: Option<SlowStartConfig>,
}

#[derive(Debug)]
pub enum Cursor {
    Rotate(usize),
    Edf(Edf),
}

impl RoundRobin {
    pub fn new(hosts: &[Arc<Host>], slow_start: Option<SlowStartConfig>) -> Self {
        let weights: Vec<f64> = hosts.iter().map(|h| f64::from(h.weight())).collect();
        let equal = weights.windows(2).all(|w| w[0] == w[1]);
        Self { weights, equal, slow_start }
    }

    pub fn cursor(&self, rng: &mut SmallRng) -> Cursor {
        let n = self.weights.len().max(1);
        if self.equal && self.slow_start.is_none() {
            return Cursor::Rotate(rng.random_range(0..n));
        }
        let weights = self.weights.clone();
        Cursor::Edf(Edf::new(self.weights.iter().copied(), rng.random_range(0..n), |i| weights[i]))
    }

    pub fn pick(&self, hosts: &[Arc<Host>], cursor: &mut Cursor, ctx: &PickContext<'_>) -> Option<usize> {
        match cursor {
            Cursor::Rotate(next) => {
                let index = *next % hosts.len();
                *next = index + 1;
                Some(index)
            }
            Cursor::Edf(edf) => edf.next(&mut |i| self.weight(hosts, i, ctx)),
        }
    }

    fn weight(&self, hosts: &[Arc<Host>], index: usize, ctx: &PickContext<'_>) -> f64 {
        let weight = self.weights.get(index).copied().unwrap_or(1.0);
        match (&self.slow_start, hosts.get(index)) {
            (Some(config), Some(host)) => slow_start::weight(config, weight, host.stats.first_seen(), ctx.now),
            _ => weight,
        }
    }
}
