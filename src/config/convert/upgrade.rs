//! `upgrade_configs` of a connection manager and of a route → [`UpgradeConfig`].

use crate::config::error::{ConfigError, Result};
use crate::config::upgrade::UpgradeConfig;
use crate::pb::envoy::config::route::v3::route_action::UpgradeConfig as RouteUpgradeProto;
use crate::pb::envoy::config::route::v3::route_action::upgrade_config::ConnectConfig;
use crate::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::UpgradeConfig as HcmUpgradeProto;

/// The connection manager's list. Upgrade filter chains of their own are refused: their
/// filters would run instead of the connection manager's.
pub fn hcm_upgrades(list: Vec<HcmUpgradeProto>) -> Result<Vec<UpgradeConfig>> {
    list.into_iter()
        .enumerate()
        .map(|(i, HcmUpgradeProto { upgrade_type, filters, enabled })| {
            let at = format!("upgrade_configs[{i}]");
            if !filters.is_empty() {
                return Err(ConfigError::new(format!("{at}.filters"), "upgrade filter chains are not supported"));
            }
            upgrade(upgrade_type, enabled.is_none_or(|e| e.value)).map_err(|e| e.at(&at))
        })
        .collect()
}

/// A route's list.
pub fn route_upgrades(list: Vec<RouteUpgradeProto>) -> Result<Vec<UpgradeConfig>> {
    list.into_iter()
        .enumerate()
        .map(|(i, RouteUpgradeProto { upgrade_type, enabled, connect_config })| {
            let at = format!("upgrade_configs[{i}]");
            let mut upgrade = upgrade(upgrade_type, enabled.is_none_or(|e| e.value)).map_err(|e| e.at(&at))?;
            if let Some(ConnectConfig { proxy_protocol_config, allow_post }) = connect_config {
                let at = format!("{at}.connect_config");
                if upgrade.upgrade_type != "connect" {
                    return Err(ConfigError::new(at, "only a CONNECT entry terminates CONNECT"));
                }
                if proxy_protocol_config.is_some() {
                    return Err(ConfigError::new(
                        format!("{at}.proxy_protocol_config"),
                        "PROXY protocol is not supported",
                    ));
                }
                if allow_post {
                    return Err(ConfigError::new(format!("{at}.allow_post"), "tunnels in a POST are not supported"));
                }
                upgrade.terminates_connect = true;
            }
            Ok(upgrade)
        })
        .collect()
}

fn upgrade(upgrade_type: String, enabled: bool) -> Result<UpgradeConfig> {
    if upgrade_type.is_empty() {
        return Err(ConfigError::new("upgrade_type", "must not be empty"));
    }
    Ok(UpgradeConfig { upgrade_type: upgrade_type.to_ascii_lowercase(), enabled, terminates_connect: false })
}
