//! `Listener.filter_chain_matcher` (`xds.type.matcher.v3.Matcher`) → [`FilterChainMatcher`].
//!
//! Supported: matcher trees (exact, prefix, and `xds.type.matcher.v3.IPMatcher` custom
//! match) over the network inputs, nested to any depth, whose actions name a filter chain
//! (`google.protobuf.StringValue`). Matcher lists are refused.

use std::collections::HashMap;

use envoy_types::pb::xds;

use super::super::common::cidr;
use super::super::common::type_name;
use crate::config::error::{ConfigError, Result};
use crate::config::listener::chain_matcher::{
    FilterChainMatcher, IpRangeMatcher, MatchTree, Matcher, NetworkInput, OnMatch,
};
use crate::pb::google::protobuf as gpb;

use xds::r#type::matcher::v3 as proto;

const INPUTS: &str = "envoy.extensions.matching.common_inputs.network.v3.";

/// `xds.type.matcher.v3.IPMatcher`, which `envoy-types` does not generate: declared here
/// with its published field numbers so that binary xDS can carry it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IpMatcher {
    #[prost(message, repeated, tag = "1")]
    pub range_matchers: Vec<IpRangeMatcherProto>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct IpRangeMatcherProto {
    #[prost(message, repeated, tag = "1")]
    pub ranges: Vec<xds::core::v3::CidrRange>,
    #[prost(message, optional, tag = "2")]
    pub on_match: Option<proto::matcher::OnMatch>,
    #[prost(bool, tag = "3")]
    pub exclusive: bool,
}

impl prost::Name for IpMatcher {
    const NAME: &'static str = "IPMatcher";
    const PACKAGE: &'static str = "xds.type.matcher.v3";

    fn type_url() -> String {
        "type.googleapis.com/xds.type.matcher.v3.IPMatcher".into()
    }
}

pub fn filter_chain_matcher(proto: proto::Matcher) -> Result<FilterChainMatcher> {
    Ok(FilterChainMatcher { root: matcher(proto)? })
}

fn matcher(proto: proto::Matcher) -> Result<Matcher> {
    use proto::matcher::MatcherType as T;
    use proto::matcher::matcher_tree::TreeType;
    let proto::Matcher { on_no_match, matcher_type } = proto;
    let tree = match matcher_type {
        Some(T::MatcherTree(tree)) => tree,
        Some(T::MatcherList(_)) => return Err(ConfigError::new("matcher_list", "matcher lists are not supported")),
        None => return Err(ConfigError::new("matcher_tree", "is required")),
    };
    let proto::matcher::MatcherTree { input, tree_type } = tree;
    let input = network_input(input.as_ref()).map_err(|e| e.at("matcher_tree.input"))?;
    let map = |m: proto::matcher::matcher_tree::MatchMap, field: &str| {
        m.map
            .into_iter()
            .map(|(key, value)| Ok((key.clone(), on_match(value).map_err(|e| e.at(format!("{field}.map[{key}]")))?)))
            .collect::<Result<HashMap<_, _>>>()
    };
    let tree = match tree_type {
        Some(TreeType::ExactMatchMap(m)) => MatchTree::Exact(map(m, "exact_match_map")?),
        Some(TreeType::PrefixMatchMap(m)) => MatchTree::Prefix(map(m, "prefix_match_map")?),
        Some(TreeType::CustomMatch(custom)) => MatchTree::Ip(ip_matcher(custom).map_err(|e| e.at("custom_match"))?),
        None => return Err(ConfigError::new("matcher_tree", "a match map is required")),
    };
    let on_no_match = on_no_match.map(|m| on_match(*m).map_err(|e| e.at("on_no_match"))).transpose()?;
    Ok(Matcher { input, tree, on_no_match })
}

fn ip_matcher(custom: xds::core::v3::TypedExtensionConfig) -> Result<Vec<IpRangeMatcher>> {
    let any = custom.typed_config.ok_or_else(|| ConfigError::new("typed_config", "is required"))?;
    let matcher = super::super::common::unpack::<IpMatcher>(&gpb::Any { type_url: any.type_url, value: any.value })
        .map_err(|e| e.at("typed_config"))?;
    matcher
        .range_matchers
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let at = format!("typed_config.range_matchers[{i}]");
            let IpRangeMatcherProto { ranges, on_match: next, exclusive } = m;
            let ranges = ranges
                .iter()
                .enumerate()
                .map(|(j, r)| {
                    cidr(&r.address_prefix, r.prefix_len.map(|p| p.value))
                        .map_err(|e| e.at(format!("{at}.ranges[{j}]")))
                })
                .collect::<Result<Vec<_>>>()?;
            let next = next.ok_or_else(|| ConfigError::new(format!("{at}.on_match"), "is required"))?;
            let on_match = on_match(next).map_err(|e| e.at(format!("{at}.on_match")))?;
            Ok(IpRangeMatcher { ranges, on_match, exclusive })
        })
        .collect()
}

fn on_match(proto: proto::matcher::OnMatch) -> Result<OnMatch> {
    use proto::matcher::on_match::OnMatch as O;
    let proto::matcher::OnMatch { keep_matching, on_match } = proto;
    if keep_matching {
        return Err(ConfigError::new("keep_matching", "is not supported"));
    }
    match on_match {
        Some(O::Matcher(m)) => Ok(OnMatch::Matcher(Box::new(matcher(*m).map_err(|e| e.at("matcher"))?))),
        Some(O::Action(action)) => {
            let any = action.typed_config.ok_or_else(|| ConfigError::new("action.typed_config", "is required"))?;
            let name = super::super::common::unpack::<gpb::StringValue>(&gpb::Any {
                type_url: any.type_url,
                value: any.value,
            })
            .map_err(|e| e.at("action.typed_config"))?;
            Ok(OnMatch::FilterChain(name.value))
        }
        None => Err(ConfigError::new("", "one of matcher and action is required")),
    }
}

fn network_input(input: Option<&xds::core::v3::TypedExtensionConfig>) -> Result<NetworkInput> {
    let any =
        input.and_then(|i| i.typed_config.as_ref()).ok_or_else(|| ConfigError::new("typed_config", "is required"))?;
    let name = type_name(&any.type_url);
    let short = name.strip_prefix(INPUTS).unwrap_or("");
    Ok(match short {
        "DestinationIPInput" => NetworkInput::DestinationIp,
        "DestinationPortInput" => NetworkInput::DestinationPort,
        "SourceIPInput" => NetworkInput::SourceIp,
        "SourcePortInput" => NetworkInput::SourcePort,
        "DirectSourceIPInput" => NetworkInput::DirectSourceIp,
        "SourceTypeInput" => NetworkInput::SourceType,
        "ServerNameInput" => NetworkInput::ServerName,
        "TransportProtocolInput" => NetworkInput::TransportProtocol,
        "ApplicationProtocolInput" => NetworkInput::ApplicationProtocol,
        _ => return Err(ConfigError::new("typed_config", format!("unsupported matching input {name}"))),
    })
}
