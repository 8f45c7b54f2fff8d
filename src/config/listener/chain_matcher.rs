//! `Listener.filter_chain_matcher`: the unified matcher API selecting a filter chain by
//! name from connection properties. Istio's waypoints and ambient listeners use it
//! instead of `filter_chain_match`.

use std::collections::HashMap;
use std::net::IpAddr;

use super::CidrRange;

/// The root of the matcher; evaluating it yields the name of a filter chain.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterChainMatcher {
    pub root: Matcher,
}

/// `xds.type.matcher.v3.Matcher` restricted to what filter-chain selection uses: a
/// matcher tree over one network input.
#[derive(Debug, Clone, PartialEq)]
pub struct Matcher {
    pub input: NetworkInput,
    pub tree: MatchTree,
    pub on_no_match: Option<OnMatch>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum MatchTree {
    /// `exact_match_map`.
    Exact(HashMap<String, OnMatch>),
    /// `prefix_match_map`: the longest matching prefix wins.
    Prefix(HashMap<String, OnMatch>),
    /// `custom_match` with `xds.type.matcher.v3.IPMatcher`: the longest matching range
    /// wins (the input must be an IP address).
    Ip(Vec<IpRangeMatcher>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct IpRangeMatcher {
    pub ranges: Vec<CidrRange>,
    pub on_match: OnMatch,
}

#[derive(Debug, Clone, PartialEq)]
pub enum OnMatch {
    /// The action: the name of the filter chain to use.
    FilterChain(String),
    Matcher(Box<Matcher>),
}

/// `envoy.extensions.matching.common_inputs.network.v3.*Input`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetworkInput {
    DestinationIp,
    DestinationPort,
    SourceIp,
    SourcePort,
    DirectSourceIp,
    /// `local`, or absent when the source is not the same IP or loopback.
    SourceType,
    ServerName,
    TransportProtocol,
    /// Envoy's form: each protocol in single quotes, joined by commas (`'h2','http/1.1'`).
    ApplicationProtocol,
}

impl FilterChainMatcher {
    /// The filter chain selected for a connection whose inputs `input` gives (`None` for
    /// an input the connection does not have). `None`: no chain; use the default chain.
    pub fn select<'a>(&'a self, input: &impl Fn(NetworkInput) -> Option<String>) -> Option<&'a str> {
        self.root.evaluate(input)
    }
}

impl Matcher {
    fn evaluate<'a>(&'a self, input: &impl Fn(NetworkInput) -> Option<String>) -> Option<&'a str> {
        let value = input(self.input);
        let found = value.as_deref().and_then(|value| self.lookup(value));
        found.and_then(|on_match| on_match.evaluate(input)).or_else(|| self.on_no_match.as_ref()?.evaluate(input))
    }

    fn lookup(&self, value: &str) -> Option<&OnMatch> {
        match &self.tree {
            MatchTree::Exact(map) => map.get(value),
            MatchTree::Prefix(map) => map
                .iter()
                .filter(|(prefix, _)| value.starts_with(prefix.as_str()))
                .max_by_key(|(p, _)| p.len())
                .map(|e| e.1),
            MatchTree::Ip(matchers) => {
                let ip: IpAddr = value.parse().ok()?;
                matchers
                    .iter()
                    .filter_map(|m| {
                        let best = m.ranges.iter().filter(|r| r.contains(ip)).map(|r| r.prefix_len).max()?;
                        Some((best, &m.on_match))
                    })
                    .max_by_key(|(len, _)| *len)
                    .map(|(_, on_match)| on_match)
            }
        }
    }

    /// Every filter chain name this matcher can select.
    pub fn chain_names(&self) -> Vec<&str> {
        let mut out = Vec::new();
        let on_matches: Vec<&OnMatch> = match &self.tree {
            MatchTree::Exact(map) | MatchTree::Prefix(map) => map.values().collect(),
            MatchTree::Ip(matchers) => matchers.iter().map(|m| &m.on_match).collect(),
        };
        for on_match in on_matches.into_iter().chain(self.on_no_match.as_ref()) {
            match on_match {
                OnMatch::FilterChain(name) => out.push(name.as_str()),
                OnMatch::Matcher(m) => out.extend(m.chain_names()),
            }
        }
        out
    }
}

impl OnMatch {
    fn evaluate<'a>(&'a self, input: &impl Fn(NetworkInput) -> Option<String>) -> Option<&'a str> {
        match self {
            OnMatch::FilterChain(name) => Some(name),
            OnMatch::Matcher(matcher) => matcher.evaluate(input),
        }
    }
}
