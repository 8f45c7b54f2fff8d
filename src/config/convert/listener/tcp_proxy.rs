//! `envoy.filters.network.tcp_proxy` → [`TcpProxy`].

use super::super::common;
use super::protocol_options::ignore_all;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::listener::tcp_proxy::{DEFAULT_TCP_IDLE_TIMEOUT, TcpCluster, TcpProxy, Tunneling};
use crate::pb::envoy::extensions::filters::network::tcp_proxy::v3 as proto;
use crate::pb::envoy::r#type::v3 as types;

#[allow(deprecated)]
pub fn tcp_proxy(proto: proto::TcpProxy, warnings: &mut Warnings) -> Result<TcpProxy> {
    use proto::tcp_proxy::ClusterSpecifier as C;
    let proto::TcpProxy {
        stat_prefix,
        on_demand,
        metadata_match,
        idle_timeout,
        downstream_idle_timeout,
        upstream_idle_timeout,
        access_log,
        max_connect_attempts,
        backoff_options,
        hash_policy,
        tunneling_config,
        max_downstream_connection_duration,
        max_downstream_connection_duration_jitter_percentage,
        access_log_flush_interval,
        flush_access_log_on_connected,
        access_log_options,
        proxy_protocol_tlvs,
        proxy_protocol_tlv_merge_policy: _,
        upstream_connect_mode,
        max_early_data_bytes,
        check_drain_close,
        cluster_specifier,
    } = proto;
    let refuse = |field: &str, what: &str| Err(ConfigError::new(field, format!("{what} is not supported")));
    if on_demand.is_some() {
        return refuse("on_demand", "on-demand cluster discovery");
    }
    if metadata_match.is_some() {
        return refuse("metadata_match", "subset load balancing");
    }
    if !proxy_protocol_tlvs.is_empty() {
        return refuse("proxy_protocol_tlvs", "PROXY protocol");
    }
    let tunneling = tunneling_config
        .map(|t| warnings.within("tunneling_config", |w| tunneling(t, w)))
        .transpose()
        .map_err(|e| e.at("tunneling_config"))?;
    if upstream_connect_mode != proto::UpstreamConnectMode::Immediate as i32 {
        return refuse("upstream_connect_mode", "delaying the upstream connection");
    }
    ignore_all(
        warnings,
        &[
            (
                !access_log.is_empty()
                    || access_log_flush_interval.is_some()
                    || flush_access_log_on_connected
                    || access_log_options.is_some(),
                "access_log",
                "access logs are written by Outrider's own telemetry",
            ),
            (backoff_options.is_some(), "backoff_options", "connect attempts are retried without back-off"),
            // Not implemented by Envoy either (`not-implemented-hide` in its protos): only
            // `idle_timeout` bounds an idle connection.
            (
                downstream_idle_timeout.is_some(),
                "downstream_idle_timeout",
                "not implemented (Envoy ignores it too); idle_timeout applies",
            ),
            (
                upstream_idle_timeout.is_some(),
                "upstream_idle_timeout",
                "not implemented (Envoy ignores it too); idle_timeout applies",
            ),
            (max_early_data_bytes.is_some(), "max_early_data_bytes", "no early data is read before connecting"),
            (check_drain_close.is_some(), "check_drain_close", "connections are closed when the listener drains"),
        ],
    );
    let cluster = match cluster_specifier {
        Some(C::Cluster(name)) if !name.is_empty() => TcpCluster::Cluster(name),
        Some(C::Cluster(_)) => return Err(ConfigError::new("cluster", "must not be empty")),
        Some(C::WeightedClusters(proto::tcp_proxy::WeightedCluster { clusters })) => {
            if clusters.is_empty() {
                return Err(ConfigError::new("weighted_clusters.clusters", "at least one cluster is required"));
            }
            let weighted = clusters
                .into_iter()
                .enumerate()
                .map(|(i, c)| {
                    let proto::tcp_proxy::weighted_cluster::ClusterWeight { name, weight, metadata_match } = c;
                    let at = format!("weighted_clusters.clusters[{i}]");
                    if name.is_empty() {
                        return Err(ConfigError::new(format!("{at}.name"), "must not be empty"));
                    }
                    if weight == 0 {
                        return Err(ConfigError::new(format!("{at}.weight"), "must be at least 1"));
                    }
                    if metadata_match.is_some() {
                        return Err(ConfigError::new(
                            format!("{at}.metadata_match"),
                            "subset load balancing is not supported",
                        ));
                    }
                    Ok((name, weight))
                })
                .collect::<Result<Vec<_>>>()?;
            TcpCluster::Weighted(weighted)
        }
        None => return Err(ConfigError::new("cluster", "one of cluster and weighted_clusters is required")),
    };
    let mut hash_source_ip = false;
    for (i, policy) in hash_policy.into_iter().enumerate() {
        match policy.policy_specifier {
            Some(types::hash_policy::PolicySpecifier::SourceIp(_)) => hash_source_ip = true,
            _ => return Err(ConfigError::new(format!("hash_policy[{i}]"), "only source_ip hashing is supported")),
        }
    }
    let max_downstream_connection_duration =
        common::opt_duration(&max_downstream_connection_duration, "max_downstream_connection_duration")?;
    // Envoy's validation: at least 1 ms.
    if max_downstream_connection_duration.is_some_and(|d| d < std::time::Duration::from_millis(1)) {
        return Err(ConfigError::new("max_downstream_connection_duration", "must be at least 1ms"));
    }
    let max_connect_attempts = common::u32_or(&max_connect_attempts, 1);
    if max_connect_attempts == 0 {
        return Err(ConfigError::new("max_connect_attempts", "must be at least 1"));
    }
    Ok(TcpProxy {
        stat_prefix,
        cluster,
        idle_timeout: match common::opt_duration(&idle_timeout, "idle_timeout")? {
            None => Some(DEFAULT_TCP_IDLE_TIMEOUT),
            // Envoy keeps whole milliseconds: under 1 ms is 0, which disables it.
            Some(d) => Some(d).filter(|d| d.as_millis() > 0),
        },
        max_connect_attempts,
        max_downstream_connection_duration,
        max_downstream_connection_duration_jitter: common::percent_or(
            &max_downstream_connection_duration_jitter_percentage,
            0.0,
            "max_downstream_connection_duration_jitter_percentage",
        )?,
        hash_source_ip,
        tunneling,
    })
}

