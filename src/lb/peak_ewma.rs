//! Peak-EWMA P2C. (Placeholder: picks at random until it lands.)

use std::sync::Arc;

use rand::rngs::SmallRng;

use super::host::Host;
use super::policy::PickContext;

#[derive(Debug)]
pub struct PeakEwma;

impl PeakEwma {
    pub fn pick(&self, hosts: &[Arc<Host>], rng: &mut SmallRng, _ctx: &PickContext<'_>) -> Option<usize> {
        super::random::Random.pick(hosts, rng)
    }
}
