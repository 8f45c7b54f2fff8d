//! The codec's own behaviour: sniffing, and hyper's HTTP/1.1 and HTTP/2 servers as
//! configured here, over real loopback sockets. Between requests both codecs let go of their
//! buffers (see `release_idle_buffers` in `vendor/README.md`): a connection idle for an hour,
//! requests pipelined into one write, a head split over many writes and a head larger than
//! the first read are all still answered exactly; over HTTP/2 also concurrent streams, large
//! bodies and header blocks, and frames split across reads or sharing one.

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
use tokio::task::LocalSet;

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

// === HTTP/2 ===

/// Answers `/echo…` with the request body itself, anything else as [`describe`] does.
async fn echo_or_describe(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.uri().path().starts_with("/echo") {
        let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        return Ok(Response::new(Full::new(body)));
    }
    describe(request).await
}

/// A client connected to one HTTP/2 connection served by [`http2`] with `manager`'s
/// settings (no buffer limit: h2's default windows); the server runs on the current
/// `LocalSet`.
async fn serve_one_h2(manager: &HttpConnectionManager) -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (stream, _) = listener.accept().await.unwrap();
    let connection = http2(manager, 0).serve_connection(TokioIo::new(stream), service_fn(echo_or_describe));
    tokio::task::spawn_local(connection);
    client
}

/// One request over an h2 client, its response body as a string (status 200 checked).
async fn h2_send(sender: &mut h2::client::SendRequest<Bytes>, path: &str, x: Option<&str>, body: Bytes) -> String {
    let mut request = Request::post(format!("http://a{path}"));
    if let Some(x) = x {
        request = request.header("x", x);
    }
    let end = body.is_empty();
    let (response, mut send) = sender.send_request(request.body(()).unwrap(), end).unwrap();
    if !end {
        // The peer's windows let the body out as they open.
        let mut rest = body;
        while !rest.is_empty() {
            send.reserve_capacity(rest.len());
            let capacity = std::future::poll_fn(|cx| send.poll_capacity(cx)).await.unwrap().unwrap();
            let chunk = rest.split_to(capacity.min(rest.len()));
            send.send_data(chunk, rest.is_empty()).unwrap();
        }
    }
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut read = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        read.extend_from_slice(&chunk);
    }
    String::from_utf8(read).unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_idle_h2_connection_serves_requests_and_concurrent_streams_exactly() {
    LocalSet::new()
        .run_until(async {
            let client = serve_one_h2(&hcm()).await;
            let (sender, connection) = h2::client::handshake(client).await.unwrap();
            tokio::task::spawn_local(connection);
            let mut sender = sender.ready().await.unwrap();

            // Many requests, each after an hour with nothing on the connection, of growing
            // bodies (over the 8 KiB read buffer, the 16 KiB write buffer and the 64 KiB
            // stream window) and header values (over the 4 KiB Huffman buffer, and at
            // 20 000 bytes over one 16 KiB frame: HEADERS then CONTINUATION).
            for (i, size) in [0usize, 1, 100, 8_191, 8_193, 16_400, 70_000, 300_000].into_iter().enumerate() {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                let body = Bytes::from(vec![b'a' + i as u8; size]);
                let x = "x".repeat([5, 4_097, 20_000][i % 3]);
                let described = h2_send(&mut sender, &format!("/n{i}"), Some(&x), body.clone()).await;
                assert_eq!(described, format!("POST /n{i} {size} {}", x.len()));
                // And the same body back: a large response after idle.
                let echoed = h2_send(&mut sender, "/echo", None, body.clone()).await;
                assert_eq!(echoed.as_bytes(), &body[..], "echo of {size} bytes");
            }

            // Idle again, then concurrent streams, each with its own body and header.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            let mut streams = Vec::new();
            for i in 0..16usize {
                let mut sender = sender.clone();
                streams.push(tokio::task::spawn_local(async move {
                    let body = Bytes::from(vec![b'0' + (i % 10) as u8; 5_000 * i]);
                    let x = "y".repeat(300 * i);
                    let described = h2_send(&mut sender, &format!("/c{i}"), Some(&x), body.clone()).await;
                    assert_eq!(described, format!("POST /c{i} {} {}", body.len(), x.len()));
                    let echoed = h2_send(&mut sender, "/echo", None, body.clone()).await;
                    assert_eq!(echoed.as_bytes(), &body[..]);
                }));
            }
            for stream in streams {
                stream.await.unwrap();
            }
        })
        .await;
}

