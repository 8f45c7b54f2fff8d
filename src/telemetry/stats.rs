//! The stats store: every named metric cell, registered once and scraped by the admin
//! server.
//!
//! A stat has two spellings, as in Envoy: the flat name `/stats` prints
//! (`cluster.backend.upstream_rq_2xx`) and the Prometheus family with the labels Envoy's
//! tag extraction gives it (`envoy_cluster_upstream_rq_xx{envoy_response_code_class="2",
//! envoy_cluster_name="backend"}`). [`Scope`] builds both from the same parts.
//!
//! Registration (get-or-create by flat name) and scraping take the store's lock; the
//! request path only ever holds handles. A cell nobody holds any more (its cluster or
//! listener is gone) is dropped at the next scrape, as Envoy drops a removed cluster's
//! scope.
//!
//! A store may be given the bootstrap's stats matcher ([`Stats::with_matcher`]): a name
//! it rejects is never registered, and its handle discards what it is given (Envoy's null
//! stats; a gauge, which code reads back, keeps its value unlisted). Code that registers
//! does not know the difference, and the rejected stat costs no scrape time and, but for
//! gauges, no memory.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use super::metrics::{Counter, Gauge, Histogram, HistogramSnapshot, TextReadout};

/// A stat's flat name and its Prometheus family and labels.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StatName {
    pub flat: String,
    pub family: String,
    pub labels: Vec<(String, String)>,
}

/// A prefix of stat names and the tags it carries: `cluster.<name>.` with
/// `envoy_cluster_name`, for instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    flat: String,
    family: String,
    labels: Vec<(String, String)>,
}

impl Scope {
    /// The root of Envoy's stats (Prometheus families start with `envoy_`).
    pub fn envoy() -> Self {
        Self { flat: String::new(), family: "envoy".to_owned(), labels: Vec::new() }
    }

    /// The root of stats only Outrider has (families start with `outrider_`).
    pub fn outrider() -> Self {
        Self { flat: "outrider.".to_owned(), family: "outrider".to_owned(), labels: Vec::new() }
    }

    /// A fixed segment: part of the flat name and of the family.
    pub fn child(&self, segment: &str) -> Self {
        Self {
            flat: format!("{}{segment}.", self.flat),
            family: format!("{}_{}", self.family, sanitize(segment)),
            labels: self.labels.clone(),
        }
    }

    /// A variable segment: part of the flat name, a label in Prometheus.
    pub fn tagged(&self, tag: &str, value: &str) -> Self {
        let mut labels = self.labels.clone();
        labels.push((tag.to_owned(), value.to_owned()));
        Self { flat: format!("{}{value}.", self.flat), family: self.family.clone(), labels }
    }

    pub fn name(&self, stat: &str) -> StatName {
        StatName {
            flat: format!("{}{stat}", self.flat),
            family: format!("{}_{}", self.family, sanitize(stat)),
            labels: self.labels.clone(),
        }
    }

    /// A stat whose last segment holds a tag, such as `upstream_rq_2xx` (family
    /// `upstream_rq_xx`, label `envoy_response_code_class="2"`).
    pub fn name_tagged(&self, stat: &str, family_stat: &str, tag: &str, value: &str) -> StatName {
        let mut labels = vec![(tag.to_owned(), value.to_owned())];
        labels.extend(self.labels.iter().cloned());
        StatName {
            flat: format!("{}{stat}", self.flat),
            family: format!("{}_{}", self.family, sanitize(family_stat)),
            labels,
        }
    }
}

/// Prometheus metric names allow `[a-zA-Z0-9_:]`; Envoy turns anything else into `_`.
pub fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == ':' { c } else { '_' }).collect()
}

/// One registered cell.
#[derive(Debug, Clone)]
enum Cell {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
    Text(TextReadout),
}

impl Cell {
    fn shared(&self) -> bool {
        match self {
            Cell::Counter(c) => c.shared(),
            Cell::Gauge(g) => g.shared(),
            Cell::Histogram(h) => h.shared(),
            Cell::Text(t) => t.shared(),
        }
    }

