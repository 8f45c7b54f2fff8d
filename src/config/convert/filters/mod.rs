//! The filters Outrider runs: `typed_config` → [`HttpFilterConfig`] /
//! [`NetworkFilterConfig`], and `typed_per_filter_config` → [`FilterOverride`].
//!
//! Each filter's conversion lives in its own file; this one only dispatches on the
//! configuration's type. `Ok(None)` means "not a filter Outrider runs": the caller then
//! skips it only if it merely observes traffic, and refuses it otherwise.

mod compressor;
pub mod cors;
mod ext_authz;
mod fault;
pub(crate) mod fractional_percent;
mod grpc_service;
mod health_check;
pub(super) mod istio_json;
mod istio_stats;
mod istio_wasm;
mod jwt_authn;
mod local_ratelimit;
pub(crate) mod metadata_exchange;
mod peer_metadata;
mod ratelimit;
pub(crate) mod rbac;
mod set_filter_state;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use super::common::type_name;
use super::filter_kind::{config_type, envoys_own};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::{FilterOverride, HttpFilterConfig, NetworkFilterConfig, PerFilterConfig};
use crate::pb::google::protobuf::Any;

/// An HTTP filter's `typed_config`, when Outrider runs filters of its type.
pub fn http_filter(any: &Any, warnings: &mut Warnings) -> Result<Option<HttpFilterConfig>> {
    if config_type(any) == istio_wasm::TYPE {
        return istio_wasm::http_filter(any, warnings);
    }
    Ok(Some(match config_type(any).as_str() {
        health_check::TYPE => HttpFilterConfig::HealthCheck(Arc::new(health_check::health_check(any, warnings)?)),
        jwt_authn::TYPE => HttpFilterConfig::JwtAuthn(Arc::new(jwt_authn::jwt_authentication(any, warnings)?)),
        local_ratelimit::HTTP_TYPE => {
            HttpFilterConfig::LocalRateLimit(Arc::new(local_ratelimit::http_local_rate_limit(any, false, warnings)?))
        }
        fault::TYPE => HttpFilterConfig::Fault(Arc::new(fault::http_fault(any, warnings)?)),
        cors::FILTER_TYPE => {
            cors::cors_filter(any)?;
            HttpFilterConfig::Cors
        }
        rbac::HTTP_TYPE => HttpFilterConfig::Rbac(Arc::new(rbac::http_rbac(any, warnings)?)),
        compressor::TYPE => HttpFilterConfig::Compressor(Arc::new(compressor::compressor(any, warnings)?)),
        ext_authz::TYPE => HttpFilterConfig::ExtAuthz(Arc::new(ext_authz::ext_authz(any, warnings)?)),
        ratelimit::TYPE => HttpFilterConfig::RateLimit(Arc::new(ratelimit::ratelimit(any, warnings)?)),
        peer_metadata::TYPE => HttpFilterConfig::PeerMetadata(Arc::new(peer_metadata::peer_metadata(any, warnings)?)),
        istio_stats::TYPE => HttpFilterConfig::IstioStats(Arc::new(istio_stats::istio_stats(any, warnings)?)),
        set_filter_state::TYPE => {
            HttpFilterConfig::SetFilterState(Arc::new(set_filter_state::set_filter_state(any, warnings)?))
        }
        _ => return Ok(None),
    }))
}

/// A network filter's `typed_config`, when Outrider runs filters of its type.
pub fn network_filter(any: &Any, warnings: &mut Warnings) -> Result<Option<NetworkFilterConfig>> {
    Ok(Some(match config_type(any).as_str() {
        local_ratelimit::NETWORK_TYPE => {
            NetworkFilterConfig::LocalRateLimit(Arc::new(local_ratelimit::network_local_rate_limit(any, warnings)?))
        }
        rbac::NETWORK_TYPE => NetworkFilterConfig::Rbac(Arc::new(rbac::network_rbac(any, warnings)?)),
        ext_authz::NETWORK_TYPE => NetworkFilterConfig::ExtAuthz(Arc::new(ext_authz::network(any, warnings)?)),
        metadata_exchange::TYPE => {
            NetworkFilterConfig::MetadataExchange(Arc::new(metadata_exchange::metadata_exchange(any, warnings)?))
        }
        istio_stats::TYPE => NetworkFilterConfig::IstioStats(Arc::new(istio_stats::istio_stats(any, warnings)?)),
        set_filter_state::NETWORK_TYPE => {
            NetworkFilterConfig::SetFilterState(Arc::new(set_filter_state::network_set_filter_state(any, warnings)?))
        }
        _ => return Ok(None),
    }))
}

