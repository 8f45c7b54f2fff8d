//! `outrider demo` comes up ready, configured by its embedded control plane.

use crate::common;
use crate::common::browser;

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
    balancing_json_counts_the_picks(admin).await;
    balancing_page_follows_a_slowed_backend(admin).await;
    drop(demo);
}

/// `/balancing.json`: the demo cluster's three endpoints with the requests just sent.
async fn balancing_json_counts_the_picks(admin: SocketAddr) {
    let (status, body) = get(admin, "/balancing.json").await;
    assert_eq!(status, 200);
    let view: serde_json::Value = serde_json::from_str(&body).unwrap();
    let clusters = view["clusters"].as_array().unwrap();
    let echo = clusters.iter().find(|c| c["name"] == "echo").unwrap_or_else(|| panic!("{body}"));
    let endpoints = echo["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 3, "{body}");
    let requests: u64 = endpoints.iter().map(|e| e["requests"].as_u64().unwrap()).sum();
    assert!(requests >= 30, "{body}");
    assert!(endpoints.iter().all(|e| e["latency_ms"].as_f64().is_some() && e["health"] == "healthy"), "{body}");
    // The control plane's cluster has served no request through the balancer: it is left out
    // unless the page's filter names it (in any case).
    assert!(clusters.iter().all(|c| c["name"] != "xds-grpc"), "{body}");
    let (_, body) = get(admin, "/balancing.json?cluster=XDS").await;
    let named: serde_json::Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = named["clusters"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["xds-grpc"], "{body}");
}

/// The live balancing page as a browser draws it: the demo's three backends in its table
/// and charts; after the fast backend is slowed down by 300 ms and sent traffic, the
/// latency the page shows for it follows.
async fn balancing_page_follows_a_slowed_backend(admin: SocketAddr) {
    let url = format!("http://{admin}/balancing");
    let Some(before) = browser::rendered(&url, "the live balancing page in Chromium").await else { return };
    let fast = "127.0.0.1:18081";
    for port in [18081, 18082, 18083] {
        let endpoint = format!("127.0.0.1:{port}");
        assert!(row_attribute(&before, &endpoint, "data-share").is_some(), "no row for {endpoint}:\n{before}");
    }
    assert!(before.matches("<polyline").count() >= 9, "three charts of three endpoints:\n{before}");
    let latency = |dom: &str| -> f64 {
        row_attribute(dom, fast, "data-latency-ms").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{dom}"))
    };
    let was = latency(&before);

    let slow_down = |ms: u32| {
        let request = format!(
            "POST /_backend/latency?ms={ms} HTTP/1.1\r\nhost: b\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        async move { assert_eq!(common::differential::raw_http1(18081, &request).await.0, 200) }
    };
    slow_down(300).await;
    for _ in 0..12 {
        let (status, body) = get(SocketAddr::from(([127, 0, 0, 1], 10000)), "/").await;
        assert_eq!(status, 200, "{body}");
    }
    let after = browser::rendered(&url, "the live balancing page in Chromium").await.unwrap();
    slow_down(0).await;
    let now = latency(&after);
    assert!(now > was + 100.0, "the page shows {fast} at {now} ms after the slow-down, {was} ms before");
    let line = |dom: &str| latency_line(dom, fast).unwrap_or_else(|| panic!("no latency line for {fast}:\n{dom}"));
    let (drawn_before, drawn_after) = (line(&before), line(&after));
    assert!(!drawn_after.is_empty() && drawn_after != drawn_before, "{drawn_before:?} then {drawn_after:?}");
}

/// The points of `endpoint`'s line in the latency chart.
fn latency_line(dom: &str, endpoint: &str) -> Option<String> {
    let chart = &dom[dom.find("class=\"chart latency\"")?..];
    let chart = &chart[..chart.find("</svg>")?];
    let line = &chart[chart.find(&format!("data-endpoint=\"{endpoint}\""))?..];
    let line = &line[..line.find('>')?];
    let points = line.split("points=\"").nth(1)?;
    Some(points[..points.find('"')?].to_owned())
}

/// The value of `attribute` on the table row of `endpoint` in a serialized DOM.
fn row_attribute(dom: &str, endpoint: &str, attribute: &str) -> Option<String> {
    let marker = format!("data-endpoint=\"{endpoint}\"");
    dom.match_indices(&marker).find_map(|(at, _)| {
        let start = dom[..at].rfind('<')?;
        let end = at + dom[at..].find('>')?;
        let tag = &dom[start..end];
        if !tag.starts_with("<tr") {
            return None;
        }
        let value = tag.split(&format!("{attribute}=\"")).nth(1)?;
        Some(value[..value.find('"')?].to_owned())
    })
}
