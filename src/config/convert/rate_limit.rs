//! `envoy.config.route.v3.RateLimit` (a virtual host's or route's `rate_limits`) →
//! [`RateLimitPolicy`]. Actions Outrider cannot compute are refused with their path: a
//! descriptor built without them would ask the rate-limit service about another key.

use super::matchers::header_matcher;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::route::{RateLimitAction, RateLimitPolicy};
use crate::pb::envoy::config::route::v3 as proto;

/// A `rate_limits` list; `field` is its name for error paths.
pub fn rate_limits(list: Vec<proto::RateLimit>, field: &str, warnings: &mut Warnings) -> Result<Vec<RateLimitPolicy>> {
    list.into_iter()
        .enumerate()
        .map(|(i, r)| {
            let at = format!("{field}[{i}]");
            warnings.within(&at, |w| rate_limit(r, w)).map_err(|e| e.at(&at))
        })
        .collect()
}

/// Whether any entry has a `destination_cluster` action: Outrider picks a weighted cluster
/// only when it forwards, after the filters, so such descriptors cannot be built.
pub fn uses_destination_cluster(policies: &[RateLimitPolicy]) -> bool {
    policies.iter().any(|p| p.actions.contains(&RateLimitAction::DestinationCluster))
}

fn rate_limit(proto: proto::RateLimit, warnings: &mut Warnings) -> Result<RateLimitPolicy> {
    // `disable_key`: Envoy turns the entry off only when the runtime sets the key
    // `ratelimit.<disable_key>.http_filter_enabled` below 100 %; Outrider has no runtime, so
    // the key's default (enabled) always holds.
    let proto::RateLimit {
        stage,
        disable_key: _,
        actions,
        limit,
        hits_addend,
        apply_on_stream_done,
        x_ratelimit_option,
    } = proto;
    if limit.is_some() {
        return Err(ConfigError::new("limit", "overriding the limit from dynamic metadata is not supported"));
    }
    if hits_addend.is_some() {
        return Err(ConfigError::new("hits_addend", "a hits addend other than 1 is not supported"));
    }
    if apply_on_stream_done {
        return Err(ConfigError::new("apply_on_stream_done", "rate limiting when the stream ends is not supported"));
    }
    if x_ratelimit_option != proto::rate_limit::XRateLimitOption::Unspecified as i32 {
        return Err(ConfigError::new("x_ratelimit_option", "per-policy X-RateLimit headers are not supported"));
    }
    let stage = stage.map_or(0, |s| s.value);
    if stage > 10 {
        return Err(ConfigError::new("stage", format!("{stage} is greater than 10")));
    }
    if actions.is_empty() {
        return Err(ConfigError::new("actions", "at least one action is required"));
    }
    let actions = actions
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            let at = format!("actions[{i}]");
            warnings.within(&at, |w| action(a, w)).map_err(|e| e.at(&at))
        })
        .collect::<Result<_>>()?;
    Ok(RateLimitPolicy { stage, actions })
}

