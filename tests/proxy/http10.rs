//! HTTP/1.0 side by side with Envoy 1.40, with `http_protocol_options.accept_http_10` (without
//! it both answer 426: `framing_corpus`): a request is forwarded as HTTP/1.1 with its own
//! `Host`, or `default_host_for_http_10` when it has none; without either, Envoy's 400;
//! keep-alive as the client asks. The connection manager then still serves.

use crate::common;
use crate::upgrades::{head_recording_backend, until_closed};

use common::differential::{HttpListenerExtra, Pair, ROUTE_TO_BACKEND, http_listener, parse_response, static_cluster};

fn bootstrap(port: u16, backend: u16, options: &str) -> String {
    let clusters = static_cluster("backend", backend);
    let hcm = format!("\n          http_protocol_options: {{ {options} }}");
    let extra = HttpListenerExtra { hcm: &hcm, ..HttpListenerExtra::default() };
    let listener = http_listener("l", port, "p", extra, ROUTE_TO_BACKEND);
    format!("\nstatic_resources:\n  listeners:{listener}\n  clusters:{clusters}\n")
}

/// (status line of each response, host of each request the backend got).
async fn exchange(port: u16, request: &str, heads: &std::sync::Mutex<Vec<String>>) -> (Vec<String>, Vec<String>) {
    let response = until_closed(port, request).await;
    let statuses =
        response.match_indices("HTTP/1.").map(|(i, _)| response[i..].lines().next().unwrap_or("").to_owned()).collect();
    let hosts = std::mem::take(&mut *heads.lock().unwrap())
        .iter()
        .map(|head| head.lines().find_map(|l| l.strip_prefix("host: ")).unwrap_or("none").to_owned())
        .collect();
    (statuses, hosts)
}

async fn compare(options: &str, cases: &[(&str, &str, &[&str], &[&str])]) {
    let (backend, heads) = head_recording_backend().await;
    let pair = Pair::start(|port| bootstrap(port, backend, options)).await;
    for (name, port) in pair.ports() {
        for (case, request, statuses, hosts) in cases {
            let (got_statuses, got_hosts) = exchange(port, request, &heads).await;
            let got: Vec<String> = got_statuses.iter().map(|s| s.get(..12).unwrap_or(s).to_owned()).collect();
            assert_eq!(got, *statuses, "{name}: {case}: {got_statuses:?}");
            assert_eq!(got_hosts, *hosts, "{name}: {case}");
        }
        // Still serving.
        let (status, _, body) =
            parse_response(&until_closed(port, "GET /after HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n").await);
        assert_eq!((status, body.as_str()), (200, "ok"), "{name}");
        heads.lock().unwrap().clear();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn http10_is_served_as_envoy_serves_it_when_accepted() {
    compare(
        "accept_http_10: true",
        &[
            ("with a host", "GET /a HTTP/1.0\r\nhost: given.example\r\n\r\n", &["HTTP/1.0 200"], &["given.example"]),
            ("without a host", "GET /a HTTP/1.0\r\n\r\n", &["HTTP/1.0 400"], &[]),
            (
                "absolute-form without a host",
                "GET http://target.example/a HTTP/1.0\r\n\r\n",
                &["HTTP/1.0 200"],
                &["target.example"],
            ),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn http10_without_a_host_gets_the_default_host() {
    compare(
        "accept_http_10: true, default_host_for_http_10: default.example",
        &[
            ("without a host", "GET /a HTTP/1.0\r\n\r\n", &["HTTP/1.0 200"], &["default.example"]),
            ("with a host", "GET /a HTTP/1.0\r\nhost: given.example\r\n\r\n", &["HTTP/1.0 200"], &["given.example"]),
            ("HTTP/1.1 without a host", "GET /a HTTP/1.1\r\nconnection: close\r\n\r\n", &["HTTP/1.1 400"], &[]),
        ],
    )
    .await;
}
