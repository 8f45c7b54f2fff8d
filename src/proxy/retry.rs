//! One request's retries, as Envoy's router decides them (`RetryStateImpl`): which
//! outcomes of an attempt are retried under `retry_on`, how many retries are left, and the
//! fully jittered exponential back-off before the next attempt.
//!
//! Pure and synchronous: the caller reports each failed or finished attempt and sleeps
//! for the returned back-off. Randomness comes from a seeded generator, so a test (or a
//! replay) gets the same back-offs from the same seed.

use std::time::Duration;

use http::request::Parts;
use http::{HeaderMap, HeaderName};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::config::route::{HeaderMatcher, RetryBackOff, RetryOn, RetryOnSet, RetryPolicy};
use crate::proxy::router::request_header_value;

// The request's own retry settings (internal clients only), as constants: a look-up by
// `&str` parses and validates the name first.
const RETRY_ON: HeaderName = HeaderName::from_static("x-envoy-retry-on");
const RETRY_GRPC_ON: HeaderName = HeaderName::from_static("x-envoy-retry-grpc-on");
const RETRIABLE_STATUS_CODES: HeaderName = HeaderName::from_static("x-envoy-retriable-status-codes");
const RETRIABLE_HEADER_NAMES: HeaderName = HeaderName::from_static("x-envoy-retriable-header-names");
const MAX_RETRIES: HeaderName = HeaderName::from_static("x-envoy-max-retries");
const RATELIMITED: HeaderName = HeaderName::from_static("x-envoy-ratelimited");

/// How an attempt ended.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'h> {
    /// Response headers arrived. `grpc_status` is the `grpc-status` of a trailers-only
    /// response (in the headers), or of the trailers when the caller can still retry then.
    Response { status: u16, grpc_status: Option<u32>, headers: &'h HeaderMap },
    /// The upstream connection could not be established (refused, timed out, TLS).
    ConnectFailure,
    /// The stream or connection was reset, or closed, before response headers.
    Reset,
    /// A reset before any byte of the request was sent (`reset-before-request`).
    ResetBeforeRequest,
    /// The per-try timeout fired; Envoy treats it as a local reset of a started request.
    Timeout,
    /// HTTP/2 `REFUSED_STREAM`: the upstream did not process the request.
    RefusedStream,
    /// A circuit breaker or pool overflow: Envoy never retries it.
    Overflow,
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Make another attempt after `backoff`.
    Retry { backoff: Duration },
    /// Hand this outcome to the client: it succeeded, is not retriable, or no retries are
    /// left.
    Done,
}

/// Retry conditions and limits for one request.
#[derive(Debug, Clone)]
pub struct RetryState {
    retry_on: RetryOnSet,
    retries_left: u32,
    attempts: u32,
    retriable_status_codes: Vec<u16>,
    retriable_headers: Vec<HeaderMatcher>,
    /// Names from `x-envoy-retriable-header-names`: a response carrying one is retried.
    retriable_header_names: Vec<String>,
    avoid_previous_hosts: bool,
    host_selection_retry_max_attempts: u32,
    back_off: Backoff,
    /// An outcome was retriable but no retries were left (Envoy's `URX`).
    limit_reached: bool,
}

impl RetryState {
    /// The state for a request under `policy` (the route's, else the virtual host's).
    /// Without a policy nothing is retried.
    pub fn new(policy: Option<&RetryPolicy>, seed: u64) -> Self {
        let back_off = policy.map_or_else(RetryBackOff::default, |p| p.back_off);
        Self {
            retry_on: policy.map(|p| p.retry_on).unwrap_or_default(),
            retries_left: policy.map_or(1, |p| p.num_retries),
            attempts: 1,
            retriable_status_codes: policy.map(|p| p.retriable_status_codes.clone()).unwrap_or_default(),
            retriable_headers: policy.map(|p| p.retriable_headers.clone()).unwrap_or_default(),
            retriable_header_names: Vec::new(),
            avoid_previous_hosts: policy.is_some_and(|p| p.avoid_previous_hosts),
            host_selection_retry_max_attempts: policy.map_or(1, |p| p.host_selection_retry_max_attempts),
            back_off: Backoff::new(back_off, seed),
            limit_reached: false,
        }
    }

    /// [`RetryState::new`], then the request's own say, as Envoy: `retriable_request_headers`
    /// must match (else no retries), and the `x-envoy-retry-on`, `x-envoy-retry-grpc-on`,
    /// `x-envoy-retriable-status-codes`, `x-envoy-retriable-header-names` and
    /// `x-envoy-max-retries` headers add to the policy. Those headers reach the router only
    /// from internal clients: the connection manager strips them from external requests.
    pub fn for_request(policy: Option<&RetryPolicy>, request: &Parts, seed: u64) -> Self {
        let mut state = Self::new(policy, seed);
        let header = |name: HeaderName| request.headers.get(name).and_then(|v| v.to_str().ok());
        for name in [RETRY_ON, RETRY_GRPC_ON] {
            for on in header(name).into_iter().flat_map(|v| v.split(',')).filter_map(|s| RetryOn::parse(s.trim())) {
                state.retry_on.insert(on);
            }
        }
        if let Some(codes) = header(RETRIABLE_STATUS_CODES) {
            state.retriable_status_codes.extend(codes.split(',').filter_map(|c| c.trim().parse::<u16>().ok()));
        }
        if let Some(names) = header(RETRIABLE_HEADER_NAMES) {
            state
                .retriable_header_names
                .extend(names.split(',').map(|n| n.trim().to_ascii_lowercase()).filter(|n| !n.is_empty()));
        }
        if let Some(max) = header(MAX_RETRIES).and_then(|v| v.trim().parse().ok()) {
            state.retries_left = max;
        }
        if let Some(policy) = policy
            && !policy.retriable_request_headers.is_empty()
            && !policy
                .retriable_request_headers
                .iter()
                .any(|m| m.matches(request_header_value(request, &m.name).as_deref()))
        {
            state.retry_on = RetryOnSet::default();
        }
        state
    }

