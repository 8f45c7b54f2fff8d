//! `stats_config` (`envoy.config.metrics.v3.StatsConfig`) → [`StatsConfig`].
//!
//! The matcher decides which stats exist, so it is enforced; the tag settings and
//! histogram buckets only change how the stats that exist are labelled and bucketed, so
//! they are accepted with a warning.

use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::stats::{StatsConfig, StatsMatcher};
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
    if !histogram_bucket_settings.is_empty() {
        warnings.ignored(
            "histogram_bucket_settings",
            "histograms use Envoy's default buckets; only the exported bucket bounds would differ",
        );
    }
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
    Ok(StatsConfig { matcher })
}

fn patterns(
    list: ListStringMatcher,
    at: &str,
    warnings: &mut Warnings,
) -> Result<Vec<crate::config::route::matcher::StringMatcher>> {
    list.patterns
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let path = format!("{at}.patterns[{i}]");
            warnings
                .within(&path, |w| crate::config::convert::route::matchers::string_matcher(p, w))
                .map_err(|e: ConfigError| e.at(&path))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
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
    fn reject_all() {
        let (config, _) = convert(serde_json::json!({ "stats_matcher": { "reject_all": true } }));
        assert_eq!(config.unwrap().matcher, StatsMatcher::RejectAll);
    }
}
