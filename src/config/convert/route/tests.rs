use std::time::Duration;

use serde_json::{Value, json};

use super::route_configuration;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::route::{
    Action, ClusterSpecifier, DomainMatcher, HashSource, HeaderAppendAction, PathMatch, RetryOn, RouteAction,
    RouteConfiguration,
};
use crate::pb::envoy::config::route::v3 as proto;

fn convert(value: Value) -> Result<RouteConfiguration> {
    let (proto, dropped) =
        crate::pb::json::from_value::<proto::RouteConfiguration>("envoy.config.route.v3.RouteConfiguration", value)
            .unwrap();
    assert!(dropped.is_empty(), "{dropped:?}");
    route_configuration(proto, &mut Warnings::new())
}

/// A configuration with one virtual host (`*`) holding `routes`.
fn with_routes(routes: Value) -> Result<RouteConfiguration> {
    convert(json!({"name": "r", "virtual_hosts": [{"name": "vh", "domains": ["*"], "routes": routes}]}))
}

fn one_route(route: Value) -> Result<RouteConfiguration> {
    with_routes(json!([route]))
}

fn action_of(config: &RouteConfiguration) -> &RouteAction {
    match &config.virtual_hosts[0].routes[0].action {
        Action::Route(action) => action,
        other => panic!("not a route action: {other:?}"),
    }
}

fn error(result: Result<RouteConfiguration>) -> ConfigError {
    result.err().unwrap()
}

#[test]
fn domain_forms_and_precedence() {
    assert_eq!(DomainMatcher::parse("Foo.COM"), DomainMatcher::Exact("foo.com".into()));
    assert_eq!(DomainMatcher::parse("*.foo.com"), DomainMatcher::Suffix(".foo.com".into()));
    assert_eq!(DomainMatcher::parse("foo.*"), DomainMatcher::Prefix("foo.".into()));
    assert_eq!(DomainMatcher::parse("*"), DomainMatcher::Any);
    // The wildcard stands for at least one character.
    assert!(!DomainMatcher::parse("*.foo.com").matches(".foo.com"));
    assert!(DomainMatcher::parse("*-bar.foo.com").matches("x-bar.foo.com"));

    let config = convert(json!({"name": "r", "ignore_port_in_host_matching": true, "virtual_hosts": [
        {"name": "any", "domains": ["*"], "routes": []},
        {"name": "prefix", "domains": ["api.*"], "routes": []},
        {"name": "short-suffix", "domains": ["*.com"], "routes": []},
        {"name": "suffix", "domains": ["*.example.com"], "routes": []},
        {"name": "exact", "domains": ["api.example.com"], "routes": []},
    ]}))
    .unwrap();
    let vhost = |host: &str| config.find_virtual_host(host).map(|v| v.name.as_str());
    assert_eq!(vhost("API.example.com:8080"), Some("exact"));
    assert_eq!(vhost("www.example.com"), Some("suffix"));
    assert_eq!(vhost("api.example.org"), Some("prefix"));
    assert_eq!(vhost("other.com"), Some("short-suffix"));
    assert_eq!(vhost("localhost"), Some("any"));
}

#[test]
fn duplicate_domains_are_rejected_with_path() {
    let err = error(convert(json!({"name": "r", "virtual_hosts": [
        {"name": "a", "domains": ["a.com", "*"], "routes": []},
        {"name": "b", "domains": ["b.com", "A.com"], "routes": []},
    ]})));
    assert_eq!(err.path(), "virtual_hosts[1].domains[1]");
}

#[test]
fn each_path_match_kind() {
    let config = with_routes(json!([
        {"match": {"prefix": "/api"}, "route": {"cluster": "c"}},
        {"match": {"path": "/exact"}, "route": {"cluster": "c"}},
        {"match": {"safe_regex": {"regex": "/v[0-9]+/.*"}}, "route": {"cluster": "c"}},
        {"match": {"path_separated_prefix": "/sep"}, "route": {"cluster": "c"}},
        {"match": {"connect_matcher": {}}, "route": {"cluster": "c"}},
        {"match": {"prefix": "/UP", "case_sensitive": false}, "route": {"cluster": "c"}},
    ]))
    .unwrap();
    let routes = &config.virtual_hosts[0].routes;
    let matches = |i: usize, path: &str| {
        let m = &routes[i].route_match;
        m.path.matches(path, m.case_sensitive, false)
    };
    assert!(matches(0, "/api/x") && matches(0, "/apix") && !matches(0, "/ap"));
    assert!(matches(1, "/exact?q=1") && !matches(1, "/exact/"));
    assert!(matches(2, "/v12/x") && !matches(2, "/x/v1/y"));
    assert!(matches(3, "/sep") && matches(3, "/sep/x") && !matches(3, "/sepx"));
    assert_eq!(routes[4].route_match.path, PathMatch::Connect);
    assert!(routes[4].route_match.path.matches("/", true, true) && !matches(4, "/"));
    assert!(matches(5, "/up/x") && matches(5, "/Up"));
    assert!(routes[0].route_match.case_sensitive && !routes[5].route_match.case_sensitive);

    let err = error(one_route(json!({"match": {"path_separated_prefix": "/x/"}, "route": {"cluster": "c"}})));
    assert_eq!(err.path(), "virtual_hosts[0].routes[0].match.path_separated_prefix");
}

