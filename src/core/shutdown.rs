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
