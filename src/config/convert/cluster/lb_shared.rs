//! What both forms of a cluster's balancing convert alike — the legacy `lb_policy` enum
//! (`lb_policy`) and the typed `load_balancing_policy` list (`lb_typed`): the choice they
//! make, `common_lb_config`'s part, slow start, ring sizes, maglev table size, choice count.

use crate::config::cluster::lb_policy::{
    DEFAULT_MAGLEV_TABLE_SIZE, DEFAULT_MAXIMUM_RING_SIZE, DEFAULT_MINIMUM_RING_SIZE, MAX_MAGLEV_TABLE_SIZE,
    MAX_RING_SIZE,
};
use crate::config::cluster::{HashKeySource, LbPolicy, SlowStartConfig};
use crate::config::convert::common;
use crate::config::error::{AtField, ConfigError, Result, Warnings};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::r#type::v3::Percent;
use crate::pb::google::protobuf as gpb;

/// What the policy fields chose.
pub(super) enum Choice {
    /// `CLUSTER_PROVIDED`: the cluster type picks (ORIGINAL_DST).
    ClusterProvided,
    /// A policy, and its own locality setting when it has one (`None`: use
    /// `common_lb_config`'s).
    Policy(LbPolicy, Option<bool>),
    /// `random_subsetting`: the child policy over a subset of this many endpoints.
    Subset(u32, LbPolicy, Option<bool>),
}

/// `common_lb_config`, reduced to what the policies need.
pub(super) struct CommonLb {
    pub healthy_panic_threshold: f64,
    pub locality_weighted: bool,
    pub hashing: ConsistentHashing,
}

/// `consistent_hashing_lb_config`, as ring hash and maglev read it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ConsistentHashing {
    pub hash_key: HashKeySource,
    pub hash_balance_factor: Option<u32>,
}

/// Why ignoring zone-aware routing is safe: Envoy itself turns it off without a local
/// cluster, which Istio never configures.
pub(super) fn zone_aware_why() -> &'static str {
    "zone-aware routing needs a local cluster; Outrider balances across localities as Envoy does without one"
}

/// `use_hostname_for_hashing` / `hash_balance_factor` of consistent hashing. The factor is
/// a percentage of the average load, at least 100 (Envoy's validation rule).
pub(super) fn consistent_hashing_of(
    use_hostname: bool,
    balance_factor: Option<gpb::UInt32Value>,
) -> Result<ConsistentHashing> {
    let hash_balance_factor = match balance_factor.map(|v| v.value) {
        None => None,
        Some(factor) if factor < 100 => {
            return Err(ConfigError::new(
                "hash_balance_factor",
                format!("{factor} is below 100 (a host may carry this percentage of the average load)"),
            ));
        }
        Some(factor) => Some(factor),
    };
    let hash_key = if use_hostname { HashKeySource::Hostname } else { HashKeySource::Address };
    Ok(ConsistentHashing { hash_key, hash_balance_factor })
}

/// Ring bounds: both at most 8M entries, at least 1, minimum ≤ maximum.
pub(super) fn ring_sizes(minimum: Option<u64>, maximum: Option<u64>) -> Result<(u64, u64)> {
    let minimum = minimum.unwrap_or(DEFAULT_MINIMUM_RING_SIZE);
    let maximum = maximum.unwrap_or(DEFAULT_MAXIMUM_RING_SIZE);
    for (field, value) in [("minimum_ring_size", minimum), ("maximum_ring_size", maximum)] {
        if value == 0 || value > MAX_RING_SIZE {
            return Err(ConfigError::new(field, format!("{value} is not in [1, {MAX_RING_SIZE}]")));
        }
    }
    if minimum > maximum {
        return Err(ConfigError::new(
            "minimum_ring_size",
            format!("{minimum} is larger than maximum_ring_size {maximum}"),
        ));
    }
    Ok((minimum, maximum))
}

/// Maglev needs a prime table size; Envoy caps it at 5000011.
pub(super) fn maglev_table_size(size: Option<u64>) -> Result<u64> {
    let size = size.unwrap_or(DEFAULT_MAGLEV_TABLE_SIZE);
    if size > MAX_MAGLEV_TABLE_SIZE {
        return Err(ConfigError::new("table_size", format!("{size} is larger than {MAX_MAGLEV_TABLE_SIZE}")));
    }
    if !is_prime(size) {
        return Err(ConfigError::new("table_size", format!("{size} is not a prime number")));
    }
    Ok(size)
}

fn is_prime(n: u64) -> bool {
    n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| !n.is_multiple_of(d))
}

/// `choice_count`: 2 by default, at least 2.
pub(super) fn choice_count_of(value: Option<gpb::UInt32Value>) -> Result<u32> {
    match common::u32_or(&value, 2) {
        n if n < 2 => Err(ConfigError::new("choice_count", format!("{n} is less than 2"))),
        n => Ok(n),
    }
}

/// `active_request_bias`: 1.0 by default, finite and ≥ 0.
pub(super) fn active_request_bias_of(value: Option<core::RuntimeDouble>, warnings: &mut Warnings) -> Result<f64> {
    let bias = runtime_double(value, 1.0, "active_request_bias", warnings);
    if !bias.is_finite() || bias < 0.0 {
        return Err(ConfigError::new("active_request_bias.default_value", format!("{bias} is not a number ≥ 0")));
    }
    Ok(bias)
}

/// A `RuntimeDouble`'s `default_value`: Outrider has no runtime layer, so a `runtime_key`
/// always resolves to the default, as in an Envoy without that key.
fn runtime_double(value: Option<core::RuntimeDouble>, default: f64, field: &str, warnings: &mut Warnings) -> f64 {
    match value {
        None => default,
        Some(core::RuntimeDouble { default_value, runtime_key }) => {
            if !runtime_key.is_empty() {
                warnings.ignored(format!("{field}.runtime_key"), "no runtime overrides; default_value is used");
            }
            default_value
        }
    }
}

/// Slow start from its three fields (the legacy and the typed message are alike). A missing
/// or zero window turns it off.
pub(super) fn slow_start(
    window: Option<gpb::Duration>,
    aggression: Option<core::RuntimeDouble>,
    min_weight_percent: Option<Percent>,
    warnings: &mut Warnings,
) -> Result<Option<SlowStartConfig>> {
    let convert = |w: &mut Warnings| -> Result<Option<SlowStartConfig>> {
        let window = match common::opt_duration(&window, "slow_start_window")? {
            None => return Ok(None),
            Some(d) if d.is_zero() => return Ok(None),
            Some(d) => d,
        };
        let aggression = runtime_double(aggression, 1.0, "aggression", w);
        if !aggression.is_finite() || aggression <= 0.0 {
            return Err(ConfigError::new("aggression.default_value", format!("{aggression} is not a number > 0")));
        }
        let min_weight_percent = common::percent_or(&min_weight_percent, 10.0, "min_weight_percent")?;
        Ok(Some(SlowStartConfig { window, aggression, min_weight_percent }))
    };
    warnings.within("slow_start_config", convert).at_field("slow_start_config")
}
