//! Which worker a thread is, for cells that keep one copy per worker.
//!
//! Histograms are recorded on every request by every worker. One shared set of bucket
//! counters would have the workers write the same cache lines for every request; instead a
//! histogram keeps one set per worker, on lines of its own, and a scrape adds them up.
//! The number of sets is fixed when the workers start; a thread that is not a worker (the
//! control runtime, tests) records into the first.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many per-worker copies new cells keep (at least one).
static SHARDS: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(0) };
}

/// Sets how many workers cells created from now on serve; called once the worker count is
/// known, before the workers start.
pub fn set_workers(count: usize) {
    SHARDS.store(count.max(1), Ordering::Relaxed);
}

/// How many per-worker copies a cell created now keeps.
pub fn count() -> usize {
    SHARDS.load(Ordering::Relaxed).max(1)
}

/// Marks the calling thread as worker `id`.
pub fn enter_worker(id: usize) {
    SHARD.set(id);
}

/// The copy the calling thread writes, of a cell that keeps `shards` copies.
pub fn current(shards: usize) -> usize {
    SHARD.get() % shards.max(1)
}
