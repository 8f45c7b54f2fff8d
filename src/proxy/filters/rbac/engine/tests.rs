//! The engine on requests and connections: each matcher kind, the actions, and Istio's
//! rendering of its policies.

use std::net::SocketAddr;

use serde_json::{Value, json};

use super::*;
use crate::config::filters::HttpFilterConfig;
use crate::config::filters::rbac::HttpRbac;
use crate::pb::envoy::extensions::filters::http::rbac::v3 as proto;
use crate::tls::PeerIdentity;

fn rbac(value: Value) -> std::sync::Arc<HttpRbac> {
    let (message, _) =
        crate::pb::json::from_value::<proto::Rbac>("envoy.extensions.filters.http.rbac.v3.RBAC", value).unwrap();
    let any = crate::pb::google::protobuf::Any {
        type_url: "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC".into(),
        value: prost::Message::encode_to_vec(&message),
    };
    match crate::config::convert::filters::http_filter(&any, &mut Default::default()).unwrap() {
        Some(HttpFilterConfig::Rbac(config)) => config,
        other => panic!("{other:?}"),
    }
}

/// Policies with `action` and one policy `p` of one permission and one principal.
fn policies(action: &str, permission: Value, principal: Value) -> Policies {
    let config = rbac(json!({ "rules": { "action": action, "policies": {
        "p": { "permissions": [permission], "principals": [principal] },
    } } }));
    config.rules.clone().unwrap()
}

fn connection() -> DownstreamConnection {
    DownstreamConnection {
        local_uri_san: None,
        stream: None,
        peer: "10.1.2.3:40000".parse().unwrap(),
        local: "10.0.0.1:8080".parse().unwrap(),
        server_name: None,
        tls: false,
        peer_identity: None,
    }
}

fn mtls(uri: &str) -> DownstreamConnection {
    DownstreamConnection {
        local_uri_san: None,
        tls: true,
        server_name: Some("httpbin.default.svc".into()),
        peer_identity: Some(PeerIdentity {
            uri_sans: vec![uri.to_owned()],
            dns_sans: vec!["client.test".into()],
            subject: "CN=client".into(),
            ..Default::default()
        }),
        ..connection()
    }
}

fn request(method: &str, uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut builder = http::Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(()).unwrap().into_parts().0
}

struct Case {
    parts: Option<http::request::Parts>,
    connection: DownstreamConnection,
    remote_ip: Option<IpAddr>,
    metadata: DynamicMetadata,
}

impl Case {
    fn get(path: &str) -> Self {
        Self {
            parts: Some(request("GET", path, &[])),
            connection: connection(),
            remote_ip: None,
            metadata: DynamicMetadata::default(),
        }
    }

    fn decide<'p>(&self, policies: &'p Policies) -> Decision<'p> {
        let attributes = Attributes {
            parts: self.parts.as_ref(),
            connection: &self.connection,
            remote_ip: self.remote_ip.unwrap_or(self.connection.peer.ip()),
            metadata: Some(&self.metadata),
        };
        evaluate(policies, &attributes)
    }

    fn allowed(&self, policies: &Policies) -> bool {
        self.decide(policies).allowed
    }
}

#[test]
fn allow_deny_and_log() {
    let path = json!({ "url_path": { "path": { "prefix": "/admin" } } });
    let allow = policies("ALLOW", path.clone(), json!({ "any": true }));
    let deny = policies("DENY", path.clone(), json!({ "any": true }));
    let log = policies("LOG", path, json!({ "any": true }));
    let admin = Case::get("/admin/users?x=1");
    let public = Case::get("/public");
    assert!(admin.allowed(&allow) && !public.allowed(&allow));
    assert!(!admin.allowed(&deny) && public.allowed(&deny));
    assert!(admin.allowed(&log) && public.allowed(&log));
    assert_eq!(admin.decide(&deny).matched_policy, Some("p"));
    assert_eq!(admin.decide(&deny).response_detail(), "rbac_access_denied_matched_policy[p]");
    assert_eq!(public.decide(&allow).response_detail(), "rbac_access_denied_matched_policy[none]");
    // An empty ALLOW policy set denies everything; an empty DENY set allows everything.
    let none = rbac(json!({ "rules": {} })).rules.clone().unwrap();
    assert!(!public.allowed(&none));
}

