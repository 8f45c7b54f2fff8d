//! RBAC conversion: what converts, and the field path of what is refused.

use serde_json::{Value, json};

use super::*;
use crate::config::filters::rbac::{Action, MetadataMatcher, Permission, Principal, ValueMatcher};

fn any<M: prost::Message + Default>(full_name: &str, value: Value) -> Any {
    let (message, dropped) = crate::pb::json::from_value::<M>(full_name, value).unwrap();
    assert!(dropped.is_empty(), "{dropped:?}");
    Any { type_url: format!("type.googleapis.com/{full_name}"), value: prost::Message::encode_to_vec(&message) }
}

fn http(value: Value) -> Result<HttpRbac> {
    http_rbac(&any::<http_proto::Rbac>(HTTP_TYPE, value), &mut Warnings::new())
}

fn refused(value: Value) -> ConfigError {
    http(value).unwrap_err()
}

fn one_policy(permission: Value, principal: Value) -> Value {
    json!({ "rules": { "action": "ALLOW", "policies": { "p": { "permissions": [permission], "principals": [principal] } } } })
}

#[test]
fn policies_are_sorted_by_name_and_converted() {
    let rbac = http(json!({
        "rules_stat_prefix": "mine.",
        "shadow_rules_stat_prefix": "istio_dry_run_allow_",
        "rules": { "action": "DENY", "policies": {
            "b": { "permissions": [{ "url_path": { "path": { "prefix": "/admin", "ignore_case": true } } }],
                   "principals": [{ "remote_ip": { "address_prefix": "10.0.0.0", "prefix_len": 8 } }] },
            "a": { "permissions": [{ "destination_port_range": { "start": 80, "end": 90 } }],
                   "principals": [{ "not_id": { "authenticated": {} } }] },
        } },
    }))
    .unwrap();
    let rules = rbac.rules.unwrap();
    assert_eq!(rules.action, Action::Deny);
    let names: Vec<_> = rules.policies.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(rules.policies[0].1.permissions[0], Permission::DestinationPortRange { start: 80, end: 90 });
    assert_eq!(rules.policies[0].1.principals[0], Principal::Not(Box::new(Principal::Authenticated(None))));
    assert!(matches!(&rules.policies[1].1.permissions[0], Permission::UrlPath(m) if m.matches("/ADMIN/x")));
    assert_eq!(rbac.rules_stat_prefix, "mine");
    assert_eq!(rbac.shadow_rules_stat_prefix, "istio_dry_run_allow_");
    assert!(rbac.shadow_rules.is_none());
}

#[test]
fn istio_claims_render_to_a_metadata_matcher() {
    // What Istio renders for `request.auth.claims[groups]` with value `admin`.
    let rbac = http(one_policy(
        json!({ "any": true }),
        json!({ "metadata": {
            "filter": "envoy.filters.http.jwt_authn",
            "path": [{ "key": "payload" }, { "key": "groups" }],
            "value": { "or_match": { "value_matchers": [
                { "list_match": { "one_of": { "string_match": { "exact": "admin" } } } },
                { "string_match": { "exact": "admin" } },
            ] } },
        } }),
    ))
    .unwrap();
    let Principal::Metadata(MetadataMatcher { filter, path, value, invert }) =
        &rbac.rules.unwrap().policies[0].1.principals[0]
    else {
        panic!()
    };
    assert_eq!(filter, "envoy.filters.http.jwt_authn");
    assert_eq!(path, &["payload", "groups"]);
    assert!(!invert);
    assert!(matches!(value, ValueMatcher::Or(v) if matches!(&v[0], ValueMatcher::ListOneOf(_))));
}

