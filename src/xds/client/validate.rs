//! Decoding and validating one response's resources, all or nothing.

use std::collections::HashSet;
use std::time::SystemTime;

use bytes::Bytes;

use crate::config::convert::{decode_resource, resource_name};
use crate::config::{Ignored, Resource, ResourceType, Warnings};
use crate::store::{ConfigState, Versioned};

/// A resource as it came off the wire.
pub struct Incoming {
    /// Delta carries the name beside the resource; SotW does not.
    pub name: Option<String>,
    pub version: String,
    pub bytes: Bytes,
}

/// Converts every resource of a response. Any failure rejects the whole response (a
/// NACKed update changes nothing that is served); the error names each rejected resource
/// and the field path of the problem, as Envoy's `error_detail` does.
pub fn validate(
    state: Option<&ConfigState>,
    resource_type: ResourceType,
    incoming: Vec<Incoming>,
    warned: &mut HashSet<Ignored>,
) -> Result<Vec<Versioned<Resource>>, String> {
    let now = SystemTime::now();
    let mut accepted = Vec::with_capacity(incoming.len());
    let mut errors = Vec::new();
    for (index, Incoming { name, version, bytes }) in incoming.into_iter().enumerate() {
        let mut warnings = Warnings::new();
        let label = name
            .clone()
            .or_else(|| resource_name(resource_type, &bytes))
            .unwrap_or_else(|| format!("resources[{index}]"));
        match decode_resource(resource_type, &bytes, &mut warnings) {
            Ok(resource) => {
                if let Some(name) = &name
                    && name != resource.name()
                {
                    errors.push(format!(
                        "{} {label}: name: resource is named {:?}",
                        resource_type.short_name(),
                        resource.name()
                    ));
                    continue;
                }
                if let Err(e) = state.map_or(Ok(()), |s| s.check(&resource)) {
                    errors.push(format!("{} {label}: {e}", resource_type.short_name()));
                    continue;
                }
                log_warnings(resource_type, resource.name(), warnings, warned);
                accepted.push(Versioned { resource, version, last_updated: now, raw: bytes });
            }
            Err(e) => errors.push(format!("{} {label}: {e}", resource_type.short_name())),
        }
    }
    if errors.is_empty() { Ok(accepted) } else { Err(errors.join("; ")) }
}

/// Logs each ignored field once per process, not once per push.
fn log_warnings(resource_type: ResourceType, name: &str, warnings: Warnings, warned: &mut HashSet<Ignored>) {
    for ignored in warnings.into_items() {
        if warned.insert(ignored.clone()) {
            tracing::warn!(
                resource = %resource_type.short_name(),
                %name,
                path = %ignored.path,
                "ignored: {}",
                ignored.what
            );
        }
    }
}
