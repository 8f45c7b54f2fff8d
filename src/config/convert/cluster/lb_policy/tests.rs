//! Balancing conversion, through the whole cluster converter so that paths are complete.

use std::time::Duration;

use serde_json::{Value, json};

use crate::config::cluster::{
    CswrrConfig, HashKeySource, LbPolicy, LeastRequestConfig, LoadBalancing, MaglevConfig, RingHashConfig,
    RoundRobinConfig, SlowStartConfig,
};
use crate::config::convert::cluster::cluster;
use crate::config::error::{ConfigError, Warnings};
use crate::pb::json;

const LBP: &str = "type.googleapis.com/envoy.extensions.load_balancing_policies";

fn convert(mut extra: Value) -> Result<(Option<LoadBalancing>, Warnings), ConfigError> {
    let mut value = json!({"name": "c", "type": "STATIC"});
    if let (Some(map), Some(extra)) = (value.as_object_mut(), extra.as_object_mut()) {
        map.append(extra);
    }
    let (proto, dropped) = json::from_value("envoy.config.cluster.v3.Cluster", value).unwrap();
    assert!(dropped.is_empty(), "{dropped:?}");
    let mut warnings = Warnings::new();
    cluster(proto, &mut warnings).map(|c| (c.load_balancing, warnings))
}

fn policy(extra: Value) -> LbPolicy {
    convert(extra).unwrap().0.unwrap().policy
}

fn error_path(extra: Value) -> String {
    convert(extra).unwrap_err().path().to_owned()
}

/// A `load_balancing_policy` with the given typed configs, in order.
fn typed(configs: &[Value]) -> Value {
    let policies: Vec<Value> =
        configs.iter().map(|c| json!({"typed_extension_config": {"name": "policy", "typed_config": c}})).collect();
    json!({"load_balancing_policy": {"policies": policies}})
}

const TYPED_AT: &str = "load_balancing_policy.policies[0].typed_extension_config.typed_config";

#[test]
fn no_policy_is_round_robin_with_envoy_defaults() {
    let lb = convert(json!({})).unwrap().0.unwrap();
    assert_eq!(lb.policy, LbPolicy::RoundRobin(RoundRobinConfig::default()));
    assert!(!lb.locality_weighted);
    assert_eq!(lb.healthy_panic_threshold, 50.0);
}

#[test]
fn legacy_policies_convert() {
    assert_eq!(policy(json!({"lb_policy": "RANDOM"})), LbPolicy::Random);
    assert_eq!(policy(json!({"lb_policy": "LEAST_REQUEST"})), LbPolicy::LeastRequest(LeastRequestConfig::default()));
    assert_eq!(policy(json!({"lb_policy": "RING_HASH"})), LbPolicy::RingHash(RingHashConfig::default()));
    assert_eq!(policy(json!({"lb_policy": "MAGLEV"})), LbPolicy::Maglev(MaglevConfig::default()));
    let lr = policy(json!({"lb_policy": "LEAST_REQUEST", "least_request_lb_config": {
        "choice_count": 3, "active_request_bias": {"default_value": 0.5, "runtime_key": "k"},
        "slow_start_config": {"slow_start_window": "30s"}}}));
    let slow_start = SlowStartConfig { window: Duration::from_secs(30), aggression: 1.0, min_weight_percent: 10.0 };
    let expected = LeastRequestConfig {
        choice_count: 3,
        active_request_bias: 0.5,
        slow_start: Some(slow_start),
        full_scan: false,
    };
    assert_eq!(lr, LbPolicy::LeastRequest(expected));
    let rr = policy(json!({"round_robin_lb_config": {"slow_start_config": {
        "slow_start_window": "10s", "aggression": {"default_value": 2.0}, "min_weight_percent": {"value": 25}}}}));
    let LbPolicy::RoundRobin(RoundRobinConfig { slow_start: Some(s) }) = rr else { panic!("{rr:?}") };
    assert_eq!((s.aggression, s.min_weight_percent), (2.0, 25.0));
}

