//! The request's timeouts, as Envoy's router computes them: the route's `timeout` (or, for
//! gRPC with `max_grpc_timeout` / `grpc_timeout_header_max`, the client's `grpc-timeout`
//! capped by it), overridden by `x-envoy-upstream-rq-timeout-ms`, and the per-try timeout
//! (policy or `x-envoy-upstream-rq-per-try-timeout-ms`), dropped when not shorter than
//! the whole. The `x-envoy-*` headers only survive from internal clients: the connection
//! manager strips them from external requests.

use std::time::Duration;

use http::HeaderName;
use http::request::Parts;

use super::Forward;
use super::matching::is_grpc;
use crate::config::route::{MaxStreamDuration, RetryPolicy, RouteAction};

/// The client's (internal clients only) overrides of the route's timeouts.
pub(super) const UPSTREAM_RQ_TIMEOUT_MS: HeaderName = HeaderName::from_static("x-envoy-upstream-rq-timeout-ms");
pub(super) const UPSTREAM_RQ_PER_TRY_TIMEOUT_MS: HeaderName =
    HeaderName::from_static("x-envoy-upstream-rq-per-try-timeout-ms");

pub(super) struct Timeouts {
    pub global: Option<Duration>,
    pub per_try: Option<Duration>,
}

impl Timeouts {
    pub(super) fn of(action: &RouteAction, policy: Option<&RetryPolicy>, parts: &Parts) -> Self {
        let mut global = match action.max_stream_duration.grpc_timeout_header_max {
            Some(max) if is_grpc(parts) => grpc_timeout(action, max, parts),
            _ => action.timeout,
        };
        let mut per_try = policy.and_then(|p| p.per_try_timeout);
        if crate::proxy::headers::has_envoy_header(&parts.headers) {
            if let Some(ms) = header_ms(parts, UPSTREAM_RQ_TIMEOUT_MS) {
                global = nonzero(ms);
            }
            if let Some(ms) = header_ms(parts, UPSTREAM_RQ_PER_TRY_TIMEOUT_MS) {
                per_try = nonzero(ms);
            }
        }
        if let (Some(try_timeout), Some(whole)) = (per_try, global)
            && try_timeout >= whole
        {
            per_try = None;
        }
        Self { global, per_try }
    }
}

/// The client's `grpc-timeout` minus the offset (only when that leaves something), capped
/// at `max` unless `max` is zero; no header means no timeout before the cap.
fn grpc_timeout(action: &RouteAction, max: Duration, parts: &Parts) -> Option<Duration> {
    let mut timeout = parts
        .headers
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)
        .unwrap_or(Duration::ZERO);
    if let Some(offset) = action.max_stream_duration.grpc_timeout_header_offset
        && offset < timeout
    {
        timeout -= offset;
    }
    if !max.is_zero() && (timeout.is_zero() || timeout > max) {
        timeout = max;
    }
    nonzero_duration(timeout)
}

/// `grpc-timeout`: up to 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
pub(crate) fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at_checked(value.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn header_ms(parts: &Parts, name: HeaderName) -> Option<u64> {
    parts.headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

fn nonzero(ms: u64) -> Option<Duration> {
    nonzero_duration(Duration::from_millis(ms))
}

fn nonzero_duration(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

/// The value of `x-envoy-expected-rq-timeout-ms` for an attempt starting `elapsed` after
/// the request: the per-try timeout, else the whole timeout, never beyond what remains of
/// the whole (at least 1 ms, since 0 would mean no timeout). `None`: no timeout.
pub fn expected_timeout(forward: &Forward<'_>, elapsed: Duration) -> Option<Duration> {
    let expected = forward.per_try_timeout.or(forward.timeout)?;
    Some(match forward.timeout {
        Some(whole) if elapsed >= whole => Duration::from_millis(1),
        Some(whole) => expected.min(whole - elapsed),
        None => expected,
    })
}

/// The route's overrides of the connection manager's stream limits, as Envoy's
/// `refreshIdleTimeout` and `refreshDurationTimeout` take them once the route is chosen:
/// `RouteAction.idle_timeout` replaces `stream_idle_timeout` and
/// `max_stream_duration.max_stream_duration` replaces `max_stream_duration` (`Some(ZERO)`
/// disables either). A gRPC request whose `grpc-timeout` the route honours
/// (`grpc_timeout_header_max`) keeps the connection manager's duration: that timeout is
/// the route's `timeout` here.
pub fn stream_limits(action: &RouteAction, parts: &Parts) -> StreamLimits {
    limits_of(action.idle_timeout, &action.max_stream_duration, parts)
}

fn limits_of(idle: Option<Duration>, max: &MaxStreamDuration, parts: &Parts) -> StreamLimits {
    let grpc_timeout = max.grpc_timeout_header_max.is_some()
        && parts.headers.get("grpc-timeout").and_then(|v| v.to_str().ok()).and_then(parse_grpc_timeout).is_some();
    StreamLimits { idle, max_duration: if grpc_timeout { None } else { max.max_stream_duration } }
}

/// Overrides of the stream limits; `None` keeps the connection manager's, `Some(ZERO)`
/// disables.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamLimits {
    pub idle: Option<Duration>,
    pub max_duration: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_overrides_the_stream_limits_unless_a_honoured_grpc_timeout_decides() {
        let (plain, _) = http::Request::get("/").body(()).unwrap().into_parts();
        let mut max = MaxStreamDuration::default();
        assert_eq!(limits_of(None, &max, &plain), StreamLimits::default());
        max.max_stream_duration = Some(Duration::from_secs(3));
        let expected = StreamLimits { idle: Some(Duration::ZERO), max_duration: Some(Duration::from_secs(3)) };
        assert_eq!(limits_of(Some(Duration::ZERO), &max, &plain), expected);
        let (grpc, _) = http::Request::post("/").header("grpc-timeout", "5S").body(()).unwrap().into_parts();
        assert_eq!(limits_of(Some(Duration::ZERO), &max, &grpc), expected, "grpc-timeout not honoured by the route");
        max.grpc_timeout_header_max = Some(Duration::ZERO);
        assert_eq!(limits_of(None, &max, &grpc).max_duration, None);
    }

    #[test]
    fn grpc_timeout_units() {
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("123456789S"), None);
        assert_eq!(parse_grpc_timeout("S"), None);
        assert_eq!(parse_grpc_timeout("5x"), None);
        assert_eq!(parse_grpc_timeout(""), None);
    }
}
