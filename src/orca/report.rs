//! From the wire `OrcaLoadReport` to the balancers' `LoadReport`, with the value checks
//! every carrier (headers, trailers, the out-of-band stream) shares.

use std::collections::{BTreeMap, HashMap};

use crate::lb::load::LoadReport;
use crate::pb::orca::OrcaLoadReport;

use super::error::OrcaError;

/// Converts and validates a decoded report. Every value must be finite and non-negative;
/// Envoy checks that only for the TEXT form, Outrider for all forms so that a balancer
/// never divides by a NaN whichever way the report came.
///
/// The deprecated integer `rps` is ignored, as in Envoy: its weight manager reads only
/// `rps_fractional`, so a report with just `rps` counts as "no rate" there too.
#[allow(deprecated)]
pub fn from_proto(proto: OrcaLoadReport) -> Result<LoadReport, OrcaError> {
    let OrcaLoadReport {
        cpu_utilization,
        mem_utilization,
        rps: _,
        request_cost,
        utilization,
        rps_fractional,
        eps,
        named_metrics,
        application_utilization,
    } = proto;
    Ok(LoadReport {
        cpu_utilization: checked("cpu_utilization", cpu_utilization)?,
        mem_utilization: checked("mem_utilization", mem_utilization)?,
        application_utilization: checked("application_utilization", application_utilization)?,
        rps_fractional: checked("rps_fractional", rps_fractional)?,
        eps: checked("eps", eps)?,
        named_metrics: checked_map("named_metrics", named_metrics)?,
        utilization: checked_map("utilization", utilization)?,
        request_cost: checked_map("request_cost", request_cost)?,
    })
}

/// The value if it is finite and not negative; `name` goes into the error.
pub(crate) fn checked(name: &str, value: f64) -> Result<f64, OrcaError> {
    if !value.is_finite() {
        Err(OrcaError::NotFinite(name.to_owned()))
    } else if value < 0.0 {
        Err(OrcaError::Negative(name.to_owned()))
    } else {
        Ok(value)
    }
}

fn checked_map(field: &str, map: HashMap<String, f64>) -> Result<BTreeMap<String, f64>, OrcaError> {
    map.into_iter()
        .map(|(key, value)| {
            let value = checked(&format!("{field}.{key}"), value)?;
            Ok((key, value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_every_field() {
        let proto = OrcaLoadReport {
            cpu_utilization: 0.5,
            mem_utilization: 0.25,
            request_cost: HashMap::from([("db".to_owned(), 3.0)]),
            utilization: HashMap::from([("gpu".to_owned(), 0.75)]),
            rps_fractional: 100.0,
            eps: 2.0,
            named_metrics: HashMap::from([("queue".to_owned(), 4.0)]),
            application_utilization: 0.8,
            ..Default::default()
        };
        let report = from_proto(proto);
        let expected = LoadReport {
            cpu_utilization: 0.5,
            mem_utilization: 0.25,
            application_utilization: 0.8,
            rps_fractional: 100.0,
            eps: 2.0,
            named_metrics: BTreeMap::from([("queue".to_owned(), 4.0)]),
            utilization: BTreeMap::from([("gpu".to_owned(), 0.75)]),
            request_cost: BTreeMap::from([("db".to_owned(), 3.0)]),
        };
        assert_eq!(report, Ok(expected));
    }

    #[test]
    #[allow(deprecated)]
    fn deprecated_rps_is_not_a_rate() {
        let report = from_proto(OrcaLoadReport { rps: 40, ..Default::default() });
        assert_eq!(report.map(|r| r.rps_fractional), Ok(0.0));
    }

    #[test]
    fn rejects_bad_values_with_their_names() {
        let nan = OrcaLoadReport { eps: f64::NAN, ..Default::default() };
        assert_eq!(from_proto(nan), Err(OrcaError::NotFinite("eps".into())));
        let inf = OrcaLoadReport { cpu_utilization: f64::INFINITY, ..Default::default() };
        assert_eq!(from_proto(inf), Err(OrcaError::NotFinite("cpu_utilization".into())));
        let negative = OrcaLoadReport { named_metrics: HashMap::from([("q".to_owned(), -1.0)]), ..Default::default() };
        assert_eq!(from_proto(negative), Err(OrcaError::Negative("named_metrics.q".into())));
    }
}
