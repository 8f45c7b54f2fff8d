//! What finding a request's Istio metric cells costs (`istio.stats`: the label set of the
//! request → its counters and histograms), on one worker and on two workers at once with
//! the same label set: with each worker's own map in front of the shared registry, the
//! second worker should cost nothing (no lock, no shared reference count on the way).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use outrider::config::filters::istio_stats::{IstioStats, STANDARD_TAGS};
use outrider::proxy::filters::istio_stats::series::SeriesCache;
use outrider::telemetry::Stats;

fn labels() -> Vec<(String, String)> {
    STANDARD_TAGS.iter().map(|t| ((*t).to_owned(), format!("{t}-value"))).collect()
}

/// Finds the cells `iters` times on each of two threads at once; the slower thread's time.
fn two_threads(cache: &Arc<SeriesCache>, iters: u64) -> Duration {
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (cache, barrier) = (cache.clone(), barrier.clone());
            std::thread::spawn(move || {
                let labels = labels();
                barrier.wait();
                let started = Instant::now();
                for _ in 0..iters {
                    cache.with(&labels, false, |series| std::hint::black_box(series.requests_total.is_some()));
                }
                started.elapsed()
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).max().unwrap_or_default()
}

fn lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("istio_series_lookup");
    let cache = Arc::new(SeriesCache::new(Arc::new(Stats::default()), Arc::new(IstioStats::default())));
    group.bench_function("one_thread", |b| {
        let labels = labels();
        b.iter(|| cache.with(&labels, false, |series| std::hint::black_box(series.requests_total.is_some())));
    });
    group.bench_function("two_threads", |b| b.iter_custom(|iters| two_threads(&cache, iters)));
    group.finish();
}

criterion_group!(benches, lookup);
criterion_main!(benches);
