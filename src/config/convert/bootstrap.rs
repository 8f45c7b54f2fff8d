//! `envoy.config.bootstrap.v3.Bootstrap` (from its JSON form) → [`Bootstrap`].

use std::time::Duration;

mod load;
mod overload;
mod stats;
mod tracer;

use super::common;
use crate::config::address::Address;
use crate::config::bootstrap::{
    APP_CPU_LIMIT_METADATA_KEY, APP_CPU_METADATA_KEY, AdsConfig, ApiType, Bootstrap, DEFAULT_ADMIN_ADDRESS,
    DEFAULT_INITIAL_FETCH_TIMEOUT, LOAD_REPORT_METADATA_KEY, Node, SourceSettings,
};
use crate::config::cluster::DiscoveryType;
use crate::config::cluster::lb_policy::{PROXY_LB_METADATA_KEY, ProxyLbPolicy};
use crate::config::endpoint::Locality;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::secret::StringMatcher;
use crate::core::cpu_usage::CpuSource;
use crate::pb::envoy::config::bootstrap::v3 as proto;
use crate::pb::envoy::config::core::v3 as core;

/// A field that is set when it differs from its protobuf default.
fn is_set<T: Default + PartialEq>(value: &T) -> bool {
    *value != T::default()
}

/// Records each set field in `$field…` as ignored.
macro_rules! ignore_set {
    ($warnings:expr, $what:expr; $($field:ident),+ $(,)?) => {
        $( if is_set(&$field) { $warnings.ignored(stringify!($field), $what); } )+
    };
}

pub fn bootstrap(document: serde_json::Value, warnings: &mut Warnings) -> Result<Bootstrap> {
    // One validator of the typed configs for the whole bootstrap (see `common::unpack`).
    crate::pb::pgv::with_extension_checks(|| bootstrap_checked(document, warnings))
}

/// The document as the protobuf message, what the descriptors do not know left out with a
/// warning each. Static listeners and clusters are read one by one, not as part of the
/// whole: a mesh's worth of them read at once held the whole tree of dynamic messages
/// (several times the text's size) and re-encoded each nested message once per level above
/// it, which made a 5 000-cluster bootstrap slower to start than Envoy (`bench/RESULTS.md`).
fn read_proto(mut document: serde_json::Value, warnings: &mut Warnings) -> Result<proto::Bootstrap> {
    use crate::pb::envoy::config::{cluster::v3::Cluster, listener::v3::Listener};
    // One descriptor pool for the whole document, not one decoded per resource.
    let _pool = crate::pb::json::pool().map_err(|e| ConfigError::new(e.path, e.reason))?;
    let listeners = take_static(&mut document, "listeners");
    let clusters = take_static(&mut document, "clusters");
    let (mut bootstrap, dropped) =
        crate::pb::json::from_value::<proto::Bootstrap>("envoy.config.bootstrap.v3.Bootstrap", document)
            .map_err(|e| ConfigError::new(e.path, e.reason))?;
    for d in dropped {
        warnings.ignored(d.path, d.what);
    }
    let listeners = read_each::<Listener>(listeners, "envoy.config.listener.v3.Listener", warnings)?;
    let clusters = read_each::<Cluster>(clusters, "envoy.config.cluster.v3.Cluster", warnings)?;
    if !listeners.is_empty() || !clusters.is_empty() {
        let read = bootstrap.static_resources.get_or_insert_with(Default::default);
        read.listeners.extend(listeners);
        read.clusters.extend(clusters);
    }
    Ok(bootstrap)
}

/// Reads each of `items` (taken from `at`) as the message `full_name`.
fn read_each<M: prost::Message + Default>(
    items: Option<(String, Vec<serde_json::Value>)>,
    full_name: &str,
    warnings: &mut Warnings,
) -> Result<Vec<M>> {
    let Some((at, items)) = items else { return Ok(Vec::new()) };
    let mut read = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("{at}[{i}]");
        let within = |path: String| if path.is_empty() { at.clone() } else { format!("{at}.{path}") };
        let (message, dropped) = crate::pb::json::from_value::<M>(full_name, item)
            .map_err(|e| ConfigError::new(within(e.path), e.reason))?;
        for d in dropped {
            warnings.ignored(within(d.path), d.what);
        }
        read.push(message);
    }
    Ok(read)
}

