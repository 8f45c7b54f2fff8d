//! A real browser for the admin server's live pages: Debian's Chromium, headless, loads a
//! page, lets its scripts run for a few seconds of the page's own (virtual) time — the
//! page's timers fire without the test waiting for them — and returns the DOM they built.

use std::path::PathBuf;

use super::WAIT;
use super::skip::{Tool, skipped};

/// Chromium, when installed (`tests/setup.sh` installs Debian's package).
fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"].into_iter().map(PathBuf::from).find(|p| p.is_file())
}

/// The DOM of `url` after 3 s of the page's virtual time; `None` (and SKIPPED for `what`)
/// without Chromium.
pub async fn rendered(url: &str, what: &str) -> Option<String> {
    let Some(binary) = chromium() else {
        skipped(Tool::Chromium, what, "chromium not found");
        return None;
    };
    let profile = tempfile::tempdir().unwrap();
    let run = tokio::process::Command::new(binary)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        // Virtual time stands still while a fetch is pending, so every poll the page makes
        // in these 3 s gets its answer.
        .args(["--virtual-time-budget=3000", "--dump-dom", url])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(WAIT, run).await.expect("chromium did not finish").unwrap();
    assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
    Some(String::from_utf8_lossy(&output.stdout).into_owned())
}
