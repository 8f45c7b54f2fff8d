//! A cluster's balancing: the legacy `lb_policy` enum with its `*_lb_config`, or the typed
//! `load_balancing_policy` list (see [`super::lb_typed`]), plus `common_lb_config`. The
//! pieces both forms share are in [`super::lb_shared`].

use super::lb_shared::{
    Choice, CommonLb, ConsistentHashing, active_request_bias_of, choice_count_of, consistent_hashing_of,
    maglev_table_size, ring_sizes, slow_start, zone_aware_why,
};
use crate::config::cluster::lb_policy::DEFAULT_HEALTHY_PANIC_THRESHOLD;
use crate::config::cluster::{
    LbPolicy, LeastRequestConfig, LoadBalancing, MaglevConfig, RingHashConfig, RoundRobinConfig, SlowStartConfig,
};
use crate::config::convert::common;
use crate::config::error::{AtField, ConfigError, Result, Warnings};
use crate::pb::envoy::config::cluster::v3 as proto;

use proto::cluster::{self as c, CommonLbConfig, LbConfig};

/// The balancing fields of a cluster, taken out of it together.
pub(super) struct LbFields {
    pub lb_policy: i32,
    pub lb_config: Option<LbConfig>,
    pub load_balancing_policy: Option<proto::LoadBalancingPolicy>,
    pub common_lb_config: Option<CommonLbConfig>,
    pub lb_subset_config: Option<c::LbSubsetConfig>,
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

fn legacy_slow_start(proto: Option<c::SlowStartConfig>, warnings: &mut Warnings) -> Result<Option<SlowStartConfig>> {
    let Some(c::SlowStartConfig { slow_start_window, aggression, min_weight_percent }) = proto else {
        return Ok(None);
    };
    slow_start(slow_start_window, aggression, min_weight_percent, warnings)
}

#[cfg(test)]
mod tests;
