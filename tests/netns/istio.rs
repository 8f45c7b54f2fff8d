//! The bootstrap Outrider runs with in the pod namespace: Istio's sidecar listeners and
//! clusters, reduced to what capture needs, plus one explicitly addressed listener for
//! comparing captured with uncaptured traffic.
#![allow(dead_code)]

use super::CLIENT_V4;

/// Istio's sidecar listeners and clusters, reduced to what capture needs.
pub fn bootstrap() -> String {
    let tcp = |cluster: &str| {
        format!(
            r#"[{{ name: envoy.filters.network.tcp_proxy, typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: "{cluster}", cluster: "{cluster}" }} }}]"#
        )
    };
    let http = |cluster: &str| {
        format!(
            r#"[{{ name: envoy.filters.network.http_connection_manager, typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: "{cluster}", route_config: {{ virtual_hosts: [{{ name: all, domains: ["*"], routes: [{{ match: {{ prefix: "/" }}, route: {{ cluster: "{cluster}" }} }}] }}] }}, http_filters: [{{ name: envoy.filters.http.router, typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }} }}] }} }}]"#
        )
    };
    let any =
        |address: &str, port: u16| format!("{{ socket_address: {{ address: \"{address}\", port_value: {port} }} }}");
    let original_dst = |name: &str, bind: &str| {
        format!(
            "  - {{ name: {name}, type: ORIGINAL_DST, lb_policy: CLUSTER_PROVIDED, connect_timeout: 5s, cleanup_interval: 60s, upstream_bind_config: {{ source_address: {{ address: \"{bind}\", port_value: 0 }} }} }}\n"
        )
    };
    format!(
        r#"
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 15000 }} }} }}
static_resources:
  listeners:
  - name: virtualOutbound
    address: {v4_15001}
    additional_addresses: [{{ address: {v6_15001} }}]
    use_original_dst: true
    traffic_direction: OUTBOUND
    filter_chains:
    - {{ name: virtualOutbound-blackhole, filter_chain_match: {{ destination_port: 15001 }}, filters: {blackhole} }}
    - {{ name: virtualOutbound-catchall-tcp, filters: {passthrough} }}
  - name: explicit_18080
    address: {explicit}
    filter_chains:
    - {{ filters: {remote} }}
  - name: 0.0.0.0_8080
    address: {v4_8080}
    bind_to_port: false
    traffic_direction: OUTBOUND
    filter_chains:
    - {{ filters: {remote} }}
  - name: virtualInbound
    address: {v4_15006}
    additional_addresses: [{{ address: {v6_15006} }}]
    traffic_direction: INBOUND
    listener_filters:
    - {{ name: envoy.filters.listener.original_dst, typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst }} }}
    filter_chains:
    - {{ name: virtualInbound-blackhole, filter_chain_match: {{ destination_port: 15006 }}, filters: {blackhole} }}
    - {{ name: 0.0.0.0_8080, filter_chain_match: {{ destination_port: 8080 }}, filters: {inbound_http} }}
    - {{ name: virtualInbound, filter_chain_match: {{ prefix_ranges: [{{ address_prefix: 0.0.0.0, prefix_len: 0 }}] }}, filters: {inbound_v4} }}
    - {{ name: virtualInbound, filter_chain_match: {{ prefix_ranges: [{{ address_prefix: "::", prefix_len: 0 }}] }}, filters: {inbound_v6} }}
  clusters:
  - {{ name: BlackHoleCluster, type: STATIC, connect_timeout: 5s }}
  - {{ name: PassthroughCluster, type: ORIGINAL_DST, lb_policy: CLUSTER_PROVIDED, connect_timeout: 5s }}
{inbound_8080}{passthrough_v4}{passthrough_v6}  - name: outbound|8080||remote
    type: STATIC
    connect_timeout: 5s
    load_assignment:
      cluster_name: outbound|8080||remote
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {remote_8081} }} }}] }}]
"#,
        v4_15001 = any("0.0.0.0", 15001),
        v6_15001 = any("::", 15001),
        v4_15006 = any("0.0.0.0", 15006),
        v6_15006 = any("::", 15006),
        v4_8080 = any("0.0.0.0", 8080),
        explicit = any("127.0.0.1", 18080),
        blackhole = tcp("BlackHoleCluster"),
        passthrough = tcp("PassthroughCluster"),
        remote = http("outbound|8080||remote"),
        inbound_http = http("inbound|8080||"),
        inbound_v4 = tcp("InboundPassthroughClusterIpv4"),
        inbound_v6 = tcp("InboundPassthroughClusterIpv6"),
        inbound_8080 = original_dst("inbound|8080||", "127.0.0.6"),
        passthrough_v4 = original_dst("InboundPassthroughClusterIpv4", "127.0.0.6"),
        passthrough_v6 = original_dst("InboundPassthroughClusterIpv6", "::6"),
        remote_8081 = any(CLIENT_V4, 8081),
    )
}
