//! `upgrade_configs` of a connection manager and of a route → [`UpgradeConfig`].

use crate::config::error::{ConfigError, Result};
use crate::config::upgrade::UpgradeConfig;
use crate::pb::envoy::config::route::v3::route_action::UpgradeConfig as RouteUpgradeProto;
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
            if connect_config.is_some() {
                return Err(ConfigError::new(format!("{at}.connect_config"), "CONNECT termination is not supported"));
            }
            upgrade(upgrade_type, enabled.is_none_or(|e| e.value)).map_err(|e| e.at(&at))
        })
        .collect()
}

fn upgrade(upgrade_type: String, enabled: bool) -> Result<UpgradeConfig> {
    if upgrade_type.is_empty() {
        return Err(ConfigError::new("upgrade_type", "must not be empty"));
    }
    if upgrade_type.eq_ignore_ascii_case("connect") {
        return Err(ConfigError::new(
            "upgrade_type",
            "CONNECT is not supported (only HTTP/1.1 upgrades such as websocket)",
        ));
    }
    Ok(UpgradeConfig { upgrade_type: upgrade_type.to_ascii_lowercase(), enabled })
}
