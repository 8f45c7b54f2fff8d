//! One timer per stream. The stream limits (`stream_idle_timeout`, `max_stream_duration`)
//! and the route's attempt timeout share one `Sleep`, armed at the earliest of their
//! deadlines still ahead; each party sets its own deadline and, woken, compares only its
//! own with the clock. Once the response head is out, the same `Sleep` moves into the
//! response body, which keeps the stream limits (see `stream::LimitedBody`). Before, a
//! stream registered three timers: the limits while the request was handled, the limits
//! on the body, and the attempt's timeout.
//!
//! Both parties live in the stream's one task, so they share its waker: when the `Sleep`
//! fires, the task is polled and each party looks at its own deadline.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

use crate::proxy::router::StreamLimits;

/// Who set a deadline on the stream's timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Party {
    /// The stream limits, while the request is handled.
    Limits,
    /// The route's timeout for the attempt in flight (`timeout`, `per_try_timeout`).
    Attempt,
}

/// The attempt's deadline passed before its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Elapsed;

/// The timer of one stream; see the module's notes.
#[derive(Debug, Default)]
pub(super) struct StreamTimer {
    /// Made on the first deadline: a stream without any deadline registers no timer.
    sleep: RefCell<Option<Pin<Box<Sleep>>>>,
    limits: Cell<Option<Instant>>,
    attempt: Cell<Option<Instant>>,
    /// The matched route's overrides of the stream limits (`RouteAction.idle_timeout`,
    /// `max_stream_duration`), which the limits read from here.
    route: Cell<StreamLimits>,
}

impl StreamTimer {
    fn deadline(&self, party: Party) -> &Cell<Option<Instant>> {
        match party {
            Party::Limits => &self.limits,
            Party::Attempt => &self.attempt,
        }
    }

    /// Every party's deadline that is set.
    fn deadlines(&self) -> impl Iterator<Item = Instant> {
        [self.limits.get(), self.attempt.get()].into_iter().flatten()
    }

    /// Sets (or clears) `party`'s deadline; the timer is re-armed when next polled.
    pub(super) fn set(&self, party: Party, deadline: Option<Instant>) {
        self.deadline(party).set(deadline);
    }

    /// Ready once `party`'s deadline has passed; pending, with the timer armed at the
    /// earliest deadline ahead, before that or while `party` has none.
    pub(super) fn poll_deadline(&self, party: Party, cx: &mut Context<'_>) -> Poll<()> {
        let Some(own) = self.deadline(party).get() else { return Poll::Pending };
        let mut slot = self.sleep.borrow_mut();
        // Armed at the earliest deadline and not fired: the common poll, which reads no clock.
        let earliest = self.deadlines().fold(own, Instant::min);
        if let Some(sleep) = slot.as_mut()
            && sleep.deadline() == earliest
            && !sleep.is_elapsed()
            && sleep.as_mut().poll(cx).is_pending()
        {
            return Poll::Pending;
        }
        // Each pass that sees the timer fire leaves out the deadline it fired for (no
        // longer ahead): with two parties, the third pass has only `own` left.
        for _ in 0..3 {
            let now = Instant::now();
            if now >= own {
                return Poll::Ready(());
            }
            // A deadline already passed is its own party's to see in this same wake.
            let at = self.deadlines().filter(|&d| d > now).fold(own, Instant::min);
            let sleep = match slot.as_mut() {
                Some(sleep) => {
                    if sleep.deadline() != at {
                        sleep.as_mut().reset(at);
                    }
                    sleep
                }
                None => slot.insert(Box::pin(tokio::time::sleep_until(at))),
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        // The timer fired but the clock says `own` is still ahead: look again soon.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// The route's overrides of the stream limits, set once the route is chosen. The limits
    /// are due at once, so that they look again with these (in the same wake: they share
    /// the stream's task).
    pub(super) fn set_route_limits(&self, limits: StreamLimits) {
        self.route.set(limits);
        self.limits.set(Some(Instant::now()));
    }

    pub(super) fn route_limits(&self) -> StreamLimits {
        self.route.get()
    }

    /// Runs `future` until `deadline` (the attempt's timeout); `Err(Elapsed)` when the
    /// deadline passed first, and the future is dropped.
    pub(super) fn within<F: Future>(&self, deadline: Instant, future: F) -> Within<'_, F> {
        self.set(Party::Attempt, Some(deadline));
        Within { timer: self, future }
    }

    /// Resolves once `party`'s deadline has passed (never while it has none).
    pub(super) async fn passed(&self, party: Party) {
        std::future::poll_fn(|cx| self.poll_deadline(party, cx)).await;
    }

    /// The `Sleep`, for the response body to keep the stream limits with; the deadlines
    /// set so far are forgotten.
    pub(super) fn take_sleep(&self) -> Option<Pin<Box<Sleep>>> {
        self.limits.set(None);
        self.attempt.set(None);
        self.sleep.borrow_mut().take()
    }
}

pin_project_lite::pin_project! {
    /// [`StreamTimer::within`]: the future and the timer it shares. A plain struct, not an
    /// async function, so the future is held once (an async function would hold it twice,
    /// as its argument and as its pinned local). The attempt's deadline is cleared when
    /// this ends or is dropped.
    pub(super) struct Within<'a, F> {
        timer: &'a StreamTimer,
        #[pin]
        future: F,
    }

    impl<F> PinnedDrop for Within<'_, F> {
        fn drop(this: Pin<&mut Self>) {
            this.timer.set(Party::Attempt, None);
        }
    }
}

impl<F: Future> Future for Within<'_, F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        this.timer.poll_deadline(Party::Attempt, cx).map(|()| Err(Elapsed))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_attempt_times_out_at_its_deadline_on_the_one_timer() {
        let timer = StreamTimer::default();
        let start = Instant::now();
        let result = timer.within(start + Duration::from_secs(2), std::future::pending::<()>()).await;
        assert_eq!(result, Err(Elapsed));
        assert_eq!(Instant::now() - start, Duration::from_secs(2));
        assert_eq!(timer.attempt.get(), None, "the attempt's deadline is cleared");
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_attempt_returns_its_output_and_clears_its_deadline() {
        let timer = StreamTimer::default();
        let deadline = Instant::now() + Duration::from_secs(2);
        let result = timer.within(deadline, tokio::time::sleep(Duration::from_secs(1))).await;
        assert_eq!(result, Ok(()));
        assert_eq!(timer.attempt.get(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn both_parties_wake_at_their_own_deadline_sharing_one_sleep() {
        let timer = StreamTimer::default();
        let start = Instant::now();
        timer.set(Party::Limits, Some(start + Duration::from_secs(5)));
        // The attempt's earlier deadline fires first; the limits' later one is still armed.
        let limits = timer.passed(Party::Limits);
        let attempt = timer.within(start + Duration::from_secs(1), std::future::pending::<()>());
        tokio::select! {
            biased;
            result = attempt => assert_eq!(result, Err(Elapsed)),
            () = limits => panic!("the limits passed before the attempt's deadline"),
        }
        assert_eq!(Instant::now() - start, Duration::from_secs(1));
        timer.passed(Party::Limits).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(5));
        assert!(timer.take_sleep().is_some(), "one sleep served both");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_without_deadlines_registers_no_timer() {
        let timer = StreamTimer::default();
        let output = timer.within(Instant::now() + Duration::from_secs(1), async { 7 }).await;
        assert_eq!(output, Ok(7));
        assert!(timer.take_sleep().is_none(), "an attempt that finished at once armed nothing");
    }
}
