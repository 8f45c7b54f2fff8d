//! Shaping a request for the protocol it is sent with: HTTP/1.1 wants origin-form and a
//! `Host` header, HTTP/2 wants `:scheme` and `:authority` (absolute URI) and no `Host`.

use http::header::HOST;
use http::uri::{Authority, PathAndQuery, Scheme, Uri};
use http::{HeaderValue, Request, Version};

use super::error::UpstreamError;
use crate::config::Address;

/// The request as HTTP/1.1 to `address`.
pub(crate) fn http1<B>(request: Request<B>, address: &Address) -> Result<Request<B>, UpstreamError> {
    let (mut parts, body) = request.into_parts();
    let authority = authority(&parts.uri, &parts.headers, address)?;
    if !parts.headers.contains_key(HOST) {
        let value = HeaderValue::from_str(authority.as_str()).map_err(invalid)?;
        parts.headers.insert(HOST, value);
    }
    parts.uri = Uri::from(path_and_query(&parts.uri));
    parts.version = Version::HTTP_11;
    Ok(Request::from_parts(parts, body))
}

/// The request as HTTP/2 to `address`.
pub(crate) fn http2<B>(request: Request<B>, address: &Address) -> Result<Request<B>, UpstreamError> {
    let (mut parts, body) = request.into_parts();
    let authority = authority(&parts.uri, &parts.headers, address)?;
    let scheme = parts.uri.scheme().cloned().unwrap_or(Scheme::HTTP);
    parts.uri = Uri::builder()
        .scheme(scheme)
        .authority(authority)
        .path_and_query(path_and_query(&parts.uri))
        .build()
        .map_err(invalid)?;
    parts.headers.remove(HOST);
    parts.version = Version::HTTP_2;
    Ok(Request::from_parts(parts, body))
}

/// The URI's authority, else the `Host` header, else the endpoint's address.
fn authority(uri: &Uri, headers: &http::HeaderMap, address: &Address) -> Result<Authority, UpstreamError> {
    if let Some(authority) = uri.authority() {
        return Ok(authority.clone());
    }
    if let Some(host) = headers.get(HOST) {
        return Authority::try_from(host.as_bytes()).map_err(invalid);
    }
    match address {
        Address::Pipe(_) => Ok(Authority::from_static("localhost")),
        Address::Internal { server_listener_name, .. } => {
            Ok(Authority::try_from(server_listener_name.as_str()).unwrap_or(Authority::from_static("localhost")))
        }
        other => Authority::try_from(other.to_string()).map_err(invalid),
    }
}

fn path_and_query(uri: &Uri) -> PathAndQuery {
    uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"))
}

fn invalid(error: impl std::fmt::Display) -> UpstreamError {
    UpstreamError::InvalidRequest(error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address() -> Address {
        Address::Socket("10.0.0.1:8080".parse().unwrap())
    }

    #[test]
    fn http1_is_origin_form_with_host() {
        let request = Request::get("http://svc.ns:80/a?b=1").body(()).unwrap();
        let request = http1(request, &address()).unwrap();
        assert_eq!(request.uri(), "/a?b=1");
        assert_eq!(request.headers()[HOST], "svc.ns:80");
        let bare = http1(Request::get("/x").body(()).unwrap(), &address()).unwrap();
        assert_eq!(bare.headers()[HOST], "10.0.0.1:8080");
    }

    #[test]
    fn http2_is_absolute_without_host() {
        let request = Request::get("/a").header(HOST, "svc.ns").body(()).unwrap();
        let request = http2(request, &address()).unwrap();
        assert_eq!(request.uri(), "http://svc.ns/a");
        assert!(request.headers().get(HOST).is_none());
        assert_eq!(request.version(), Version::HTTP_2);
    }
}
