//! Shared pieces of the request-edge tests (`edge_*`): a backend that answers with the
//! request head it received, so a test compares what Envoy and Outrider forward; raw
//! HTTP/1.1 over plaintext or TLS, and HTTP/2 with headers a client library would fix.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::Response;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::WAIT;
use crate::common::backends::{self, Backend};
use crate::common::differential::parse_response;

/// The request heads a backend received, each as `(name, value)` in arrival order.
pub type Heads = Arc<Mutex<Vec<Vec<(String, String)>>>>;

/// A backend answering 200 `ok` that keeps the head of every request: method and target
/// as `:method` / `:path`, then each header.
pub async fn recording() -> (Backend, Heads) {
    let heads: Heads = Arc::default();
    let kept = heads.clone();
    let backend = backends::http(move |request: http::Request<hyper::body::Incoming>| {
        let kept = kept.clone();
        async move {
            let mut head = vec![
                (":method".to_owned(), request.method().to_string()),
                (":path".to_owned(), request.uri().to_string()),
            ];
            for (name, value) in request.headers() {
                head.push((name.to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()));
            }
            kept.lock().unwrap().push(head);
            Response::new(Full::new(Bytes::from_static(b"ok")))
        }
    })
    .await;
    (backend, heads)
}

/// The last head `heads` holds, without the headers whose values are random by design
/// (`x-request-id` is kept as `<uuid>` when it is one).
pub fn last_head(heads: &Heads) -> Vec<(String, String)> {
    let heads = heads.lock().unwrap();
    let head = heads.last().cloned().unwrap_or_default();
    head.into_iter()
        .map(|(name, value)| {
            if name == "x-request-id" && uuid::Uuid::parse_str(&value).is_ok() {
                (name, "<uuid>".to_owned())
            } else {
                (name, value)
            }
        })
        .collect()
}

/// The values of `name` in a head, in order.
pub fn values<'h>(head: &'h [(String, String)], name: &str) -> Vec<&'h str> {
    head.iter().filter(|(n, _)| n == name).map(|(_, v)| v.as_str()).collect()
}

/// Sends `request` (the whole text, `Connection: close` included) over `io` and returns
/// (status, headers, body) of the response once the server closes.
pub async fn exchange<T: AsyncRead + AsyncWrite + Unpin>(
    mut io: T,
    request: &str,
) -> (u16, Vec<(String, String)>, String) {
    io.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let _ = tokio::time::timeout(WAIT, io.read_to_end(&mut response)).await;
    parse_response(&String::from_utf8_lossy(&response))
}

/// A raw HTTP/1.1 request over plaintext.
pub async fn plain(port: u16, request: &str) -> u16 {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    exchange(stream, request).await.0
}

/// A raw HTTP/1.1 request over TLS with `config`.
pub async fn tls(port: u16, config: rustls::ClientConfig, request: &str) -> u16 {
    let stream = crate::tls_support::tls_connect(port, config).await.unwrap();
    exchange(stream, request).await.0
}

/// One HTTP/2 request (prior knowledge) for `uri` with `headers` as given, `host`
/// included; the status.
pub async fn h2(port: u16, uri: &str, headers: &[(&str, &str)]) -> u16 {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut request = http::Request::get(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = tokio::time::timeout(WAIT, sender.send_request(request.body(Full::new(Bytes::new())).unwrap()))
        .await
        .unwrap()
        .unwrap();
    let status = response.status().as_u16();
    let _ = response.into_body().collect().await;
    status
}
