//! What the server sidecar's load report costs a request: counting it in and out on the
//! worker's own slot, and copying the current report onto an answer (a worker-local
//! header clone), against nothing at all. Two workers count at once in the second group,
//! as a two-worker sidecar would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use http::HeaderMap;
use outrider::proxy::load_report::{self, InboundLoad, Reporter, WorkerReport};

/// A load with a current report, as a busy sidecar has.
fn busy() -> Arc<InboundLoad> {
    let load = InboundLoad::new(2);
    let mut reporter = Reporter::default();
    let t0 = Instant::now();
    reporter.tick(&load, None, t0);
    for _ in 0..100 {
        let arrival = load.started(0);
        load.answered(0, arrival, Duration::from_millis(1));
    }
    let text = reporter.tick(&load, None, t0 + load_report::REFRESH).unwrap();
    load.publish_for_bench(&text);
    load
}

fn per_request(c: &mut Criterion) {
    let mut group = c.benchmark_group("load_report");
    group.bench_function("count_only", |b| {
        let load = busy();
        b.iter(|| {
            let arrival = load.started(0);
            load.answered(0, arrival, black_box(Duration::from_micros(700)));
        });
    });
    group.bench_function("count_and_report", |b| {
        let load = busy();
        let worker = WorkerReport::default();
        b.iter(|| {
            let arrival = load.started(0);
            load.answered(0, arrival, black_box(Duration::from_micros(700)));
            let mut answer = HeaderMap::new();
            if let Some(report) = worker.current(&load) {
                load_report::add_to_answer(&mut answer, report);
            }
            black_box(answer)
        });
    });
    group.bench_function("two_workers_count", |b| {
        let load = busy();
        b.iter_custom(|iters| {
            let barrier = Arc::new(Barrier::new(2));
            let threads: Vec<_> = (0..2)
                .map(|worker| {
                    let (load, barrier) = (load.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        let started = Instant::now();
                        for _ in 0..iters {
                            let arrival = load.started(worker);
                            load.answered(worker, arrival, Duration::from_micros(700));
                        }
                        started.elapsed()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).max().unwrap_or_default()
        });
    });
    group.finish();
}

criterion_group!(benches, per_request);
criterion_main!(benches);
