use std::collections::HashMap;

use super::*;
use crate::config::filters::jwt_authn::{JwksSource, JwtRequirement};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::config::route::v3 as route;
use proto::jwt_requirement::RequiresType;

fn local_provider(issuer: &str) -> proto::JwtProvider {
    proto::JwtProvider {
        issuer: issuer.to_owned(),
        jwks_source_specifier: Some(proto::jwt_provider::JwksSourceSpecifier::LocalJwks(core::DataSource {
            specifier: Some(core::data_source::Specifier::InlineString(r#"{"keys":[]}"#.into())),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn provider_name(name: &str) -> proto::JwtRequirement {
    proto::JwtRequirement { requires_type: Some(RequiresType::ProviderName(name.into())) }
}

fn rule(requires: proto::JwtRequirement) -> proto::RequirementRule {
    proto::RequirementRule {
        r#match: Some(route::RouteMatch {
            path_specifier: Some(route::route_match::PathSpecifier::Prefix("/".into())),
            ..Default::default()
        }),
        requirement_type: Some(proto::requirement_rule::RequirementType::Requires(requires)),
    }
}

fn config(providers: Vec<(&str, proto::JwtProvider)>, rules: Vec<proto::RequirementRule>) -> proto::JwtAuthentication {
    proto::JwtAuthentication {
        providers: providers.into_iter().map(|(n, p)| (n.to_owned(), p)).collect(),
        rules,
        ..Default::default()
    }
}

fn error(proto: proto::JwtAuthentication) -> String {
    convert(proto, &mut Warnings::new()).unwrap_err().to_string()
}

#[test]
fn istio_like_configuration_converts() {
    let requires = proto::JwtRequirement {
        requires_type: Some(RequiresType::RequiresAny(proto::JwtRequirementOrList {
            requirements: vec![
                provider_name("origins-0"),
                proto::JwtRequirement { requires_type: Some(RequiresType::AllowMissing(Default::default())) },
            ],
        })),
    };
    let mut provider = local_provider("https://issuer");
    provider.payload_in_metadata = "payload".into();
    provider.normalize_payload_in_metadata =
        Some(proto::jwt_provider::NormalizePayload { space_delimited_claims: vec!["scope".into()] });
    let mut proto = config(vec![("origins-0", provider)], vec![rule(requires)]);
    proto.bypass_cors_preflight = true;
    let converted = convert(proto, &mut Warnings::new()).unwrap();
    let provider = &converted.providers["origins-0"];
    assert_eq!(provider.clock_skew_seconds, 60);
    assert_eq!(provider.space_delimited_claims, ["scope"]);
    assert!(matches!(provider.jwks, JwksSource::Local(_)));
    assert!(converted.bypass_cors_preflight);
    assert_eq!(
        converted.rules[0].requires,
        Some(JwtRequirement::Any(vec![
            JwtRequirement::Provider { name: "origins-0".into(), audiences: None },
            JwtRequirement::AllowMissing
        ]))
    );
}

#[test]
fn unknown_providers_and_requirements_are_refused_with_their_paths() {
    let e = error(config(vec![("a", local_provider("x"))], vec![rule(provider_name("b"))]));
    assert_eq!(e, "rules[0].requires.provider_name: Required provider ['b'] is not configured.");
    let mut proto = config(vec![("a", local_provider("x"))], vec![]);
    proto.rules.push(proto::RequirementRule {
        r#match: rule(provider_name("a")).r#match,
        requirement_type: Some(proto::requirement_rule::RequirementType::RequirementName("nope".into())),
    });
    proto.requirement_map = HashMap::from([("one".to_owned(), provider_name("a"))]);
    assert_eq!(error(proto), "rules[0].requirement_name: Wrong requirement_name: nope. It should be one of [one]");
    let short_list = proto::JwtRequirement {
        requires_type: Some(RequiresType::RequiresAll(proto::JwtRequirementAndList {
            requirements: vec![provider_name("a")],
        })),
    };
    let e = error(config(vec![("a", local_provider("x"))], vec![rule(short_list)]));
    assert_eq!(e, "rules[0].requires.requires_all.requirements: must have at least 2 requirements");
}

#[test]
fn unsupported_fields_are_refused_never_skipped() {
    let mut p = local_provider("x");
    p.subjects = Some(Default::default());
    assert!(error(config(vec![("a", p)], vec![])).starts_with("providers[\"a\"].subjects:"));
    let mut p = local_provider("x");
    p.jwks_source_specifier = None;
    assert!(error(config(vec![("a", p)], vec![])).starts_with("providers[\"a\"].jwks_source_specifier:"));
    let mut p = local_provider("x");
    p.jwks_source_specifier = Some(proto::jwt_provider::JwksSourceSpecifier::RemoteJwks(proto::RemoteJwks {
        http_uri: Some(core::HttpUri {
            uri: "http://keys/jwks".into(),
            timeout: None,
            http_upstream_type: Some(core::http_uri::HttpUpstreamType::Cluster("keys".into())),
        }),
        ..Default::default()
    }));
    assert_eq!(error(config(vec![("a", p)], vec![])), "providers[\"a\"].remote_jwks.http_uri.timeout: is required");
    let mut proto = config(vec![], vec![]);
    proto.filter_state_rules = Some(Default::default());
    assert!(error(proto).starts_with("filter_state_rules:"));
    let extract_only =
        proto::JwtRequirement { requires_type: Some(RequiresType::ExtractOnlyWithoutValidation(Default::default())) };
    assert!(
        error(config(vec![], vec![rule(extract_only)]))
            .starts_with("rules[0].requires.extract_only_without_validation:")
    );
}

#[test]
fn per_route_settings() {
    use proto::per_route_config::RequirementSpecifier;
    let any = |specifier| {
        let message = proto::PerRouteConfig { requirement_specifier: specifier };
        Any {
            type_url: format!("type.googleapis.com/{PER_ROUTE_TYPE}"),
            value: prost::Message::encode_to_vec(&message),
        }
    };
    assert_eq!(per_route(&any(Some(RequirementSpecifier::Disabled(true)))).unwrap(), JwtPerRoute::Disabled);
    assert_eq!(
        per_route(&any(Some(RequirementSpecifier::RequirementName("r".into())))).unwrap(),
        JwtPerRoute::RequirementName("r".into())
    );
    assert!(per_route(&any(None)).is_err());
}