#[test]
fn ring_hash_bounds_are_checked() {
    let rh = policy(
        json!({"lb_policy": "RING_HASH", "ring_hash_lb_config": {"minimum_ring_size": 16, "maximum_ring_size": 64},
        "common_lb_config": {"consistent_hashing_lb_config": {"use_hostname_for_hashing": true}}}),
    );
    let expected = RingHashConfig {
        minimum_ring_size: 16,
        maximum_ring_size: 64,
        hash_key: HashKeySource::Hostname,
        hash_balance_factor: None,
    };
    assert_eq!(rh, LbPolicy::RingHash(expected));
    let path = error_path(json!({"lb_policy": "RING_HASH",
            "ring_hash_lb_config": {"minimum_ring_size": 2048, "maximum_ring_size": 1024}}));
    assert_eq!(path, "ring_hash_lb_config.minimum_ring_size");
    let path = error_path(json!({"lb_policy": "RING_HASH", "ring_hash_lb_config": {"minimum_ring_size": 8388609}}));
    assert_eq!(path, "ring_hash_lb_config.minimum_ring_size");
    let path = error_path(json!({"lb_policy": "RING_HASH", "ring_hash_lb_config": {"hash_function": "MURMUR_HASH_2"}}));
    assert_eq!(path, "ring_hash_lb_config.hash_function");
    let path = error_path(typed(&[
        json!({"@type": format!("{LBP}.ring_hash.v3.RingHash"), "minimum_ring_size": 10, "maximum_ring_size": 5}),
    ]));
    assert_eq!(path, format!("{TYPED_AT}.minimum_ring_size"));
}

#[test]
fn maglev_table_size_must_be_prime() {
    let maglev = policy(json!({"lb_policy": "MAGLEV", "maglev_lb_config": {"table_size": 251}}));
    assert_eq!(maglev, LbPolicy::Maglev(MaglevConfig { table_size: 251, ..MaglevConfig::default() }));
    assert_eq!(
        error_path(json!({"lb_policy": "MAGLEV", "maglev_lb_config": {"table_size": 65536}})),
        "maglev_lb_config.table_size"
    );
    let path = error_path(typed(&[json!({"@type": format!("{LBP}.maglev.v3.Maglev"), "table_size": 1000})]));
    assert_eq!(path, format!("{TYPED_AT}.table_size"));
}

#[test]
fn typed_policies_convert() {
    let rr = typed(&[json!({"@type": format!("{LBP}.round_robin.v3.RoundRobin")})]);
    assert_eq!(policy(rr), LbPolicy::RoundRobin(RoundRobinConfig::default()));
    let lr =
        typed(&[json!({"@type": format!("{LBP}.least_request.v3.LeastRequest"), "selection_method": "FULL_SCAN"})]);
    assert_eq!(policy(lr), LbPolicy::LeastRequest(LeastRequestConfig { full_scan: true, ..Default::default() }));
    let random = typed(&[json!({"@type": format!("{LBP}.random.v3.Random"),
        "locality_lb_config": {"locality_weighted_lb_config": {}}})]);
    let lb = convert(random).unwrap().0.unwrap();
    assert_eq!((lb.policy, lb.locality_weighted), (LbPolicy::Random, true));
    let ring = typed(&[json!({"@type": format!("{LBP}.ring_hash.v3.RingHash"), "hash_function": "XX_HASH"})]);
    assert_eq!(policy(ring), LbPolicy::RingHash(RingHashConfig::default()));
    let path =
        error_path(typed(&[json!({"@type": format!("{LBP}.least_request.v3.LeastRequest"), "choice_count": 1})]));
    assert_eq!(path, format!("{TYPED_AT}.choice_count"));
}

#[test]
fn cswrr_defaults_and_limits() {
    let cswrr =
        typed(&[json!({"@type": format!("{LBP}.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin")})]);
    let config = CswrrConfig::default();
    assert_eq!(policy(cswrr), LbPolicy::ClientSideWeightedRoundRobin(config.clone()));
    assert_eq!(config.blackout_period, Duration::from_secs(10));
    assert_eq!(config.weight_expiration_period, Duration::from_secs(180));
    assert_eq!(config.weight_update_period, Duration::from_secs(1));
    assert_eq!(config.oob_reporting_period, Duration::from_secs(10));
    assert_eq!(config.error_utilization_penalty, 1.0);
    assert!(!config.enable_oob_load_report);

    let set =
        typed(&[json!({"@type": format!("{LBP}.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin"),
        "enable_oob_load_report": true, "blackout_period": "0s", "weight_update_period": "0.010s",
        "error_utilization_penalty": 0.5, "metric_names_for_computing_utilization": ["named_metrics.queue"]})]);
    let LbPolicy::ClientSideWeightedRoundRobin(config) = policy(set) else { panic!("not CSWRR") };
    assert!(config.enable_oob_load_report);
    assert_eq!(config.blackout_period, Duration::ZERO);
    assert_eq!(config.weight_update_period, Duration::from_millis(100), "clamped as gRPC does");
    assert_eq!(config.error_utilization_penalty, 0.5);
    assert_eq!(config.metric_names_for_computing_utilization, ["named_metrics.queue"]);

    let negative =
        typed(&[json!({"@type": format!("{LBP}.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin"),
        "error_utilization_penalty": -1.0})]);
    assert_eq!(error_path(negative), format!("{TYPED_AT}.error_utilization_penalty"));
}

