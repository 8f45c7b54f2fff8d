//! The metric cells of each label set, created once per set and then found without the
//! stats store's lock: a sharded map keyed by the label values, shared by every worker,
//! registers each set once; in front of it each worker keeps its own map of the sets it
//! has reported into, so that a request finds its cells with no lock and no write to
//! memory another worker uses (the cells themselves are the shared stats).
//!
//! A stat's flat name is Istio's (`reporter=.=destination;.;source_workload=.=x;.;…;.;
//! istio_requests_total`), so a bootstrap `stats_matcher` with Istio's `reporter=` prefix
//! keeps it; its Prometheus family is `istio_requests_total` with the labels.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use thread_local::ThreadLocal;

use crate::config::filters::istio_stats::{IstioMetric, IstioStats, STANDARD_TAGS, TagOverride};
use crate::telemetry::{Counter, Histogram, StatName, Stats};

const SHARDS: usize = 16;

/// Istio's separators inside a flat name.
const VALUE_SEPARATOR: &str = "=.=";
const FIELD_SEPARATOR: &str = ";.;";

/// The cells of one label set; `None` for a dropped metric.
#[derive(Debug, Default)]
pub struct Series {
    pub requests_total: Option<Counter>,
    pub request_duration_milliseconds: Option<Histogram>,
    pub request_bytes: Option<Histogram>,
    pub response_bytes: Option<Histogram>,
    pub request_messages_total: Option<Counter>,
    pub response_messages_total: Option<Counter>,
}

/// The cells of one TCP label set; `None` for a dropped metric.
#[derive(Debug, Default)]
pub struct TcpSeries {
    pub connections_opened_total: Option<Counter>,
    pub connections_closed_total: Option<Counter>,
    pub sent_bytes_total: Option<Counter>,
    pub received_bytes_total: Option<Counter>,
}

/// Series by label values.
type Shard<T> = Mutex<HashMap<String, Arc<T>>>;

/// Every series one filter has reported into.
pub struct SeriesCache {
    stats: Arc<Stats>,
    config: Arc<IstioStats>,
    hasher: std::collections::hash_map::RandomState,
    shards: [Shard<Series>; SHARDS],
    tcp: [Shard<TcpSeries>; SHARDS],
    /// Each worker's own view of `shards`.
    local: ThreadLocal<RefCell<HashMap<String, Arc<Series>>>>,
}

/// A label set as a string key: the values, each followed by a separator no label value
/// contains in practice (and if one did, the values still differ, so do the keys).
fn key<K, V: AsRef<str>>(labels: &[(K, V)]) -> String {
    let mut key = String::with_capacity(labels.iter().map(|(_, v)| v.as_ref().len() + 1).sum::<usize>() + 1);
    for (_, value) in labels {
        key.push_str(value.as_ref());
        key.push('\u{1f}');
    }
    key
}

/// Labels as the store keeps them.
fn owned<K: AsRef<str>, V: AsRef<str>>(labels: &[(K, V)]) -> Vec<(String, String)> {
    labels.iter().map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned())).collect()
}

impl SeriesCache {
    pub fn new(stats: Arc<Stats>, config: Arc<IstioStats>) -> Self {
        Self {
            stats,
            config,
            hasher: Default::default(),
            shards: Default::default(),
            tcp: Default::default(),
            local: ThreadLocal::new(),
        }
    }

    /// The TCP cells for `labels`, registered on first use.
    pub fn tcp<K: AsRef<str>, V: AsRef<str>>(&self, labels: &[(K, V)]) -> Arc<TcpSeries> {
        let key = key(labels);
        let shard = &self.tcp[(self.hasher.hash_one(&key) as usize) % SHARDS];
        if let Some(series) = lock(shard).get(&key) {
            return series.clone();
        }
        let labels = owned(labels);
        let counter = |metric: IstioMetric| {
            (!self.config.dropped.contains(&metric))
                .then(|| self.stats.counter(stat_name(metric, &self.labels_of(metric, &labels))))
        };
        let series = Arc::new(TcpSeries {
            connections_opened_total: counter(IstioMetric::TcpConnectionsOpenedTotal),
            connections_closed_total: counter(IstioMetric::TcpConnectionsClosedTotal),
            sent_bytes_total: counter(IstioMetric::TcpSentBytesTotal),
            received_bytes_total: counter(IstioMetric::TcpReceivedBytesTotal),
        });
        lock(shard).entry(key).or_insert(series).clone()
    }

