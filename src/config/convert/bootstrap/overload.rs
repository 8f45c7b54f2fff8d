//! The bootstrap's `overload_manager` → [`OverloadConfig`].
//!
//! Monitors: `fixed_heap`, `cgroup_memory` and the global connection limit
//! (`global_downstream_max_connections`, proactive: checked on accept, not sampled). Actions:
//! `stop_accepting_requests`, `disable_http_keepalive`, `stop_accepting_connections`,
//! `reject_incoming_connections`, `shrink_heap`. Load-shed points: `tcp_listener_accept`,
//! `http_connection_manager_decode_headers`. Anything else named by an action or a
//! load-shed point would change what clients get and is refused with its path, as are the
//! configurations Envoy refuses at start-up (an unknown or duplicate name, a trigger on a
//! monitor that is not configured, a scaled trigger whose thresholds are out of order).

use std::collections::HashSet;

use super::super::common;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::overload::{
    Action, ActionKind, DEFAULT_REFRESH_INTERVAL, LoadShedKind, LoadShedPoint, Monitor, MonitorKind, OverloadConfig,
    Trigger, TriggerKind,
};
use crate::pb::envoy::config::overload::v3 as proto;
use crate::pb::envoy::extensions::resource_monitors::cgroup_memory::v3::CgroupMemoryConfig;
use crate::pb::envoy::extensions::resource_monitors::downstream_connections::v3::DownstreamConnectionsConfig;
use crate::pb::envoy::extensions::resource_monitors::fixed_heap::v3::FixedHeapConfig;
use crate::pb::google::protobuf::Any;

const GLOBAL_CONNECTIONS: &str =
    "envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig";
const FIXED_HEAP: &str = "envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig";
const CGROUP_MEMORY: &str = "envoy.extensions.resource_monitors.cgroup_memory.v3.CgroupMemoryConfig";

/// Istio's bootstrap sets the global connection limit to `i32::MAX`, its way of saying "no
/// limit" (Envoy warns at start-up when there is none).
const UNLIMITED: i64 = i32::MAX as i64;

pub fn overload(manager: proto::OverloadManager, warnings: &mut Warnings) -> Result<OverloadConfig> {
    let proto::OverloadManager { refresh_interval, resource_monitors, actions, loadshed_points, buffer_factory_config } =
        manager;
    if buffer_factory_config.is_some() {
        // Only read by `reset_high_memory_stream`, which is refused below.
        warnings.ignored("buffer_factory_config", "used only by reset_high_memory_stream, which is not supported");
    }
    let mut config = OverloadConfig {
        refresh_interval: common::opt_duration(&refresh_interval, "refresh_interval")?
            .unwrap_or(DEFAULT_REFRESH_INTERVAL),
        ..OverloadConfig::default()
    };
    if config.refresh_interval.is_zero() {
        config.refresh_interval = DEFAULT_REFRESH_INTERVAL;
    }

    // Names triggers may refer to: the sampled monitors (by index) and the proactive one.
    let mut names = HashSet::new();
    let mut proactive = None;
    for (i, monitor) in resource_monitors.into_iter().enumerate() {
        let at = format!("resource_monitors[{i}]");
        if monitor.name.is_empty() {
            return Err(ConfigError::new(format!("{at}.name"), "must not be empty"));
        }
        if !names.insert(monitor.name.clone()) {
            return Err(ConfigError::new(format!("{at}.name"), format!("duplicate resource monitor {}", monitor.name)));
        }
        let Some(proto::resource_monitor::ConfigType::TypedConfig(any)) = &monitor.config_type else {
            return Err(ConfigError::new(format!("{at}.typed_config"), "a resource monitor needs its typed_config"));
        };
        let typed = format!("{at}.typed_config");
        match common::type_name(&any.type_url) {
            GLOBAL_CONNECTIONS => {
                let limit = global_connections(any).map_err(|e| e.at(&typed))?;
                config.max_downstream_connections = limit;
                proactive = Some(monitor.name);
            }
            FIXED_HEAP => {
                let heap: FixedHeapConfig = common::unpack(any).map_err(|e| e.at(&typed))?;
                // Exactly one of the two; the runtime overlay has no runtime here to override
                // it, so its default is the limit.
                let max_heap_size_bytes = match (heap.max_heap_size_bytes, &heap.max_heap_size_bytes_runtime) {
                    (0, Some(runtime)) => runtime.default_value,
                    (max, None) => max,
                    (_, Some(_)) => {
                        return Err(ConfigError::new(
                            format!("{typed}.max_heap_size_bytes_runtime"),
                            "exactly one of max_heap_size_bytes and max_heap_size_bytes_runtime may be set",
                        ));
                    }
                };
                if max_heap_size_bytes == 0 {
                    return Err(ConfigError::new(format!("{typed}.max_heap_size_bytes"), "must be greater than 0"));
                }
                let kind = MonitorKind::FixedHeap { max_heap_size_bytes };
                config.monitors.push(Monitor { name: monitor.name, kind });
            }
            CGROUP_MEMORY => {
                let cgroup: CgroupMemoryConfig = common::unpack(any).map_err(|e| e.at(&typed))?;
                let max_memory_bytes = (cgroup.max_memory_bytes > 0).then_some(cgroup.max_memory_bytes);
                config
                    .monitors
                    .push(Monitor { name: monitor.name, kind: MonitorKind::CgroupMemory { max_memory_bytes } });
            }
            other => {
                // Unsampled, it changes nothing unless a trigger names it: refused there.
                warnings.ignored(&typed, format!("resource monitor {other} is not supported"));
            }
        }
    }

    let monitor_index = |trigger: &proto::Trigger, at: &str| -> Result<usize> {
        if let Some(index) = config.monitors.iter().position(|m| m.name == trigger.name) {
            return Ok(index);
        }
        let reason = if proactive.as_deref() == Some(trigger.name.as_str()) {
            "the global connection limit is enforced on accept and cannot trigger an action".to_owned()
        } else if names.contains(&trigger.name) {
            format!("resource monitor {} is not supported", trigger.name)
        } else {
            format!("unknown trigger resource {}", trigger.name)
        };
        Err(ConfigError::new(format!("{at}.name"), reason))
    };

    let mut seen = HashSet::new();
    for (i, action) in actions.iter().enumerate() {
        let at = format!("actions[{i}]");
        let Some(kind) = ActionKind::from_name(&action.name) else {
            return Err(ConfigError::new(
                format!("{at}.name"),
                format!("overload action {:?} is not supported", action.name),
            ));
        };
        if !seen.insert(action.name.clone()) {
            return Err(ConfigError::new(format!("{at}.name"), format!("duplicate overload action {}", action.name)));
        }
        if let Some(typed) = &action.typed_config
            && kind != ActionKind::ShrinkHeap
        {
            return Err(ConfigError::new(
                format!("{at}.typed_config"),
                format!("{} takes no configuration", typed.type_url),
            ));
        }
        let triggers = triggers(&action.triggers, &format!("{at}.triggers"), &monitor_index)?;
        config.actions.push(Action { kind, triggers });
    }

    let mut seen = HashSet::new();
    for (i, point) in loadshed_points.iter().enumerate() {
        let at = format!("loadshed_points[{i}]");
        let Some(kind) = LoadShedKind::from_name(&point.name) else {
            return Err(ConfigError::new(
                format!("{at}.name"),
                format!("load-shed point {:?} is not supported", point.name),
            ));
        };
        if !seen.insert(point.name.clone()) {
            return Err(ConfigError::new(format!("{at}.name"), format!("duplicate load-shed point {}", point.name)));
        }
        let triggers = triggers(&point.triggers, &format!("{at}.triggers"), &monitor_index)?;
        config.load_shed_points.push(LoadShedPoint { kind, triggers });
    }
    Ok(config)
}

