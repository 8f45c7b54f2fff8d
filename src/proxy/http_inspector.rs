//! The HTTP inspector listener filter (`envoy.filters.listener.http_inspector`): before a
//! filter chain is chosen, peek at a plaintext connection's first bytes and tell HTTP/2
//! with prior knowledge (`h2c`, by its connection preface) from HTTP/1.x (`http/1.1` or
//! `http/1.0`, by a well-formed request line), so that chains matching on
//! `application_protocols` can be chosen — Istio's PERMISSIVE inbound chains for
//! plaintext HTTP are matched this way. Bytes that are neither leave the protocols empty.
//! As Envoy, it does nothing on a connection the TLS inspector found to be TLS, and the
//! bytes it read are replayed to whatever serves the connection.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Envoy's limit on what the inspector reads.
const MAX_INSPECT: usize = 64 * 1024;
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the first bytes say, or that more are needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parse {
    Protocol(Option<&'static str>),
    NeedMore,
}

/// Reads from `stream` into `buffer` (which may already hold bytes) until the protocol is
/// known: `Some("h2c" | "http/1.1" | "http/1.0")`, or `None` for anything else. A
/// connection that closes first is an error (it closes, as in Envoy).
pub async fn inspect<S: AsyncRead + Unpin>(stream: &mut S, buffer: &mut Vec<u8>) -> io::Result<Option<&'static str>> {
    loop {
        if let Parse::Protocol(protocol) = parse(buffer) {
            return Ok(protocol);
        }
        if buffer.len() >= MAX_INSPECT {
            return Ok(None);
        }
        buffer.reserve(4096.min(MAX_INSPECT - buffer.len()));
        if stream.read_buf(buffer).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before its first request line",
            ));
        }
    }
}

fn parse(bytes: &[u8]) -> Parse {
    if bytes.is_empty() {
        return Parse::NeedMore;
    }
    let preface_len = bytes.len().min(H2_PREFACE.len());
    if bytes[..preface_len] == H2_PREFACE[..preface_len] {
        return if preface_len == H2_PREFACE.len() { Parse::Protocol(Some("h2c")) } else { Parse::NeedMore };
    }
    let Some(end) = bytes.windows(2).position(|w| w == b"\r\n") else {
        // A request line is a method token first: anything else is not HTTP/1.
        let plausible = bytes.iter().take_while(|b| **b != b' ').all(|b| is_token(*b));
        return if plausible { Parse::NeedMore } else { Parse::Protocol(None) };
    };
    Parse::Protocol(request_line_version(&bytes[..end]))
}

/// `METHOD SP request-target SP HTTP/1.x`: the protocol by its version.
fn request_line_version(line: &[u8]) -> Option<&'static str> {
    let mut parts = line.split(|b| *b == b' ');
    let method = parts.next()?;
    let target = parts.next()?;
    let version = parts.next()?;
    if parts.next().is_some() || method.is_empty() || !method.iter().all(|b| is_token(*b)) {
        return None;
    }
    if target.is_empty() || target.iter().any(|b| b.is_ascii_control()) {
        return None;
    }
    match version {
        b"HTTP/1.1" => Some("http/1.1"),
        b"HTTP/1.0" => Some("http/1.0"),
        _ => None,
    }
}

/// RFC 9110 `tchar`.
fn is_token(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_http_versions_and_h2c_apart() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\nhost: a\r\n"), Parse::Protocol(Some("http/1.1")));
        assert_eq!(parse(b"POST /x?y HTTP/1.0\r\n"), Parse::Protocol(Some("http/1.0")));
        assert_eq!(parse(H2_PREFACE), Parse::Protocol(Some("h2c")));
        assert_eq!(parse(&H2_PREFACE[..10]), Parse::NeedMore);
        assert_eq!(parse(b"GET / HT"), Parse::NeedMore);
        assert_eq!(parse(b"GET / HTTP/2.0\r\n"), Parse::Protocol(None));
        assert_eq!(parse(b"\x16\x03\x01"), Parse::Protocol(None));
        assert_eq!(parse(b"SSH-2.0-OpenSSH\r\n"), Parse::Protocol(None));
        assert_eq!(parse(b"hello world\r\n"), Parse::Protocol(None));
    }
}
