//! Descriptors from `rate_limits` entries, as Envoy builds them: each entry's actions make
//! one descriptor, in order; an action that cannot produce its entry drops the whole
//! descriptor (a `request_headers` action with `skip_if_absent` only drops its own entry).

use std::net::IpAddr;

use crate::config::route::{RateLimitAction, RateLimitPolicy};
use crate::proxy::router::request_header_value;

/// What the actions read from the request.
pub struct DescriptorInput<'a> {
    pub parts: &'a http::request::Parts,
    /// The trusted client address (Envoy's downstream remote address).
    pub remote_ip: IpAddr,
    /// The route's cluster, when known.
    pub cluster: Option<&'a str>,
}

pub type Descriptor = Vec<(String, String)>;

/// The descriptors of `policies` that apply to `stage` (`None`: all, for the filter's and
/// per-route lists, which have no stage).
pub fn descriptors(policies: &[RateLimitPolicy], stage: Option<u32>, input: &DescriptorInput<'_>) -> Vec<Descriptor> {
    policies
        .iter()
        .filter(|p| stage.is_none_or(|s| s == p.stage))
        .filter_map(|p| descriptor(&p.actions, input))
        .filter(|d| !d.is_empty())
        .collect()
}

fn descriptor(actions: &[RateLimitAction], input: &DescriptorInput<'_>) -> Option<Descriptor> {
    let mut entries = Vec::with_capacity(actions.len());
    for action in actions {
        match action {
            RateLimitAction::DestinationCluster => {
                entries.push(("destination_cluster".to_owned(), input.cluster?.to_owned()));
            }
            RateLimitAction::RequestHeaders { header_name, descriptor_key, skip_if_absent } => {
                match first_value(input.parts, header_name) {
                    Some(value) => entries.push((descriptor_key.clone(), value)),
                    None if *skip_if_absent => {}
                    None => return None,
                }
            }
            RateLimitAction::RemoteAddress => entries.push(("remote_address".to_owned(), input.remote_ip.to_string())),
            RateLimitAction::GenericKey { descriptor_key, descriptor_value } => {
                entries.push((descriptor_key.clone(), descriptor_value.clone()));
            }
            RateLimitAction::HeaderValueMatch { descriptor_key, descriptor_value, expect_match, headers } => {
                let matched = headers.iter().all(|m| m.matches(request_header_value(input.parts, &m.name).as_deref()));
                if matched != *expect_match {
                    return None;
                }
                entries.push((descriptor_key.clone(), descriptor_value.clone()));
            }
            RateLimitAction::MaskedRemoteAddress { v4_prefix_len, v6_prefix_len } => {
                entries.push((
                    "masked_remote_address".to_owned(),
                    masked(input.remote_ip, *v4_prefix_len, *v6_prefix_len),
                ));
            }
        }
    }
    Some(entries)
}

/// A header's first value (Envoy's `request_headers` action reads only that one); the
/// pseudo-headers as the router sees them.
fn first_value(parts: &http::request::Parts, name: &str) -> Option<String> {
    if name.starts_with(':') {
        return request_header_value(parts, name).map(std::borrow::Cow::into_owned);
    }
    parts.headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// `address/length` with the host bits cleared, as Envoy's `CidrRange::asString`.
fn masked(ip: IpAddr, v4_len: u8, v6_len: u8) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let len = u32::from(v4_len.min(32));
            let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
            format!("{}/{len}", std::net::Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => {
            let len = u32::from(v6_len.min(128));
            let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
            format!("{}/{len}", std::net::Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::route::{HeaderMatch, HeaderMatcher};

    fn parts(headers: &[(&str, &str)]) -> http::request::Parts {
        let mut builder = http::Request::get("/p?q=1");
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        builder.body(()).unwrap().into_parts().0
    }

    fn policy(actions: Vec<RateLimitAction>) -> RateLimitPolicy {
        RateLimitPolicy { stage: 0, actions }
    }

    fn header(name: &str, skip_if_absent: bool) -> RateLimitAction {
        RateLimitAction::RequestHeaders { header_name: name.into(), descriptor_key: name.into(), skip_if_absent }
    }

    #[test]
    fn actions_build_entries_in_order_and_a_missing_header_drops_the_descriptor() {
        let parts = parts(&[("x-user", "alice"), ("x-user", "bob")]);
        let input = DescriptorInput { parts: &parts, remote_ip: "10.1.2.3".parse().unwrap(), cluster: Some("backend") };
        let policies = vec![
            policy(vec![RateLimitAction::DestinationCluster, header("x-user", false), RateLimitAction::RemoteAddress]),
            policy(vec![header("x-missing", false), RateLimitAction::RemoteAddress]),
            policy(vec![
                header("x-missing", true),
                RateLimitAction::MaskedRemoteAddress { v4_prefix_len: 16, v6_prefix_len: 64 },
            ]),
            policy(vec![header("x-missing", true)]),
        ];
        let got = descriptors(&policies, Some(0), &input);
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(
            got,
            vec![
                vec![
                    pair("destination_cluster", "backend"),
                    pair("x-user", "alice"),
                    pair("remote_address", "10.1.2.3")
                ],
                vec![pair("masked_remote_address", "10.1.0.0/16")],
            ]
        );
        assert!(descriptors(&policies, Some(1), &input).is_empty(), "other stages do not apply");
    }

    #[test]
    fn header_value_match_honours_expect_match() {
        let parts = parts(&[("x-tier", "gold")]);
        let input = DescriptorInput { parts: &parts, remote_ip: "::1".parse().unwrap(), cluster: None };
        let matcher = HeaderMatcher {
            name: "x-tier".into(),
            rule: HeaderMatch::Present(true),
            invert_match: false,
            treat_missing_header_as_empty: false,
        };
        let action = |expect_match| RateLimitAction::HeaderValueMatch {
            descriptor_key: "header_match".into(),
            descriptor_value: "tiered".into(),
            expect_match,
            headers: vec![matcher.clone()],
        };
        assert_eq!(descriptors(&[policy(vec![action(true)])], None, &input).len(), 1);
        assert!(descriptors(&[policy(vec![action(false)])], None, &input).is_empty());
        let got = descriptors(&[policy(vec![RateLimitAction::DestinationCluster])], None, &input);
        assert!(got.is_empty(), "no known cluster, no descriptor");
        assert_eq!(masked("2001:db8::1".parse().unwrap(), 32, 64), "2001:db8::/64");
    }
}
