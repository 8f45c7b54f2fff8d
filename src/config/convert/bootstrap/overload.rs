//! The bootstrap's `overload_manager`. Outrider has no overload manager: resource monitors
//! only matter through the actions and load-shed points that read them, so a manager with
//! neither changes no request and is ignored. Actions, load-shed points and a finite global
//! connection limit (`envoy.resource_monitors.global_downstream_max_connections`, which
//! refuses connections by itself) would change what clients get, and are refused.

use super::super::common;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::pb::envoy::config::overload::v3 as proto;
use crate::pb::envoy::extensions::resource_monitors::downstream_connections::v3::DownstreamConnectionsConfig;

const GLOBAL_CONNECTIONS: &str =
    "envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig";

/// Istio's bootstrap sets the global connection limit to `i32::MAX`: no limit.
const UNLIMITED: i64 = i32::MAX as i64;

pub fn check(manager: proto::OverloadManager, warnings: &mut Warnings) -> Result<()> {
    let proto::OverloadManager {
        refresh_interval: _,
        resource_monitors,
        actions,
        loadshed_points,
        buffer_factory_config: _,
    } = manager;
    if !actions.is_empty() {
        return Err(ConfigError::new("actions", "overload actions are not supported"));
    }
    if !loadshed_points.is_empty() {
        return Err(ConfigError::new("loadshed_points", "load-shed points are not supported"));
    }
    for (i, monitor) in resource_monitors.iter().enumerate() {
        let at = format!("resource_monitors[{i}].typed_config");
        let Some(proto::resource_monitor::ConfigType::TypedConfig(any)) = &monitor.config_type else { continue };
        if common::type_name(&any.type_url) != GLOBAL_CONNECTIONS {
            continue; // read only by actions, and there are none
        }
        let config: DownstreamConnectionsConfig = common::unpack(any).map_err(|e| e.at(&at))?;
        if config.max_active_downstream_connections < UNLIMITED {
            return Err(ConfigError::new(
                format!("{at}.max_active_downstream_connections"),
                format!(
                    "a global connection limit ({}) is not supported; only {UNLIMITED} (no limit)",
                    config.max_active_downstream_connections
                ),
            ));
        }
    }
    if !resource_monitors.is_empty() {
        warnings.ignored("resource_monitors", "resource monitors without overload actions change nothing");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::google::protobuf::Any;
    use prost::{Message, Name};

    fn with_limit(max: i64) -> proto::OverloadManager {
        let config = DownstreamConnectionsConfig { max_active_downstream_connections: max };
        let any = Any { type_url: DownstreamConnectionsConfig::type_url(), value: config.encode_to_vec() };
        proto::OverloadManager {
            resource_monitors: vec![proto::ResourceMonitor {
                name: "envoy.resource_monitors.global_downstream_max_connections".into(),
                config_type: Some(proto::resource_monitor::ConfigType::TypedConfig(any)),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn istios_unlimited_monitor_is_ignored() {
        let mut warnings = Warnings::new();
        assert!(check(with_limit(UNLIMITED), &mut warnings).is_ok());
        assert_eq!(warnings.into_items().len(), 1);
    }

    #[test]
    fn a_finite_limit_or_an_action_is_refused() {
        let error = check(with_limit(1000), &mut Warnings::new()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.starts_with("resource_monitors[0].typed_config.max_active_downstream_connections:"), "{error}");
        let mut manager = with_limit(UNLIMITED);
        manager.actions.push(proto::OverloadAction {
            name: "envoy.overload_actions.stop_accepting_requests".into(),
            ..Default::default()
        });
        let error = check(manager, &mut Warnings::new()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.starts_with("actions:"), "{error}");
    }
}