    /// Envoy's "used" flag: a counter once incremented (even if reset since), a gauge once
    /// set, a histogram once recorded, a text once set to something.
    fn used(&self, reset_while_used: bool) -> bool {
        match self {
            Cell::Counter(c) => c.get() != 0 || reset_while_used,
            Cell::Gauge(g) => g.used(),
            Cell::Histogram(h) => h.snapshot().count != 0,
            Cell::Text(t) => !t.get().is_empty(),
        }
    }

    fn value(&self) -> Value {
        match self {
            Cell::Counter(c) => Value::Counter(c.get()),
            Cell::Gauge(g) => Value::Gauge(g.get() as f64),
            Cell::Histogram(h) => Value::Histogram(h.snapshot()),
            Cell::Text(t) => Value::Text(t.get()),
        }
    }
}

/// A stat's value at scrape time.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Counter(u64),
    Gauge(f64),
    Histogram(HistogramSnapshot),
    Text(String),
}

/// A scraped stat.
pub type Sample = (StatName, Value);

/// Decides from a stat's flat name whether it must not exist.
pub type Rejects = Box<dyn Fn(&str) -> bool + Send + Sync>;

/// The bucket bounds (milliseconds) a histogram's flat name is given, if not Envoy's
/// defaults (`stats_config.histogram_bucket_settings`).
pub type BucketsFor = Box<dyn Fn(&str) -> Option<Vec<f64>> + Send + Sync>;

/// Every registered stat. Shared by `Arc`; handed explicitly to whoever registers.
#[derive(Default)]
pub struct Stats {
    cells: Mutex<BTreeMap<String, (StatName, Cell)>>,
    rejects: Option<Rejects>,
    buckets: Option<BucketsFor>,
    /// Counters `/reset_counters` set back to 0 after they were used: still used.
    reset_while_used: Mutex<std::collections::BTreeSet<String>>,
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats")
            .field("matcher", &self.rejects.is_some())
            .field("histogram_buckets", &self.buckets.is_some())
            .finish_non_exhaustive()
    }
}

macro_rules! get_or_create {
    ($fn:ident, $ty:ident, $variant:ident, $new:expr, $rejected:expr) => {
        /// The cell named `name`, created on first use. The same name always gives the
        /// same cell (a name registered as another kind gets a fresh, unlisted cell; a name
        /// the matcher rejects, a cell that keeps nothing where it can).
        pub fn $fn(&self, name: StatName) -> $ty {
            if !self.accepts(&name.flat) {
                return $rejected;
            }
            let mut cells = self.lock();
            match cells.get(&name.flat) {
                Some((_, Cell::$variant(cell))) => cell.clone(),
                Some(_) => $ty::default(),
                None => {
                    let cell: $ty = $new(self, &name.flat);
                    cells.insert(name.flat.clone(), (name, Cell::$variant(cell.clone())));
                    cell
                }
            }
        }
    };
}

impl Stats {
    /// A store that creates only the stats `rejects` lets through.
    pub fn with_matcher(rejects: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        Self { rejects: Some(Box::new(rejects)), ..Self::default() }
    }

    /// Whether a stat named `flat` may exist (stats computed at scrape time ask too).
    pub fn accepts(&self, flat: &str) -> bool {
        self.rejects.as_ref().is_none_or(|rejects| !rejects(flat))
    }

    /// Sets every counter back to zero (`POST /reset_counters`); gauges and histograms
    /// keep their values, as in Envoy.
    pub fn reset_counters(&self) {
        let cells = self.lock();
        let mut reset = self.reset_while_used.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for (flat, (_, cell)) in cells.iter() {
            if let Cell::Counter(counter) = cell {
                if counter.get() != 0 {
                    reset.insert(flat.clone());
                }
                counter.reset();
            }
        }
    }

    /// The live stats that were ever used (`/stats?usedonly`).
    pub fn used_samples(&self) -> Vec<Sample> {
        let mut cells = self.lock();
        cells.retain(|_, (_, cell)| cell.shared());
        let reset = self.reset_while_used.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        cells
            .iter()
            .filter(|(flat, (_, cell))| cell.used(reset.contains(*flat)))
            .map(|(_, (name, cell))| (name.clone(), cell.value()))
            .collect()
    }