/// Takes the list `field` of the static resources out of `document` (when it is a list),
/// with its path.
fn take_static(document: &mut serde_json::Value, field: &str) -> Option<(String, Vec<serde_json::Value>)> {
    use serde_json::Value;
    let key = ["static_resources", "staticResources"].into_iter().find(|key| document.get(key).is_some())?;
    let Some(Value::Object(resources)) = document.get_mut(key) else { return None };
    match resources.get_mut(field) {
        Some(Value::Array(items)) => Some((format!("{key}.{field}"), std::mem::take(items))),
        _ => None,
    }
}

fn bootstrap_checked(document: serde_json::Value, warnings: &mut Warnings) -> Result<Bootstrap> {
    // Kept as text, not as a copy of the tree: a copy of a mesh-sized tree costs more.
    let text = document.to_string();
    let proto = read_proto(document, warnings)?;
    let proto::Bootstrap {
        node,
        node_context_params,
        static_resources,
        dynamic_resources,
        cluster_manager,
        hds_config,
        flags_path,
        stats_sinks,
        deferred_stat_options,
        stats_config,
        stats_flush_interval,
        watchdog,
        watchdogs,
        tracing,
        layered_runtime: _, // runtime overrides have no meaning here: ignored silently
        admin,
        overload_manager,
        enable_dispatcher_stats,
        header_prefix,
        stats_server_version_override,
        use_tcp_for_dns_lookups,
        dns_resolution_config,
        typed_dns_resolver_config,
        bootstrap_extensions,
        fatal_actions,
        config_sources,
        default_config_source,
        default_socket_interface,
        certificate_provider_instances,
        inline_headers,
        perf_tracing_file_path,
        default_regex_engine,
        xds_delegate_extension,
        xds_config_tracker_extension,
        listener_manager,
        application_log_config,
        grpc_async_client_manager_config,
        memory_allocator_manager,
        enable_worker_cpu_affinity,
        stats_flush,
        stats_eviction,
    } = proto;
    ignore_set!(warnings, "statistics are Outrider's own";
        stats_sinks, deferred_stat_options, stats_flush_interval, enable_dispatcher_stats,
        stats_server_version_override, stats_flush, stats_eviction);
    ignore_set!(warnings, "not used by Outrider";
        node_context_params, cluster_manager, flags_path, watchdog, watchdogs,
        use_tcp_for_dns_lookups, dns_resolution_config, typed_dns_resolver_config,
        fatal_actions, config_sources, default_config_source, default_socket_interface, inline_headers,
        perf_tracing_file_path, default_regex_engine, xds_config_tracker_extension, application_log_config,
        grpc_async_client_manager_config, memory_allocator_manager, enable_worker_cpu_affinity);
    let BootstrapExtensions { workload_discovery, internal_listener_buffer_kb } =
        extensions(&bootstrap_extensions, warnings)?;
    let overload = match overload_manager {
        Some(manager) => warnings
            .within("overload_manager", |w| overload::overload(manager, w))
            .map_err(|e| e.at("overload_manager"))?,
        None => Default::default(),
    };
    if hds_config.is_some() {
        warnings.ignored("hds_config", "health discovery service is not supported; clusters' own health checks apply");
    }
    if !header_prefix.is_empty() {
        return Err(ConfigError::new("header_prefix", "Outrider always uses the x-envoy- header prefix"));
    }
    if !certificate_provider_instances.is_empty() {
        return Err(ConfigError::new("certificate_provider_instances", "certificate providers are not supported"));
    }
    if xds_delegate_extension.is_some() {
        return Err(ConfigError::new("xds_delegate_extension", "not supported"));
    }
    if listener_manager.is_some() {
        return Err(ConfigError::new("listener_manager", "only the default listener manager is supported"));
    }

    let stats = match stats_config {
        Some(config) => {
            warnings.within("stats_config", |w| stats::stats_config(config, w)).map_err(|e| e.at("stats_config"))?
        }
        None => Default::default(),
    };
    let node = node.map(|n| warnings.within("node", |w| convert_node(n, w))).transpose().map_err(|e| e.at("node"))?;
    let tracing = match tracing {
        Some(t) => warnings.within("tracing", |w| tracer::tracing(t, w)).map_err(|e| e.at("tracing"))?,
        None => None,
    };
    let (admin_address, admin_allow_paths) = match admin {
        None => (Address::Socket(DEFAULT_ADMIN_ADDRESS), Vec::new()),
        Some(admin) => warnings.within("admin", |w| admin_settings(admin, w)).map_err(|e| e.at("admin"))?,
    };

    let (static_listeners, static_clusters, static_secrets) = match static_resources {
        None => Default::default(),
        Some(proto::bootstrap::StaticResources { listeners, clusters, secrets }) => {
            let listeners = listeners
                .into_iter()
                .enumerate()
                .map(|(i, l)| {
                    let at = format!("static_resources.listeners[{i}]");
                    warnings.within(&at, |w| super::listener::listener(l, w)).map_err(|e| e.at(&at))
                })
                .collect::<Result<Vec<_>>>()?;
            let clusters = clusters
                .into_iter()
                .enumerate()
                .map(|(i, c)| {
                    let at = format!("static_resources.clusters[{i}]");
                    warnings.within(&at, |w| super::cluster::cluster(c, w)).map_err(|e| e.at(&at))
                })
                .collect::<Result<Vec<_>>>()?;
            let secrets = secrets
                .into_iter()
                .enumerate()
                .map(|(i, s)| {
                    let at = format!("static_resources.secrets[{i}]");
                    warnings.within(&at, |w| super::secret::secret(s, w)).map_err(|e| e.at(&at))
                })
                .collect::<Result<Vec<_>>>()?;
            (listeners, clusters, secrets)
        }
    };

    let ads = dynamic_resources
        .map(|d| warnings.within("dynamic_resources", |w| dynamic(d, w)))
        .transpose()
        .map_err(|e| e.at("dynamic_resources"))?
        .flatten();
    if let Some(ads) = &ads {
        let cluster = static_clusters.iter().find(|c| c.name == ads.cluster_name).ok_or_else(|| {
            ConfigError::new(
                "dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name",
                format!("{:?} is not a static cluster", ads.cluster_name),
            )
        })?;
        if matches!(cluster.discovery, DiscoveryType::Eds(_)) {
            return Err(ConfigError::new(
                "dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name",
                format!("{:?} must be a STATIC or STRICT_DNS cluster", ads.cluster_name),
            ));
        }
    }

    Ok(Bootstrap {
        node: node.unwrap_or_default(),
        admin_address,
        admin_allow_paths,
        ads,
        static_listeners,
        static_clusters,
        static_secrets,
        tracing,
        stats,
        overload,
        workload_discovery,
        internal_listener_buffer_kb,
        ignored: Vec::new(),
        document: text,
    })
}

