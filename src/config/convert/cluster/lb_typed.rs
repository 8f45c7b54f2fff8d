//! `load_balancing_policy`: the typed policy list. As in Envoy, the first policy Outrider
//! knows is used and the ones before it are skipped; a known policy with a bad setting is
//! an error, not a reason to skip.

// Exhaustive destructuring names deprecated fields too; several are what Istio still sends.
#![allow(deprecated)]

use prost::{Message, Name};

use super::lb_shared::{self as shared, Choice, CommonLb, ConsistentHashing};
use crate::config::cluster::lb_policy::{
    ADAPTIVE_POLICY_NAME, AdaptiveConfig, MIN_WEIGHT_UPDATE_PERIOD, PEAK_EWMA_POLICY_NAME, PeakEwmaConfig,
};
use crate::config::cluster::{
    CswrrConfig, LbPolicy, LeastRequestConfig, MaglevConfig, OobReportingConfig, RingHashConfig, RoundRobinConfig,
};
use crate::config::convert::common;
use crate::config::error::{AtField, ConfigError, Result, Warnings};
use crate::pb::envoy::config::cluster::v3 as cluster;
use crate::pb::envoy::extensions::load_balancing_policies as lbp;
use crate::pb::google::protobuf as gpb;

use lbp::common::v3 as lb_common;

/// Envoy's contrib peak-EWMA policy config (see [`envoy_peak_ewma`]).
const ENVOY_PEAK_EWMA: &str = "envoy.extensions.load_balancing_policies.peak_ewma.v3alpha.PeakEwma";
const CLUSTER_PROVIDED: &str = "envoy.extensions.load_balancing_policies.cluster_provided.v3.ClusterProvided";

/// Where a policy list sits: the layers it is inside decide what it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layer {
    /// The cluster's own `load_balancing_policy`.
    Cluster,
    /// `random_subsetting`'s `child_policy`: a policy that picks, or `wrr_locality` over one.
    Subsetting,
    /// `wrr_locality`'s `endpoint_picking_policy`: a policy that picks endpoints, nothing more.
    WrrLocality,
}

/// The first supported policy of the list at `layer`.
pub(super) fn policy_list(
    proto: cluster::LoadBalancingPolicy,
    common: &CommonLb,
    layer: Layer,
    warnings: &mut Warnings,
) -> Result<Choice> {
    let cluster::LoadBalancingPolicy { policies } = proto;
    for (i, entry) in policies.into_iter().enumerate() {
        let at = format!("policies[{i}].typed_extension_config");
        let cluster::load_balancing_policy::Policy { typed_extension_config } = entry;
        let Some(config) = typed_extension_config else {
            return Err(ConfigError::new(at, "is required"));
        };
        if config.name == PEAK_EWMA_POLICY_NAME {
            let at = format!("{at}.typed_config");
            return peak_ewma(config.typed_config.as_ref()).at_field(&at);
        }
        if config.name == ADAPTIVE_POLICY_NAME {
            let at = format!("{at}.typed_config");
            return adaptive(config.typed_config.as_ref()).at_field(&at);
        }
        let Some(any) = config.typed_config else {
            warnings.ignored(at, format!("policy {:?} has no config Outrider knows; trying the next", config.name));
            continue;
        };
        let at = format!("{at}.typed_config");
        let choice = warnings.within(&at, |w| policy(&any, common, layer, w)).at_field(&at)?;
        match choice {
            Some(choice) => return Ok(choice),
            None => {
                warnings.ignored(at, format!("{} is not supported; trying the next", common::type_name(&any.type_url)))
            }
        }
    }
    Err(ConfigError::new("policies", "none of the policies is supported"))
}