#[test]
fn refusals_name_their_field() {
    let cases = [
        (
            one_policy(
                json!({ "header": { "name": "x", "safe_regex_match": { "regex": "(" } } }),
                json!({ "any": true }),
            ),
            "rules.policies[\"p\"].permissions[0].header.safe_regex_match.regex",
        ),
        (
            one_policy(
                json!({ "any": true }),
                json!({ "filter_state": { "key": "other", "string_match": { "exact": "x" } } }),
            ),
            "rules.policies[\"p\"].principals[0].filter_state.key",
        ),
        (
            one_policy(
                json!({ "and_rules": { "rules": [{ "any": true }, { "uri_template": { "name": "t", "typed_config": {
            "@type": "type.googleapis.com/google.protobuf.Empty", "value": {} } } }] } }),
                json!({ "any": true }),
            ),
            "rules.policies[\"p\"].permissions[0].and_rules.rules[1].uri_template",
        ),
        (
            one_policy(json!({ "any": true }), json!({ "or_ids": { "ids": [] } })),
            "rules.policies[\"p\"].principals[0].or_ids.ids",
        ),
        (
            one_policy(json!({ "destination_port": 70000 }), json!({ "any": true })),
            "rules.policies[\"p\"].permissions[0].destination_port",
        ),
        (
            one_policy(json!({ "any": true }), json!({ "metadata": { "filter": "f", "path": [{ "key": "k" }] } })),
            "rules.policies[\"p\"].principals[0].metadata.value",
        ),
        (
            one_policy(json!({ "any": true }), json!({ "remote_ip": { "address_prefix": "not-an-ip" } })),
            "rules.policies[\"p\"].principals[0].remote_ip.address_prefix",
        ),
        (
            json!({ "rules": { "policies": { "p": { "permissions": [{ "any": true }], "principals": [{ "any": true }],
            "condition": { "const_expr": { "bool_value": true } } } } } }),
            "rules.policies[\"p\"].condition",
        ),
        (
            json!({ "rules": { "policies": { "p": { "permissions": [], "principals": [{ "any": true }] } } } }),
            "rules.policies[\"p\"].permissions",
        ),
        (
            json!({ "shadow_matcher": { "on_no_match": { "action": { "name": "a", "typed_config": {
            "@type": "type.googleapis.com/envoy.config.rbac.v3.Action", "name": "x" } } } } }),
            "shadow_matcher",
        ),
    ];
    for (config, path) in cases {
        let error = refused(config.clone());
        assert_eq!(error.path(), path, "{config}: {error}");
    }
}

#[test]
fn a_per_route_setting_without_rbac_turns_rbac_off() {
    let config = any::<http_proto::RbacPerRoute>(PER_ROUTE_TYPE, json!({}));
    let route = per_route(&config, &mut Warnings::new()).unwrap();
    assert_eq!(route, RbacPerRoute { rules: None, shadow_rules: None });
    let config = any::<http_proto::RbacPerRoute>(
        PER_ROUTE_TYPE,
        json!({ "rbac": { "rules": { "action": "DENY", "policies": {} } } }),
    );
    let route = per_route(&config, &mut Warnings::new()).unwrap();
    assert_eq!(route.rules.unwrap().action, Action::Deny);
}

#[test]
fn network_rbac_needs_a_stat_prefix() {
    let convert = |value: Value| network_rbac(&any::<network_proto::Rbac>(NETWORK_TYPE, value), &mut Warnings::new());
    assert_eq!(convert(json!({ "rules": {} })).unwrap_err().path(), "stat_prefix");
    let rbac =
        convert(json!({ "stat_prefix": "tcp.", "rules": {}, "enforcement_type": "CONTINUOUS", "delay_deny": "2s" }))
            .unwrap();
    assert_eq!(rbac.stat_prefix, "tcp");
    assert_eq!(rbac.delay_deny, Some(std::time::Duration::from_secs(2)));
    assert!(rbac.rules.unwrap().policies.is_empty());
    let unknown = convert(json!({ "stat_prefix": "tcp.", "enforcement_type": 7 })).unwrap_err();
    assert_eq!(unknown.path(), "enforcement_type");
}
