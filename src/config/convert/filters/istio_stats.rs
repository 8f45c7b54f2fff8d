//! `stats.PluginConfig` (Istio's `istio.stats`, typed or in a `TypedStruct`) →
//! [`IstioStats`].
//!
//! Every field is read as Istio's own filter reads it. The ones Istio's filter does not
//! read either (`stat_prefix`, separators, `match`, `debug`) and the series rotation are
//! accepted with a warning. A label expression (CEL) is run when it is one of the simple
//! forms in [`tag_value`], and refused with its path otherwise; custom metrics
//! (`definitions`) are refused.

use std::time::Duration;

use super::istio_json::{boolean, config_object, duration, field, list, object, string};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::istio_stats::{
    IstioMetric, IstioStats, STANDARD_TAGS, StatsReporter, TagOverride, TagValue,
};
use crate::pb::google::protobuf::Any;

pub const TYPE: &str = "stats.PluginConfig";

/// Istio's default `tcp_reporting_duration`.
const TCP_REPORTING_DURATION: Duration = Duration::from_secs(5);

pub fn istio_stats(any: &Any, warnings: &mut Warnings) -> Result<IstioStats> {
    from_json(&config_object(any, TYPE)?, warnings)
}

/// The plugin's settings from their JSON form (a `TypedStruct`'s, or the Wasm plugin's
/// configuration string).
pub fn from_json(config: &serde_json::Map<String, serde_json::Value>, warnings: &mut Warnings) -> Result<IstioStats> {
    let mut out = IstioStats { tcp_reporting_duration: TCP_REPORTING_DURATION, ..IstioStats::default() };
    for (key, value) in config {
        let name = field(key);
        match name.as_str() {
            "disable_host_header_fallback" => out.disable_host_header_fallback = boolean(value, &name)?,
            "tcp_reporting_duration" => {
                out.tcp_reporting_duration = duration(value, &name)?.unwrap_or(TCP_REPORTING_DURATION);
            }
            "reporter" => out.reporter = reporter(value, &name)?,
            "metrics" => {
                for (i, metric) in list(value, &name)?.iter().enumerate() {
                    metric_config(metric, &format!("{name}[{i}]"), &mut out, warnings)?;
                }
            }
            "definitions" => {
                if !list(value, &name)?.is_empty() {
                    return Err(ConfigError::new(name, "custom metrics are not supported"));
                }
            }
            "stat_prefix" | "field_separator" | "value_separator" | "debug" | "max_peer_cache_size" => {
                warnings.ignored(name, "not read by Istio's stats filter either");
            }
            "rotation_interval" | "graceful_deletion_interval" => {
                duration(value, &name)?;
                warnings.ignored(name, "series are kept until their filter's configuration is removed");
            }
            _ => return Err(ConfigError::new(name, "unknown field of stats.PluginConfig")),
        }
    }
    Ok(out)
}

fn reporter(value: &serde_json::Value, at: &str) -> Result<StatsReporter> {
    match value {
        serde_json::Value::Null => Ok(StatsReporter::ByDirection),
        serde_json::Value::String(s) if s == "UNSPECIFIED" => Ok(StatsReporter::ByDirection),
        serde_json::Value::String(s) if s == "SERVER_GATEWAY" => Ok(StatsReporter::ServerGateway),
        serde_json::Value::Number(n) if n.as_u64() == Some(0) => Ok(StatsReporter::ByDirection),
        serde_json::Value::Number(n) if n.as_u64() == Some(1) => Ok(StatsReporter::ServerGateway),
        _ => Err(ConfigError::new(at, format!("unknown reporter {value}"))),
    }
}