/// What `bootstrap_extensions` asks for.
#[derive(Default)]
struct BootstrapExtensions {
    /// Istio's workload metadata discovery (`istio.workload.BootstrapExtension`, over ADS).
    workload_discovery: bool,
    /// The internal listener extension's `buffer_size_kb` (Outrider serves internal
    /// listeners without the extension too).
    internal_listener_buffer_kb: Option<u32>,
}

/// `bootstrap_extensions`; others than the two Outrider knows are not used.
fn extensions(extensions: &[core::TypedExtensionConfig], warnings: &mut Warnings) -> Result<BootstrapExtensions> {
    const INTERNAL_LISTENER: &str = "envoy.extensions.bootstrap.internal_listener.v3.InternalListener";
    const WORKLOAD_DISCOVERY: &str = "istio.workload.BootstrapExtension";
    let mut found = BootstrapExtensions::default();
    for (i, extension) in extensions.iter().enumerate() {
        let at = format!("bootstrap_extensions[{i}]");
        let Some(any) = &extension.typed_config else {
            warnings.ignored(at, "an extension without a typed_config is not used");
            continue;
        };
        match super::filter_kind::config_type(any).as_str() {
            INTERNAL_LISTENER => {
                let at = format!("{at}.typed_config");
                let config =
                    super::filters::istio_json::config_object(any, INTERNAL_LISTENER).map_err(|e| e.at(&at))?;
                for (key, value) in &config {
                    let name = super::filters::istio_json::field(key);
                    match name.as_str() {
                        // A `UInt32Value`: a number in JSON, as in a `TypedStruct`.
                        "buffer_size_kb" => {
                            // Envoy's proto bounds it: 1 to 8192.
                            // (A `Struct` holds numbers as doubles.)
                            let whole = value.as_f64().filter(|kb| kb.fract() == 0.0 && (0.0..=8192.0).contains(kb));
                            let kb = value.as_u64().or(whole.map(|kb| kb as u64)).and_then(|kb| u32::try_from(kb).ok());
                            let kb = kb.filter(|kb| (1..=8192).contains(kb)).ok_or_else(|| {
                                ConfigError::new(format!("{at}.buffer_size_kb"), "must be 1 to 8192 (KiB)")
                            })?;
                            found.internal_listener_buffer_kb = Some(kb);
                        }
                        _ => warnings.ignored(format!("{at}.{name}"), "not used by Outrider's internal listeners"),
                    }
                }
            }
            WORKLOAD_DISCOVERY => {
                let at = format!("{at}.typed_config");
                let config =
                    super::filters::istio_json::config_object(any, WORKLOAD_DISCOVERY).map_err(|e| e.at(&at))?;
                for (key, value) in &config {
                    let name = super::filters::istio_json::field(key);
                    match name.as_str() {
                        "config_source" if value.get("ads").is_some() => {}
                        "config_source" => {
                            return Err(ConfigError::new(
                                format!("{at}.config_source"),
                                "workload metadata is only discovered over ADS",
                            ));
                        }
                        _ => {
                            return Err(ConfigError::new(
                                format!("{at}.{name}"),
                                "unknown field of BootstrapExtension",
                            ));
                        }
                    }
                }
                found.workload_discovery = true;
            }
            other => warnings.ignored(at, format!("{other} is not used by Outrider")),
        }
    }
    Ok(found)
}

