//! `RouteAction.request_mirror_policies` (Istio's `mirror` / `mirrorPercentage`): a copy
//! of each request the route forwards goes, fire and forget, to another cluster.

use crate::config::filters::fractional_percent::FractionalPercent;

/// `envoy.config.route.v3.RouteAction.RequestMirrorPolicy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestMirrorPolicy {
    pub cluster: MirrorCluster,
    /// `runtime_fraction.default_value`: the share of requests mirrored (all when the
    /// field is absent, as in Envoy).
    pub fraction: FractionalPercent,
    /// `trace_sampled`: the sampled flag of the shadow's trace context; `None` keeps the
    /// request's own decision.
    pub trace_sampled: Option<bool>,
    /// The shadow's `:authority`: the request's with `-shadow` appended to the host part,
    /// or as configured.
    pub host: ShadowHost,
}

/// Where the shadow goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorCluster {
    Cluster(String),
    /// `cluster_header` (lower-cased): the cluster named by this request header; no
    /// shadow when it is missing or empty.
    Header(String),
}

/// What the shadow's `:authority` becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShadowHost {
    /// `foo:8080` → `foo-shadow:8080` (Envoy's default).
    Suffixed,
    /// `disable_shadow_host_suffix_append`: the request's host as it is.
    Unchanged,
    /// `host_rewrite_literal` (the suffix is then never appended).
    Literal(String),
}

impl ShadowHost {
    /// The shadow's host for a request whose host is `host`.
    pub fn apply(&self, host: &str) -> String {
        match self {
            ShadowHost::Suffixed => shadow_appended_host(host),
            ShadowHost::Unchanged => host.to_owned(),
            ShadowHost::Literal(literal) => literal.clone(),
        }
    }
}

/// Envoy's `shadowAppendedHost`: `-shadow` goes before the port, found as the last `:`
/// that is not inside an IPv6 literal's brackets.
fn shadow_appended_host(host: &str) -> String {
    let port_start = host.rfind(':').filter(|&colon| host.rfind(']').is_none_or(|bracket| bracket < colon));
    match port_start {
        Some(at) => format!("{}-shadow{}", &host[..at], &host[at..]),
        None => format!("{host}-shadow"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadow_suffix_goes_before_the_port() {
        let s = |h: &str| ShadowHost::Suffixed.apply(h);
        assert_eq!(s("foo"), "foo-shadow");
        assert_eq!(s("foo:8080"), "foo-shadow:8080");
        assert_eq!(s("[::1]"), "[::1]-shadow");
        assert_eq!(s("[::1]:80"), "[::1]-shadow:80");
        assert_eq!(s("a.example.com:"), "a.example.com-shadow:");
        assert_eq!(ShadowHost::Unchanged.apply("foo:1"), "foo:1");
        assert_eq!(ShadowHost::Literal("x".into()).apply("foo:1"), "x");
    }
}
