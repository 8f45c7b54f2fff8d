//! How many requests the application serves at once, estimated from what its sidecar sees:
//! for each request, how many were in the application when it arrived (itself included)
//! and how long it took.
//!
//! An application that serves `c` requests at once (a thread pool, a connection pool, a
//! semaphore) and takes `S` for one answers a request that arrives to `k ≤ c` in `S`, and
//! one that arrives to `k > c` after `k − c` others have left, one every `S / c`:
//! `L(k) = S × k / c`. So `k × S / L(k)` is `c` for every `k` past the knee, and `k` itself
//! (or a little less, by the noise) for every `k` before it. The estimate is the largest
//! of that ratio over the arrival counts seen often enough to tell a wait from jitter
//! ([`MIN_SAMPLES`]), `S` the shortest mean latency among the counts seen often enough for
//! a baseline ([`MIN_BASELINE_SAMPLES`]). Past the knee it is about `c` (between `c` and
//! `c + 1` for requests of nearly fixed length, which wait only for the first of the busy
//! ones to finish). For an application that has not queued the largest ratio is the
//! largest count seen, a lower bound that grows with the load: how far above the mean
//! count depends on how the callers spread their requests (about `m + 2√m` at a mean of
//! `m` if they arrive at random, less behind a balancer that watches its requests in
//! flight); the estimate is an eighth more, one more from eight on
//! ([`UNTRIED_HEADROOM_WAIT`], [`UNTRIED_HEADROOM_SHARE`]).
//!
//! One rule, with no threshold between "queued" and "not yet": an earlier version took the
//! mean ratio over the counts whose latency had risen by a fifth and the largest count
//! otherwise, and a 4-slot backend, whose fifth arrival waits about a fifth of a request
//! when requests are of nearly fixed length, sits on that line: crossing it moves the
//! estimate from the largest count seen to about 4 at once. In the lab's S7 the callers'
//! picks then left such a backend within two seconds (its share from 31 % to 11 %, p99
//! of such seconds 31–53 ms against a steady 16). The largest ratio moves only as the means
//! do.
//!
//! Why the sidecar reports it: a pod's capacity is often not its CPU (a 2-thread server
//! whose requests wait on a database uses little CPU and still queues at three at once),
//! no caller can tell a 2-slot backend from an 8-slot one by its own requests, and the
//! application rarely reports ORCA itself. Utilization as requests in the application over
//! this estimate is what a report's `application_utilization` is for.

/// Arrival counts 1 to `BUCKETS` are told apart; the last bucket also holds every larger
/// count and takes no part in the estimate.
pub(super) const BUCKETS: usize = 64;

/// A bucket's mean is compared with the shortest once this many answers (decayed) are in
/// it: enough to tell a wait of a tenth of a request from a millisecond's jitter on ten.
/// Few, because the counts a pod that never queued has seen bound its concurrency from
/// below, and a balancer that watches its requests in flight keeps the counts close to
/// their mean: a pool of 8 sent about 4 at once saw 7 only rarely, was taken for a pool
/// of 5 to 6 at 50 answers, and read busier than the 2- and 4-slot pools beside it
/// (`bench/RESULTS.md`, S7).
const MIN_SAMPLES: f64 = 10.0;

/// The shortest mean, what the others are compared with, is taken from buckets with at
/// least this many answers: one low mean by chance would read as a wait everywhere else.
const MIN_BASELINE_SAMPLES: f64 = 50.0;

/// A pool that has not queued at the largest count it has seen is taken for one more than
/// that count (at most [`UNTRIED_HEADROOM_SHARE`] of it). Without it, such a pool's
/// estimate is a lower bound that the callers' picks keep low: reported busier than it
/// is, it is sent less, sees smaller counts and keeps its small estimate. The lab's S7
/// showed two states second by second, its 8-slot backend at its share (400 a second) or
/// held near 340 with the 2- and 4-slot ones over theirs (`bench/RESULTS.md`).
///
/// The headroom goes from all to none as the arrivals at that count wait from nothing to
/// this share of their latency (`1 − S / L(k)`), continuous so that a bucket's noise
/// moves the estimate a little, never by a whole pool; a pool that queued at that count
/// (a 4-slot pool's fifth arrival waits about a sixth of its latency) gets none.
const UNTRIED_HEADROOM_WAIT: f64 = 0.1;