#[test]
fn invalid_regex_is_rejected_with_path() {
    let err = error(one_route(json!({"match": {"safe_regex": {"regex": "(unclosed"}}, "route": {"cluster": "c"}})));
    assert_eq!(err.path(), "virtual_hosts[0].routes[0].match.safe_regex.regex");
    let err = error(one_route(json!({"match": {"prefix": "/", "headers": [
        {"name": "x", "string_match": {"safe_regex": {"regex": "a{2,1}"}}}
    ]}, "route": {"cluster": "c"}})));
    assert_eq!(err.path(), "virtual_hosts[0].routes[0].match.headers[0].string_match.safe_regex.regex");
}

#[test]
fn header_and_query_matchers() {
    let config = one_route(json!({"match": {"prefix": "/", "grpc": {}, "headers": [
        {"name": "X-Exact", "string_match": {"exact": "v"}},
        {"name": "x-prefix", "string_match": {"prefix": "ab", "ignore_case": true}},
        {"name": "x-suffix", "string_match": {"suffix": "yz"}},
        {"name": "x-contains", "string_match": {"contains": "mid"}},
        {"name": "x-regex", "string_match": {"safe_regex": {"regex": "[0-9]+"}}},
        {"name": "x-present", "present_match": true},
        {"name": "x-range", "range_match": {"start": 10, "end": 20}},
        {"name": "x-not", "string_match": {"exact": "bad"}, "invert_match": true},
    ], "query_parameters": [
        {"name": "q", "string_match": {"exact": "1"}},
        {"name": "p", "present_match": true},
    ]}, "route": {"cluster": "c"}}))
    .unwrap();
    let m = &config.virtual_hosts[0].routes[0].route_match;
    assert!(m.grpc);
    let h = &m.headers;
    assert_eq!(h[0].name, "x-exact");
    assert!(h[0].matches(Some("v")) && !h[0].matches(Some("vv")) && !h[0].matches(None));
    assert!(h[1].matches(Some("ABc")) && !h[1].matches(Some("b")));
    assert!(h[2].matches(Some("xyz")) && !h[2].matches(Some("yzx")));
    assert!(h[3].matches(Some("amidb")));
    assert!(h[4].matches(Some("123")) && !h[4].matches(Some("12a")));
    assert!(h[5].matches(Some("")) && !h[5].matches(None));
    assert!(
        h[6].matches(Some("10")) && h[6].matches(Some("19")) && !h[6].matches(Some("20")) && !h[6].matches(Some("x"))
    );
    assert!(h[7].matches(Some("good")) && !h[7].matches(Some("bad")) && h[7].matches(None));
    let q = &m.query_parameters;
    assert!(q[0].matches(Some("1")) && !q[0].matches(Some("2")) && !q[0].matches(None));
    assert!(q[1].matches(Some("")) && !q[1].matches(None));
}

#[test]
fn weighted_cluster_totals() {
    let config = one_route(json!({"match": {"prefix": "/"}, "route": {"weighted_clusters": {"clusters": [
        {"name": "a", "weight": 30}, {"name": "b", "weight": 70}, {"name": "idle", "weight": 0},
    ]}}}))
    .unwrap();
    let ClusterSpecifier::WeightedClusters(w) = &action_of(&config).cluster else { panic!() };
    assert_eq!(w.total, 100);
    assert_eq!(w.pick(29).map(|c| c.weight), Some(30));
    assert_eq!(w.pick(30).map(|c| c.weight), Some(70));
    assert!(w.pick(100).is_none());

    let err = error(one_route(json!({"match": {"prefix": "/"}, "route": {"weighted_clusters": {
        "clusters": [{"name": "a", "weight": 30}], "total_weight": 100}}})));
    assert_eq!(err.path(), "virtual_hosts[0].routes[0].route.weighted_clusters.total_weight");
    let err = error(one_route(json!({"match": {"prefix": "/"}, "route": {"weighted_clusters": {
        "clusters": [{"name": "a", "weight": 0}]}}})));
    assert_eq!(err.path(), "virtual_hosts[0].routes[0].route.weighted_clusters.clusters");
}