    get_or_create!(counter, Counter, Counter, |_: &Self, _: &str| Counter::default(), Counter::discarding());
    // Gauges are read back (active requests, membership), so a rejected one still holds
    // its value, unlisted.
    get_or_create!(gauge, Gauge, Gauge, |_: &Self, _: &str| Gauge::default(), Gauge::default());
    get_or_create!(histogram, Histogram, Histogram, Self::new_histogram, Histogram::discarding());
    get_or_create!(text, TextReadout, Text, |_: &Self, _: &str| TextReadout::default(), TextReadout::default());

    /// Histograms get the buckets `buckets` gives their flat name, else Envoy's defaults.
    pub fn with_histogram_buckets(
        mut self,
        buckets: impl Fn(&str) -> Option<Vec<f64>> + Send + Sync + 'static,
    ) -> Self {
        self.buckets = Some(Box::new(buckets));
        self
    }

    fn new_histogram(&self, flat: &str) -> Histogram {
        match self.buckets.as_ref().and_then(|buckets| buckets(flat)) {
            Some(bounds) => Histogram::with_buckets(&bounds),
            None => Histogram::default(),
        }
    }

    /// Every live stat's value, by flat name; cells nobody holds are forgotten.
    pub fn samples(&self) -> Vec<Sample> {
        let mut cells = self.lock();
        cells.retain(|_, (_, cell)| cell.shared());
        cells.values().map(|(name, cell)| (name.clone(), cell.value())).collect()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, (StatName, Cell)>> {
        // Registration cannot panic midway; a poisoned lock still holds consistent data.
        self.cells.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_spell_envoy_names_and_prometheus_labels() {
        let cluster = Scope::envoy().child("cluster").tagged("envoy_cluster_name", "outbound|80||a.b");
        let total = cluster.name("upstream_rq_total");
        assert_eq!(total.flat, "cluster.outbound|80||a.b.upstream_rq_total");
        assert_eq!(total.family, "envoy_cluster_upstream_rq_total");
        assert_eq!(total.labels, vec![("envoy_cluster_name".to_owned(), "outbound|80||a.b".to_owned())]);
        let class = cluster.name_tagged("upstream_rq_2xx", "upstream_rq_xx", "envoy_response_code_class", "2");
        assert_eq!(class.flat, "cluster.outbound|80||a.b.upstream_rq_2xx");
        assert_eq!(class.family, "envoy_cluster_upstream_rq_xx");
        assert_eq!(class.labels[0], ("envoy_response_code_class".to_owned(), "2".to_owned()));
        assert_eq!(
            Scope::envoy().child("cluster_manager").child("cds").name("version").family,
            "envoy_cluster_manager_cds_version"
        );
    }

    #[test]
    fn same_name_same_cell_and_unheld_cells_are_dropped() {
        let stats = Stats::default();
        let name = Scope::envoy().child("server").name("live");
        let a = stats.counter(name.clone());
        stats.counter(name.clone()).inc();
        assert_eq!(a.get(), 1);
        assert_eq!(stats.samples().len(), 1);
        drop(a);
        assert!(stats.samples().is_empty());
    }

    #[test]
    fn used_samples_follow_envoys_used_flag() {
        let stats = Stats::default();
        let server = Scope::envoy().child("server");
        let set_zero = stats.gauge(server.name("workers_started"));
        let untouched = stats.gauge(server.name("untouched"));
        let counted = stats.counter(server.name("counted"));
        let idle = stats.counter(server.name("idle"));
        set_zero.set(0);
        counted.inc();
        stats.reset_counters();
        let used: Vec<String> = stats.used_samples().into_iter().map(|(n, _)| n.flat).collect();
        assert_eq!(used, ["server.counted", "server.workers_started"], "a reset counter stays used");
        drop((untouched, idle));
    }

    #[test]
    fn rejected_names_are_never_registered() {
        let stats = Stats::with_matcher(|flat| !flat.starts_with("server."));
        let kept = stats.counter(Scope::envoy().child("server").name("live"));
        let rejected = stats.counter(Scope::envoy().child("cluster").name("upstream_rq_total"));
        rejected.inc();
        kept.add(2);
        assert_eq!(rejected.get(), 0, "a rejected counter keeps nothing");
        let samples = stats.samples();
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].0.flat, "server.live");
        assert!(!stats.accepts("cluster.a.upstream_rq_total"));
        stats.reset_counters();
        assert_eq!(kept.get(), 0);
    }
}
