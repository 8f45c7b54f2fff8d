//! RING_HASH. (Placeholder: picks at random until the ring lands.)

use std::sync::Arc;

use rand::Rng;
use rand::rngs::SmallRng;

use super::host::Host;
use super::policy::PickContext;
use crate::config::cluster::RingHashConfig;

#[derive(Debug)]
pub struct RingHash {
    size: usize,
}

impl RingHash {
    pub fn new(hosts: &[Arc<Host>], _weights: &[f64], _config: &RingHashConfig) -> Self {
        Self { size: hosts.len() }
    }

    pub fn pick(&self, rng: &mut SmallRng, _ctx: &PickContext<'_>) -> Option<usize> {
        (self.size > 0).then(|| rng.random_range(0..self.size))
    }
}
