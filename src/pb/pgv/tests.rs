use prost::Message;
use prost_reflect::{DynamicMessage, Value};

use super::*;
use crate::pb::envoy::config::cluster::v3::Cluster;
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, LbEndpoint, LocalityLbEndpoints};
use crate::pb::envoy::config::listener::v3::{Filter, FilterChain, Listener};
use crate::pb::envoy::config::route::v3 as route;
use crate::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use crate::pb::google::protobuf::{Duration, UInt32Value};

fn check<M: Message>(full_name: &str, message: &M) -> Result<(), Violation> {
    Validator::new().unwrap().check(full_name, &message.encode_to_vec())
}

fn cluster(timeout: Option<Duration>) -> Cluster {
    Cluster { name: "c".into(), connect_timeout: timeout, ..Default::default() }
}

#[test]
fn duration_gt_zero() {
    let name = "envoy.config.cluster.v3.Cluster";
    assert_eq!(check(name, &cluster(Some(Duration { seconds: 1, nanos: 0 }))), Ok(()));
    assert_eq!(check(name, &cluster(None)), Ok(()), "an absent duration is not checked");
    for bad in [Duration { seconds: 0, nanos: 0 }, Duration { seconds: -1, nanos: 0 }] {
        let violation = check(name, &cluster(Some(bad))).unwrap_err();
        assert_eq!(violation.path, "connect_timeout");
        assert_eq!(violation.reason, "value must be greater than 0s");
    }
}

#[test]
fn proto3_string_min_len_applies_to_the_default() {
    let violation = check("envoy.config.cluster.v3.Cluster", &Cluster::default()).unwrap_err();
    assert_eq!(
        (violation.path.as_str(), violation.reason.as_str()),
        ("name", "value length must be at least 1 characters")
    );
}

