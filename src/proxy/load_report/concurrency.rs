//! How many requests the application serves at once, estimated from what its sidecar sees:
//! for each request, how many were in the application when it arrived (itself included)
//! and how long it took.
//!
//! An application that serves `c` requests at once (a thread pool, a connection pool, a
//! semaphore) and takes `S` for one answers a request that arrives to `k ≤ c` in `S`, and
//! one that arrives to `k > c` after `k − c` others have left, one every `S / c`:
//! `L(k) = S × k / c`. So `k × S / L(k)` is `c` for every `k` past the knee, whatever `k`,
//! and the estimate is that ratio over the arrivals that waited measurably
//! ([`QUEUE_EVIDENCE`]), `S` the shortest mean latency of any arrival count.
//!
//! An application whose latency has not risen with the requests in it (no pool, or a pool
//! larger than what it is sent) serves at least the largest arrival count seen often enough
//! to tell ([`MIN_SAMPLES`]): that count is the estimate. It is low for such an application,
//! so its utilization reads high; but as the counts arriving at a pod grow with what it is
//! sent (about `m + 2√m` at `m` requests in it on average), what it reports stays between
//! a third and two thirds at any moderate load and falls as the load does: it never keeps
//! a pod from requests it could serve, and pods of one load read alike. Taking the
//! application for a pool of one request instead (what a caller without reports assumes)
//! made the lab's 8-slot backend beside 2- and 4-slot ones look the most loaded of the
//! three (`bench/RESULTS.md`, S7).
//!
//! Why the sidecar reports it: a pod's capacity is often not its CPU (a 2-thread server
//! whose requests wait on a database uses little CPU and still queues at three at once),
//! no caller can tell a 2-slot backend from an 8-slot one by its own requests, and the
//! application rarely reports ORCA itself. Utilization as requests in the application over
//! this estimate is what a report's `application_utilization` is for.

/// Arrival counts 1 to `BUCKETS` are told apart; the last bucket also holds every larger
/// count and takes no part in the estimate.
pub(super) const BUCKETS: usize = 64;

/// An arrival count whose mean latency is at least this much above the shortest shows
/// queueing: well above the noise of [`MIN_SAMPLES`] requests of a few milliseconds' jitter,
/// and reached by a pool of 8 at 10 arrivals.
const QUEUE_EVIDENCE: f64 = 0.2;

/// A bucket's mean counts once this many answers (decayed) are in it.
const MIN_SAMPLES: f64 = 50.0;

/// The memory of the buckets: arrivals past the knee are rare at a moderate load (one in a
/// hundred at a pool of 8 half full), so they are gathered over about ten seconds.
pub(super) const WINDOW_SECONDS: f64 = 10.0;

/// Decayed sums per arrival count.
#[derive(Debug, Clone)]
pub(super) struct Buckets {
    answers: [f64; BUCKETS],
    latency_ns: [f64; BUCKETS],
}

impl Default for Buckets {
    fn default() -> Self {
        Self { answers: [0.0; BUCKETS], latency_ns: [0.0; BUCKETS] }
    }
}

impl Buckets {
    /// Ages the sums by `decay` (in (0, 1]).
    pub(super) fn age(&mut self, decay: f64) {
        for (answers, latency) in self.answers.iter_mut().zip(self.latency_ns.iter_mut()) {
            *answers *= decay;
            *latency *= decay;
        }
    }

    /// Adds what arrivals at count `index + 1` gathered since the last tick.
    pub(super) fn add(&mut self, index: usize, answers: u64, latency_ns: u64) {
        if let (Some(a), Some(l)) = (self.answers.get_mut(index), self.latency_ns.get_mut(index)) {
            *a += answers as f64;
            *l += latency_ns as f64;
        }
    }

    /// The application's concurrency: where its latency shows it, else the largest
    /// arrival count seen; `None` before any bucket has enough answers.
    pub(super) fn concurrency(&self) -> Option<f64> {
        // (arrival count, mean latency) of the buckets with enough answers.
        let means = || {
            self.answers.iter().zip(&self.latency_ns).enumerate().take(BUCKETS - 1).filter_map(|(i, (&n, &l))| {
                (n >= MIN_SAMPLES && l > 0.0).then(|| ((i + 1) as f64, l / n))
            })
        };
        let shortest = means().map(|(_, mean)| mean).reduce(f64::min)?;
        let (sum, weight) = means()
            .filter(|&(_, mean)| mean >= shortest * (1.0 + QUEUE_EVIDENCE))
            .fold((0.0, 0.0), |(sum, weight), (k, mean)| (sum + k * shortest / mean, weight + 1.0));
        if weight > 0.0 {
            return Some(sum / weight);
        }
        means().map(|(k, _)| k).reduce(f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `answers` arrivals at each count of `counts`, each answered as a pool of `pool`
    /// serving requests of `service` nanoseconds would.
    fn pool(pool: f64, service: f64, counts: std::ops::RangeInclusive<usize>, answers: u64) -> Buckets {
        let mut buckets = Buckets::default();
        for k in counts {
            let latency = service * (k as f64 / pool).max(1.0);
            buckets.add(k - 1, answers, (latency * answers as f64) as u64);
        }
        buckets
    }

    #[test]
    fn a_pool_is_found_from_the_arrivals_that_waited() {
        for size in [1.0, 2.0, 4.0, 8.0] {
            let estimate = pool(size, 10e6, 1..=12, 100).concurrency().unwrap();
            assert!((estimate - size).abs() < 1e-9, "{size}: {estimate}");
        }
    }

    #[test]
    fn without_queueing_the_largest_count_seen_is_the_estimate() {
        assert_eq!(pool(8.0, 10e6, 1..=9, 100).concurrency(), Some(9.0), "9 arrivals to 8 slots wait an eighth");
        assert_eq!(pool(64.0, 10e6, 1..=63, 100).concurrency(), Some(63.0));
        let mut rare = pool(2.0, 10e6, 1..=2, 100);
        rare.add(2, 10, 10 * 15_000_000);
        assert_eq!(rare.concurrency(), Some(2.0), "10 answers at 3 are noise, not a knee");
        assert_eq!(Buckets::default().concurrency(), None);
    }

    #[test]
    fn the_overflow_bucket_and_aged_sums_count_as_they_should() {
        // Everything arriving to 64 or more lands in the last bucket, which tells no count.
        let mut buckets = pool(100.0, 10e6, 1..=3, 100);
        buckets.add(BUCKETS - 1, 1_000, 1_000 * 100_000_000);
        assert_eq!(buckets.concurrency(), Some(3.0));
        // Aged below the sample floor, a knee seen long ago is forgotten.
        let mut old = pool(2.0, 10e6, 1..=4, 100);
        old.age(0.1);
        assert_eq!(old.concurrency(), None);
    }
}