#[test]
fn the_first_matching_policy_by_name_is_the_effective_one() {
    let config = rbac(json!({ "rules": { "action": "DENY", "policies": {
        "zeta": { "permissions": [{ "any": true }], "principals": [{ "any": true }] },
        "alpha has spaces": { "permissions": [{ "any": true }], "principals": [{ "any": true }] },
    } } }));
    let decision = Case::get("/").decide(config.rules.as_ref().unwrap());
    assert_eq!(decision.matched_policy, Some("alpha has spaces"));
    assert_eq!(decision.response_detail(), "rbac_access_denied_matched_policy[alpha_has_spaces]");
}

#[test]
fn methods_headers_and_ports() {
    // Istio's `methods: [GET]` + `ports: [8080]`.
    let p = policies(
        "ALLOW",
        json!({ "and_rules": { "rules": [
            { "or_rules": { "rules": [{ "header": { "name": ":method", "exact_match": "GET" } }] } },
            { "or_rules": { "rules": [{ "destination_port": 8080 }] } },
        ] } }),
        json!({ "header": { "name": "x-team", "string_match": { "prefix": "blue" } } }),
    );
    let mut case = Case::get("/");
    assert!(!case.allowed(&p), "no x-team header");
    case.parts = Some(request("GET", "/", &[("x-team", "blue-1")]));
    assert!(case.allowed(&p));
    case.parts = Some(request("POST", "/", &[("x-team", "blue-1")]));
    assert!(!case.allowed(&p));
    case.parts = Some(request("GET", "/", &[("x-team", "blue-1")]));
    case.connection.local = "10.0.0.1:9090".parse::<SocketAddr>().unwrap();
    assert!(!case.allowed(&p));
    let range =
        policies("ALLOW", json!({ "destination_port_range": { "start": 9000, "end": 9091 } }), json!({ "any": true }));
    assert!(case.allowed(&range));
}

#[test]
fn addresses_direct_and_forwarded() {
    let direct = policies(
        "ALLOW",
        json!({ "any": true }),
        json!({ "direct_remote_ip": { "address_prefix": "10.1.0.0", "prefix_len": 16 } }),
    );
    let remote = policies(
        "ALLOW",
        json!({ "any": true }),
        json!({ "remote_ip": { "address_prefix": "192.0.2.7", "prefix_len": 32 } }),
    );
    let destination = policies(
        "ALLOW",
        json!({ "destination_ip": { "address_prefix": "10.0.0.0", "prefix_len": 24 } }),
        json!({ "any": true }),
    );
    let mut case = Case::get("/");
    assert!(case.allowed(&direct) && !case.allowed(&remote) && case.allowed(&destination));
    case.remote_ip = Some("192.0.2.7".parse().unwrap());
    assert!(case.allowed(&direct) && case.allowed(&remote));
}

#[test]
fn authenticated_principals_try_uri_then_dns_sans_then_the_subject() {
    let principal =
        |m: Value| policies("ALLOW", json!({ "any": true }), json!({ "authenticated": { "principal_name": m } }));
    // Istio's `principals: ["cluster.local/ns/default/sa/sleep"]`.
    let sleep = principal(json!({ "exact": "spiffe://cluster.local/ns/default/sa/sleep" }));
    let dns = principal(json!({ "exact": "client.test" }));
    let subject = principal(json!({ "exact": "CN=client" }));
    let any_tls = policies("ALLOW", json!({ "any": true }), json!({ "authenticated": {} }));
    let mut case = Case::get("/");
    for p in [&sleep, &dns, &subject, &any_tls] {
        assert!(!case.allowed(p), "plaintext is never authenticated");
    }
    case.connection = mtls("spiffe://cluster.local/ns/default/sa/sleep");
    for p in [&sleep, &dns, &subject, &any_tls] {
        assert!(case.allowed(p));
    }
    case.connection = mtls("spiffe://cluster.local/ns/default/sa/other");
    assert!(!case.allowed(&sleep) && case.allowed(&dns));
    // TLS without a client certificate: authenticated, with an empty subject.
    case.connection.peer_identity = None;
    assert!(case.allowed(&any_tls) && !case.allowed(&dns));
    let sni = policies("ALLOW", json!({ "requested_server_name": { "suffix": ".svc" } }), json!({ "any": true }));
    assert!(case.allowed(&sni));
}