fn convert_node(node: core::Node, warnings: &mut Warnings) -> Result<Node> {
    let core::Node {
        id,
        cluster,
        metadata,
        dynamic_parameters,
        locality,
        user_agent_name,
        extensions,
        client_features,
        listening_addresses,
        user_agent_version_type,
    } = node;
    ignore_set!(warnings, "Outrider sends its own user agent and features";
        user_agent_name, extensions, client_features, user_agent_version_type);
    ignore_set!(warnings, "not used by Outrider"; dynamic_parameters, listening_addresses);
    let locality = locality.map(|core::Locality { region, zone, sub_zone }| Locality { region, zone, sub_zone });
    let metadata = match metadata {
        None => serde_json::Map::new(),
        Some(metadata) => match common::struct_to_json(&metadata) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => return Err(ConfigError::new("metadata", "cannot be represented as JSON")),
        },
    };
    let lb_policy = proxy_lb_policy(&metadata).map_err(|e| e.at("metadata"))?;
    let load_reports = load_reports(&metadata).map_err(|e| e.at("metadata"))?;
    let app_cpu = app_cpu(&metadata).map_err(|e| e.at("metadata"))?;
    Ok(Node { id, cluster, locality: locality.unwrap_or_default(), metadata, lb_policy, load_reports, app_cpu })
}

