//! `stats_config` (`envoy.config.metrics.v3.StatsConfig`) → [`StatsConfig`].
//!
//! The matcher decides which stats exist and the bucket settings how histograms are
//! bucketed, so both are enforced; the tag settings only change how the stats that exist
//! are labelled, so they are accepted with a warning.

use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::stats::{HistogramBuckets, StatsConfig, StatsMatcher};
use crate::pb::envoy::config::metrics::v3 as proto;
use crate::pb::envoy::r#type::matcher::v3::ListStringMatcher;

pub fn stats_config(proto: proto::StatsConfig, warnings: &mut Warnings) -> Result<StatsConfig> {
    let proto::StatsConfig {
        stats_tags,
        use_all_default_tags,
        stats_matcher,
        histogram_bucket_settings,
        allow_default_tag_overrides,
    } = proto;
    if !stats_tags.is_empty() {
        warnings.ignored(
            "stats_tags",
            "labels are Outrider's built-in tags (Envoy's defaults); custom tag extraction would only change labels",
        );
    }
    if use_all_default_tags.is_some() {
        warnings.ignored("use_all_default_tags", "Outrider always labels with Envoy's default tags");
    }
    if allow_default_tag_overrides.is_some() {
        warnings.ignored("allow_default_tag_overrides", "labels are Outrider's built-in tags");
    }
    let histogram_buckets = histogram_bucket_settings
        .into_iter()
        .enumerate()
        .map(|(i, setting)| {
            let at = format!("histogram_bucket_settings[{i}]");
            warnings.within(&at, |w| bucket_setting(setting, w)).map_err(|e| e.at(&at))
        })
        .collect::<Result<Vec<_>>>()?;
    let matcher = match stats_matcher.and_then(|m| m.stats_matcher) {
        None => StatsMatcher::AcceptAll,
        Some(proto::stats_matcher::StatsMatcher::RejectAll(true)) => StatsMatcher::RejectAll,
        Some(proto::stats_matcher::StatsMatcher::RejectAll(false)) => StatsMatcher::AcceptAll,
        Some(proto::stats_matcher::StatsMatcher::InclusionList(list)) => {
            StatsMatcher::Inclusion(patterns(list, "stats_matcher.inclusion_list", warnings)?)
        }
        Some(proto::stats_matcher::StatsMatcher::ExclusionList(list)) => {
            StatsMatcher::Exclusion(patterns(list, "stats_matcher.exclusion_list", warnings)?)
        }
    };
    Ok(StatsConfig { matcher, histogram_buckets })
}

/// Envoy's constraints: a matcher, at least one bucket, each greater than 0 and unique.
fn bucket_setting(proto: proto::HistogramBucketSettings, warnings: &mut Warnings) -> Result<HistogramBuckets> {
    let proto::HistogramBucketSettings { r#match, buckets, bins } = proto;
    if bins.is_some() {
        warnings.ignored("bins", "Outrider's histograms have fixed buckets, no circllhist bins");
    }
    let matcher = r#match.ok_or_else(|| ConfigError::new("match", "is required"))?;
    let matcher = warnings
        .within("match", |w| crate::config::convert::matchers::string_matcher(matcher, w))
        .map_err(|e| e.at("match"))?;
    if buckets.is_empty() {
        return Err(ConfigError::new("buckets", "at least one bucket is required"));
    }
    if let Some(i) = buckets.iter().position(|b| !(b.is_finite() && *b > 0.0)) {
        return Err(ConfigError::new(format!("buckets[{i}]"), "must be greater than 0"));
    }
    let mut sorted = buckets;
    sorted.sort_by(f64::total_cmp);
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(ConfigError::new("buckets", "must be unique"));
    }
    Ok(HistogramBuckets { matcher, buckets: sorted })
}

fn patterns(
    list: ListStringMatcher,
    at: &str,
    warnings: &mut Warnings,
) -> Result<Vec<crate::config::matcher::StringMatcher>> {
    list.patterns
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let path = format!("{at}.patterns[{i}]");
            warnings
                .within(&path, |w| crate::config::convert::matchers::string_matcher(p, w))
                .map_err(|e: ConfigError| e.at(&path))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(json: serde_json::Value) -> (Result<StatsConfig>, Warnings) {
        let (proto, _) =
            crate::pb::json::from_value::<proto::StatsConfig>("envoy.config.metrics.v3.StatsConfig", json).unwrap();
        let mut warnings = Warnings::new();
        (stats_config(proto, &mut warnings), warnings)
    }

    #[test]
    fn inclusion_list_is_enforced_and_tags_warned() {
        let (config, warnings) = convert(serde_json::json!({
            "use_all_default_tags": false,
            "stats_tags": [{ "tag_name": "cluster_name", "regex": "^cluster(\\.(.+);)" }],
            "stats_matcher": { "inclusion_list": { "patterns": [{ "prefix": "server" }, { "suffix": "rbac.allowed" }] } },
        }));
        let config = config.unwrap();
        assert!(!config.matcher.rejects("server.live"));
        assert!(config.matcher.rejects("cluster.a.upstream_rq_total"));
        let paths: Vec<_> = warnings.items().iter().map(|w| w.path.clone()).collect();
        assert_eq!(paths, ["stats_tags", "use_all_default_tags"]);
    }

    #[test]
    fn a_bad_pattern_is_refused_with_its_path() {
        let (config, _) = convert(serde_json::json!({
            "stats_matcher": { "exclusion_list": { "patterns": [{ "exact": "a" }, { "safe_regex": { "regex": "(" } }] } },
        }));
        let error = config.unwrap_err();
        assert_eq!(error.path(), "stats_matcher.exclusion_list.patterns[1].safe_regex.regex", "{error}");
    }

    #[test]
    fn histogram_buckets_are_enforced_in_order() {
        let (config, warnings) = convert(serde_json::json!({
            "histogram_bucket_settings": [
                { "match": { "prefix": "cluster.a." }, "buckets": [100, 1, 10] },
                { "match": { "suffix": "_time" }, "buckets": [5], "bins": 10 },
            ],
        }));
        let config = config.unwrap();
        assert_eq!(config.buckets_for("cluster.a.upstream_rq_time"), Some([1.0, 10.0, 100.0].as_slice()));
        assert_eq!(config.buckets_for("cluster.b.upstream_rq_time"), Some([5.0].as_slice()));
        assert_eq!(config.buckets_for("cluster.b.upstream_cx_length_ms"), None);
        let paths: Vec<_> = warnings.items().iter().map(|w| w.path.clone()).collect();
        assert_eq!(paths, ["histogram_bucket_settings[1].bins"]);
        for (settings, path) in [
            (serde_json::json!([{ "match": { "exact": "a" }, "buckets": [] }]), "histogram_bucket_settings[0].buckets"),
            (
                serde_json::json!([{ "match": { "exact": "a" }, "buckets": [1, 0] }]),
                "histogram_bucket_settings[0].buckets[1]",
            ),
            (
                serde_json::json!([{ "match": { "exact": "a" }, "buckets": [2, 2] }]),
                "histogram_bucket_settings[0].buckets",
            ),
            (serde_json::json!([{ "buckets": [1] }]), "histogram_bucket_settings[0].match"),
        ] {
            let (config, _) = convert(serde_json::json!({ "histogram_bucket_settings": settings }));
            assert_eq!(config.unwrap_err().path(), path);
        }
    }

    #[test]
    fn reject_all() {
        let (config, _) = convert(serde_json::json!({ "stats_matcher": { "reject_all": true } }));
        assert_eq!(config.unwrap().matcher, StatsMatcher::RejectAll);
    }
}
