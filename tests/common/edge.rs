//! The request edge side by side with Envoy: a backend that records each request head
//! exactly as it arrives, clients that send what a library would refuse to (raw HTTP/1 bytes,
//! HTTP/2 frames with connection-specific headers), and the normalised text of what each
//! side saw, so that two runs of the same case compare as two strings.
//!
//! Values that differ between any two runs (a generated `x-request-id`, `date`,
//! `x-envoy-upstream-service-time`) are replaced by a placeholder that keeps their presence;
//! everything else is compared as it is, headers as a sorted multiset (the order of headers a
//! proxy adds is not part of HTTP's meaning).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use outrider::app::{self, Running};
use outrider::config::bootstrap::Bootstrap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::differential::{Envoy, envoy_binary};
use super::lab::free_port;

/// How long a case may keep its connection without the answer it waits for. Every case ends
/// before (its answers arrive, or the proxy closes); this bounds a proxy that holds on.
pub const READ_LIMIT: Duration = Duration::from_secs(5);

/// Envoy and Outrider, each with its own port for every listener of one bootstrap.
pub struct Proxies {
    pub envoy: Envoy,
    pub outrider: Running,
    /// Listener name → (Envoy's port, Outrider's port).
    pub ports: BTreeMap<&'static str, (u16, u16)>,
}

impl Proxies {
    /// Starts both from `bootstrap(ports)` (listener name → port); `None` when no Envoy is
    /// installed (the caller says SKIPPED).
    pub async fn start(
        listeners: &[&'static str],
        bootstrap: impl Fn(&BTreeMap<&'static str, u16>) -> String,
    ) -> Option<Proxies> {
        let binary = envoy_binary()?;
        let envoy_ports: BTreeMap<_, _> = listeners.iter().map(|name| (*name, free_port())).collect();
        let outrider_ports: BTreeMap<_, _> = listeners.iter().map(|name| (*name, free_port())).collect();
        let with_admin = |text: String| {
            format!("{text}\nadmin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}\n")
        };
        let envoy = Envoy::start(&binary, &with_admin(bootstrap(&envoy_ports))).await;
        let outrider =
            app::start_with(Bootstrap::parse(&with_admin(bootstrap(&outrider_ports))).unwrap(), 1).await.unwrap();
        outrider.listeners_ready().await;
        let ports = listeners.iter().map(|name| (*name, (envoy_ports[name], outrider_ports[name]))).collect();
        Some(Proxies { envoy, outrider, ports })
    }
}

/// The request heads the backend received, in order, each as its raw text.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<String>>>);

impl Recorder {
    /// Everything received since the last call.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    fn push(&self, head: String) {
        self.0.lock().unwrap().push(head);
    }
}

/// The backend's answer to every request it reads in full: a fixed head the proxies may
/// rewrite (`server`, the hop-by-hop `keep-alive`) and a two-byte body.
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nserver: backend\r\nkeep-alive: timeout=30\r\nx-backend: edge\r\ncontent-length: 2\r\n\r\nok";

/// An HTTP/1.1 backend on loopback that records each request head byte for byte before
/// answering. A WebSocket upgrade is accepted (101, then the backend closes, which ends the
/// tunnel); a `CONNECT` gets 200 and the same end; every other request [`ANSWER`].
pub async fn recording_backend() -> (u16, Recorder) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let recorder = Recorder::default();
    let seen = recorder.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            tokio::spawn(serve_backend(stream, seen.clone()));
        }
    });
    (port, recorder)
}

async fn serve_backend(mut stream: tokio::net::TcpStream, seen: Recorder) {
    let mut buffer = Vec::new();
    loop {
        let Some(head_end) = read_head(&mut stream, &mut buffer).await else { return };
        let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
        buffer.drain(..head_end);
        seen.push(head.clone());
        let parsed = ParsedHead::parse(&head);
        let connection = parsed.get("connection").unwrap_or_default().to_ascii_lowercase();
        if parsed.start.starts_with("CONNECT ") {
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await;
            return;
        }
        if connection.contains("upgrade") && parsed.get("upgrade").is_some_and(|u| u.eq_ignore_ascii_case("websocket"))
        {
            let _ = stream
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n")
                .await;
            return;
        }
        if !read_body(&mut stream, &mut buffer, &parsed).await {
            return;
        }
        if stream.write_all(ANSWER).await.is_err() {
            return;
        }
        if connection.contains("close") || parsed.start.ends_with("HTTP/1.0") {
            return;
        }
    }
}