/// `OUTRIDER_APP_CPU` (`auto`, `cgroup`, `processes` or `off`) and, with `processes`,
/// `OUTRIDER_APP_CPU_LIMIT` (millicores, a positive number, as a string or a number). A
/// limit given with another source is refused: it would be read by nothing.
fn app_cpu(metadata: &serde_json::Map<String, serde_json::Value>) -> Result<CpuSource> {
    use serde_json::Value;
    let limit = match metadata.get(APP_CPU_LIMIT_METADATA_KEY) {
        None => None,
        Some(value) => {
            let millicores = match value {
                Value::String(text) => text.trim().parse::<f64>().ok(),
                Value::Number(number) => number.as_f64(),
                _ => None,
            };
            match millicores {
                Some(m) if m.is_finite() && m > 0.0 => Some(m / 1000.0),
                _ => {
                    return Err(ConfigError::new(
                        APP_CPU_LIMIT_METADATA_KEY,
                        "must be a positive number of millicores",
                    ));
                }
            }
        }
    };
    let source = match metadata.get(APP_CPU_METADATA_KEY).map(Value::as_str) {
        None | Some(Some("auto")) => CpuSource::Auto,
        Some(Some("cgroup")) => CpuSource::Cgroup,
        Some(Some("processes")) => CpuSource::Processes { cpus: limit },
        Some(Some("off")) => CpuSource::Off,
        Some(_) => {
            return Err(ConfigError::new(
                APP_CPU_METADATA_KEY,
                "must be \"auto\", \"cgroup\", \"processes\" or \"off\"",
            ));
        }
    };
    if limit.is_some() && !matches!(source, CpuSource::Processes { .. }) {
        return Err(ConfigError::new(
            APP_CPU_LIMIT_METADATA_KEY,
            format!("is only read with {APP_CPU_METADATA_KEY}: processes"),
        ));
    }
    Ok(source)
}

/// `OUTRIDER_LOAD_REPORT`: `on` (the default) or `off`; anything else is refused.
fn load_reports(metadata: &serde_json::Map<String, serde_json::Value>) -> Result<bool> {
    use serde_json::Value;
    // A YAML bootstrap may spell them unquoted, which YAML 1.1 reads as booleans.
    match metadata.get(LOAD_REPORT_METADATA_KEY) {
        None => Ok(true),
        Some(Value::String(text)) if text == "on" => Ok(true),
        Some(Value::String(text)) if text == "off" => Ok(false),
        Some(Value::Bool(on)) => Ok(*on),
        Some(_) => Err(ConfigError::new(LOAD_REPORT_METADATA_KEY, "must be \"on\" or \"off\"")),
    }
}

/// `OUTRIDER_LB` of the node metadata: a value Outrider does not know is refused (the
/// operator asked for a policy; serving another would be a silent fallback).
fn proxy_lb_policy(metadata: &serde_json::Map<String, serde_json::Value>) -> Result<Option<ProxyLbPolicy>> {
    let Some(value) = metadata.get(PROXY_LB_METADATA_KEY) else { return Ok(None) };
    let known = ProxyLbPolicy::VALUES.join(", ");
    match value.as_str() {
        Some(text) => ProxyLbPolicy::parse(text).map(Some).ok_or_else(|| {
            ConfigError::new(PROXY_LB_METADATA_KEY, format!("unknown balancing policy {text:?} (known: {known})"))
        }),
        None => Err(ConfigError::new(PROXY_LB_METADATA_KEY, format!("must be a string (known: {known})"))),
    }
}

/// The admin server's address and `allow_paths` (each converted with its path, so that a
/// bad regex is refused: an allow list that cannot be applied would open every path).
fn admin_settings(admin: proto::Admin, warnings: &mut Warnings) -> Result<(Address, Vec<StringMatcher>)> {
    let proto::Admin {
        access_log,
        access_log_path,
        profile_path,
        address,
        socket_options,
        ignore_global_conn_limit: _,
        allow_paths,
    } = admin;
    ignore_set!(warnings, "admin access is logged by Outrider's own logger"; access_log, access_log_path);
    ignore_set!(warnings, "there is no CPU profiler"; profile_path);
    ignore_set!(warnings, "not used by Outrider"; socket_options);
    let allow_paths = allow_paths
        .into_iter()
        .enumerate()
        .map(|(i, matcher)| super::secret::string_matcher(matcher).map_err(|e| e.at(format!("allow_paths[{i}]"))))
        .collect::<Result<Vec<_>>>()?;
    let address = match address {
        None => Address::Socket(DEFAULT_ADMIN_ADDRESS),
        Some(address) => common::address(&address, false).map_err(|e| e.at("address"))?,
    };
    Ok((address, allow_paths))
}

