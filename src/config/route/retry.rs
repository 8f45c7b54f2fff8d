//! Retry policy of a route or virtual host (`envoy.config.route.v3.RetryPolicy`).

use std::time::Duration;

use crate::config::matcher::HeaderMatcher;

/// Envoy's default base interval of the retry back-off.
pub const DEFAULT_RETRY_BASE_INTERVAL: Duration = Duration::from_millis(25);

/// One condition of `retry_on`, with Envoy's spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum RetryOn {
    FiveXx,
    GatewayError,
    Reset,
    ResetBeforeRequest,
    ConnectFailure,
    EnvoyRateLimited,
    Retriable4xx,
    RefusedStream,
    RetriableStatusCodes,
    RetriableHeaders,
    Http3PostConnectFailure,
    // gRPC status conditions (`x-envoy-retry-grpc-on`).
    Cancelled,
    DeadlineExceeded,
    Internal,
    ResourceExhausted,
    Unavailable,
}

impl RetryOn {
    pub const ALL: [RetryOn; 16] = [
        RetryOn::FiveXx,
        RetryOn::GatewayError,
        RetryOn::Reset,
        RetryOn::ResetBeforeRequest,
        RetryOn::ConnectFailure,
        RetryOn::EnvoyRateLimited,
        RetryOn::Retriable4xx,
        RetryOn::RefusedStream,
        RetryOn::RetriableStatusCodes,
        RetryOn::RetriableHeaders,
        RetryOn::Http3PostConnectFailure,
        RetryOn::Cancelled,
        RetryOn::DeadlineExceeded,
        RetryOn::Internal,
        RetryOn::ResourceExhausted,
        RetryOn::Unavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RetryOn::FiveXx => "5xx",
            RetryOn::GatewayError => "gateway-error",
            RetryOn::Reset => "reset",
            RetryOn::ResetBeforeRequest => "reset-before-request",
            RetryOn::ConnectFailure => "connect-failure",
            RetryOn::EnvoyRateLimited => "envoy-ratelimited",
            RetryOn::Retriable4xx => "retriable-4xx",
            RetryOn::RefusedStream => "refused-stream",
            RetryOn::RetriableStatusCodes => "retriable-status-codes",
            RetryOn::RetriableHeaders => "retriable-headers",
            RetryOn::Http3PostConnectFailure => "http3-post-connect-failure",
            RetryOn::Cancelled => "cancelled",
            RetryOn::DeadlineExceeded => "deadline-exceeded",
            RetryOn::Internal => "internal",
            RetryOn::ResourceExhausted => "resource-exhausted",
            RetryOn::Unavailable => "unavailable",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

/// A set of [`RetryOn`] conditions, one bit each: checked on every failed attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RetryOnSet(u32);

impl RetryOnSet {
    pub fn insert(&mut self, on: RetryOn) {
        self.0 |= 1 << on as u8;
    }

    pub fn contains(self, on: RetryOn) -> bool {
        self.0 & (1 << on as u8) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = RetryOn> {
        RetryOn::ALL.into_iter().filter(move |r| self.contains(*r))
    }
}

impl FromIterator<RetryOn> for RetryOnSet {
    fn from_iter<I: IntoIterator<Item = RetryOn>>(iter: I) -> Self {
        let mut set = Self::default();
        iter.into_iter().for_each(|r| set.insert(r));
        set
    }
}

/// A validated retry policy with Envoy's defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub retry_on: RetryOnSet,
    /// `num_retries`, default 1.
    pub num_retries: u32,
    /// `None`: each attempt may use the whole route timeout.
    pub per_try_timeout: Option<Duration>,
    pub per_try_idle_timeout: Option<Duration>,
    /// `envoy.retry_host_predicates.previous_hosts`: a retry avoids hosts already tried.
    pub avoid_previous_hosts: bool,
    /// `host_selection_retry_max_attempts`, default 1: how many picks a retry may make to
    /// satisfy the host predicate.
    pub host_selection_retry_max_attempts: u32,
    /// Used with `retriable-status-codes`.
    pub retriable_status_codes: Vec<u16>,
    /// Used with `retriable-headers`: a response matching any of these is retried.
    pub retriable_headers: Vec<HeaderMatcher>,
    /// A request is only retried if it matches one of these (all requests when empty).
    pub retriable_request_headers: Vec<HeaderMatcher>,
    pub back_off: RetryBackOff,
}

/// Exponential back-off with full jitter between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBackOff {
    /// Default 25 ms.
    pub base_interval: Duration,
    /// Default 10 × `base_interval`; never below it.
    pub max_interval: Duration,
}

impl Default for RetryBackOff {
    fn default() -> Self {
        Self { base_interval: DEFAULT_RETRY_BASE_INTERVAL, max_interval: DEFAULT_RETRY_BASE_INTERVAL * 10 }
    }
}