/// The commands a tunnel's hostname and added headers may use: what is known of the
/// downstream connection when the tunnel opens.
const TUNNEL_COMMANDS: [&str; 4] = [
    "DOWNSTREAM_LOCAL_ADDRESS",
    "DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT",
    "DOWNSTREAM_REMOTE_ADDRESS",
    "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT",
];

fn tunneling(proto: proto::tcp_proxy::TunnelingConfig, warnings: &mut Warnings) -> Result<Tunneling> {
    let proto::tcp_proxy::TunnelingConfig {
        hostname,
        use_post,
        headers_to_add,
        propagate_response_headers,
        post_path,
        propagate_response_trailers,
        request_id_extension,
        request_id_header,
        request_id_metadata_key,
        formatters,
    } = proto;
    if use_post || !post_path.is_empty() {
        let at = if use_post { "use_post" } else { "post_path" };
        return Err(ConfigError::new(at, "tunnelling in a POST is not supported; CONNECT is"));
    }
    if request_id_extension.is_some() {
        return Err(ConfigError::new("request_id_extension", "request IDs on the CONNECT are not supported"));
    }
    if !formatters.is_empty() {
        return Err(ConfigError::new("formatters", "formatter extensions are not supported"));
    }
    if hostname.is_empty() {
        return Err(ConfigError::new("hostname", "is required"));
    }
    tunnel_commands(&hostname).map_err(|e| e.at("hostname"))?;
    let headers_to_add = headers_to_add
        .into_iter()
        .enumerate()
        .map(|(i, option)| {
            let at = format!("headers_to_add[{i}]");
            let option = super::super::header_value_option::header_value_option(option, true).map_err(|e| e.at(&at))?;
            tunnel_commands(&option.value).map_err(|e| e.at(format!("{at}.header.value")))?;
            Ok(option)
        })
        .collect::<Result<Vec<_>>>()?;
    ignore_all(
        warnings,
        &[
            (propagate_response_headers, "propagate_response_headers", "nothing reads the tunnel's response headers"),
            (
                propagate_response_trailers,
                "propagate_response_trailers",
                "nothing reads the tunnel's response trailers",
            ),
            (
                !request_id_header.is_empty(),
                "request_id_header",
                "only used with request_id_extension, which is refused",
            ),
            (
                !request_id_metadata_key.is_empty(),
                "request_id_metadata_key",
                "only used with request_id_extension, which is refused",
            ),
        ],
    );
    Ok(Tunneling { hostname, headers_to_add })
}

/// Refuses a `%COMMAND%` other than [`TUNNEL_COMMANDS`] (`%%` is a `%`): another would be
/// sent as it is written.
fn tunnel_commands(value: &str) -> Result<()> {
    let mut rest = value;
    while let Some(start) = rest.find('%') {
        let after = &rest[start + 1..];
        if let Some(escaped) = after.strip_prefix('%') {
            rest = escaped;
            continue;
        }
        let Some(end) = after.find('%') else { return Ok(()) };
        let command = &after[..end];
        // A filter state object as its text: the connection's (Istio's double HBONE names
        // the inner tunnel's target this way).
        let filter_state = command.strip_prefix("FILTER_STATE(").and_then(|c| c.strip_suffix(":PLAIN)"));
        if !TUNNEL_COMMANDS.contains(&command) && !filter_state.is_some_and(|key| !key.is_empty() && !key.contains(':'))
        {
            return Err(ConfigError::new("", format!("%{command}% is not supported in a tunnel")));
        }
        rest = &after[end + 1..];
    }
    Ok(())
}
