//! `envoy.config.cluster.v3.CircuitBreakers` → [`CircuitBreakers`].

use crate::config::cluster::{CircuitBreakers, RetryBudget, Thresholds};
use crate::config::convert::common;
use crate::config::error::{AtField, ConfigError, Result, Warnings};
use crate::pb::envoy::config::cluster::v3 as proto;
use crate::pb::envoy::config::core::v3::RoutingPriority;

use proto::circuit_breakers::{self as cb, thresholds::RetryBudget as RetryBudgetProto};

pub(super) fn circuit_breakers(proto: proto::CircuitBreakers, warnings: &mut Warnings) -> Result<CircuitBreakers> {
    let proto::CircuitBreakers { thresholds, per_host_thresholds } = proto;
    let mut breakers = CircuitBreakers::default();
    let mut seen = [false, false];
    for (i, t) in thresholds.into_iter().enumerate() {
        let at = format!("thresholds[{i}]");
        let priority = RoutingPriority::try_from(t.priority)
            .map_err(|_| ConfigError::new(format!("{at}.priority"), format!("unknown priority {}", t.priority)))?;
        let (slot, index) = match priority {
            RoutingPriority::Default => (&mut breakers.default, 0),
            RoutingPriority::High => (&mut breakers.high, 1),
        };
        if std::mem::replace(&mut seen[index], true) {
            return Err(ConfigError::new(format!("{at}.priority"), "a priority may have only one entry"));
        }
        *slot = warnings.within(&at, |w| thresholds_of(t, w)).at_field(&at)?;
    }
    for (i, t) in per_host_thresholds.into_iter().enumerate() {
        let at = format!("per_host_thresholds[{i}]");
        let cb::Thresholds {
            priority,
            max_connections,
            max_pending_requests,
            max_requests,
            max_retries,
            retry_budget,
            track_remaining: _,
            max_connection_pools,
        } = t;
        let others = max_pending_requests.is_some()
            || max_requests.is_some()
            || max_retries.is_some()
            || retry_budget.is_some()
            || max_connection_pools.is_some();
        if others {
            return Err(ConfigError::new(at, "only max_connections is supported per host"));
        }
        if priority == RoutingPriority::Default as i32 {
            breakers.per_host_max_connections = max_connections.map(|v| v.value);
        } else {
            warnings.ignored(format!("{at}.priority"), "per-host limits apply to every priority");
        }
    }
    Ok(breakers)
}

fn thresholds_of(proto: cb::Thresholds, warnings: &mut Warnings) -> Result<Thresholds> {
    let cb::Thresholds {
        priority: _,
        max_connections,
        max_pending_requests,
        max_requests,
        max_retries,
        retry_budget,
        track_remaining,
        max_connection_pools,
    } = proto;
    if track_remaining {
        warnings.ignored("track_remaining", "remaining-capacity stats are not published");
    }
    let d = Thresholds::default();
    Ok(Thresholds {
        max_connections: common::u32_or(&max_connections, d.max_connections),
        max_pending_requests: common::u32_or(&max_pending_requests, d.max_pending_requests),
        max_requests: common::u32_or(&max_requests, d.max_requests),
        max_retries: common::u32_or(&max_retries, d.max_retries),
        retry_budget: retry_budget.map(retry_budget_of).transpose().at_field("retry_budget")?,
        max_connection_pools: max_connection_pools.map(|v| v.value),
    })
}

fn retry_budget_of(proto: RetryBudgetProto) -> Result<RetryBudget> {
    let RetryBudgetProto { budget_percent, budget_interval, min_retry_concurrency } = proto;
    Ok(RetryBudget {
        budget_percent: common::percent_or(&budget_percent, 20.0, "budget_percent")?,
        min_retry_concurrency: common::u32_or(&min_retry_concurrency, 3),
        budget_interval: common::opt_duration(&budget_interval, "budget_interval")?,
    })
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::pb::json;
    use serde_json::json;

    fn convert(value: serde_json::Value) -> Result<CircuitBreakers> {
        let (proto, dropped) = json::from_value("envoy.config.cluster.v3.CircuitBreakers", value).unwrap();
        assert!(dropped.is_empty(), "{dropped:?}");
        circuit_breakers(proto, &mut Warnings::new())
    }

    #[test]
    fn unset_priorities_keep_envoy_defaults() {
        let cb = convert(json!({"thresholds": [{"priority": "HIGH", "max_requests": 7}]})).unwrap();
        assert_eq!(cb.default, Thresholds::default());
        assert_eq!(cb.default.max_connections, 1024);
        assert_eq!(cb.default.max_retries, 3);
        assert_eq!(cb.high.max_requests, 7);
        assert_eq!(cb.high.max_pending_requests, 1024);
    }

    #[test]
    fn retry_budget_defaults_and_duplicate_priority() {
        let cb = convert(json!({"thresholds": [{"retry_budget": {}}]})).unwrap();
        let budget = cb.default.retry_budget.unwrap();
        assert_eq!((budget.budget_percent, budget.min_retry_concurrency), (20.0, 3));
        let err = convert(json!({"thresholds": [{}, {"priority": "DEFAULT"}]})).unwrap_err();
        assert_eq!(err.path(), "thresholds[1].priority");
    }
}
