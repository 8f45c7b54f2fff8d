//! pilot-agent's DNS proxy, in-process (`ISTIO_META_DNS_CAPTURE=true`): istiod's name table
//! arrives on the proxy's own ADS stream (the relay asks for it and keeps it from the
//! proxy, see `xds_proxy`), and a resolver on 15053 answers the mesh's names from it and
//! relays every other question to the pod's resolvers. `outrider capture --redirect-dns`
//! sends the pod's DNS there, as istio-iptables does.
//!
//! - [`table`]: the name table as answers, as pilot-agent builds them.
//! - [`server`]: the resolver (UDP and TCP).

pub mod server;
pub mod table;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use prost::Message;

use crate::core::shutdown::Signal;
use crate::pb::google::protobuf::Any;
use crate::pb::istio_nds::NameTable;
use server::DnsProxy;
use table::{LookupTable, NameInfo, PodDns};

/// The type of istiod's name table on ADS.
pub const NAME_TABLE_TYPE: &str = "type.googleapis.com/istio.networking.nds.v1.NameTable";

/// pilot-agent's DNS proxy address (`DNS_PROXY_ADDR` overrides it).
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:15053";

/// Where and for whom the DNS proxy runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsSettings {
    pub address: SocketAddr,
    /// The address was pilot-agent's `localhost`: the proxy also answers on `::1` when the
    /// pod has IPv6 resolvers (whose captured queries are redirected there).
    pub localhost: bool,
    /// The pod's namespace (`POD_NAMESPACE`).
    pub namespace: String,
    /// The proxy's DNS domain: `<namespace>.svc.cluster.local`, as pilot-agent defaults it.
    pub domain: String,
    /// The pod's resolver configuration: its nameservers and search domains.
    pub resolv_conf: PathBuf,
}

impl DnsSettings {
    /// From pilot-agent's environment: on when `ISTIO_META_DNS_CAPTURE` is `true`.
    pub fn from_env(env: &BTreeMap<String, String>, namespace: &str) -> Result<Option<Self>, String> {
        let get = |key: &str| env.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        if get("ISTIO_META_DNS_CAPTURE") != Some("true") {
            return Ok(None);
        }
        let text = get("DNS_PROXY_ADDR").unwrap_or(DEFAULT_ADDRESS);
        let localhost = text.starts_with("localhost:") || text == DEFAULT_ADDRESS;
        let text = text.strip_prefix("localhost:").map_or_else(|| text.to_owned(), |port| format!("127.0.0.1:{port}"));
        let address = text.parse().map_err(|_| format!("DNS_PROXY_ADDR: {text:?} is not an address"))?;
        Ok(Some(Self {
            address,
            localhost,
            namespace: namespace.to_owned(),
            domain: format!("{namespace}.svc.cluster.local"),
            resolv_conf: PathBuf::from(get("OUTRIDER_RESOLV_CONF").unwrap_or("/etc/resolv.conf")),
        }))
    }
}

/// The running DNS proxy, fed with name tables by the xDS relay.
#[derive(Debug)]
pub struct Dns {
    proxy: Arc<DnsProxy>,
    pod: PodDns,
    /// The address it answers on.
    pub address: SocketAddr,
}