    /// Runs `report` on the cells for `labels` (the standard labels, then the
    /// configuration's added ones), registered on first use. `grpc` requests also get the
    /// message counters. Found in this worker's own map: no lock, and no reference count
    /// another worker writes (the cells are lent, not cloned).
    pub fn with<K: AsRef<str>, V: AsRef<str>, R>(
        &self,
        labels: &[(K, V)],
        grpc: bool,
        report: impl FnOnce(&Series) -> R,
    ) -> R {
        let mut key = key(labels);
        key.push(if grpc { 'g' } else { 'h' });
        let local = self.local.get_or_default();
        if let Some(series) = local.borrow().get(&key) {
            return report(series);
        }
        let series = self.shared(key.clone(), labels, grpc);
        local.borrow_mut().insert(key, series.clone());
        report(&series)
    }

    /// The cells for `labels` in the map every worker shares, registered on first use.
    fn shared<K: AsRef<str>, V: AsRef<str>>(&self, key: String, labels: &[(K, V)], grpc: bool) -> Arc<Series> {
        let shard = &self.shards[(self.hasher.hash_one(&key) as usize) % SHARDS];
        if let Some(series) = lock(shard).get(&key) {
            return series.clone();
        }
        let series = Arc::new(self.register(&owned(labels), grpc));
        lock(shard).entry(key).or_insert(series).clone()
    }

    fn register(&self, labels: &[(String, String)], grpc: bool) -> Series {
        let name = |metric: IstioMetric| -> Option<StatName> {
            if self.config.dropped.contains(&metric) {
                return None;
            }
            Some(stat_name(metric, &self.labels_of(metric, labels)))
        };
        let counter = |metric| name(metric).map(|n| self.stats.counter(n));
        let histogram = |metric| name(metric).map(|n| self.stats.histogram(n));
        Series {
            requests_total: counter(IstioMetric::RequestsTotal),
            request_duration_milliseconds: histogram(IstioMetric::RequestDurationMilliseconds),
            request_bytes: histogram(IstioMetric::RequestBytes),
            response_bytes: histogram(IstioMetric::ResponseBytes),
            request_messages_total: if grpc { counter(IstioMetric::RequestMessagesTotal) } else { None },
            response_messages_total: if grpc { counter(IstioMetric::ResponseMessagesTotal) } else { None },
        }
    }

    /// `labels` as `metric` reports them: standard labels removed or given another value,
    /// added ones appended (Istio's `overrideTags`).
    fn labels_of(&self, metric: IstioMetric, labels: &[(String, String)]) -> Vec<(String, String)> {
        // The request's own labels come first, then one value per override.
        let base = labels.len().saturating_sub(self.config.overrides.len());
        let mut out: Vec<(String, String)> = labels.iter().take(base).cloned().collect();
        for (i, (m, change)) in self.config.overrides.iter().enumerate() {
            if *m != metric {
                continue;
            }
            match change {
                TagOverride::Remove(tag) => out.retain(|(k, _)| k != tag),
                TagOverride::Set(tag, _) => {
                    // The override's value was computed into the label list's tail.
                    let value = labels.get(base + i).map(|(_, v)| v.clone()).unwrap_or_default();
                    match out.iter_mut().find(|(k, _)| k == tag) {
                        Some(slot) => slot.1 = value,
                        None if STANDARD_TAGS.contains(&tag.as_str()) => {}
                        None => out.push((tag.clone(), value)),
                    }
                }
            }
        }
        out
    }
}

/// Istio's flat name and the Prometheus family `istio_<metric>`.
pub fn stat_name(metric: IstioMetric, labels: &[(String, String)]) -> StatName {
    let family = format!("istio_{}", metric.config_name());
    let mut flat = String::new();
    for (key, value) in labels {
        flat.push_str(key);
        flat.push_str(VALUE_SEPARATOR);
        flat.push_str(value);
        flat.push_str(FIELD_SEPARATOR);
    }
    flat.push_str(&family);
    StatName { flat, family, labels: labels.to_vec() }
}

