//! `envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig` → [`GrpcAccessLog`].
//! Only `envoy_grpc` services (a cluster of this proxy) and the v3 transport are
//! supported; filter state objects and custom tags are refused with their path, since
//! entries could not carry them.

use std::time::Duration;

use super::super::common;
use crate::config::access_log::GrpcAccessLog;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::pb::envoy::config::core::v3::{ApiVersion, grpc_service};
use crate::pb::envoy::extensions::access_loggers::grpc::v3::{CommonGrpcAccessLogConfig, HttpGrpcAccessLogConfig};

const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
const DEFAULT_BUFFER_BYTES: usize = 16 * 1024;

pub fn http_grpc(config: HttpGrpcAccessLogConfig, warnings: &mut Warnings) -> Result<GrpcAccessLog> {
    let HttpGrpcAccessLogConfig {
        common_config,
        additional_request_headers_to_log,
        additional_response_headers_to_log,
        additional_response_trailers_to_log,
    } = config;
    let common =
        common_config.ok_or_else(|| ConfigError::new("common_config", "a gRPC access log needs common_config"))?;
    let CommonGrpcAccessLogConfig {
        log_name,
        grpc_service,
        transport_api_version,
        buffer_flush_interval,
        buffer_size_bytes,
        filter_state_objects_to_log,
        grpc_stream_retry_policy,
        custom_tags,
    } = common;
    if log_name.is_empty() {
        return Err(ConfigError::new("common_config.log_name", "must not be empty"));
    }
    if transport_api_version != ApiVersion::V3 as i32 {
        return Err(ConfigError::new("common_config.transport_api_version", "only V3 is supported"));
    }
    if !filter_state_objects_to_log.is_empty() {
        return Err(ConfigError::new("common_config.filter_state_objects_to_log", "Outrider keeps no filter state"));
    }
    if !custom_tags.is_empty() {
        return Err(ConfigError::new("common_config.custom_tags", "custom tags are not supported"));
    }
    if grpc_stream_retry_policy.is_some() {
        warnings.ignored(
            "common_config.grpc_stream_retry_policy",
            "a broken stream is reopened with the next batch; entries sent meanwhile are dropped and counted",
        );
    }
    let service = grpc_service
        .ok_or_else(|| ConfigError::new("common_config.grpc_service", "a gRPC access log needs a grpc_service"))?;
    let (cluster, authority) = match service.target_specifier {
        Some(grpc_service::TargetSpecifier::EnvoyGrpc(envoy)) if !envoy.cluster_name.is_empty() => {
            let authority = if envoy.authority.is_empty() { envoy.cluster_name.clone() } else { envoy.authority };
            (envoy.cluster_name, authority)
        }
        _ => {
            return Err(ConfigError::new(
                "common_config.grpc_service",
                "only envoy_grpc with a cluster_name is supported",
            ));
        }
    };
    let flush_interval = common::opt_duration(&buffer_flush_interval, "common_config.buffer_flush_interval")?
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_FLUSH_INTERVAL);
    let buffer_size_bytes =
        buffer_size_bytes.map_or(DEFAULT_BUFFER_BYTES, |b| usize::try_from(b.value).unwrap_or(usize::MAX));
    let lower = |names: Vec<String>| names.into_iter().map(|n| n.to_ascii_lowercase()).collect();
    Ok(GrpcAccessLog {
        log_name,
        cluster,
        authority,
        flush_interval,
        buffer_size_bytes,
        request_headers: lower(additional_request_headers_to_log),
        response_headers: lower(additional_response_headers_to_log),
        response_trailers: lower(additional_response_trailers_to_log),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::config::core::v3::GrpcService;

    fn config(target: grpc_service::TargetSpecifier) -> HttpGrpcAccessLogConfig {
        HttpGrpcAccessLogConfig {
            common_config: Some(CommonGrpcAccessLogConfig {
                log_name: "mesh".into(),
                transport_api_version: ApiVersion::V3 as i32,
                grpc_service: Some(GrpcService { target_specifier: Some(target), ..GrpcService::default() }),
                ..CommonGrpcAccessLogConfig::default()
            }),
            additional_request_headers_to_log: vec!["X-Tenant".into()],
            ..HttpGrpcAccessLogConfig::default()
        }
    }

    #[test]
    fn envoy_grpc_converts_with_defaults_others_are_refused() {
        let envoy = grpc_service::EnvoyGrpc { cluster_name: "als".into(), ..Default::default() };
        let mut warnings = Warnings::new();
        let grpc = http_grpc(config(grpc_service::TargetSpecifier::EnvoyGrpc(envoy)), &mut warnings);
        let grpc = grpc.ok();
        assert_eq!(
            grpc.as_ref().map(|g| (g.authority.as_str(), g.flush_interval)),
            Some(("als", DEFAULT_FLUSH_INTERVAL))
        );
        assert_eq!(grpc.map(|g| g.request_headers), Some(vec!["x-tenant".to_owned()]));
        let google = grpc_service::TargetSpecifier::GoogleGrpc(Default::default());
        let refused = http_grpc(config(google), &mut warnings);
        assert_eq!(refused.err().map(|e| e.path().to_owned()).as_deref(), Some("common_config.grpc_service"));
        let envoy = grpc_service::EnvoyGrpc { cluster_name: "als".into(), ..Default::default() };
        let mut with_state = config(grpc_service::TargetSpecifier::EnvoyGrpc(envoy));
        if let Some(common) = with_state.common_config.as_mut() {
            common.filter_state_objects_to_log.push("peer".into());
        }
        let refused = http_grpc(with_state, &mut warnings);
        assert_eq!(
            refused.err().map(|e| e.path().to_owned()).as_deref(),
            Some("common_config.filter_state_objects_to_log")
        );
    }
}