#[test]
fn wrr_locality_wraps_the_endpoint_picking_policy() {
    let wrapped = typed(&[json!({"@type": format!("{LBP}.wrr_locality.v3.WrrLocality"),
        "endpoint_picking_policy": {"policies": [{"typed_extension_config": {"name": "cswrr", "typed_config": {
            "@type": format!("{LBP}.client_side_weighted_round_robin.v3.ClientSideWeightedRoundRobin"),
            "blackout_period": "5s"}}}]}})]);
    let lb = convert(wrapped).unwrap().0.unwrap();
    assert!(lb.locality_weighted);
    let LbPolicy::ClientSideWeightedRoundRobin(config) = lb.policy else { panic!("not CSWRR") };
    assert_eq!(config.blackout_period, Duration::from_secs(5));

    let nested = typed(&[json!({"@type": format!("{LBP}.wrr_locality.v3.WrrLocality"),
        "endpoint_picking_policy": {"policies": [{"typed_extension_config": {"name": "again", "typed_config": {
            "@type": format!("{LBP}.wrr_locality.v3.WrrLocality")}}}]}})]);
    let path = error_path(nested);
    assert!(path.starts_with(&format!("{TYPED_AT}.endpoint_picking_policy.policies[0]")), "{path}");
}

#[test]
fn first_supported_policy_is_taken() {
    let list = typed(&[
        json!({"@type": format!("{LBP}.pick_first.v3.PickFirst")}),
        json!({"@type": format!("{LBP}.random.v3.Random")}),
        json!({"@type": format!("{LBP}.maglev.v3.Maglev")}),
    ]);
    let (lb, warnings) = convert(list).unwrap();
    assert_eq!(lb.unwrap().policy, LbPolicy::Random);
    assert_eq!(warnings.items()[0].path, TYPED_AT);
    let none = typed(&[json!({"@type": format!("{LBP}.pick_first.v3.PickFirst")})]);
    assert_eq!(error_path(none), "load_balancing_policy.policies");
}

#[test]
fn common_lb_config_applies() {
    let lb = convert(json!({"common_lb_config": {"healthy_panic_threshold": {"value": 0},
        "locality_weighted_lb_config": {}, "update_merge_window": "1s"}}));
    let (lb, warnings) = lb.unwrap();
    let lb = lb.unwrap();
    assert_eq!((lb.healthy_panic_threshold, lb.locality_weighted), (0.0, true));
    assert_eq!(warnings.items()[0].path, "common_lb_config.update_merge_window");
    let (_, warnings) = convert(json!({"common_lb_config": {"zone_aware_lb_config": {}}})).unwrap();
    assert_eq!(warnings.items()[0].path, "common_lb_config.zone_aware_lb_config");
    assert_eq!(
        error_path(json!({"common_lb_config": {"healthy_panic_threshold": {"value": 120}}})),
        "common_lb_config.healthy_panic_threshold"
    );
    assert_eq!(error_path(json!({"lb_subset_config": {}})), "lb_subset_config");
}

#[test]
fn cluster_provided_goes_with_original_dst_only() {
    let (lb, _) = convert(json!({"type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED"})).unwrap();
    assert_eq!(lb, None);
    assert_eq!(error_path(json!({"type": "ORIGINAL_DST"})), "lb_policy");
    assert_eq!(error_path(json!({"lb_policy": "CLUSTER_PROVIDED"})), "lb_policy");
}

#[test]
fn peak_ewma_is_chosen_by_extension_name() {
    use crate::config::cluster::lb_policy::{PEAK_EWMA_POLICY_NAME, PeakEwmaConfig};
    let entry = |typed_config: Value| {
        json!({"load_balancing_policy": {"policies": [
            {"typed_extension_config": {"name": PEAK_EWMA_POLICY_NAME, "typed_config": typed_config}}
        ]}})
    };
    let (lb, warnings) =
        convert(entry(json!({"@type": "type.googleapis.com/google.protobuf.Struct", "value": {}}))).unwrap();
    assert_eq!(lb.unwrap().policy, LbPolicy::PeakEwma(PeakEwmaConfig::default()));
    assert!(warnings.is_empty(), "{warnings:?}");
    // Settings Outrider would not read are refused, not ignored.
    let settings = json!({"@type": "type.googleapis.com/google.protobuf.Struct", "value": {"decay": "5s"}});
    let error = convert(entry(settings)).unwrap_err();
    assert!(error.path().ends_with("typed_config"), "{error:?}");
    // Envoy's contrib message carries them.
    let envoys = json!({"@type": ENVOY_PEAK_EWMA, "default_rtt": "0.05s"});
    let (lb, _) = convert(entry(envoys)).unwrap();
    let expected = PeakEwmaConfig { default_rtt: Duration::from_millis(50), ..PeakEwmaConfig::envoy_contrib() };
    assert_eq!(lb.unwrap().policy, LbPolicy::PeakEwma(expected));
}

