//! TCP over an HTTP tunnel (`tunneling_config`): on the upstream connection (after its TLS
//! handshake, if any) the TCP proxy sends a `CONNECT` whose authority is the configured
//! hostname, over HTTP/2 when the cluster speaks it (Istio's HBONE) and HTTP/1.1 otherwise,
//! as Envoy's tunnelling pools choose; once the upstream answers 2xx, the connection's
//! bytes go both ways inside that stream. Any other answer closes the downstream
//! connection, as Envoy closes it.
//!
//! Over HTTP/2 to an IP endpoint, tunnels share the cluster's pooled connections, many
//! streams on one connection, as Envoy's HTTP pool and ztunnel's HBONE pool carry them
//! ([`open_pooled`]); over HTTP/1.1, or to an internal listener (whose connection carries
//! this connection's filter state across), each tunnel has its own upstream connection.

use std::fmt;

use http::uri::Authority;
use http::{Request, Uri};
use http_body_util::Empty;
use hyper::upgrade::Upgraded;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::either::Either;

use std::sync::Arc;

use crate::config::listener::tcp_proxy::Tunneling;
use crate::lb::Host;
use crate::proxy::clusters::ThreadLocalCluster;
use crate::proxy::exec::LocalExec;
use crate::proxy::filter_chain::ConnectionInfo;
use crate::proxy::router::{DownstreamInfo, add_headers, substitute};
use crate::proxy::stream_info::FilterState;
use crate::proxy::upstream::{RequestBody, TunnelLease, UpstreamError, Upstreams};
use crate::tls::ClientTls;
use crate::tls::PrefixedStream;

/// Why a tunnel did not open.
#[derive(Debug)]
pub enum TunnelError {
    /// The hostname (after substitution) is no authority.
    Authority(String),
    /// The HTTP handshake or the `CONNECT` failed.
    Http(hyper::Error),
    /// The upstream answered the `CONNECT` with this status.
    Refused(http::StatusCode),
    /// The HTTP/1.1 answer did not parse, or its head was too long.
    Malformed,
    Io(std::io::Error),
}

impl fmt::Display for TunnelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Authority(hostname) => write!(f, "tunnel hostname {hostname:?} is not an authority"),
            Self::Http(error) => write!(f, "tunnel: {error}"),
            Self::Refused(status) => write!(f, "the upstream answered the CONNECT with {status}"),
            Self::Malformed => f.write_str("the upstream's answer to the CONNECT is not HTTP/1.1"),
            Self::Io(error) => write!(f, "tunnel: {error}"),
        }
    }
}

/// The downstream connection's addresses, for the hostname's and headers' commands.
fn downstream(info: &ConnectionInfo) -> DownstreamInfo {
    DownstreamInfo { remote: Some(info.peer), local: Some(info.local), protocol: "" }
}

/// The most an HTTP/1.1 `CONNECT`'s answer head may take (Envoy's default header limit).
const MAX_RESPONSE_HEAD: usize = 60 * 1024;

/// A tunnel opened: an HTTP/2 stream, or the HTTP/1.1 connection itself after its answer
/// (with any bytes read past the answer's head first).
pub type Tunnel<IO> = Either<TokioIo<Upgraded>, PrefixedStream<IO>>;

/// The `CONNECT` for this connection: the hostname's and headers' commands filled in.
fn connect_request<B: Default>(tunneling: &Tunneling, info: &ConnectionInfo) -> Result<Request<B>, TunnelError> {
    let downstream = downstream(info);
    let state = info.stream.as_deref().map(|s| &s.filter_state);
    let hostname = substitute(&filter_state_values(&tunneling.hostname, state), &downstream, None);
    let authority: Authority = hostname.parse().map_err(|_| TunnelError::Authority(hostname.clone()))?;
    let mut request =
        Request::connect(Uri::from(authority)).body(B::default()).map_err(|e| TunnelError::Authority(e.to_string()))?;
    if tunneling.headers_to_add.iter().any(|h| h.value.contains(FILTER_STATE)) {
        let mut headers = tunneling.headers_to_add.clone();
        for header in &mut headers {
            header.value = filter_state_values(&header.value, state).into_owned();
        }
        add_headers(request.headers_mut(), &headers, &downstream);
    } else {
        add_headers(request.headers_mut(), &tunneling.headers_to_add, &downstream);
    }
    Ok(request)
}

const FILTER_STATE: &str = "%FILTER_STATE(";

