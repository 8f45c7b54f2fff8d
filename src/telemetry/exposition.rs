//! Rendering scraped stats: Envoy's `/stats` text and the Prometheus text exposition
//! format (version 0.0.4, what `/stats/prometheus` serves in Envoy too).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::stats::{Sample, StatName, Value};

/// The quantiles Envoy prints for a histogram in `/stats` (label, fraction).
pub const QUANTILES: [(&str, f64); 10] = [
    ("P0", 0.0),
    ("P25", 0.25),
    ("P50", 0.5),
    ("P75", 0.75),
    ("P90", 0.9),
    ("P95", 0.95),
    ("P99", 0.99),
    ("P99.5", 0.995),
    ("P99.9", 0.999),
    ("P100", 1.0),
];

/// `name: value` lines sorted by name, as Envoy's `/stats`. Histograms show cumulative
/// quantiles (`P50(nan,3.2)`: Outrider keeps no interval histograms).
pub fn text(samples: &[Sample]) -> String {
    let mut sorted: Vec<&Sample> = samples.iter().collect();
    sorted.sort_by(|a, b| a.0.flat.cmp(&b.0.flat));
    let mut out = String::new();
    for (name, value) in sorted {
        let _ = match value {
            Value::Counter(n) => writeln!(out, "{}: {n}", name.flat),
            Value::Gauge(g) => writeln!(out, "{}: {}", name.flat, number(*g)),
            Value::Text(t) => writeln!(out, "{}: {t:?}", name.flat),
            Value::Histogram(h) if h.count == 0 => writeln!(out, "{}: No recorded values", name.flat),
            Value::Histogram(h) => {
                let quantiles: Vec<String> = QUANTILES
                    .iter()
                    .map(|(label, q)| format!("{label}(nan,{})", number(h.quantile(*q).unwrap_or(f64::NAN))))
                    .collect();
                writeln!(out, "{}: {}", name.flat, quantiles.join(" "))
            }
        };
    }
    out
}

/// The Prometheus text format: one `# TYPE` line per family, then its samples. Text
/// readouts are left out (Envoy shows them only on request).
pub fn prometheus(samples: &[Sample]) -> String {
    let mut families: BTreeMap<&str, Vec<(&StatName, &Value)>> = BTreeMap::new();
    for (name, value) in samples {
        if !matches!(value, Value::Text(_)) {
            families.entry(name.family.as_str()).or_default().push((name, value));
        }
    }
    let mut out = String::new();
    for (family, mut members) in families {
        members.sort_by(|a, b| a.0.labels.cmp(&b.0.labels));
        let kind = match members[0].1 {
            Value::Counter(_) => "counter",
            Value::Gauge(_) | Value::Text(_) => "gauge",
            Value::Histogram(_) => "histogram",
        };
        let _ = writeln!(out, "# TYPE {family} {kind}");
        for (name, value) in members {
            let labels = &name.labels;
            let _ = match value {
                Value::Counter(n) => writeln!(out, "{family}{} {n}", label_set(labels, None)),
                Value::Gauge(g) => writeln!(out, "{family}{} {}", label_set(labels, None), number(*g)),
                Value::Text(_) => Ok(()),
                Value::Histogram(h) => {
                    for (bound, count) in &h.cumulative {
                        let le = number(*bound);
                        let _ = writeln!(out, "{family}_bucket{} {count}", label_set(labels, Some(&le)));
                    }
                    let _ = writeln!(out, "{family}_bucket{} {}", label_set(labels, Some("+Inf")), h.count);
                    let _ = writeln!(out, "{family}_sum{} {}", label_set(labels, None), number(h.sum));
                    writeln!(out, "{family}_count{} {}", label_set(labels, None), h.count)
                }
            };
        }
    }
    out
}

fn label_set(labels: &[(String, String)], le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() { String::new() } else { format!("{{{}}}", parts.join(",")) }
}

/// Label values escape backslash, double quote and line feed.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf".to_owned() } else { "-Inf".to_owned() }
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::super::metrics::Histogram;
    use super::super::stats::Scope;
    use super::*;

    #[test]
    fn families_are_grouped_and_labels_escaped() {
        let cluster = |n: &str| Scope::envoy().child("cluster").tagged("envoy_cluster_name", n);
        let h = Histogram::default();
        h.record(std::time::Duration::from_millis(3));
        let samples = vec![
            (cluster("a").name("upstream_rq_total"), Value::Counter(2)),
            (cluster("q\"\\\n").name("upstream_rq_total"), Value::Counter(1)),
            (cluster("a").name("upstream_rq_time"), Value::Histogram(h.snapshot())),
            (cluster("a").name("version_text"), Value::Text("v1".into())),
        ];
        let out = prometheus(&samples);
        assert_eq!(out.matches("# TYPE envoy_cluster_upstream_rq_total counter").count(), 1);
        assert!(out.contains("envoy_cluster_upstream_rq_total{envoy_cluster_name=\"q\\\"\\\\\\n\"} 1"), "{out}");
        assert!(out.contains("envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=\"a\",le=\"5\"} 1"), "{out}");
        assert!(out.contains("envoy_cluster_upstream_rq_time_count{envoy_cluster_name=\"a\"} 1"), "{out}");
        assert!(!out.contains("version_text"));
        let text = text(&samples);
        assert!(text.contains("cluster.a.upstream_rq_total: 2\n"), "{text}");
        assert!(text.contains("cluster.a.version_text: \"v1\"\n"), "{text}");
        assert!(text.contains("cluster.a.upstream_rq_time: P0(nan,"), "{text}");
    }
}
