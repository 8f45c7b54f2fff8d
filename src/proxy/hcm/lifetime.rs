//! How long a downstream HTTP connection may live, with Envoy's rules: the connection
//! `idle_timeout` (no active stream for that long), `max_connection_duration`,
//! `max_requests_per_connection`, and the premature-reset guard against HTTP/2 rapid
//! reset (CVE-2023-44487): a connection whose streams are mostly reset by the client
//! within a second of opening is closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::listener::http_connection_manager::CommonHttpOptions;

/// Envoy's runtime default `overload.premature_reset_total_stream_count`.
const PREMATURE_RESET_TOTAL_STREAM_COUNT: u64 = 500;
/// Envoy's runtime default `overload.premature_reset_min_stream_lifetime_seconds`.
const PREMATURE_RESET_MIN_STREAM_LIFETIME: Duration = Duration::from_secs(1);

/// Why a connection is closed before its client closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Close {
    /// No active stream for `idle_timeout`: drained.
    Idle,
    /// `max_connection_duration` passed: drained.
    MaxDuration,
    /// `max_requests_per_connection` requests were accepted (HTTP/2; HTTP/1.1 answers the
    /// last one with `connection: close`): drained.
    MaxRequests,
    /// Too many premature resets: closed at once, as Envoy aborts it.
    PrematureResets,
}

impl Close {
    const ALL: [Close; 4] = [Close::Idle, Close::MaxDuration, Close::MaxRequests, Close::PrematureResets];
}

/// One connection's streams and limits, shared by its streams. Atomics only because
/// response bodies must be `Send`: everything here stays on the connection's worker.
#[derive(Debug)]
pub(super) struct Lifetime {
    idle_timeout: Option<Duration>,
    max_requests: Option<u32>,
    ends_at: Option<Instant>,
    /// Times below are nanoseconds since this.
    born: Instant,
    active: AtomicUsize,
    requests: AtomicU32,
    idle_since: AtomicU64,
    /// The last time bytes arrived from the client: activity for `stream_idle_timeout`.
    last_read: AtomicU64,
    /// When the watcher's timer fires (`u64::MAX`: it has none). An idle deadline later
    /// than this needs no wake: the timer fires first and finds the new deadline itself.
    armed: AtomicU64,
    closed_streams: AtomicU64,
    premature_resets: AtomicU64,
    /// 0: open; else 1 + the index of the [`Close`] reason.
    close: AtomicU8,
    changed: Notify,
}

impl Lifetime {
    pub(super) fn new(options: &CommonHttpOptions) -> Arc<Self> {
        let now = Instant::now();
        Arc::new(Self {
            idle_timeout: options.idle_timeout,
            max_requests: options.max_requests_per_connection,
            ends_at: options.max_connection_duration.map(|d| now + d),
            born: now,
            active: AtomicUsize::new(0),
            requests: AtomicU32::new(0),
            idle_since: AtomicU64::new(0),
            last_read: AtomicU64::new(0),
            armed: AtomicU64::new(u64::MAX),
            closed_streams: AtomicU64::new(0),
            premature_resets: AtomicU64::new(0),
            close: AtomicU8::new(0),
            changed: Notify::new(),
        })
    }

