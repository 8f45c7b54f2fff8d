//! How a cluster picks an endpoint: the policy, its settings, and the layers around it
//! (locality weighting, panic threshold). Defaults are Envoy's (see `docs/architecture.md`).

use std::time::Duration;

/// Envoy's `common_lb_config.healthy_panic_threshold`, in percent.
pub const DEFAULT_HEALTHY_PANIC_THRESHOLD: f64 = 50.0;
/// Ring hash bounds: Envoy's defaults and its hard upper limit for both.
pub const DEFAULT_MINIMUM_RING_SIZE: u64 = 1024;
pub const DEFAULT_MAXIMUM_RING_SIZE: u64 = 8_388_608;
pub const MAX_RING_SIZE: u64 = 8_388_608;
/// Maglev's default table size (a prime) and Envoy's upper limit.
pub const DEFAULT_MAGLEV_TABLE_SIZE: u64 = 65537;
pub const MAX_MAGLEV_TABLE_SIZE: u64 = 5_000_011;
/// The shortest CSWRR weight update period; shorter configured values are raised to it, as
/// gRPC does, so that a typo cannot make the weights task spin.
pub const MIN_WEIGHT_UPDATE_PERIOD: Duration = Duration::from_millis(100);
/// The `load_balancing_policy` extension name that selects peak-EWMA (there is no Envoy
/// `lb_policy` value for it).
pub const PEAK_EWMA_POLICY_NAME: &str = "outrider.load_balancing_policies.peak_ewma";
/// The `load_balancing_policy` extension name that selects Outrider's adaptive policy.
pub const ADAPTIVE_POLICY_NAME: &str = "outrider.load_balancing_policies.adaptive";

/// The node metadata key that chooses a balancing policy for the whole proxy. Istio users
/// set it as `ISTIO_META_OUTRIDER_LB` in ProxyConfig's `proxyMetadata` (pilot-agent, and
/// `outrider sidecar`, turn `ISTIO_META_*` into node metadata); anyone else in the
/// bootstrap's `node.metadata`.
pub const PROXY_LB_METADATA_KEY: &str = "OUTRIDER_LB";

/// A balancing policy chosen for every cluster of the proxy whose policy the control plane
/// left at a default, where Istio's API cannot name it (a DestinationRule's `simple`
/// balancer renders as Envoy's `LEAST_REQUEST`, its default, or `ROUND_ROBIN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyLbPolicy {
    /// `adaptive`: Outrider's adaptive policy.
    Adaptive,
}

impl ProxyLbPolicy {
    /// The values the node metadata key takes.
    pub const VALUES: [&str; 1] = ["adaptive"];

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "adaptive" => Some(Self::Adaptive),
            _ => None,
        }
    }

    /// What runs for a cluster received with `received`: the adaptive policy in place of
    /// least request and round robin (with or without slow start: the adaptive policy
    /// warms a new endpoint itself); `None` (the received policy runs) for a hash policy,
    /// random, or a policy the cluster names explicitly (CSWRR, peak-EWMA, adaptive).
    pub fn replacing(self, received: &LbPolicy) -> Option<LbPolicy> {
        match (self, received) {
            (Self::Adaptive, LbPolicy::LeastRequest(_) | LbPolicy::RoundRobin(_)) => {
                Some(LbPolicy::Adaptive(AdaptiveConfig::default()))
            }
            _ => None,
        }
    }
}

/// The balancing of one cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadBalancing {
    pub policy: LbPolicy,
    /// Pick a locality first, by its EDS `load_balancing_weight` scaled by its health, then
    /// an endpoint in it (`wrr_locality` or `locality_weighted_lb_config`). Ring hash and
    /// maglev fold the locality weight into the endpoint weights instead.
    pub locality_weighted: bool,
    /// In percent: below this share of healthy endpoints a priority is in panic and all of
    /// its endpoints are used. 0 disables panic.
    pub healthy_panic_threshold: f64,
    /// `random_subsetting`: each priority level uses at most this many of its endpoints,
    /// chosen by rendezvous hashing seeded with the sidecar's node id (`lb::subset`).
    pub subset_size: Option<u32>,
}

