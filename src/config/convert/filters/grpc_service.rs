//! `envoy.config.core.v3.GrpcService` → [`EnvoyGrpc`], for the filters that call a gRPC
//! service. Only Envoy's own gRPC client over a cluster is supported.

use super::super::common;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::grpc_service::EnvoyGrpc;
use crate::pb::envoy::config::core::v3 as core;

/// `transport_api_version` must be V3, as Envoy requires of every gRPC service it calls.
pub fn require_v3(transport_api_version: i32, field: &str) -> Result<()> {
    if transport_api_version == core::ApiVersion::V3 as i32 {
        return Ok(());
    }
    Err(ConfigError::new(field, "must be V3 (V2 and AUTO transport versions are refused, as Envoy does)"))
}

pub fn envoy_grpc(proto: core::GrpcService, warnings: &mut Warnings) -> Result<EnvoyGrpc> {
    use core::grpc_service::TargetSpecifier as T;
    let core::GrpcService { timeout, initial_metadata, retry_policy, target_specifier } = proto;
    if !initial_metadata.is_empty() {
        return Err(ConfigError::new("initial_metadata", "initial metadata on calls is not supported"));
    }
    if retry_policy.is_some() {
        return Err(ConfigError::new("retry_policy", "retrying calls is not supported"));
    }
    let timeout = common::opt_duration(&timeout, "timeout")?;
    match target_specifier {
        Some(T::EnvoyGrpc(g)) => {
            let core::grpc_service::EnvoyGrpc {
                cluster_name,
                authority,
                retry_policy,
                max_receive_message_length,
                skip_envoy_headers,
            } = g;
            if cluster_name.is_empty() {
                return Err(ConfigError::new("envoy_grpc.cluster_name", "must not be empty"));
            }
            if retry_policy.is_some() {
                return Err(ConfigError::new("envoy_grpc.retry_policy", "retrying calls is not supported"));
            }
            if max_receive_message_length.is_some() {
                warnings.ignored(
                    "envoy_grpc.max_receive_message_length",
                    "answers are limited to 4 MiB, whatever this says",
                );
            }
            if skip_envoy_headers {
                warnings.ignored("envoy_grpc.skip_envoy_headers", "calls carry no x-envoy-* headers anyway");
            }
            let authority = if authority.is_empty() { cluster_name.clone() } else { authority };
            Ok(EnvoyGrpc { cluster_name, authority, timeout })
        }
        Some(T::GoogleGrpc(_)) => Err(ConfigError::new("google_grpc", "the Google gRPC client is not supported")),
        None => Err(ConfigError::new("envoy_grpc", "is required")),
    }
}

/// `envoy.type.v3.HttpStatus` of a local reply: Envoy uses the code when it is an error
/// (400 or more) and `default` otherwise.
pub fn error_status(status: Option<crate::pb::envoy::r#type::v3::HttpStatus>, default: u16) -> u16 {
    match status.and_then(|s| u16::try_from(s.code).ok()) {
        Some(code @ 400..=599) => code,
        _ => default,
    }
}
