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
    // Envoy caps how many connection pools (one per host, protocol and socket options) the
    // cluster holds; Outrider does not count its pools, so a cap would not hold. Istio
    // never sets it.
    if let Some(pools) = max_connection_pools {
        return Err(ConfigError::new(
            "max_connection_pools",
            format!("{} is not supported: connection pools are not limited", pools.value),
        ));
    }
    let d = Thresholds::default();
    Ok(Thresholds {
        max_connections: common::u32_or(&max_connections, d.max_connections),
        max_pending_requests: common::u32_or(&max_pending_requests, d.max_pending_requests),
        max_requests: common::u32_or(&max_requests, d.max_requests),
        max_retries: common::u32_or(&max_retries, d.max_retries),
        retry_budget: retry_budget.map(retry_budget_of).transpose().at_field("retry_budget")?,
    })
}

fn retry_budget_of(proto: RetryBudgetProto) -> Result<RetryBudget> {
    let RetryBudgetProto { budget_percent, budget_interval, min_retry_concurrency } = proto;
    // A non-zero interval counts requests that started within it, finished or not; the
    // budget here counts the requests active now (Envoy's 0 s default). Istio never sets it.
    if let Some(interval) = common::opt_duration(&budget_interval, "budget_interval")?
        && !interval.is_zero()
    {
        return Err(ConfigError::new(
            "budget_interval",
            format!("{interval:?} is not supported: the budget counts the requests active now"),
        ));
    }
    Ok(RetryBudget {
        budget_percent: common::percent_or(&budget_percent, 20.0, "budget_percent")?,
        min_retry_concurrency: common::u32_or(&min_retry_concurrency, 3),
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

    #[test]
    fn limits_that_would_not_hold_are_refused() {
        let err = convert(json!({"thresholds": [{"max_connection_pools": 10}]})).unwrap_err();
        assert_eq!(err.path(), "thresholds[0].max_connection_pools");
        let err = convert(json!({"thresholds": [{"retry_budget": {"budget_interval": "1s"}}]})).unwrap_err();
        assert_eq!(err.path(), "thresholds[0].retry_budget.budget_interval");
        // Envoy's default interval (0 s: the requests active now) is what the budget does.
        assert!(convert(json!({"thresholds": [{"retry_budget": {"budget_interval": "0s"}}]})).is_ok());
    }
}
