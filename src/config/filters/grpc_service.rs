//! `envoy.config.core.v3.GrpcService` as the filters that call a gRPC service use it: the
//! Envoy gRPC client over a cluster of the configuration.

use std::time::Duration;

/// `grpc_service.envoy_grpc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvoyGrpc {
    pub cluster_name: String,
    /// The `:authority` of the calls: `authority`, or the cluster name when empty (as
    /// Envoy sends).
    pub authority: String,
    /// `grpc_service.timeout`, when set.
    pub timeout: Option<Duration>,
}
