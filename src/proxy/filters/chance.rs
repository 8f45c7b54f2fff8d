//! Per-request draws against a [`FractionalPercent`] (Envoy's `featureEnabled` with no
//! runtime override). 0% and 100% never draw, so they are deterministic; anything between
//! draws from the thread's generator, seeded from the operating system.

use crate::config::filters::fractional_percent::FractionalPercent;

pub fn happens(percent: &FractionalPercent) -> bool {
    if percent.is_none() {
        false
    } else if percent.is_all() {
        true
    } else {
        percent.includes(rand::random::<u64>())
    }
}