/// `text` with each `%FILTER_STATE(key:PLAIN)%` (the one form conversion admits in a
/// tunnel) replaced by the connection's object at `key`, or nothing when it has none, as
/// Envoy's formatter leaves a missing value in a header.
fn filter_state_values<'a>(text: &'a str, state: Option<&FilterState>) -> std::borrow::Cow<'a, str> {
    if !text.contains(FILTER_STATE) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(FILTER_STATE) {
        let after = &rest[start + FILTER_STATE.len()..];
        let Some(end) = after.find(":PLAIN)%") else { break };
        out.push_str(&rest[..start]);
        out.push_str(state.and_then(|s| s.get(&after[..end])).unwrap_or_default());
        rest = &after[end + ":PLAIN)%".len()..];
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// Why a pooled tunnel did not open: no connection to the host (another host may be
/// tried), or the tunnel itself failed.
#[derive(Debug)]
pub enum PooledTunnelError {
    Connect(UpstreamError),
    Tunnel(TunnelError),
}

/// Opens a tunnel as a stream of one of `cluster`'s pooled HTTP/2 connections to `host`.
pub async fn open_pooled(
    cluster: &ThreadLocalCluster,
    upstreams: &Upstreams,
    host: &Host,
    tls: Option<Arc<ClientTls>>,
    tunneling: &Tunneling,
    info: &ConnectionInfo,
) -> Result<(TokioIo<Upgraded>, TunnelLease), PooledTunnelError> {
    let request = connect_request::<RequestBody>(tunneling, info).map_err(PooledTunnelError::Tunnel)?;
    let (response, lease) =
        cluster.open_connect(upstreams, host, request, tls).await.map_err(PooledTunnelError::Connect)?;
    if !response.status().is_success() {
        return Err(PooledTunnelError::Tunnel(TunnelError::Refused(response.status())));
    }
    let upgraded = hyper::upgrade::on(response).await.map_err(|e| PooledTunnelError::Tunnel(TunnelError::Http(e)))?;
    Ok((TokioIo::new(upgraded), lease))
}

/// Opens a tunnel on `io`, an upstream connection just made: the `CONNECT`, its answer,
/// and the stream the bytes then go through.
pub async fn open<IO>(
    io: IO,
    tunneling: &Tunneling,
    http2: bool,
    info: &ConnectionInfo,
) -> Result<Tunnel<IO>, TunnelError>
where
    IO: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let request = connect_request::<Empty<bytes::Bytes>>(tunneling, info)?;
    if http2 {
        open_http2(io, request).await.map(Either::Left)
    } else {
        open_http1(io, request).await.map(Either::Right)
    }
}

async fn open_http2<IO>(io: IO, request: Request<Empty<bytes::Bytes>>) -> Result<TokioIo<Upgraded>, TunnelError>
where
    IO: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(LocalExec)
        .timer(TokioTimer::new())
        .handshake(TokioIo::new(io))
        .await
        .map_err(TunnelError::Http)?;
    tokio::task::spawn_local(connection);
    let response = sender.send_request(request).await.map_err(TunnelError::Http)?;
    if !response.status().is_success() {
        return Err(TunnelError::Refused(response.status()));
    }
    hyper::upgrade::on(response).await.map(TokioIo::new).map_err(TunnelError::Http)
}

/// HTTP/1.1's `CONNECT`, written and read here: hyper's client hands an upgraded HTTP/1.1
/// connection over only when it can move between threads, and the TCP proxy's upstream
/// counts its activity on the worker's thread.
async fn open_http1<IO, B>(mut io: IO, request: Request<B>) -> Result<PrefixedStream<IO>, TunnelError>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let authority = request.uri().authority().map_or("", |a| a.as_str());
    let mut head = format!("CONNECT {authority} HTTP/1.1\r\nhost: {authority}\r\n").into_bytes();
    for (name, value) in request.headers() {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    io.write_all(&head).await.map_err(TunnelError::Io)?;
    let mut read = Vec::new();
    loop {
        let mut parsed = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut parsed);
        match response.parse(&read) {
            Ok(httparse::Status::Complete(length)) => {
                let status = response.code.and_then(|c| http::StatusCode::from_u16(c).ok());
                return match status {
                    Some(status) if status.is_success() => Ok(PrefixedStream::new(read.split_off(length), io)),
                    Some(status) => Err(TunnelError::Refused(status)),
                    None => Err(TunnelError::Malformed),
                };
            }
            Ok(httparse::Status::Partial) if read.len() < MAX_RESPONSE_HEAD => {}
            _ => return Err(TunnelError::Malformed),
        }
        let before = read.len();
        read.reserve(4096);
        if io.read_buf(&mut read).await.map_err(TunnelError::Io)? == 0 || read.len() == before {
            return Err(TunnelError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::stream_info::SharedWithUpstream;

    #[test]
    fn a_filter_state_object_names_the_tunnels_target() {
        let mut state = FilterState::default();
        state.set("istio.double_hbone.hbone_target_address".into(), "10.0.0.9:15008".into(), SharedWithUpstream::None);
        let text = "%FILTER_STATE(istio.double_hbone.hbone_target_address:PLAIN)%";
        assert_eq!(filter_state_values(text, Some(&state)), "10.0.0.9:15008");
        assert_eq!(filter_state_values(&format!("via {text}!"), None), "via !", "missing is empty");
        assert_eq!(filter_state_values("%DOWNSTREAM_LOCAL_ADDRESS%", Some(&state)), "%DOWNSTREAM_LOCAL_ADDRESS%");
    }
}
