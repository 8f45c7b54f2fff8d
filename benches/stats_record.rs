//! What a request's histogram record costs when two workers record into the same
//! histogram at once: with one shared set of counters, and with one copy per worker (what
//! `telemetry::shards` gives a histogram created once the workers are known).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use outrider::telemetry::metrics::Histogram;
use outrider::telemetry::shards;

/// Records `iters` times on each of two threads at once; the slower thread's time.
fn two_threads(histogram: &Histogram, iters: u64) -> Duration {
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|worker| {
            let (histogram, barrier) = (histogram.clone(), barrier.clone());
            std::thread::spawn(move || {
                shards::enter_worker(worker);
                barrier.wait();
                let started = Instant::now();
                for i in 0..iters {
                    histogram.record(Duration::from_micros(i % 4096));
                }
                started.elapsed()
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).max().unwrap_or_default()
}

fn record(c: &mut Criterion) {
    let mut group = c.benchmark_group("histogram_record");
    group.bench_function("one_thread", |b| {
        let histogram = Histogram::default();
        let mut i = 0u64;
        b.iter(|| {
            i = i.wrapping_add(1);
            histogram.record(Duration::from_micros(i % 4096));
        });
    });
    for (label, workers) in [("two_threads/one_copy", 1), ("two_threads/per_worker", 2)] {
        shards::set_workers(workers);
        let histogram = Histogram::default();
        group.bench_function(label, |b| b.iter_custom(|iters| two_threads(&histogram, iters)));
    }
    shards::set_workers(1);
    group.finish();
}

criterion_group!(benches, record);
criterion_main!(benches);
