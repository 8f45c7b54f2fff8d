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
    /// `custom_match` with `xds.type.matcher.v3.IPMatcher` (the input must be an IP
    /// address): the matching ranges from the longest prefix down, then in declaration
    /// order; one whose `on_match` selects nothing gives way to the next, unless it is
    /// `exclusive`.
    Ip(Vec<IpRangeMatcher>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct IpRangeMatcher {
    pub ranges: Vec<CidrRange>,
    pub on_match: OnMatch,
    /// No less specific range is tried when this one's `on_match` selects nothing.
    pub exclusive: bool,
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
        let found = match (&self.tree, value.as_deref()) {
            (MatchTree::Ip(matchers), Some(value)) => Self::evaluate_ip(matchers, value, input),
            (_, value) => value.and_then(|value| self.lookup(value)).and_then(|on_match| on_match.evaluate(input)),
        };
        found.or_else(|| self.on_no_match.as_ref()?.evaluate(input))
    }

    /// The IP matcher: the first matching range, most specific first, whose `on_match`
    /// selects a chain; an exclusive range that selects none ends the search.
    fn evaluate_ip<'a>(
        matchers: &'a [IpRangeMatcher],
        value: &str,
        input: &impl Fn(NetworkInput) -> Option<String>,
    ) -> Option<&'a str> {
        let ip: IpAddr = value.parse().ok()?;
        let mut candidates: Vec<(u8, usize, &IpRangeMatcher)> = matchers
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let best = m.ranges.iter().filter(|r| r.contains(ip)).map(|r| r.prefix_len).max()?;
                Some((best, i, m))
            })
            .collect();
        // Longest prefix first, then the order of declaration.
        candidates.sort_by_key(|(len, i, _)| (std::cmp::Reverse(*len), *i));
        for (_, _, matcher) in candidates {
            if let Some(chain) = matcher.on_match.evaluate(input) {
                return Some(chain);
            }
            if matcher.exclusive {
                return None;
            }
        }
        None
    }

    fn lookup(&self, value: &str) -> Option<&OnMatch> {
        match &self.tree {
            MatchTree::Exact(map) => map.get(value),
            MatchTree::Prefix(map) => map
                .iter()
                .filter(|(prefix, _)| value.starts_with(prefix.as_str()))
                .max_by_key(|(p, _)| p.len())
                .map(|e| e.1),
            // Evaluated whole by `evaluate_ip`.
            MatchTree::Ip(_) => None,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str, len: u8) -> CidrRange {
        let address = text.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        CidrRange { address, prefix_len: len }
    }

    /// `10.0.0.0/8` (exclusive or not) behind `10.1.0.0/16`, whose nested port matcher
    /// takes port 80 only.
    fn matcher(exclusive: bool) -> FilterChainMatcher {
        let port_80 = Matcher {
            input: NetworkInput::DestinationPort,
            tree: MatchTree::Exact(HashMap::from([("80".to_owned(), OnMatch::FilterChain("specific".into()))])),
            on_no_match: None,
        };
        let ip =
            |text, len, on_match, exclusive| IpRangeMatcher { ranges: vec![range(text, len)], on_match, exclusive };
        FilterChainMatcher {
            root: Matcher {
                input: NetworkInput::DestinationIp,
                tree: MatchTree::Ip(vec![
                    ip("10.0.0.0", 8, OnMatch::FilterChain("wide".into()), false),
                    ip("10.1.0.0", 16, OnMatch::Matcher(Box::new(port_80)), exclusive),
                ]),
                on_no_match: Some(OnMatch::FilterChain("default".into())),
            },
        }
    }

    fn select(matcher: &FilterChainMatcher, ip: &str, port: u16) -> Option<String> {
        let inputs = |input| match input {
            NetworkInput::DestinationIp => Some(ip.to_owned()),
            NetworkInput::DestinationPort => Some(port.to_string()),
            _ => None,
        };
        matcher.select(&inputs).map(str::to_owned)
    }

    #[test]
    fn a_range_whose_nested_match_fails_gives_way_unless_exclusive() {
        let open = matcher(false);
        assert_eq!(select(&open, "10.1.2.3", 80).as_deref(), Some("specific"), "the longest prefix first");
        assert_eq!(select(&open, "10.1.2.3", 81).as_deref(), Some("wide"), "then the less specific range");
        assert_eq!(select(&open, "10.9.9.9", 81).as_deref(), Some("wide"));
        assert_eq!(select(&open, "192.168.0.1", 80).as_deref(), Some("default"), "no range: on_no_match");
        let exclusive = matcher(true);
        assert_eq!(select(&exclusive, "10.1.2.3", 80).as_deref(), Some("specific"));
        assert_eq!(select(&exclusive, "10.1.2.3", 81).as_deref(), Some("default"), "no fall back past it");
    }
}
