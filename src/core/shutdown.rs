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

    pub fn is_triggered(&self) -> bool {
        *self.0.borrow()
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
