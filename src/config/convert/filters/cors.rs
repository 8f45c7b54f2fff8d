//! `envoy.extensions.filters.http.cors.v3.Cors` (the filter, which has no settings) and
//! the CORS policies it applies: `envoy.extensions.filters.http.cors.v3.CorsPolicy` in
//! `typed_per_filter_config`, and the older `envoy.config.route.v3.CorsPolicy` of a
//! virtual host's or route's `cors` field → [`CorsPolicy`].

use super::super::common;
use super::super::matchers::string_matcher;
use super::fractional_percent::runtime_fractional_percent;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::cors::CorsPolicy;
use crate::config::filters::fractional_percent::FractionalPercent;
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::config::route::v3 as route_proto;
use crate::pb::envoy::extensions::filters::http::cors::v3 as proto;
use crate::pb::envoy::r#type::matcher::v3::StringMatcher as StringMatcherProto;
use crate::pb::google::protobuf::{Any, BoolValue};

pub const FILTER_TYPE: &str = "envoy.extensions.filters.http.cors.v3.Cors";
pub const POLICY_TYPE: &str = "envoy.extensions.filters.http.cors.v3.CorsPolicy";

/// The filter's own `typed_config`: an empty message.
pub fn cors_filter(any: &Any) -> Result<()> {
    let proto::Cors {} = common::unpack::<proto::Cors>(any)?;
    Ok(())
}

/// A policy in `typed_per_filter_config`.
pub fn cors_policy(any: &Any, warnings: &mut Warnings) -> Result<CorsPolicy> {
    let proto::CorsPolicy {
        allow_origin_string_match,
        allow_methods,
        allow_headers,
        expose_headers,
        max_age,
        allow_credentials,
        filter_enabled,
        shadow_enabled,
        allow_private_network_access,
        forward_not_matching_preflights,
    } = common::unpack::<proto::CorsPolicy>(any)?;
    policy(
        Fields {
            allow_origin_string_match,
            allow_methods,
            allow_headers,
            expose_headers,
            max_age,
            allow_credentials,
            filter_enabled,
            shadow_enabled,
            allow_private_network_access,
            forward_not_matching_preflights,
        },
        warnings,
    )
}

/// A virtual host's or route's `cors` field. Envoy applies it only where no CORS policy
/// is in `typed_per_filter_config`, and only when the CORS filter runs.
#[allow(deprecated)]
pub fn route_cors_policy(proto: route_proto::CorsPolicy, warnings: &mut Warnings) -> Result<CorsPolicy> {
    use route_proto::cors_policy::EnabledSpecifier;
    let route_proto::CorsPolicy {
        allow_origin_string_match,
        allow_methods,
        allow_headers,
        expose_headers,
        max_age,
        allow_credentials,
        shadow_enabled,
        allow_private_network_access,
        forward_not_matching_preflights,
        enabled_specifier,
    } = proto;
    let filter_enabled = enabled_specifier.map(|EnabledSpecifier::FilterEnabled(p)| p);
    policy(
        Fields {
            allow_origin_string_match,
            allow_methods,
            allow_headers,
            expose_headers,
            max_age,
            allow_credentials,
            filter_enabled,
            shadow_enabled,
            allow_private_network_access,
            forward_not_matching_preflights,
        },
        warnings,
    )
}

/// The fields both forms of the policy share.
struct Fields {
    allow_origin_string_match: Vec<StringMatcherProto>,
    allow_methods: String,
    allow_headers: String,
    expose_headers: String,
    max_age: String,
    allow_credentials: Option<BoolValue>,
    filter_enabled: Option<core::RuntimeFractionalPercent>,
    shadow_enabled: Option<core::RuntimeFractionalPercent>,
    allow_private_network_access: Option<BoolValue>,
    forward_not_matching_preflights: Option<BoolValue>,
}