/// The limit of the global connection monitor; `i32::MAX` and above mean none.
fn global_connections(any: &Any) -> Result<Option<u64>> {
    let config: DownstreamConnectionsConfig = common::unpack(any)?;
    let max = config.max_active_downstream_connections;
    if max <= 0 {
        return Err(ConfigError::new("max_active_downstream_connections", "must be greater than 0"));
    }
    Ok((max < UNLIMITED).then_some(max as u64))
}

fn triggers(
    triggers: &[proto::Trigger],
    at: &str,
    monitor_index: &dyn Fn(&proto::Trigger, &str) -> Result<usize>,
) -> Result<Vec<Trigger>> {
    if triggers.is_empty() {
        return Err(ConfigError::new(at, "needs at least one trigger"));
    }
    let mut converted: Vec<Trigger> = Vec::with_capacity(triggers.len());
    for (i, trigger) in triggers.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let monitor = monitor_index(trigger, &at)?;
        if converted.iter().any(|t| t.monitor == monitor) {
            return Err(ConfigError::new(format!("{at}.name"), format!("duplicate trigger resource {}", trigger.name)));
        }
        let kind = match &trigger.trigger_oneof {
            Some(proto::trigger::TriggerOneof::Threshold(threshold)) => {
                TriggerKind::Threshold { value: fraction(threshold.value, &format!("{at}.threshold.value"))? }
            }
            Some(proto::trigger::TriggerOneof::Scaled(scaled)) => {
                let scaling = fraction(scaled.scaling_threshold, &format!("{at}.scaled.scaling_threshold"))?;
                let saturation = fraction(scaled.saturation_threshold, &format!("{at}.scaled.saturation_threshold"))?;
                if scaling >= saturation {
                    return Err(ConfigError::new(
                        format!("{at}.scaled"),
                        "scaling_threshold must be less than saturation_threshold",
                    ));
                }
                TriggerKind::Scaled { scaling_threshold: scaling, saturation_threshold: saturation }
            }
            None => return Err(ConfigError::new(at, "needs a threshold or a scaled trigger")),
        };
        converted.push(Trigger { monitor, kind });
    }
    Ok(converted)
}

