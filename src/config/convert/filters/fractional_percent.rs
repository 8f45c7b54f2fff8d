//! `envoy.type.v3.FractionalPercent` and `envoy.config.core.v3.RuntimeFractionalPercent`
//! → [`FractionalPercent`].

use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::fractional_percent::FractionalPercent;
use crate::pb::envoy::config::core::v3::RuntimeFractionalPercent;
use crate::pb::envoy::r#type::v3 as types;

pub fn fractional_percent(proto: &types::FractionalPercent) -> Result<FractionalPercent> {
    use types::fractional_percent::DenominatorType as D;
    let types::FractionalPercent { numerator, denominator } = *proto;
    let denominator = match D::try_from(denominator) {
        Ok(D::Hundred) => 100,
        Ok(D::TenThousand) => 10_000,
        Ok(D::Million) => 1_000_000,
        Err(_) => return Err(ConfigError::new("denominator", format!("unknown value {denominator}"))),
    };
    Ok(FractionalPercent { numerator, denominator })
}

/// An absent percentage is 0%, as the proto's default message is.
pub fn opt_fractional_percent(proto: &Option<types::FractionalPercent>, field: &str) -> Result<FractionalPercent> {
    match proto {
        None => Ok(FractionalPercent::NONE),
        Some(p) => fractional_percent(p).map_err(|e| e.at(field)),
    }
}

/// Outrider has no runtime: `default_value` is what Envoy uses while its runtime does
/// not set `runtime_key`, so the key is ignored with a warning.
pub fn runtime_fractional_percent(
    proto: &RuntimeFractionalPercent,
    warnings: &mut Warnings,
) -> Result<FractionalPercent> {
    let RuntimeFractionalPercent { default_value, runtime_key } = proto;
    let Some(default_value) = default_value else {
        return Err(ConfigError::new("default_value", "is required"));
    };
    if !runtime_key.is_empty() {
        warnings.ignored("runtime_key", "Outrider has no runtime: the default value applies");
    }
    fractional_percent(default_value).map_err(|e| e.at("default_value"))
}

/// Warns about a filter's `*_runtime` key override: without a runtime, the configured
/// value always applies, as in an Envoy whose runtime does not set the key.
pub fn ignore_runtime_key(key: &str, field: &str, warnings: &mut Warnings) {
    if !key.is_empty() {
        warnings.ignored(field, "Outrider has no runtime: the configured value applies");
    }
}
