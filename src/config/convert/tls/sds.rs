//! `SdsSecretConfig` → [`SdsSecretConfig`]: which secret, and which stream delivers it.
//!
//! Envoy accepts any config source here; Outrider takes the two that meshes use: the ADS
//! stream itself, or a gRPC SDS stream to one Envoy cluster (Istio's agent on `sds-grpc`).

use std::time::Duration;

use super::common;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::tls::{SdsSecretConfig, SdsSource};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::extensions::transport_sockets::tls::v3 as proto;

/// Envoy's `initial_fetch_timeout` when the config source leaves it unset.
const DEFAULT_INITIAL_FETCH_TIMEOUT: Duration = Duration::from_secs(15);

pub(super) fn sds_secret_config(proto: proto::SdsSecretConfig, warnings: &mut Warnings) -> Result<SdsSecretConfig> {
    let proto::SdsSecretConfig { name, sds_config } = proto;
    if name.is_empty() {
        return Err(ConfigError::new("name", "must not be empty"));
    }
    let Some(sds_config) = sds_config else {
        return Ok(SdsSecretConfig { name, source: SdsSource::Bootstrap, initial_fetch_timeout: None });
    };
    let (source, initial_fetch_timeout) =
        warnings.within("sds_config", |w| config_source(sds_config, w)).map_err(|e| e.at("sds_config"))?;
    Ok(SdsSecretConfig { name, source, initial_fetch_timeout })
}

/// `sds_config`: ADS, or one gRPC service by Envoy cluster (Istio's `sds-grpc`).
fn config_source(proto: core::ConfigSource, warnings: &mut Warnings) -> Result<(SdsSource, Option<Duration>)> {
    use core::config_source::ConfigSourceSpecifier as S;
    let core::ConfigSource { authorities, initial_fetch_timeout, resource_api_version, config_source_specifier } =
        proto;
    if !authorities.is_empty() {
        return Err(ConfigError::new("authorities", "xDS-TP authorities are not supported"));
    }
    api_version(resource_api_version).map_err(|e| e.at("resource_api_version"))?;
    let timeout = match common::opt_duration(&initial_fetch_timeout, "initial_fetch_timeout")? {
        None => Some(DEFAULT_INITIAL_FETCH_TIMEOUT),
        Some(Duration::ZERO) => None,
        Some(t) => Some(t),
    };
    #[allow(deprecated)]
    let source = match config_source_specifier {
        Some(S::Ads(_)) => SdsSource::Ads,
        Some(S::ApiConfigSource(api)) => {
            warnings.within("api_config_source", |w| grpc_source(api, w)).map_err(|e| e.at("api_config_source"))?
        }
        Some(S::Path(_) | S::PathConfigSource(_)) => {
            return Err(ConfigError::new("path_config_source", "secrets from files are not supported; use SDS"));
        }
        Some(S::Self_(_)) => return Err(ConfigError::new("self", "not supported for SDS; use ads")),
        None => return Err(ConfigError::new("", "ads or api_config_source is required")),
    };
    Ok((source, timeout))
}

fn grpc_source(proto: core::ApiConfigSource, warnings: &mut Warnings) -> Result<SdsSource> {
    use core::api_config_source::ApiType;
    let core::ApiConfigSource {
        api_type,
        transport_api_version,
        cluster_names,
        grpc_services,
        refresh_delay,
        request_timeout,
        rate_limit_settings,
        set_node_on_first_message_only: _, // sending the node on every request is always valid
        config_validators,
    } = proto;
    let delta = match ApiType::try_from(api_type) {
        Ok(ApiType::Grpc) => false,
        Ok(ApiType::DeltaGrpc) => true,
        _ => return Err(ConfigError::new("api_type", "only GRPC and DELTA_GRPC are supported for SDS")),
    };
    api_version(transport_api_version).map_err(|e| e.at("transport_api_version"))?;
    if !cluster_names.is_empty() {
        return Err(ConfigError::new("cluster_names", "only for REST; use grpc_services"));
    }
    if !config_validators.is_empty() {
        return Err(ConfigError::new("config_validators", "not supported"));
    }
    let ignored = [
        (refresh_delay.is_some(), "refresh_delay", "only for REST"),
        (request_timeout.is_some(), "request_timeout", "only for REST"),
        (rate_limit_settings.is_some(), "rate_limit_settings", "SDS requests are not rate limited"),
    ];
    for (_, field, what) in ignored.into_iter().filter(|(set, _, _)| *set) {
        warnings.ignored(field, what);
    }
    let [service] = <[core::GrpcService; 1]>::try_from(grpc_services)
        .map_err(|s| ConfigError::new("grpc_services", format!("exactly one is required, got {}", s.len())))?;
    let cluster_name =
        warnings.within("grpc_services[0]", |w| grpc_cluster(service, w)).map_err(|e| e.at("grpc_services[0]"))?;
    Ok(SdsSource::Grpc { cluster_name, delta })
}

fn grpc_cluster(proto: core::GrpcService, warnings: &mut Warnings) -> Result<String> {
    use core::grpc_service::{EnvoyGrpc, TargetSpecifier};
    let core::GrpcService { timeout, initial_metadata, retry_policy, target_specifier } = proto;
    if !initial_metadata.is_empty() {
        return Err(ConfigError::new("initial_metadata", "SDS request metadata is not supported"));
    }
    if timeout.is_some() {
        warnings.ignored("timeout", "SDS streams are long-lived");
    }
    if retry_policy.is_some() {
        warnings.ignored("retry_policy", "SDS streams reconnect with Outrider's own backoff");
    }
    match target_specifier {
        Some(TargetSpecifier::EnvoyGrpc(EnvoyGrpc {
            cluster_name,
            authority,
            retry_policy,
            max_receive_message_length,
            skip_envoy_headers: _,
        })) => {
            if cluster_name.is_empty() {
                return Err(ConfigError::new("envoy_grpc.cluster_name", "must not be empty"));
            }
            if !authority.is_empty() || retry_policy.is_some() || max_receive_message_length.is_some() {
                warnings.ignored("envoy_grpc", "authority, retry_policy and max_receive_message_length are not used");
            }
            Ok(cluster_name)
        }
        Some(TargetSpecifier::GoogleGrpc(_)) => Err(ConfigError::new("google_grpc", "use envoy_grpc")),
        None => Err(ConfigError::new("envoy_grpc", "is required")),
    }
}

/// Only the v3 API exists; AUTO (0) means v3 since Envoy dropped v2.
fn api_version(value: i32) -> Result<()> {
    use core::ApiVersion;
    match ApiVersion::try_from(value) {
        Ok(ApiVersion::Auto | ApiVersion::V3) => Ok(()),
        _ => Err(ConfigError::new("", "only V3 is supported")),
    }
}
