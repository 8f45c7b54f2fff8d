//! The `TEXT` form of `endpoint-load-metrics`: `cpu_utilization=0.3, rps_fractional=120,
//! named_metrics.queue=4`. Envoy's rules: comma-separated, blanks around items ignored,
//! `=` or `:` between name and value (`:` is what Envoy ≤ 1.32 and some backends send),
//! and any duplicate, empty, unknown or unparsable item refuses the whole header.

use std::collections::HashSet;

use crate::pb::orca::OrcaLoadReport;

use super::error::OrcaError;

const NAMED_METRICS: &str = "named_metrics.";
const UTILIZATION: &str = "utilization.";

/// Parses the part after `TEXT `. Values are checked (finite, non-negative) later, by
/// [`super::report::from_proto`], like every other form.
pub fn parse(text: &str) -> Result<OrcaLoadReport, OrcaError> {
    let mut report = OrcaLoadReport::default();
    let mut seen = HashSet::new();
    for item in text.split(',').map(str::trim).filter(|item| !item.is_empty()) {
        // An item without a separator is a name with an empty value, as in Envoy.
        let (name, value) = item.split_once(['=', ':']).unwrap_or((item, ""));
        let (name, value) = (name.trim(), value.trim());
        if !seen.insert(name) {
            return Err(OrcaError::DuplicateMetric(name.to_owned()));
        }
        set(&mut report, name, value)?;
    }
    Ok(report)
}

fn set(report: &mut OrcaLoadReport, name: &str, value: &str) -> Result<(), OrcaError> {
    if name.is_empty() {
        return Err(OrcaError::EmptyName);
    }
    if value.is_empty() {
        return Err(OrcaError::EmptyValue(name.to_owned()));
    }
    let number: f64 =
        value.parse().map_err(|_| OrcaError::NotANumber { name: name.to_owned(), value: value.to_owned() })?;
    let map = if let Some(key) = name.strip_prefix(NAMED_METRICS) {
        Some((&mut report.named_metrics, key))
    } else if let Some(key) = name.strip_prefix(UTILIZATION) {
        Some((&mut report.utilization, key))
    } else {
        None
    };
    if let Some((map, key)) = map {
        if key.is_empty() {
            return Err(OrcaError::EmptyKey(name.to_owned()));
        }
        map.insert(key.to_owned(), number);
        return Ok(());
    }
    let field = match name {
        "cpu_utilization" => &mut report.cpu_utilization,
        "mem_utilization" => &mut report.mem_utilization,
        "application_utilization" => &mut report.application_utilization,
        "rps_fractional" => &mut report.rps_fractional,
        "eps" => &mut report.eps,
        // Including `request_cost.<k>`: Envoy's TEXT parser knows no such prefix.
        _ => return Err(OrcaError::UnsupportedMetric(name.to_owned())),
    };
    *field = number;
    Ok(())
}
