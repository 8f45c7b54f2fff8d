//! The constraints Envoy's protos declare (`validate.rules`), checked before conversion.
//!
//! Envoy checks them while it decodes a response, before its listener, cluster or route
//! manager looks at any resource: a resource that breaks one (or does not decode) fails the
//! response as a whole, which is NACKed with nothing of it applied. Conversion's own
//! refusals, by contrast, reject one resource (see `xds::client::validate`). The rules are
//! read from the descriptors (`pb::pgv`), not restated here, so that every field has
//! exactly Envoy's constraints, converted by Outrider or not.

use super::super::ResourceType;
use super::super::error::ConfigError;
use crate::pb::pgv::Kept;

/// Checks each of one response's resources; the first that breaks a constraint, by its
/// index in `resources`, with the field path and the rule.
pub fn check<'a>(
    resource_type: ResourceType,
    resources: impl IntoIterator<Item = &'a [u8]>,
) -> Result<(), (usize, ConfigError)> {
    check_kept(&mut Kept::default(), resource_type, resources)
}

/// [`check`] with the validator `kept` holds (decoded if it holds none).
pub fn check_kept<'a>(
    kept: &mut Kept,
    resource_type: ResourceType,
    resources: impl IntoIterator<Item = &'a [u8]>,
) -> Result<(), (usize, ConfigError)> {
    let type_url = resource_type.type_url();
    let full_name = type_url.rsplit('/').next().unwrap_or(type_url);
    let validator = kept.resources().map_err(|e| (0, ConfigError::new("", e.to_string())))?;
    for (index, bytes) in resources.into_iter().enumerate() {
        validator.check(full_name, bytes).map_err(|violation| {
            let reason = format!("proto constraint validation failed: {}", violation.reason);
            (index, ConfigError::new(violation.path, reason))
        })?;
    }
    Ok(())
}
