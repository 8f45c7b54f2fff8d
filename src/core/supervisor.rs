//! Supervision of the tasks the process cannot do without: the ADS client and the workers.
//!
//! If one of them dies anyway — a panic — carrying on would
//! leave a sidecar that looks alive but no longer takes configuration (ADS) or serves part
//! of its traffic (a worker). Outrider does what Kubernetes expects instead: the failure
//! is logged, the process stops with an error, and the pod's restart policy brings it
//! back with a fresh ADS stream. The first failure is the one reported.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// What died and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub component: String,
    pub reason: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} died: {}", self.component, self.reason)
    }
}

/// Collects the first failure of a supervised task. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Supervisor {
    failure: Arc<Mutex<Option<Failure>>>,
    notify: Arc<watch::Sender<bool>>,
}

impl Default for Supervisor {
    fn default() -> Self {
        Self { failure: Arc::default(), notify: Arc::new(watch::Sender::new(false)) }
    }
}

impl Supervisor {
    /// Records that `component` died (only the first failure is kept) and wakes whoever
    /// waits in [`Supervisor::failed`].
    pub fn fail(&self, component: &str, reason: impl Into<String>) {
        let failure = Failure { component: component.to_owned(), reason: reason.into() };
        tracing::error!(component = %failure.component, reason = %failure.reason, "a supervised task died; stopping");
        let mut first = self.failure.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if first.is_none() {
            *first = Some(failure);
        }
        drop(first);
        self.notify.send_replace(true);
    }

    /// The first failure, if any.
    pub fn failure(&self) -> Option<Failure> {
        self.failure.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Resolves with the first failure once one happened.
    pub async fn failed(&self) -> Failure {
        let mut changed = self.notify.subscribe();
        loop {
            if let Some(failure) = self.failure() {
                return failure;
            }
            if changed.changed().await.is_err() {
                // The sender lives in `self`: it cannot be dropped while we wait.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Watches a spawned task: a panic is a failure. A task that returns decided to (the
    /// ADS client gives up on a control plane that refuses it, and keeps serving the last
    /// good configuration); that is logged where it happens. The watcher ends when the
    /// task does.
    pub fn watch(&self, component: &'static str, task: tokio::task::JoinHandle<()>) -> tokio::task::JoinHandle<()> {
        let supervisor = self.clone();
        tokio::spawn(async move {
            match task.await {
                Err(error) if error.is_panic() => supervisor.fail(component, panic_message(error.into_panic())),
                // Returned, or cancelled (only the runtime shutting down cancels it).
                Ok(()) | Err(_) => {}
            }
        })
    }

    /// A guard for a thread's main loop: dropped while the thread unwinds from a panic, it
    /// records the failure.
    pub fn guard(&self, component: String) -> PanicGuard {
        PanicGuard { supervisor: self.clone(), component }
    }
}

/// See [`Supervisor::guard`].
#[derive(Debug)]
pub struct PanicGuard {
    supervisor: Supervisor,
    component: String,
}

impl Drop for PanicGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.supervisor.fail(&self.component, "panicked");
        }
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => format!("panicked: {message}"),
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(message) => format!("panicked: {message}"),
            Err(_) => "panicked".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_task_is_a_failure_and_the_first_one_is_kept() {
        let supervisor = Supervisor::default();
        let _watcher = supervisor.watch("ads", tokio::spawn(async { panic!("boom") }));
        let failure = supervisor.failed().await;
        assert_eq!(failure, Failure { component: "ads".into(), reason: "panicked: boom".into() });
        supervisor.fail("worker 1", "later");
        assert_eq!(supervisor.failure().map(|f| f.component), Some("ads".to_owned()));
    }

    #[tokio::test]
    async fn a_task_that_returns_is_not_a_failure() {
        let supervisor = Supervisor::default();
        supervisor.watch("ads", tokio::spawn(async {})).await.unwrap_or_default();
        assert_eq!(supervisor.failure(), None);
    }

    #[test]
    fn a_thread_that_panics_under_its_guard_is_a_failure() {
        let supervisor = Supervisor::default();
        let guarded = supervisor.clone();
        let thread = std::thread::spawn(move || {
            let _guard = guarded.guard("worker 0".into());
            panic!("worker bug");
        });
        assert!(thread.join().is_err());
        assert_eq!(supervisor.failure().map(|f| f.component), Some("worker 0".to_owned()));
        let quiet = Supervisor::default();
        drop(quiet.guard("worker 1".into()));
        assert_eq!(quiet.failure(), None, "a guard dropped normally reports nothing");
    }
}