fn listener(filter_name: &str) -> Listener {
    Listener {
        name: "l".into(),
        filter_chains: vec![FilterChain {
            filters: vec![Filter { name: filter_name.into(), ..Default::default() }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn nested_repeated_messages_carry_their_path() {
    let name = "envoy.config.listener.v3.Listener";
    assert_eq!(check(name, &listener("envoy.filters.network.tcp_proxy")), Ok(()));
    let violation = check(name, &listener("")).unwrap_err();
    assert_eq!(violation.path, "filter_chains[0].filters[0].name");
}

#[test]
fn required_message() {
    let config = route::RouteConfiguration {
        name: "r".into(),
        virtual_hosts: vec![route::VirtualHost {
            name: "all".into(),
            domains: vec!["*".into()],
            routes: vec![route::Route {
                action: Some(route::route::Action::Route(route::RouteAction {
                    cluster_specifier: Some(route::route_action::ClusterSpecifier::Cluster("keep".into())),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let violation = check("envoy.config.route.v3.RouteConfiguration", &config).unwrap_err();
    assert_eq!(violation.path, "virtual_hosts[0].routes[0].match");
    assert_eq!(violation.reason, "value is required");
}

fn assignment(weight: Option<u32>) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: "e".into(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: vec![LbEndpoint {
                load_balancing_weight: weight.map(|value| UInt32Value { value }),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn wrapper_rules_apply_to_the_wrapped_value() {
    let name = "envoy.config.endpoint.v3.ClusterLoadAssignment";
    assert_eq!(check(name, &assignment(None)), Ok(()));
    assert_eq!(check(name, &assignment(Some(1))), Ok(()));
    let violation = check(name, &assignment(Some(0))).unwrap_err();
    assert_eq!(violation.path, "endpoints[0].lb_endpoints[0].load_balancing_weight");
    assert_eq!(violation.reason, "value must be greater than or equal to 1");
}

#[test]
fn required_oneof_and_enum_defined_only() {
    // `SocketAddress.port_specifier` is a required oneof; `protocol` an enum, defined_only.
    let address = |port: Option<u32>, protocol: i32| core::SocketAddress {
        address: "127.0.0.1".into(),
        port_specifier: port.map(core::socket_address::PortSpecifier::PortValue),
        protocol,
        ..Default::default()
    };
    let name = "envoy.config.core.v3.SocketAddress";
    assert_eq!(check(name, &address(Some(80), 0)), Ok(()));
    assert_eq!(check(name, &address(None, 0)).unwrap_err().path, "port_specifier");
    let violation = check(name, &address(Some(80), 7)).unwrap_err();
    assert_eq!(
        (violation.path.as_str(), violation.reason.as_str()),
        ("protocol", "value must be one of the defined enum values")
    );
}

#[test]
fn header_names_and_values() {
    let header =
        |key: &str, value: &str| core::HeaderValue { key: key.into(), value: value.into(), ..Default::default() };
    let name = "envoy.config.core.v3.HeaderValue";
    assert_eq!(check(name, &header("x-a", "b")), Ok(()));
    // Envoy's header rules are `strict: false`: only NUL, CR and LF are refused.
    assert_eq!(check(name, &header("x a", "b c")), Ok(()));
    assert_eq!(check(name, &header("x-a", "b\r\nc")).unwrap_err().path, "value");
    assert_eq!(check(name, &header("", "b")).unwrap_err().path, "key");
}

#[test]
fn outside_ranges_and_in_lists() {
    let rules = |json: &str| {
        let desc = pool(Set::Resources).unwrap().get_message_by_name("validate.UInt32Rules").unwrap();
        DynamicMessage::deserialize(desc, &mut serde_json::Deserializer::from_str(json)).unwrap()
    };
    let ok = |json: &str, v: i128| numeric(&Rules::read(&rules(json)), &Num::Int(v), true).is_ok();
    assert!(ok(r#"{"gte": 1, "lte": 10}"#, 1) && ok(r#"{"gte": 1, "lte": 10}"#, 10));
    assert!(!ok(r#"{"gte": 1, "lte": 10}"#, 11));
    // A lower bound above the upper one: the value must be outside.
    assert!(ok(r#"{"gt": 10, "lt": 5}"#, 4) && ok(r#"{"gt": 10, "lt": 5}"#, 11));
    assert!(!ok(r#"{"gt": 10, "lt": 5}"#, 7));
    assert!(ok(r#"{"in": [2, 3]}"#, 3) && !ok(r#"{"in": [2, 3]}"#, 4));
    assert!(!ok(r#"{"notIn": [2]}"#, 2));
    assert!(!ok(r#"{"const": 2}"#, 3));
}

/// The rules each kind of `FieldRules` may carry that the validator checks. A rule that
/// appears on the resources' fields and is not here would be ignored: the test below fails
/// instead, when a new `envoy-types` brings one.
fn handled(kind: &str) -> &'static [&'static str] {
    const NUMBER: &[&str] = &["const", "lt", "lte", "gt", "gte", "in", "not_in", "ignore_empty"];
    match kind {
        "float" | "double" | "int32" | "int64" | "uint32" | "uint64" | "sint32" | "sint64" | "fixed32" | "fixed64"
        | "sfixed32" | "sfixed64" => NUMBER,
        "bool" => &["const"],
        "string" => &[
            "const",
            "len",
            "min_len",
            "max_len",
            "len_bytes",
            "min_bytes",
            "max_bytes",
            "pattern",
            "prefix",
            "suffix",
            "contains",
            "not_contains",
            "in",
            "not_in",
            "email",
            "hostname",
            "ip",
            "ipv4",
            "ipv6",
            "uri",
            "uri_ref",
            "address",
            "uuid",
            "well_known_regex",
            "strict",
            "ignore_empty",
        ],
        "bytes" => &[
            "const",
            "len",
            "min_len",
            "max_len",
            "pattern",
            "prefix",
            "suffix",
            "contains",
            "in",
            "not_in",
            "ip",
            "ipv4",
            "ipv6",
            "ignore_empty",
        ],
        "enum" => &["const", "defined_only", "in", "not_in"],
        "message" => &["skip", "required"],
        "repeated" => &["min_items", "max_items", "unique", "items", "ignore_empty"],
        "map" => &["min_pairs", "max_pairs", "keys", "values", "ignore_empty"],
        "any" => &["required", "in", "not_in"],
        "duration" => &["required", "const", "lt", "lte", "gt", "gte", "in", "not_in"],
        "timestamp" => &["required", "const", "lt", "lte", "gt", "gte", "lt_now", "gt_now", "within"],
        _ => &[],
    }
}

fn unhandled(rules: &DynamicMessage, at: &str, out: &mut Vec<String>) {
    for (field, value) in rules.fields() {
        let Value::Message(typed) = value else { continue };
        for (rule, inner) in typed.fields() {
            if !handled(field.name()).contains(&rule.name()) {
                out.push(format!("{at}: {}.{}", field.name(), rule.name()));
            }
            if let (Value::Message(nested), "items" | "keys" | "values") = (inner, rule.name()) {
                unhandled(nested, at, out);
            }
        }
    }
}

#[test]
fn every_rule_on_the_resources_is_checked() {
    every_rule_is_checked(Set::Resources, 300);
}

#[test]
fn every_rule_on_the_extensions_is_checked() {
    every_rule_is_checked(Set::Extensions, 1000);
}

fn every_rule_is_checked(set: Set, at_least: usize) {
    let validator = Validator::of(set).unwrap();
    let pool = validator.pool.clone();
    let mut out = Vec::new();
    let mut rules_seen = 0;
    for message in pool.all_messages() {
        for field in message.fields() {
            let options = field.options();
            if !options.has_extension(&validator.field_rules) {
                continue;
            }
            if let Value::Message(rules) = options.get_extension(&validator.field_rules).as_ref() {
                rules_seen += 1;
                unhandled(rules, field.full_name(), &mut out);
            }
        }
    }
    assert!(rules_seen > at_least, "the descriptor set carries the rules: {rules_seen}");
    assert!(out.is_empty(), "rules not checked:\n{}", out.join("\n"));
}

/// What a check costs: each pool decoded (once per response) and one resource checked, one
/// Istio-shaped connection manager checked. Printed, not asserted (run with `--nocapture`).
#[test]
fn cost_of_a_check() {
    let started = std::time::Instant::now();
    let mut validator = Validator::new().unwrap();
    let decoded = started.elapsed();
    let bytes = listener("envoy.filters.network.http_connection_manager").encode_to_vec();
    let started = std::time::Instant::now();
    for _ in 0..100 {
        validator.check("envoy.config.listener.v3.Listener", &bytes).unwrap();
    }
    let per_check = started.elapsed() / 100;
    println!("pgv: pool decoded in {decoded:?}; one listener checked in {per_check:?}");
    let started = std::time::Instant::now();
    let mut extensions = Validator::of(Set::Extensions).unwrap();
    let decoded = started.elapsed();
    let hcm = istio_like_hcm().encode_to_vec();
    let started = std::time::Instant::now();
    for _ in 0..100 {
        extensions.check(HCM, &hcm).unwrap();
    }
    let per_check = started.elapsed() / 100;
    println!("pgv: extensions' pool decoded in {decoded:?}; one connection manager checked in {per_check:?}");
}

const HCM: &str = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

/// A connection manager as istiod writes one for an outbound HTTP port: RDS, tracing, a
/// few settings, three HTTP filters.
fn istio_like_hcm() -> hcm::HttpConnectionManager {
    use crate::pb::google::protobuf::{Any, BoolValue};
    let filter = |name: &str, type_url: &str| hcm::HttpFilter {
        name: name.into(),
        config_type: Some(hcm::http_filter::ConfigType::TypedConfig(Any {
            type_url: format!("type.googleapis.com/{type_url}"),
            value: Vec::new(),
        })),
        ..Default::default()
    };
    hcm::HttpConnectionManager {
        stat_prefix: "outbound_0.0.0.0_8080".into(),
        route_specifier: Some(hcm::http_connection_manager::RouteSpecifier::Rds(hcm::Rds {
            route_config_name: "8080".into(),
            config_source: Some(core::ConfigSource {
                config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(Default::default())),
                resource_api_version: core::ApiVersion::V3 as i32,
                ..Default::default()
            }),
        })),
        use_remote_address: Some(BoolValue { value: false }),
        stream_idle_timeout: Some(Duration { seconds: 0, nanos: 0 }),
        normalize_path: Some(BoolValue { value: true }),
        upgrade_configs: vec![hcm::http_connection_manager::UpgradeConfig {
            upgrade_type: "websocket".into(),
            ..Default::default()
        }],
        http_filters: vec![
            filter("istio.metadata_exchange", "udpa.type.v1.TypedStruct"),
            filter("envoy.filters.http.fault", "envoy.extensions.filters.http.fault.v3.HTTPFault"),
            filter("envoy.filters.http.router", "envoy.extensions.filters.http.router.v3.Router"),
        ],
        ..Default::default()
    }
}

#[test]
fn extension_configs_are_checked() {
    let mut validator = Validator::of(Set::Extensions).unwrap();
    assert_eq!(validator.check(HCM, &istio_like_hcm().encode_to_vec()), Ok(()));
    let empty_prefix = hcm::HttpConnectionManager { stat_prefix: String::new(), ..istio_like_hcm() };
    let violation = validator.check(HCM, &empty_prefix.encode_to_vec()).unwrap_err();
    assert_eq!(
        (violation.path.as_str(), violation.reason.as_str()),
        ("stat_prefix", "value length must be at least 1 characters")
    );
    // The filter's own config is not looked into: it is checked when it is unpacked.
    let mut nested = istio_like_hcm();
    nested.http_filters[0].name = String::new();
    assert_eq!(validator.check(HCM, &nested.encode_to_vec()).unwrap_err().path, "http_filters[0].name");
    // A load-balancing policy's config: the ring's size is bounded by its proto.
    let ring = crate::pb::envoy::extensions::load_balancing_policies::ring_hash::v3::RingHash {
        minimum_ring_size: Some(crate::pb::google::protobuf::UInt64Value { value: 8_388_609 }),
        ..Default::default()
    };
    let name = "envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash";
    assert_eq!(validator.check(name, &ring.encode_to_vec()).unwrap_err().path, "minimum_ring_size");
    // Messages that are not Envoy's carry no rules; an Envoy message the set lacks is
    // refused, never let through.
    assert_eq!(validator.check_extension("google.protobuf.StringValue", b""), Ok(()));
    assert_eq!(validator.check_extension("stats.PluginConfig", b""), Ok(()));
    assert!(validator.check_extension("envoy.acme.v3.Unknown", b"").is_err());
}

#[test]
fn one_extensions_pool_per_scope_and_none_after() {
    let hcm = istio_like_hcm().encode_to_vec();
    let pointers = with_extension_checks(|| {
        check_extension(HCM, &hcm).unwrap();
        let first = EXTENSIONS.lock().unwrap().upgrade().map(|p| Arc::as_ptr(&p));
        with_extension_checks(|| check_extension(HCM, &hcm).unwrap()); // nested: the same
        check_extension(HCM, &hcm).unwrap();
        let second = EXTENSIONS.lock().unwrap().upgrade().map(|p| Arc::as_ptr(&p));
        (first, second)
    });
    assert!(pointers.0.is_some());
    assert_eq!(pointers.0, pointers.1, "one pool for the whole scope");
    // Other tests on other threads may hold one of their own; this thread holds none.
    SCOPE.with(|scope| assert!(matches!(*scope.borrow(), Scope::Outside)));
}

#[test]
fn kept_validators_serve_the_next_response_and_go_with_it() {
    let hcm = istio_like_hcm().encode_to_vec();
    let mut kept = Kept::default();
    assert!(kept.is_empty());
    let in_scope = || {
        check_extension(HCM, &hcm).unwrap();
        SCOPE.with(|scope| match &*scope.borrow() {
            Scope::Ready(validator) => Arc::as_ptr(&validator.pool),
            _ => panic!("no validator in scope"),
        })
    };
    let first = with_extension_checks_kept(&mut kept, in_scope);
    SCOPE.with(|scope| assert!(matches!(*scope.borrow(), Scope::Outside)));
    assert!(!kept.is_empty(), "the extensions' validator is kept");
    let resources = Arc::as_ptr(&kept.resources().unwrap().pool);
    let second = with_extension_checks_kept(&mut kept, in_scope);
    assert_eq!(first, second, "the next response reuses the kept validator");
    assert_eq!(resources, Arc::as_ptr(&kept.resources().unwrap().pool));
}

/// What the typed-config checks add to one CDS response at mesh scale: 5 000 clusters as
/// istiod writes them for mTLS (an `UpstreamTlsContext` over SDS, `HttpProtocolOptions`),
/// each config checked where it is unpacked, with one pool decoded for the response.
/// Printed, not asserted (run with `--nocapture`).
#[test]
fn cost_of_the_extension_checks_of_a_cds_response() {
    use crate::pb::envoy::extensions::transport_sockets::tls::v3 as tls;
    use crate::pb::envoy::extensions::upstreams::http::v3 as http;
    let sds = |name: &str| tls::SdsSecretConfig {
        name: name.into(),
        sds_config: Some(core::ConfigSource {
            config_source_specifier: Some(core::config_source::ConfigSourceSpecifier::Ads(Default::default())),
            resource_api_version: core::ApiVersion::V3 as i32,
            ..Default::default()
        }),
    };
    // Each cluster's TLS context names its own service (as istiod's do), so each differs;
    // the protocol options are the same for all, as istiod writes them.
    let upstream_tls = |i: usize| {
        tls::UpstreamTlsContext {
            common_tls_context: Some(tls::CommonTlsContext {
                alpn_protocols: vec!["istio-peer-exchange".into(), "istio".into()],
                tls_certificate_sds_secret_configs: vec![sds("default")],
                validation_context_type: Some(
                    tls::common_tls_context::ValidationContextType::CombinedValidationContext(
                        tls::common_tls_context::CombinedCertificateValidationContext {
                            default_validation_context: Some(Default::default()),
                            validation_context_sds_secret_config: Some(sds("ROOTCA")),
                            ..Default::default()
                        },
                    ),
                ),
                ..Default::default()
            }),
            sni: format!("outbound_.80_._.svc{i}.default.svc.cluster.local"),
            ..Default::default()
        }
        .encode_to_vec()
    };
    let options = http::HttpProtocolOptions {
        upstream_protocol_options: Some(
            http::http_protocol_options::UpstreamProtocolOptions::UseDownstreamProtocolConfig(Default::default()),
        ),
        ..Default::default()
    }
    .encode_to_vec();
    const CLUSTERS: usize = 5_000;
    let contexts: Vec<Vec<u8>> = (0..CLUSTERS).map(upstream_tls).collect();
    let started = std::time::Instant::now();
    with_extension_checks(|| {
        for upstream_tls in &contexts {
            check_extension("envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext", upstream_tls).unwrap();
            check_extension("envoy.extensions.upstreams.http.v3.HttpProtocolOptions", &options).unwrap();
        }
    });
    let elapsed = started.elapsed();
    println!(
        "pgv: typed configs of {CLUSTERS} clusters checked in {elapsed:?} ({:?} per cluster, pool decoding included)",
        elapsed / CLUSTERS as u32
    );
}
