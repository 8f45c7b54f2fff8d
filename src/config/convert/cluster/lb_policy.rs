//! A cluster's balancing: the legacy `lb_policy` enum with its `*_lb_config`, or the typed
//! `load_balancing_policy` list (see [`super::lb_typed`]), plus `common_lb_config`.
//! Also the pieces both forms share: slow start, ring sizes, maglev table size.

use crate::config::cluster::lb_policy::{
    DEFAULT_HEALTHY_PANIC_THRESHOLD, DEFAULT_MAGLEV_TABLE_SIZE, DEFAULT_MAXIMUM_RING_SIZE, DEFAULT_MINIMUM_RING_SIZE,
    MAX_MAGLEV_TABLE_SIZE, MAX_RING_SIZE,
};
use crate::config::cluster::{
    HashKeySource, LbPolicy, LeastRequestConfig, LoadBalancing, MaglevConfig, RingHashConfig, RoundRobinConfig,
    SlowStartConfig,
};
use crate::config::convert::common;
use crate::config::error::{AtField, ConfigError, Result, Warnings};
use crate::pb::envoy::config::cluster::v3 as proto;
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::r#type::v3::Percent;
use crate::pb::google::protobuf as gpb;

use proto::cluster::{self as c, CommonLbConfig, LbConfig};

/// The balancing fields of a cluster, taken out of it together.
pub(super) struct LbFields {
    pub lb_policy: i32,
    pub lb_config: Option<LbConfig>,
    pub load_balancing_policy: Option<proto::LoadBalancingPolicy>,
    pub common_lb_config: Option<CommonLbConfig>,
    pub lb_subset_config: Option<c::LbSubsetConfig>,
}

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

/// Converts the balancing fields; `None` means `CLUSTER_PROVIDED`.
pub(super) fn load_balancing(fields: LbFields, warnings: &mut Warnings) -> Result<Option<LoadBalancing>> {
    let LbFields { lb_policy, lb_config, load_balancing_policy, common_lb_config, lb_subset_config } = fields;
    if lb_subset_config.is_some() {
        return Err(ConfigError::new("lb_subset_config", "subset load balancing is not supported"));
    }
    let common = warnings.within("common_lb_config", |w| common_lb(common_lb_config.unwrap_or_default(), w));
    let common = common.at_field("common_lb_config")?;
    let choice = match load_balancing_policy {
        Some(list) => {
            // Envoy uses `load_balancing_policy` whenever it is set.
            if lb_policy != c::LbPolicy::RoundRobin as i32 && lb_policy != c::LbPolicy::LoadBalancingPolicyConfig as i32
            {
                warnings.ignored("lb_policy", "load_balancing_policy takes precedence");
            }
            if let Some(config) = &lb_config {
                warnings.ignored(lb_config_name(config), "load_balancing_policy takes precedence");
            }
            warnings
                .within("load_balancing_policy", |w| {
                    super::lb_typed::policy_list(list, &common, super::lb_typed::Layer::Cluster, w)
                })
                .at_field("load_balancing_policy")?
        }
        None => legacy(lb_policy, lb_config, &common, warnings)?,
    };
    Ok(match choice {
        Choice::ClusterProvided => None,
        Choice::Policy(policy, locality) => Some(LoadBalancing {
            policy,
            locality_weighted: locality.unwrap_or(common.locality_weighted),
            healthy_panic_threshold: common.healthy_panic_threshold,
            subset_size: None,
        }),
        Choice::Subset(size, policy, locality) => Some(LoadBalancing {
            policy,
            locality_weighted: locality.unwrap_or(common.locality_weighted),
            healthy_panic_threshold: common.healthy_panic_threshold,
            subset_size: Some(size),
        }),
    })
}

