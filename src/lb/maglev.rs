//! MAGLEV. (Placeholder: picks at random until the table lands.)

use std::sync::Arc;

use rand::Rng;
use rand::rngs::SmallRng;

use super::host::Host;
use super::policy::PickContext;
use crate::config::cluster::MaglevConfig;

#[derive(Debug)]
pub struct Maglev {
    size: usize,
}

impl Maglev {
    pub fn new(hosts: &[Arc<Host>], _weights: &[f64], _config: &MaglevConfig) -> Self {
        Self { size: hosts.len() }
    }

    pub fn pick(&self, rng: &mut SmallRng, _ctx: &PickContext<'_>) -> Option<usize> {
        (self.size > 0).then(|| rng.random_range(0..self.size))
    }
}