/// One typed policy; `None` when Outrider does not know its type.
fn policy(any: &gpb::Any, common: &CommonLb, layer: Layer, warnings: &mut Warnings) -> Result<Option<Choice>> {
    let name = common::type_name(&any.type_url);
    let choice = if name == lbp::round_robin::v3::RoundRobin::full_name() {
        round_robin(common::unpack(any)?, warnings)?
    } else if name == lbp::least_request::v3::LeastRequest::full_name() {
        least_request(common::unpack(any)?, warnings)?
    } else if name == lbp::random::v3::Random::full_name() {
        let lbp::random::v3::Random { locality_lb_config } = common::unpack(any)?;
        Choice::Policy(LbPolicy::Random, locality(locality_lb_config, warnings))
    } else if name == lbp::ring_hash::v3::RingHash::full_name() {
        ring_hash(common::unpack(any)?, common)?
    } else if name == lbp::maglev::v3::Maglev::full_name() {
        maglev(common::unpack(any)?, common)?
    } else if name == lbp::client_side_weighted_round_robin::v3::ClientSideWeightedRoundRobin::full_name() {
        Choice::Policy(LbPolicy::ClientSideWeightedRoundRobin(cswrr(common::unpack(any)?, warnings)?), None)
    } else if name == lbp::wrr_locality::v3::WrrLocality::full_name() {
        if layer == Layer::WrrLocality {
            return Err(ConfigError::new("", "wrr_locality cannot be nested in wrr_locality"));
        }
        let lbp::wrr_locality::v3::WrrLocality { endpoint_picking_policy } = common::unpack(any)?;
        let inner =
            endpoint_picking_policy.ok_or_else(|| ConfigError::new("endpoint_picking_policy", "is required"))?;
        let inner = warnings
            .within("endpoint_picking_policy", |w| policy_list(inner, common, Layer::WrrLocality, w))
            .at_field("endpoint_picking_policy")?;
        match inner {
            Choice::Policy(policy, _) => Choice::Policy(policy, Some(true)),
            // `random_subsetting` is refused inside `wrr_locality` before it gets here.
            Choice::ClusterProvided | Choice::Subset(..) => {
                return Err(ConfigError::new("endpoint_picking_policy", "must be a policy that picks endpoints"));
            }
        }
    } else if name == lbp::random_subsetting::v3::RandomSubsetting::full_name() {
        if layer != Layer::Cluster {
            return Err(ConfigError::new("", "random_subsetting must be the cluster's own policy, not a child"));
        }
        random_subsetting(common::unpack(any)?, common, warnings)?
    } else if name == ENVOY_PEAK_EWMA {
        Choice::Policy(LbPolicy::PeakEwma(envoy_peak_ewma(any)?), None)
    } else if name == CLUSTER_PROVIDED && layer == Layer::Cluster {
        Choice::ClusterProvided
    } else {
        return Ok(None);
    };
    Ok(Some(choice))
}

/// `random_subsetting` (gRPC's A68; Envoy 1.40 does not implement it, nor carry its proto):
/// the child policy over `subset_size` endpoints per priority.
/// Which endpoints is `lb::subset`'s business: Outrider seeds the rendezvous hash with the
/// sidecar's node id where gRPC draws a random salt, so a restarted pod keeps its subset.
fn random_subsetting(
    proto: lbp::random_subsetting::v3::RandomSubsetting,
    common: &CommonLb,
    warnings: &mut Warnings,
) -> Result<Choice> {
    let lbp::random_subsetting::v3::RandomSubsetting { subset_size, child_policy } = proto;
    let size = match subset_size.map(|v| v.value) {
        Some(size) if size > 0 => size,
        Some(_) => return Err(ConfigError::new("subset_size", "must be greater than 0")),
        None => return Err(ConfigError::new("subset_size", "is required")),
    };
    let child = child_policy.ok_or_else(|| ConfigError::new("child_policy", "is required"))?;
    let child = warnings
        .within("child_policy", |w| policy_list(child, common, Layer::Subsetting, w))
        .at_field("child_policy")?;
    match child {
        Choice::Policy(policy, locality) => Ok(Choice::Subset(size, policy, locality)),
        Choice::ClusterProvided | Choice::Subset(..) => {
            Err(ConfigError::new("child_policy", "must be a policy that picks endpoints"))
        }
    }
}