impl Dns {
    /// Reads the pod's resolvers and serves on the settings' address until `stopped`. Must
    /// run inside a Tokio runtime.
    pub fn start(settings: &DnsSettings, stopped: Signal) -> std::io::Result<Arc<Dns>> {
        let (upstreams, search) = match std::fs::read(&settings.resolv_conf) {
            Ok(text) => resolvers(&text),
            Err(error) => {
                tracing::warn!(path = %settings.resolv_conf.display(), %error, "no resolv.conf: names outside the mesh fail");
                (Vec::new(), Vec::new())
            }
        };
        let ipv6_resolvers = upstreams.iter().any(SocketAddr::is_ipv6);
        let proxy = DnsProxy::new(upstreams);
        let address = server::serve(settings.address, proxy.clone(), stopped.clone())?;
        tracing::info!(%address, "DNS proxy serving");
        if settings.localhost && ipv6_resolvers {
            // A pod without IPv6 loopback has no IPv6 queries to answer either.
            let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, address.port()));
            match server::serve(v6, proxy.clone(), stopped) {
                Ok(v6) => tracing::info!(address = %v6, "DNS proxy serving"),
                Err(error) => tracing::warn!(address = %v6, %error, "DNS proxy not serving IPv6"),
            }
        }
        let pod = PodDns::new(&settings.namespace, &settings.domain, search);
        Ok(Arc::new(Dns { proxy, pod, address }))
    }

    /// Takes a name table istiod sent; an error (it does not decode) is the NACK's detail.
    pub fn apply(&self, resource: &Any) -> Result<(), String> {
        let table = NameTable::decode(resource.value.as_slice()).map_err(|e| format!("NameTable: {e}"))?;
        let entries: Vec<(String, NameInfo)> = table
            .table
            .into_iter()
            .map(|(host, info)| {
                let info = NameInfo {
                    ips: info.ips,
                    registry: info.registry,
                    shortname: info.shortname,
                    namespace: info.namespace,
                };
                (host, info)
            })
            .collect();
        self.proxy.update(LookupTable::build(entries.iter().map(|(h, i)| (h.as_str(), i)), &self.pod));
        Ok(())
    }

    /// Whether a name table has arrived.
    pub fn is_ready(&self) -> bool {
        self.proxy.is_ready()
    }
}

/// The nameservers (port 53) and search domains of a `resolv.conf`.
fn resolvers(text: &[u8]) -> (Vec<SocketAddr>, Vec<String>) {
    let (config, errors) = resolv_conf::Config::parse_with_errors(text);
    for error in errors {
        tracing::debug!(%error, "resolv.conf line skipped");
    }
    let servers = config.nameservers.iter().map(|ip| SocketAddr::new(ip.into(), 53)).collect();
    let search = config.get_search().cloned().unwrap_or_default();
    (servers, search)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_follow_pilot_agents_environment() {
        let env = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        assert_eq!(DnsSettings::from_env(&env(&[]), "ns"), Ok(None));
        let on = DnsSettings::from_env(&env(&[("ISTIO_META_DNS_CAPTURE", "true")]), "ns").unwrap().unwrap();
        assert_eq!((on.address, on.localhost), ("127.0.0.1:15053".parse().unwrap(), true));
        assert_eq!(on.domain, "ns.svc.cluster.local");
        let moved = env(&[("ISTIO_META_DNS_CAPTURE", "true"), ("DNS_PROXY_ADDR", "localhost:5353")]);
        assert_eq!(DnsSettings::from_env(&moved, "ns").unwrap().unwrap().address, "127.0.0.1:5353".parse().unwrap());
        let fixed = env(&[("ISTIO_META_DNS_CAPTURE", "true"), ("DNS_PROXY_ADDR", "127.0.0.1:5353")]);
        assert!(!DnsSettings::from_env(&fixed, "ns").unwrap().unwrap().localhost);
        let bad = env(&[("ISTIO_META_DNS_CAPTURE", "true"), ("DNS_PROXY_ADDR", "nowhere")]);
        assert!(DnsSettings::from_env(&bad, "ns").is_err());
    }

    #[tokio::test]
    async fn with_ipv6_resolvers_localhost_means_both_loopbacks() {
        if std::net::UdpSocket::bind("[::1]:0").is_err() {
            println!("SKIPPED: with_ipv6_resolvers_localhost_means_both_loopbacks: no IPv6 loopback");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let resolv_conf = dir.path().join("resolv.conf");
        std::fs::write(&resolv_conf, "nameserver fd00::10\n").unwrap();
        let settings = DnsSettings {
            address: "127.0.0.1:0".parse().unwrap(),
            localhost: true,
            namespace: "ns".into(),
            domain: "ns.svc.cluster.local".into(),
            resolv_conf,
        };
        let (_stop, stopped) = crate::core::shutdown::channel();
        let dns = Dns::start(&settings, stopped).unwrap();
        let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, dns.address.port()));
        // Bound: a second bind of the same port fails.
        assert!(std::net::UdpSocket::bind(v6).is_err(), "the proxy answers on {v6}");
    }

    #[test]
    fn resolv_conf_gives_servers_and_search_domains() {
        let text =
            b"search ns1.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n";
        let (servers, search) = resolvers(text);
        assert_eq!(servers, vec!["10.96.0.10:53".parse().unwrap()]);
        assert_eq!(search, ["ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"]);
    }
}