#[test]
fn route_action_defaults_and_timeouts() {
    let config = with_routes(json!([
        {"match": {"prefix": "/a"}, "route": {"cluster": "c"}},
        {"match": {"prefix": "/b"}, "route": {"cluster": "c", "timeout": "0s", "idle_timeout": "7s",
            "prefix_rewrite": "/x", "host_rewrite_literal": "h", "max_stream_duration": {"grpc_timeout_header_max": "0s"}}},
    ]))
    .unwrap();
    let action = |i: usize| match &config.virtual_hosts[0].routes[i].action {
        Action::Route(a) => a.clone(),
        _ => panic!(),
    };
    let (a, b) = (action(0), action(1));
    assert_eq!(a.timeout, Some(Duration::from_secs(15)));
    assert_eq!(a.retry_policy, None);
    assert_eq!(a.max_stream_duration.grpc_timeout_header_max, None);
    assert_eq!(b.timeout, None);
    assert_eq!(b.idle_timeout, Some(Duration::from_secs(7)));
    assert_eq!(b.prefix_rewrite.as_deref(), Some("/x"));
    assert_eq!(b.max_stream_duration.grpc_timeout_header_max, Some(Duration::ZERO));
}

#[test]
fn retry_defaults_and_istio_policy() {
    let config = one_route(json!({"match": {"prefix": "/"}, "route": {"cluster": "c",
        "retry_policy": {"retry_on": "5xx"}}}))
    .unwrap();
    let retry = action_of(&config).retry_policy.clone().unwrap();
    assert_eq!(retry.num_retries, 1);
    assert_eq!(retry.back_off.base_interval, Duration::from_millis(25));
    assert_eq!(retry.back_off.max_interval, Duration::from_millis(250));
    assert_eq!(retry.host_selection_retry_max_attempts, 1);
    assert!(retry.retry_on.contains(RetryOn::FiveXx) && !retry.retry_on.contains(RetryOn::Reset));
    assert_eq!(retry.per_try_timeout, None);

    // What istiod sends by default.
    let config = convert(json!({"name": "r", "virtual_hosts": [{"name": "vh", "domains": ["*"],
        "include_request_attempt_count": true,
        "retry_policy": {
            "retry_on": "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
            "num_retries": 2, "per_try_timeout": "1s",
            "retry_host_predicate": [{"name": "envoy.retry_host_predicates.previous_hosts", "typed_config":
                {"@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"}}],
            "host_selection_retry_max_attempts": "5", "retriable_status_codes": [503],
            "retry_back_off": {"base_interval": "0.1s"}},
        "routes": []}]}))
    .unwrap();
    let vhost = &config.virtual_hosts[0];
    assert!(vhost.include_request_attempt_count);
    let retry = vhost.retry_policy.clone().unwrap();
    let on: Vec<_> = retry.retry_on.iter().collect();
    assert_eq!(
        on,
        [
            RetryOn::ConnectFailure,
            RetryOn::RefusedStream,
            RetryOn::RetriableStatusCodes,
            RetryOn::Cancelled,
            RetryOn::Unavailable
        ]
    );
    assert_eq!((retry.num_retries, retry.host_selection_retry_max_attempts), (2, 5));
    assert!(retry.avoid_previous_hosts);
    assert_eq!(retry.retriable_status_codes, [503]);
    assert_eq!(retry.per_try_timeout, Some(Duration::from_secs(1)));
    assert_eq!(retry.back_off.max_interval, Duration::from_secs(1));

    let err = error(one_route(json!({"match": {"prefix": "/"}, "route": {"cluster": "c",
        "retry_policy": {"retry_on": "5xx,sometimes"}}})));
    assert_eq!(err.path(), "virtual_hosts[0].routes[0].route.retry_policy.retry_on");
    let err = error(one_route(json!({"match": {"prefix": "/"}, "route": {"cluster": "c",
        "retry_policy": {"retry_back_off": {"base_interval": "1s", "max_interval": "0.5s"}}}})));
    assert_eq!(err.path(), "virtual_hosts[0].routes[0].route.retry_policy.retry_back_off.max_interval");
}