/// Outrider's own peak-EWMA policy, chosen by extension name, with Linkerd's defaults. Its
/// typed config may be empty (an empty `google.protobuf.Struct` or `TypedStruct` is usual)
/// or Envoy's contrib `PeakEwma`, whose settings are then read; settings in any other form
/// are refused rather than ignored.
fn peak_ewma(typed_config: Option<&gpb::Any>) -> Result<Choice> {
    let config = match typed_config {
        Some(any) if common::type_name(&any.type_url) == ENVOY_PEAK_EWMA => envoy_peak_ewma(any)?,
        Some(any) if !any.value.is_empty() => {
            let kind = common::type_name(&any.type_url);
            return Err(ConfigError::new(
                "",
                format!("peak_ewma settings are read from {ENVOY_PEAK_EWMA}, not {kind}"),
            ));
        }
        _ => PeakEwmaConfig::default(),
    };
    Ok(Choice::Policy(LbPolicy::PeakEwma(config), None))
}

/// Outrider's adaptive policy, chosen by extension name. It has no settings: its typed
/// config may be absent or empty (an empty `google.protobuf.Struct` or `TypedStruct`), and
/// anything in it is refused rather than ignored.
fn adaptive(typed_config: Option<&gpb::Any>) -> Result<Choice> {
    if let Some(any) = typed_config.filter(|any| !any.value.is_empty()) {
        let kind = common::type_name(&any.type_url);
        return Err(ConfigError::new("", format!("the adaptive policy has no settings; {kind} is not empty")));
    }
    Ok(Choice::Policy(LbPolicy::Adaptive(AdaptiveConfig::default()), None))
}

/// Envoy's contrib peak-EWMA policy (`envoy.load_balancing_policies.peak_ewma`), served by
/// Outrider's peak-EWMA with Envoy's defaults and cost for an unmeasured busy endpoint.
/// `aggregation_interval` and `max_samples_per_host` tune how Envoy's workers pool their
/// samples; Outrider's estimate is one per endpoint that every response updates at once, so
/// neither has anything to tune (any valid value is accepted). The estimate decays at the
/// endpoint stats' one rate, 10 s, Envoy's default: another `decay_time` is refused.
fn envoy_peak_ewma(any: &gpb::Any) -> Result<PeakEwmaConfig> {
    use crate::pb::envoy_peak_ewma::PeakEwma;
    let proto = PeakEwma::decode(any.value.as_slice())
        .map_err(|e| ConfigError::new("", format!("cannot decode {ENVOY_PEAK_EWMA}: {e}")))?;
    let PeakEwma { decay_time, aggregation_interval, max_samples_per_host: _, default_rtt, penalty_value } = proto;
    let mut config = PeakEwmaConfig::envoy_contrib();
    if let Some(decay) = decay_time {
        let decay = common::duration(&decay).at_field("decay_time")?;
        if decay != config.decay {
            return Err(ConfigError::new("decay_time", "only 10s is supported: the latency estimate is per endpoint"));
        }
    }
    if let Some(interval) = aggregation_interval {
        common::duration(&interval).at_field("aggregation_interval")?;
    }
    if let Some(rtt) = default_rtt {
        config.default_rtt = common::duration(&rtt).at_field("default_rtt")?;
    }
    if let Some(penalty) = penalty_value {
        if !penalty.value.is_finite() || penalty.value < 0.0 {
            return Err(ConfigError::new("penalty_value", "must be a finite number, not negative"));
        }
        config.unmeasured_busy_cost = Some(penalty.value);
    }
    Ok(config)
}

fn round_robin(proto: lbp::round_robin::v3::RoundRobin, warnings: &mut Warnings) -> Result<Choice> {
    let lbp::round_robin::v3::RoundRobin { slow_start_config, locality_lb_config } = proto;
    let slow_start = typed_slow_start(slow_start_config, warnings)?;
    Ok(Choice::Policy(LbPolicy::RoundRobin(RoundRobinConfig { slow_start }), locality(locality_lb_config, warnings)))
}

fn least_request(proto: lbp::least_request::v3::LeastRequest, warnings: &mut Warnings) -> Result<Choice> {
    use lbp::least_request::v3::least_request::SelectionMethod;
    let lbp::least_request::v3::LeastRequest {
        choice_count,
        active_request_bias,
        slow_start_config,
        locality_lb_config,
        enable_full_scan,
        selection_method,
    } = proto;
    let full_scan = match SelectionMethod::try_from(selection_method) {
        Ok(SelectionMethod::NChoices) => common::bool_or(&enable_full_scan, false),
        Ok(SelectionMethod::FullScan) => true,
        Err(_) => return Err(ConfigError::new("selection_method", format!("unknown method {selection_method}"))),
    };
    let config = LeastRequestConfig {
        choice_count: shared::choice_count_of(choice_count)?,
        active_request_bias: shared::active_request_bias_of(active_request_bias, warnings)?,
        slow_start: typed_slow_start(slow_start_config, warnings)?,
        full_scan,
    };
    Ok(Choice::Policy(LbPolicy::LeastRequest(config), locality(locality_lb_config, warnings)))
}

