//! Telemetry: the stats store and its metric families (Envoy's names), their exposition
//! for `/stats` and `/stats/prometheus`, the log subscriber, and the access log writer.
//!
//! Everything here is passed explicitly (no global registry): the composition root
//! creates one [`Stats`] and hands it to whoever registers stats.

pub mod cluster;
pub mod code_stats;
pub mod connection;
pub mod control_plane;
pub mod downstream;
pub mod exposition;
pub mod lazy;
pub mod line_writer;
pub mod logging;
pub mod metrics;
pub mod shards;
pub mod stats;
pub mod trace;

pub use cluster::ClusterStats;
pub use code_stats::CodeCounters;
pub use connection::{ConnectionLife, SslCells, SslStats};
pub use control_plane::{ControlPlaneStats, ServerState, ServerStats, SubscriptionStats};
pub use downstream::{HttpStats, ListenerStats};
pub use lazy::{LazyCounter, LazyHistogram};
pub use line_writer::{LineWriter, LineWriters, LogSink, WorkerLineBuffer};
pub use metrics::{Counter, Gauge, GaugeGuard, Histogram, TextReadout};
/// Span attributes, for callers that add their own.
pub use opentelemetry::KeyValue;
pub use opentelemetry::trace::SpanKind;
pub use stats::{BucketsFor, Rejects, Sample, Scope, StatName, Stats, Value};
pub use trace::{RequestSpan, Resolve, Tracing, Transport};
