//! Circuit breakers: per-priority limits on what one cluster may have outstanding.

/// The limits of the two routing priorities. Envoy applies its defaults to a priority that
/// has no `thresholds` entry.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CircuitBreakers {
    pub default: Thresholds,
    pub high: Thresholds,
    /// `per_host_thresholds[].max_connections` (the only per-host limit Envoy honours).
    pub per_host_max_connections: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    pub max_connections: u32,
    pub max_pending_requests: u32,
    pub max_requests: u32,
    /// Concurrent retries; replaced by the budget when `retry_budget` is set.
    pub max_retries: u32,
    pub retry_budget: Option<RetryBudget>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_pending_requests: 1024,
            max_requests: 1024,
            max_retries: 3,
            retry_budget: None,
        }
    }
}

/// Retries limited to a share of active requests, with a floor (Envoy's default
/// `budget_interval` of 0 s; another interval is refused).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryBudget {
    /// In percent of active requests (default 20).
    pub budget_percent: f64,
    /// Retries always allowed (default 3).
    pub min_retry_concurrency: u32,
}
