//! Backend faults through the proxy: a backend dying mid-response, one that never
//! answers, and HTTP/2 backends resetting their streams, each under a bounded number of
//! requests (`OUTRIDER_FAULT_REQUESTS`), counting what the client saw. Run with
//! `--no-capture` to see the counts.

use crate::common;

use std::time::Instant;

use bytes::Bytes;
use common::backends::{self, Backend};
use common::lab::{self, Lab, get};
use common::load::fault_requests;
use common::{ROUTE, WAIT};
use futures::StreamExt;
use http::StatusCode;
use http_body_util::{BodyExt, Full};

const H2: &str = r#"
typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config: { http2_protocol_options: {} }
"#;

/// The lab's route with `extra` fields in its route action.
fn route(extra: &str) -> String {
    ROUTE.replace("route: { cluster: backend }", &format!("route: {{ cluster: backend{extra} }}"))
}

/// What the client saw of `n` requests, one at a time.
#[derive(Debug, Default)]
struct Tally {
    sent: u64,
    ok: u64,
    /// A response head, then a body cut short.
    cut: u64,
    /// Any other status, by status.
    other: Vec<(StatusCode, String)>,
}

async fn send(lab: &Lab, n: u64) -> Tally {
    let mut tally = Tally::default();
    for _ in 0..n {
        tally.sent += 1;
        let answer = get(lab.proxy_port, "/").await.unwrap();
        match (&answer.body, answer.status) {
            (Ok(_), StatusCode::OK) => tally.ok += 1,
            (Err(_), StatusCode::OK) => tally.cut += 1,
            _ => tally.other.push((answer.status, answer.text())),
        }
    }
    tally
}

fn report(case: &str, tally: &Tally, started: Instant, attempts: &[(&str, &Backend)]) {
    let seen: Vec<String> = attempts.iter().map(|(name, b)| format!("{name} saw {}", b.seen.requests())).collect();
    eprintln!(
        "fault {case}: sent {} succeeded {} cut {} failed {} in {:?}; {}",
        tally.sent,
        tally.ok,
        tally.cut,
        tally.other.len(),
        started.elapsed(),
        seen.join(", ")
    );
}

#[tokio::test]
async fn a_backend_dying_mid_response_cuts_that_body_and_the_worker_keeps_serving() {
    let (dying, healthy) = (backends::truncating().await, backends::healthy("ok").await);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    // Retries are on, but nothing can be retried once the headers went downstream.
    let lab = lab::start_logged(
        &[dying.port, healthy.port],
        "",
        &route(", retry_policy: { retry_on: \"5xx,reset\", num_retries: 2 }"),
        "DELTA_GRPC",
        &lab::access_log(&log),
    )
    .await;
    let n = fault_requests(20);
    let started = Instant::now();
    let tally = send(&lab, n).await;
    report("backend dies mid-response", &tally, started, &[("dying", &dying), ("healthy", &healthy)]);

    assert!(tally.other.is_empty(), "{:?}", tally.other);
    assert_eq!(tally.cut, dying.seen.requests() as u64, "every request the dying backend took is cut, none retried");
    assert_eq!(tally.ok, healthy.seen.requests() as u64);
    assert!(tally.cut > 0 && tally.ok > 0, "{tally:?}");
    let lines = lab::log_lines(&log, n as usize).await;
    let cut = lines.iter().filter(|l| l.contains("\"GET / HTTP/1.1\" 200 UC ")).count();
    assert_eq!(cut as u64, tally.cut, "{lines:#?}");
    lab.outrider.stop();
}

#[tokio::test]
async fn a_backend_that_never_answers_is_cut_by_the_route_timeout() {
    let silent = backends::silent().await;
    let lab = lab::start(&[silent.port], "", &route(", timeout: 0.2s"), "DELTA_GRPC").await;
    let n = fault_requests(10).min(50);
    let started = Instant::now();
    let tally = send(&lab, n).await;
    report("backend never answers (route timeout 0.2s)", &tally, started, &[("silent", &silent)]);
    assert_eq!(tally.other.len() as u64, n);
    for (status, body) in &tally.other {
        assert_eq!((*status, body.as_str()), (StatusCode::GATEWAY_TIMEOUT, "upstream request timeout"));
    }
    let stat = lab::stat(&lab.outrider, "cluster.backend.upstream_rq_timeout");
    assert_eq!(stat, Some(n as f64));
    lab.outrider.stop();
}

