//! `envoy.extensions.filters.http.health_check.v3.HealthCheck` → [`HealthCheck`].

use super::super::common;
use super::super::matchers::header_matcher;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::health_check::HealthCheck;
use crate::pb::envoy::extensions::filters::http::health_check::v3 as proto;
use crate::pb::google::protobuf::Any;

pub const TYPE: &str = "envoy.extensions.filters.http.health_check.v3.HealthCheck";

pub fn health_check(any: &Any, warnings: &mut Warnings) -> Result<HealthCheck> {
    let proto::HealthCheck { pass_through_mode, cache_time, cluster_min_healthy_percentages, headers } =
        common::unpack::<proto::HealthCheck>(any)?;
    let Some(pass_through_mode) = pass_through_mode else {
        return Err(ConfigError::new("pass_through_mode", "is required"));
    };
    if !cluster_min_healthy_percentages.is_empty() {
        return Err(ConfigError::new(
            "cluster_min_healthy_percentages",
            "answering by the health of upstream clusters is not supported",
        ));
    }
    if cache_time.is_some() {
        warnings.ignored("cache_time", "pass-through health checks are not cached: each one goes upstream");
    }
    let headers = headers
        .into_iter()
        .enumerate()
        .map(|(i, h)| header_matcher(h, warnings).map_err(|e| e.at(format!("headers[{i}]"))))
        .collect::<Result<_>>()?;
    Ok(HealthCheck { pass_through_mode: pass_through_mode.value, headers })
}
