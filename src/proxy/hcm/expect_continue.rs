//! `expect: 100-continue`, as Envoy handles it with `proxy_100_continue` false (its
//! default): the client's `100 Continue` comes from here, and the upstream never sees the
//! expectation. With `proxy_100_continue` true (Istio's setting) the expectation goes on to
//! the upstream; the client's 100 still comes from the codec when the body is first read,
//! not relayed from the upstream (its 1xx is read and dropped by the upstream codec). The codec (hyper) writes the `100 Continue` when the body is first
//! read, that is when the request is forwarded; a request answered without reading its
//! body gets its final response only, which a client waiting for 100 takes as well.

use http::HeaderMap;
use http::header::EXPECT;

/// Removes `expect: 100-continue` (any case) from the request's headers; other
/// expectations pass on, as in Envoy.
pub(super) fn strip(headers: &mut HeaderMap) {
    if headers.get(EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue")) {
        headers.remove(EXPECT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_100_continue_is_removed() {
        let mut headers = HeaderMap::new();
        headers.insert(EXPECT, "100-Continue".parse().unwrap());
        strip(&mut headers);
        assert!(headers.get(EXPECT).is_none());
        headers.insert(EXPECT, "something-else".parse().unwrap());
        strip(&mut headers);
        assert_eq!(headers[EXPECT], "something-else");
    }
}
