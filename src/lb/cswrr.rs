//! CLIENT_SIDE_WEIGHTED_ROUND_ROBIN. (Placeholder: plain rotation until ORCA weights land.)

use std::sync::Arc;
use std::time::Instant;

use rand::Rng;
use rand::rngs::SmallRng;

use super::host::Host;
use crate::config::cluster::CswrrConfig;

#[derive(Debug)]
pub struct Cswrr;

#[derive(Debug)]
pub struct Cursor(usize);

impl Cswrr {
    pub fn new(_hosts: &[Arc<Host>], _config: &CswrrConfig, _now: Instant) -> Self {
        Self
    }

    pub fn cursor(&self, rng: &mut SmallRng) -> Cursor {
        Cursor(rng.random_range(0..1024))
    }

    pub fn pick(&self, hosts: &[Arc<Host>], cursor: &mut Cursor) -> Option<usize> {
        let index = cursor.0 % hosts.len().max(1);
        cursor.0 = index + 1;
        Some(index)
    }
}
