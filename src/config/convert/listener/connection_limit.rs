//! `envoy.filters.network.connection_limit` → [`ConnectionLimit`].

use super::super::common;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::listener::ConnectionLimit;
use crate::pb::envoy::extensions::filters::network::connection_limit::v3 as proto;

/// `None` when `runtime_enabled` turns the filter off (its `default_value` decides:
/// Outrider has no runtime, so the runtime key is never read).
pub fn connection_limit(proto: proto::ConnectionLimit, warnings: &mut Warnings) -> Result<Option<ConnectionLimit>> {
    let proto::ConnectionLimit { stat_prefix, max_connections, delay, runtime_enabled } = proto;
    if stat_prefix.is_empty() {
        return Err(ConfigError::new("stat_prefix", "is required"));
    }
    let max_connections = match max_connections {
        Some(v) if v.value >= 1 => v.value,
        Some(_) => return Err(ConfigError::new("max_connections", "must be at least 1")),
        None => return Err(ConfigError::new("max_connections", "is required")),
    };
    let delay = common::opt_duration(&delay, "delay")?.filter(|d| !d.is_zero());
    if let Some(flag) = runtime_enabled {
        if !flag.runtime_key.is_empty() {
            warnings.ignored("runtime_enabled.runtime_key", "there is no runtime; default_value decides");
        }
        if !common::bool_or(&flag.default_value, true) {
            return Ok(None);
        }
    }
    Ok(Some(ConnectionLimit { stat_prefix, max_connections, delay }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::config::core::v3::RuntimeFeatureFlag;
    use crate::pb::google::protobuf::{BoolValue, Duration, UInt64Value};

    fn limit(max: Option<u64>) -> proto::ConnectionLimit {
        proto::ConnectionLimit {
            stat_prefix: "inbound".into(),
            max_connections: max.map(|value| UInt64Value { value }),
            delay: Some(Duration { seconds: 0, nanos: 5_000_000 }),
            runtime_enabled: None,
        }
    }

    #[test]
    fn converts_and_validates() {
        let mut w = Warnings::new();
        let converted = connection_limit(limit(Some(2)), &mut w).unwrap().unwrap();
        assert_eq!(converted.max_connections, 2);
        assert_eq!(converted.delay, Some(std::time::Duration::from_millis(5)));
        assert_eq!(connection_limit(limit(Some(0)), &mut w).unwrap_err().path(), "max_connections");
        assert_eq!(connection_limit(limit(None), &mut w).unwrap_err().path(), "max_connections");
        let unnamed = proto::ConnectionLimit { stat_prefix: String::new(), ..limit(Some(1)) };
        assert_eq!(connection_limit(unnamed, &mut w).unwrap_err().path(), "stat_prefix");
    }

    #[test]
    fn runtime_default_false_disables() {
        let mut w = Warnings::new();
        let flag = RuntimeFeatureFlag { default_value: Some(BoolValue { value: false }), runtime_key: "k".into() };
        let off = proto::ConnectionLimit { runtime_enabled: Some(flag), ..limit(Some(1)) };
        assert_eq!(connection_limit(off, &mut w).unwrap(), None);
        assert_eq!(w.items()[0].path, "runtime_enabled.runtime_key");
    }
}
