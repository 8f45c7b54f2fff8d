//! What an accept loop does when `accept` fails.
//!
//! Out of descriptors (EMFILE, ENFILE) or kernel memory (ENOBUFS, ENOMEM), the pending
//! connection stays in the listen queue, so accepting again at once fails again: a loop
//! that retries immediately spins a core and floods the log until a descriptor frees up.
//! Outrider backs off instead — 1 ms doubling to 1 s, reset by the next successful accept
//! — and logs the first failure of a run at warn, the rest at debug. Errors about one
//! connection (it was aborted before it was accepted, a firewall refused it) are retried
//! at once, as before.

use std::io;
use std::time::Duration;

const FIRST: Duration = Duration::from_millis(1);
const MAX: Duration = Duration::from_secs(1);

/// One accept loop's back-off state.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    /// The delay after the last exhausted accept; `None` while accepts succeed.
    current: Option<Duration>,
}

impl AcceptBackoff {
    /// How long to wait before accepting again after `error`; `None`: at once.
    pub fn on_error(&mut self, error: &io::Error) -> Option<Duration> {
        if !exhausted(error) {
            return None;
        }
        let next = self.current.map_or(FIRST, |d| d.saturating_mul(2).min(MAX));
        self.current = Some(next);
        Some(next)
    }

    /// Whether the last error started a run of exhausted accepts (worth a warning).
    pub fn first_of_run(&self) -> bool {
        self.current == Some(FIRST)
    }

    pub fn on_success(&mut self) {
        self.current = None;
    }
}

/// Out of a resource the pending connection cannot be accepted without.
fn exhausted(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhaustion_backs_off_exponentially_up_to_a_second_and_resets() {
        let mut backoff = AcceptBackoff::default();
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        assert_eq!(backoff.on_error(&emfile), Some(Duration::from_millis(1)));
        assert!(backoff.first_of_run());
        assert_eq!(backoff.on_error(&emfile), Some(Duration::from_millis(2)));
        assert!(!backoff.first_of_run());
        let delays: Vec<_> = (0..20).filter_map(|_| backoff.on_error(&emfile)).collect();
        assert_eq!(delays.last(), Some(&MAX));
        backoff.on_success();
        assert_eq!(backoff.on_error(&io::Error::from_raw_os_error(libc::ENFILE)), Some(FIRST));
        assert_eq!(backoff.on_error(&io::Error::from_raw_os_error(libc::ECONNABORTED)), None);
    }
}