fn action(proto: proto::rate_limit::Action, warnings: &mut Warnings) -> Result<RateLimitAction> {
    use proto::rate_limit::action::ActionSpecifier as A;
    let unsupported = |field: &str, what: &str| Err(ConfigError::new(field, format!("{what} is not supported")));
    match proto.action_specifier {
        None => Err(ConfigError::new("", "an action is required")),
        Some(A::SourceCluster(_)) => unsupported("source_cluster", "the source_cluster action"),
        Some(A::DestinationCluster(_)) => Ok(RateLimitAction::DestinationCluster),
        Some(A::RequestHeaders(h)) => {
            let proto::rate_limit::action::RequestHeaders { header_name, descriptor_key, skip_if_absent } = h;
            if header_name.is_empty() {
                return Err(ConfigError::new("request_headers.header_name", "must not be empty"));
            }
            if descriptor_key.is_empty() {
                return Err(ConfigError::new("request_headers.descriptor_key", "must not be empty"));
            }
            Ok(RateLimitAction::RequestHeaders {
                header_name: header_name.to_ascii_lowercase(),
                descriptor_key,
                skip_if_absent,
            })
        }
        Some(A::RemoteAddress(_)) => Ok(RateLimitAction::RemoteAddress),
        Some(A::GenericKey(g)) => {
            let proto::rate_limit::action::GenericKey { descriptor_value, default_value, descriptor_key } = g;
            if !default_value.is_empty() {
                return unsupported("generic_key.default_value", "a default value");
            }
            if descriptor_value.is_empty() {
                return Err(ConfigError::new("generic_key.descriptor_value", "must not be empty"));
            }
            let descriptor_key = if descriptor_key.is_empty() { "generic_key".to_owned() } else { descriptor_key };
            Ok(RateLimitAction::GenericKey { descriptor_key, descriptor_value })
        }
        Some(A::HeaderValueMatch(m)) => {
            let proto::rate_limit::action::HeaderValueMatch {
                descriptor_value,
                default_value,
                descriptor_key,
                expect_match,
                headers,
            } = m;
            if !default_value.is_empty() {
                return unsupported("header_value_match.default_value", "a default value");
            }
            if descriptor_value.is_empty() {
                return Err(ConfigError::new("header_value_match.descriptor_value", "must not be empty"));
            }
            if headers.is_empty() {
                return Err(ConfigError::new("header_value_match.headers", "at least one header is required"));
            }
            let headers = headers
                .into_iter()
                .enumerate()
                .map(|(i, h)| header_matcher(h, warnings).map_err(|e| e.at(format!("header_value_match.headers[{i}]"))))
                .collect::<Result<_>>()?;
            let descriptor_key = if descriptor_key.is_empty() { "header_match".to_owned() } else { descriptor_key };
            Ok(RateLimitAction::HeaderValueMatch {
                descriptor_key,
                descriptor_value,
                expect_match: expect_match.is_none_or(|b| b.value),
                headers,
            })
        }
        Some(A::MaskedRemoteAddress(m)) => {
            let proto::rate_limit::action::MaskedRemoteAddress { v4_prefix_mask_len, v6_prefix_mask_len } = m;
            let v4 = v4_prefix_mask_len.map_or(32, |v| v.value);
            let v6 = v6_prefix_mask_len.map_or(128, |v| v.value);
            let (Ok(v4_prefix_len @ 0..=32), Ok(v6_prefix_len @ 0..=128)) = (u8::try_from(v4), u8::try_from(v6)) else {
                return Err(ConfigError::new(
                    "masked_remote_address",
                    format!("prefix lengths {v4}/{v6} exceed 32 (IPv4) or 128 (IPv6)"),
                ));
            };
            Ok(RateLimitAction::MaskedRemoteAddress { v4_prefix_len, v6_prefix_len })
        }
        Some(A::QueryParameters(_)) => unsupported("query_parameters", "the query_parameters action"),
        Some(A::DynamicMetadata(_)) => unsupported("dynamic_metadata", "the dynamic_metadata action"),
        Some(A::Metadata(_)) => unsupported("metadata", "the metadata action"),
        Some(A::Extension(_)) => unsupported("extension", "rate-limit descriptor extensions"),
        Some(A::QueryParameterValueMatch(_)) => {
            unsupported("query_parameter_value_match", "the query_parameter_value_match action")
        }
        Some(A::RemoteAddressMatch(_)) => unsupported("remote_address_match", "the remote_address_match action"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::rate_limit::Action;
    use proto::rate_limit::action::{self, ActionSpecifier as A};

    fn policy(actions: Vec<A>) -> proto::RateLimit {
        proto::RateLimit {
            actions: actions.into_iter().map(|a| Action { action_specifier: Some(a) }).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn actions_convert_with_envoy_defaults() {
        let list = vec![policy(vec![
            A::GenericKey(action::GenericKey { descriptor_value: "v".into(), ..Default::default() }),
            A::RequestHeaders(action::RequestHeaders {
                header_name: "X-User".into(),
                descriptor_key: "user".into(),
                skip_if_absent: false,
            }),
            A::MaskedRemoteAddress(action::MaskedRemoteAddress::default()),
        ])];
        let converted = rate_limits(list, "rate_limits", &mut Warnings::new()).unwrap();
        assert_eq!(converted[0].stage, 0);
        assert_eq!(
            converted[0].actions,
            vec![
                RateLimitAction::GenericKey { descriptor_key: "generic_key".into(), descriptor_value: "v".into() },
                RateLimitAction::RequestHeaders {
                    header_name: "x-user".into(),
                    descriptor_key: "user".into(),
                    skip_if_absent: false
                },
                RateLimitAction::MaskedRemoteAddress { v4_prefix_len: 32, v6_prefix_len: 128 },
            ]
        );
    }

    #[test]
    fn unsupported_actions_are_refused_with_their_path() {
        let list = vec![
            policy(vec![A::RemoteAddress(action::RemoteAddress {})]),
            policy(vec![A::RemoteAddress(action::RemoteAddress {}), A::SourceCluster(action::SourceCluster {})]),
        ];
        let error = rate_limits(list, "rate_limits", &mut Warnings::new()).unwrap_err();
        assert!(error.to_string().contains("rate_limits[1].actions[1].source_cluster"), "{error}");
        let list = vec![proto::RateLimit {
            limit: Some(Default::default()),
            ..policy(vec![A::RemoteAddress(action::RemoteAddress {})])
        }];
        let error = rate_limits(list, "rate_limits", &mut Warnings::new()).unwrap_err();
        assert!(error.to_string().contains("rate_limits[0].limit"), "{error}");
    }
}
