//! What the structures two workers share on the request path cost when both touch them at
//! once, against each worker touching its own: an endpoint's stats (a request counted in
//! flight, then its outcome and round trip), a cluster counter, and a local rate limit's
//! token bucket (shared by every worker, as Envoy documents it). The figure is the slower
//! thread's time per operation; a structure no worker contends costs what one thread pays.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use outrider::config::filters::local_ratelimit::TokenBucket as TokenBucketConfig;
use outrider::lb::EndpointStats;
use outrider::proxy::filters::token_bucket::TokenBucket;
use outrider::telemetry::metrics::Counter;

/// Runs `op` `iters` times on each of two threads at once, thread `i` on `targets[i]`; the
/// slower thread's time.
fn two_threads<T: Send + Sync + 'static>(targets: [Arc<T>; 2], iters: u64, op: fn(&T, u64)) -> Duration {
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = targets
        .into_iter()
        .map(|target| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let started = Instant::now();
                for i in 0..iters {
                    op(&target, i);
                }
                started.elapsed()
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).max().unwrap_or_default()
}

/// One request's writes to its endpoint's stats, as the upstream feedback makes them.
fn endpoint_request(stats: &Arc<EndpointStats>, i: u64) {
    let now = Instant::now();
    let in_flight = stats.start(now);
    stats.record(now, Duration::from_micros(100 + i % 64), true);
    drop(in_flight);
}

/// A bucket no request empties: the cost of the take, not of a refusal.
fn bucket() -> TokenBucket {
    let config =
        TokenBucketConfig { max_tokens: u32::MAX, tokens_per_fill: u32::MAX, fill_interval: Duration::from_millis(1) };
    TokenBucket::new(&config)
}

fn shared(c: &mut Criterion) {
    let mut group = c.benchmark_group("shared_request_path");

    let stats = Arc::new(Arc::new(EndpointStats::new(Instant::now())));
    group.bench_function("endpoint_stats_one_thread", |b| b.iter(|| endpoint_request(&stats, 7)));
    group.bench_function("endpoint_stats_two_threads_one_endpoint", |b| {
        b.iter_custom(|iters| two_threads([stats.clone(), stats.clone()], iters, endpoint_request))
    });
    let other = Arc::new(Arc::new(EndpointStats::new(Instant::now())));
    group.bench_function("endpoint_stats_two_threads_own_endpoints", |b| {
        b.iter_custom(|iters| two_threads([stats.clone(), other.clone()], iters, endpoint_request))
    });

    let counter = Arc::new(Counter::default());
    group.bench_function("counter_one_thread", |b| b.iter(|| counter.inc()));
    group.bench_function("counter_two_threads_one_counter", |b| {
        b.iter_custom(|iters| two_threads([counter.clone(), counter.clone()], iters, |c, _| c.inc()))
    });
    let own = Arc::new(Counter::default());
    group.bench_function("counter_two_threads_own_counters", |b| {
        b.iter_custom(|iters| two_threads([counter.clone(), own.clone()], iters, |c, _| c.inc()))
    });

    let shared_bucket = Arc::new(bucket());
    group.bench_function("token_bucket_one_thread", |b| b.iter(|| shared_bucket.try_consume()));
    group.bench_function("token_bucket_two_threads_one_bucket", |b| {
        b.iter_custom(|iters| {
            two_threads([shared_bucket.clone(), shared_bucket.clone()], iters, |t, _| {
                t.try_consume();
            })
        })
    });
    group.finish();
}

criterion_group!(benches, shared);
criterion_main!(benches);
