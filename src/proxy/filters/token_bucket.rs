//! The token bucket of the local rate limits, as Envoy 1.40 keeps it: no refill timer;
//! the tokens a request finds are computed from the time elapsed since the bucket was
//! last (virtually) empty, one token every `fill_interval / tokens_per_fill`, capped at
//! `max_tokens`; a request needs a whole token.
//!
//! One bucket is shared by every worker (Envoy documents its bucket as shared by all
//! workers too): its whole state is one atomic, updated by compare-and-swap, so taking a
//! token never blocks and nothing is held across an `await`. Time is
//! `tokio::time::Instant`, which tests can pause and advance.
//!
//! Envoy computes in floating-point seconds; Outrider in whole nanoseconds, the time a
//! token takes rounded to the nanosecond, so that a token is there exactly when its time
//! has elapsed (no rounding at the boundary).

use std::sync::atomic::{AtomicI64, Ordering};

use tokio::time::Instant;

use crate::config::filters::local_ratelimit::TokenBucket as TokenBucketConfig;

#[derive(Debug)]
pub struct TokenBucket {
    /// Nanoseconds one token takes to come back (at least 1).
    token_ns: i64,
    /// Nanoseconds a full bucket takes to fill: `max_tokens` tokens.
    capacity_ns: i64,
    origin: Instant,
    /// Nanoseconds since `origin` at which the bucket was (virtually) empty: the tokens
    /// there at `now` are `(now - empty_at) / token_ns`, at most `max_tokens`.
    empty_at: AtomicI64,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(config: &TokenBucketConfig) -> Self {
        let interval_ns = i128::try_from(config.fill_interval.as_nanos()).unwrap_or(i128::MAX);
        let per_fill = i128::from(config.tokens_per_fill.max(1));
        // Rounded to the nearest nanosecond.
        let token_ns = ((interval_ns + per_fill / 2) / per_fill).max(1);
        let capacity_ns = token_ns.saturating_mul(i128::from(config.max_tokens));
        let token_ns = i64::try_from(token_ns).unwrap_or(i64::MAX);
        let capacity_ns = i64::try_from(capacity_ns).unwrap_or(i64::MAX);
        Self { token_ns, capacity_ns, origin: Instant::now(), empty_at: AtomicI64::new(capacity_ns.saturating_neg()) }
    }

    fn now(&self) -> i64 {
        i64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(i64::MAX)
    }

    /// Where the bucket's accounting starts at `now`: never more than full.
    fn start(&self, now: i64, empty_at: i64) -> i64 {
        empty_at.max(now.saturating_sub(self.capacity_ns))
    }

    /// Takes one token if a whole one is there.
    pub fn try_consume(&self) -> bool {
        let now = self.now();
        let mut old = self.empty_at.load(Ordering::Relaxed);
        loop {
            let new = self.start(now, old).saturating_add(self.token_ns);
            if new > now {
                return false;
            }
            match self.empty_at.compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(current) => old = current,
            }
        }
    }

    /// The tokens there now, fractions included.
    pub fn tokens(&self) -> f64 {
        let now = self.now();
        let elapsed = now.saturating_sub(self.start(now, self.empty_at.load(Ordering::Relaxed)));
        elapsed as f64 / self.token_ns as f64
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn bucket(max_tokens: u32, tokens_per_fill: u32, fill_ms: u64) -> TokenBucket {
        TokenBucket::new(&TokenBucketConfig {
            max_tokens,
            tokens_per_fill,
            fill_interval: Duration::from_millis(fill_ms),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_gives_max_tokens_then_refills_by_elapsed_time() {
        let bucket = bucket(3, 1, 1000);
        for _ in 0..3 {
            assert!(bucket.try_consume());
        }
        assert!(!bucket.try_consume());
        // Half a fill interval: half a token, not enough.
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(!bucket.try_consume());
        assert!((bucket.tokens() - 0.5).abs() < 1e-6);
        tokio::time::advance(Duration::from_millis(501)).await;
        assert!(bucket.try_consume());
        assert!(!bucket.try_consume());
    }

    #[tokio::test(start_paused = true)]
    async fn refill_is_capped_at_max_tokens() {
        let bucket = bucket(2, 5, 1000);
        assert!(bucket.try_consume());
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!((bucket.tokens() - 2.0).abs() < 1e-9);
        assert!(bucket.try_consume());
        assert!(bucket.try_consume());
        assert!(!bucket.try_consume());
        // Five tokens a second: one comes back every 200 ms.
        tokio::time::advance(Duration::from_millis(201)).await;
        assert!(bucket.try_consume());
        assert!(!bucket.try_consume());
    }

    #[tokio::test(start_paused = true)]
    async fn shared_by_threads_without_losing_or_minting_tokens() {
        let bucket = std::sync::Arc::new(bucket(1000, 1, 3_600_000));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let bucket = bucket.clone();
                std::thread::spawn(move || (0..400).filter(|_| bucket.try_consume()).count())
            })
            .collect();
        let taken: usize = threads.into_iter().map(|t| t.join().unwrap_or(0)).sum();
        assert_eq!(taken, 1000);
    }
}