/// A threshold: Envoy's protos allow 0 to 1.
fn fraction(value: f64, at: &str) -> Result<f64> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::new(at, format!("{value} is not between 0 and 1")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::{Message, Name};

    fn monitor<M: Message + Name>(name: &str, config: M) -> proto::ResourceMonitor {
        let any = Any { type_url: M::type_url(), value: config.encode_to_vec() };
        proto::ResourceMonitor {
            name: name.into(),
            config_type: Some(proto::resource_monitor::ConfigType::TypedConfig(any)),
        }
    }

    fn threshold(name: &str, value: f64) -> proto::Trigger {
        proto::Trigger {
            name: name.into(),
            trigger_oneof: Some(proto::trigger::TriggerOneof::Threshold(proto::ThresholdTrigger { value })),
        }
    }

    const HEAP: &str = "envoy.resource_monitors.fixed_heap";
    const GLOBAL: &str = "envoy.resource_monitors.global_downstream_max_connections";

    fn heap_manager(action: &str, trigger: proto::Trigger) -> proto::OverloadManager {
        proto::OverloadManager {
            resource_monitors: vec![monitor(
                HEAP,
                FixedHeapConfig { max_heap_size_bytes: 1 << 30, max_heap_size_bytes_runtime: None },
            )],
            actions: vec![proto::OverloadAction { name: action.into(), triggers: vec![trigger], typed_config: None }],
            ..Default::default()
        }
    }

    fn error(manager: proto::OverloadManager) -> String {
        overload(manager, &mut Warnings::new()).err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn istios_unlimited_global_limit_is_no_limit_and_a_finite_one_is_kept() {
        let unlimited = DownstreamConnectionsConfig { max_active_downstream_connections: UNLIMITED };
        let manager =
            proto::OverloadManager { resource_monitors: vec![monitor(GLOBAL, unlimited)], ..Default::default() };
        let config = overload(manager, &mut Warnings::new()).unwrap();
        assert_eq!(config.max_downstream_connections, None);
        let limited = DownstreamConnectionsConfig { max_active_downstream_connections: 1000 };
        let manager =
            proto::OverloadManager { resource_monitors: vec![monitor(GLOBAL, limited)], ..Default::default() };
        assert_eq!(overload(manager, &mut Warnings::new()).unwrap().max_downstream_connections, Some(1000));
        let zero = DownstreamConnectionsConfig { max_active_downstream_connections: 0 };
        let manager = proto::OverloadManager { resource_monitors: vec![monitor(GLOBAL, zero)], ..Default::default() };
        assert!(error(manager).starts_with("resource_monitors[0].typed_config.max_active_downstream_connections:"));
    }

    #[test]
    fn a_heap_action_is_converted() {
        let config = overload(
            heap_manager(ActionKind::StopAcceptingRequests.name(), threshold(HEAP, 0.95)),
            &mut Warnings::new(),
        )
        .unwrap();
        assert_eq!(config.monitors[0].kind, MonitorKind::FixedHeap { max_heap_size_bytes: 1 << 30 });
        assert_eq!(config.actions[0].kind, ActionKind::StopAcceptingRequests);
        assert_eq!(config.actions[0].triggers[0], Trigger { monitor: 0, kind: TriggerKind::Threshold { value: 0.95 } });
    }

    #[test]
    fn what_envoy_refuses_is_refused_with_its_path() {
        let e = error(heap_manager("envoy.overload_actions.reduce_timeouts", threshold(HEAP, 0.9)));
        assert!(e.starts_with("actions[0].name:"), "{e}");
        let e = error(heap_manager(ActionKind::ShrinkHeap.name(), threshold("envoy.resource_monitors.other", 0.9)));
        assert!(e.starts_with("actions[0].triggers[0].name:") && e.contains("unknown trigger resource"), "{e}");
        let e = error(heap_manager(ActionKind::ShrinkHeap.name(), threshold(HEAP, 1.5)));
        assert!(e.starts_with("actions[0].triggers[0].threshold.value:"), "{e}");
        let scaled = proto::Trigger {
            name: HEAP.into(),
            trigger_oneof: Some(proto::trigger::TriggerOneof::Scaled(proto::ScaledTrigger {
                scaling_threshold: 0.9,
                saturation_threshold: 0.8,
            })),
        };
        let e = error(heap_manager(ActionKind::ShrinkHeap.name(), scaled));
        assert!(e.starts_with("actions[0].triggers[0].scaled:"), "{e}");
        let mut manager = heap_manager(ActionKind::ShrinkHeap.name(), threshold(HEAP, 0.9));
        manager.loadshed_points.push(proto::LoadShedPoint {
            name: "envoy.load_shed_points.connection_pool_new_connection".into(),
            triggers: vec![threshold(HEAP, 0.9)],
        });
        assert!(error(manager).starts_with("loadshed_points[0].name:"));
        let mut manager = heap_manager(ActionKind::ShrinkHeap.name(), threshold(HEAP, 0.9));
        manager
            .resource_monitors
            .push(monitor(HEAP, FixedHeapConfig { max_heap_size_bytes: 1, max_heap_size_bytes_runtime: None }));
        assert!(error(manager).starts_with("resource_monitors[1].name:"));
    }
}
