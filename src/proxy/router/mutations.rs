//! What the router changes on the upstream request and on the response for a route:
//! header mutations of every level (Envoy's `HeaderParser::evaluateHeaders`: removals
//! first, then overwrites, then additions, all values computed from the headers as they
//! were before the level), host and path rewrites, and the timeout and attempt headers.

use std::time::Duration;

use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Uri};

use super::substitution::{DownstreamInfo, substitute};
use super::timeout::expected_timeout;
use super::{Forward, HeaderLayers};
use crate::config::route::{HeaderAppendAction, HeaderValueOption};

// Header names as constants: a look-up by `&str` parses and validates the name first.
const EXPECTED_TIMEOUT: HeaderName = HeaderName::from_static("x-envoy-expected-rq-timeout-ms");
const ORIGINAL_PATH: HeaderName = HeaderName::from_static("x-envoy-original-path");
const ATTEMPT_COUNT: HeaderName = HeaderName::from_static("x-envoy-attempt-count");
const IS_TIMEOUT_RETRY: HeaderName = HeaderName::from_static("x-envoy-is-timeout-retry");
const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// The connection manager settings and connection facts the router's changes depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UpstreamRequestOptions {
    /// The router's `suppress_envoy_headers`: add no `x-envoy-*` header.
    pub suppress_envoy_headers: bool,
    pub downstream: DownstreamInfo,
}

/// Control headers Envoy's router reads (from internal clients; the connection manager
/// removed them from the others) and does not pass on: the retry state consumes the
/// retry ones, the router the alternate stat name, timeout response and hedging.
const CONSUMED: [HeaderName; 8] = [
    HeaderName::from_static("x-envoy-retry-on"),
    HeaderName::from_static("x-envoy-retry-grpc-on"),
    HeaderName::from_static("x-envoy-max-retries"),
    HeaderName::from_static("x-envoy-retriable-status-codes"),
    HeaderName::from_static("x-envoy-retriable-header-names"),
    HeaderName::from_static("x-envoy-upstream-alt-stat-name"),
    HeaderName::from_static("x-envoy-upstream-rq-timeout-alt-response"),
    HeaderName::from_static("x-envoy-hedge-on-per-try-timeout"),
];

/// Turns the downstream request head into the upstream one for `forward` (once, before
/// the first attempt): timeout headers, header mutations, host and path rewrites.
pub fn apply_request_mutations(forward: &Forward<'_>, parts: &mut Parts, options: &UpstreamRequestOptions) {
    let headers = &mut parts.headers;
    if crate::proxy::headers::has_envoy_header(headers) {
        headers.remove(super::timeout::UPSTREAM_RQ_TIMEOUT_MS);
        headers.remove(super::timeout::UPSTREAM_RQ_PER_TRY_TIMEOUT_MS);
        CONSUMED.iter().for_each(|h| drop(headers.remove(h)));
    }
    set_attempt_headers(forward, headers, 1, Duration::ZERO, false, options);
    for level in forward.headers.iter() {
        evaluate(
            &mut parts.headers,
            &level.request_headers_to_remove,
            &level.request_headers_to_add,
            &options.downstream,
            None,
        );
    }
    if let Some(host) = &forward.host_rewrite {
        set_authority(parts, host, forward.action.append_x_forwarded_host);
    }
    if let Some(path) = &forward.path_rewrite {
        let original = parts.uri.path_and_query().map(|p| p.as_str().to_owned());
        if set_path(&mut parts.uri, path)
            && !options.suppress_envoy_headers
            && let Some(original) = original.and_then(|o| HeaderValue::from_str(&o).ok())
        {
            parts.headers.insert(ORIGINAL_PATH, original);
        }
    }
}

