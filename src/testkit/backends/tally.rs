//! Requests a backend completed, per second of the lab's clock: the lab's share tables
//! and share-over-time charts are drawn from these counts, not from the proxies' stats.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Completions per second since the lab's epoch: `[succeeded, failed]`.
#[derive(Debug, Default)]
pub struct Tally(Mutex<Vec<[u64; 2]>>);

/// Seconds past which completions are not counted, so a forgotten lab cannot grow forever.
const MAX_SECONDS: usize = 24 * 3600;

impl Tally {
    pub fn record(&self, since_epoch: Duration, failed: bool) {
        let second = usize::try_from(since_epoch.as_secs()).unwrap_or(usize::MAX);
        if second >= MAX_SECONDS {
            return;
        }
        let mut seconds = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if seconds.len() <= second {
            seconds.resize(second + 1, [0, 0]);
        }
        seconds[second][usize::from(failed)] += 1;
    }

    /// The counts so far, one entry per second from the epoch.
    pub fn seconds(&self) -> Vec<[u64; 2]> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_second_apart() {
        let tally = Tally::default();
        tally.record(Duration::from_millis(10), false);
        tally.record(Duration::from_millis(2500), true);
        tally.record(Duration::from_millis(2999), false);
        assert_eq!(tally.seconds(), [[1, 0], [0, 0], [1, 1]]);
    }
}