/// `envoy.config.route.v3.FilterConfig`: wraps another filter's per-route settings, or
/// only enables or disables the filter.
const FILTER_CONFIG: &str = "envoy.config.route.v3.FilterConfig";

/// `typed_per_filter_config` of a virtual host, route or weighted cluster. An entry whose
/// type Outrider does not run is refused with its path, unless it is a `FilterConfig`
/// marked `is_optional` whose type Envoy has no factory for either: Envoy ignores such an
/// entry, and applies any other, so Outrider, which would not, refuses it.
pub fn per_filter_config(
    entries: std::collections::HashMap<String, Any>,
    warnings: &mut Warnings,
) -> Result<PerFilterConfig> {
    let mut entries: Vec<_> = entries.into_iter().collect();
    // A map in the proto: sorted, so the result (and any error) does not depend on order.
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Vec::with_capacity(entries.len());
    for (name, any) in entries {
        let at = format!("[{name:?}]");
        let converted = warnings.within(&at, |w| per_filter(&any, w)).map_err(|e| e.at(at.clone()))?;
        match converted {
            Some(config) => out.push((name, config)),
            None => warnings.ignored(at, "an optional per-route setting of a type neither Outrider nor Envoy runs"),
        }
    }
    Ok(PerFilterConfig(out))
}

/// One entry: `None` when it is an optional one Envoy would ignore too.
fn per_filter(any: &Any, warnings: &mut Warnings) -> Result<Option<FilterOverride>> {
    use crate::pb::envoy::config::route::v3::FilterConfig;
    if type_name(&any.type_url) != FILTER_CONFIG {
        return per_route_setting(any, warnings)?.map(Some).ok_or_else(|| unsupported(any, false));
    }
    let FilterConfig { config, is_optional, disabled } = super::common::unpack::<FilterConfig>(any)?;
    match config {
        None => Ok(Some(FilterOverride::Enabled(!disabled))),
        Some(_) if disabled => Ok(Some(FilterOverride::Enabled(false))),
        Some(inner) => match per_route_setting(&inner, warnings).map_err(|e| e.at("config"))? {
            Some(config) => Ok(Some(config)),
            None if is_optional && !envoys_own(&config_type(&inner)) => Ok(None),
            None => Err(unsupported(&inner, is_optional).at("config")),
        },
    }
}

/// A per-route setting of a type Outrider runs; `None` for any other type.
fn per_route_setting(any: &Any, warnings: &mut Warnings) -> Result<Option<FilterOverride>> {
    Ok(Some(match type_name(&any.type_url) {
        jwt_authn::PER_ROUTE_TYPE => FilterOverride::JwtAuthn(jwt_authn::per_route(any)?),
        local_ratelimit::HTTP_TYPE => {
            FilterOverride::LocalRateLimit(Arc::new(local_ratelimit::http_local_rate_limit(any, true, warnings)?))
        }
        fault::TYPE => FilterOverride::Fault(Arc::new(fault::http_fault(any, warnings)?)),
        cors::POLICY_TYPE => FilterOverride::Cors(Arc::new(cors::cors_policy(any, warnings)?)),
        rbac::PER_ROUTE_TYPE => FilterOverride::Rbac(Arc::new(rbac::per_route(any, warnings)?)),
        ext_authz::PER_ROUTE_TYPE => FilterOverride::ExtAuthz(Arc::new(ext_authz::per_route(any, warnings)?)),
        ratelimit::PER_ROUTE_TYPE => FilterOverride::RateLimit(Arc::new(ratelimit::per_route(any, warnings)?)),
        _ => return Ok(None),
    }))
}

fn unsupported(any: &Any, optional: bool) -> ConfigError {
    let kind = config_type(any);
    let why = if optional {
        "is_optional skips only a type Envoy has no factory for; Envoy would apply this one"
    } else {
        "not marked is_optional"
    };
    ConfigError::new("", format!("per-route settings of type {kind} are not supported ({why})"))
}