/// The endpoint-picking policy.
#[derive(Debug, Clone, PartialEq)]
pub enum LbPolicy {
    RoundRobin(RoundRobinConfig),
    LeastRequest(LeastRequestConfig),
    /// Uniform over the endpoints; ignores weights, as Envoy does.
    Random,
    RingHash(RingHashConfig),
    Maglev(MaglevConfig),
    /// ORCA-fed weighted round robin.
    ClientSideWeightedRoundRobin(CswrrConfig),
    /// Power of two choices on latency × load (Linkerd's balancer), with an error penalty.
    PeakEwma(PeakEwmaConfig),
    /// Outrider's own: P2C on the expected latency of the next request, from latency,
    /// ORCA-reported capacity and errors together (`lb::adaptive`).
    Adaptive(AdaptiveConfig),
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoundRobinConfig {
    pub slow_start: Option<SlowStartConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LeastRequestConfig {
    /// Endpoints sampled per pick (N_CHOICES), at least 2.
    pub choice_count: u32,
    /// With unequal weights, `weight / (active + 1)^bias`; 0 is plain weighted RR.
    pub active_request_bias: f64,
    pub slow_start: Option<SlowStartConfig>,
    /// `selection_method: FULL_SCAN` (or the older `enable_full_scan`): look at every
    /// endpoint instead of sampling `choice_count`.
    pub full_scan: bool,
}

impl Default for LeastRequestConfig {
    fn default() -> Self {
        Self { choice_count: 2, active_request_bias: 1.0, slow_start: None, full_scan: false }
    }
}

/// What identifies an endpoint on a hash ring or maglev table when its EDS metadata has
/// no `envoy.lb` `hash_key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashKeySource {
    /// `10.0.0.1:8080`, as Envoy formats it.
    #[default]
    Address,
    /// The endpoint's hostname (`use_hostname_for_hashing`).
    Hostname,
}

/// Ketama ring of xxHash64 (seed 0) entries. MURMUR_HASH_2 is refused at conversion.
#[derive(Debug, Clone, PartialEq)]
pub struct RingHashConfig {
    pub minimum_ring_size: u64,
    pub maximum_ring_size: u64,
    pub hash_key: HashKeySource,
    /// `hash_balance_factor`: consistent hashing with bounded loads (see
    /// [`crate::lb::bounded_load`]); `None` places every request by its hash alone.
    pub hash_balance_factor: Option<u32>,
}

impl Default for RingHashConfig {
    fn default() -> Self {
        Self {
            minimum_ring_size: DEFAULT_MINIMUM_RING_SIZE,
            maximum_ring_size: DEFAULT_MAXIMUM_RING_SIZE,
            hash_key: HashKeySource::Address,
            hash_balance_factor: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct MaglevConfig {
    /// A prime, at most [`MAX_MAGLEV_TABLE_SIZE`].
    pub table_size: u64,
    pub hash_key: HashKeySource,
    /// As [`RingHashConfig::hash_balance_factor`].
    pub hash_balance_factor: Option<u32>,
}

impl Default for MaglevConfig {
    fn default() -> Self {
        Self { table_size: DEFAULT_MAGLEV_TABLE_SIZE, hash_key: HashKeySource::Address, hash_balance_factor: None }
    }
}

/// `client_side_weighted_round_robin`: weights from the endpoints' ORCA reports.
#[derive(Debug, Clone, PartialEq)]
pub struct CswrrConfig {
    /// Ask endpoints for out-of-band reports instead of reading them from responses.
    pub enable_oob_load_report: bool,
    pub oob_reporting_period: Duration,
    /// Where the out-of-band stream goes, when not to the endpoint's own address.
    pub oob_reporting: OobReportingConfig,
    /// An endpoint's weight is used only after it has reported for this long.
    pub blackout_period: Duration,
    /// A weight not refreshed for this long is dropped.
    pub weight_expiration_period: Duration,
    /// How often weights are recomputed; never below [`MIN_WEIGHT_UPDATE_PERIOD`].
    pub weight_update_period: Duration,
    /// Multiplier of `eps/qps` added to utilization; ≥ 0.
    pub error_utilization_penalty: f64,
    /// ORCA metrics whose maximum is the utilization (`named_metrics.<k>`,
    /// `utilization.<k>`, `cpu_utilization`, `mem_utilization`, `application_utilization`);
    /// empty means application utilization, else CPU utilization.
    pub metric_names_for_computing_utilization: Vec<String>,
    pub slow_start: Option<SlowStartConfig>,
}

impl Default for CswrrConfig {
    fn default() -> Self {
        Self {
            enable_oob_load_report: false,
            oob_reporting_period: Duration::from_secs(10),
            oob_reporting: OobReportingConfig::default(),
            blackout_period: Duration::from_secs(10),
            weight_expiration_period: Duration::from_secs(180),
            weight_update_period: Duration::from_secs(1),
            error_utilization_penalty: 1.0,
            metric_names_for_computing_utilization: Vec::new(),
            slow_start: None,
        }
    }
}

/// Peak-EWMA P2C: `cost = (rtt_estimate + error_penalty × recent_errors) × (in_flight + 1)`.
/// Defaults are Linkerd's (`default_rtt` 30 ms, `decay` 10 s).
#[derive(Debug, Clone, PartialEq)]
pub struct PeakEwmaConfig {
    /// The RTT assumed for an endpoint with no sample yet.
    pub default_rtt: Duration,
    /// Decay of the latency estimate. The estimate is kept per endpoint and shared by every
    /// policy, so it decays at the endpoint stats' fixed rate; this is that rate (10 s).
    pub decay: Duration,
    /// Latency added per recent error (errors count 1 each and decay with `decay`), so a
    /// fast-failing endpoint does not look fast.
    pub error_penalty: Duration,
    /// Envoy's `penalty_value`: the cost (milliseconds × requests) of an endpoint with
    /// requests in flight but no latency sample yet, which Envoy takes for a failing one.
    /// `None` (Outrider's own policy): such an endpoint costs `default_rtt` per request.
    pub unmeasured_busy_cost: Option<f64>,
}

impl PeakEwmaConfig {
    /// Envoy's contrib policy's defaults: 10 ms for an unmeasured endpoint, a million for
    /// a busy unmeasured one, and no error penalty (Envoy leaves errors to outlier
    /// detection).
    pub fn envoy_contrib() -> Self {
        Self {
            default_rtt: Duration::from_millis(10),
            error_penalty: Duration::ZERO,
            unmeasured_busy_cost: Some(1_000_000.0),
            ..Self::default()
        }
    }
}

impl Default for PeakEwmaConfig {
    fn default() -> Self {
        Self {
            default_rtt: Duration::from_millis(30),
            decay: Duration::from_secs(10),
            error_penalty: Duration::from_millis(30),
            unmeasured_busy_cost: None,
        }
    }
}

/// The adaptive policy's constants. It has no settings a user must tune; these are its
/// defaults, named so that the code and `docs/architecture.md` say the same.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveConfig {
    /// The latency assumed for an endpoint with no sample yet (Linkerd's default).
    pub default_rtt: Duration,
    /// Latency added per recent error, scaled by the share of recent requests that failed
    /// and doubled for each error in a row after the first.
    pub error_penalty: Duration,
    /// The most doublings consecutive errors add (2^6 = 64 times the penalty).
    pub max_error_doublings: u32,
    /// How long an endpoint that joins a cluster already serving is costed at its rival's
    /// latency rather than its own, so that it gets requests to warm up on.
    pub warmup: Duration,
    /// Endpoints first seen within this of the cluster's first are its founders, not joiners.
    pub founding_grace: Duration,
    /// A load report's capacity is never used longer than this after it arrived (CSWRR's
    /// default `weight_expiration_period`).
    pub report_expiration: Duration,
    /// A capacity not refreshed by a newer report within this, or within four of the
    /// endpoint's round trips if that is longer, is dropped. Reports come with responses:
    /// one this old means the endpoint is getting none, and a capacity that kept it from
    /// getting any must not keep it so for `report_expiration`.
    pub report_refresh: Duration,
    /// An endpoint that has answered nothing for this long, has nothing in flight and did
    /// not fail its last request gets the next pick while another endpoint is serving
    /// (the trickle), so that its latency and capacity are measured again.
    pub trickle_after: Duration,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self {
            default_rtt: Duration::from_millis(30),
            error_penalty: Duration::from_millis(30),
            max_error_doublings: 6,
            warmup: Duration::from_secs(30),
            founding_grace: Duration::from_secs(1),
            report_expiration: Duration::from_secs(180),
            report_refresh: Duration::from_secs(2),
            trickle_after: Duration::from_secs(1),
        }
    }
}

/// `oob_reporting_config`: the out-of-band ORCA stream's destination.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OobReportingConfig {
    /// Replaces the endpoint's port.
    pub port: Option<u16>,
    /// `:authority` of the stream; empty means the endpoint's hostname, else its address.
    pub authority: String,
}

/// Ramp-up of new endpoints: `weight × max(min_weight_percent, t^(1/aggression))` over
/// `window`. Present only when the window is non-zero.
#[derive(Debug, Clone, PartialEq)]
pub struct SlowStartConfig {
    pub window: Duration,
    /// > 0; 1.0 is linear.
    pub aggression: f64,
    /// In percent, the floor of the effective weight.
    pub min_weight_percent: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_wide_adaptive_policy_replaces_only_the_defaults() {
        let adaptive = ProxyLbPolicy::parse("adaptive").unwrap();
        let slow_start = SlowStartConfig { window: Duration::from_secs(30), aggression: 1.0, min_weight_percent: 10.0 };
        let replaced = [
            LbPolicy::LeastRequest(LeastRequestConfig::default()),
            LbPolicy::RoundRobin(RoundRobinConfig::default()),
            LbPolicy::RoundRobin(RoundRobinConfig { slow_start: Some(slow_start) }),
        ];
        for received in replaced {
            assert!(matches!(adaptive.replacing(&received), Some(LbPolicy::Adaptive(_))), "{received:?}");
        }
        let kept = [
            LbPolicy::Random,
            LbPolicy::RingHash(RingHashConfig::default()),
            LbPolicy::Maglev(MaglevConfig::default()),
            LbPolicy::Adaptive(AdaptiveConfig::default()),
        ];
        for received in kept {
            assert_eq!(adaptive.replacing(&received), None, "{received:?}");
        }
        assert_eq!(ProxyLbPolicy::parse("Adaptive"), None, "values are exact");
    }
}