#[test]
fn the_adaptive_policy_is_chosen_by_extension_name_and_has_no_settings() {
    use crate::config::cluster::lb_policy::{ADAPTIVE_POLICY_NAME, AdaptiveConfig};
    let entry = |typed_config: Option<Value>| {
        let mut extension = json!({"name": ADAPTIVE_POLICY_NAME});
        if let Some(config) = typed_config {
            extension["typed_config"] = config;
        }
        json!({"load_balancing_policy": {"policies": [
            {"typed_extension_config": extension},
            {"typed_extension_config": {"name": "envoy.load_balancing_policies.round_robin",
                "typed_config": {"@type": "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"}}}
        ]}})
    };
    for config in [None, Some(json!({"@type": "type.googleapis.com/google.protobuf.Struct", "value": {}}))] {
        let (lb, warnings) = convert(entry(config)).unwrap();
        assert_eq!(lb.unwrap().policy, LbPolicy::Adaptive(AdaptiveConfig::default()));
        assert!(warnings.is_empty(), "{warnings:?}");
    }
    // A setting it would not read is refused, with its path, not skipped for the next policy.
    let settings = json!({"@type": "type.googleapis.com/google.protobuf.Struct", "value": {"warmup": "5s"}});
    let error = convert(entry(Some(settings))).unwrap_err();
    assert_eq!(error.path(), "load_balancing_policy.policies[0].typed_extension_config.typed_config", "{error:?}");
}

const ENVOY_PEAK_EWMA: &str = "type.googleapis.com/envoy.extensions.load_balancing_policies.peak_ewma.v3alpha.PeakEwma";

/// A configuration written for an Envoy contrib build: Envoy's name and type select
/// Outrider's peak-EWMA with Envoy's defaults and the message's settings.
#[test]
fn envoys_contrib_peak_ewma_is_read() {
    use crate::config::cluster::lb_policy::PeakEwmaConfig;
    let entry = |typed_config: Value| {
        json!({"load_balancing_policy": {"policies": [
            {"typed_extension_config": {"name": "envoy.load_balancing_policies.peak_ewma", "typed_config": typed_config}}
        ]}})
    };
    let (lb, warnings) = convert(entry(json!({"@type": ENVOY_PEAK_EWMA}))).unwrap();
    assert_eq!(lb.unwrap().policy, LbPolicy::PeakEwma(PeakEwmaConfig::envoy_contrib()));
    assert!(warnings.is_empty(), "{warnings:?}");

    let settings = json!({"@type": ENVOY_PEAK_EWMA, "decay_time": "10s", "aggregation_interval": "0.2s",
        "max_samples_per_host": 500, "default_rtt": "0.02s", "penalty_value": 5000.0});
    let (lb, _) = convert(entry(settings)).unwrap();
    let expected = PeakEwmaConfig {
        default_rtt: Duration::from_millis(20),
        unmeasured_busy_cost: Some(5000.0),
        ..PeakEwmaConfig::envoy_contrib()
    };
    assert_eq!(lb.unwrap().policy, LbPolicy::PeakEwma(expected));

    // What Outrider cannot honour is refused with its path.
    let path = |settings: Value| convert(entry(settings)).unwrap_err().path().to_owned();
    assert!(path(json!({"@type": ENVOY_PEAK_EWMA, "decay_time": "5s"})).ends_with("decay_time"));
    assert!(path(json!({"@type": ENVOY_PEAK_EWMA, "penalty_value": -1.0})).ends_with("penalty_value"));
}