/// The headroom is at most this share of the largest count seen: one more than 8 or more,
/// a quarter more than 2. Learning a pool's size takes queueing one request there, and a
/// small pool whose callers never send it one more than it serves keeps its headroom:
/// reported that share less busy than it is, it is sent that share more than its
/// capacity's share by callers that even out utilizations. In the lab's S7 with a
/// quarter the 2- and 4-slot pools were taken for about 2.5 and 5 (as implied by their
/// reports, polled from the caller's `/clusters`) and took 15.5–17.3 % and 30.2–32.7 % of
/// the requests where their capacities are 14.3 % and 28.6 %: utilization max/mean
/// 1.05–1.13; with an eighth, 1.04–1.10 over two sets of three runs (`bench/RESULTS.md`).
/// With a whole request the 2-slot pool of S5 through two hops,
/// taken for 3 until it queued, made one run of three 84.5 ms at p99 in its first second.
const UNTRIED_HEADROOM_SHARE: f64 = 0.125;

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

    /// The application's concurrency: the largest `k × S / L(k)` over the arrival counts
    /// with enough answers, raised by up to one where the largest of those counts waited
    /// for nothing ([`UNTRIED_HEADROOM_WAIT`], [`UNTRIED_HEADROOM_SHARE`]); `None` before
    /// any has them.
    pub(super) fn concurrency(&self) -> Option<f64> {
        // (arrival count, mean latency) of the buckets with enough answers.
        let means = |floor: f64| {
            self.answers
                .iter()
                .zip(&self.latency_ns)
                .enumerate()
                .take(BUCKETS - 1)
                .filter(move |&(_, (&n, &l))| n >= floor && l > 0.0)
                .map(|(i, (&n, &l))| ((i + 1) as f64, l / n))
        };
        let shortest = means(MIN_BASELINE_SAMPLES).map(|(_, mean)| mean).reduce(f64::min)?;
        let ratios = || means(MIN_SAMPLES).map(|(k, mean)| (k, k * shortest / mean));
        let largest = ratios().map(|(_, ratio)| ratio).reduce(f64::max)?;
        // The largest count seen, and the share of their latency its arrivals waited
        // (`1 − S / L(k)`): none, and the pool may serve one more; a tenth or more, and it
        // has queued there.
        let (top, ratio) = ratios().next_back()?;
        let waited = 1.0 - ratio / top;
        let untried = (1.0 - waited / UNTRIED_HEADROOM_WAIT).clamp(0.0, 1.0);
        Some(largest.max(ratio + untried * (top * UNTRIED_HEADROOM_SHARE).min(1.0)))
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
    fn without_queueing_the_estimate_is_an_eighth_more_than_the_largest_count_seen() {
        let about = |buckets: &Buckets, expected: f64| (buckets.concurrency().unwrap_or(0.0) - expected).abs() < 1e-6;
        assert!(about(&pool(64.0, 10e6, 1..=63, 100), 64.0));
        assert!(about(&pool(8.0, 10e6, 1..=5, 100), 5.625));
        assert!(about(&pool(8.0, 10e6, 1..=2, 100), 2.25), "an eighth more than 2");
        let mut rare = pool(8.0, 10e6, 1..=5, 100);
        rare.add(5, 20, 20 * 10_000_000);
        assert!(about(&rare, 6.75), "20 answers at 6 are enough to raise the bound");
        rare.add(6, 5, 5 * 10_000_000);
        assert!(about(&rare, 6.75), "5 answers at 7 are too few to tell");
        assert_eq!(Buckets::default().concurrency(), None);
    }

    #[test]
    fn the_headroom_shrinks_as_the_largest_count_waits() {
        // The largest count seen, 6, waiting 0, 2.5, 5, 10 and 20 % of a request.
        let estimates = [0.0, 0.025, 0.05, 0.1, 0.2].map(|wait: f64| {
            let mut buckets = pool(8.0, 10e6, 1..=5, 100);
            let latency = 10e6 / (1.0 - wait);
            buckets.add(5, 100, (latency * 100.0) as u64);
            buckets.concurrency().unwrap_or(0.0)
        });
        let expected = [6.75, 6.0 * 0.975 + 0.5625, 6.0 * 0.95 + 0.375, 5.4, 5.0];
        for (estimate, expected) in estimates.iter().zip(expected) {
            assert!((estimate - expected).abs() < 1e-6, "{estimates:?} against {expected}");
        }
    }

    /// Requests of a fixed length: one arriving to `k > c` waits for `k − c` of the `c`
    /// busy ones to finish, about `(k − c) / (c + 1)` of a request's time.
    fn fixed_length_pool(pool: usize, service: f64, counts: std::ops::RangeInclusive<usize>) -> Buckets {
        let mut buckets = Buckets::default();
        for k in counts {
            let wait = k.saturating_sub(pool) as f64 / (pool + 1) as f64;
            buckets.add(k - 1, 100, (service * (1.0 + wait) * 100.0) as u64);
        }
        buckets
    }

    #[test]
    fn a_knee_seen_faintly_moves_the_estimate_a_little() {
        for size in [2, 4, 8] {
            let estimate = fixed_length_pool(size, 10e6, 1..=size + 3).concurrency().unwrap();
            assert!(estimate >= size as f64 && estimate < size as f64 + 1.0, "{size}: {estimate}");
        }
        // The 4-slot pool's fifth arrival waiting a fifth, give or take its noise: the
        // estimate stays about 4 either way (an estimate with a threshold there jumped
        // between 4 and the largest count seen, 7).
        let estimates = [0.19, 0.21].map(|wait| {
            let mut buckets = fixed_length_pool(4, 10e6, 1..=4);
            buckets.add(4, 100, (10e6 * (1.0 + wait) * 100.0) as u64);
            buckets.add(5, 100, (10e6 * (1.0 + wait + 0.2) * 100.0) as u64);
            buckets.add(6, 100, (10e6 * (1.0 + wait + 0.4) * 100.0) as u64);
            buckets.concurrency().unwrap()
        });
        assert!((estimates[0] - estimates[1]).abs() < 0.1, "{estimates:?}");
        assert!(estimates.iter().all(|e| (4.0..5.0).contains(e)), "{estimates:?}");
    }

    #[test]
    fn the_overflow_bucket_and_aged_sums_count_as_they_should() {
        // Everything arriving to 64 or more lands in the last bucket, which tells no count.
        let mut buckets = pool(100.0, 10e6, 1..=3, 100);
        buckets.add(BUCKETS - 1, 1_000, 1_000 * 100_000_000);
        assert!((buckets.concurrency().unwrap_or(0.0) - 3.375).abs() < 1e-6, "3 seen, none waited: 3⅜");
        // Aged below the sample floor, a knee seen long ago is forgotten.
        let mut old = pool(2.0, 10e6, 1..=4, 100);
        old.age(0.1);
        assert_eq!(old.concurrency(), None);
    }
}