fn legacy(lb_policy: i32, lb_config: Option<LbConfig>, common: &CommonLb, warnings: &mut Warnings) -> Result<Choice> {
    use c::LbPolicy as P;
    let kind =
        P::try_from(lb_policy).map_err(|_| ConfigError::new("lb_policy", format!("unknown policy {lb_policy}")))?;
    let belongs = matches!(
        (kind, &lb_config),
        (_, None)
            | (P::RoundRobin, Some(LbConfig::RoundRobinLbConfig(_)))
            | (P::LeastRequest, Some(LbConfig::LeastRequestLbConfig(_)))
            | (P::RingHash, Some(LbConfig::RingHashLbConfig(_)))
            | (P::Maglev, Some(LbConfig::MaglevLbConfig(_)))
    );
    if let (false, Some(config)) = (belongs, &lb_config) {
        warnings.ignored(lb_config_name(config), format!("not used by lb_policy {}", kind.as_str_name()));
    }
    let lb_config = if belongs { lb_config } else { None };
    let policy = match (kind, lb_config) {
        (P::RoundRobin, Some(LbConfig::RoundRobinLbConfig(config))) => {
            let c::RoundRobinLbConfig { slow_start_config } = config;
            let slow_start = warnings
                .within("round_robin_lb_config", |w| legacy_slow_start(slow_start_config, w))
                .at_field("round_robin_lb_config")?;
            LbPolicy::RoundRobin(RoundRobinConfig { slow_start })
        }
        (P::RoundRobin, _) => LbPolicy::RoundRobin(RoundRobinConfig::default()),
        (P::LeastRequest, Some(LbConfig::LeastRequestLbConfig(config))) => {
            let c::LeastRequestLbConfig { choice_count, active_request_bias, slow_start_config } = config;
            let convert = |w: &mut Warnings| -> Result<LeastRequestConfig> {
                Ok(LeastRequestConfig {
                    choice_count: choice_count_of(choice_count)?,
                    active_request_bias: active_request_bias_of(active_request_bias, w)?,
                    slow_start: legacy_slow_start(slow_start_config, w)?,
                    full_scan: false,
                })
            };
            LbPolicy::LeastRequest(
                warnings.within("least_request_lb_config", convert).at_field("least_request_lb_config")?,
            )
        }
        (P::LeastRequest, _) => LbPolicy::LeastRequest(LeastRequestConfig::default()),
        (P::Random, _) => LbPolicy::Random,
        (P::RingHash, config) => {
            let (min, max) = match config {
                Some(LbConfig::RingHashLbConfig(c::RingHashLbConfig {
                    minimum_ring_size,
                    hash_function,
                    maximum_ring_size,
                })) => {
                    use c::ring_hash_lb_config::HashFunction as H;
                    if hash_function != H::XxHash as i32 {
                        return Err(ConfigError::new(
                            "ring_hash_lb_config.hash_function",
                            "only XX_HASH is supported (MURMUR_HASH_2 would place keys differently)",
                        ));
                    }
                    (minimum_ring_size.map(|v| v.value), maximum_ring_size.map(|v| v.value))
                }
                _ => (None, None),
            };
            let (minimum_ring_size, maximum_ring_size) = ring_sizes(min, max).at_field("ring_hash_lb_config")?;
            LbPolicy::RingHash(RingHashConfig {
                minimum_ring_size,
                maximum_ring_size,
                hash_key: common.hashing.hash_key,
                hash_balance_factor: common.hashing.hash_balance_factor,
            })
        }
        (P::Maglev, config) => {
            let size = match config {
                Some(LbConfig::MaglevLbConfig(c::MaglevLbConfig { table_size })) => table_size.map(|v| v.value),
                _ => None,
            };
            let table_size = maglev_table_size(size).at_field("maglev_lb_config")?;
            LbPolicy::Maglev(MaglevConfig {
                table_size,
                hash_key: common.hashing.hash_key,
                hash_balance_factor: common.hashing.hash_balance_factor,
            })
        }
        (P::ClusterProvided, _) => return Ok(Choice::ClusterProvided),
        (P::LoadBalancingPolicyConfig, _) => {
            return Err(ConfigError::new("lb_policy", "LOAD_BALANCING_POLICY_CONFIG needs load_balancing_policy"));
        }
    };
    Ok(Choice::Policy(policy, None))
}

fn lb_config_name(config: &LbConfig) -> &'static str {
    match config {
        LbConfig::RingHashLbConfig(_) => "ring_hash_lb_config",
        LbConfig::MaglevLbConfig(_) => "maglev_lb_config",
        LbConfig::OriginalDstLbConfig(_) => "original_dst_lb_config",
        LbConfig::LeastRequestLbConfig(_) => "least_request_lb_config",
        LbConfig::RoundRobinLbConfig(_) => "round_robin_lb_config",
    }
}

fn common_lb(proto: CommonLbConfig, warnings: &mut Warnings) -> Result<CommonLb> {
    use c::common_lb_config::{ConsistentHashingLbConfig, LocalityConfigSpecifier as L};
    let CommonLbConfig {
        healthy_panic_threshold,
        update_merge_window,
        ignore_new_hosts_until_first_hc,
        close_connections_on_host_set_change,
        consistent_hashing_lb_config,
        override_host_status,
        locality_config_specifier,
    } = proto;
    if ignore_new_hosts_until_first_hc {
        return Err(ConfigError::new("ignore_new_hosts_until_first_hc", "not supported"));
    }
    if close_connections_on_host_set_change {
        return Err(ConfigError::new("close_connections_on_host_set_change", "not supported"));
    }
    if update_merge_window.is_some() {
        warnings.ignored("update_merge_window", "endpoint updates are applied as they arrive");
    }
    if override_host_status.is_some() {
        warnings.ignored("override_host_status", "only used by stateful sessions, which Outrider does not offer");
    }
    let healthy_panic_threshold =
        common::percent_or(&healthy_panic_threshold, DEFAULT_HEALTHY_PANIC_THRESHOLD, "healthy_panic_threshold")?;
    let locality_weighted = match locality_config_specifier {
        None => false,
        Some(L::LocalityWeightedLbConfig(_)) => true,
        Some(L::ZoneAwareLbConfig(_)) => {
            warnings.ignored("zone_aware_lb_config", zone_aware_why());
            false
        }
    };
    let hashing = match consistent_hashing_lb_config {
        None => ConsistentHashing::default(),
        Some(ConsistentHashingLbConfig { use_hostname_for_hashing, hash_balance_factor }) => {
            consistent_hashing_of(use_hostname_for_hashing, hash_balance_factor)
                .at_field("consistent_hashing_lb_config")?
        }
    };
    Ok(CommonLb { healthy_panic_threshold, locality_weighted, hashing })
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

fn legacy_slow_start(proto: Option<c::SlowStartConfig>, warnings: &mut Warnings) -> Result<Option<SlowStartConfig>> {
    let Some(c::SlowStartConfig { slow_start_window, aggression, min_weight_percent }) = proto else {
        return Ok(None);
    };
    slow_start(slow_start_window, aggression, min_weight_percent, warnings)
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

#[cfg(test)]
mod tests;
