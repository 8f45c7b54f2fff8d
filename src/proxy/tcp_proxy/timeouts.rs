//! The TCP proxy's connection limits: `idle_timeout` (no byte moved either way for that
//! long) and `max_downstream_connection_duration` (with its jitter). Both count from the
//! moment the connection is handed to the proxy, before the upstream connects, as Envoy
//! does since 1.36; either one ending drops both connections.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// When a byte last moved on either connection of one proxied connection.
#[derive(Clone)]
pub struct Activity(Rc<Cell<Instant>>);

impl Activity {
    pub fn new() -> Self {
        Self(Rc::new(Cell::new(Instant::now())))
    }

    fn touch(&self) {
        self.0.set(Instant::now());
    }

    fn last(&self) -> Instant {
        self.0.get()
    }
}

/// A stream that marks [`Activity`] whenever it reads or writes at least one byte (Envoy
/// resets its idle timer on data either way, on both connections).
pub struct Active<S> {
    inner: S,
    activity: Activity,
}

impl<S> Active<S> {
    pub fn new(inner: S, activity: Activity) -> Self {
        Self { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Active<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            this.activity.touch();
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Active<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = ready!(Pin::new(&mut this.inner).poll_write(cx, data))?;
        if written > 0 {
            this.activity.touch();
        }
        Poll::Ready(Ok(written))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Why [`bounded`] stopped the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Idle,
    MaxDuration,
}

/// Runs `work` (the proxied connection) until it ends, or until `idle` passes with no
/// activity, or `max_duration` passes; then drops it, which closes both connections.
pub async fn bounded<F: Future>(
    work: F,
    activity: &Activity,
    idle: Option<Duration>,
    max_duration: Option<Duration>,
) -> Result<F::Output, Limit> {
    let start = Instant::now();
    // A limit too far away to represent is no limit.
    let deadline = max_duration.and_then(|d| start.checked_add(d));
    tokio::pin!(work);
    loop {
        let last = activity.last();
        let idle_at = idle.and_then(|idle| last.checked_add(idle));
        tokio::select! {
            done = &mut work => return Ok(done),
            // Bytes may have moved while the timer ran: only a full quiet period counts.
            () = sleep_until(idle_at) => if activity.last() == last {
                return Err(Limit::Idle);
            },
            () = sleep_until(deadline) => return Err(Limit::MaxDuration),
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// `max_downstream_connection_duration` lengthened by Envoy's jitter: a random whole number
/// of milliseconds below `ceil(limit × percent / 100)`.
pub fn with_jitter(limit: Duration, percent: f64, rng: &mut impl Rng) -> Duration {
    let limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
    // Both factors are bounded (percent in [0, 100]); the product is finite and not negative.
    let max_jitter_ms = (limit_ms as f64 * (percent / 100.0)).ceil() as u64;
    if max_jitter_ms == 0 {
        return limit;
    }
    limit.saturating_add(Duration::from_millis(rng.random_range(0..max_jitter_ms)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn jitter_stays_below_its_percentage() {
        let mut rng = SmallRng::seed_from_u64(7);
        let limit = Duration::from_secs(10);
        assert_eq!(with_jitter(limit, 0.0, &mut rng), limit);
        for _ in 0..100 {
            let jittered = with_jitter(limit, 10.0, &mut rng);
            assert!(jittered >= limit && jittered < limit + Duration::from_secs(1), "{jittered:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_activity_and_max_duration_from_the_start() {
        let activity = Activity::new();
        let idle = Some(Duration::from_secs(10));
        let touched = {
            let activity = activity.clone();
            async move {
                for _ in 0..3 {
                    tokio::time::sleep(Duration::from_secs(8)).await;
                    activity.touch();
                }
                std::future::pending::<()>().await
            }
        };
        let start = Instant::now();
        assert_eq!(bounded(touched, &activity, idle, None).await, Err(Limit::Idle));
        // Three touches 8 s apart keep it alive; it ends 10 s after the last one.
        assert_eq!(start.elapsed(), Duration::from_secs(34));

        let activity = Activity::new();
        let busy = {
            let activity = activity.clone();
            async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    activity.touch();
                }
            }
        };
        let start = Instant::now();
        let max = Some(Duration::from_secs(5));
        assert_eq!(bounded(busy, &activity, idle, max).await, Err(Limit::MaxDuration));
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert_eq!(bounded(async { 1 }, &Activity::new(), idle, max).await, Ok(1));
    }
}
