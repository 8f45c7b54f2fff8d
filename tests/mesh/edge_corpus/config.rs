//! The bootstrap both proxies start from: Istio's connection managers, their fields taken
//! from istiod's rendering of a sidecar (tests/data/istio/sidecar-listeners.config_dump.json,
//! listeners `virtualInbound` and `0.0.0.0_80`), and variants for the fields Istio leaves at
//! their defaults.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::tls_support::pki::{Ca, Leaf};

const INBOUND_CLUSTER: &str = "inbound|80||";
const OUTBOUND_CLUSTER: &str = "outbound|8080||app.default.svc.cluster.local";
pub(super) const SERVICE: &str = "app.default.svc.cluster.local";

/// Every listener of the bootstrap, by the name the cases use.
pub(super) const LISTENERS: &[&str] = &[
    "inbound",
    "strict",
    "sanitize",
    "forward_only",
    "sanitize_set",
    "always_forward_only",
    "outbound",
    "edge",
    "edge_internal",
    "hops",
    "hops_xff",
    "strip",
    "http10",
    "xfcc_cert",
    "skip_xff",
];

/// The filters of Istio's inbound HTTP chain that Envoy 1.40 has (not Istio's own Wasm and
/// stats filters): RBAC as an `AuthorizationPolicy` DENY on `hosts: [admin.example]`
/// renders it, CORS, fault, router.
fn inbound_http_filters() -> Value {
    json!([
        {
            "name": "envoy.filters.http.rbac",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC",
                "rules": {
                    "action": "DENY",
                    "policies": {
                        "ns[default]-policy[deny-admin]-rule[0]": {
                            "permissions": [{ "and_rules": { "rules": [{ "or_rules": { "rules": [
                                { "header": { "name": ":authority", "string_match": { "exact": "admin.example", "ignore_case": true } } }
                            ] } }] } }],
                            "principals": [{ "and_ids": { "ids": [{ "any": true }] } }],
                        }
                    },
                },
                "shadow_rules_stat_prefix": "istio_dry_run_allow_",
            },
        },
        { "name": "envoy.filters.http.cors", "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors" } },
        { "name": "envoy.filters.http.fault", "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault" } },
        { "name": "envoy.filters.http.router", "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" } },
    ])
}

/// The fields every Istio HTTP connection manager carries.
fn istio_hcm(stat_prefix: &str, route_config: Value, http_filters: Value) -> Value {
    json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": stat_prefix,
        "route_config": route_config,
        "http_filters": http_filters,
        "use_remote_address": false,
        "upgrade_configs": [{ "upgrade_type": "websocket" }],
        "stream_idle_timeout": "0s",
        "normalize_path": true,
        "request_id_extension": { "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.request_id.uuid.v3.UuidRequestIdConfig",
            "use_request_id_for_trace_sampling": true,
        } },
        "path_with_escaped_slashes_action": "KEEP_UNCHANGED",
        // Not in the rendered configs above; set so that both proxies run with it (a client
        // that sends its head at once never meets it).
        "request_headers_timeout": "10s",
    })
}

/// The inbound connection manager of `virtualInbound`'s HTTP chains, with `forward_client_cert_details`
/// set to `xfcc` (Istio: `APPEND_FORWARD`); `extra` replaces or adds fields.
fn inbound_hcm(xfcc: &str, extra: Value) -> Value {
    let route_config = json!({
        "name": INBOUND_CLUSTER,
        "virtual_hosts": [{
            "name": "inbound|http|80",
            "domains": ["*"],
            "routes": [{
                "match": { "prefix": "/" },
                "route": {
                    "cluster": INBOUND_CLUSTER,
                    "timeout": "0s",
                    "max_stream_duration": { "max_stream_duration": "0s", "grpc_timeout_header_max": "0s" },
                },
                "decorator": { "operation": "app.default.svc.cluster.local:80/*" },
                "name": "default",
            }],
        }],
        "validate_clusters": false,
    });
    let mut hcm = istio_hcm("inbound_0.0.0.0_80", route_config, inbound_http_filters());
    hcm["server_name"] = json!("istio-envoy");
    hcm["forward_client_cert_details"] = json!(xfcc);
    hcm["set_current_client_cert_details"] = json!({ "subject": true, "dns": true, "uri": true });
    merge(&mut hcm, extra);
    hcm
}

