//! A shutdown signal that many tasks can wait on.

use tokio::sync::watch;

/// Triggers shutdown; dropping it also triggers it.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

/// Resolves once shutdown was triggered.
#[derive(Debug, Clone)]
pub struct Signal(watch::Receiver<bool>);

pub fn channel() -> (Trigger, Signal) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Signal(rx))
}

impl Trigger {
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }
}

impl Drop for Trigger {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

impl Signal {
    /// Waits until shutdown was triggered (or the trigger was dropped).
    pub async fn triggered(mut self) {
        let _ = self.0.wait_for(|stop| *stop).await;
    }

    /// Whether shutdown was triggered. Read per request (a connection asked to close after
    /// its responses), so it takes no lock: a signal only ever goes from `false` to `true`
    /// (or loses its trigger), and no `Signal` marks a value seen (`triggered` consumes its
    /// own), so a change of the channel's version, or its closing, is the trigger.
    pub fn is_triggered(&self) -> bool {
        !matches!(self.0.has_changed(), Ok(false))
    }
}

/// `POST /drain_listeners?inboundonly`: what the workers do with their INBOUND listeners
/// (Istio drains them when its pod terminates, so the application can still call out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InboundDrain {
    #[default]
    None,
    /// Inbound connections are asked to close; inbound listeners stop accepting at once,
    /// or, when `graceful`, once the drain time is over (as Envoy's `graceful`).
    Draining { graceful: bool },
}

impl InboundDrain {
    /// Asks the workers for an inbound drain unless one was asked for already; whether
    /// this was the first.
    pub fn start(sender: &watch::Sender<InboundDrain>, graceful: bool) -> bool {
        sender.send_if_modified(|drain| {
            let first = *drain == InboundDrain::None;
            if first {
                *drain = InboundDrain::Draining { graceful };
            }
            first
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_signal_is_triggered_by_its_trigger_or_its_drop_and_stays_so_in_every_clone() {
        let (trigger, signal) = channel();
        let early = signal.clone();
        assert!(!signal.is_triggered() && !early.is_triggered());
        trigger.trigger();
        signal.clone().triggered().await;
        let late = signal.clone();
        assert!(signal.is_triggered() && early.is_triggered() && late.is_triggered());
        let (dropped, signal) = channel();
        drop(dropped);
        assert!(signal.is_triggered());
    }
}