    /// Reports how the latest attempt ended and says whether to make another.
    pub fn on_outcome(&mut self, outcome: &Outcome<'_>) -> Decision {
        if !self.would_retry(outcome) {
            return Decision::Done;
        }
        if self.retries_left == 0 {
            self.limit_reached = true;
            return Decision::Done;
        }
        self.retries_left -= 1;
        self.attempts += 1;
        Decision::Retry { backoff: self.back_off.next() }
    }

    /// Whether the last outcome would have been retried had the limit allowed it.
    pub fn limit_reached(&self) -> bool {
        self.limit_reached
    }

    /// Whether `retry_on` covers the outcome (before counting retries).
    fn would_retry(&self, outcome: &Outcome<'_>) -> bool {
        let on = |r| self.retry_on.contains(r);
        let any_reset = on(RetryOn::FiveXx) || on(RetryOn::GatewayError) || on(RetryOn::Reset);
        match *outcome {
            Outcome::Response { status, grpc_status, headers } => self.retry_response(status, grpc_status, headers),
            Outcome::ConnectFailure => on(RetryOn::ConnectFailure) || on(RetryOn::ResetBeforeRequest) || any_reset,
            Outcome::ResetBeforeRequest => on(RetryOn::ResetBeforeRequest) || any_reset,
            Outcome::Reset | Outcome::Timeout => any_reset,
            Outcome::RefusedStream => on(RetryOn::RefusedStream) || any_reset,
            Outcome::Overflow => false,
        }
    }

    fn retry_response(&self, status: u16, grpc_status: Option<u32>, headers: &HeaderMap) -> bool {
        let on = |r| self.retry_on.contains(r);
        // A response rate limited by an upstream Envoy is only retried under
        // `envoy-ratelimited`, whatever its status.
        if headers.contains_key(RATELIMITED) {
            return on(RetryOn::EnvoyRateLimited);
        }
        (on(RetryOn::FiveXx) && (500..600).contains(&status))
            || (on(RetryOn::GatewayError) && matches!(status, 502..=504))
            || (on(RetryOn::Retriable4xx) && status == 409)
            || (on(RetryOn::RetriableStatusCodes) && self.retriable_status_codes.contains(&status))
            || (on(RetryOn::RetriableHeaders) && self.retriable_header(status, headers))
            || grpc_status.is_some_and(|code| grpc_condition(code).is_some_and(on))
    }

    fn retriable_header(&self, status: u16, headers: &HeaderMap) -> bool {
        let status = status.to_string();
        let value = |name: &str| -> Option<String> {
            if name == ":status" {
                return Some(status.clone());
            }
            let mut values = headers.get_all(name).iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            let first = values.next()?;
            Some(values.fold(first, |acc, v| acc + "," + &v))
        };
        self.retriable_headers.iter().any(|m| m.matches(value(&m.name).as_deref()))
            || self.retriable_header_names.iter().any(|n| headers.contains_key(n.as_str()))
    }

    /// Whether retries must avoid hosts already tried (`previous_hosts` predicate).
    pub fn avoid_previous_hosts(&self) -> bool {
        self.avoid_previous_hosts
    }

    /// How many picks a retry may make to find a host the predicate accepts.
    pub fn host_selection_retry_max_attempts(&self) -> u32 {
        self.host_selection_retry_max_attempts
    }

    /// Attempts made so far, the first included (for `x-envoy-attempt-count`).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    pub fn retries_left(&self) -> u32 {
        self.retries_left
    }

    /// Whether any condition is enabled (a request without one is never retried).
    pub fn enabled(&self) -> bool {
        !self.retry_on.is_empty()
    }
}

/// The gRPC retry condition for a `grpc-status` code.
fn grpc_condition(code: u32) -> Option<RetryOn> {
    match code {
        1 => Some(RetryOn::Cancelled),
        4 => Some(RetryOn::DeadlineExceeded),
        8 => Some(RetryOn::ResourceExhausted),
        13 => Some(RetryOn::Internal),
        14 => Some(RetryOn::Unavailable),
        _ => None,
    }
}

/// Envoy's `JitteredExponentialBackOffStrategy`: the n-th back-off is uniform in
/// `[0, base × 2^(n-1))` milliseconds, the range doubling until it reaches `max`, and never
/// above `max`.
#[derive(Debug, Clone)]
struct Backoff {
    next_ms: u64,
    max_ms: u64,
    rng: SmallRng,
}

impl Backoff {
    fn new(config: RetryBackOff, seed: u64) -> Self {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
        Self { next_ms: ms(config.base_interval), max_ms: ms(config.max_interval), rng: SmallRng::seed_from_u64(seed) }
    }

    fn next(&mut self) -> Duration {
        let range = self.next_ms;
        self.next_ms = if self.next_ms < self.max_ms / 2 { self.next_ms * 2 } else { self.max_ms };
        Duration::from_millis((self.rng.random::<u64>() % range).min(self.max_ms))
    }
}

#[cfg(test)]
mod tests;
