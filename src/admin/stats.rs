//! `/stats` and its parameters, as Envoy's admin serves them: `filter=<regex>` on the flat
//! name, `usedonly`, and `format=json` (`{"stats": [{"name", "value"}…, {"histograms"}]}`)
//! or `format=prometheus`.
//!
//! `usedonly` keeps Envoy's "used" stats: counters once incremented, gauges once set,
//! histograms once recorded (the store decides, see `Stats::used_samples`).

use serde_json::{Value as Json, json};

use crate::telemetry::exposition::QUANTILES;
use crate::telemetry::{Sample, Value};

/// What the query string asks of `/stats`.
#[derive(Debug, Default)]
pub struct StatsQuery {
    pub filter: Option<regex::Regex>,
    pub used_only: bool,
    pub format: Format,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    #[default]
    Text,
    Json,
    Prometheus,
}

impl StatsQuery {
    /// Parses Envoy's parameters; an invalid regex or an unknown format is the caller's 400.
    pub fn parse(query: &str) -> Result<Self, String> {
        let mut out = StatsQuery::default();
        for parameter in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = parameter.split_once('=').unwrap_or((parameter, ""));
            match key {
                "usedonly" => out.used_only = true,
                "filter" => {
                    let value = super::query::percent_decode(value);
                    out.filter = Some(regex::Regex::new(&value).map_err(|e| format!("invalid filter: {e}"))?);
                }
                "format" => {
                    out.format = match value {
                        "json" => Format::Json,
                        "prometheus" => Format::Prometheus,
                        "text" => Format::Text,
                        other => return Err(format!("unsupported format {other:?}")),
                    }
                }
                // Envoy's `type=` and `histogram_buckets=` only change how much is shown.
                _ => {}
            }
        }
        Ok(out)
    }

    /// The samples the filter keeps.
    pub fn select(&self, samples: Vec<Sample>) -> Vec<Sample> {
        samples.into_iter().filter(|(name, _)| self.filter.as_ref().is_none_or(|f| f.is_match(&name.flat))).collect()
    }
}

/// Envoy's JSON: counters, gauges and text readouts as `{"name", "value"}` sorted by name,
/// then one `{"histograms": …}` element with cumulative quantiles (Outrider keeps no
/// interval histograms, so `interval` is null as Envoy shows it before the first flush).
pub fn json(samples: &[Sample]) -> Json {
    let mut sorted: Vec<&Sample> = samples.iter().collect();
    sorted.sort_by(|a, b| a.0.flat.cmp(&b.0.flat));
    let mut stats = Vec::new();
    let mut computed = Vec::new();
    for (name, value) in sorted {
        match value {
            Value::Counter(n) => stats.push(json!({ "name": name.flat, "value": n })),
            Value::Gauge(g) => stats.push(json!({ "name": name.flat, "value": g })),
            Value::Text(t) => stats.push(json!({ "name": name.flat, "value": t })),
            Value::Histogram(h) => {
                let values: Vec<Json> =
                    QUANTILES.iter().map(|(_, q)| json!({ "interval": null, "cumulative": h.quantile(*q) })).collect();
                computed.push(json!({ "name": name.flat, "values": values }));
            }
        }
    }
    let supported: Vec<f64> = QUANTILES.iter().map(|(_, q)| q * 100.0).collect();
    stats.push(json!({ "histograms": { "supported_quantiles": supported, "computed_quantiles": computed } }));
    json!({ "stats": stats })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::Scope;

    #[test]
    fn json_has_envoys_shape() {
        let server = Scope::envoy().child("server");
        let samples = vec![
            (server.name("live"), Value::Gauge(1.0)),
            (server.name("unused"), Value::Counter(0)),
            (server.name("lat"), Value::Histogram(crate::telemetry::Histogram::default().snapshot())),
        ];
        let query = StatsQuery::parse("usedonly&format=json&filter=live").unwrap();
        assert_eq!((query.format, query.used_only), (Format::Json, true));
        assert_eq!(query.select(samples.clone()).len(), 1);
        let out = json(&samples);
        let stats = out["stats"].as_array().unwrap();
        assert_eq!(stats[0]["name"], "server.live");
        let histograms = &stats.last().unwrap()["histograms"];
        assert_eq!(histograms["supported_quantiles"][2], 50.0);
        assert_eq!(histograms["computed_quantiles"][0]["name"], "server.lat");
        assert!(StatsQuery::parse("filter=(").is_err());
        assert!(StatsQuery::parse("format=xml").is_err());
    }
}
