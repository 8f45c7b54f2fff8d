//! The request edge side by side with Envoy 1.40: one bootstrap, Istio-shaped connection
//! managers (the sidecar's inbound as istiod renders it, PERMISSIVE and STRICT, XFCC
//! `APPEND_FORWARD` with subject, DNS and URI; the outbound `0.0.0.0_<port>` one; and a few
//! variants for the fields Istio leaves at their defaults), certificates made here, one
//! recording backend. Every case is sent to Envoy and to Outrider; what the client reads and
//! the request head the backend receives are compared after normalisation
//! (`common::edge::normalise`).
//!
//! The test fails when a case differs and is not in [`KNOWN`] with its reason, and whenever
//! Outrider forwards a request that Envoy refuses, whatever [`KNOWN`] says.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::common::edge::{self, ParsedHead, Proxies, RawH2, Recorder, Response, normalise};
use crate::common::skip::{Tool, skipped};
use crate::tls_support::pki::{self, Ca, Leaf};
use crate::tls_support::{client_config, tls_connect};

// ---------------------------------------------------------------------------------------
// The configuration: Istio's fields, from tests/data/istio/sidecar-listeners.config_dump.json
// ---------------------------------------------------------------------------------------

const INBOUND_CLUSTER: &str = "inbound|80||";
const OUTBOUND_CLUSTER: &str = "outbound|8080||app.default.svc.cluster.local";
const SERVICE: &str = "app.default.svc.cluster.local";

