//! Protocol upgrades (`upgrade_configs` on the connection manager and on routes): which
//! `Upgrade:` types, such as `websocket`, a request may ask for, and `CONNECT`. Outrider
//! proxies HTTP/1.1 upgrades, and terminates an HTTP/2 `CONNECT` on a route whose
//! `CONNECT` entry has a `connect_config` (Istio's HBONE); a `CONNECT` no route terminates
//! is refused with 403 (Envoy would forward it upstream as a `CONNECT`).

/// One upgrade type and whether it is allowed at this level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeConfig {
    /// Lower-cased (`websocket`); matched case-insensitively, as Envoy does.
    pub upgrade_type: String,
    /// Default true.
    pub enabled: bool,
    /// A route's `CONNECT` entry with `connect_config`: the `CONNECT` ends here, and what
    /// the client sends in its stream goes to the route's cluster as TCP.
    pub terminates_connect: bool,
}

/// Envoy's rule (`createUpgradeFilterChain`): the connection manager must list the type;
/// a route that names it then decides (enabling one the manager lists disabled, or
/// disabling it), and otherwise the manager's entry does.
pub fn upgrade_allowed(manager: &[UpgradeConfig], route: Option<&[UpgradeConfig]>, upgrade_type: &str) -> bool {
    let find = |list: &[UpgradeConfig]| {
        list.iter().find(|u| u.upgrade_type.eq_ignore_ascii_case(upgrade_type)).map(|u| u.enabled)
    };
    let Some(manager_enabled) = find(manager) else { return false };
    route.and_then(find).unwrap_or(manager_enabled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(upgrade_type: &str, enabled: bool) -> UpgradeConfig {
        UpgradeConfig { upgrade_type: upgrade_type.into(), enabled, terminates_connect: false }
    }

    #[test]
    fn the_manager_lists_the_type_and_a_route_decides() {
        let manager = [entry("websocket", true), entry("connect", false)];
        assert!(upgrade_allowed(&manager, None, "WebSocket"));
        assert!(!upgrade_allowed(&manager, Some(&[entry("websocket", false)]), "websocket"));
        assert!(upgrade_allowed(&manager, Some(&[entry("connect", true)]), "connect"), "a route enables it");
        assert!(!upgrade_allowed(&manager, None, "connect"));
        // A type the manager does not list has no upgrade chain: no route can enable it.
        assert!(!upgrade_allowed(&manager, Some(&[entry("spdy/3.1", true)]), "spdy/3.1"));
    }
}
