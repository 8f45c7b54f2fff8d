//! Protocol upgrades (`upgrade_configs` on the connection manager and on routes): which
//! `Upgrade:` types, such as `websocket`, a request may ask for. Outrider proxies HTTP/1.1
//! upgrades; CONNECT (termination or tunnelling) is refused when configured.

/// One upgrade type and whether it is allowed at this level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeConfig {
    /// Lower-cased (`websocket`); matched case-insensitively, as Envoy does.
    pub upgrade_type: String,
    /// Default true.
    pub enabled: bool,
}

/// Envoy's rule (`createUpgradeFilterChain`): a route that names the type decides (a route
/// that disables it wins); otherwise the connection manager must allow it.
pub fn upgrade_allowed(manager: &[UpgradeConfig], route: Option<&[UpgradeConfig]>, upgrade_type: &str) -> bool {
    let find = |list: &[UpgradeConfig]| {
        list.iter().find(|u| u.upgrade_type.eq_ignore_ascii_case(upgrade_type)).map(|u| u.enabled)
    };
    match route.and_then(find) {
        Some(enabled) => enabled,
        None => find(manager).unwrap_or(false),
    }
}