fn ring_hash(proto: lbp::ring_hash::v3::RingHash, common: &CommonLb) -> Result<Choice> {
    use lbp::ring_hash::v3::ring_hash::HashFunction as H;
    let lbp::ring_hash::v3::RingHash {
        hash_function,
        minimum_ring_size,
        maximum_ring_size,
        use_hostname_for_hashing,
        hash_balance_factor,
        consistent_hashing_lb_config,
        locality_weighted_lb_config,
    } = proto;
    match H::try_from(hash_function) {
        Ok(H::DefaultHash | H::XxHash) => {}
        _ => {
            return Err(ConfigError::new(
                "hash_function",
                "only XX_HASH is supported (MURMUR_HASH_2 would place keys differently)",
            ));
        }
    }
    let (minimum_ring_size, maximum_ring_size) =
        shared::ring_sizes(minimum_ring_size.map(|v| v.value), maximum_ring_size.map(|v| v.value))?;
    // The deprecated top-level fields count only without `consistent_hashing_lb_config`.
    let hashing = match consistent_hashing_lb_config {
        Some(config) => consistent_hashing(config)?,
        None if use_hostname_for_hashing || hash_balance_factor.is_some() => {
            shared::consistent_hashing_of(use_hostname_for_hashing, hash_balance_factor)?
        }
        None => common.hashing,
    };
    let ConsistentHashing { hash_key, hash_balance_factor } = hashing;
    let config = RingHashConfig { minimum_ring_size, maximum_ring_size, hash_key, hash_balance_factor };
    Ok(Choice::Policy(LbPolicy::RingHash(config), locality_weighted_lb_config.map(|_| true)))
}

fn maglev(proto: lbp::maglev::v3::Maglev, common: &CommonLb) -> Result<Choice> {
    let lbp::maglev::v3::Maglev { table_size, consistent_hashing_lb_config, locality_weighted_lb_config } = proto;
    let table_size = shared::maglev_table_size(table_size.map(|v| v.value))?;
    let ConsistentHashing { hash_key, hash_balance_factor } = match consistent_hashing_lb_config {
        Some(config) => consistent_hashing(config)?,
        None => common.hashing,
    };
    let config = MaglevConfig { table_size, hash_key, hash_balance_factor };
    Ok(Choice::Policy(LbPolicy::Maglev(config), locality_weighted_lb_config.map(|_| true)))
}

fn consistent_hashing(proto: lb_common::ConsistentHashingLbConfig) -> Result<ConsistentHashing> {
    let lb_common::ConsistentHashingLbConfig { use_hostname_for_hashing, hash_balance_factor, hash_policy } = proto;
    if !hash_policy.is_empty() {
        return Err(ConfigError::new(
            "consistent_hashing_lb_config.hash_policy",
            "cluster-level hash policies are not supported; set them on the route",
        ));
    }
    shared::consistent_hashing_of(use_hostname_for_hashing, hash_balance_factor)
        .at_field("consistent_hashing_lb_config")
}

