//! Which mirrors (`request_mirror_policies`) a forwarded request gets, and the request
//! head each shadow carries, as Envoy's router and shadow writer build them: a copy of the
//! upstream request head after the route's changes (header mutations, rewrites, timeout
//! headers), its `:authority` given `-shadow`, marked internal, and the proxy's address
//! appended to `x-forwarded-for` (Envoy's async client does both).
//!
//! Pure: the caller sends the shadows (see [`crate::proxy::shadow`]).

use std::net::IpAddr;

use http::request::Parts;
use http::{HeaderValue, Method, Uri};

use super::Forward;
use crate::config::route::{MirrorCluster, RequestMirrorPolicy};

/// One shadow to send: its cluster and request head.
#[derive(Debug)]
pub struct Shadow {
    pub cluster: String,
    pub head: Parts,
}

/// The shadows of a request whose upstream head is `upstream`. `random` is drawn once per
/// request and decides every policy's fraction, as Envoy uses the stream's one random
/// value for all of them. `local` is what the proxy appends to `x-forwarded-for`;
/// `traced`: the proxy injected its own trace context into `upstream`.
pub fn shadows(forward: &Forward<'_>, upstream: &Parts, random: u64, local: IpAddr, traced: bool) -> Vec<Shadow> {
    // Envoy never mirrors CONNECT.
    if upstream.method == Method::CONNECT {
        return Vec::new();
    }
    forward
        .action
        .request_mirror_policies
        .iter()
        .filter(|policy| policy.fraction.includes(random))
        .filter_map(|policy| {
            let cluster = shadow_cluster(policy, upstream)?;
            Some(Shadow { cluster, head: shadow_head(policy, upstream, local, traced) })
        })
        .collect()
}

/// `cluster`, or the first value of `cluster_header` (no shadow when missing or empty).
fn shadow_cluster(policy: &RequestMirrorPolicy, upstream: &Parts) -> Option<String> {
    match &policy.cluster {
        MirrorCluster::Cluster(name) => Some(name.clone()),
        MirrorCluster::Header(name) => {
            let value = upstream.headers.get(name.as_str())?.to_str().ok()?;
            (!value.is_empty()).then(|| value.to_owned())
        }
    }
}

fn shadow_head(policy: &RequestMirrorPolicy, upstream: &Parts, local: IpAddr, traced: bool) -> Parts {
    let mut head = upstream.clone();
    set_host(&mut head, |host| policy.host.apply(host));
    let headers = &mut head.headers;
    headers.insert("x-envoy-internal", HeaderValue::from_static("true"));
    let forwarded = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(existing) if !existing.is_empty() => format!("{existing},{local}"),
        _ => local.to_string(),
    };
    if let Ok(value) = HeaderValue::from_str(&forwarded) {
        headers.insert("x-forwarded-for", value);
    }
    if traced && let Some(sampled) = policy.trace_sampled {
        set_trace_sampled(headers, sampled);
    }
    head
}

/// Replaces the host the request names: the URI's authority (HTTP/2 `:authority`) when it
/// has one, and the `Host` header when present.
fn set_host(head: &mut Parts, new: impl Fn(&str) -> String) {
    if let Some(authority) = head.uri.authority() {
        let host = new(authority.as_str());
        let mut uri = head.uri.clone().into_parts();
        uri.authority = host.parse().ok().or(uri.authority);
        if let Ok(rebuilt) = Uri::from_parts(uri) {
            head.uri = rebuilt;
        }
    }
    let header = head.headers.get(http::header::HOST).and_then(|v| v.to_str().ok()).map(&new);
    if let Some(value) = header.and_then(|h| HeaderValue::from_str(&h).ok()) {
        head.headers.insert(http::header::HOST, value);
    }
}

/// `trace_sampled`: the sampled flag of the W3C `traceparent` the proxy injected
/// (`00-<trace id>-<span id>-<flags>`); the shadow keeps the request's span as its parent.
fn set_trace_sampled(headers: &mut http::HeaderMap, sampled: bool) {
    let Some(parent) = headers.get("traceparent").and_then(|v| v.to_str().ok()) else { return };
    let Some((rest, flags)) = parent.rsplit_once('-') else { return };
    let Ok(flags) = u8::from_str_radix(flags, 16) else { return };
    let flags = if sampled { flags | 1 } else { flags & !1 };
    if let Ok(value) = HeaderValue::from_str(&format!("{rest}-{flags:02x}")) {
        headers.insert("traceparent", value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_flags_follow_trace_sampled() {
        let mut headers = http::HeaderMap::new();
        headers
            .insert("traceparent", HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        set_trace_sampled(&mut headers, false);
        assert_eq!(headers["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        set_trace_sampled(&mut headers, true);
        assert_eq!(headers["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    }

    #[test]
    fn host_header_and_authority_get_the_suffix() {
        let policy = |host| RequestMirrorPolicy {
            cluster: MirrorCluster::Cluster("m".into()),
            fraction: crate::config::filters::fractional_percent::FractionalPercent::ALL,
            trace_sampled: None,
            host,
        };
        let local: IpAddr = "10.0.0.9".parse().unwrap();
        let (h1, ()) = http::Request::get("/a").header("host", "svc:8080").body(()).unwrap().into_parts();
        let head = shadow_head(&policy(crate::config::route::ShadowHost::Suffixed), &h1, local, false);
        assert_eq!(head.headers["host"], "svc-shadow:8080");
        assert_eq!(head.headers["x-envoy-internal"], "true");
        assert_eq!(head.headers["x-forwarded-for"], "10.0.0.9");
        let (h2, ()) =
            http::Request::get("http://svc/a").header("x-forwarded-for", "1.2.3.4").body(()).unwrap().into_parts();
        let head = shadow_head(&policy(crate::config::route::ShadowHost::Suffixed), &h2, local, false);
        assert_eq!(head.uri, "http://svc-shadow/a");
        assert_eq!(head.headers["x-forwarded-for"], "1.2.3.4,10.0.0.9");
    }
}
