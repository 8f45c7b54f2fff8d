//! istiod's name table (NDS, `istio.networking.nds.v1.NameTable`) as the answers the DNS
//! proxy gives, built as pilot-agent builds them:
//! - a Kubernetes service answers to its FQDN, `name.namespace`, `name.namespace.svc` and,
//!   in the pod's own namespace, `name`; any other host to itself only;
//! - each such name with the first search domain of the pod's `resolv.conf` appended (the
//!   first query a resolver sends for a short name) answers with a CNAME to the name, so a
//!   client's search ends after one round trip;
//! - `*.example.com` answers every name under it;
//! - a known name answers A and AAAA from the table (an empty answer, not NXDOMAIN, when it
//!   has no address of the family); other types, and unknown names, go to the pod's
//!   resolvers.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One entry of the name table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameInfo {
    pub ips: Vec<String>,
    /// `Kubernetes` for services of the Kubernetes registry.
    pub registry: String,
    /// The service's name (Kubernetes only).
    pub shortname: String,
    /// The service's namespace (Kubernetes only).
    pub namespace: String,
}

/// Where the pod is: its namespace, its cluster's DNS domain (`svc.cluster.local`) and its
/// resolver's search domains.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodDns {
    pub namespace: String,
    /// The domain without the namespace (`svc.cluster.local`), as pilot-agent trims it.
    pub domain: String,
    pub search: Vec<String>,
}

impl PodDns {
    /// From the pod's namespace, the proxy's DNS domain (`ns.svc.cluster.local`, whose
    /// leading namespace is dropped) and the search domains.
    pub fn new(namespace: &str, proxy_domain: &str, search: Vec<String>) -> Self {
        let domain = proxy_domain.strip_prefix(namespace).and_then(|d| d.strip_prefix('.')).unwrap_or(proxy_domain);
        Self { namespace: namespace.to_owned(), domain: domain.to_owned(), search }
    }
}

/// The time to live of every answer from the table (pilot-agent's).
pub const TTL_SECONDS: u32 = 30;

/// A record of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    A { name: String, ip: Ipv4Addr },
    Aaaa { name: String, ip: Ipv6Addr },
    Cname { name: String, target: String },
}

/// The kind of question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryType {
    A,
    Aaaa,
    Other,
}

/// Names (lower case, ending with a dot) and their answers.
#[derive(Debug, Default)]
pub struct LookupTable {
    hosts: HashSet<String>,
    v4: HashMap<String, Vec<Ipv4Addr>>,
    v6: HashMap<String, Vec<Ipv6Addr>>,
    cname: HashMap<String, String>,
}