/// Sets the per-attempt headers: `x-envoy-expected-rq-timeout-ms` (what remains of the
/// timeouts `elapsed` after the request started; also `grpc-timeout` when the route caps
/// gRPC timeouts), `x-envoy-attempt-count` and `x-envoy-is-timeout-retry` when the
/// virtual host asks for them. Call before each retry; attempts count from 1.
pub fn set_attempt_headers(
    forward: &Forward<'_>,
    headers: &mut HeaderMap,
    attempt: u32,
    elapsed: Duration,
    after_timeout: bool,
    options: &UpstreamRequestOptions,
) {
    // Envoy counts in whole milliseconds and gives the first attempt the whole timeout:
    // a few microseconds spent before it must not make it one millisecond short.
    let elapsed = if attempt <= 1 { Duration::ZERO } else { Duration::from_millis(whole_millis(elapsed)) };
    if let Some(expected) = expected_timeout(forward, elapsed) {
        let ms = expected.as_millis().max(1);
        if !options.suppress_envoy_headers {
            headers.insert(EXPECTED_TIMEOUT, HeaderValue::from(ms as u64));
        }
        if forward.action.max_stream_duration.grpc_timeout_header_max.is_some()
            && headers.get(http::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
            && let Ok(value) = HeaderValue::from_str(&format!("{ms}m"))
        {
            headers.insert(GRPC_TIMEOUT, value);
        }
    }
    let vhost = forward.virtual_host;
    if vhost.include_request_attempt_count {
        headers.insert(ATTEMPT_COUNT, HeaderValue::from(attempt));
    }
    if vhost.include_is_timeout_retry_header && attempt > 1 {
        headers.insert(IS_TIMEOUT_RETRY, HeaderValue::from_static(if after_timeout { "true" } else { "false" }));
    }
}

fn whole_millis(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
}

/// Applies the response header mutations of `layers` (a [`Forward`]'s, or a local
/// answer's) to a response. `request` answers `%REQ(…)%`.
pub fn apply_response_mutations(
    layers: &HeaderLayers<'_>,
    response: &mut HeaderMap,
    downstream: &DownstreamInfo,
    request: Option<&HeaderMap>,
) {
    for level in layers.iter() {
        evaluate(response, &level.response_headers_to_remove, &level.response_headers_to_add, downstream, request);
    }
}

/// `x-envoy-attempt-count` on the response when the virtual host asks for it.
pub fn set_response_attempt_count(forward: &Forward<'_>, response: &mut HeaderMap, attempts: u32) {
    if forward.virtual_host.include_attempt_count_in_response {
        response.insert(ATTEMPT_COUNT, HeaderValue::from(attempts));
    }
}

/// Adds `add` to `headers` (a request Outrider makes itself, such as a TCP proxy's
/// tunnel `CONNECT`), values substituted against `downstream`.
pub fn add_headers(headers: &mut HeaderMap, add: &[HeaderValueOption], downstream: &DownstreamInfo) {
    evaluate(headers, &[], add, downstream, None);
}

/// One level: remove, then compute every value against the headers as they are now, then
/// overwrite, then append.
fn evaluate(
    headers: &mut HeaderMap,
    remove: &[HeaderName],
    add: &[HeaderValueOption],
    downstream: &DownstreamInfo,
    request: Option<&HeaderMap>,
) {
    for name in remove {
        headers.remove(name);
    }
    let mut overwrite = Vec::new();
    let mut append = Vec::new();
    for option in add {
        let value = substitute(&option.value, downstream, Some(request.unwrap_or(headers)));
        if value.is_empty() && !option.keep_empty_value {
            continue;
        }
        let Ok(value) = HeaderValue::from_str(&value) else {
            continue;
        };
        let present = headers.contains_key(&option.name);
        match option.append_action {
            HeaderAppendAction::AppendIfExistsOrAdd => append.push((&option.name, value)),
            HeaderAppendAction::AddIfAbsent if !present => append.push((&option.name, value)),
            HeaderAppendAction::AddIfAbsent => {}
            HeaderAppendAction::OverwriteIfExists if !present => {}
            HeaderAppendAction::OverwriteIfExists | HeaderAppendAction::OverwriteIfExistsOrAdd => {
                overwrite.push((&option.name, value));
            }
        }
    }
    for (name, value) in overwrite {
        headers.insert(name, value);
    }
    for (name, value) in append {
        headers.append(name, value);
    }
}

/// Replaces `:authority` (the URI's authority when it has one, and the `Host` header when
/// present or when the URI has none); with `append_x_forwarded_host`, the old host is
/// appended to `x-forwarded-host`.
fn set_authority(parts: &mut Parts, host: &str, append_x_forwarded_host: bool) {
    let Ok(value) = HeaderValue::from_str(host) else {
        return;
    };
    let old = parts
        .uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| parts.headers.get(http::header::HOST).and_then(|v| v.to_str().ok()).map(str::to_owned));
    if parts.uri.authority().is_some() {
        let mut uri = parts.uri.clone().into_parts();
        uri.authority = host.parse().ok().or(uri.authority);
        if let Ok(new) = Uri::from_parts(uri) {
            parts.uri = new;
        }
    }
    if parts.headers.contains_key(http::header::HOST) || parts.uri.authority().is_none() {
        parts.headers.insert(http::header::HOST, value);
    }
    if append_x_forwarded_host && let Some(old) = old.filter(|o| o != host) {
        let joined = match parts.headers.get("x-forwarded-host").and_then(|v| v.to_str().ok()) {
            Some(existing) => format!("{existing},{old}"),
            None => old,
        };
        if let Ok(value) = HeaderValue::from_str(&joined) {
            parts.headers.insert("x-forwarded-host", value);
        }
    }
}

/// Replaces the URI's path and query; false (and no change) when `path` is not valid.
fn set_path(uri: &mut Uri, path: &str) -> bool {
    let Ok(path_and_query) = path.parse() else {
        return false;
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query);
    match Uri::from_parts(parts) {
        Ok(new) => {
            *uri = new;
            true
        }
        Err(_) => false,
    }
}
