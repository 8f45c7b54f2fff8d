//! The codec's own behaviour: sniffing, and hyper's HTTP/1.1 server as configured here, over
//! real loopback sockets. Between requests the HTTP/1.1 codec lets go of its buffers (see
//! `release_idle_buffers` in `vendor/README.md`): a connection idle for an hour, requests
//! pipelined into one write, a head split over many writes and a head larger than the first
//! read are all still answered exactly.
#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::proxy::headers::tests::hcm;

#[tokio::test]
async fn sniffs_the_preface_and_http1() {
    let (protocol, read) = sniff(&mut &H2_PREFACE[..]).await.unwrap();
    assert_eq!((protocol, read.as_slice()), (Protocol::Http2, H2_PREFACE));
    let (protocol, read) = sniff(&mut &b"GET / HTTP/1.1\r\n"[..]).await.unwrap();
    assert_eq!((protocol, read.len()), (Protocol::Http1, 16));
    let (protocol, read) = sniff(&mut &b"PRI * HTTP/2.0\r\n"[..]).await.unwrap();
    assert_eq!((protocol, read.len()), (Protocol::Http1, 16));
}

/// Answers each request with `<method> <path> <body length> <header x length>`.
async fn describe(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes().len()).unwrap_or(usize::MAX);
    let x = parts.headers.get("x").map_or(0, |v| v.len());
    Ok(Response::new(Full::new(Bytes::from(format!("{} {} {body} {x}", parts.method, parts.uri.path())))))
}

/// A client connected to one HTTP/1.1 connection served by [`http1`] with `manager`'s
/// settings; the task ends with the connection.
async fn serve_one(manager: &HttpConnectionManager) -> (TcpStream, tokio::task::JoinHandle<Result<(), hyper::Error>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (stream, _) = listener.accept().await.unwrap();
    let connection = http1(manager).serve_connection(TokioIo::new(stream), service_fn(describe));
    (client, tokio::spawn(connection))
}

/// Reads `count` responses (each with a `content-length`) and returns their bodies.
async fn bodies(stream: &mut TcpStream, count: usize) -> Vec<String> {
    let mut read = Vec::new();
    let mut found = Vec::new();
    while found.len() < count {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed after {found:?}");
        read.extend_from_slice(&chunk[..n]);
        // Take every complete response off the front.
        while let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&read[..end]).to_lowercase();
            assert!(head.starts_with("http/1.1 200 ok"), "{head}");
            let length: usize = head.split("content-length: ").nth(1).unwrap().lines().next().unwrap().parse().unwrap();
            if read.len() < end + 4 + length {
                break;
            }
            found.push(String::from_utf8_lossy(&read[end + 4..end + 4 + length]).into_owned());
            read.drain(..end + 4 + length);
        }
    }
    assert!(read.is_empty(), "more than {count} responses: {read:?}");
    found
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_still_serves_exactly() {
    let (mut client, _server) = serve_one(&hcm()).await;
    client.write_all(b"GET /first HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    assert_eq!(bodies(&mut client, 1).await, ["GET /first 0 0"]);

    // An hour with nothing on the connection (the paused clock jumps).
    tokio::time::sleep(Duration::from_secs(3600)).await;

    // Three requests in one write: each answered, in order, bodies intact.
    client
        .write_all(b"GET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /c HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(bodies(&mut client, 3).await, ["GET /a 0 0", "POST /b 5 0", "GET /c 0 0"]);

    // Idle again, then a head split over many writes, one byte of the next request at a
    // time at first.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let request = b"POST /split HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
    for (i, piece) in request.chunks(7).enumerate() {
        client.write_all(if i == 0 { &piece[..1] } else { piece }).await.unwrap();
        if i == 0 {
            tokio::time::sleep(Duration::from_secs(60)).await;
            client.write_all(&piece[1..]).await.unwrap();
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(bodies(&mut client, 1).await, ["POST /split 3 0"]);
}

#[tokio::test(start_paused = true)]
async fn a_head_larger_than_the_first_read_is_read_whole_after_idle() {
    let (mut client, _server) = serve_one(&hcm()).await;
    client.write_all(b"GET /first HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    assert_eq!(bodies(&mut client, 1).await, ["GET /first 0 0"]);
    tokio::time::sleep(Duration::from_secs(600)).await;
    // 40 KB of one header (under the default 60 KiB limit), far over the first read.
    let value = "v".repeat(40_000);
    let request = format!("GET /large HTTP/1.1\r\nHost: a\r\nx: {value}\r\n\r\nGET /next HTTP/1.1\r\nHost: a\r\n\r\n");
    client.write_all(request.as_bytes()).await.unwrap();
    assert_eq!(bodies(&mut client, 2).await, ["GET /large 0 40000", "GET /next 0 0"]);
}

#[tokio::test(start_paused = true)]
async fn the_header_timeout_still_runs_from_the_start_of_the_wait() {
    let mut manager = hcm();
    manager.request_headers_timeout = Some(Duration::from_secs(10));
    let (mut client, server) = serve_one(&manager).await;
    client.write_all(b"GET /first HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    assert_eq!(bodies(&mut client, 1).await, ["GET /first 0 0"]);
    // Within the timeout a request is served; then nothing for longer than it, and the
    // connection ends with hyper's header timeout, no byte of a next request read.
    tokio::time::sleep(Duration::from_secs(5)).await;
    client.write_all(b"GET /second HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
    assert_eq!(bodies(&mut client, 1).await, ["GET /second 0 0"]);
    let error = server.await.unwrap().unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "{rest:?}");
}
