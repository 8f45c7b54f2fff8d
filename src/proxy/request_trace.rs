//! The span of one proxied request: started when the connection manager has handled the
//! request's headers (so a generated `x-request-id` is recorded), carried to the
//! upstream as `traceparent`, and ended with the response. Attribute names are Envoy's
//! (`upstream_cluster`, `upstream_address`, `response_flags`, `http.status_code`, …) plus
//! Outrider's `outrider.lb_policy` and `outrider.retries`.

use http::request::Parts;

use crate::config::cluster::{Cluster, LbPolicy};
use crate::telemetry::{KeyValue, RequestSpan, Tracing};

/// Starts the request's span, named `<authority><path>` as Envoy names it by default.
pub fn start(tracing: &Tracing, parts: &Parts) -> RequestSpan {
    let authority = parts
        .uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| parts.headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).map(str::to_owned));
    let path = parts.uri.path();
    let name = format!("{}{path}", authority.as_deref().unwrap_or(""));
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let protocol = match parts.version {
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_10 => "HTTP/1.0",
        _ => "HTTP/1.1",
    };
    let attributes = vec![
        KeyValue::new("component", "proxy"),
        KeyValue::new("http.method", parts.method.to_string()),
        KeyValue::new("http.url", parts.uri.to_string()),
        KeyValue::new("http.protocol", protocol),
        KeyValue::new("guid:x-request-id", header("x-request-id")),
        KeyValue::new("user_agent", header("user-agent")),
    ];
    tracing.start(name, &parts.headers, attributes)
}

/// Whether the request gets a span: always when it carries a `traceparent` (the parent's
/// sampled flag then decides whether the span is recorded, and the context propagates
/// either way); otherwise with probability `percent` (`tracing.random_sampling`).
pub fn sampled(percent: f64, parts: &Parts, random: impl FnOnce() -> u32) -> bool {
    if percent >= 100.0 || parts.headers.contains_key("traceparent") {
        return true;
    }
    // In units of 0.01 %, as Envoy's fractional percent.
    f64::from(random() % 10_000) < percent * 100.0
}

/// The cluster's balancing policy, by Envoy's name.
pub fn policy(cluster: &Cluster) -> &'static str {
    match cluster.load_balancing.as_ref().map(|lb| &lb.policy) {
        None | Some(LbPolicy::RoundRobin(_)) => "ROUND_ROBIN",
        Some(LbPolicy::LeastRequest(_)) => "LEAST_REQUEST",
        Some(LbPolicy::Random) => "RANDOM",
        Some(LbPolicy::RingHash(_)) => "RING_HASH",
        Some(LbPolicy::Maglev(_)) => "MAGLEV",
        Some(LbPolicy::ClientSideWeightedRoundRobin(_)) => "client_side_weighted_round_robin",
        Some(LbPolicy::PeakEwma(_)) => "peak_ewma",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_sampling_applies_to_requests_without_a_trace() {
        let (plain, ()) = http::Request::get("/").body(()).unwrap_or_default().into_parts();
        let traced = http::Request::get("/")
            .header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
            .body(())
            .unwrap_or_default();
        let (traced, ()) = traced.into_parts();
        assert!(sampled(100.0, &plain, || 9_999));
        assert!(!sampled(0.0, &plain, || 0));
        assert!(sampled(1.0, &plain, || 99), "1 % is 100 in 10 000");
        assert!(!sampled(1.0, &plain, || 100));
        assert!(sampled(0.0, &traced, || 0), "a caller's trace always continues");
    }
}
