//! The answer to an HTTP/1 request head the codec refuses, in Envoy's words: its status
//! (chosen as Envoy's codec chooses it) and its body (the reason phrase), then the
//! connection closes. Written by the connection, not by hyper, whose answers have no body.

use http::StatusCode;

/// The status for a head hyper could not take: `431` when it is too large, `501` for a
/// transfer coding other than `chunked`, `426` for an HTTP version other than 1.1 (1.0
/// when `accept_http_10` is off; Envoy's codec answers 426 to `HTTP/1.2` and `HTTP/2.0`
/// request lines too), else `400`. `head` is what was read of it.
pub(in crate::proxy::hcm) fn refusal_status(error: &hyper::Error, head: &[u8], accept_http_10: bool) -> StatusCode {
    if error.is_parse_too_large() {
        return StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    }
    if error.is_parse_unsupported_transfer_encoding() {
        return StatusCode::NOT_IMPLEMENTED;
    }
    match version(head) {
        Some(b"HTTP/1.1") => StatusCode::BAD_REQUEST,
        Some(b"HTTP/1.0") if accept_http_10 => StatusCode::BAD_REQUEST,
        Some(_) => StatusCode::UPGRADE_REQUIRED,
        None => StatusCode::BAD_REQUEST,
    }
}

/// The version of the request line, when it is one of the form `HTTP/<digit>.<digit>`.
fn version(head: &[u8]) -> Option<&[u8]> {
    let line = head.split(|b| *b == b'\n').next()?;
    let token = line.split(|b| b.is_ascii_whitespace()).filter(|t| !t.is_empty()).nth(2)?;
    match token {
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor] if major.is_ascii_digit() && minor.is_ascii_digit() => {
            Some(token)
        }
        _ => None,
    }
}

/// Envoy's local reply for a refused head: the reason phrase as a plain-text body, a
/// `date` as every response of Envoy's has, and `connection: close`.
pub(in crate::proxy::hcm) fn refusal_response(status: StatusCode, server: &str) -> Vec<u8> {
    let reason = status.canonical_reason().unwrap_or("");
    closing_response(status, server, reason)
}

/// A whole HTTP/1.1 response with a plain-text `body`, written on a connection that then
/// closes.
pub(in crate::proxy::hcm) fn closing_response(status: StatusCode, server: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {} {}\r\ncontent-length: {}\r\ncontent-type: text/plain\r\ndate: {}\r\nserver: {server}\r\nconnection: close\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len(),
        httpdate::fmt_http_date(std::time::SystemTime::now()),
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::version;

    #[test]
    fn the_version_is_the_third_token_of_a_well_formed_request_line() {
        assert_eq!(version(b"GET / HTTP/1.0\r\nhost: h\r\n"), Some(&b"HTTP/1.0"[..]));
        assert_eq!(version(b"GET   /a   HTTP/2.0  \r\n"), Some(&b"HTTP/2.0"[..]));
        assert_eq!(version(b"GET / HTXP/1.1\r\n"), None);
        assert_eq!(version(b"GET / HTTP/1.10\r\n"), None);
        assert_eq!(version(b"GET /\r\n"), None);
    }
}