/// An HTTP/2 frame: length, type, flags, stream, payload (RFC 9113 §4.1).
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut frame = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    frame.extend_from_slice(&[kind, flags]);
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// A request header block: `:method` POST, `:scheme` http, `:path` and `:authority` as
/// literals never added to the dynamic table.
fn h2_post_block(path: &str) -> Vec<u8> {
    let mut block = vec![0x83, 0x86, 0x04, path.len() as u8];
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 1, b'a']);
    block
}

/// Reads frames until `stream` ends (acknowledging SETTINGS on the way); returns whether
/// its response said 200 and its DATA. A PING ACK on the way is returned in `pong`.
async fn h2_response(stream_id: u32, client: &mut TcpStream, pong: &mut Option<Vec<u8>>) -> (bool, Vec<u8>) {
    let (mut ok, mut data) = (false, Vec::new());
    loop {
        let mut head = [0u8; 9];
        client.read_exact(&mut head).await.unwrap();
        let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; length];
        client.read_exact(&mut payload).await.unwrap();
        match kind {
            SETTINGS if flags & 1 == 0 => client.write_all(&h2_frame(SETTINGS, 1, 0, &[])).await.unwrap(),
            PING if flags & 1 == 1 => *pong = Some(payload),
            HEADERS if id == stream_id => ok |= payload.first() == Some(&0x88),
            DATA if id == stream_id => data.extend_from_slice(&payload),
            _ => {}
        }
        if id == stream_id && flags & END_STREAM != 0 {
            return (ok, data);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn h2_frames_split_across_reads_or_sharing_one_are_read_whole_after_idle() {
    LocalSet::new()
        .run_until(async {
            let mut client = serve_one_h2(&hcm()).await;
            let mut preface = H2_PREFACE.to_vec();
            preface.extend(h2_frame(SETTINGS, 0, 0, &[]));
            client.write_all(&preface).await.unwrap();
            let mut pong = None;

            // A first request, then an hour idle.
            let mut request = h2_frame(HEADERS, END_HEADERS, 1, &h2_post_block("/first"));
            request.extend(h2_frame(DATA, END_STREAM, 1, b"abc"));
            client.write_all(&request).await.unwrap();
            assert_eq!(h2_response(1, &mut client, &mut pong).await, (true, b"POST /first 3 0".to_vec()));
            tokio::time::sleep(Duration::from_secs(3600)).await;

            // One byte of a frame head, an hour, then the rest of the request three bytes
            // at a time: the first read after idle holds less than a frame head.
            let mut request = h2_frame(HEADERS, END_HEADERS, 3, &h2_post_block("/split"));
            request.extend(h2_frame(DATA, 0, 3, b"hello "));
            request.extend(h2_frame(DATA, END_STREAM, 3, b"world"));
            client.write_all(&request[..1]).await.unwrap();
            tokio::time::sleep(Duration::from_secs(3600)).await;
            for piece in request[1..].chunks(3) {
                client.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
            assert_eq!(h2_response(3, &mut client, &mut pong).await, (true, b"POST /split 11 0".to_vec()));
            tokio::time::sleep(Duration::from_secs(3600)).await;

            // After idle, one write with a PING, a whole request and half of the next one's
            // DATA frame; then, idle with that half frame read, its other half.
            let mut first = h2_frame(PING, 0, 0, b"12345678");
            first.extend(h2_frame(HEADERS, END_HEADERS | END_STREAM, 5, &h2_post_block("/whole")));
            first.extend(h2_frame(HEADERS, END_HEADERS, 7, &h2_post_block("/halves")));
            let data = h2_frame(DATA, END_STREAM, 7, &[b'z'; 3000]);
            first.extend_from_slice(&data[..1500]);
            client.write_all(&first).await.unwrap();
            assert_eq!(h2_response(5, &mut client, &mut pong).await, (true, b"POST /whole 0 0".to_vec()));
            assert_eq!(pong.take().as_deref(), Some(&b"12345678"[..]));
            tokio::time::sleep(Duration::from_secs(3600)).await;
            client.write_all(&data[1500..]).await.unwrap();
            assert_eq!(h2_response(7, &mut client, &mut pong).await, (true, b"POST /halves 3000 0".to_vec()));

            // A frame larger than the 8 KiB first read after idle (under the 16 KiB frame size).
            tokio::time::sleep(Duration::from_secs(3600)).await;
            let mut request = h2_frame(HEADERS, END_HEADERS, 9, &h2_post_block("/large"));
            request.extend(h2_frame(DATA, END_STREAM, 9, &[b'q'; 16_000]));
            client.write_all(&request).await.unwrap();
            assert_eq!(h2_response(9, &mut client, &mut pong).await, (true, b"POST /large 16000 0".to_vec()));
        })
        .await;
}

/// A stream whose every read returns at most one byte: the codec sees each head in
/// every partial state.
struct Bytewise(TcpStream);

impl tokio::io::AsyncRead for Bytewise {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let mut one = [0u8; 1];
        let mut limited = tokio::io::ReadBuf::new(&mut one);
        let polled = std::pin::Pin::new(&mut self.0).poll_read(cx, &mut limited);
        if let std::task::Poll::Ready(Ok(())) = polled {
            buf.put_slice(limited.filled());
        }
        polled
    }
}

impl tokio::io::AsyncWrite for Bytewise {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// [`serve_one`], the server reading one byte at a time.
async fn serve_one_bytewise(
    manager: &HttpConnectionManager,
) -> (TcpStream, tokio::task::JoinHandle<Result<(), hyper::Error>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (stream, _) = listener.accept().await.unwrap();
    let connection = http1(manager).serve_connection(TokioIo::new(Bytewise(stream)), service_fn(describe));
    (client, tokio::spawn(connection))
}

/// What Envoy's codec accepts and normalises is taken the same way, in one request or
/// pipelined, whole or a byte at a time: obs-fold (the line break removed, the whitespace
/// kept in the value) and runs of spaces in the request line, also after the version.
#[tokio::test]
async fn obs_fold_and_spaces_in_the_request_line_are_normalised() {
    let manager = hcm();
    let heads = [
        ("GET /a HTTP/1.1\r\nx: b\r\n  c\r\n\r\n", "GET /a 0 4"),
        ("GET /a HTTP/1.1\r\nx: b \r\n\tc\r\n d\r\n\r\n", "GET /a 0 6"),
        ("GET   /b   HTTP/1.1\r\n\r\n", "GET /b 0 0"),
        ("GET /c HTTP/1.1  \r\nx: y\r\n\r\n", "GET /c 0 1"),
        ("POST /d HTTP/1.1\r\nx: 1\r\n 2\r\ncontent-length: 3\r\n\r\nabc", "POST /d 3 3"),
    ];
    for split in [false, true] {
        let (mut client, _task) = if split { serve_one_bytewise(&manager).await } else { serve_one(&manager).await };
        let all: String = heads.iter().map(|(head, _)| *head).collect();
        client.write_all(all.as_bytes()).await.unwrap();
        let want: Vec<String> = heads.iter().map(|(_, want)| (*want).to_owned()).collect();
        assert_eq!(bodies(&mut client, heads.len()).await, want, "split: {split}");
    }
}

/// Which error a refused head ends its connection with.
type IsError = fn(&hyper::Error) -> bool;

/// The heads Envoy's codec refuses are refused: the connection ends with a parse error
/// and nothing written (the connection manager answers in Envoy's words).
#[tokio::test]
async fn ambiguous_framing_and_other_codings_are_refused_without_an_answer() {
    let manager = hcm();
    let cases: [(&str, IsError); 6] = [
        ("POST / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 1\r\n\r\na", |e| e.is_parse()),
        ("POST / HTTP/1.1\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", |e| e.is_parse()),
        ("POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 1\r\n\r\n0\r\n\r\n", |e| e.is_parse()),
        (
            "POST / HTTP/1.1\r\ntransfer-encoding: xchunked\r\n\r\n",
            hyper::Error::is_parse_unsupported_transfer_encoding,
        ),
        (
            "POST / HTTP/1.1\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
            hyper::Error::is_parse_unsupported_transfer_encoding,
        ),
        ("GET / HTTP/1.0\r\n\r\n", |e| e.is_parse()),
    ];
    for (head, is) in cases {
        let (mut client, task) = serve_one(&manager).await;
        client.write_all(head.as_bytes()).await.unwrap();
        let mut written = Vec::new();
        client.read_to_end(&mut written).await.unwrap();
        assert!(written.is_empty(), "{head:?}: {}", String::from_utf8_lossy(&written));
        let error = task.await.unwrap().unwrap_err();
        assert!(is(&error), "{head:?}: {error:?}");
    }
}
