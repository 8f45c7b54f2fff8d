//! Headers an HTTP/1 request nominates in `Connection` (RFC 9110 §7.6.1): they are for this
//! hop only and never reach the upstream. As Envoy's HTTP/1 codec sanitizes them
//! (`Utility::sanitizeConnectionHeader`, for every request but an upgrade):
//! - `close`, `keep-alive`, `upgrade` and `http2-settings` are connection options, not
//!   headers, and stay;
//! - a nominated header is removed, and its name taken out of `Connection`, except `te`
//!   when it lists `trailers` (then `te: trailers` is kept) and `connection` itself;
//! - nominating `x-forwarded-for`, `x-forwarded-host`, `x-forwarded-proto` or a pseudo
//!   header, ten names or more, or a `te` of 256 bytes or more, is refused: a client could
//!   otherwise have the proxy drop what says who it is.

use http::header::{CONNECTION, TE};
use http::{HeaderMap, HeaderName, HeaderValue};

/// Envoy refuses a `Connection` header with this many names or more.
const MAX_NOMINATED: usize = 10;
/// Envoy refuses a nominated `te` this long or longer.
const MAX_TE_LEN: usize = 256;

/// The request's `Connection` header nominates what may not be removed: answered 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidNomination;

/// Removes the headers `Connection` nominates, as above. Allocates nothing for the usual
/// `Connection: keep-alive` / `close` / `upgrade`, which name no header.
pub fn sanitize_nominated(headers: &mut HeaderMap) -> Result<(), InvalidNomination> {
    // Repeated lines are one list, as Envoy joins them.
    let mut count = 0;
    let mut nominates = false;
    for token in tokens(headers) {
        count += 1;
        nominates |= !is_option(token);
    }
    if count >= MAX_NOMINATED {
        return Err(InvalidNomination);
    }
    if !nominates {
        return Ok(());
    }
    let listed: Vec<String> = tokens(headers).map(str::to_ascii_lowercase).collect();
    let mut removed: Vec<&str> = Vec::new();
    for token in &listed {
        match token.as_str() {
            _ if is_option(token) => continue,
            // Self-nominated: the name goes from the list, the header stays.
            "connection" => {
                removed.push(token);
                continue;
            }
            "x-forwarded-for" | "x-forwarded-host" | "x-forwarded-proto" => return Err(InvalidNomination),
            _ if token.starts_with(':') => return Err(InvalidNomination),
            _ => {}
        }
        let Ok(name) = HeaderName::from_bytes(token.as_bytes()) else {
            // Not a header name: nothing of that name can be present.
            removed.push(token);
            continue;
        };
        if name == TE
            && let Some(te) = headers.get(TE)
        {
            if te.len() >= MAX_TE_LEN {
                return Err(InvalidNomination);
            }
            let trailers =
                String::from_utf8_lossy(te.as_bytes()).split(',').any(|t| t.trim().eq_ignore_ascii_case("trailers"));
            if trailers {
                headers.insert(TE, HeaderValue::from_static("trailers"));
                continue;
            }
        }
        headers.remove(&name);
        removed.push(token);
    }
    if !removed.is_empty() {
        let kept: Vec<&str> = listed.iter().map(String::as_str).filter(|t| !removed.contains(t)).collect();
        if kept.is_empty() {
            headers.remove(CONNECTION);
        } else if let Ok(value) = HeaderValue::from_str(&kept.join(",")) {
            headers.insert(CONNECTION, value);
        }
    }
    Ok(())
}

/// The non-empty, trimmed tokens of every `Connection` line (a line that is not text
/// names nothing Envoy would remove).
fn tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// A connection option, not a header name.
fn is_option(token: &str) -> bool {
    ["close", "keep-alive", "upgrade", "http2-settings"].iter().any(|o| token.eq_ignore_ascii_case(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(list: &[(&str, &str)]) -> HeaderMap {
        list.iter().map(|(n, v)| (HeaderName::from_bytes(n.as_bytes()).unwrap(), v.parse().unwrap())).collect()
    }

    #[test]
    fn nominated_headers_are_removed_and_the_options_kept() {
        let mut h = headers(&[
            ("connection", "te, mike, sam, will, close"),
            ("te", "gzip, trailers"),
            ("sam", "bar"),
            ("will", "baz"),
            ("x-request-foo", "downstream"),
        ]);
        sanitize_nominated(&mut h).unwrap();
        assert_eq!(h["connection"], "te,close");
        assert_eq!(h["te"], "trailers");
        assert!(!h.contains_key("sam") && !h.contains_key("will"));
        assert_eq!(h["x-request-foo"], "downstream");

        let mut h = headers(&[("connection", "x-secret"), ("x-secret", "v")]);
        sanitize_nominated(&mut h).unwrap();
        assert!(h.is_empty());

        let mut h = headers(&[("connection", "te, close"), ("te", "gzip")]);
        sanitize_nominated(&mut h).unwrap();
        assert!(!h.contains_key("te"));
        assert_eq!(h["connection"], "close");

        let mut h = headers(&[("connection", "connection, keep-alive")]);
        sanitize_nominated(&mut h).unwrap();
        assert_eq!(h["connection"], "keep-alive");
    }

    #[test]
    fn what_says_who_the_client_is_may_not_be_nominated() {
        for list in [
            "x-forwarded-for",
            "close, X-Forwarded-Proto",
            "x-forwarded-host",
            ":authority",
            "a, b, c, d, e, f, g, h, i, j",
        ] {
            let mut h = headers(&[("connection", list), ("x-forwarded-for", "1.2.3.4")]);
            assert_eq!(sanitize_nominated(&mut h), Err(InvalidNomination), "{list}");
        }
        let long = "trailers,".repeat(29);
        let mut h = headers(&[("connection", "te"), ("te", &long)]);
        assert_eq!(sanitize_nominated(&mut h), Err(InvalidNomination));
    }
}