fn cswrr(
    proto: lbp::client_side_weighted_round_robin::v3::ClientSideWeightedRoundRobin,
    warnings: &mut Warnings,
) -> Result<CswrrConfig> {
    let lbp::client_side_weighted_round_robin::v3::ClientSideWeightedRoundRobin {
        enable_oob_load_report,
        oob_reporting_period,
        blackout_period,
        weight_expiration_period,
        weight_update_period,
        error_utilization_penalty,
        metric_names_for_computing_utilization,
        slow_start_config,
        oob_reporting_config,
    } = proto;
    let defaults = CswrrConfig::default();
    let duration_or = |value: &Option<gpb::Duration>, field: &str, default| {
        common::opt_duration(value, field).map(|d| d.unwrap_or(default))
    };
    let penalty = error_utilization_penalty.map_or(defaults.error_utilization_penalty, |v| f64::from(v.value));
    if !penalty.is_finite() || penalty < 0.0 {
        return Err(ConfigError::new("error_utilization_penalty", format!("{penalty} is not a number ≥ 0")));
    }
    for (i, name) in metric_names_for_computing_utilization.iter().enumerate() {
        if !is_orca_metric_name(name) {
            return Err(ConfigError::new(
                format!("metric_names_for_computing_utilization[{i}]"),
                format!("{name:?} is not an ORCA utilization metric (named_metrics.<k>, utilization.<k>, ...)"),
            ));
        }
    }
    Ok(CswrrConfig {
        enable_oob_load_report: common::bool_or(&enable_oob_load_report, defaults.enable_oob_load_report),
        oob_reporting_period: duration_or(
            &oob_reporting_period,
            "oob_reporting_period",
            defaults.oob_reporting_period,
        )?,
        oob_reporting: oob_reporting(oob_reporting_config).at_field("oob_reporting_config")?,
        blackout_period: duration_or(&blackout_period, "blackout_period", defaults.blackout_period)?,
        weight_expiration_period: duration_or(
            &weight_expiration_period,
            "weight_expiration_period",
            defaults.weight_expiration_period,
        )?,
        weight_update_period: duration_or(
            &weight_update_period,
            "weight_update_period",
            defaults.weight_update_period,
        )?
        .max(MIN_WEIGHT_UPDATE_PERIOD),
        error_utilization_penalty: penalty,
        metric_names_for_computing_utilization,
        slow_start: typed_slow_start(slow_start_config, warnings)?,
    })
}

fn oob_reporting(proto: Option<lb_common::OrcaOobReportingConfig>) -> Result<OobReportingConfig> {
    let Some(lb_common::OrcaOobReportingConfig { port_value, authority, transport_socket_match_criteria }) = proto
    else {
        return Ok(OobReportingConfig::default());
    };
    if transport_socket_match_criteria.is_some() {
        return Err(ConfigError::new("transport_socket_match_criteria", "not supported"));
    }
    let port = match port_value {
        0 => None,
        p => Some(u16::try_from(p).map_err(|_| ConfigError::new("port_value", format!("{p} is not a port")))?),
    };
    // Sent as the stream's `:authority`: it must be one.
    if !authority.is_empty() && authority.parse::<http::uri::Authority>().is_err() {
        return Err(ConfigError::new("authority", format!("{authority:?} is not a valid :authority")));
    }
    Ok(OobReportingConfig { port, authority })
}

/// The ORCA metric names Envoy's weight manager understands.
fn is_orca_metric_name(name: &str) -> bool {
    matches!(name, "cpu_utilization" | "mem_utilization" | "application_utilization")
        || ["named_metrics.", "utilization."]
            .iter()
            .any(|prefix| name.strip_prefix(prefix).is_some_and(|key| !key.is_empty()))
}

fn typed_slow_start(
    proto: Option<lb_common::SlowStartConfig>,
    warnings: &mut Warnings,
) -> Result<Option<crate::config::cluster::SlowStartConfig>> {
    let Some(lb_common::SlowStartConfig { slow_start_window, aggression, min_weight_percent }) = proto else {
        return Ok(None);
    };
    shared::slow_start(slow_start_window, aggression, min_weight_percent, warnings)
}

/// A typed policy's own `locality_lb_config`: `Some(true)` for locality weighting,
/// `Some(false)` when set to anything else, `None` when absent.
fn locality(proto: Option<lb_common::LocalityLbConfig>, warnings: &mut Warnings) -> Option<bool> {
    use lb_common::locality_lb_config::LocalityConfigSpecifier as L;
    let lb_common::LocalityLbConfig { locality_config_specifier } = proto?;
    Some(match locality_config_specifier {
        Some(L::LocalityWeightedLbConfig(_)) => true,
        Some(L::ZoneAwareLbConfig(_)) => {
            warnings.ignored("locality_lb_config.zone_aware_lb_config", shared::zone_aware_why());
            false
        }
        None => false,
    })
}