    fn since_born(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.born).as_nanos()).unwrap_or(u64::MAX)
    }

    fn at(&self, nanos: &AtomicU64) -> Instant {
        self.born + Duration::from_nanos(nanos.load(Relaxed))
    }

    /// Bytes arrived from the client.
    pub(super) fn read(&self) {
        self.last_read.store(self.since_born(Instant::now()), Relaxed);
    }

    pub(super) fn last_read(&self) -> Instant {
        self.at(&self.last_read)
    }

    fn reason(&self) -> Option<Close> {
        let code = usize::from(self.close.load(Relaxed));
        code.checked_sub(1).and_then(|i| Close::ALL.get(i)).copied()
    }

    /// A request arrived. `true` when it is the last this connection takes
    /// (`max_requests_per_connection`).
    pub(super) fn stream_started(self: &Arc<Self>) -> (StreamGuard, bool) {
        self.active.fetch_add(1, Relaxed);
        let requests = self.requests.load(Relaxed).saturating_add(1);
        self.requests.store(requests, Relaxed);
        let last = self.max_requests.is_some_and(|max| requests >= max);
        let guard = StreamGuard { lifetime: self.clone(), started: Instant::now(), complete: false };
        (guard, last)
    }

    /// Asks the connection to close for `reason` (the first reason wins).
    pub(super) fn close(&self, reason: Close) {
        let code = Close::ALL.iter().position(|r| *r == reason).map_or(1, |i| i as u8 + 1);
        if self.close.compare_exchange(0, code, Relaxed, Relaxed).is_ok() {
            self.changed.notify_one();
        }
    }

    /// Resolves when the connection must close, and why.
    pub(super) async fn until_close(&self) -> Close {
        loop {
            if let Some(reason) = self.reason() {
                return reason;
            }
            let idle_at = match (self.active.load(Relaxed), self.idle_timeout) {
                (0, Some(timeout)) => Some((self.at(&self.idle_since) + timeout, Close::Idle)),
                _ => None,
            };
            let ends_at = self.ends_at.map(|at| (at, Close::MaxDuration));
            let next = [idle_at, ends_at].into_iter().flatten().min_by_key(|(at, _)| *at);
            self.armed.store(next.map_or(u64::MAX, |(at, _)| self.since_born(at)), Relaxed);
            match next {
                Some((at, reason)) => {
                    tokio::select! {
                        // A stream may have started (or ended and restarted the idle
                        // period) since the deadline was computed: close only if it
                        // still holds.
                        _ = tokio::time::sleep_until(at) => if self.still_due(reason) { self.close(reason) },
                        _ = self.changed.notified() => {}
                    }
                }
                None => self.changed.notified().await,
            }
        }
    }

    /// Whether `reason`'s deadline, just reached, still applies: an idle deadline only
    /// while no stream is active and the connection has been idle for the whole timeout.
    fn still_due(&self, reason: Close) -> bool {
        match (reason, self.idle_timeout) {
            (Close::Idle, Some(timeout)) => {
                self.active.load(Relaxed) == 0 && self.at(&self.idle_since) + timeout <= Instant::now()
            }
            _ => true,
        }
    }

    fn stream_ended(&self, started: Instant, complete: bool) {
        let active = self.active.load(Relaxed).saturating_sub(1);
        self.active.store(active, Relaxed);
        let now = Instant::now();
        if active == 0 {
            self.idle_since.store(self.since_born(now), Relaxed);
            // The idle deadline starts now: wake the watcher to arm it, unless its timer
            // fires before that deadline anyway (then it re-arms when it fires). A busy
            // connection so wakes its watcher once per idle timeout, not once per request.
            if let Some(timeout) = self.idle_timeout
                && self.armed.load(Relaxed) > now.checked_add(timeout).map_or(u64::MAX, |at| self.since_born(at))
            {
                self.changed.notify_one();
            }
        }
        let closed = self.closed_streams.fetch_add(1, Relaxed) + 1;
        let mut premature = self.premature_resets.load(Relaxed);
        if !complete && now.duration_since(started) < PREMATURE_RESET_MIN_STREAM_LIFETIME {
            premature = self.premature_resets.fetch_add(1, Relaxed) + 1;
        }
        if too_many_premature_resets(closed, premature) {
            self.close(Close::PrematureResets);
        }
    }
}

/// Envoy's rule: at least half of the closed streams were reset prematurely, counted once
/// `PREMATURE_RESET_TOTAL_STREAM_COUNT` streams closed, or earlier when the premature
/// ones alone already make half of that count.
fn too_many_premature_resets(closed: u64, premature: u64) -> bool {
    if closed < PREMATURE_RESET_TOTAL_STREAM_COUNT {
        premature * 2 >= PREMATURE_RESET_TOTAL_STREAM_COUNT
    } else {
        premature * 2 >= closed
    }
}

