//! The `backends` section of a lab scenario file (`bench/scenarios/*.yaml`): one entry per
//! loopback port and how that backend behaves. The rest of the file (load, policies,
//! events) is the lab runner's, and ignored here.

use std::time::Duration;

use http::StatusCode;
use serde::Deserialize;

use crate::testkit::backends::{BackendBehaviour, OrcaMode, Stall, Utilization, Warmup};

/// One backend of a scenario, as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendSpec {
    pub name: String,
    pub port: u16,
    /// e.g. `20ms`.
    #[serde(default)]
    latency: Option<String>,
    /// Mean of the exponential tail added to the latency.
    #[serde(default)]
    jitter: Option<String>,
    /// Requests served at full speed at once; more queue.
    #[serde(default)]
    capacity: Option<u32>,
    #[serde(default)]
    error_rate: Option<f64>,
    /// HTTP status of a failed request (default 503).
    #[serde(default)]
    error_status: Option<u16>,
    /// Failed requests answer at once (a black hole).
    #[serde(default)]
    fail_fast: bool,
    /// `text`, `bin` or `trailer`; none when absent.
    #[serde(default)]
    orca: Option<String>,
    /// `inside` (default) or `busy`.
    #[serde(default)]
    utilization: Option<String>,
    #[serde(default)]
    stalls: Vec<StallSpec>,
    #[serde(default)]
    warmup: Option<WarmupSpec>,
    /// When the runner adds this endpoint to the cluster; the backend itself serves from
    /// the start (and stays cold until then).
    #[serde(default)]
    #[allow(dead_code)]
    join_at: Option<String>,
    /// CPU each request costs (e.g. `1ms`), spent on the backend's one thread.
    #[serde(default)]
    cpu: Option<String>,
    /// The CPUs of the backend's pod (a cgroup quota the runner sets; the backend then
    /// runs in a process of its own): read by the runner only.
    #[serde(default)]
    #[allow(dead_code)]
    cpu_limit: Option<f64>,
    /// A process that takes CPU in the backend's pod for a while: the runner's.
    #[serde(default)]
    #[allow(dead_code)]
    neighbour: Option<NeighbourSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct NeighbourSpec {
    at: String,
    #[serde(rename = "for")]
    duration: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct StallSpec {
    at: String,
    #[serde(rename = "for")]
    duration: String,
    latency: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct WarmupSpec {
    requests: u64,
    factor: f64,
}

#[derive(Debug, Deserialize)]
struct ScenarioFile {
    backends: Vec<BackendSpec>,
}

/// Reads the backends of a scenario file: (port, behaviour) pairs.
pub fn backends(text: &str) -> Result<Vec<(u16, BackendBehaviour)>, String> {
    let file: ScenarioFile = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
    // Empty when every backend runs elsewhere (the lab's --grpc-go runs start grpc-go
    // backends of their own and use this command only as the control plane).
    file.backends
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            let port = spec.port;
            spec.behaviour().map(|b| (port, b)).map_err(|e| format!("backends[{i}]: {e}"))
        })
        .collect()
}

