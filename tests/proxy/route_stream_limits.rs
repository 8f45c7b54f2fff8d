//! A route's own stream limits, compared with Envoy 1.40: `RouteAction.idle_timeout`
//! replaces the connection manager's `stream_idle_timeout` and
//! `max_stream_duration.max_stream_duration` its `max_stream_duration`, for the requests the
//! route takes. Both answer 504 before the response began, the request read whole.

use crate::common;

use common::differential::{HttpListenerExtra, Pair, http_listener, raw_http1, static_cluster};

/// A backend that accepts connections, reads, and never answers.
async fn silent_backend() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream); // kept open, unanswered, until the test ends
        }
    });
    port
}

/// The connection manager's limits are 300 s (far beyond the test); the routes' are 0.2 s.
/// Route `timeout: 0s` disables the router's own timeout, so only a stream limit ends the
/// request.
const ROUTES: &str = "              routes:
              - match: { prefix: /idle }
                route: { cluster: backend, timeout: 0s, idle_timeout: 0.2s }
              - match: { prefix: /duration }
                route: { cluster: backend, timeout: 0s, max_stream_duration: { max_stream_duration: 0.2s } }
";

const HCM: &str = "
          stream_idle_timeout: 300s
          common_http_protocol_options: { max_stream_duration: 300s }";

fn bootstrap(port: u16, backend: u16) -> String {
    let extra = HttpListenerExtra { hcm: HCM, ..Default::default() };
    format!(
        "static_resources:\n  listeners:{}\n  clusters:{}\n",
        http_listener("http", port, "http", extra, ROUTES),
        static_cluster("backend", backend)
    )
}

#[tokio::test]
async fn a_routes_idle_timeout_and_max_stream_duration_replace_the_connection_managers() {
    let backend = silent_backend().await;
    let pair = Pair::start(|port| bootstrap(port, backend)).await;
    for (who, port) in pair.ports() {
        for (path, body) in [("/idle", "stream timeout"), ("/duration", "downstream duration timeout")] {
            let request = format!("GET {path} HTTP/1.1\r\nhost: h\r\nconnection: close\r\n\r\n");
            let (status, _, answer) = raw_http1(port, &request).await;
            // 504 once the request was received whole (Envoy's `maybeRequestTimeoutCode`).
            assert_eq!((status, answer.as_str()), (504, body), "{who} {path}");
        }
    }
    assert_eq!(pair.outrider_stat("http.http.downstream_rq_idle_timeout").await, 1);
    assert_eq!(pair.outrider_stat("http.http.downstream_rq_max_duration_reached").await, 1);
    pair.outrider.stop();
}
