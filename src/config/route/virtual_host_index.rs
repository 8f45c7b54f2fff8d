//! Finding a request's virtual host in time that does not grow with the number of virtual
//! hosts: exact domains in a hash map, wildcard domains in hash maps grouped by the length
//! of their fixed part (longest first, as Envoy's ordered wildcard maps), then `*`. With
//! Istio's route tables (thousands of virtual hosts on one port, several domain spellings
//! each) a scan of every domain was the largest per-request cost.

use std::borrow::Cow;
use std::collections::HashMap;

use super::DomainMatcher;

/// Positions in `RouteConfiguration.virtual_hosts`, by domain.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VirtualHostIndex {
    exact: HashMap<String, usize>,
    /// `*.example.com`: by the length of the fixed part, longest first.
    suffixes: Vec<(usize, HashMap<String, usize>)>,
    /// `example.*`: by the length of the fixed part, longest first.
    prefixes: Vec<(usize, HashMap<String, usize>)>,
    any: Option<usize>,
}

impl VirtualHostIndex {
    /// Indexes the domains of each virtual host (its position in the list). Domains are
    /// unique across a configuration (conversion refuses duplicates, as Envoy does); were
    /// one repeated, the first virtual host keeps it.
    pub fn new<'a>(domains: impl IntoIterator<Item = (usize, &'a DomainMatcher)>) -> Self {
        let mut index = Self::default();
        let mut suffixes: HashMap<usize, HashMap<String, usize>> = HashMap::new();
        let mut prefixes: HashMap<usize, HashMap<String, usize>> = HashMap::new();
        for (position, domain) in domains {
            match domain {
                DomainMatcher::Exact(d) => _ = index.exact.entry(d.clone()).or_insert(position),
                DomainMatcher::Suffix(s) => {
                    _ = suffixes.entry(s.len()).or_default().entry(s.clone()).or_insert(position)
                }
                DomainMatcher::Prefix(p) => {
                    _ = prefixes.entry(p.len()).or_default().entry(p.clone()).or_insert(position)
                }
                DomainMatcher::Any => _ = index.any.get_or_insert(position),
            }
        }
        index.suffixes = longest_first(suffixes);
        index.prefixes = longest_first(prefixes);
        index
    }

    /// The virtual host for `host` (already without a port if the configuration ignores
    /// ports), by Envoy's precedence: exact, then the longest suffix wildcard, then the
    /// longest prefix wildcard, then `*`. A wildcard matches at least one character.
    pub fn find(&self, host: &str) -> Option<usize> {
        let host: Cow<'_, str> = if host.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(host.to_ascii_lowercase())
        } else {
            Cow::Borrowed(host)
        };
        let host = host.as_ref();
        if let Some(&position) = self.exact.get(host) {
            return Some(position);
        }
        for (len, by_suffix) in &self.suffixes {
            if host.len() > *len
                && let Some(suffix) = host.get(host.len() - len..)
                && let Some(&position) = by_suffix.get(suffix)
            {
                return Some(position);
            }
        }
        for (len, by_prefix) in &self.prefixes {
            if host.len() > *len
                && let Some(prefix) = host.get(..*len)
                && let Some(&position) = by_prefix.get(prefix)
            {
                return Some(position);
            }
        }
        self.any
    }
}

fn longest_first(groups: HashMap<usize, HashMap<String, usize>>) -> Vec<(usize, HashMap<String, usize>)> {
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_unstable_by_key(|(len, _)| std::cmp::Reverse(*len));
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(domains: &[&str]) -> (VirtualHostIndex, Vec<DomainMatcher>) {
        let parsed: Vec<_> = domains.iter().map(|d| DomainMatcher::parse(d)).collect();
        (VirtualHostIndex::new(parsed.iter().enumerate()), parsed)
    }

    /// The index agrees with the definition: the best-ranked matching domain.
    fn by_scan(domains: &[DomainMatcher], host: &str) -> Option<usize> {
        let host = host.to_ascii_lowercase();
        let rank = |d: &DomainMatcher| match d {
            DomainMatcher::Exact(_) => (3, usize::MAX),
            DomainMatcher::Suffix(s) => (2, s.len()),
            DomainMatcher::Prefix(p) => (1, p.len()),
            DomainMatcher::Any => (0, 0),
        };
        domains.iter().enumerate().filter(|(_, d)| d.matches(&host)).max_by_key(|(_, d)| rank(d)).map(|(i, _)| i)
    }

    #[test]
    fn precedence_is_envoys() {
        let domains = [
            "*",
            "api.example.com",
            "*.example.com",
            "*-bar.example.com",
            "api.*",
            "api.example.*",
            "*.com",
            "Mixed.Case",
        ];
        let (index, parsed) = index(&domains);
        for host in [
            "api.example.com",
            "API.EXAMPLE.COM",
            "www.example.com",
            "foo-bar.example.com",
            "-bar.example.com",
            "api.example.org",
            "api.other",
            "api.",
            "x.com",
            ".com",
            "com",
            "mixed.case",
            "example.com",
            "",
        ] {
            assert_eq!(index.find(host), by_scan(&parsed, host), "{host}");
        }
        assert_eq!(index.find("www.example.com"), Some(2));
        assert_eq!(index.find("foo-bar.example.com"), Some(3), "the longer suffix wins");
        assert_eq!(index.find("api.example.org"), Some(5), "the longer prefix wins");
        assert_eq!(index.find(".example.com"), Some(6), "a wildcard needs one character: *.com");
    }

    #[test]
    fn without_a_default_an_unknown_host_finds_nothing() {
        let (index, _) = index(&["a.example", "*.b.example"]);
        assert_eq!(index.find("c.example"), None);
        assert_eq!(index.find(".b.example"), None);
    }
}
