//! The router's decisions on route configurations written as Envoy JSON: virtual host and
//! route selection, weighted clusters, cluster headers, rewrites, redirects, direct
//! responses, timeouts, and the header mutations it applies upstream and downstream.

use std::time::Duration;

use http::request::Parts;
use http::{HeaderMap, StatusCode};
use outrider::config::RouteConfiguration;
use outrider::config::Warnings;
use outrider::config::convert::route::route_configuration;
use outrider::pb::envoy::config::route::v3 as proto;
use outrider::proxy::router::{
    DownstreamInfo, Forward, Routing, UpstreamRequestOptions, apply_request_mutations, apply_response_mutations,
    expected_timeout, route, set_attempt_headers,
};
use serde_json::{Value, json};

fn config(value: Value) -> RouteConfiguration {
    let (proto, dropped) =
        outrider::pb::json::from_value::<proto::RouteConfiguration>("envoy.config.route.v3.RouteConfiguration", value)
            .unwrap();
    assert!(dropped.is_empty(), "{dropped:?}");
    route_configuration(proto, &mut Warnings::new()).unwrap()
}

fn routes(routes: Value) -> RouteConfiguration {
    config(json!({"name": "r", "virtual_hosts": [{"name": "vh", "domains": ["*"], "routes": routes}]}))
}

fn request(method: &str, uri: &str, headers: &[(&str, &str)]) -> Parts {
    let mut builder = http::Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(()).unwrap().into_parts().0
}

fn get(uri: &str, headers: &[(&str, &str)]) -> Parts {
    request("GET", uri, headers)
}

fn forward<'a>(routing: Routing<'a>) -> Forward<'a> {
    match routing {
        Routing::Forward(f) => f,
        other => panic!("not forwarded: {other:?}"),
    }
}

/// The cluster `uri` goes to (`-` when not forwarded).
fn cluster_for(config: &RouteConfiguration, parts: &Parts) -> String {
    match route(config, parts, 0) {
        Routing::Forward(f) => f.cluster.into_owned(),
        _ => "-".into(),
    }
}

