//! `io.istio.http.peer_metadata.Config` (istiod's `istio.metadata_exchange` HTTP filter,
//! always a `TypedStruct`) → [`PeerMetadata`].
//!
//! Discovery only observes: a method Outrider does not run (the workload metadata xDS,
//! baggage, upstream filter state) leaves the peer unknown, with a warning. Propagation
//! adds headers to what is sent, so a method or setting Outrider does not run is refused.

use super::istio_json::{boolean, config_object, field, list, object, string};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::peer_metadata::PeerMetadata;
use crate::pb::google::protobuf::Any;

pub const TYPE: &str = "io.istio.http.peer_metadata.Config";

pub fn peer_metadata(any: &Any, warnings: &mut Warnings) -> Result<PeerMetadata> {
    let config = config_object(any, TYPE)?;
    let mut out = PeerMetadata::default();
    for (key, value) in &config {
        let name = field(key);
        match name.as_str() {
            "downstream_discovery" => {
                let found = discovery(value, &name, true, warnings)?;
                (out.downstream_discovery, out.downstream_workload_discovery) = found;
            }
            "upstream_discovery" => out.upstream_discovery = discovery(value, &name, false, warnings)?.0,
            "downstream_propagation" => out.downstream_propagation = propagation(value, &name)?,
            "upstream_propagation" => out.upstream_propagation = propagation(value, &name)?,
            "shared_with_upstream" => out.shared_with_upstream = boolean(value, &name)?,
            "additional_labels" => {
                for (i, label) in list(value, &name)?.iter().enumerate() {
                    out.additional_labels.push(string(label, &format!("{name}[{i}]"))?.to_owned());
                }
                if !out.additional_labels.is_empty() {
                    // Every node label already travels in `LABELS`; nothing is added beside it.
                    warnings.ignored(name, "the node's labels are exchanged in LABELS; no others are added");
                }
            }
            _ => return Err(ConfigError::new(name, "unknown field of io.istio.http.peer_metadata.Config")),
        }
    }
    Ok(out)
}

/// Whether the list has `istio_headers`, and `workload_discovery` (run only `downstream`);
/// other methods are left out with a warning.
fn discovery(value: &serde_json::Value, at: &str, downstream: bool, warnings: &mut Warnings) -> Result<(bool, bool)> {
    let mut istio_headers = false;
    let mut workload_discovery = false;
    for (i, method) in list(value, at)?.iter().enumerate() {
        let at = format!("{at}[{i}]");
        for (key, settings) in object(method, &at)?.iter() {
            let name = field(key);
            match name.as_str() {
                "istio_headers" => {
                    // `skip_external_clusters` only matters for propagation.
                    object(settings, &format!("{at}.{name}"))?;
                    istio_headers = true;
                }
                "workload_discovery" if downstream => {
                    if !istio_headers {
                        warnings.ignored(
                            format!("{at}.{name}"),
                            "the peer's headers are consulted before its address's workload, whatever the order",
                        );
                    }
                    workload_discovery = true;
                }
                "workload_discovery" => warnings.ignored(
                    format!("{at}.{name}"),
                    "the upstream peer is named only by its headers; the workload at its address is not looked up",
                ),
                "baggage" | "upstream_filter_state" => warnings.ignored(
                    format!("{at}.{name}"),
                    "peer discovery method not run by Outrider; the peer stays unknown when no header names it",
                ),
                _ => warnings.ignored(format!("{at}.{name}"), "unknown peer discovery method; not run"),
            }
        }
    }
    Ok((istio_headers, workload_discovery))
}

/// Whether the list has `istio_headers`. A method that would add other headers (`baggage`)
/// or leave some out for some clusters (`skip_external_clusters`) is refused.
fn propagation(value: &serde_json::Value, at: &str) -> Result<bool> {
    let mut istio_headers = false;
    for (i, method) in list(value, at)?.iter().enumerate() {
        let at = format!("{at}[{i}]");
        for (key, settings) in object(method, &at)?.iter() {
            let name = field(key);
            let at = format!("{at}.{name}");
            if name != "istio_headers" {
                return Err(ConfigError::new(at, "peer metadata propagation method not supported by Outrider"));
            }
            for (key, setting) in object(settings, &at)?.iter() {
                let name = field(key);
                let at = format!("{at}.{name}");
                match name.as_str() {
                    "skip_external_clusters" if !boolean(setting, &at)? => {}
                    "skip_external_clusters" => {
                        return Err(ConfigError::new(
                            at,
                            "leaving the headers out for clusters outside the mesh is not supported",
                        ));
                    }
                    _ => return Err(ConfigError::new(at, "unknown field of IstioHeaders")),
                }
            }
            istio_headers = true;
        }
    }
    Ok(istio_headers)
}