/// One active stream. Dropped before [`StreamGuard::complete`] means the stream was reset
/// (by the client, or by the connection's end).
#[derive(Debug)]
pub(super) struct StreamGuard {
    lifetime: Arc<Lifetime>,
    started: Instant,
    complete: bool,
}

impl StreamGuard {
    pub(super) fn started(&self) -> Instant {
        self.started
    }

    pub(super) fn lifetime(&self) -> &Lifetime {
        &self.lifetime
    }

    /// The response was sent whole.
    pub(super) fn complete(&mut self) {
        self.complete = true;
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.lifetime.stream_ended(self.started, self.complete);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn premature_reset_rule_is_envoys() {
        assert!(!too_many_premature_resets(10, 10));
        assert!(too_many_premature_resets(250, 250));
        assert!(!too_many_premature_resets(600, 299));
        assert!(too_many_premature_resets(600, 300));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connection_closes_after_idle_timeout_only_when_no_stream_is_active() {
        let options = CommonHttpOptions { idle_timeout: Some(Duration::from_secs(10)), ..Default::default() };
        let lifetime = Lifetime::new(&options);
        let (guard, last) = lifetime.stream_started();
        assert!(!last);
        let watch = lifetime.until_close();
        tokio::pin!(watch);
        // An active stream holds the connection however long it takes.
        assert!(tokio::time::timeout(Duration::from_secs(60), watch.as_mut()).await.is_err());
        drop(guard);
        let started = Instant::now();
        assert_eq!(watch.await, Close::Idle);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    /// A stream that starts just before the idle deadline keeps the connection: the
    /// watcher, woken by the old deadline, sees the stream and does not close it.
    #[tokio::test(start_paused = true)]
    async fn a_stream_started_just_before_the_idle_deadline_keeps_the_connection() {
        let options = CommonHttpOptions { idle_timeout: Some(Duration::from_secs(10)), ..Default::default() };
        let lifetime = Lifetime::new(&options);
        let watch = lifetime.until_close();
        tokio::pin!(watch);
        assert!(tokio::time::timeout(Duration::from_millis(9_999), watch.as_mut()).await.is_err());
        let (guard, _) = lifetime.stream_started();
        assert!(
            tokio::time::timeout(Duration::from_secs(60), watch.as_mut()).await.is_err(),
            "the connection was closed under an active stream"
        );
        assert_eq!(lifetime.reason(), None);
        drop(guard);
        let ended = Instant::now();
        assert_eq!(watch.await, Close::Idle);
        assert_eq!(ended.elapsed(), Duration::from_secs(10), "idle from the stream's end");
    }

    /// Counts the wakes of the task it is the waker of.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Relaxed);
        }
    }

    /// Requests on a busy connection do not wake its watcher: its timer, armed at the
    /// first idle deadline, fires once, finds the later deadline and re-arms. The
    /// connection still closes a whole idle timeout after its last stream.
    #[tokio::test(start_paused = true)]
    async fn streams_on_a_busy_connection_do_not_wake_the_watcher_and_idle_is_counted_from_the_last() {
        let options = CommonHttpOptions { idle_timeout: Some(Duration::from_secs(10)), ..Default::default() };
        let lifetime = Lifetime::new(&options);
        let watch = lifetime.until_close();
        tokio::pin!(watch);
        let wakes = Arc::new(Wakes::default());
        let waker = std::task::Waker::from(wakes.clone());
        assert!(watch.as_mut().poll(&mut std::task::Context::from_waker(&waker)).is_pending());
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(1)).await;
            drop(lifetime.stream_started().0);
        }
        assert_eq!(wakes.0.load(Relaxed), 0, "a stream's end woke the watcher");
        let last_ended = Instant::now();
        assert_eq!(watch.await, Close::Idle);
        assert_eq!(Instant::now() - last_ended, Duration::from_secs(10));
    }
}
