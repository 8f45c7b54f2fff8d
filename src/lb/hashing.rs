//! What ring hash and maglev share: the key a host is placed by, and Envoy's weight
//! normalisation (`thread_aware_lb_impl.cc` `normalizeWeights`).
//!
//! Both must agree with Envoy bit for bit, or the same hosts and the same request hash
//! would reach a different endpoint than Envoy's would.

use std::borrow::Cow;
use std::sync::Arc;

use xxhash_rust::xxh64::xxh64;

use super::host::Host;
use crate::config::Address;
use crate::config::cluster::HashKeySource;
use crate::config::endpoint::LbEndpoint;

/// xxHash64 with seed 0, Envoy's `HashUtil::xxHash64`.
pub fn xxhash64(bytes: &[u8]) -> u64 {
    xxh64(bytes, 0)
}

/// The key `host` is placed by: the `envoy.lb` `hash_key` metadata when non-empty; else
/// the hostname with [`HashKeySource::Hostname`]; else the address as Envoy prints it
/// (`10.0.0.1:80`, `[::1]:80`, a pipe's path).
///
/// One deliberate difference: with `Hostname` and an endpoint that has no hostname,
/// Envoy hashes the empty string (every such host collides); Outrider uses the address.
pub fn host_key(host: &Host, source: HashKeySource) -> Cow<'_, str> {
    endpoint_key(&host.endpoint, source)
}

/// [`host_key`] of an endpoint not yet made a host.
pub fn endpoint_key(endpoint: &LbEndpoint, source: HashKeySource) -> Cow<'_, str> {
    if let Some(key) = endpoint.hash_key.as_deref().filter(|k| !k.is_empty()) {
        return Cow::Borrowed(key);
    }
    if source == HashKeySource::Hostname && !endpoint.hostname.is_empty() {
        return Cow::Borrowed(&endpoint.hostname);
    }
    match &endpoint.address {
        // Envoy's `PipeInstance::asString` is the bare path, without a scheme.
        Address::Pipe(path) => Cow::Owned(path.display().to_string()),
        address => Cow::Owned(address.to_string()),
    }
}

/// A host's normalised weight (the weights of one host set sum to 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weighted {
    /// Index into the host set's hosts.
    pub host: u32,
    pub weight: f64,
}

/// Normalised weights of the hosts that take traffic, and their minimum and maximum.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    pub hosts: Vec<Weighted>,
    /// Envoy starts the minimum at 1.0 and the maximum at 0.0.
    pub min: f64,
    pub max: f64,
}

/// Normalises the balancer's weights as Envoy does.
///
/// `weights` are either raw endpoint weights (whole numbers: each becomes `w × 1.0 / Σw`,
/// Envoy's exact float operations) or, with locality weighting, weights the balancer has
/// already normalised with Envoy's formula `w × (locality_w / Σlocality_w) / Σw_in_locality`
/// (fractions: used as they are, since dividing them by their sum again could move the
/// last bit). Hosts of weight 0 (in a locality of weight 0) are left out, as Envoy leaves
/// them out. Non-finite or negative weights count as 0.
pub fn normalize(weights: &[f64], host_count: usize) -> Normalized {
    let usable = |w: f64| w.is_finite() && w > 0.0;
    let count = weights.len().min(host_count).min(u32::MAX as usize);
    let weights = &weights[..count];
    let raw = weights.iter().all(|w| w.fract() == 0.0 || !usable(*w));
    let sum: f64 = weights.iter().copied().filter(|w| usable(*w)).sum();
    let mut normalized = Normalized { hosts: Vec::with_capacity(count), min: 1.0, max: 0.0 };
    for (host, &w) in weights.iter().enumerate() {
        if !usable(w) {
            continue;
        }
        // `w × 1.0 / Σw` in Envoy; the × 1.0 is exact.
        let weight = if raw { w / sum } else { w };
        normalized.min = normalized.min.min(weight);
        normalized.max = normalized.max.max(weight);
        normalized.hosts.push(Weighted { host: host as u32, weight });
    }
    normalized
}

/// The keys of `hosts`, computed once per build.
pub fn keys(hosts: &[Arc<Host>], source: HashKeySource) -> Vec<Cow<'_, str>> {
    hosts.iter().map(|h| host_key(h, source)).collect()
}

/// A host for tests: `address` like `127.0.0.1:90`, weight 1, healthy.
#[cfg(test)]
pub fn test_host(address: &str, hostname: &str, hash_key: Option<&str>) -> Arc<Host> {
    use crate::config::endpoint::HealthStatus;
    let address = address.parse().map(Address::Socket).unwrap_or(Address::Dns { host: address.into(), port: 0 });
    let endpoint = LbEndpoint {
        address,
        weight: 1,
        health: HealthStatus::Healthy,
        hash_key: hash_key.map(str::to_string),
        transport_socket_match: Default::default(),
        hostname: hostname.to_string(),
        health_check: None,
        additional_addresses: Box::default(),
        metadata: None,
    };
    let stats = Arc::new(super::endpoint::EndpointStats::new(std::time::Instant::now()));
    Arc::new(Host { endpoint: Arc::new(endpoint), stats, priority: 0, locality: 0, cluster_stats: Default::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_weights_are_divided_by_their_sum() {
        let n = normalize(&[1.0, 2.0, 3.0], 3);
        assert_eq!(n.hosts.iter().map(|w| w.weight).collect::<Vec<_>>(), vec![1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0]);
        assert_eq!((n.min, n.max), (1.0 / 6.0, 0.5));
    }

    #[test]
    fn fractional_weights_are_kept_and_zero_weights_dropped() {
        let n = normalize(&[0.25, 0.0, 0.75], 3);
        assert_eq!(n.hosts, vec![Weighted { host: 0, weight: 0.25 }, Weighted { host: 2, weight: 0.75 }]);
        assert_eq!(normalize(&[0.0, f64::NAN], 2).hosts, vec![]);
    }
}