/// The outbound `0.0.0.0_8080` connection manager with its route configuration inline (istiod
/// serves it by RDS): the service's virtual host with Istio's default retry policy, and
/// `allow_any` for every other authority.
fn outbound_hcm() -> Value {
    let domains: Vec<String> = ["app.default.svc.cluster.local", "app", "app.default.svc", "app.default"]
        .iter()
        .flat_map(|d| [d.to_string(), format!("{d}:8080")])
        .collect();
    let route_config = json!({
        "name": "8080",
        "virtual_hosts": [
            {
                "name": "app.default.svc.cluster.local:8080",
                "domains": domains,
                "routes": [{
                    "match": { "prefix": "/" },
                    "route": {
                        "cluster": OUTBOUND_CLUSTER,
                        "timeout": "0s",
                        "retry_policy": {
                            "retry_on": "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
                            "num_retries": 2,
                            "retry_host_predicate": [{
                                "name": "envoy.retry_host_predicates.previous_hosts",
                                "typed_config": { "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate" },
                            }],
                            "host_selection_retry_max_attempts": "5",
                            "retriable_status_codes": [503],
                        },
                        "max_stream_duration": { "max_stream_duration": "0s", "grpc_timeout_header_max": "0s" },
                    },
                    "decorator": { "operation": "app.default.svc.cluster.local:8080/*" },
                    "name": "default",
                }],
                "include_request_attempt_count": true,
            },
            {
                "name": "allow_any",
                "domains": ["*"],
                "routes": [{
                    "match": { "prefix": "/" },
                    "route": { "cluster": "PassthroughCluster", "timeout": "0s", "max_grpc_timeout": "0s" },
                    "name": "allow_any",
                }],
                "include_request_attempt_count": true,
            },
        ],
        "validate_clusters": false,
        "max_direct_response_body_size_bytes": 1048576,
        "ignore_port_in_host_matching": true,
    });
    let filters = json!([
        { "name": "envoy.filters.http.fault", "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault" } },
        { "name": "envoy.filters.http.cors", "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors" } },
        { "name": "envoy.filters.http.router", "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" } },
    ]);
    istio_hcm("outbound_0.0.0.0_8080", route_config, filters)
}

fn hcm_filter(hcm: Value) -> Value {
    json!([{ "name": "envoy.filters.network.http_connection_manager", "typed_config": hcm }])
}

/// Istio's mTLS chain: TLS 1.2–1.3, certificate `default` and roots `ROOTCA` (static secrets
/// here, SDS from the agent in a pod), any peer of the trust domain, a client certificate
/// required.
fn mtls_chain(hcm: Value) -> Value {
    json!({
        "name": "virtualInbound-catchall-http",
        "filter_chain_match": { "transport_protocol": "tls" },
        "filters": hcm_filter(hcm),
        "transport_socket": {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
                "common_tls_context": {
                    "tls_params": { "tls_minimum_protocol_version": "TLSv1_2", "tls_maximum_protocol_version": "TLSv1_3" },
                    "alpn_protocols": ["h2", "http/1.1"],
                    "tls_certificate_sds_secret_configs": [{ "name": "default" }],
                    "combined_validation_context": {
                        "default_validation_context": { "match_subject_alt_names": [{ "prefix": "spiffe://cluster.local/" }] },
                        "validation_context_sds_secret_config": { "name": "ROOTCA" },
                    },
                },
                "require_client_certificate": true,
            },
        },
    })
}

fn plaintext_chain(hcm: Value) -> Value {
    json!({
        "name": "virtualInbound-catchall-http",
        "filter_chain_match": { "transport_protocol": "raw_buffer" },
        "filters": hcm_filter(hcm),
    })
}

fn listener(name: &str, port: u16, chains: Vec<Value>) -> Value {
    json!({
        "name": name,
        "address": { "socket_address": { "address": "127.0.0.1", "port_value": port } },
        "filter_chains": chains,
        "listener_filters": [{
            "name": "envoy.filters.listener.tls_inspector",
            "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector" },
        }],
    })
}