/// `hash_balance_factor` reaches ring hash and maglev from every place Envoy reads it, and a
/// factor below 100 (Envoy's `gte: 100`) is refused at its path.
#[test]
fn hash_balance_factor_is_read_and_checked() {
    let factor = |policy: LbPolicy| match policy {
        LbPolicy::RingHash(c) => c.hash_balance_factor,
        LbPolicy::Maglev(c) => c.hash_balance_factor,
        other => panic!("{other:?}"),
    };
    let common = json!({"consistent_hashing_lb_config": {"hash_balance_factor": 150}});
    assert_eq!(factor(policy(json!({"lb_policy": "RING_HASH", "common_lb_config": common}))), Some(150));
    assert_eq!(factor(policy(json!({"lb_policy": "MAGLEV", "common_lb_config": common}))), Some(150));
    assert_eq!(factor(policy(json!({"lb_policy": "MAGLEV"}))), None);
    let typed_ring = |extra: Value| {
        let mut config = json!({"@type": format!("{LBP}.ring_hash.v3.RingHash")});
        if let (Some(map), Some(extra)) = (config.as_object_mut(), extra.as_object().cloned()) {
            map.extend(extra);
        }
        typed(&[config])
    };
    let nested = json!({"consistent_hashing_lb_config": {"hash_balance_factor": 200}});
    assert_eq!(factor(policy(typed_ring(nested))), Some(200));
    // The deprecated top-level field counts only without `consistent_hashing_lb_config`.
    assert_eq!(factor(policy(typed_ring(json!({"hash_balance_factor": 125})))), Some(125));
    let both = json!({"hash_balance_factor": 125, "consistent_hashing_lb_config": {}});
    assert_eq!(factor(policy(typed_ring(both))), None);
    let maglev = typed(&[json!({"@type": format!("{LBP}.maglev.v3.Maglev"),
        "consistent_hashing_lb_config": {"hash_balance_factor": 101}})]);
    assert_eq!(factor(policy(maglev)), Some(101));

    let low = json!({"lb_policy": "RING_HASH",
        "common_lb_config": {"consistent_hashing_lb_config": {"hash_balance_factor": 99}}});
    assert_eq!(error_path(low), "common_lb_config.consistent_hashing_lb_config.hash_balance_factor");
    let low = typed_ring(json!({"consistent_hashing_lb_config": {"hash_balance_factor": 0}}));
    assert_eq!(error_path(low), format!("{TYPED_AT}.consistent_hashing_lb_config.hash_balance_factor"));
}

/// `random_subsetting` wraps a child policy (also `wrr_locality`); a bad size, a missing or
/// non-picking child and nesting are refused at their paths.
#[test]
fn random_subsetting_wraps_a_child_policy() {
    let subsetting = |inner: Value| {
        json!({"@type": format!("{LBP}.random_subsetting.v3.RandomSubsetting"), "subset_size": 10,
            "child_policy": {"policies": [{"typed_extension_config": {"name": "child", "typed_config": inner}}]}})
    };
    let least = json!({"@type": format!("{LBP}.least_request.v3.LeastRequest")});
    let (lb, _) = convert(typed(&[subsetting(least.clone())])).unwrap();
    let lb = lb.unwrap();
    assert_eq!((lb.subset_size, &lb.policy), (Some(10), &LbPolicy::LeastRequest(LeastRequestConfig::default())));
    let wrr = json!({"@type": format!("{LBP}.wrr_locality.v3.WrrLocality"),
        "endpoint_picking_policy": {"policies": [{"typed_extension_config": {"name": "rr", "typed_config": least}}]}});
    let (lb, _) = convert(typed(&[subsetting(wrr)])).unwrap();
    assert!(lb.as_ref().is_some_and(|lb| lb.locality_weighted && lb.subset_size == Some(10)), "{lb:?}");
    assert_eq!(policy(json!({"lb_policy": "LEAST_REQUEST"})), LbPolicy::LeastRequest(LeastRequestConfig::default()));

    let at = format!("{TYPED_AT}.subset_size");
    let zero = json!({"@type": format!("{LBP}.random_subsetting.v3.RandomSubsetting"), "subset_size": 0,
        "child_policy": {"policies": []}});
    assert_eq!(error_path(typed(&[zero])), at);
    let no_child = json!({"@type": format!("{LBP}.random_subsetting.v3.RandomSubsetting"), "subset_size": 3});
    assert_eq!(error_path(typed(&[no_child])), format!("{TYPED_AT}.child_policy"));
    let nested = subsetting(subsetting(json!({"@type": format!("{LBP}.random.v3.Random")})));
    assert_eq!(
        error_path(typed(&[nested])),
        format!("{TYPED_AT}.child_policy.policies[0].typed_extension_config.typed_config")
    );
    let provided = subsetting(json!({"@type": format!("{LBP}.cluster_provided.v3.ClusterProvided")}));
    assert!(error_path(typed(&[provided])).starts_with(&format!("{TYPED_AT}.child_policy")));
}
