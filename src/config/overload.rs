//! The bootstrap's `overload_manager`: resource monitors, and the actions and load-shed
//! points their pressure triggers. See `core::overload` for how it runs.

use std::time::Duration;

/// Envoy's default `refresh_interval`.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq)]
pub struct OverloadConfig {
    /// How often the monitors are sampled and the triggers evaluated.
    pub refresh_interval: Duration,
    /// The monitors triggers can name, in the order configured.
    pub monitors: Vec<Monitor>,
    /// `envoy.resource_monitors.global_downstream_max_connections`: the most downstream
    /// connections open at once over every listener (a proactive limit, checked on accept).
    pub max_downstream_connections: Option<u64>,
    pub actions: Vec<Action>,
    pub load_shed_points: Vec<LoadShedPoint>,
}

impl Default for OverloadConfig {
    fn default() -> Self {
        Self {
            refresh_interval: DEFAULT_REFRESH_INTERVAL,
            monitors: Vec::new(),
            max_downstream_connections: None,
            actions: Vec::new(),
            load_shed_points: Vec::new(),
        }
    }
}

impl OverloadConfig {
    /// Whether anything needs sampling at all.
    pub fn is_active(&self) -> bool {
        !self.actions.is_empty() || !self.load_shed_points.is_empty()
    }
}

/// A resource monitor, by its name (what triggers refer to).
#[derive(Debug, Clone, PartialEq)]
pub struct Monitor {
    pub name: String,
    pub kind: MonitorKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorKind {
    /// `envoy.resource_monitors.fixed_heap`: the heap in use over `max_heap_size_bytes`.
    FixedHeap { max_heap_size_bytes: u64 },
    /// `envoy.resource_monitors.cgroup_memory`: the cgroup's memory in use over its limit
    /// (or `max_memory_bytes`, if lower).
    CgroupMemory { max_memory_bytes: Option<u64> },
}

/// When a monitor's pressure (0 to 1) puts an action in force.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TriggerKind {
    /// Saturated (1) at or above `value`, else 0.
    Threshold { value: f64 },
    /// 0 below `scaling_threshold`, 1 at or above `saturation_threshold`, linear between.
    Scaled { scaling_threshold: f64, saturation_threshold: f64 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    /// Index into [`OverloadConfig::monitors`].
    pub monitor: usize,
    pub kind: TriggerKind,
}

/// What Outrider does while an action is saturated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionKind {
    /// `envoy.overload_actions.stop_accepting_requests`: new requests get 503 `envoy overloaded`.
    StopAcceptingRequests,
    /// `envoy.overload_actions.disable_http_keepalive`: HTTP/1 connections close after their
    /// response, HTTP/2 connections are drained.
    DisableHttpKeepalive,
    /// `envoy.overload_actions.stop_accepting_connections`: listeners stop accepting (new
    /// connections wait in the kernel's backlog).
    StopAcceptingConnections,
    /// `envoy.overload_actions.reject_incoming_connections`: new connections are accepted
    /// and closed at once.
    RejectIncomingConnections,
    /// `envoy.overload_actions.shrink_heap`: free memory is returned to the system.
    ShrinkHeap,
}

impl ActionKind {
    pub const ALL: [ActionKind; 5] = [
        ActionKind::StopAcceptingRequests,
        ActionKind::DisableHttpKeepalive,
        ActionKind::StopAcceptingConnections,
        ActionKind::RejectIncomingConnections,
        ActionKind::ShrinkHeap,
    ];

    /// Its position in [`ActionKind::ALL`] (the declaration order), for tables by kind.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            ActionKind::StopAcceptingRequests => "envoy.overload_actions.stop_accepting_requests",
            ActionKind::DisableHttpKeepalive => "envoy.overload_actions.disable_http_keepalive",
            ActionKind::StopAcceptingConnections => "envoy.overload_actions.stop_accepting_connections",
            ActionKind::RejectIncomingConnections => "envoy.overload_actions.reject_incoming_connections",
            ActionKind::ShrinkHeap => "envoy.overload_actions.shrink_heap",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    pub kind: ActionKind,
    /// In force while any trigger is saturated.
    pub triggers: Vec<Trigger>,
}

/// Where load is shed while a load-shed point's trigger is saturated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LoadShedKind {
    /// `envoy.load_shed_points.tcp_listener_accept`: new connections are closed on accept.
    TcpListenerAccept,
    /// `envoy.load_shed_points.http_connection_manager_decode_headers`: new requests get 503.
    HttpConnectionManagerDecodeHeaders,
}

impl LoadShedKind {
    pub const ALL: [LoadShedKind; 2] =
        [LoadShedKind::TcpListenerAccept, LoadShedKind::HttpConnectionManagerDecodeHeaders];

    /// Its position in [`LoadShedKind::ALL`] (the declaration order), for tables by kind.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            LoadShedKind::TcpListenerAccept => "envoy.load_shed_points.tcp_listener_accept",
            LoadShedKind::HttpConnectionManagerDecodeHeaders => {
                "envoy.load_shed_points.http_connection_manager_decode_headers"
            }
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LoadShedPoint {
    pub kind: LoadShedKind,
    pub triggers: Vec<Trigger>,
}