impl LookupTable {
    /// The table for `entries` (host → info) of a pod at `pod`. Entries without a valid
    /// address are left out, as pilot-agent leaves them.
    pub fn build<'a>(entries: impl IntoIterator<Item = (&'a str, &'a NameInfo)>, pod: &PodDns) -> Self {
        let mut table = LookupTable::default();
        for (host, info) in entries {
            let names = if info.registry == "Kubernetes" {
                kubernetes_names(host, info, pod)
            } else {
                vec![if host.ends_with('.') { host.to_owned() } else { format!("{host}.") }]
            };
            let ips: Vec<IpAddr> = info.ips.iter().filter_map(|ip| ip.parse().ok()).collect();
            if ips.is_empty() {
                continue;
            }
            table.insert(&names, &ips, pod.search.first().map(String::as_str));
        }
        table
    }

    fn insert(&mut self, names: &[String], ips: &[IpAddr], first_search: Option<&str>) {
        let v4: Vec<Ipv4Addr> =
            ips.iter().filter_map(|ip| if let IpAddr::V4(ip) = ip { Some(*ip) } else { None }).collect();
        let v6: Vec<Ipv6Addr> =
            ips.iter().filter_map(|ip| if let IpAddr::V6(ip) = ip { Some(*ip) } else { None }).collect();
        for name in names {
            let name = name.to_ascii_lowercase();
            self.hosts.insert(name.clone());
            if !v4.is_empty() {
                self.v4.insert(name.clone(), v4.clone());
            }
            if !v6.is_empty() {
                self.v6.insert(name.clone(), v6.clone());
            }
            // The name with the first search domain: a CNAME to the name itself, unless it
            // is one of the entry's own names.
            let Some(search) = first_search.filter(|s| !name.ends_with(&format!("{}.", s.trim_end_matches('.'))))
            else {
                continue;
            };
            let expanded = format!("{name}{}.", search.trim_end_matches('.')).to_ascii_lowercase();
            if !names.iter().any(|n| n.eq_ignore_ascii_case(&expanded)) {
                self.cname.insert(expanded.clone(), name.clone());
                self.hosts.insert(expanded);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// The answer to `qtype` for `question` (lower case, ending with a dot): `None` when
    /// the table does not know the name (or the type), which the pod's resolvers then
    /// answer; `Some` of possibly no records when it does.
    pub fn lookup(&self, qtype: QueryType, question: &str) -> Option<Vec<Record>> {
        let mut name = question.to_owned();
        let mut wildcard = false;
        if !self.hosts.contains(&name) {
            let labels: Vec<&str> = question.trim_end_matches('.').split('.').collect();
            let found = (0..labels.len())
                .map(|i| format!("*.{}.", labels[i + 1..].join(".")))
                .find(|candidate| self.hosts.contains(candidate))?;
            name = found;
            wildcard = true;
        }
        let mut cname = Vec::new();
        if let Some(target) = self.cname.get(&name) {
            cname.push(Record::Cname { name: question.to_owned(), target: target.clone() });
            name = target.clone();
        }
        // A wildcard's records carry the question's name, or the CNAME's target after one.
        let owner = if wildcard && cname.is_empty() { question.to_owned() } else { name.clone() };
        let addresses: Vec<Record> = match qtype {
            QueryType::A => {
                self.v4.get(&name).into_iter().flatten().map(|ip| Record::A { name: owner.clone(), ip: *ip }).collect()
            }
            QueryType::Aaaa => self
                .v6
                .get(&name)
                .into_iter()
                .flatten()
                .map(|ip| Record::Aaaa { name: owner.clone(), ip: *ip })
                .collect(),
            QueryType::Other => return None,
        };
        if addresses.is_empty() {
            return Some(Vec::new());
        }
        cname.extend(addresses);
        Some(cname)
    }
}

/// The names of a Kubernetes service: its FQDN and, when it is in the pod's cluster domain,
/// `name.namespace`, `name.namespace.svc` (the domain's first label) and, in the pod's own
/// namespace, `name`.
fn kubernetes_names(host: &str, info: &NameInfo, pod: &PodDns) -> Vec<String> {
    if host.ends_with('.') {
        return Vec::new();
    }
    let mut names = vec![format!("{host}.")];
    if pod.domain.is_empty() || !host.ends_with(&pod.domain) {
        return names;
    }
    names.push(format!("{}.{}.", info.shortname, info.namespace));
    if pod.namespace == info.namespace {
        names.push(format!("{}.", info.shortname));
    }
    let first_label = pod.domain.split('.').next().unwrap_or_default();
    names.push(format!("{}.{}.{first_label}.", info.shortname, info.namespace));
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> PodDns {
        PodDns::new(
            "ns1",
            "ns1.svc.cluster.local",
            vec!["ns1.svc.cluster.local".into(), "svc.cluster.local".into(), "cluster.local".into()],
        )
    }

    fn info(ips: &[&str], registry: &str, shortname: &str, namespace: &str) -> NameInfo {
        NameInfo {
            ips: ips.iter().map(|s| (*s).to_owned()).collect(),
            registry: registry.into(),
            shortname: shortname.into(),
            namespace: namespace.into(),
        }
    }

    fn table() -> LookupTable {
        let entries = [
            ("productpage.ns1.svc.cluster.local", info(&["10.0.0.1"], "Kubernetes", "productpage", "ns1")),
            ("reviews.ns2.svc.cluster.local", info(&["10.0.0.2", "fd00::2"], "Kubernetes", "reviews", "ns2")),
            ("www.example.com", info(&["240.240.0.1"], "External", "", "")),
            ("*.wild.example.com", info(&["240.240.0.2"], "External", "", "")),
            ("broken.example.com", info(&["not-an-ip"], "External", "", "")),
        ];
        LookupTable::build(entries.iter().map(|(h, i)| (*h, i)), &pod())
    }

    fn a(name: &str, ip: &str) -> Record {
        Record::A { name: name.into(), ip: ip.parse().unwrap() }
    }

    #[test]
    fn a_kubernetes_service_answers_to_its_short_forms() {
        let t = table();
        for name in ["productpage.ns1.svc.cluster.local.", "productpage.ns1.", "productpage.", "productpage.ns1.svc."] {
            assert_eq!(t.lookup(QueryType::A, name), Some(vec![a(name, "10.0.0.1")]), "{name}");
        }
        // Another namespace's service has no bare short name here.
        assert_eq!(t.lookup(QueryType::A, "reviews."), None);
        assert_eq!(t.lookup(QueryType::A, "reviews.ns2."), Some(vec![a("reviews.ns2.", "10.0.0.2")]));
    }

    #[test]
    fn the_first_search_domain_gives_a_cname_to_the_name() {
        let t = table();
        let answer = t.lookup(QueryType::A, "www.example.com.ns1.svc.cluster.local.").unwrap();
        assert_eq!(
            answer,
            vec![
                Record::Cname {
                    name: "www.example.com.ns1.svc.cluster.local.".into(),
                    target: "www.example.com.".into()
                },
                a("www.example.com.", "240.240.0.1"),
            ]
        );
    }

    #[test]
    fn families_wildcards_and_what_goes_upstream() {
        let t = table();
        // A known name without an address of the family: an empty answer, not a referral.
        assert_eq!(t.lookup(QueryType::Aaaa, "www.example.com."), Some(Vec::new()));
        assert_eq!(
            t.lookup(QueryType::Aaaa, "reviews.ns2.svc.cluster.local."),
            Some(vec![Record::Aaaa { name: "reviews.ns2.svc.cluster.local.".into(), ip: "fd00::2".parse().unwrap() }])
        );
        assert_eq!(
            t.lookup(QueryType::A, "api.wild.example.com."),
            Some(vec![a("api.wild.example.com.", "240.240.0.2")])
        );
        assert_eq!(t.lookup(QueryType::Other, "www.example.com."), None);
        assert_eq!(t.lookup(QueryType::A, "unknown.example.org."), None);
        assert_eq!(t.lookup(QueryType::A, "broken.example.com."), None, "an entry without a valid address is left out");
    }
}
