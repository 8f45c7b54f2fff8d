//! RANDOM: uniform over the host set, ignoring weights (as Envoy does).

use std::sync::Arc;

use rand::Rng;
use rand::rngs::SmallRng;

use super::host::Host;

#[derive(Debug, Clone, Copy, Default)]
pub struct Random;

impl Random {
    pub fn pick(&self, hosts: &[Arc<Host>], rng: &mut SmallRng) -> Option<usize> {
        (!hosts.is_empty()).then(|| rng.random_range(0..hosts.len()))
    }
}