/// Reads until `buffer` holds a whole head; its length with the blank line.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S, buffer: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(at) = find(buffer, b"\r\n\r\n") {
            return Some(at + 4);
        }
        if buffer.len() > 1 << 20 {
            return None;
        }
        let mut chunk = [0u8; 16 * 1024];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Reads and drops the request body the head announces; false when the connection ended.
async fn read_body<S: AsyncRead + Unpin>(stream: &mut S, buffer: &mut Vec<u8>, head: &ParsedHead) -> bool {
    let chunked = head.get("transfer-encoding").is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
    let length: usize = head.get("content-length").and_then(|l| l.trim().parse().ok()).unwrap_or(0);
    loop {
        let done = if chunked {
            chunked_length(buffer).inspect(|end| {
                buffer.drain(..*end);
            })
        } else if buffer.len() >= length {
            buffer.drain(..length);
            Some(length)
        } else {
            None
        };
        if done.is_some() {
            return true;
        }
        let mut chunk = [0u8; 16 * 1024];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The length of a whole chunked body (with its last chunk and trailers) at the start of
/// `bytes`, once it is all there.
fn chunked_length(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let line_end = at + find(&bytes[at..], b"\r\n")?;
        let size_text = String::from_utf8_lossy(&bytes[at..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        at = line_end + 2;
        if size == 0 {
            // Trailers, then the blank line.
            let end = find(&bytes[at..], b"\r\n")?;
            if end == 0 {
                return Some(at + 2);
            }
            return find(&bytes[at..], b"\r\n\r\n").map(|e| at + e + 4);
        }
        if bytes.len() < at + size + 2 {
            return None;
        }
        at += size + 2;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A head split into its start line and its header fields (names lower-cased).
pub struct ParsedHead {
    pub start: String,
    pub headers: Vec<(String, String)>,
}

impl ParsedHead {
    pub fn parse(text: &str) -> ParsedHead {
        let mut lines = text.split("\r\n");
        let start = lines.next().unwrap_or_default().to_owned();
        let headers = lines
            .filter(|l| !l.is_empty())
            .map(|l| match l.split_once(':') {
                Some((n, v)) => (n.trim().to_ascii_lowercase(), v.trim().to_owned()),
                None => (l.to_owned(), String::new()),
            })
            .collect();
        ParsedHead { start, headers }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Header values that differ from run to run, replaced by what stays: their presence.
/// `sent` are the headers the client sent: an `x-request-id` a proxy kept is compared as it is.
pub fn normalise(headers: &[(String, String)], sent: &[(String, String)]) -> Vec<String> {
    let mut lines: Vec<String> = headers
        .iter()
        .map(|(name, value)| {
            let value = match name.as_str() {
                "date" => "<date>".to_owned(),
                "x-envoy-upstream-service-time" => "<ms>".to_owned(),
                "x-request-id" if !sent.iter().any(|(n, v)| n == name && v == value) => "<generated>".to_owned(),
                _ => value.clone(),
            };
            format!("{name}: {value}")
        })
        .collect();
    lines.sort();
    lines
}

/// One response as the client read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// Sends `bytes` on `io` and reads until `answers` responses have arrived whole, the proxy
/// closed, or [`READ_LIMIT`] passed. A 101 ends the reading (what follows is the tunnel).
pub async fn h1_exchange<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, bytes: &[u8], answers: usize) -> Vec<Response> {
    // The proxy may refuse before reading everything: a failed write is part of the answer.
    let _ = io.write_all(bytes).await;
    let mut received = Vec::new();
    let mut responses = Vec::new();
    let read = async {
        loop {
            let (parsed, upgraded) = parse_responses(&received, false);
            if parsed.len() >= answers || upgraded {
                responses = parsed;
                return;
            }
            let mut chunk = [0u8; 16 * 1024];
            match io.read(&mut chunk).await {
                Ok(0) | Err(_) => {
                    responses = parse_responses(&received, true).0;
                    return;
                }
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
        }
    };
    if tokio::time::timeout(READ_LIMIT, read).await.is_err() {
        responses = parse_responses(&received, true).0;
    }
    responses
}

/// The whole responses at the start of `bytes` (`closed`: nothing more will come, so a
/// body without a length ends here), and whether the last was a 101.
fn parse_responses(bytes: &[u8], closed: bool) -> (Vec<Response>, bool) {
    let mut responses = Vec::new();
    let mut at = 0;
    while let Some(head_end) = find(&bytes[at..], b"\r\n\r\n") {
        let head = ParsedHead::parse(&String::from_utf8_lossy(&bytes[at..at + head_end]));
        let status: u16 = head.start.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body_start = at + head_end + 4;
        let rest = &bytes[body_start..];
        if status == 101 {
            responses.push(Response { status, headers: head.headers, body: String::new() });
            return (responses, true);
        }
        let chunked = head.get("transfer-encoding").is_some_and(|te| te.contains("chunked"));
        let length: Option<usize> = head.get("content-length").and_then(|l| l.parse().ok());
        let body_len = if status == 204 || status == 304 || (100..200).contains(&status) {
            Some(0)
        } else if chunked {
            chunked_length(rest)
        } else if let Some(length) = length {
            (rest.len() >= length).then_some(length)
        } else if closed {
            Some(rest.len())
        } else {
            None
        };
        let Some(body_len) = body_len else { break };
        let body = String::from_utf8_lossy(&rest[..body_len]).into_owned();
        responses.push(Response { status, headers: head.headers, body });
        at = body_start + body_len;
    }
    (responses, false)
}

/// An HTTP/2 request through the `h2` crate (a well-formed one): the response, or the
/// error that ended the stream or the connection.
pub async fn h2_request<S>(io: S, method: &str, uri: &str, headers: &[(&str, &str)]) -> Result<Response, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let exchange = async {
        let (client, connection) = h2::client::handshake(io).await.map_err(|e| describe_h2(&e))?;
        tokio::spawn(connection);
        let mut client = client.ready().await.map_err(|e| describe_h2(&e))?;
        let mut request = http::Request::builder().method(method).uri(uri).version(http::Version::HTTP_2);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(()).map_err(|e| e.to_string())?;
        let (response, _) = client.send_request(request, true).map_err(|e| describe_h2(&e))?;
        let response = response.await.map_err(|e| describe_h2(&e))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let mut body = response.into_body();
        let mut data = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk: Bytes = chunk.map_err(|e| describe_h2(&e))?;
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        Ok(Response { status, headers, body: String::from_utf8_lossy(&data).into_owned() })
    };
    tokio::time::timeout(READ_LIMIT, exchange).await.unwrap_or_else(|_| Err("no answer".to_owned()))
}

/// An `h2` error by its kind and code, without the text that names stream ids.
fn describe_h2(error: &h2::Error) -> String {
    match error.reason() {
        Some(reason) if error.is_go_away() => format!("goaway {reason:?}"),
        Some(reason) => format!("reset {reason:?}"),
        None if error.is_io() => "connection closed".to_owned(),
        None => format!("h2 error: {error}"),
    }
}

/// How a raw HTTP/2 stream ended: a response head (only its status is read), or a reset, a
/// GOAWAY, or the connection closing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawH2 {
    Status(u16),
    /// A response whose `:status` was not coded in a way this client reads.
    Answered,
    Reset(u32),
    GoAway(u32),
    Closed,
}

impl std::fmt::Display for RawH2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RawH2::Status(s) => write!(f, "{s}"),
            RawH2::Answered => write!(f, "answered"),
            RawH2::Reset(code) => write!(f, "reset {code}"),
            RawH2::GoAway(code) => write!(f, "goaway {code}"),
            RawH2::Closed => write!(f, "closed"),
        }
    }
}

/// One HTTP/2 request written frame by frame, its fields (pseudo-headers among them, in the
/// order given) coded as HPACK literals: for what the `h2` crate refuses to send
/// (connection-specific fields, `te` other than `trailers`, no `:authority`).
pub async fn h2_raw<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, fields: &[(&str, &str)]) -> RawH2 {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend_from_slice(&frame(4, 0, 0, &[]));
    let mut block = Vec::new();
    for (name, value) in fields {
        block.push(0x00); // literal, not indexed, new name
        hpack_string(&mut block, name.as_bytes());
        hpack_string(&mut block, value.as_bytes());
    }
    out.extend_from_slice(&frame(1, 0x1 | 0x4, 1, &block));
    if io.write_all(&out).await.is_err() {
        return RawH2::Closed;
    }
    let read = async {
        let mut buffer = Vec::new();
        loop {
            while buffer.len() >= 9 {
                let length = usize::from(buffer[0]) << 16 | usize::from(buffer[1]) << 8 | usize::from(buffer[2]);
                if buffer.len() < 9 + length {
                    break;
                }
                let (kind, flags) = (buffer[3], buffer[4]);
                let stream = u32::from_be_bytes([buffer[5], buffer[6], buffer[7], buffer[8]]) & 0x7fff_ffff;
                let payload: Vec<u8> = buffer[9..9 + length].to_vec();
                buffer.drain(..9 + length);
                // The server's SETTINGS go unacknowledged: an acknowledgement written after
                // a server has closed would make its kernel reset the connection, and the
                // reset can discard the GOAWAY this client has yet to read.
                match kind {
                    1 if stream == 1 => return status_of(&payload, flags),
                    3 if stream == 1 => return RawH2::Reset(code(&payload, 0)),
                    7 => return RawH2::GoAway(code(&payload, 4)),
                    _ => {}
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            match io.read(&mut chunk).await {
                Ok(0) | Err(_) => return RawH2::Closed,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(READ_LIMIT, read).await.unwrap_or(RawH2::Closed)
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut frame = vec![length[1], length[2], length[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// An HPACK string literal without Huffman coding (RFC 7541 §5.2), its length a 7-bit
/// prefix integer (§5.1).
fn hpack_string(block: &mut Vec<u8>, bytes: &[u8]) {
    let mut length = bytes.len();
    if length < 127 {
        block.push(u8::try_from(length).unwrap());
    } else {
        block.push(127);
        length -= 127;
        while length >= 128 {
            block.push(u8::try_from(length % 128).unwrap() | 0x80);
            length /= 128;
        }
        block.push(u8::try_from(length).unwrap());
    }
    block.extend_from_slice(bytes);
}

fn code(payload: &[u8], at: usize) -> u32 {
    payload.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])).unwrap_or(0)
}

/// The `:status` of a response HEADERS frame on a new connection: it is the first field, and
/// either a static table entry (RFC 7541 Appendix A, 8–14) or a literal with that name, its
/// value three digits (plain or Huffman-coded).
fn status_of(payload: &[u8], flags: u8) -> RawH2 {
    let mut block = payload;
    if flags & 0x8 != 0 {
        let pad = usize::from(block.first().copied().unwrap_or(0));
        block = block.get(1..block.len().saturating_sub(pad)).unwrap_or(&[]);
    }
    if flags & 0x20 != 0 {
        block = block.get(5..).unwrap_or(&[]);
    }
    let Some(&first) = block.first() else { return RawH2::Answered };
    const STATIC: [(u8, u16); 7] = [(8, 200), (9, 204), (10, 206), (11, 304), (12, 400), (13, 404), (14, 500)];
    if first & 0x80 != 0 {
        return STATIC.iter().find(|(i, _)| *i == first & 0x7f).map_or(RawH2::Answered, |(_, s)| RawH2::Status(*s));
    }
    let index = if first & 0xc0 == 0x40 { first & 0x3f } else { first & 0x0f };
    if !(8..=14).contains(&index) {
        return RawH2::Answered;
    }
    let Some(&length) = block.get(1) else { return RawH2::Answered };
    let value = block.get(2..2 + usize::from(length & 0x7f)).unwrap_or(&[]);
    let digits = if length & 0x80 != 0 { huffman_digits(value) } else { String::from_utf8_lossy(value).into_owned() };
    digits.parse().map_or(RawH2::Answered, RawH2::Status)
}

/// Decodes a Huffman-coded string of decimal digits (RFC 7541 Appendix B: `0`–`2` are the
/// 5-bit codes 0–2, `3`–`9` the 6-bit codes 0x19–0x1f); stops at anything else.
fn huffman_digits(bytes: &[u8]) -> String {
    let bits: Vec<u8> = bytes.iter().flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1)).collect();
    let take = |at: usize, n: usize| bits.get(at..at + n).map(|b| b.iter().fold(0u8, |v, bit| v << 1 | bit));
    let mut digits = String::new();
    let mut at = 0;
    while let Some(five) = take(at, 5) {
        if five <= 2 {
            digits.push(char::from(b'0' + five));
            at += 5;
        } else if let Some(six @ 0x19..=0x1f) = take(at, 6) {
            digits.push(char::from(b'3' + six - 0x19));
            at += 6;
        } else {
            break;
        }
    }
    digits
}