#[test]
fn virtual_host_by_authority_or_host_header() {
    let config = config(json!({"name": "r", "virtual_hosts": [
        {"name": "a", "domains": ["a.example.com"], "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "ca"}}]},
        {"name": "any", "domains": ["*"], "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "cany"}}]},
    ]}));
    // HTTP/1: the Host header.
    assert_eq!(cluster_for(&config, &get("/", &[("host", "A.example.com")])), "ca");
    // HTTP/2: the URI's authority.
    assert_eq!(cluster_for(&config, &get("https://a.example.com/x", &[])), "ca");
    assert_eq!(cluster_for(&config, &get("/", &[("host", "b.example.com")])), "cany");

    let only_a = config_without_default();
    assert_eq!(route(&only_a, &get("/", &[("host", "other")]), 0), Routing::NoRoute);
}

fn config_without_default() -> RouteConfiguration {
    config(json!({"name": "r", "virtual_hosts": [
        {"name": "a", "domains": ["a"], "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "ca"}}]},
    ]}))
}

#[test]
fn first_matching_route_wins_with_path_forms_and_case() {
    let config = routes(json!([
        {"match": {"path": "/exact"}, "route": {"cluster": "exact"}},
        {"match": {"prefix": "/API", "case_sensitive": false}, "route": {"cluster": "api"}},
        {"match": {"safe_regex": {"regex": "/v[0-9]+/.*"}}, "route": {"cluster": "regex"}},
        {"match": {"path_separated_prefix": "/sep"}, "route": {"cluster": "sep"}},
        {"match": {"prefix": "/"}, "route": {"cluster": "default"}},
    ]));
    let c = |uri: &str| cluster_for(&config, &get(uri, &[("host", "h")]));
    assert_eq!(c("/exact"), "exact");
    assert_eq!(c("/exact?q=1"), "exact");
    assert_eq!(c("/exact/more"), "default");
    assert_eq!(c("/api/users"), "api");
    assert_eq!(c("/Api/users"), "api");
    assert_eq!(c("/v2/thing"), "regex");
    assert_eq!(c("/vx/thing"), "default");
    assert_eq!(c("/sep"), "sep");
    assert_eq!(c("/sep/x"), "sep");
    assert_eq!(c("/sepx"), "default");
}

#[test]
fn no_matching_route_is_no_route() {
    let config = routes(json!([{"match": {"prefix": "/only"}, "route": {"cluster": "c"}}]));
    assert_eq!(route(&config, &get("/other", &[("host", "h")]), 0), Routing::NoRoute);
}

#[test]
fn header_query_and_grpc_matches() {
    let config = routes(json!([
        {"match": {"prefix": "/", "headers": [
            {"name": "x-canary", "string_match": {"exact": "true"}},
            {"name": ":method", "string_match": {"exact": "POST"}}]}, "route": {"cluster": "canary-post"}},
        {"match": {"prefix": "/", "headers": [{"name": "x-absent", "present_match": false},
            {"name": "x-version", "range_match": {"start": 2, "end": 4}}]}, "route": {"cluster": "v2-3"}},
        {"match": {"prefix": "/", "query_parameters": [
            {"name": "debug", "string_match": {"exact": "on off"}}]}, "route": {"cluster": "debug"}},
        {"match": {"prefix": "/", "query_parameters": [{"name": "flag", "present_match": true}]},
            "route": {"cluster": "flag"}},
        {"match": {"prefix": "/", "grpc": {}}, "route": {"cluster": "grpc"}},
        {"match": {"prefix": "/"}, "route": {"cluster": "default"}},
    ]));
    let c = |method: &str, uri: &str, headers: &[(&str, &str)]| {
        let mut all = vec![("host", "h")];
        all.extend_from_slice(headers);
        cluster_for(&config, &request(method, uri, &all))
    };
    assert_eq!(c("POST", "/", &[("x-canary", "true")]), "canary-post");
    assert_eq!(c("GET", "/", &[("x-canary", "true")]), "default");
    assert_eq!(c("GET", "/", &[("x-version", "3")]), "v2-3");
    assert_eq!(c("GET", "/", &[("x-version", "4")]), "default");
    assert_eq!(c("GET", "/", &[("x-version", "3"), ("x-absent", "1")]), "default");
    assert_eq!(c("GET", "/?debug=on%20off", &[]), "debug");
    assert_eq!(c("GET", "/?a=1&debug=on", &[]), "default");
    assert_eq!(c("GET", "/?flag", &[]), "flag");
    assert_eq!(c("POST", "/pkg.Svc/Method", &[("content-type", "application/grpc")]), "grpc");
    assert_eq!(c("POST", "/pkg.Svc/Method", &[("content-type", "application/grpc+proto")]), "grpc");
    assert_eq!(c("POST", "/pkg.Svc/Method", &[("content-type", "application/grpc-web")]), "default");
}

#[test]
fn weighted_clusters_follow_the_random_value() {
    let config = routes(json!([{"match": {"prefix": "/"}, "route": {"weighted_clusters": {"clusters": [
        {"name": "a", "weight": 10},
        {"name": "b", "weight": 30},
        {"name": "c", "weight": 60},
    ]}}}]));
    let parts = get("/", &[("host", "h")]);
    let mut counts = std::collections::BTreeMap::new();
    for random in 0..10_000u64 {
        let f = forward(route(&config, &parts, random.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        assert_eq!(
            f.weighted_cluster.map(|w| w.weight),
            Some(match f.cluster.as_ref() {
                "a" => 10,
                "b" => 30,
                _ => 60,
            })
        );
        *counts.entry(f.cluster.into_owned()).or_insert(0u32) += 1;
    }
    // Exact ranges: random % 100 in [0,10) → a, [10,40) → b, [40,100) → c.
    assert_eq!(forward(route(&config, &parts, 9)).cluster, "a");
    assert_eq!(forward(route(&config, &parts, 10)).cluster, "b");
    assert_eq!(forward(route(&config, &parts, 139)).cluster, "b");
    assert_eq!(forward(route(&config, &parts, 140)).cluster, "c");
    let share = |n: &str| f64::from(counts[n]) / 10_000.0;
    assert!((share("a") - 0.1).abs() < 0.02, "{counts:?}");
    assert!((share("b") - 0.3).abs() < 0.02, "{counts:?}");
    assert!((share("c") - 0.6).abs() < 0.02, "{counts:?}");
}

#[test]
fn cluster_header_and_missing_cluster() {
    let config = routes(json!([{"match": {"prefix": "/"},
        "route": {"cluster_header": "x-cluster", "cluster_not_found_response_code": "NOT_FOUND"}}]));
    let f = forward(route(&config, &get("/", &[("host", "h"), ("x-cluster", "chosen")]), 0));
    assert_eq!(f.cluster, "chosen");
    assert_eq!(f.cluster_not_found_status, StatusCode::NOT_FOUND);
    match route(&config, &get("/", &[("host", "h")]), 0) {
        Routing::DirectResponse { status, body, .. } => {
            assert_eq!(status, StatusCode::NOT_FOUND);
            assert!(body.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let config = routes(json!([{"match": {"prefix": "/"}, "route": {"cluster_header": "x-cluster"}}]));
    assert!(matches!(
        route(&config, &get("/", &[("host", "h")]), 0),
        Routing::DirectResponse { status: StatusCode::SERVICE_UNAVAILABLE, .. }
    ));
}

#[test]
fn direct_response() {
    let config = routes(json!([{"match": {"prefix": "/"},
        "direct_response": {"status": 418, "body": {"inline_string": "teapot"}},
        "response_headers_to_add": [{"header": {"key": "x-direct", "value": "1"}}]}]));
    match route(&config, &get("/", &[("host", "h")]), 0) {
        Routing::DirectResponse { status, body, response_headers } => {
            assert_eq!(status.as_u16(), 418);
            assert_eq!(&body[..], b"teapot");
            let mut headers = HeaderMap::new();
            apply_response_mutations(&response_headers, &mut headers, &DownstreamInfo::default(), None);
            assert_eq!(headers["x-direct"], "1");
        }
        other => panic!("{other:?}"),
    }
}

fn location(redirect: Value, uri: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let config = routes(json!([{"match": {"prefix": "/old"}, "redirect": redirect}]));
    match route(&config, &get(uri, headers), 0) {
        Routing::Redirect { status, location, .. } => (status, location),
        other => panic!("{other:?}"),
    }
}

#[test]
fn redirects_build_envoys_location() {
    let h = [("host", "example.com"), ("x-forwarded-proto", "http")];
    assert_eq!(
        location(json!({"https_redirect": true}), "/old/a?x=1", &h),
        (StatusCode::MOVED_PERMANENTLY, "https://example.com/old/a?x=1".into())
    );
    // Changing scheme drops the old scheme's default port; keeps any other.
    let with_port = [("host", "example.com:80"), ("x-forwarded-proto", "http")];
    assert_eq!(location(json!({"https_redirect": true}), "/old", &with_port).1, "https://example.com/old");
    let odd_port = [("host", "example.com:8080"), ("x-forwarded-proto", "http")];
    assert_eq!(location(json!({"https_redirect": true}), "/old", &odd_port).1, "https://example.com:8080/old");
    assert_eq!(
        location(
            json!({"host_redirect": "new.example.com", "port_redirect": 8443, "response_code": "TEMPORARY_REDIRECT"}),
            "/old?q",
            &h
        ),
        (StatusCode::TEMPORARY_REDIRECT, "http://new.example.com:8443/old?q".into())
    );
    assert_eq!(location(json!({"port_redirect": 9000}), "/old", &odd_port).1, "http://example.com:9000/old");
    assert_eq!(location(json!({"prefix_rewrite": "/new"}), "/old/a?x=1", &h).1, "http://example.com/new/a?x=1");
    assert_eq!(location(json!({"path_redirect": "/p", "strip_query": true}), "/old?x=1", &h).1, "http://example.com/p");
    assert_eq!(location(json!({"path_redirect": "/p"}), "/old?x=1", &h).1, "http://example.com/p?x=1");
    assert_eq!(
        location(json!({"path_redirect": "/p?y=2", "strip_query": true}), "/old?x=1", &h).1,
        "http://example.com/p?y=2"
    );
    assert_eq!(
        location(json!({"scheme_redirect": "https", "response_code": "PERMANENT_REDIRECT"}), "/old", &h),
        (StatusCode::PERMANENT_REDIRECT, "https://example.com/old".into())
    );
}

#[test]
fn require_tls_redirects_plain_requests() {
    let config = config(json!({"name": "r", "virtual_hosts": [{"name": "v", "domains": ["*"], "require_tls": "ALL",
        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "c"}}]}]}));
    match route(&config, &get("/a?b", &[("host", "h.com"), ("x-forwarded-proto", "http")]), 0) {
        Routing::Redirect { status, location, .. } => {
            assert_eq!(status, StatusCode::MOVED_PERMANENTLY);
            assert_eq!(location, "https://h.com/a?b");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        route(&config, &get("/", &[("host", "h"), ("x-forwarded-proto", "https")]), 0),
        Routing::Forward(_)
    ));

    let external_only = config_with_tls("EXTERNAL_ONLY");
    let internal = get("/", &[("host", "h"), ("x-forwarded-proto", "http"), ("x-envoy-internal", "true")]);
    assert!(matches!(route(&external_only, &internal, 0), Routing::Forward(_)));
    let external = get("/", &[("host", "h"), ("x-forwarded-proto", "http")]);
    assert!(matches!(route(&external_only, &external, 0), Routing::Redirect { .. }));
}

fn config_with_tls(requirement: &str) -> RouteConfiguration {
    config(json!({"name": "r", "virtual_hosts": [{"name": "v", "domains": ["*"], "require_tls": requirement,
        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "c"}}]}]}))
}

#[test]
fn timeouts_and_retry_policy_precedence() {
    let config = config(json!({"name": "r", "virtual_hosts": [{"name": "v", "domains": ["*"],
    "retry_policy": {"retry_on": "5xx", "num_retries": 4},
    "routes": [
        {"match": {"prefix": "/default"}, "route": {"cluster": "c"}},
        {"match": {"prefix": "/own"}, "route": {"cluster": "c", "timeout": "2s",
            "retry_policy": {"retry_on": "reset", "per_try_timeout": "0.5s"}}},
        {"match": {"prefix": "/off"}, "route": {"cluster": "c", "timeout": "0s"}},
        {"match": {"prefix": "/long-try"}, "route": {"cluster": "c", "timeout": "1s",
            "retry_policy": {"retry_on": "reset", "per_try_timeout": "3s"}}},
    ]}]}));
    let f = forward(route(&config, &get("/default", &[("host", "h")]), 0));
    assert_eq!(f.timeout, Some(Duration::from_secs(15)), "Envoy's default route timeout");
    assert_eq!(f.retry_policy.unwrap().num_retries, 4, "the virtual host's policy");
    assert_eq!(f.per_try_timeout, None);

    let f = forward(route(&config, &get("/own", &[("host", "h")]), 0));
    assert_eq!(f.timeout, Some(Duration::from_secs(2)));
    assert_eq!(f.per_try_timeout, Some(Duration::from_millis(500)));
    assert_eq!(f.retry_policy.unwrap().num_retries, 1, "the route's own policy, default 1 retry");
    assert_eq!(expected_timeout(&f, Duration::ZERO), Some(Duration::from_millis(500)));
    assert_eq!(expected_timeout(&f, Duration::from_millis(1800)), Some(Duration::from_millis(200)));
    assert_eq!(expected_timeout(&f, Duration::from_secs(3)), Some(Duration::from_millis(1)));

    let f = forward(route(&config, &get("/off", &[("host", "h")]), 0));
    assert_eq!(f.timeout, None);
    assert_eq!(expected_timeout(&f, Duration::ZERO), None);

    // A per-try timeout not shorter than the whole is ignored.
    let f = forward(route(&config, &get("/long-try", &[("host", "h")]), 0));
    assert_eq!(f.per_try_timeout, None);

    // Header overrides (from internal clients; external ones are stripped earlier).
    let parts = get(
        "/own",
        &[("host", "h"), ("x-envoy-upstream-rq-timeout-ms", "5000"), ("x-envoy-upstream-rq-per-try-timeout-ms", "700")],
    );
    let f = forward(route(&config, &parts, 0));
    assert_eq!(f.timeout, Some(Duration::from_secs(5)));
    assert_eq!(f.per_try_timeout, Some(Duration::from_millis(700)));
    let parts = get("/own", &[("host", "h"), ("x-envoy-upstream-rq-timeout-ms", "0")]);
    assert_eq!(forward(route(&config, &parts, 0)).timeout, None);
}

#[test]
fn grpc_timeout_header_is_honoured_when_capped() {
    let config = routes(json!([{"match": {"prefix": "/"}, "route": {"cluster": "c",
        "max_stream_duration": {"grpc_timeout_header_max": "10s"}}}]));
    let grpc = |timeout: Option<&str>| {
        let mut headers = vec![("host", "h"), ("content-type", "application/grpc")];
        headers.extend(timeout.map(|t| ("grpc-timeout", t)));
        forward(route(&config, &request("POST", "/s/m", &headers), 0)).timeout
    };
    assert_eq!(grpc(Some("3S")), Some(Duration::from_secs(3)));
    assert_eq!(grpc(Some("60S")), Some(Duration::from_secs(10)));
    assert_eq!(grpc(None), Some(Duration::from_secs(10)));
}

#[test]
fn prefix_and_host_rewrites_applied_upstream() {
    let config = routes(json!([
        {"match": {"prefix": "/api/"}, "route": {"cluster": "c", "prefix_rewrite": "/v2/",
            "host_rewrite_literal": "backend.internal", "append_x_forwarded_host": true}},
        {"match": {"path": "/exact"}, "route": {"cluster": "c", "prefix_rewrite": "/other"}},
        {"match": {"prefix": "/hdr"}, "route": {"cluster": "c", "host_rewrite_header": "x-host"}},
        {"match": {"prefix": "/auto"}, "route": {"cluster": "c", "auto_host_rewrite": true}},
    ]));
    let options = UpstreamRequestOptions::default();
    let mut parts = get("/api/users?id=1", &[("host", "front.example.com")]);
    let f = forward(route(&config, &parts, 0));
    assert_eq!(f.path_rewrite.as_deref(), Some("/v2/users?id=1"));
    assert_eq!(f.host_rewrite.as_deref(), Some("backend.internal"));
    apply_request_mutations(&f, &mut parts, &options);
    assert_eq!(parts.uri, "/v2/users?id=1");
    assert_eq!(parts.headers["host"], "backend.internal");
    assert_eq!(parts.headers["x-forwarded-host"], "front.example.com");
    assert_eq!(parts.headers["x-envoy-original-path"], "/api/users?id=1");
    assert_eq!(parts.headers["x-envoy-expected-rq-timeout-ms"], "15000");

    // HTTP/2: the authority is in the URI.
    let mut parts = get("https://front.example.com/api/x", &[]);
    let f = forward(route(&config, &parts, 0));
    apply_request_mutations(&f, &mut parts, &UpstreamRequestOptions { suppress_envoy_headers: true, ..options });
    assert_eq!(parts.uri, "https://backend.internal/v2/x");
    assert!(!parts.headers.contains_key("x-envoy-original-path"));
    assert!(!parts.headers.contains_key("x-envoy-expected-rq-timeout-ms"));

    let f = forward(route(&config, &get("/exact?q", &[("host", "h")]), 0));
    assert_eq!(f.path_rewrite.as_deref(), Some("/other?q"));

    let f = forward(route(&config, &get("/hdr", &[("host", "h"), ("x-host", "from-header")]), 0));
    assert_eq!(f.host_rewrite.as_deref(), Some("from-header"));
    let f = forward(route(&config, &get("/hdr", &[("host", "h")]), 0));
    assert_eq!(f.host_rewrite, None);
    let f = forward(route(&config, &get("/auto", &[("host", "h")]), 0));
    assert!(f.auto_host_rewrite && f.host_rewrite.is_none());
}

#[test]
fn header_mutations_in_envoys_order() {
    let levels = |most_specific: bool| {
        config(json!({"name": "r", "most_specific_header_mutations_wins": most_specific,
            "request_headers_to_add": [{"header": {"key": "x-level", "value": "config"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}],
            "response_headers_to_add": [{"header": {"key": "x-resp", "value": "config"}}],
            "response_headers_to_remove": ["x-backend-secret"],
            "virtual_hosts": [{"name": "v", "domains": ["*"],
                "request_headers_to_add": [{"header": {"key": "x-level", "value": "vhost"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}],
                "routes": [{"match": {"prefix": "/"},
                    "request_headers_to_add": [
                        {"header": {"key": "x-level", "value": "route"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"},
                        {"header": {"key": "x-client", "value": "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"}},
                        {"header": {"key": "x-once", "value": "new"}, "append_action": "ADD_IF_ABSENT"},
                        {"header": {"key": "x-multi", "value": "b"}}],
                    "request_headers_to_remove": ["x-drop"],
                    "route": {"weighted_clusters": {"clusters": [{"name": "w", "weight": 1,
                        "request_headers_to_add": [{"header": {"key": "x-level", "value": "cluster"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}]}]}}}]}]}))
    };
    let options = UpstreamRequestOptions {
        suppress_envoy_headers: false,
        downstream: DownstreamInfo {
            remote: Some("192.0.2.7:4000".parse().unwrap()),
            local: None,
            protocol: "HTTP/1.1",
        },
    };
    let run = |config: &RouteConfiguration| {
        let mut parts = get("/", &[("host", "h"), ("x-drop", "1"), ("x-once", "old"), ("x-multi", "a")]);
        let f = forward(route(config, &parts, 0));
        apply_request_mutations(&f, &mut parts, &options);
        let mut response = HeaderMap::new();
        response.insert("x-backend-secret", "s".parse().unwrap());
        apply_response_mutations(&f.headers, &mut response, &options.downstream, Some(&parts.headers));
        (parts.headers, response)
    };
    // Default: least specific (configuration) evaluated last, so it wins.
    let (headers, response) = run(&levels(false));
    assert_eq!(headers["x-level"], "config");
    assert_eq!(headers["x-client"], "192.0.2.7");
    assert_eq!(headers["x-once"], "old");
    assert!(!headers.contains_key("x-drop"));
    let multi: Vec<_> = headers.get_all("x-multi").iter().collect();
    assert_eq!(multi, ["a", "b"]);
    assert_eq!(response["x-resp"], "config");
    assert!(!response.contains_key("x-backend-secret"));
    // most_specific_header_mutations_wins: the route's.
    let (headers, _) = run(&levels(true));
    assert_eq!(headers["x-level"], "route");
}

#[test]
fn attempt_headers_when_the_virtual_host_asks() {
    let config = config(json!({"name": "r", "virtual_hosts": [{"name": "v", "domains": ["*"],
        "include_request_attempt_count": true, "include_is_timeout_retry_header": true,
        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "c", "timeout": "1s"}}]}]}));
    let mut parts = get("/", &[("host", "h")]);
    let f = forward(route(&config, &parts, 0));
    let options = UpstreamRequestOptions::default();
    apply_request_mutations(&f, &mut parts, &options);
    assert_eq!(parts.headers["x-envoy-attempt-count"], "1");
    assert!(!parts.headers.contains_key("x-envoy-is-timeout-retry"));
    set_attempt_headers(&f, &mut parts.headers, 2, Duration::from_millis(400), true, &options);
    assert_eq!(parts.headers["x-envoy-attempt-count"], "2");
    assert_eq!(parts.headers["x-envoy-is-timeout-retry"], "true");
    assert_eq!(parts.headers["x-envoy-expected-rq-timeout-ms"], "600");
}
