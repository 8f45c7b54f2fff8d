//! How a probe reaches its host: the endpoint's address (or the address and port of its
//! `health_check_config`, else the check's `alt_port`), from
//! the cluster's source address, within its `connect_timeout`, over TLS when the endpoint's
//! transport socket is TLS (as Envoy probes through the host's transport socket).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;

use crate::config::cluster::{DnsLookupFamily, SourceAddresses};
use crate::config::endpoint::LbEndpoint;
use crate::config::{Address, Cluster};
use crate::store::Snapshot;
use crate::tls::{ClientAlpn, ClientTls, SecretRef, SecretSource, TlsCache};

/// A probe's byte stream: TCP, Unix or TLS over either.
pub(super) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}
pub(super) type BoxIo = Box<dyn Io>;

/// Where and how one host is probed.
#[derive(Debug, Clone)]
pub(super) struct Target {
    pub address: Address,
    /// TLS to originate; `Err` when the context could not be built (every probe fails).
    pub tls: Result<Option<Arc<ClientTls>>, String>,
    pub connect_timeout: Duration,
    pub bind: Option<SourceAddresses>,
    /// The cluster's `dns_lookup_family`, for an endpoint that is a name.
    pub lookup_family: DnsLookupFamily,
    /// `:authority` when the check names none: the cluster's name, as in Envoy.
    pub cluster: String,
    /// The endpoint's `health_check_config.hostname`: when not empty, the `:authority` of
    /// HTTP and gRPC probes over the check's own (Envoy's `hostnameForHealthChecks`).
    pub hostname: String,
}

impl Target {
    pub fn new(
        cluster: &Arc<crate::store::Versioned<Cluster>>,
        endpoint: &LbEndpoint,
        alt_port: Option<u16>,
        snapshot: &Snapshot,
        cache: &mut TlsCache,
    ) -> Self {
        let tls = match cluster.resource.upstream_tls_context(endpoint) {
            None => Ok(None),
            Some(context) => cache.client(cluster, context, &Secrets(snapshot)).map(Some).map_err(|e| e.to_string()),
        };
        let (address, hostname) = match &endpoint.health_check {
            // Envoy has no `alt_port`; an endpoint's own port or address takes precedence.
            Some(config) if config.address.is_some() || config.port.is_some() => {
                (config.probe_address(&endpoint.address), config.hostname.clone())
            }
            Some(config) => (with_port(&endpoint.address, alt_port), config.hostname.clone()),
            None => (with_port(&endpoint.address, alt_port), String::new()),
        };
        Self {
            address,
            tls,
            connect_timeout: cluster.resource.connect_timeout,
            bind: cluster.resource.upstream_bind,
            lookup_family: cluster.resource.lookup_family(),
            cluster: cluster.resource.name.clone(),
            hostname,
        }
    }

    /// The `:authority` of an HTTP or gRPC probe whose check names `configured` (empty:
    /// none): the endpoint's health check hostname, else `configured`, else the cluster's
    /// name, as Envoy's `HealthCheckerImplBase` picks it.
    pub fn authority<'a>(&'a self, configured: &'a str) -> &'a str {
        if !self.hostname.is_empty() {
            &self.hostname
        } else if !configured.is_empty() {
            configured
        } else {
            &self.cluster
        }
    }

    /// Opens a connection for `use_` (which decides the ALPN offered over TLS), within the
    /// cluster's connect timeout.
    pub async fn connect(&self, use_: ClientAlpn) -> std::io::Result<BoxIo> {
        tokio::time::timeout(self.connect_timeout, self.open(use_))
            .await
            .unwrap_or_else(|_| Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timeout")))
    }

    async fn open(&self, use_: ClientAlpn) -> std::io::Result<BoxIo> {
        let tls = self.tls.clone().map_err(std::io::Error::other)?;
        let io: BoxIo = match &self.address {
            Address::Socket(addr) => {
                Box::new(crate::core::net::connect_tcp(*addr, self.bind.map(|b| b.for_peer(*addr))).await?)
            }
            Address::Dns { host, port } => {
                let resolved = tokio::net::lookup_host((host.as_str(), *port)).await?;
                let addr = self
                    .lookup_family
                    .pick(resolved)
                    .ok_or_else(|| std::io::Error::other("the name resolved to no address of its family"))?;
                Box::new(crate::core::net::connect_tcp(addr, self.bind.map(|b| b.for_peer(addr))).await?)
            }
            Address::Pipe(path) => Box::new(UnixStream::connect(path).await?),
            // Checks run on the control runtime; an internal listener is served by a
            // worker, for the connections that worker opens.
            Address::Internal { .. } => {
                return Err(std::io::Error::other("an internal listener cannot be health checked"));
            }
        };
        match tls {
            None => Ok(io),
            Some(tls) => {
                let stream = crate::tls::connect(io, &tls, use_).await.map_err(|e| std::io::Error::other(e.reason))?;
                Ok(Box::new(stream))
            }
        }
    }
}

fn with_port(address: &Address, port: Option<u16>) -> Address {
    match (address, port) {
        (Address::Socket(addr), Some(port)) => Address::Socket(SocketAddr::new(addr.ip(), port)),
        (Address::Dns { host, .. }, Some(port)) => Address::Dns { host: host.clone(), port },
        (other, _) => other.clone(),
    }
}

/// The snapshot's secrets, for TLS contexts that name SDS secrets.
struct Secrets<'a>(&'a Snapshot);

impl SecretSource for Secrets<'_> {
    fn secret(&self, name: &str) -> Option<SecretRef<'_>> {
        self.0.secrets.get(name).map(|s| SecretRef {
            secret: &s.resource,
            version: &s.version,
            updated: s.last_updated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alt_port_replaces_the_port_of_ip_and_dns_endpoints() {
        let ip = Address::Socket("10.0.0.1:80".parse().unwrap());
        assert_eq!(with_port(&ip, Some(9901)), Address::Socket("10.0.0.1:9901".parse().unwrap()));
        assert_eq!(with_port(&ip, None), ip);
        let dns = Address::Dns { host: "svc".into(), port: 80 };
        assert_eq!(with_port(&dns, Some(8080)), Address::Dns { host: "svc".into(), port: 8080 });
    }
}
