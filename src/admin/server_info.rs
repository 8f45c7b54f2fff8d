//! `/server_info`: what is running, since when, in which state, with which options, in
//! Envoy's `ServerInfo` shape.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Fixed at start-up.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    pub started: Instant,
    pub concurrency: usize,
    pub drain_time: Duration,
    /// The log filter given at start-up.
    pub log_level: String,
    /// `node.id` and `node.cluster` from the bootstrap.
    pub node_id: String,
    pub node_cluster: String,
}

/// Envoy's state names: `LIVE`, `DRAINING`, `PRE_INITIALIZING`.
pub fn json(info: &ServerInfo, state: &str) -> Value {
    let uptime = format!("{}s", info.started.elapsed().as_secs());
    json!({
        "version": format!("outrider/{}", env!("CARGO_PKG_VERSION")),
        "state": state,
        "hot_restart_version": "disabled",
        "command_line_options": {
            "concurrency": info.concurrency,
            "drain_time": format!("{}s", info.drain_time.as_secs()),
            "log_level": info.log_level,
        },
        "node": { "id": info.node_id, "cluster": info.node_cluster },
        "uptime_current_epoch": uptime,
        "uptime_all_epochs": uptime,
    })
}

/// `server.version`: Envoy shows its build's revision as a number; Outrider shows its
/// release, `MAJOR * 1_000_000 + MINOR * 1_000 + PATCH`.
pub fn version_number() -> u64 {
    let mut parts = env!("CARGO_PKG_VERSION").split(['.', '-']).map(|p| p.parse::<u64>().unwrap_or(0));
    let mut next = || parts.next().unwrap_or(0);
    next().saturating_mul(1_000_000).saturating_add(next().saturating_mul(1_000)).saturating_add(next())
}
