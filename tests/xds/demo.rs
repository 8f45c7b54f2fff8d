//! `outrider demo` comes up ready, configured by its embedded control plane.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use common::admin_get as get;

/// Kills the demo when the test ends, however it ends.
struct Demo(std::process::Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn demo_starts_ready_and_shows_its_config() {
    let child = Command::new(env!("CARGO_BIN_EXE_outrider"))
        .args(["demo", "--xds-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0", "--policy", "round_robin"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut demo = Demo(child);
    let stdout = demo.0.stdout.take().unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let done = line.starts_with("ready:");
            lines.push(line);
            if done {
                break;
            }
        }
        lines
    });
    let lines = tokio::time::timeout(common::WAIT, lines).await.unwrap().unwrap();
    assert!(lines.last().unwrap().starts_with("ready:"), "{lines:?}");
    let admin = lines.iter().find_map(|l| l.strip_prefix("admin:")).unwrap().trim();
    let admin: std::net::SocketAddr = admin.trim_start_matches("http://").trim_end_matches('/').parse().unwrap();

    let (status, body) = common::admin_get(admin, "/ready").await;
    assert_eq!((status, body.trim()), (200, "LIVE"));
    let (_, clusters) = common::admin_get(admin, "/clusters").await;
    assert!(clusters.contains("echo::127.0.0.1:18083::weight::2"), "{clusters}");

    // Through the sidecar to the demo backends: each of the three answers.
    let mut names = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let (status, body) = get(SocketAddr::from(([127, 0, 0, 1], 10000)), "/").await;
        assert_eq!(status, 200, "{body}");
        names.insert(body.split(':').next().unwrap_or_default().to_owned());
    }
    assert_eq!(names, ["busy", "fast", "slow"].map(String::from).into(), "every demo backend answers");
    drop(demo);
}