#[test]
fn istio_peer_principal_filter_state() {
    let p = policies(
        "ALLOW",
        json!({ "any": true }),
        json!({ "filter_state": { "key": "io.istio.peer_principal", "string_match": { "safe_regex": { "regex": ".*/ns/test/.*" } } } }),
    );
    let mut case = Case::get("/");
    assert!(!case.allowed(&p));
    case.connection = mtls("spiffe://cluster.local/ns/test/sa/a");
    assert!(case.allowed(&p));
    case.connection = mtls("urn:not-spiffe/ns/test/x");
    assert!(!case.allowed(&p), "only a spiffe:// SAN is the peer principal");
}

#[test]
fn jwt_claims_from_dynamic_metadata() {
    // Istio 1.29: `request.auth.claims[groups]: [admin]`, and `request.auth.principal`
    // (`iss/sub`) as two string matchers on the payload.
    let claims = policies(
        "ALLOW",
        json!({ "any": true }),
        json!({ "metadata": {
            "filter": "envoy.filters.http.jwt_authn",
            "path": [{ "key": "payload" }, { "key": "groups" }],
            "value": { "or_match": { "value_matchers": [
                { "list_match": { "one_of": { "string_match": { "exact": "admin" } } } },
                { "string_match": { "exact": "admin" } },
            ] } },
        } }),
    );
    let principal = policies(
        "ALLOW",
        json!({ "any": true }),
        json!({ "and_ids": { "ids": [
            { "metadata": { "filter": "envoy.filters.http.jwt_authn", "path": [{ "key": "payload" }, { "key": "iss" }],
                            "value": { "string_match": { "exact": "https://issuer" } } } },
            { "metadata": { "filter": "envoy.filters.http.jwt_authn", "path": [{ "key": "payload" }, { "key": "sub" }],
                            "value": { "string_match": { "exact": "alice" } } } },
        ] } }),
    );
    let mut case = Case::get("/");
    assert!(!case.allowed(&claims) && !case.allowed(&principal), "no token, no claims");
    let payload = |v: Value| v;
    case.metadata.set(
        "envoy.filters.http.jwt_authn",
        "payload".into(),
        payload(json!({ "iss": "https://issuer", "sub": "alice", "groups": ["dev", "admin"] })),
    );
    assert!(case.allowed(&claims) && case.allowed(&principal));
    case.metadata.set(
        "envoy.filters.http.jwt_authn",
        "payload".into(),
        json!({ "iss": "https://issuer", "sub": "bob", "groups": "admin" }),
    );
    assert!(case.allowed(&claims), "a single string claim matches too");
    assert!(!case.allowed(&principal));
}

#[test]
fn value_matchers() {
    let on = |value: Value, invert: bool| {
        policies(
            "ALLOW",
            json!({ "any": true }),
            json!({ "metadata": { "filter": "ns", "path": [{ "key": "k" }], "value": value, "invert": invert } }),
        )
    };
    let mut case = Case::get("/");
    let present = on(json!({ "present_match": true }), false);
    let absent = on(json!({ "present_match": true }), true);
    let null = on(json!({ "null_match": {} }), false);
    let range = on(json!({ "double_match": { "range": { "start": 1, "end": 10 } } }), false);
    let boolean = on(json!({ "bool_match": true }), false);
    assert!(!case.allowed(&present) && case.allowed(&absent) && !case.allowed(&null));
    case.metadata.set("ns", "k".into(), json!(5));
    assert!(case.allowed(&present) && !case.allowed(&absent) && case.allowed(&range) && !case.allowed(&boolean));
    case.metadata.set("ns", "k".into(), json!(10));
    assert!(!case.allowed(&range), "the range's end is excluded");
    case.metadata.set("ns", "k".into(), Value::Null);
    assert!(case.allowed(&null));
    case.metadata.set("ns", "k".into(), json!(true));
    assert!(case.allowed(&boolean));
}

#[test]
fn a_connection_has_no_headers() {
    // The network filter matches header rules against an empty header map, as Envoy.
    let inverted = policies(
        "ALLOW",
        json!({ "header": { "name": "x", "present_match": true, "invert_match": true } }),
        json!({ "any": true }),
    );
    let path = policies("ALLOW", json!({ "url_path": { "path": { "prefix": "/" } } }), json!({ "any": true }));
    let mut case = Case::get("/");
    case.parts = None;
    assert!(case.allowed(&inverted));
    assert!(!case.allowed(&path));
}