/// PERMISSIVE: the same connection manager behind an mTLS and a plaintext chain.
fn permissive(name: &str, port: u16, hcm: Value) -> Value {
    listener(name, port, vec![mtls_chain(hcm.clone()), plaintext_chain(hcm)])
}

fn cluster(name: &str, port: u16) -> Value {
    json!({
        "name": name,
        "type": "STATIC",
        "connect_timeout": "10s",
        "load_assignment": { "cluster_name": name, "endpoints": [{ "lb_endpoints": [{ "endpoint": { "address": {
            "socket_address": { "address": "127.0.0.1", "port_value": port }
        } } }] }] },
    })
}

fn merge(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        into.extend(extra);
    }
}

pub(super) fn bootstrap(ports: &BTreeMap<&'static str, u16>, backend: u16, server: &Leaf, ca: &Ca) -> String {
    let port = |name: &str| ports[name];
    let edge = |extra: Value| {
        let mut hcm = inbound_hcm("SANITIZE", json!({ "use_remote_address": true }));
        merge(&mut hcm, extra);
        hcm
    };
    let listeners = vec![
        permissive("inbound", port("inbound"), inbound_hcm("APPEND_FORWARD", Value::Null)),
        listener("strict", port("strict"), vec![mtls_chain(inbound_hcm("APPEND_FORWARD", Value::Null))]),
        permissive("sanitize", port("sanitize"), inbound_hcm("SANITIZE", Value::Null)),
        permissive("forward_only", port("forward_only"), inbound_hcm("FORWARD_ONLY", Value::Null)),
        permissive("sanitize_set", port("sanitize_set"), inbound_hcm("SANITIZE_SET", Value::Null)),
        permissive("always_forward_only", port("always_forward_only"), inbound_hcm("ALWAYS_FORWARD_ONLY", Value::Null)),
        listener("outbound", port("outbound"), vec![plaintext_chain(outbound_hcm())]),
        // Edge shapes (an ingress gateway's): the connection's address is the client's.
        permissive("edge", port("edge"), edge(Value::Null)),
        permissive(
            "edge_internal",
            port("edge_internal"),
            edge(
                json!({ "internal_address_config": { "cidr_ranges": [{ "address_prefix": "127.0.0.0", "prefix_len": 8 }] } }),
            ),
        ),
        permissive("hops", port("hops"), edge(json!({ "xff_num_trusted_hops": 1 }))),
        permissive("hops_xff", port("hops_xff"), inbound_hcm("APPEND_FORWARD", json!({ "xff_num_trusted_hops": 1 }))),
        permissive(
            "strip",
            port("strip"),
            inbound_hcm("APPEND_FORWARD", json!({ "strip_trailing_host_dot": true, "strip_any_host_port": true })),
        ),
        permissive(
            "http10",
            port("http10"),
            inbound_hcm(
                "APPEND_FORWARD",
                json!({ "http_protocol_options": { "accept_http_10": true, "default_host_for_http_10": "app.default" } }),
            ),
        ),
        permissive(
            "xfcc_cert",
            port("xfcc_cert"),
            inbound_hcm(
                "APPEND_FORWARD",
                json!({ "set_current_client_cert_details": { "subject": true, "cert": true, "chain": true, "dns": true, "uri": true } }),
            ),
        ),
        permissive("skip_xff", port("skip_xff"), edge(json!({ "skip_xff_append": true }))),
    ];
    let clusters = vec![
        cluster(INBOUND_CLUSTER, backend),
        cluster(OUTBOUND_CLUSTER, backend),
        cluster("PassthroughCluster", backend),
    ];
    let secrets = json!([
        { "name": "default", "tls_certificate": {
            "certificate_chain": { "inline_string": server.cert_pem },
            "private_key": { "inline_string": server.key_pem },
        } },
        { "name": "ROOTCA", "validation_context": { "trusted_ca": { "inline_string": ca.pem() } } },
    ]);
    let resources = json!({ "listeners": listeners, "clusters": clusters, "secrets": secrets });
    format!(
        "node: {{ id: \"sidecar~127.0.0.1~app-1.default~default.svc.cluster.local\", cluster: app.default }}\nstatic_resources: {resources}\n"
    )
}