#[test]
fn hash_policies() {
    let config = one_route(json!({"match": {"prefix": "/"}, "route": {"cluster": "c", "hash_policy": [
        {"header": {"header_name": "X-User"}},
        {"cookie": {"name": "sticky", "ttl": "60s", "path": "/"}, "terminal": true},
        {"connection_properties": {"source_ip": true}},
        {"connection_properties": {"source_ip": false}},
        {"query_parameter": {"name": "u"}},
        {"filter_state": {"key": "k"}},
    ]}}))
    .unwrap();
    let policies = &action_of(&config).hash_policy;
    let sources: Vec<_> = policies.iter().map(|p| p.source.clone()).collect();
    assert_eq!(
        sources,
        [
            HashSource::Header { name: "x-user".into() },
            HashSource::Cookie {
                name: "sticky".into(),
                ttl: Some(Duration::from_secs(60)),
                path: "/".into(),
                attributes: vec![]
            },
            HashSource::SourceIp,
            HashSource::QueryParameter { name: "u".into() },
            HashSource::FilterState { key: "k".into() },
        ]
    );
    let terminal: Vec<_> = policies.iter().map(|p| p.terminal).collect();
    assert_eq!(terminal, [false, true, false, false, false]);
}

#[test]
fn redirect_and_direct_response() {
    let config = with_routes(json!([
        {"match": {"prefix": "/old"}, "redirect": {"https_redirect": true, "prefix_rewrite": "/new", "response_code": "PERMANENT_REDIRECT"}},
        {"match": {"prefix": "/"}, "direct_response": {"status": 418, "body": {"inline_string": "teapot"}}},
    ]))
    .unwrap();
    let routes = &config.virtual_hosts[0].routes;
    let Action::Redirect(r) = &routes[0].action else { panic!() };
    assert_eq!((r.scheme.as_deref(), r.response_code), (Some("https"), 308));
    let Action::DirectResponse(d) = &routes[1].action else { panic!() };
    assert_eq!((d.status, d.body.as_deref()), (418, Some(&b"teapot"[..])));

    let err = error(one_route(json!({"match": {"prefix": "/"}, "direct_response": {"status": 42}})));
    assert_eq!(err.path(), "virtual_hosts[0].routes[0].direct_response.status");
}

#[test]
fn header_mutations_at_every_level() {
    let add =
        |name: &str| json!([{"header": {"key": name, "value": "v"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}]);
    let config = convert(json!({"name": "r",
        "request_headers_to_add": add("x-config"), "response_headers_to_remove": ["server"],
        "virtual_hosts": [{"name": "vh", "domains": ["*"], "request_headers_to_remove": ["x-drop"],
            "response_headers_to_add": add("x-vhost"),
            "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "c"},
                "request_headers_to_add": [{"header": {"key": "x-route", "value": "%DOWNSTREAM_REMOTE_ADDRESS%"}, "append": false}]}]}]}))
    .unwrap();
    assert_eq!(config.headers.request_headers_to_add[0].name, "x-config");
    assert_eq!(config.headers.request_headers_to_add[0].append_action, HeaderAppendAction::OverwriteIfExistsOrAdd);
    assert_eq!(config.headers.response_headers_to_remove[0], "server");
    let vhost = &config.virtual_hosts[0];
    assert_eq!(vhost.headers.request_headers_to_remove[0], "x-drop");
    assert_eq!(vhost.headers.response_headers_to_add[0].name, "x-vhost");
    let route_header = &vhost.routes[0].headers.request_headers_to_add[0];
    assert_eq!(
        (route_header.value.as_str(), route_header.append_action),
        ("%DOWNSTREAM_REMOTE_ADDRESS%", HeaderAppendAction::OverwriteIfExistsOrAdd)
    );

    let err = error(convert(json!({"name": "r", "request_headers_to_add": add("host"), "virtual_hosts": []})));
    assert_eq!(err.path(), "request_headers_to_add[0].header.key");
}

#[test]
fn unsupported_and_ignored_fields() {
    let (proto, _) = crate::pb::json::from_value::<proto::RouteConfiguration>(
        "envoy.config.route.v3.RouteConfiguration",
        json!({"name": "r", "validate_clusters": false, "virtual_hosts": [{"name": "vh", "domains": ["*"], "routes": [
            {"match": {"prefix": "/"}, "route": {"cluster": "c"}, "decorator": {"operation": "op"}}]}]}),
    )
    .unwrap();
    let mut warnings = Warnings::new();
    route_configuration(proto, &mut warnings).unwrap();
    let paths: Vec<_> = warnings.items().iter().map(|w| w.path.as_str()).collect();
    assert_eq!(paths, ["virtual_hosts[0].routes[0].decorator"]);
}