fn dynamic(dynamic: proto::bootstrap::DynamicResources, warnings: &mut Warnings) -> Result<Option<AdsConfig>> {
    let proto::bootstrap::DynamicResources {
        lds_config,
        lds_resources_locator,
        cds_config,
        cds_resources_locator,
        ads_config,
    } = dynamic;
    if !lds_resources_locator.is_empty() {
        return Err(ConfigError::new("lds_resources_locator", "xdstp:// locators are not supported"));
    }
    if !cds_resources_locator.is_empty() {
        return Err(ConfigError::new("cds_resources_locator", "xdstp:// locators are not supported"));
    }
    let lds = lds_config.map(|c| ads_source(c, warnings)).transpose().map_err(|e| e.at("lds_config"))?;
    let cds = cds_config.map(|c| ads_source(c, warnings)).transpose().map_err(|e| e.at("cds_config"))?;
    let Some(ads_config) = ads_config else {
        if lds.is_some() || cds.is_some() {
            return Err(ConfigError::new("ads_config", "lds_config and cds_config use ADS, so ads_config is required"));
        }
        return Ok(None);
    };
    let core::ApiConfigSource {
        api_type,
        transport_api_version: _,
        cluster_names,
        grpc_services,
        refresh_delay: _,
        request_timeout: _,
        rate_limit_settings,
        set_node_on_first_message_only,
        config_validators,
    } = ads_config;
    let at = |field: &str| format!("ads_config.{field}");
    let api_type = match core::api_config_source::ApiType::try_from(api_type) {
        Ok(core::api_config_source::ApiType::Grpc) => ApiType::Sotw,
        Ok(core::api_config_source::ApiType::DeltaGrpc) => ApiType::Delta,
        _ => return Err(ConfigError::new(at("api_type"), "must be GRPC or DELTA_GRPC")),
    };
    if !cluster_names.is_empty() {
        return Err(ConfigError::new(at("cluster_names"), "gRPC config sources name their cluster in grpc_services"));
    }
    if rate_limit_settings.is_some() {
        warnings.ignored(at("rate_limit_settings"), "xDS requests are not rate limited");
    }
    if !config_validators.is_empty() {
        return Err(ConfigError::new(at("config_validators"), "config validators are not supported"));
    }
    let cluster_name = match grpc_services.as_slice() {
        [service] => grpc_cluster(service).map_err(|e| e.at(at("grpc_services[0]")))?,
        [] => return Err(ConfigError::new(at("grpc_services"), "exactly one gRPC service is required")),
        _ => return Err(ConfigError::new(at("grpc_services"), "only one gRPC service is supported")),
    };
    Ok(Some(AdsConfig { api_type, cluster_name, set_node_on_first_message_only, lds, cds }))
}

fn grpc_cluster(service: &core::GrpcService) -> Result<String> {
    match &service.target_specifier {
        Some(core::grpc_service::TargetSpecifier::EnvoyGrpc(envoy)) if !envoy.cluster_name.is_empty() => {
            Ok(envoy.cluster_name.clone())
        }
        Some(core::grpc_service::TargetSpecifier::EnvoyGrpc(_)) => {
            Err(ConfigError::new("envoy_grpc.cluster_name", "must not be empty"))
        }
        Some(core::grpc_service::TargetSpecifier::GoogleGrpc(_)) => {
            Err(ConfigError::new("google_grpc", "use envoy_grpc with a static cluster"))
        }
        None => Err(ConfigError::new("envoy_grpc", "is required")),
    }
}

/// A `ConfigSource` that must say `ads: {}`.
pub fn ads_source(source: core::ConfigSource, warnings: &mut Warnings) -> Result<SourceSettings> {
    let core::ConfigSource { authorities, initial_fetch_timeout, resource_api_version: _, config_source_specifier } =
        source;
    if !authorities.is_empty() {
        warnings.ignored("authorities", "xdstp authorities are not used");
    }
    match config_source_specifier {
        Some(core::config_source::ConfigSourceSpecifier::Ads(_)) => {}
        Some(core::config_source::ConfigSourceSpecifier::Self_(_)) => {}
        _ => return Err(ConfigError::new("ads", "only ADS config sources are supported")),
    }
    let timeout = match initial_fetch_timeout {
        None => Some(DEFAULT_INITIAL_FETCH_TIMEOUT),
        Some(t) => {
            Some(common::duration(&t).map_err(|e| e.at("initial_fetch_timeout"))?).filter(|t| *t != Duration::ZERO)
        }
    };
    Ok(SourceSettings { initial_fetch_timeout: timeout })
}