#[tokio::test]
async fn a_backend_that_never_answers_is_retried_after_the_per_try_timeout() {
    let (silent, healthy) = (backends::silent().await, backends::healthy("ok").await);
    let policy = ", timeout: 10s, retry_policy: { retry_on: 5xx, num_retries: 1, per_try_timeout: 0.1s, \
                  retry_host_predicate: [{ name: envoy.retry_host_predicates.previous_hosts, typed_config: { \
                  \"@type\": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate } }] }";
    let lab = lab::start(&[silent.port, healthy.port], "", &route(policy), "DELTA_GRPC").await;
    let n = fault_requests(20);
    let started = Instant::now();
    let tally = send(&lab, n).await;
    report(
        "backend never answers (per-try timeout, retry)",
        &tally,
        started,
        &[("silent", &silent), ("healthy", &healthy)],
    );
    assert_eq!(tally.ok, n, "{:?}", tally.other);
    assert!(silent.seen.connections() > 0, "the silent backend had its turns");
    let per_try = lab::stat(&lab.outrider, "cluster.backend.upstream_rq_per_try_timeout").unwrap();
    assert_eq!(lab::stat(&lab.outrider, "cluster.backend.upstream_rq_retry"), Some(per_try));
    lab.outrider.stop();
}

/// Sends `n` HTTP/2 requests through the proxy to a cluster of an HTTP/2 backend that
/// resets every stream with `reason` and a healthy one.
async fn h2_resets(reason: h2::Reason, retry_on: Option<&str>, n: u64) -> (Tally, Backend, Backend, Lab) {
    let (resetting, healthy) = (backends::resetting_h2(reason).await, backends::healthy("ok").await);
    let policy = retry_on.map(|on| format!(", retry_policy: {{ retry_on: \"{on}\", num_retries: 1 }}"));
    let lab =
        lab::start(&[resetting.port, healthy.port], H2, &route(policy.as_deref().unwrap_or("")), "DELTA_GRPC").await;
    let mut client = lab::h2_client(lab.proxy_port).await;
    let mut tally = Tally::default();
    for _ in 0..n {
        tally.sent += 1;
        let request = http::Request::get(format!("http://127.0.0.1:{}/", lab.proxy_port))
            .header("host", "example.com")
            .body(Full::new(bytes::Bytes::new()))
            .unwrap();
        let response = tokio::time::timeout(WAIT, client.send_request(request)).await.unwrap().unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        if status == StatusCode::OK {
            tally.ok += 1;
        } else {
            tally.other.push((status, String::from_utf8_lossy(&body).into_owned()));
        }
    }
    (tally, resetting, healthy, lab)
}

#[tokio::test]
async fn refused_streams_are_retried_on_another_host_under_refused_stream() {
    let n = fault_requests(20);
    let started = Instant::now();
    let (tally, resetting, healthy, lab) = h2_resets(h2::Reason::REFUSED_STREAM, Some("refused-stream"), n).await;
    report(
        "h2 REFUSED_STREAM, retry_on refused-stream",
        &tally,
        started,
        &[("resetting", &resetting), ("healthy", &healthy)],
    );
    assert_eq!(tally.ok, n, "{:?}", tally.other);
    assert!(resetting.seen.requests() > 0);
    // Drained, not stopped: the HTTP/2 client on this runtime answers the GOAWAY.
    lab.outrider.drain_and_stop().await;
}

#[tokio::test]
async fn reset_streams_are_retried_on_another_host_under_reset() {
    let n = fault_requests(20);
    let started = Instant::now();
    let (tally, resetting, healthy, lab) = h2_resets(h2::Reason::INTERNAL_ERROR, Some("reset"), n).await;
    report(
        "h2 RST_STREAM INTERNAL_ERROR, retry_on reset",
        &tally,
        started,
        &[("resetting", &resetting), ("healthy", &healthy)],
    );
    assert_eq!(tally.ok, n, "{:?}", tally.other);
    assert!(resetting.seen.requests() > 0);
    // Drained, not stopped: the HTTP/2 client on this runtime answers the GOAWAY.
    lab.outrider.drain_and_stop().await;
}

#[tokio::test]
async fn without_a_retry_policy_a_reset_stream_answers_503_in_envoys_words() {
    let n = fault_requests(20);
    for (reason, words) in
        [(h2::Reason::INTERNAL_ERROR, "remote reset"), (h2::Reason::REFUSED_STREAM, "remote refused stream reset")]
    {
        let started = Instant::now();
        let (tally, resetting, healthy, lab) = h2_resets(reason, None, n).await;
        report(
            &format!("h2 RST_STREAM {reason:?}, no retry"),
            &tally,
            started,
            &[("resetting", &resetting), ("healthy", &healthy)],
        );
        assert_eq!(tally.ok, healthy.seen.requests() as u64);
        assert_eq!(tally.other.len(), resetting.seen.requests(), "one attempt each");
        let expected = format!("upstream connect error or disconnect/reset before headers. reset reason: {words}");
        for (status, body) in &tally.other {
            assert_eq!((*status, body.as_str()), (StatusCode::SERVICE_UNAVAILABLE, expected.as_str()));
        }
        // Drained, not stopped: the HTTP/2 client on this runtime answers the GOAWAY.
        lab.outrider.drain_and_stop().await;
    }
}

// === Request bodies under a retry policy ===

