//! `x-envoy-attempt-count` side by side with Envoy 1.40: a virtual host with
//! `include_request_attempt_count` and `include_attempt_count_in_response`. The backend
//! echoes the count it received; the first attempt is 1, a retry 2, and local replies
//! (upstream timeout 504, no healthy upstream 503) carry the count on the response too.

use crate::common;

use bytes::Bytes;
use common::backends;
use common::differential::{HttpListenerExtra, Pair, http_listener, raw_http1, static_cluster};
use http::Response;
use http_body_util::Full;

const VIRTUAL_HOST: &str = r#"              include_request_attempt_count: true
              include_attempt_count_in_response: true
              routes:
              - match: { prefix: /retry }
                route: { cluster: echo, retry_policy: { retry_on: 5xx, num_retries: 1 } }
              - match: { prefix: /hang }
                route: { cluster: hang, timeout: 0.2s }
              - match: { prefix: /none }
                route: { cluster: empty }
              - match: { prefix: / }
                route: { cluster: echo }
"#;

fn bootstrap(port: u16, echo: u16, hang: u16) -> String {
    let clusters = static_cluster("echo", echo) + &static_cluster("hang", hang);
    let listener = http_listener("l", port, "p", HttpListenerExtra::default(), VIRTUAL_HOST);
    format!(
        r#"
static_resources:
  listeners:{listener}
  clusters:{clusters}
  - name: empty
    connect_timeout: 1s
    type: STATIC
    load_assignment: {{ cluster_name: empty, endpoints: [] }}
"#
    )
}

/// (status, the count the backend saw, the count on the response).
async fn attempt(port: u16, path: &str) -> (u16, Option<String>, Option<String>) {
    let (status, headers, _) =
        raw_http1(port, &format!("GET {path} HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n")).await;
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    (status, header("x-seen-attempt"), header("x-envoy-attempt-count"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_count_matches_envoy() {
    // Answers with the attempt count it received; `/retry` fails its first attempt.
    let echo = backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let seen = request.headers().get("x-envoy-attempt-count").cloned();
        let first = seen.as_ref().is_none_or(|v| v == "1");
        let status = if request.uri().path() == "/retry" && first { 503 } else { 200 };
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
        if let Some(seen) = seen {
            response.headers_mut().insert("x-seen-attempt", seen);
        }
        response
    })
    .await;
    // Never answers: the route's timeout fires.
    let hang = backends::http(|_request: http::Request<hyper::body::Incoming>| async move {
        std::future::pending::<()>().await;
        Response::new(Full::new(Bytes::new()))
    })
    .await;
    let pair = Pair::start(|port| bootstrap(port, echo.port, hang.port)).await;
    let one = || Some("1".to_owned());
    let expected = [
        ("/", (200, one(), one())),
        ("/retry", (200, Some("2".to_owned()), Some("2".to_owned()))),
        ("/hang", (504, None, one())),
        ("/none", (503, None, one())),
    ];
    for (name, port) in pair.ports() {
        for (path, want) in &expected {
            assert_eq!(&attempt(port, path).await, want, "{name} {path}");
        }
    }
}