fn policy(fields: Fields, warnings: &mut Warnings) -> Result<CorsPolicy> {
    let Fields {
        allow_origin_string_match,
        allow_methods,
        allow_headers,
        expose_headers,
        max_age,
        allow_credentials,
        filter_enabled,
        shadow_enabled,
        allow_private_network_access,
        forward_not_matching_preflights,
    } = fields;
    let allow_origins = allow_origin_string_match
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let at = format!("allow_origin_string_match[{i}]");
            warnings.within(&at, |w| string_matcher(m, w)).map_err(|e| e.at(&at))
        })
        .collect::<Result<_>>()?;
    for (value, field) in [
        (&allow_methods, "allow_methods"),
        (&allow_headers, "allow_headers"),
        (&expose_headers, "expose_headers"),
        (&max_age, "max_age"),
    ] {
        if http::HeaderValue::from_str(value).is_err() {
            return Err(ConfigError::new(field, "is not a valid header value"));
        }
    }
    Ok(CorsPolicy {
        allow_origins,
        allow_methods,
        allow_headers,
        expose_headers,
        max_age,
        allow_credentials: allow_credentials.map(|b| b.value),
        allow_private_network_access: allow_private_network_access.map(|b| b.value),
        forward_not_matching_preflights: forward_not_matching_preflights.map(|b| b.value),
        filter_enabled: runtime_percent(filter_enabled.as_ref(), "filter_enabled", warnings)?,
        shadow_enabled: runtime_percent(shadow_enabled.as_ref(), "shadow_enabled", warnings)?,
    })
}

fn runtime_percent(
    proto: Option<&core::RuntimeFractionalPercent>,
    field: &str,
    warnings: &mut Warnings,
) -> Result<Option<FractionalPercent>> {
    proto.map(|p| warnings.within(field, |w| runtime_fractional_percent(p, w)).map_err(|e| e.at(field))).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::route::StringMatcher;
    use crate::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;

    #[test]
    fn both_forms_convert_alike() {
        let matcher = StringMatcherProto {
            ignore_case: false,
            match_pattern: Some(MatchPattern::Exact("https://a.test".into())),
        };
        let route = route_proto::CorsPolicy {
            allow_origin_string_match: vec![matcher.clone()],
            allow_methods: "GET, POST".into(),
            max_age: "600".into(),
            allow_credentials: Some(BoolValue { value: true }),
            ..Default::default()
        };
        let typed = proto::CorsPolicy {
            allow_origin_string_match: vec![matcher],
            allow_methods: "GET, POST".into(),
            max_age: "600".into(),
            allow_credentials: Some(BoolValue { value: true }),
            ..Default::default()
        };
        let any = Any {
            type_url: format!("type.googleapis.com/{POLICY_TYPE}"),
            value: prost::Message::encode_to_vec(&typed),
        };
        let a = route_cors_policy(route, &mut Warnings::new()).unwrap();
        let b = cors_policy(&any, &mut Warnings::new()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.allow_origins, vec![StringMatcher::Exact { value: "https://a.test".into(), ignore_case: false }]);
        assert_eq!(a.filter_enabled, None);
    }

    #[test]
    fn a_bad_origin_matcher_is_refused_with_its_path() {
        let route = route_proto::CorsPolicy {
            allow_origin_string_match: vec![
                StringMatcherProto { ignore_case: false, match_pattern: Some(MatchPattern::Exact("x".into())) },
                StringMatcherProto { ignore_case: false, match_pattern: Some(MatchPattern::Prefix(String::new())) },
            ],
            ..Default::default()
        };
        let error = route_cors_policy(route, &mut Warnings::new()).unwrap_err();
        assert_eq!(error.path(), "allow_origin_string_match[1].prefix");
        let route = route_proto::CorsPolicy { max_age: "1\n".into(), ..Default::default() };
        assert_eq!(route_cors_policy(route, &mut Warnings::new()).unwrap_err().path(), "max_age");
    }
}