/// Every listener of the bootstrap, by the name the cases use.
const LISTENERS: &[&str] = &[
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

fn bootstrap(ports: &BTreeMap<&'static str, u16>, backend: u16, server: &Leaf, ca: &Ca) -> String {
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

// ---------------------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------------------

/// How the client reaches the listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Client {
    Plaintext,
    /// Mutual TLS with `spiffe://cluster.local/ns/default/sa/client`.
    Mtls,
    /// TLS without a client certificate.
    TlsNoCertificate,
}

enum Request {
    /// Raw HTTP/1 bytes; read until this many responses.
    H1(String, usize),
    /// A well-formed HTTP/2 request (method, URI, headers).
    H2(&'static str, String, Vec<(String, String)>),
    /// An HTTP/2 request as raw fields, pseudo-headers among them.
    H2Raw(Vec<(String, String)>),
}

struct Case {
    name: String,
    listener: &'static str,
    client: Client,
    request: Request,
}

/// A client's identity forged in `x-forwarded-client-cert`.
const FORGED_XFCC: &str =
    "By=spiffe://cluster.local/ns/default/sa/app;URI=spiffe://cluster.local/ns/kube-system/sa/admin";

/// The control headers a client may try to set.
const ENVOY_CONTROL: &str = "x-envoy-max-retries: 3\r\nx-envoy-retry-on: 5xx\r\nx-envoy-upstream-rq-timeout-ms: 30000\r\nx-envoy-upstream-rq-per-try-timeout-ms: 30000\r\nx-envoy-retriable-status-codes: 200\r\nx-envoy-hedge-on-per-try-timeout: true\r\n";
const ENVOY_IDENTITY: &str = "x-envoy-external-address: 6.6.6.6\r\nx-envoy-internal: true\r\nx-envoy-original-path: /forged\r\nx-envoy-downstream-service-cluster: forged\r\nx-envoy-downstream-service-node: forged\r\nx-envoy-decorator-operation: forged\r\nx-envoy-force-trace: true\r\nx-envoy-ip-tags: forged\r\nx-envoy-original-dst-host: 10.0.0.1:80\r\n";

/// `GET path HTTP/1.1` with `host`, `extra` header lines and `connection: close`.
fn get(path: &str, host: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n{extra}connection: close\r\n\r\n")
}

fn strings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
}

fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut h1 = |name: &str, listener: &'static str, client: Client, text: String| {
        cases.push(Case { name: name.to_owned(), listener, client, request: Request::H1(text, 1) });
    };

    // XFCC in every mode: forged by a plaintext client, forged over mTLS, absent over mTLS.
    for (listener, mode) in [
        ("sanitize", "SANITIZE"),
        ("forward_only", "FORWARD_ONLY"),
        ("inbound", "APPEND_FORWARD"),
        ("sanitize_set", "SANITIZE_SET"),
        ("always_forward_only", "ALWAYS_FORWARD_ONLY"),
    ] {
        let forged = format!("x-forwarded-client-cert: {FORGED_XFCC}\r\n");
        h1(
            &format!("xfcc {mode}: forged, plaintext"),
            listener,
            Client::Plaintext,
            get("/", "public.example", &forged),
        );
        h1(&format!("xfcc {mode}: forged, mTLS"), listener, Client::Mtls, get("/", "public.example", &forged));
        h1(&format!("xfcc {mode}: none, mTLS"), listener, Client::Mtls, get("/", "public.example", ""));
    }
    h1(
        "xfcc APPEND_FORWARD: two forged headers, mTLS",
        "inbound",
        Client::Mtls,
        get(
            "/",
            "public.example",
            &format!("x-forwarded-client-cert: {FORGED_XFCC}\r\nx-forwarded-client-cert: URI=spiffe://x\r\n"),
        ),
    );
    h1(
        "xfcc APPEND_FORWARD with cert and chain, mTLS",
        "xfcc_cert",
        Client::Mtls,
        get("/", "public.example", &format!("x-forwarded-client-cert: {FORGED_XFCC}\r\n")),
    );
    h1(
        "xfcc APPEND_FORWARD with cert and chain, plaintext",
        "xfcc_cert",
        Client::Plaintext,
        get("/", "public.example", ""),
    );

    // Istio's inbound, PERMISSIVE and STRICT.
    h1("inbound: plaintext GET", "inbound", Client::Plaintext, get("/", "public.example", ""));
    h1("inbound: RBAC DENY on admin.example", "inbound", Client::Plaintext, get("/", "admin.example", ""));
    h1("inbound: RBAC DENY on admin.example, mTLS", "inbound", Client::Mtls, get("/", "admin.example", ""));
    h1("strict: plaintext GET", "strict", Client::Plaintext, get("/", "public.example", ""));
    h1("strict: mTLS GET", "strict", Client::Mtls, get("/", "public.example", ""));
    h1("strict: TLS without a client certificate", "strict", Client::TlsNoCertificate, get("/", "public.example", ""));

    // Upgrades.
    let upgrade = |version: &str, upgrade: &str, connection: &str, extra: &str| {
        format!(
            "GET /ws {version}\r\nhost: public.example\r\nconnection: {connection}\r\nupgrade: {upgrade}\r\n{extra}\r\n"
        )
    };
    let settings = "http2-settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n";
    h1("upgrade: websocket", "inbound", Client::Plaintext, upgrade("HTTP/1.1", "websocket", "upgrade", ""));
    h1("upgrade: websocket, mTLS", "inbound", Client::Mtls, upgrade("HTTP/1.1", "websocket", "upgrade", ""));
    h1(
        "upgrade: websocket, outbound",
        "outbound",
        Client::Plaintext,
        upgrade("HTTP/1.1", "websocket", "Upgrade", "").replace("public.example", SERVICE),
    );
    h1("upgrade: WebSocket (case)", "inbound", Client::Plaintext, upgrade("HTTP/1.1", "WebSocket", "Upgrade", ""));
    h1(
        "upgrade: h2c with HTTP2-Settings",
        "inbound",
        Client::Plaintext,
        upgrade("HTTP/1.1", "h2c", "Upgrade, HTTP2-Settings", settings),
    );
    h1(
        "upgrade: h2c, outbound",
        "outbound",
        Client::Plaintext,
        upgrade("HTTP/1.1", "h2c", "Upgrade, HTTP2-Settings", settings).replace("public.example", SERVICE),
    );
    h1(
        "upgrade: websocket, h2c with HTTP2-Settings",
        "inbound",
        Client::Plaintext,
        upgrade("HTTP/1.1", "websocket, h2c", "Upgrade, HTTP2-Settings", settings),
    );
    h1("upgrade: h2c, websocket", "inbound", Client::Plaintext, upgrade("HTTP/1.1", "h2c, websocket", "Upgrade", ""));
    h1("upgrade: foo (not configured)", "inbound", Client::Plaintext, upgrade("HTTP/1.1", "foo", "Upgrade", ""));
    h1(
        "upgrade: websocket without connection: upgrade",
        "inbound",
        Client::Plaintext,
        get("/ws", "public.example", "upgrade: websocket\r\n"),
    );
    h1("HTTP2-Settings without upgrade", "inbound", Client::Plaintext, get("/", "public.example", settings));
    h1("upgrade: websocket on HTTP/1.0", "inbound", Client::Plaintext, upgrade("HTTP/1.0", "websocket", "Upgrade", ""));
    h1(
        "upgrade: h2c on HTTP/1.0",
        "inbound",
        Client::Plaintext,
        upgrade("HTTP/1.0", "h2c", "Upgrade, HTTP2-Settings", settings),
    );
    h1(
        "upgrade: websocket on HTTP/1.0, accept_http_10",
        "http10",
        Client::Plaintext,
        upgrade("HTTP/1.0", "websocket", "Upgrade", ""),
    );
    h1(
        "upgrade: h2c on HTTP/1.0, accept_http_10",
        "http10",
        Client::Plaintext,
        upgrade("HTTP/1.0", "h2c", "Upgrade, HTTP2-Settings", settings),
    );

    // HTTP/1.0.
    h1("HTTP/1.0 with Host", "inbound", Client::Plaintext, "GET /ten HTTP/1.0\r\nhost: public.example\r\n\r\n".into());
    h1("HTTP/1.0 without Host", "inbound", Client::Plaintext, "GET /ten HTTP/1.0\r\n\r\n".into());
    h1(
        "HTTP/1.0 with Host, outbound",
        "outbound",
        Client::Plaintext,
        format!("GET /ten HTTP/1.0\r\nhost: {SERVICE}\r\n\r\n"),
    );
    h1(
        "HTTP/1.0 with Host, accept_http_10",
        "http10",
        Client::Plaintext,
        "GET /ten HTTP/1.0\r\nhost: public.example\r\n\r\n".into(),
    );
    h1(
        "HTTP/1.0 without Host, default_host_for_http_10",
        "http10",
        Client::Plaintext,
        "GET /ten HTTP/1.0\r\n\r\n".into(),
    );
    h1(
        "HTTP/1.0 keep-alive, accept_http_10",
        "http10",
        Client::Plaintext,
        "GET /ten HTTP/1.0\r\nhost: public.example\r\nconnection: keep-alive\r\n\r\n".into(),
    );
    h1(
        "HTTP/1.0 absolute-form, accept_http_10",
        "http10",
        Client::Plaintext,
        "GET http://admin.example/ten HTTP/1.0\r\n\r\n".into(),
    );

    // Absolute-form targets.
    h1(
        "absolute-form public.example, Host admin.example",
        "inbound",
        Client::Plaintext,
        get("http://public.example/x", "admin.example", ""),
    );
    h1(
        "absolute-form admin.example, Host public.example",
        "inbound",
        Client::Plaintext,
        get("http://admin.example/x", "public.example", ""),
    );
    h1(
        "absolute-form https on plaintext",
        "inbound",
        Client::Plaintext,
        get("https://public.example/x", "public.example", ""),
    );
    h1(
        "absolute-form with a port",
        "inbound",
        Client::Plaintext,
        get("http://public.example:8080/x", "admin.example", ""),
    );
    h1(
        "absolute-form with userinfo",
        "inbound",
        Client::Plaintext,
        get("http://user@public.example/x", "public.example", ""),
    );
    h1(
        "absolute-form service, Host elsewhere, outbound",
        "outbound",
        Client::Plaintext,
        get(&format!("http://{SERVICE}/x"), "elsewhere.example", ""),
    );

    // Control headers from external and internal clients.
    for (listener, who) in
        [("edge", "external"), ("edge_internal", "internal"), ("inbound", "inbound"), ("outbound", "outbound")]
    {
        let host = if listener == "outbound" { SERVICE } else { "public.example" };
        h1(&format!("x-envoy control headers, {who}"), listener, Client::Plaintext, get("/", host, ENVOY_CONTROL));
        h1(&format!("x-envoy identity headers, {who}"), listener, Client::Plaintext, get("/", host, ENVOY_IDENTITY));
    }
    h1("x-envoy control headers, inbound mTLS", "inbound", Client::Mtls, get("/", "public.example", ENVOY_CONTROL));

    // XFF chains and x-forwarded-proto.
    h1("xff: edge, none", "edge", Client::Plaintext, get("/", "public.example", ""));
    h1("xff: edge, one", "edge", Client::Plaintext, get("/", "public.example", "x-forwarded-for: 1.2.3.4\r\n"));
    h1(
        "xff: edge, two",
        "edge",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4, 5.6.7.8\r\n"),
    );
    h1(
        "xff: edge internal, two",
        "edge_internal",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4, 10.0.0.1\r\n"),
    );
    h1(
        "xff: trusted hops 1, remote, two",
        "hops",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4, 5.6.7.8\r\n"),
    );
    h1(
        "xff: trusted hops 1, from xff, two",
        "hops_xff",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4, 5.6.7.8\r\n"),
    );
    h1(
        "xff: trusted hops 1, from xff, one",
        "hops_xff",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4\r\n"),
    );
    h1(
        "xff: inbound, two",
        "inbound",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4, 5.6.7.8\r\n"),
    );
    h1(
        "xff: skip_xff_append, one",
        "skip_xff",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4\r\n"),
    );
    h1(
        "xff: two headers",
        "edge",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-for: 1.2.3.4\r\nx-forwarded-for: 5.6.7.8\r\n"),
    );
    h1(
        "x-forwarded-proto forged, edge",
        "edge",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-proto: https\r\n"),
    );
    h1(
        "x-forwarded-proto forged, inbound",
        "inbound",
        Client::Plaintext,
        get("/", "public.example", "x-forwarded-proto: https\r\n"),
    );
    h1(
        "x-forwarded-proto forged, mTLS",
        "inbound",
        Client::Mtls,
        get("/", "public.example", "x-forwarded-proto: http\r\n"),
    );

    // x-request-id.
    let id = "x-request-id: 7d2c4b8e-1111-4222-8333-944445555666\r\n";
    h1("x-request-id present, inbound", "inbound", Client::Plaintext, get("/", "public.example", id));
    h1("x-request-id absent, inbound", "inbound", Client::Plaintext, get("/", "public.example", ""));
    h1("x-request-id present, external", "edge", Client::Plaintext, get("/", "public.example", id));
    h1("x-request-id present, internal", "edge_internal", Client::Plaintext, get("/", "public.example", id));
    h1("x-request-id present, outbound", "outbound", Client::Plaintext, get("/", SERVICE, id));
    h1("x-request-id not a UUID", "inbound", Client::Plaintext, get("/", "public.example", "x-request-id: abc\r\n"));
    h1(
        "x-request-id twice",
        "inbound",
        Client::Plaintext,
        get("/", "public.example", &format!("{id}x-request-id: abc\r\n")),
    );

    // via, te and connection-specific headers on HTTP/1.1.
    h1("via on HTTP/1.1", "inbound", Client::Plaintext, get("/", "public.example", "via: 1.1 other\r\n"));
    h1(
        "te: trailers, gzip on HTTP/1.1",
        "inbound",
        Client::Plaintext,
        get("/", "public.example", "te: trailers, gzip\r\n"),
    );
    h1(
        "connection nominates a header",
        "inbound",
        Client::Plaintext,
        "GET / HTTP/1.1\r\nhost: public.example\r\nconnection: close, x-secret\r\nx-secret: v\r\n\r\n".into(),
    );
    h1(
        "keep-alive and proxy-connection on HTTP/1.1",
        "inbound",
        Client::Plaintext,
        get("/", "public.example", "keep-alive: timeout=5\r\nproxy-connection: keep-alive\r\n"),
    );

    // CONNECT and OPTIONS *.
    cases.push(Case {
        name: "CONNECT, then a request in the tunnel's bytes".into(),
        listener: "inbound",
        client: Client::Plaintext,
        request: Request::H1(
            format!(
                "CONNECT public.example:443 HTTP/1.1\r\nhost: public.example:443\r\n\r\n{}",
                get("/smuggled", "public.example", "")
            ),
            2,
        ),
    });
    cases.push(Case {
        name: "CONNECT, then a request in the tunnel's bytes, outbound".into(),
        listener: "outbound",
        client: Client::Plaintext,
        request: Request::H1(
            format!("CONNECT {SERVICE}:8080 HTTP/1.1\r\nhost: {SERVICE}:8080\r\n\r\n{}", get("/smuggled", SERVICE, "")),
            2,
        ),
    });
    let mut h1 = |name: &str, listener: &'static str, client: Client, text: String| {
        cases.push(Case { name: name.to_owned(), listener, client, request: Request::H1(text, 1) });
    };
    h1(
        "OPTIONS *",
        "inbound",
        Client::Plaintext,
        "OPTIONS * HTTP/1.1\r\nhost: public.example\r\nconnection: close\r\n\r\n".into(),
    );
    h1(
        "OPTIONS *, outbound",
        "outbound",
        Client::Plaintext,
        format!("OPTIONS * HTTP/1.1\r\nhost: {SERVICE}\r\nconnection: close\r\n\r\n"),
    );

    // Sizes and duplicates (Envoy's defaults: 60 KiB of headers, 100 headers).
    let header = |kib: usize| format!("x-big: {}\r\n", "b".repeat(kib * 1024));
    h1("a header of 59 KiB", "inbound", Client::Plaintext, get("/", "public.example", &header(59)));
    h1("a header of 61 KiB", "inbound", Client::Plaintext, get("/", "public.example", &header(61)));
    let headers = |n: usize| (0..n).map(|i| format!("x-h{i}: v\r\n")).collect::<String>();
    h1("97 headers", "inbound", Client::Plaintext, get("/", "public.example", &headers(97)));
    h1("101 headers", "inbound", Client::Plaintext, get("/", "public.example", &headers(101)));
    h1("two Host headers", "inbound", Client::Plaintext, get("/", "public.example", "host: admin.example\r\n"));
    h1(
        "two Host headers, admin first",
        "inbound",
        Client::Plaintext,
        get("/", "admin.example", "host: public.example\r\n"),
    );
    h1("a header twice", "inbound", Client::Plaintext, get("/", "public.example", "x-dup: one\r\nx-dup: two\r\n"));

    // Framing.
    let post = |extra: &str, body: &str| {
        format!("POST /p HTTP/1.1\r\nhost: public.example\r\n{extra}connection: close\r\n\r\n{body}")
    };
    h1(
        "content-length and chunked",
        "inbound",
        Client::Plaintext,
        post("content-length: 5\r\ntransfer-encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"),
    );
    h1(
        "chunked and content-length",
        "inbound",
        Client::Plaintext,
        post("transfer-encoding: chunked\r\ncontent-length: 5\r\n", "5\r\nhello\r\n0\r\n\r\n"),
    );
    h1(
        "content-length twice, equal",
        "inbound",
        Client::Plaintext,
        post("content-length: 5\r\ncontent-length: 5\r\n", "hello"),
    );
    h1(
        "content-length twice, different",
        "inbound",
        Client::Plaintext,
        post("content-length: 5\r\ncontent-length: 6\r\n", "hello!"),
    );
    h1("obs-fold header", "inbound", Client::Plaintext, get("/", "public.example", "x-folded: one\r\n two\r\n"));
    h1(
        "runs of spaces in the request line",
        "inbound",
        Client::Plaintext,
        "GET  /  HTTP/1.1\r\nhost: public.example\r\nconnection: close\r\n\r\n".into(),
    );
    h1("HTTP/1.1 without Host", "inbound", Client::Plaintext, "GET / HTTP/1.1\r\nconnection: close\r\n\r\n".into());
    h1(
        "transfer-encoding xchunked",
        "inbound",
        Client::Plaintext,
        post("transfer-encoding: xchunked\r\n", "5\r\nhello\r\n0\r\n\r\n"),
    );
    h1("POST chunked", "inbound", Client::Plaintext, post("transfer-encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"));

    // Host forms.
    h1("Host admin.example.", "inbound", Client::Plaintext, get("/", "admin.example.", ""));
    h1("Host admin.example:80", "inbound", Client::Plaintext, get("/", "admin.example:80", ""));
    h1("Host admin.example., strip_trailing_host_dot", "strip", Client::Plaintext, get("/", "admin.example.", ""));
    h1("Host admin.example:80, strip_any_host_port", "strip", Client::Plaintext, get("/", "admin.example:80", ""));
    h1("Host ADMIN.EXAMPLE", "inbound", Client::Plaintext, get("/", "ADMIN.EXAMPLE", ""));
    h1("Host with port, outbound", "outbound", Client::Plaintext, get("/", &format!("{SERVICE}:8080"), ""));
    h1("Host of another service, outbound", "outbound", Client::Plaintext, get("/", "elsewhere.example", ""));

    // Paths (normalize_path, escaped slashes kept).
    h1("path with ..", "inbound", Client::Plaintext, get("/a/../admin", "public.example", ""));
    h1("path with %2e%2e", "inbound", Client::Plaintext, get("/a/%2e%2e/b", "public.example", ""));
    h1("path with %2F", "inbound", Client::Plaintext, get("/a%2Fb", "public.example", ""));
    h1("path with //", "inbound", Client::Plaintext, get("/a//b", "public.example", ""));

    // HTTP/2.
    let h2 = |name: &str, listener: &'static str, client: Client, uri: &str, headers: &[(&str, &str)]| Case {
        name: name.to_owned(),
        listener,
        client,
        request: Request::H2("GET", uri.to_owned(), strings(headers)),
    };
    let raw = |name: &str, listener: &'static str, fields: &[(&str, &str)]| Case {
        name: name.to_owned(),
        listener,
        client: Client::Plaintext,
        request: Request::H2Raw(strings(fields)),
    };
    let get2 = |extra: &[(&'static str, &'static str)]| {
        let mut fields =
            vec![(":method", "GET"), (":scheme", "http"), (":authority", "public.example"), (":path", "/")];
        fields.extend_from_slice(extra);
        fields
    };
    cases.extend([
        h2("h2: GET", "inbound", Client::Plaintext, "http://public.example/", &[]),
        h2("h2: GET, mTLS", "inbound", Client::Mtls, "https://public.example/", &[]),
        h2(
            "h2: xfcc forged, mTLS",
            "inbound",
            Client::Mtls,
            "https://public.example/",
            &[("x-forwarded-client-cert", FORGED_XFCC)],
        ),
        h2(
            "h2: xfcc forged, SANITIZE_SET, mTLS",
            "sanitize_set",
            Client::Mtls,
            "https://public.example/",
            &[("x-forwarded-client-cert", FORGED_XFCC)],
        ),
        h2(
            "h2: :authority public.example, host admin.example",
            "inbound",
            Client::Plaintext,
            "http://public.example/",
            &[("host", "admin.example")],
        ),
        h2(
            "h2: :authority admin.example, host public.example",
            "inbound",
            Client::Plaintext,
            "http://admin.example/",
            &[("host", "public.example")],
        ),
        h2("h2: :authority admin.example", "inbound", Client::Plaintext, "http://admin.example/", &[]),
        h2(
            "h2: :authority public.example, host admin.example, mTLS",
            "inbound",
            Client::Mtls,
            "https://public.example/",
            &[("host", "admin.example")],
        ),
        h2("h2: via", "inbound", Client::Plaintext, "http://public.example/", &[("via", "2 other")]),
        h2("h2: te: trailers", "inbound", Client::Plaintext, "http://public.example/", &[("te", "trailers")]),
        h2(
            "h2: x-envoy control headers, external",
            "edge",
            Client::Plaintext,
            "http://public.example/",
            &[("x-envoy-max-retries", "3"), ("x-envoy-retry-on", "5xx")],
        ),
        h2("h2: x-request-id absent", "inbound", Client::Plaintext, "http://public.example/", &[]),
        h2("h2: a header of 61 KiB", "inbound", Client::Plaintext, "http://public.example/", &[]),
        raw(
            "h2 raw: host without :authority",
            "inbound",
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("host", "admin.example")],
        ),
        raw("h2 raw: te: gzip", "inbound", &get2(&[("te", "gzip")])),
        raw("h2 raw: connection: keep-alive", "inbound", &get2(&[("connection", "keep-alive")])),
        raw("h2 raw: keep-alive", "inbound", &get2(&[("keep-alive", "timeout=5")])),
        raw("h2 raw: proxy-connection", "inbound", &get2(&[("proxy-connection", "keep-alive")])),
        raw("h2 raw: transfer-encoding: chunked", "inbound", &get2(&[("transfer-encoding", "chunked")])),
        raw("h2 raw: upgrade: websocket", "inbound", &get2(&[("upgrade", "websocket")])),
        raw("h2 raw: two :authority", "inbound", &get2(&[(":authority", "admin.example")])),
        raw("h2 raw: CONNECT", "inbound", &[(":method", "CONNECT"), (":authority", "public.example:443")]),
        raw("h2 raw: uppercase header name", "inbound", &get2(&[("X-Upper", "v")])),
    ]);
    // The 61 KiB header on HTTP/2, added here to keep the table above readable.
    if let Some(case) = cases.iter_mut().find(|c| c.name == "h2: a header of 61 KiB")
        && let Request::H2(_, _, headers) = &mut case.request
    {
        headers.push(("x-big".into(), "b".repeat(61 * 1024)));
    }
    cases
}

