//! RBAC's counters, named as Envoy names them:
//! - HTTP: `http.<hcm prefix>.rbac[.<rules_stat_prefix>].allowed|denied` and
//!   `http.<hcm prefix>.rbac[.<shadow_rules_stat_prefix>].shadow_allowed|shadow_denied`
//!   (the rules prefix is not part of the shadow names), each prefix a Prometheus label
//!   (`envoy_rbac_http_prefix`);
//! - network: `<stat_prefix>.rbac[.<shadow_rules_stat_prefix>].<stat>`, the stat prefix
//!   the label `envoy_rbac_prefix`.

use crate::telemetry::{Counter, Scope, StatName, Stats};

pub struct RbacStats {
    pub allowed: Counter,
    pub denied: Counter,
    pub shadow_allowed: Counter,
    pub shadow_denied: Counter,
}

/// A configured stat prefix as Envoy joins it: one segment, a trailing `.` dropped.
fn segment(prefix: &str) -> &str {
    prefix.strip_suffix('.').unwrap_or(prefix)
}

impl RbacStats {
    pub fn http(stats: &Stats, hcm_prefix: &str, rules_prefix: &str, shadow_prefix: &str) -> Self {
        let rbac = Scope::envoy().child("http").tagged("envoy_http_conn_manager_prefix", hcm_prefix).child("rbac");
        let with = |prefix: &str| {
            let prefix = segment(prefix);
            if prefix.is_empty() { rbac.clone() } else { rbac.tagged("envoy_rbac_http_prefix", prefix) }
        };
        let (rules, shadow) = (with(rules_prefix), with(shadow_prefix));
        Self {
            allowed: stats.counter(rules.name("allowed")),
            denied: stats.counter(rules.name("denied")),
            shadow_allowed: stats.counter(shadow.name("shadow_allowed")),
            shadow_denied: stats.counter(shadow.name("shadow_denied")),
        }
    }

    pub fn network(stats: &Stats, stat_prefix: &str, shadow_prefix: &str) -> Self {
        let name = |shadow: bool, stat: &str| network_name(stat_prefix, if shadow { shadow_prefix } else { "" }, stat);
        Self {
            allowed: stats.counter(name(false, "allowed")),
            denied: stats.counter(name(false, "denied")),
            shadow_allowed: stats.counter(name(true, "shadow_allowed")),
            shadow_denied: stats.counter(name(true, "shadow_denied")),
        }
    }
}

/// `<stat_prefix>.rbac.[<shadow prefix>.]<stat>`. Envoy's tag extraction takes the stat
/// prefix out as `envoy_rbac_prefix`; when that prefix is `tcp` (Istio's), its `tcp.`
/// extractor fires as well and takes `rbac` as `envoy_tcp_prefix`.
fn network_name(stat_prefix: &str, shadow_prefix: &str, stat: &str) -> StatName {
    let stat_prefix = segment(stat_prefix);
    let shadow_prefix = segment(shadow_prefix);
    let tail = if shadow_prefix.is_empty() { stat.to_owned() } else { format!("{shadow_prefix}.{stat}") };
    let flat = format!("{stat_prefix}.rbac.{tail}");
    let tail_family = crate::telemetry::stats::sanitize(&tail.replace('.', "_"));
    let mut labels = vec![("envoy_rbac_prefix".to_owned(), stat_prefix.to_owned())];
    let family = if stat_prefix == "tcp" {
        labels.push(("envoy_tcp_prefix".to_owned(), "rbac".to_owned()));
        format!("envoy_{tail_family}")
    } else {
        format!("envoy_rbac_{tail_family}")
    };
    StatName { flat, family, labels }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_names_follow_envoy() {
        let n = network_name("tcpx.", "shadowy", "shadow_denied");
        assert_eq!(n.flat, "tcpx.rbac.shadowy.shadow_denied");
        assert_eq!(n.family, "envoy_rbac_shadowy_shadow_denied");
        let n = network_name("tcp.", "", "allowed");
        assert_eq!(n.flat, "tcp.rbac.allowed");
        assert_eq!(n.family, "envoy_allowed");
        assert_eq!(n.labels.len(), 2);
    }
}