/// Nothing panics while holding a shard; a poisoned one still holds whole entries.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::filters::istio_stats::TagValue;

    fn standard() -> Vec<(String, String)> {
        STANDARD_TAGS.iter().map(|t| ((*t).to_owned(), format!("{t}-value"))).collect()
    }

    #[test]
    fn the_flat_name_is_istios_and_the_family_carries_the_labels() {
        let name =
            stat_name(IstioMetric::RequestsTotal, &[("reporter".into(), "source".into()), ("a".into(), "b".into())]);
        assert_eq!(name.flat, "reporter=.=source;.;a=.=b;.;istio_requests_total");
        assert_eq!(name.family, "istio_requests_total");
        assert_eq!(name.labels.len(), 2);
    }

    #[test]
    fn istios_bootstrap_inclusion_prefix_keeps_the_flat_names() {
        // Istio's bootstrap keeps `reporter=` (and drops, say, every `cluster.` stat).
        let stats = Arc::new(Stats::with_matcher(|flat| !flat.starts_with("reporter=")));
        let cache = SeriesCache::new(stats.clone(), Arc::new(IstioStats::default()));
        cache.with(&standard(), true, |series| series.requests_total.as_ref().unwrap().inc());
        let families: std::collections::BTreeSet<String> = stats.samples().into_iter().map(|(n, _)| n.family).collect();
        let expected = [
            "istio_request_bytes",
            "istio_request_duration_milliseconds",
            "istio_request_messages_total",
            "istio_requests_total",
            "istio_response_bytes",
            "istio_response_messages_total",
        ];
        assert_eq!(families.iter().map(String::as_str).collect::<Vec<_>>(), expected);
    }

    #[test]
    fn one_label_set_is_registered_once() {
        let stats = Arc::new(Stats::default());
        let cache = SeriesCache::new(stats.clone(), Arc::new(IstioStats::default()));
        let a = cache.with(&standard(), false, |s| std::ptr::from_ref(s) as usize);
        let b = cache.with(&standard(), false, |s| std::ptr::from_ref(s) as usize);
        assert_eq!(a, b, "one registration");
        cache.with(&standard(), false, |s| {
            assert!(s.response_messages_total.is_none(), "only gRPC counts messages");
            s.requests_total.as_ref().unwrap().inc();
        });
        // Another worker finds the same cells.
        let stats_cache = Arc::new(cache);
        let other = stats_cache.clone();
        let seen =
            std::thread::spawn(move || other.with(&standard(), false, |s| s.requests_total.as_ref().unwrap().get()));
        assert_eq!(seen.join().unwrap(), 1);
    }

    #[test]
    fn overrides_remove_replace_and_add_labels_and_drops_leave_cells_out() {
        let config = IstioStats {
            dropped: vec![IstioMetric::RequestBytes],
            overrides: vec![
                (IstioMetric::RequestsTotal, TagOverride::Remove("source_principal")),
                (IstioMetric::RequestsTotal, TagOverride::Set("request_protocol".into(), TagValue::RequestMethod)),
                (IstioMetric::RequestsTotal, TagOverride::Set("user".into(), TagValue::Literal("x".into()))),
            ],
            ..IstioStats::default()
        };
        let stats = Arc::new(Stats::default());
        let cache = SeriesCache::new(stats.clone(), Arc::new(config));
        let mut labels = standard();
        labels.push(("".into(), "unused".into())); // override 0 computes nothing
        labels.push(("request_protocol".into(), "GET".into()));
        labels.push(("user".into(), "x".into()));
        cache.with(&labels, false, |series| assert!(series.request_bytes.is_none()));
        let samples = stats.samples();
        let total = samples.iter().find(|(n, _)| n.family == "istio_requests_total").unwrap();
        assert!(!total.0.labels.iter().any(|(k, _)| k == "source_principal"));
        assert!(total.0.labels.contains(&("request_protocol".into(), "GET".into())));
        assert_eq!(total.0.labels.last().unwrap(), &("user".to_owned(), "x".to_owned()));
        let duration = samples.iter().find(|(n, _)| n.family == "istio_request_duration_milliseconds").unwrap();
        assert_eq!(duration.0.labels.len(), 25, "the overrides were for requests_total only");
    }
}
