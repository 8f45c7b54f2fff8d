//! The request's one authority. Routing, every filter, the access log and the upstream
//! request all read the authority from the URI (HTTP/2 `:authority`, an HTTP/1 absolute
//! target) or else from `Host`; here both are made to say the same thing, as Envoy has a
//! single `:authority`/`Host` header:
//! - an HTTP/1 absolute-form target replaces the client's `Host` (RFC 9112 §3.2.2, Envoy's
//!   HTTP/1 codec);
//! - over HTTP/2 a literal `host` beside `:authority` is dropped (`:authority` wins);
//! - then `strip_trailing_host_dot` and `strip_matching_host_port` / `strip_any_host_port`
//!   apply, as Envoy's `maybeNormalizeHost` (after path normalization, before the
//!   request headers are mutated).

use http::HeaderValue;
use http::header::HOST;
use http::request::Parts;
use http::uri::{Authority, Uri};

use crate::config::listener::http_connection_manager::{HttpConnectionManager, StripPort};

/// The authority is not one a request may carry once normalized: answered 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidAuthority;

/// Settles the request's authority; `listener_port` is the port the connection was
/// accepted on (its original destination when restored), which `strip_matching_host_port`
/// compares with.
pub fn normalize(hcm: &HttpConnectionManager, parts: &mut Parts, listener_port: u16) -> Result<(), InvalidAuthority> {
    let from_uri = parts.uri.authority().map(|a| a.as_str().to_owned());
    let lines = parts.headers.get_all(HOST).iter().count();
    let original = match &from_uri {
        Some(authority) => authority.clone(),
        None if lines == 0 => return Ok(()),
        // Repeated `Host` lines are one value to Envoy, joined with `,`: what the filters
        // match and what the upstream gets, as one line.
        None => {
            let values: Result<Vec<&str>, _> = parts.headers.get_all(HOST).iter().map(|v| v.to_str()).collect();
            values.map_err(|_| InvalidAuthority)?.join(",")
        }
    };
    let mut host = original.clone();
    // An HTTP/1 absolute-form target's userinfo (`http://user@host/`) is no part of the
    // host: Envoy's codec takes the target's host and port only.
    if from_uri.is_some()
        && parts.version < http::Version::HTTP_2
        && let Some((_, after)) = host.rsplit_once('@')
    {
        host = after.to_owned();
    }
    if hcm.strip_trailing_host_dot {
        strip_trailing_host_dot(&mut host);
    }
    // A CONNECT's authority is where the tunnel goes: Envoy keeps its port for the
    // upstream (`OriginalConnectPort`), so it is not stripped here.
    let connect = parts.method == http::Method::CONNECT;
    match hcm.strip_port {
        _ if connect => {}
        StripPort::None => {}
        StripPort::Any => strip_port(&mut host, None),
        StripPort::Matching => strip_port(&mut host, Some(listener_port)),
    }
    if from_uri.is_some() && host != original {
        let mut uri = std::mem::take(&mut parts.uri).into_parts();
        uri.authority = Some(Authority::try_from(host.as_str()).map_err(|_| InvalidAuthority)?);
        parts.uri = Uri::from_parts(uri).map_err(|_| InvalidAuthority)?;
    }
    // `Host` always says what the URI says: one value, never the client's other one.
    if from_uri.is_some() || host != original || lines > 1 {
        let value = HeaderValue::from_str(&host).map_err(|_| InvalidAuthority)?;
        parts.headers.insert(HOST, value);
    }
    Ok(())
}

/// Envoy's `stripTrailingHostDot`: `example.com.` and `example.com.:80` lose the dot.
fn strip_trailing_host_dot(host: &mut String) {
    let Some(dot) = host.rfind('.') else { return };
    if dot + 1 == host.len() {
        host.truncate(dot);
        return;
    }
    if let Some(colon) = host.rfind(':')
        && dot + 1 == colon
    {
        host.remove(dot);
    }
}

/// Envoy's `stripPortFromHost`: a numeric port after the last `:` (outside an IPv6
/// literal's brackets) is removed; with `only` set, only when it is that port.
fn strip_port(host: &mut String, only: Option<u16>) {
    let Some(colon) = port_start(host) else { return };
    // Envoy parses the port as a 32-bit number: anything else stays untouched.
    let Ok(port) = host[colon + 1..].parse::<u32>() else { return };
    if only.is_some_and(|listener| u32::from(listener) != port) {
        return;
    }
    host.truncate(colon);
}

/// Where the port of `host` starts (its `:`), if it has one.
fn port_start(host: &str) -> Option<usize> {
    let colon = host.rfind(':')?;
    match host.rfind(']') {
        Some(bracket) if bracket > colon => None,
        _ => Some(colon),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::headers::tests::hcm;

    fn run(config: &HttpConnectionManager, request: http::Request<()>, port: u16) -> Parts {
        let mut parts = request.into_parts().0;
        normalize(config, &mut parts, port).unwrap();
        parts
    }

    fn host(parts: &Parts) -> &str {
        parts.headers[HOST].to_str().unwrap()
    }

    #[test]
    fn absolute_form_and_h2_authority_replace_host() {
        let request = http::Request::get("http://public.example/x").header("host", "admin.example").body(()).unwrap();
        let parts = run(&hcm(), request, 80);
        assert_eq!(host(&parts), "public.example");
        assert_eq!(parts.uri.authority().unwrap(), "public.example");
        let parts = run(&hcm(), http::Request::get("http://user:pw@public.example:8080/x").body(()).unwrap(), 80);
        assert_eq!(
            (host(&parts), parts.uri.authority().unwrap().as_str()),
            ("public.example:8080", "public.example:8080")
        );
        let origin = http::Request::get("/x").header("host", "admin.example.:80").body(()).unwrap();
        assert_eq!(host(&run(&hcm(), origin, 80)), "admin.example.:80", "nothing configured: untouched");
        let twice = http::Request::get("/x").header("host", "a.example").header("host", "b.example").body(()).unwrap();
        let parts = run(&hcm(), twice, 80);
        assert_eq!(parts.headers.get_all(HOST).iter().count(), 1);
        assert_eq!(host(&parts), "a.example,b.example", "one line, as Envoy's header map holds it");
    }

    #[test]
    fn trailing_dot_and_ports() {
        let mut config = hcm();
        config.strip_trailing_host_dot = true;
        config.strip_port = StripPort::Any;
        for (given, expected) in [
            ("admin.example.", "admin.example"),
            ("admin.example:80", "admin.example"),
            ("admin.example.:8080", "admin.example"),
            ("[::1]:80", "[::1]"),
            ("[::1]", "[::1]"),
            ("a.example:x", "a.example:x"),
        ] {
            let request = http::Request::get("/").header("host", given).body(()).unwrap();
            assert_eq!(host(&run(&config, request, 80)), expected, "{given}");
        }
        config.strip_trailing_host_dot = false;
        config.strip_port = StripPort::Matching;
        let request = http::Request::get("http://a.example:8080/").body(()).unwrap();
        let parts = run(&config, request, 80);
        assert_eq!((host(&parts), parts.uri.authority().unwrap().as_str()), ("a.example:8080", "a.example:8080"));
        let request = http::Request::get("http://a.example:80/").body(()).unwrap();
        let parts = run(&config, request, 80);
        assert_eq!((host(&parts), parts.uri.authority().unwrap().as_str()), ("a.example", "a.example"));
    }
}