/// One `MetricConfig`: `name` (empty: every standard metric), then `drop`, or
/// `tags_to_remove` and `dimensions`.
fn metric_config(value: &serde_json::Value, at: &str, out: &mut IstioStats, warnings: &mut Warnings) -> Result<()> {
    let config = object(value, at)?;
    let mut name = "";
    let mut drop = false;
    let mut remove: Vec<&'static str> = Vec::new();
    let mut dimensions: Vec<(String, TagValue)> = Vec::new();
    for (key, value) in config.iter() {
        let key = field(key);
        let at = format!("{at}.{key}");
        match key.as_str() {
            "name" => name = string(value, &at)?,
            "drop" => drop = boolean(value, &at)?,
            "tags_to_remove" => {
                for (i, tag) in list(value, &at)?.iter().enumerate() {
                    let at = format!("{at}[{i}]");
                    let tag = string(tag, &at)?;
                    match STANDARD_TAGS.iter().find(|t| **t == tag) {
                        Some(standard) => remove.push(standard),
                        None => warnings.ignored(at, format!("{tag:?} is not a standard label")),
                    }
                }
            }
            "dimensions" => {
                for (tag, expression) in object(value, &at)?.iter() {
                    let at = format!("{at}[{tag:?}]");
                    let expression = string(expression, &at)?;
                    dimensions.push((tag.clone(), tag_value(expression, &at)?));
                }
            }
            "match" => {
                if !string(value, &at)?.is_empty() {
                    warnings.ignored(at, "not read by Istio's stats filter either");
                }
            }
            _ => return Err(ConfigError::new(at, "unknown field of stats.MetricConfig")),
        }
    }
    let metrics: Vec<IstioMetric> = if name.is_empty() {
        IstioMetric::ALL.to_vec()
    } else if let Some(metric) = IstioMetric::from_config_name(name) {
        vec![metric]
    } else {
        warnings.ignored(format!("{at}.name"), format!("{name:?} is not a standard metric; nothing to change"));
        return Ok(());
    };
    if drop {
        out.dropped.extend(metrics);
        return Ok(());
    }
    // Istio's order: labels removed, then dimensions sorted by label name.
    dimensions.sort_by(|a, b| a.0.cmp(&b.0));
    for metric in metrics {
        for tag in &remove {
            out.overrides.push((metric, TagOverride::Remove(tag)));
        }
        for (tag, value) in &dimensions {
            out.overrides.push((metric, TagOverride::Set(tag.clone(), value.clone())));
        }
    }
    Ok(())
}

/// The CEL expressions of a label that Outrider evaluates: a string literal, a request or
/// response header (`request.headers['x-user']`), `request.host`, `request.method`,
/// `request.url_path`, `response.code`. Anything else is refused at `at`.
pub fn tag_value(expression: &str, at: &str) -> Result<TagValue> {
    let e = expression.trim();
    if let Some(literal) = quoted(e) {
        return Ok(TagValue::Literal(literal.to_owned()));
    }
    match e {
        "request.host" => return Ok(TagValue::RequestHost),
        "request.method" => return Ok(TagValue::RequestMethod),
        "request.url_path" => return Ok(TagValue::RequestUrlPath),
        "response.code" => return Ok(TagValue::ResponseCode),
        _ => {}
    }
    let header = |prefix: &str| {
        e.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('['))
            .and_then(|rest| rest.strip_suffix(']'))
            .and_then(|key| quoted(key.trim()))
            .map(str::to_ascii_lowercase)
    };
    if let Some(name) = header("request.headers") {
        return Ok(TagValue::RequestHeader(name));
    }
    if let Some(name) = header("response.headers") {
        return Ok(TagValue::ResponseHeader(name));
    }
    Err(ConfigError::new(at, format!("the label expression {expression:?} is not supported")))
}

/// The contents of a CEL string literal without escapes (`'a'` or `"a"`).
fn quoted(e: &str) -> Option<&str> {
    let inner = e.strip_prefix('\'').and_then(|r| r.strip_suffix('\''));
    let inner = inner.or_else(|| e.strip_prefix('"').and_then(|r| r.strip_suffix('"')))?;
    (!inner.contains(['\'', '"', '\\'])).then_some(inner)
}