impl BackendSpec {
    fn behaviour(self) -> Result<BackendBehaviour, String> {
        let mut b = BackendBehaviour::new(self.name);
        b.latency = duration(self.latency.as_deref(), "latency")?;
        b.jitter = duration(self.jitter.as_deref(), "jitter")?;
        b.cpu = duration(self.cpu.as_deref(), "cpu")?;
        if let Some(capacity) = self.capacity {
            b.capacity = capacity.max(1);
        }
        if let Some(rate) = self.error_rate {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("error_rate: {rate} is not between 0 and 1"));
            }
            b.error_rate = rate;
        }
        if let Some(status) = self.error_status {
            b.error_status = StatusCode::from_u16(status).map_err(|e| format!("error_status: {e}"))?;
        }
        b.fail_fast = self.fail_fast;
        b.orca = match self.orca.as_deref() {
            None | Some("none") => None,
            Some("text") => Some(OrcaMode::TextHeader),
            Some("bin") => Some(OrcaMode::BinHeader),
            Some("trailer") => Some(OrcaMode::Trailer),
            Some(other) => return Err(format!("orca: {other:?} is not text, bin, trailer or none")),
        };
        b.utilization = match self.utilization.as_deref() {
            None | Some("inside") => Utilization::Inside,
            Some("busy") => Utilization::Busy,
            Some(other) => return Err(format!("utilization: {other:?} is not inside or busy")),
        };
        for (i, stall) in self.stalls.into_iter().enumerate() {
            let field = |name: &str| format!("stalls[{i}].{name}");
            b.stalls.push(Stall {
                at: duration(Some(&stall.at), &field("at"))?,
                duration: duration(Some(&stall.duration), &field("for"))?,
                latency: duration(Some(&stall.latency), &field("latency"))?,
            });
        }
        if let Some(WarmupSpec { requests, factor }) = self.warmup {
            if !factor.is_finite() || factor < 0.0 {
                return Err(format!("warmup.factor: {factor} is not a non-negative number"));
            }
            b.warmup = Some(Warmup { requests, factor });
        }
        Ok(b)
    }
}

fn duration(text: Option<&str>, field: &str) -> Result<Duration, String> {
    match text {
        None => Ok(Duration::ZERO),
        Some(text) => humantime::parse_duration(text).map_err(|e| format!("{field}: {text:?}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_behaviour_and_ignores_the_runners_sections() {
        let text = r#"
name: example
load: { mode: open, rate: 100 }
backends:
  - { name: a, port: 18201, latency: 20ms, jitter: 2ms, capacity: 4, orca: bin, utilization: busy }
  - name: b
    port: 18202
    error_rate: 1.0
    error_status: 500
    fail_fast: true
    stalls: [{ at: 10s, for: 5s, latency: 500ms }]
    warmup: { requests: 200, factor: 10 }
    join_at: 10s
"#;
        let backends = backends(text).unwrap();
        let (port, a) = &backends[0];
        assert_eq!(*port, 18201);
        assert_eq!((a.latency, a.jitter, a.capacity), (Duration::from_millis(20), Duration::from_millis(2), 4));
        assert_eq!((a.orca, a.utilization), (Some(OrcaMode::BinHeader), Utilization::Busy));
        let (_, b) = &backends[1];
        assert_eq!((b.error_rate, b.error_status, b.fail_fast), (1.0, StatusCode::INTERNAL_SERVER_ERROR, true));
        let stall = Stall {
            at: Duration::from_secs(10),
            duration: Duration::from_secs(5),
            latency: Duration::from_millis(500),
        };
        assert_eq!(b.stalls, [stall]);
        assert_eq!(b.warmup, Some(Warmup { requests: 200, factor: 10.0 }));
    }

    #[test]
    fn a_pod_backend_spends_cpu_and_leaves_its_limit_and_neighbour_to_the_runner() {
        let text = "backends: [{ name: p, port: 1, latency: 2ms, cpu: 1ms, cpu_limit: 0.2, \
                    neighbour: { at: 10s, for: 15s } }]";
        let pod = backends(text).unwrap();
        assert_eq!((pod[0].1.cpu, pod[0].1.latency), (Duration::from_millis(1), Duration::from_millis(2)));
        let error = backends("backends: [{ name: p, port: 1, neighbour: { at: 1s, until: 2s } }]").unwrap_err();
        assert!(error.contains("until"), "{error}");
    }

    #[test]
    fn a_mistake_names_its_field() {
        let error =
            backends("backends: [{ name: a, port: 1, stalls: [{ at: soon, for: 1s, latency: 1s }] }]").unwrap_err();
        assert!(error.contains("backends[0]: stalls[0].at"), "{error}");
        let error = backends("backends: [{ name: a, port: 1, latncy: 1s }]").unwrap_err();
        assert!(error.contains("latncy"), "{error}");
        let error = backends("backends: [{ name: a, port: 1, orca: json }]").unwrap_err();
        assert!(error.contains("orca"), "{error}");
    }
}