#[test]
fn regex_rewrite_is_compiled_and_validated() {
    let route = |rewrite: Value| {
        one_route(json!({"match": {"prefix": "/"}, "route": {"cluster": "c", "regex_rewrite": rewrite}}))
    };
    let config =
        route(json!({"pattern": {"regex": "^/service/([^/]+)(/.*)$"}, "substitution": "\\2/instance/\\1"})).unwrap();
    let rewrite = action_of(&config).regex_rewrite.as_ref().unwrap();
    assert_eq!(rewrite.replace_all("/service/foo/v1/api"), "/v1/api/instance/foo");

    let at = |result: Result<RouteConfiguration>| error(result).path().to_owned();
    assert_eq!(
        at(route(json!({"pattern": {"regex": "(unclosed"}, "substitution": "x"}))),
        "virtual_hosts[0].routes[0].route.regex_rewrite.pattern.regex"
    );
    assert_eq!(
        at(route(json!({"pattern": {"regex": "(a)"}, "substitution": "\\2"}))),
        "virtual_hosts[0].routes[0].route.regex_rewrite.substitution"
    );
    assert_eq!(
        at(route(json!({"pattern": {"regex": "a"}, "substitution": "\\q"}))),
        "virtual_hosts[0].routes[0].route.regex_rewrite.substitution"
    );
    assert_eq!(at(route(json!({"substitution": "x"}))), "virtual_hosts[0].routes[0].route.regex_rewrite.pattern");
    // Envoy: only one of prefix_rewrite and regex_rewrite.
    let both = one_route(json!({"match": {"prefix": "/"}, "route": {"cluster": "c", "prefix_rewrite": "/p",
        "regex_rewrite": {"pattern": {"regex": "a"}, "substitution": "b"}}}));
    assert_eq!(at(both), "virtual_hosts[0].routes[0].route.regex_rewrite");
    // The redirect variant stays refused.
    let redirect = one_route(json!({"match": {"prefix": "/"}, "redirect": {
        "regex_rewrite": {"pattern": {"regex": "a"}, "substitution": "b"}}}));
    assert_eq!(at(redirect), "virtual_hosts[0].routes[0].redirect.regex_rewrite");
}

#[test]
fn request_mirror_policies_are_converted_or_refused() {
    use crate::config::route::{MirrorCluster, ShadowHost};
    let route = |policies: Value| {
        one_route(json!({"match": {"prefix": "/"}, "route": {"cluster": "c", "request_mirror_policies": policies}}))
    };
    let config = route(json!([
        {"cluster": "m"},
        {"cluster_header": "X-Mirror", "disable_shadow_host_suffix_append": true, "trace_sampled": false,
         "runtime_fraction": {"default_value": {"numerator": 5, "denominator": "TEN_THOUSAND"}}},
        {"cluster": "m", "host_rewrite_literal": "h", "disable_shadow_host_suffix_append": false},
    ]))
    .unwrap();
    let policies = &action_of(&config).request_mirror_policies;
    assert_eq!(policies[0].cluster, MirrorCluster::Cluster("m".into()));
    assert!(policies[0].fraction.is_all() && policies[0].host == ShadowHost::Suffixed);
    assert_eq!(policies[1].cluster, MirrorCluster::Header("x-mirror".into()));
    assert_eq!((policies[1].fraction.numerator, policies[1].fraction.denominator), (5, 10_000));
    assert_eq!((policies[1].host.clone(), policies[1].trace_sampled), (ShadowHost::Unchanged, Some(false)));
    assert_eq!(policies[2].host, ShadowHost::Literal("h".into()));

    let at = |policies: Value| error(route(policies)).path().to_owned();
    assert_eq!(
        at(json!([{"cluster": "m", "cluster_header": "x"}])),
        "virtual_hosts[0].routes[0].route.request_mirror_policies[0].cluster"
    );
    assert_eq!(
        at(json!([{"cluster": "m"}, {}])),
        "virtual_hosts[0].routes[0].route.request_mirror_policies[1].cluster"
    );
    assert_eq!(
        at(json!([{"cluster": "m", "request_headers_mutations": [{"remove": "x"}]}])),
        "virtual_hosts[0].routes[0].route.request_mirror_policies[0].request_headers_mutations"
    );
    assert_eq!(
        at(json!([{"cluster": "m", "runtime_fraction": {"runtime_key": "k"}}])),
        "virtual_hosts[0].routes[0].route.request_mirror_policies[0].runtime_fraction.default_value"
    );
}