// ---------------------------------------------------------------------------------------
// Known differences
// ---------------------------------------------------------------------------------------

/// Why a case may differ from Envoy today.
#[derive(Debug, Clone, Copy)]
enum Known {
    /// A difference in Outrider that a fix under way changes: remove the entry once the case
    /// agrees.
    Fixing(&'static str),
    /// A difference in Outrider that nothing fixes yet (docs/edge.md lists it): a bug to file.
    Open(&'static str),
    /// A difference accepted for the reason given (docs/edge.md lists it too).
    Reason(&'static str),
}

const XFCC: Known = Known::Fixing(
    "XFCC: Outrider forwards the client's x-forwarded-client-cert whatever the mode and appends nothing over mTLS",
);
const UPGRADE: Known =
    Known::Fixing("upgrades: only the first Upgrade token is checked and h2c/HTTP2-Settings are forwarded");
const CONNECT: Known = Known::Fixing(
    "CONNECT: without a CONNECT config Envoy answers 404 and closes; Outrider keeps the connection and serves the tunnel's bytes as a request",
);
const HTTP10: Known = Known::Fixing(
    "HTTP/1.0: accept_http_10 and default_host_for_http_10 are not read; Envoy also says `connection: close`",
);
const AUTHORITY: Known = Known::Fixing(
    "one authority: the upstream gets the client's Host (not the absolute-form target's or :authority), strip_* options are not read",
);
const TRUST: Known = Known::Fixing(
    "trust of control headers: a loopback client is internal without internal_address_config; XFF appended as `, 127.0.0.1`",
);
const FRAMING: Known = Known::Fixing(
    "framing: Content-Length with Transfer-Encoding and repeated Content-Length are forwarded; errors lack Envoy's body",
);
const H2_MALFORMED: Known = Known::Reason(
    "a malformed HTTP/2 request (RFC 9113 §8.2.2): Outrider resets the stream (PROTOCOL_ERROR), Envoy closes the connection (no GOAWAY); both refuse it and nothing reaches the upstream",
);
const SERVICE_TIME_ON_101: Known =
    Known::Open("Outrider adds x-envoy-upstream-service-time to a 101 response; Envoy adds it to none");
const LOCAL_REPLY_431: Known = Known::Open(
    "431 from the HTTP/1 codec: Envoy's local reply has a body (`Request Header Fields Too Large`), content-type and server; Outrider's has none",
);

/// Cases that may differ, by name, each with its reason. A case listed here that Envoy
/// refuses and Outrider forwards still fails the test.
const KNOWN: &[(&str, Known)] = &[
    ("xfcc SANITIZE: forged, plaintext", XFCC),
    ("xfcc SANITIZE: forged, mTLS", XFCC),
    ("xfcc FORWARD_ONLY: forged, plaintext", XFCC),
    ("xfcc APPEND_FORWARD: forged, plaintext", XFCC),
    ("xfcc APPEND_FORWARD: forged, mTLS", XFCC),
    ("xfcc APPEND_FORWARD: none, mTLS", XFCC),
    ("xfcc SANITIZE_SET: forged, plaintext", XFCC),
    ("xfcc SANITIZE_SET: forged, mTLS", XFCC),
    ("xfcc SANITIZE_SET: none, mTLS", XFCC),
    ("xfcc APPEND_FORWARD: two forged headers, mTLS", XFCC),
    ("xfcc APPEND_FORWARD with cert and chain, mTLS", XFCC),
    ("strict: mTLS GET", XFCC),
    ("upgrade: websocket, mTLS", XFCC),
    ("x-envoy control headers, inbound mTLS", XFCC),
    ("x-forwarded-proto forged, mTLS", XFCC),
    ("h2: GET, mTLS", XFCC),
    ("h2: xfcc forged, mTLS", XFCC),
    ("h2: xfcc forged, SANITIZE_SET, mTLS", XFCC),
    ("h2: :authority public.example, host admin.example, mTLS", XFCC),
    ("upgrade: websocket, h2c with HTTP2-Settings", UPGRADE),
    ("upgrade: h2c, websocket", UPGRADE),
    ("upgrade: h2c on HTTP/1.0, accept_http_10", UPGRADE),
    (
        "upgrade: foo (not configured)",
        Known::Fixing("upgrades: Envoy closes the connection after refusing an upgrade (`connection: close`)"),
    ),
    ("upgrade: websocket", SERVICE_TIME_ON_101),
    ("upgrade: websocket, outbound", SERVICE_TIME_ON_101),
    ("upgrade: WebSocket (case)", SERVICE_TIME_ON_101),
    ("CONNECT, then a request in the tunnel's bytes", CONNECT),
    ("CONNECT, then a request in the tunnel's bytes, outbound", CONNECT),
    ("upgrade: websocket on HTTP/1.0", HTTP10),
    ("upgrade: h2c on HTTP/1.0", HTTP10),
    (
        "upgrade: websocket on HTTP/1.0, accept_http_10",
        Known::Fixing("HTTP/1.0: Outrider's 101 to an HTTP/1.0 client lacks `connection: upgrade` and `upgrade`"),
    ),
    ("HTTP/1.0 with Host", HTTP10),
    ("HTTP/1.0 without Host", HTTP10),
    ("HTTP/1.0 with Host, outbound", HTTP10),
    ("HTTP/1.0 with Host, accept_http_10", HTTP10),
    ("HTTP/1.0 without Host, default_host_for_http_10", HTTP10),
    ("HTTP/1.0 absolute-form, accept_http_10", HTTP10),
    ("absolute-form public.example, Host admin.example", AUTHORITY),
    ("absolute-form with a port", AUTHORITY),
    ("absolute-form service, Host elsewhere, outbound", AUTHORITY),
    ("h2: :authority public.example, host admin.example", AUTHORITY),
    ("Host admin.example., strip_trailing_host_dot", AUTHORITY),
    ("Host admin.example:80, strip_any_host_port", AUTHORITY),
    (
        "two Host headers",
        Known::Open(
            "two Host headers: Envoy joins them into one (`a,b`: the upstream sees what routing and RBAC saw); Outrider forwards both, so an application reading the first may see an authority the filters did not",
        ),
    ),
    (
        "two Host headers, admin first",
        Known::Open(
            "two Host headers: Envoy joins them into one (`a,b`: the upstream sees what routing and RBAC saw); Outrider forwards both, so an application reading the first may see an authority the filters did not",
        ),
    ),
    ("x-envoy control headers, external", TRUST),
    ("x-envoy identity headers, external", TRUST),
    ("x-envoy control headers, internal", TRUST),
    ("x-envoy identity headers, internal", TRUST),
    ("h2: x-envoy control headers, external", TRUST),
    ("xff: edge, none", TRUST),
    ("xff: edge, one", TRUST),
    ("xff: edge, two", TRUST),
    ("xff: edge internal, two", TRUST),
    ("xff: trusted hops 1, remote, two", TRUST),
    ("xff: two headers", TRUST),
    ("x-forwarded-proto forged, edge", TRUST),
    ("x-request-id present, external", TRUST),
    ("x-request-id present, internal", TRUST),
    (
        "x-request-id twice",
        Known::Open("two x-request-id headers: Envoy replaces them with one it generates; Outrider forwards both"),
    ),
    (
        "connection nominates a header",
        Known::Open("a header named in `connection` (RFC 9110 §7.6.1) is removed by Envoy, forwarded by Outrider"),
    ),
    (
        "OPTIONS *",
        Known::Open("`OPTIONS *`: Envoy finds no route (404), Outrider refuses the target (400); neither forwards it"),
    ),
    (
        "OPTIONS *, outbound",
        Known::Open("`OPTIONS *`: Envoy finds no route (404), Outrider refuses the target (400); neither forwards it"),
    ),
    ("a header of 61 KiB", LOCAL_REPLY_431),
    ("101 headers", LOCAL_REPLY_431),
    ("content-length and chunked", FRAMING),
    ("chunked and content-length", FRAMING),
    ("content-length twice, equal", FRAMING),
    ("content-length twice, different", FRAMING),
    (
        "obs-fold header",
        Known::Fixing(
            "framing: Envoy accepts an obs-fold continuation and joins it with a space; Outrider answers 400",
        ),
    ),
    (
        "runs of spaces in the request line",
        Known::Fixing("framing: Envoy accepts runs of spaces in the request line; Outrider answers 400"),
    ),
    (
        "HTTP/1.1 without Host",
        Known::Open(
            "HTTP/1.1 without Host (RFC 9112 §3.2): Envoy answers 400; Outrider forwards it with the endpoint's address as Host",
        ),
    ),
    (
        "transfer-encoding xchunked",
        Known::Fixing("framing: an unknown transfer coding gets Envoy's 501, Outrider's 400"),
    ),
    (
        "h2: a header of 61 KiB",
        Known::Reason(
            "headers over max_request_headers_kb on HTTP/2: Envoy resets the stream, Outrider answers 431; both refuse it",
        ),
    ),
    ("h2 raw: te: gzip", H2_MALFORMED),
    ("h2 raw: connection: keep-alive", H2_MALFORMED),
    ("h2 raw: keep-alive", H2_MALFORMED),
    ("h2 raw: proxy-connection", H2_MALFORMED),
    ("h2 raw: transfer-encoding: chunked", H2_MALFORMED),
    ("h2 raw: upgrade: websocket", H2_MALFORMED),
    ("h2 raw: two :authority", H2_MALFORMED),
    (
        "h2 raw: uppercase header name",
        Known::Reason(
            "an upper-case HTTP/2 field name (RFC 9113 §8.2.1): Outrider ends the connection with GOAWAY PROTOCOL_ERROR, Envoy closes it without one; both refuse it",
        ),
    ),
];

fn known(name: &str) -> Option<Known> {
    KNOWN.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
}

// ---------------------------------------------------------------------------------------
// Running a case
// ---------------------------------------------------------------------------------------

trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

struct Identities {
    ca: Ca,
    client: Leaf,
}

/// A connection to `port` as `client`, offering `alpn` over TLS; `Err` when the handshake
/// failed.
async fn connect(port: u16, client: Client, alpn: &str, ids: &Identities) -> Result<Box<dyn Io>, String> {
    let identity = match client {
        Client::Plaintext => return Ok(Box::new(TcpStream::connect(("127.0.0.1", port)).await.unwrap())),
        Client::Mtls => Some(&ids.client),
        Client::TlsNoCertificate => None,
    };
    match tls_connect(port, client_config(&ids.ca, identity, &[alpn])).await {
        Ok(stream) => Ok(Box::new(stream)),
        Err(_) => Err("TLS handshake failed".to_owned()),
    }
}

/// What one proxy did with one case: what the client read, and the request heads the
/// backend received (normalised).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    client: Vec<String>,
    upstream: Vec<String>,
}

impl Outcome {
    /// The statuses the client read, for the table.
    fn summary(&self) -> String {
        let client =
            self.client.iter().map(|c| c.split(" | ").next().unwrap_or_default()).collect::<Vec<_>>().join(",");
        let client = if client.is_empty() { "-".to_owned() } else { client };
        format!("{client} (upstream {})", self.upstream.len())
    }
}

fn render_response(response: &Response, sent: &[(String, String)]) -> String {
    let mut body = response.body.clone();
    body.truncate(120);
    format!("{} | {} | body {:?}", response.status, normalise(&response.headers, sent).join("; "), body)
}

/// The headers a case sends, for [`normalise`].
fn sent_headers(request: &Request) -> Vec<(String, String)> {
    match request {
        Request::H1(text, _) => ParsedHead::parse(text.split("\r\n\r\n").next().unwrap_or_default()).headers,
        Request::H2(_, _, headers) | Request::H2Raw(headers) => headers.clone(),
    }
}

async fn run(case: &Case, port: u16, ids: &Identities, backend: &Recorder) -> Outcome {
    backend.take();
    let alpn = match case.request {
        Request::H1(..) => "http/1.1",
        _ => "h2",
    };
    let sent = sent_headers(&case.request);
    let client = match connect(port, case.client, alpn, ids).await {
        Err(error) => vec![error],
        Ok(io) => match &case.request {
            Request::H1(text, answers) => edge::h1_exchange(io, text.as_bytes(), *answers)
                .await
                .iter()
                .map(|r| render_response(r, &sent))
                .collect(),
            Request::H2(method, uri, headers) => {
                let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                match edge::h2_request(io, method, uri, &headers).await {
                    Ok(response) => vec![render_response(&response, &sent)],
                    Err(error) => vec![error],
                }
            }
            Request::H2Raw(fields) => {
                let fields: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                vec![match edge::h2_raw(io, &fields).await {
                    RawH2::Status(status) => status.to_string(),
                    other => other.to_string(),
                }]
            }
        },
    };
    let upstream = backend
        .take()
        .iter()
        .map(|head| {
            let head = ParsedHead::parse(head);
            format!("{} | {}", head.start, normalise(&head.headers, &sent).join("; "))
        })
        .collect();
    Outcome { client, upstream }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_edge_agrees_with_envoy() {
    let ca = Ca::new("cluster.local root");
    let server = ca.leaf(&pki::spiffe("app"));
    let ids = Identities { client: ca.leaf(&pki::spiffe("client")), ca };
    let (backend_port, backend) = edge::recording_backend().await;
    let Some(proxies) = Proxies::start(LISTENERS, |ports| bootstrap(ports, backend_port, &server, &ids.ca)).await
    else {
        skipped(Tool::Envoy, "the request edge corpus", "envoy not found");
        return;
    };
    let cases = corpus();
    let mut agreements = 0;
    let mut unexplained = Vec::new();
    let mut laxer = Vec::new();
    let mut details = Vec::new();
    let mut differing = Vec::new();
    println!("{:<58} | {:<10} | {:<28} | {:<28} | verdict", "case", "listener", "envoy", "outrider");
    for case in &cases {
        let (envoy_port, outrider_port) = proxies.ports[case.listener];
        let envoy = run(case, envoy_port, &ids, &backend).await;
        let outrider = run(case, outrider_port, &ids, &backend).await;
        let verdict = if envoy == outrider {
            agreements += 1;
            "agree".to_owned()
        } else {
            details.push(format!("{}\n  envoy:    {:?}\n  outrider: {:?}", case.name, envoy, outrider));
            differing.push((case.name.clone(), case.listener, envoy.summary(), outrider.summary()));
            match known(&case.name) {
                Some(Known::Fixing(why)) => format!("differs, being fixed: {why}"),
                Some(Known::Open(why)) => format!("differs, open: {why}"),
                Some(Known::Reason(why)) => format!("differs, accepted: {why}"),
                None => {
                    unexplained.push(case.name.clone());
                    "DIFFERS (not in KNOWN)".to_owned()
                }
            }
        };
        if envoy.upstream.is_empty() && !outrider.upstream.is_empty() {
            laxer.push(format!("{}: {:?}", case.name, outrider.upstream));
        }
        println!(
            "{:<58} | {:<10} | {:<28} | {:<28} | {verdict}",
            case.name,
            case.listener,
            envoy.summary(),
            outrider.summary()
        );
    }
    println!("\nthe request edge agrees with Envoy 1.40 on {agreements} of {} cases\n", cases.len());
    for detail in &details {
        println!("{detail}\n");
    }
    // The differences as docs/edge.md lists them.
    println!("| case | listener | Envoy | Outrider | kind | reason |\n| --- | --- | --- | --- | --- | --- |");
    for (name, listener, envoy, outrider) in &differing {
        let (kind, why) = match known(name) {
            Some(Known::Fixing(why)) => ("being fixed", why),
            Some(Known::Open(why)) => ("open", why),
            Some(Known::Reason(why)) => ("accepted", why),
            None => ("not listed", ""),
        };
        println!("| {name} | `{listener}` | {envoy} | {outrider} | {kind} | {why} |");
    }
    let stale: Vec<_> = KNOWN.iter().filter(|(name, _)| !cases.iter().any(|c| c.name == *name)).collect();
    assert!(stale.is_empty(), "KNOWN names cases that do not exist: {stale:?}");
    assert!(cases.len() >= 80, "{} cases", cases.len());
    assert!(laxer.is_empty(), "Outrider forwarded what Envoy refused:\n{}", laxer.join("\n"));
    assert!(unexplained.is_empty(), "differences not in KNOWN:\n{}", unexplained.join("\n"));
    proxies.outrider.stop();
}
