//! The one place a test polls. A test polls only what cannot tell it when it changes: a
//! separate process (Envoy, istiod, pilot-agent, Outrider run as a binary) that it can only
//! ask, or state shared with Outrider (a stat, an atomic, a file another thread writes)
//! that has no change notification. Where something can be waited on (a watch channel,
//! the store's snapshot, the balancers, the xDS journal), the tests wait on that instead.
//!
//! Every wait is bounded by [`WAIT`] (or a longer bound a test names) and fails naming
//! what it waited for. The bound is generous because it is never what a passing test
//! measures: a passing test returns as soon as the condition holds, and the short backoff
//! (1 ms doubling to 50 ms) keeps that moment close to when it became true without
//! spinning a busy machine's cores.
//!
//! Nothing here lets time pass. A test that needs a timer to fire moves tokio's paused
//! clock past it where the timer runs on the test's runtime (`proxy_upstream`'s idle
//! timeout), and a test that needs requests to overlap holds them until all have arrived.

use std::time::Duration;

use tokio::net::TcpStream;

use super::WAIT;

const FIRST: Duration = Duration::from_millis(1);
const LONGEST: Duration = Duration::from_millis(50);

/// Polls `check` until it returns `Some`, and returns that; `None` once [`WAIT`] has
/// passed. Use it directly where not reaching the condition is not yet a failure (a
/// proxy that is only measured) or where the failure message needs what only the end
/// shows (a process's log, the last answer seen); [`until`] otherwise.
pub async fn within<T>(check: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    within_for(WAIT, check).await
}

/// [`within`] with another bound than [`WAIT`], for the few states that take longer to
/// reach (hundreds of 100 MB streams through a debug build, an agent that starts a proxy).
/// The polling loop of every test: everything else here is built on it.
pub async fn within_for<T>(bound: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let poll = async {
        let mut backoff = FIRST;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(LONGEST);
        }
    };
    tokio::time::timeout(bound, poll).await.ok()
}

/// [`within`], failing the test with `what` (what it waited for) when [`WAIT`] passes.
pub async fn until<T>(what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
    match within(check).await {
        Some(value) => value,
        None => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

/// [`until`] an asynchronous condition holds (one that asks a process or reads a stat).
pub async fn until_true(what: &str, mut holds: impl AsyncFnMut() -> bool) {
    until(what, async || holds().await.then_some(())).await;
}

/// [`until`] a synchronous condition holds: shared atomics and counters, which change
/// without telling anyone.
pub async fn until_sync(what: &str, mut holds: impl FnMut() -> bool) {
    until(what, async || holds().then_some(())).await;
}

/// [`until_sync`] for a test without a runtime (its own threads, as in another network
/// namespace): blocks the calling thread.
pub fn blocking(what: &str, holds: impl FnMut() -> bool) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    runtime.block_on(until_sync(what, holds));
}

/// A connection to `127.0.0.1:port` once something accepts there: a proxy started as a
/// process binds its listeners after it starts, and says so to no one.
pub async fn connect(port: u16) -> TcpStream {
    until(&format!("something to listen on 127.0.0.1:{port}"), async || {
        TcpStream::connect(("127.0.0.1", port)).await.ok()
    })
    .await
}