/// A backend that reads each request body whole, tells `chunks` of each piece as it
/// arrives, keeps the bodies in `bodies`, and answers its first request 503 and the next
/// ones 200 with the body it read.
async fn failing_once_backend(
    chunks: tokio::sync::mpsc::UnboundedSender<Bytes>,
    bodies: std::sync::Arc<std::sync::Mutex<Vec<Bytes>>>,
) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (chunks, bodies) = (chunks.clone(), bodies.clone());
            let service = hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let (chunks, bodies) = (chunks.clone(), bodies.clone());
                async move {
                    let mut body = request.into_body();
                    let mut read = Vec::new();
                    while let Some(frame) = body.frame().await {
                        if let Ok(data) = frame.unwrap().into_data() {
                            let _ = chunks.send(data.clone());
                            read.extend_from_slice(&data);
                        }
                    }
                    let read = Bytes::from(read);
                    let first = {
                        let mut bodies = bodies.lock().unwrap();
                        bodies.push(read.clone());
                        bodies.len() == 1
                    };
                    let status = if first { 503 } else { 200 };
                    let response = http::Response::builder().status(status).body(Full::new(read)).unwrap();
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            });
        }
    });
    port
}

/// Sends `POST /` whose body is what `pieces` yields, with `content-length: length` or
/// chunked, over a new HTTP/1.1 connection to the proxy.
async fn post_streaming(
    port: u16,
    length: Option<usize>,
    pieces: tokio::sync::mpsc::UnboundedReceiver<Bytes>,
) -> tokio::task::JoinHandle<(StatusCode, Bytes)> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let frames = tokio_stream::wrappers::UnboundedReceiverStream::new(pieces)
        .map(|piece| Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(piece)));
    let body = http_body_util::StreamBody::new(frames);
    let mut request = http::Request::post("http://backend/");
    if let Some(length) = length {
        request = request.header("content-length", length.to_string());
    }
    let request = request.body(body).unwrap();
    tokio::spawn(async move {
        let response = sender.send_request(request).await.unwrap();
        let status = response.status();
        (status, response.into_body().collect().await.unwrap().to_bytes())
    })
}

#[tokio::test]
async fn under_a_retry_policy_the_body_streams_to_the_first_attempt_and_is_replayed_to_the_retry() {
    let (chunks_tx, mut chunks) = tokio::sync::mpsc::unbounded_channel();
    let bodies = std::sync::Arc::default();
    let port = failing_once_backend(chunks_tx, std::sync::Arc::clone(&bodies)).await;
    let lab = lab::start(&[port], "", &route(", retry_policy: { retry_on: 5xx, num_retries: 1 }"), "GRPC").await;

    let (pieces, rx) = tokio::sync::mpsc::unbounded_channel();
    let answer = post_streaming(lab.proxy_port, Some(10), rx).await;
    pieces.send(Bytes::from_static(b"hello")).unwrap();
    // The first attempt has the first half before the client sends the second: the body
    // streams, it is not held back until it is whole (as it was, and as Envoy does not).
    let first = tokio::time::timeout(WAIT, chunks.recv()).await.expect("the first half reaches the backend");
    assert_eq!(first.unwrap(), "hello");
    pieces.send(Bytes::from_static(b"world")).unwrap();

    let (status, body) = tokio::time::timeout(WAIT, answer).await.unwrap().unwrap();
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"helloworld"[..]), "the retry's answer");
    assert_eq!(*bodies.lock().unwrap(), vec![Bytes::from_static(b"helloworld"); 2], "the retry was sent all of it");
    assert_eq!(lab::stat(&lab.outrider, "cluster.backend.upstream_rq_retry"), Some(1.0));
    assert_eq!(lab::stat(&lab.outrider, "cluster.backend.retry_or_shadow_abandoned"), Some(0.0));
}

#[tokio::test]
async fn a_body_larger_than_the_retry_buffer_streams_once_and_gives_up_the_retry() {
    let (chunks_tx, _chunks) = tokio::sync::mpsc::unbounded_channel();
    let bodies = std::sync::Arc::default();
    let port = failing_once_backend(chunks_tx, std::sync::Arc::clone(&bodies)).await;
    let lab = lab::start(&[port], "", &route(", retry_policy: { retry_on: 5xx, num_retries: 1 }"), "GRPC").await;

    // Over the 64 KiB kept for retries, said by its length and without one (chunked).
    for (length, sent) in [(Some(100_000), 100_000usize), (None, 100_000)] {
        bodies.lock().unwrap().clear();
        let (pieces, rx) = tokio::sync::mpsc::unbounded_channel();
        let answer = post_streaming(lab.proxy_port, length, rx).await;
        for _ in 0..sent / 10_000 {
            pieces.send(Bytes::from(vec![b'x'; 10_000])).unwrap();
        }
        drop(pieces);
        let (status, body) = tokio::time::timeout(WAIT, answer).await.unwrap().unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "not retried: {length:?}");
        assert_eq!(body.len(), sent, "the backend got it whole");
        assert_eq!(bodies.lock().unwrap().len(), 1, "one attempt");
    }
    assert_eq!(lab::stat(&lab.outrider, "cluster.backend.upstream_rq_retry"), Some(0.0));
    assert_eq!(lab::stat(&lab.outrider, "cluster.backend.retry_or_shadow_abandoned"), Some(2.0));
}
