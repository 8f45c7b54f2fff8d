//! Envoy resources for the TLS tests, written as JSON (which YAML reads as it is).

use serde_json::{Value, json};

use super::pki::{Ca, Leaf};

/// Istio's names: the workload certificate and the trusted roots.
pub const CERTIFICATE: &str = "default";
pub const ROOTS: &str = "ROOTCA";

pub fn certificate_secret(leaf: &Leaf) -> String {
    json!({
        "name": CERTIFICATE,
        "tls_certificate": {
            "certificate_chain": { "inline_string": leaf.cert_pem },
            "private_key": { "inline_string": leaf.key_pem },
        },
    })
    .to_string()
}

pub fn roots_secret(ca: &Ca) -> String {
    json!({ "name": ROOTS, "validation_context": { "trusted_ca": { "inline_string": ca.pem() } } }).to_string()
}

/// A secret delivered on the ADS stream; waited for without limit, as Istio does.
fn sds(name: &str) -> Value {
    json!({ "name": name, "sds_config": { "ads": {}, "resource_api_version": "V3", "initial_fetch_timeout": "0s" } })
}

/// Istio's common TLS context: certificate and roots by SDS, peers checked against
/// `san` (a `StringMatcher` on any SAN, as Istio writes it).
pub fn common_tls(alpn: &[&str], san: Value) -> Value {
    json!({
        "alpn_protocols": alpn,
        "tls_certificate_sds_secret_configs": [sds(CERTIFICATE)],
        "combined_validation_context": {
            "default_validation_context": { "match_subject_alt_names": [san] },
            "validation_context_sds_secret_config": sds(ROOTS),
        },
    })
}

pub fn downstream_tls(common: Value, require_client_certificate: bool) -> Value {
    json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
            "common_tls_context": common,
            "require_client_certificate": require_client_certificate,
        },
    })
}

pub fn upstream_tls(common: Value, sni: &str) -> Value {
    json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "common_tls_context": common,
            "sni": sni,
        },
    })
}

/// An HTTP connection manager routing everything to `cluster`.
pub fn hcm(cluster: &str) -> Value {
    hcm_with(cluster, Value::Null)
}

/// [`hcm`] that trusts only its own view of the connection (`use_remote_address`), so
/// `x-forwarded-proto` says whether the connection to it was TLS.
pub fn hcm_edge(cluster: &str) -> Value {
    hcm_with(cluster, json!({ "use_remote_address": true }))
}

fn hcm_with(cluster: &str, extra: Value) -> Value {
    let mut filters = json!([{
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": "http",
            "route_config": {
                "name": "local",
                "virtual_hosts": [{
                    "name": "all",
                    "domains": ["*"],
                    "routes": [{ "match": { "prefix": "/" }, "route": { "cluster": cluster } }],
                }],
            },
            "http_filters": [{
                "name": "envoy.filters.http.router",
                "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" },
            }],
        },
    }]);
    merge(&mut filters[0]["typed_config"], extra);
    filters
}

pub fn tcp_proxy(cluster: &str) -> Value {
    json!([{
        "name": "envoy.filters.network.tcp_proxy",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
            "stat_prefix": "tcp",
            "cluster": cluster,
        },
    }])
}

/// A filter chain; `transport` is a transport socket or `null`.
pub fn chain(name: &str, filter_chain_match: Value, transport: Value, filters: Value) -> Value {
    let mut chain = json!({ "name": name, "filter_chain_match": filter_chain_match, "filters": filters });
    if !transport.is_null() {
        chain["transport_socket"] = transport;
    }
    chain
}

/// A listener on 127.0.0.1:`port`, with the TLS inspector when `inspector` is set.
pub fn listener(name: &str, port: u16, inspector: bool, chains: Vec<Value>, extra: Value) -> String {
    let mut listener = json!({
        "name": name,
        "address": { "socket_address": { "address": "127.0.0.1", "port_value": port } },
        "filter_chains": chains,
    });
    if inspector {
        listener["listener_filters"] = json!([{
            "name": "envoy.filters.listener.tls_inspector",
            "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector" },
        }]);
    }
    merge(&mut listener, extra);
    listener.to_string()
}

/// How a cluster speaks HTTP to its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Http {
    Http1,
    Http2,
    /// Whatever the downstream request used.
    Downstream,
}

/// A STATIC cluster of one loopback endpoint.
pub fn cluster(name: &str, port: u16, http: Http, transport: Value, extra: Value) -> String {
    let mut options = json!({
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
    });
    match http {
        Http::Http1 => options["explicit_http_config"] = json!({ "http_protocol_options": {} }),
        Http::Http2 => options["explicit_http_config"] = json!({ "http2_protocol_options": {} }),
        Http::Downstream => {
            options["use_downstream_protocol_config"] =
                json!({ "http_protocol_options": {}, "http2_protocol_options": {} })
        }
    }
    let mut cluster = json!({
        "name": name,
        "type": "STATIC",
        "connect_timeout": "5s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{ "lb_endpoints": [{ "endpoint": { "address": {
                "socket_address": { "address": "127.0.0.1", "port_value": port }
            } } }] }],
        },
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": options,
        },
    });
    if !transport.is_null() {
        cluster["transport_socket"] = transport;
    }
    merge(&mut cluster, extra);
    cluster.to_string()
}

/// Adds the fields of `extra` (an object, or null) to `into`, replacing any already there.
fn merge(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        into.extend(extra);
    }
}
