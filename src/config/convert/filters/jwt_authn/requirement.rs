//! `JwtRequirement` → [`JwtRequirement`], with Envoy's load-time checks.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::error::{ConfigError, Result};
use crate::config::filters::jwt_authn::{JwtProvider, JwtRequirement};
use crate::pb::envoy::extensions::filters::http::jwt_authn::v3 as proto;

pub fn requirement(
    proto: proto::JwtRequirement,
    providers: &BTreeMap<String, Arc<JwtProvider>>,
) -> Result<JwtRequirement> {
    use proto::jwt_requirement::RequiresType;
    let known = |name: String, field: &str| {
        if providers.contains_key(&name) {
            Ok(name)
        } else {
            Err(ConfigError::new(field, format!("Required provider ['{name}'] is not configured.")))
        }
    };
    Ok(match proto.requires_type {
        None => JwtRequirement::AllowAll,
        Some(RequiresType::ProviderName(name)) => {
            JwtRequirement::Provider { name: known(name, "provider_name")?, audiences: None }
        }
        Some(RequiresType::ProviderAndAudiences(proto::ProviderWithAudiences { provider_name, audiences })) => {
            let name = known(provider_name, "provider_and_audiences.provider_name")?;
            // No audiences: the provider's own are checked, as Envoy does.
            let audiences = (!audiences.is_empty()).then_some(audiences);
            JwtRequirement::Provider { name, audiences }
        }
        Some(RequiresType::RequiresAny(proto::JwtRequirementOrList { requirements })) => {
            JwtRequirement::Any(list(requirements, providers).map_err(|e| e.at("requires_any"))?)
        }
        Some(RequiresType::RequiresAll(proto::JwtRequirementAndList { requirements })) => {
            JwtRequirement::All(list(requirements, providers).map_err(|e| e.at("requires_all"))?)
        }
        Some(RequiresType::AllowMissingOrFailed(_)) => JwtRequirement::AllowMissingOrFailed,
        Some(RequiresType::AllowMissing(_)) => JwtRequirement::AllowMissing,
        Some(RequiresType::ExtractOnlyWithoutValidation(_)) => {
            return Err(ConfigError::new(
                "extract_only_without_validation",
                "extracting tokens without validating them is not supported",
            ));
        }
    })
}

/// `requirements` of an and/or list: at least two, as Envoy's validation requires.
fn list(
    requirements: Vec<proto::JwtRequirement>,
    providers: &BTreeMap<String, Arc<JwtProvider>>,
) -> Result<Vec<JwtRequirement>> {
    if requirements.len() < 2 {
        return Err(ConfigError::new("requirements", "must have at least 2 requirements"));
    }
    requirements
        .into_iter()
        .enumerate()
        .map(|(i, r)| requirement(r, providers).map_err(|e| e.at(format!("requirements[{i}]"))))
        .collect()
}
