//! The connection limit network filter (`envoy.filters.network.connection_limit`): at
//! most `max_connections` connections at once through the filter chain that has it,
//! counted over every worker.

use std::time::Duration;

/// `envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnectionLimit {
    /// Stats go to `connection_limit.<stat_prefix>.` (`active_connections`,
    /// `limited_connections`).
    pub stat_prefix: String,
    /// At least 1.
    pub max_connections: u64,
    /// How long a connection over the limit is held before it is closed, so that a client
    /// cannot retry as fast as it likes. `None`: closed at once.
    pub delay: Option<Duration>,
}
