//! The bootstrap's `stats_config`: which stats exist at all (`stats_matcher`), and the
//! buckets of histograms (`histogram_bucket_settings`).
//!
//! At mesh scale the stats are most of a sidecar's memory, so Istio's bootstrap keeps only
//! the stats its tools read (an inclusion list of prefixes, suffixes and regexes). A stat
//! the matcher rejects is never created, as in Envoy.

use super::matcher::StringMatcher;

/// `stats_config`, as far as it decides what exists and how histograms are bucketed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatsConfig {
    pub matcher: StatsMatcher,
    /// `histogram_bucket_settings`, in order: the first whose matcher accepts a
    /// histogram's flat name gives its buckets.
    pub histogram_buckets: Vec<HistogramBuckets>,
}

/// One `histogram_bucket_settings` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramBuckets {
    pub matcher: StringMatcher,
    /// Upper bounds, ascending, each positive and distinct.
    pub buckets: Vec<f64>,
}

impl StatsConfig {
    /// The buckets of the histogram named `flat`, if the settings give it any.
    pub fn buckets_for(&self, flat: &str) -> Option<&[f64]> {
        self.histogram_buckets.iter().find(|h| h.matcher.matches(flat)).map(|h| h.buckets.as_slice())
    }
}

/// `stats_config.stats_matcher`, matched against a stat's flat name before tag extraction
/// (`cluster.outbound|80||a.b.upstream_rq_200`), as Envoy's `StatsMatcherImpl` does.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum StatsMatcher {
    /// No matcher, or `reject_all: false`.
    #[default]
    AcceptAll,
    /// `reject_all: true`.
    RejectAll,
    /// `inclusion_list`: only stats matching one of the patterns exist.
    Inclusion(Vec<StringMatcher>),
    /// `exclusion_list`: every stat except those matching one of the patterns.
    Exclusion(Vec<StringMatcher>),
}

impl StatsMatcher {
    /// Whether the stat named `flat` must not be created.
    pub fn rejects(&self, flat: &str) -> bool {
        match self {
            StatsMatcher::AcceptAll => false,
            StatsMatcher::RejectAll => true,
            StatsMatcher::Inclusion(patterns) => !patterns.iter().any(|p| matches(p, flat)),
            StatsMatcher::Exclusion(patterns) => patterns.iter().any(|p| matches(p, flat)),
        }
    }
}

/// A pattern against a flat name. Envoy compares a case-sensitive prefix that ends in `.`
/// by whole name segments (`cluster.xds-grpc.` matches the names under `cluster.xds-grpc`
/// and that name itself); every other pattern compares the text.
fn matches(pattern: &StringMatcher, flat: &str) -> bool {
    if let StringMatcher::Prefix { value, ignore_case: false } = pattern
        && let Some(segments) = value.strip_suffix('.').filter(|s| !s.is_empty())
    {
        return flat.strip_prefix(segments).is_some_and(|rest| rest.is_empty() || rest.starts_with('.'));
    }
    pattern.matches(flat)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::matcher::Pattern;

    fn prefix(value: &str) -> StringMatcher {
        StringMatcher::Prefix { value: value.to_owned(), ignore_case: false }
    }

    #[test]
    fn inclusion_keeps_only_matching_names() {
        let regex = Pattern::new(r"vhost\..*\.route\..*").unwrap();
        let m = StatsMatcher::Inclusion(vec![
            prefix("server"),
            prefix("cluster.xds-grpc."),
            StringMatcher::Suffix { value: "rbac.allowed".to_owned(), ignore_case: false },
            StringMatcher::Regex(regex),
        ]);
        assert!(!m.rejects("server.live"));
        assert!(!m.rejects("server_foo"), "a prefix without a dot compares text");
        assert!(!m.rejects("cluster.xds-grpc.upstream_rq_total"));
        assert!(!m.rejects("cluster.xds-grpc"), "a segment prefix matches the name itself");
        assert!(m.rejects("cluster.xds-grpc-2.upstream_rq_total"), "segments, not text");
        assert!(m.rejects("cluster.outbound|80||a.b.upstream_rq_total"));
        assert!(!m.rejects("http.inbound_0.0.0.0_8080.rbac.allowed"));
        assert!(!m.rejects("vhost.a.route.b.upstream_rq_200"));
        assert!(m.rejects("x.vhost.a.route.b"), "safe_regex matches the whole name");
    }

    #[test]
    fn exclusion_reject_all_and_default() {
        let m = StatsMatcher::Exclusion(vec![prefix("cluster.")]);
        assert!(m.rejects("cluster.a.upstream_rq_total"));
        assert!(!m.rejects("server.live"));
        assert!(StatsMatcher::RejectAll.rejects("server.live"));
        assert!(!StatsMatcher::AcceptAll.rejects("anything"));
    }
}
