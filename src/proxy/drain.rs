//! Draining a worker: stop accepting, ask every HTTP connection to close once its
//! in-flight requests are answered (HTTP/1.1 `connection: close`, HTTP/2 GOAWAY), and wait
//! until every accepted connection has ended or the drain time is up.
//!
//! A worker is one thread, so the count of open connections is a plain `Cell`.

use std::cell::Cell;
use std::rc::Rc;

use tokio::sync::Notify;

/// The accepted connections of one worker that have not ended yet.
#[derive(Debug, Default)]
pub struct Connections {
    open: Cell<usize>,
    ended: Notify,
}

/// Counts one accepted connection until dropped.
#[derive(Debug)]
pub struct Open(Rc<Connections>);

impl Connections {
    pub fn open(self: &Rc<Self>) -> Open {
        self.open.set(self.open.get() + 1);
        Open(self.clone())
    }

    pub fn count(&self) -> usize {
        self.open.get()
    }

    /// Resolves once no accepted connection is open.
    pub async fn all_ended(&self) {
        loop {
            // Registered before the check, so an end between check and wait is not missed.
            let ended = self.ended.notified();
            if self.open.get() == 0 {
                return;
            }
            ended.await;
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let open = self.0.open.get().saturating_sub(1);
        self.0.open.set(open);
        if open == 0 {
            self.0.ended.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_the_last_connection() {
        let connections = Rc::new(Connections::default());
        connections.all_ended().await;
        let a = connections.open();
        let b = connections.open();
        assert_eq!(connections.count(), 2);
        drop(a);
        let wait = connections.all_ended();
        tokio::pin!(wait);
        assert!(futures::poll!(wait.as_mut()).is_pending());
        drop(b);
        wait.await;
    }
}
