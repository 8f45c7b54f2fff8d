//! rustls configs per TLS context and secret version, so that a handshake does not rebuild
//! them: one cache per worker (no lock), looked up once per new connection.
//!
//! A context is identified by where it lives: the `Arc` of the listener or cluster that
//! holds it, and its address inside. An entry keeps a `Weak` to that owner, which pins the
//! owner's allocation, so while the entry exists no other owner can appear at the same
//! address: equal addresses mean the same, unchanged, context. An entry is rebuilt when a
//! secret it used has a new version (rotation: the next handshake uses the new
//! certificate, connections already established keep theirs) or a file it was read from
//! changed on disk, and dropped once its owner is gone (a listener or cluster update).

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

use rustls::{ClientConfig, ServerConfig};
use rustls_pki_types::ServerName;

use super::client::{self, ClientAlpn};
use super::secrets::{self, FileStamps, SecretSource, Stamp};
use super::source;
use super::{TlsError, server};
use crate::config::tls::{DownstreamTlsContext, UpstreamTlsContext};

/// The server side of one filter chain's TLS.
#[derive(Debug, Clone)]
pub struct ServerTls {
    config: Arc<ServerConfig>,
    /// The same without ALPN. Envoy (BoringSSL) goes on without ALPN when the client offers
    /// none of the configured protocols; rustls would refuse the handshake instead.
    without_alpn: Arc<ServerConfig>,
    pub require_sni: bool,
    /// The presented certificate's first URI SAN (the local principal).
    pub local_uri_san: Option<Arc<str>>,
}

/// The client side of one cluster transport's TLS.
#[derive(Debug, Clone)]
pub struct ClientTls {
    http1: Arc<ClientConfig>,
    http2: Arc<ClientConfig>,
    tcp: Arc<ClientConfig>,
    pub server_name: ServerName<'static>,
    /// The client certificate's first URI SAN, when one is presented (the local principal).
    pub local_uri_san: Option<Arc<str>>,
    /// Identifies the context (not the secret version) within this cache: connections made
    /// with one id may be reused for requests that want the same id.
    pub transport_id: u64,
    /// Built from files on disk, which a rewrite may change without a new configuration:
    /// whoever keeps this config must ask the cache again before each use.
    pub reads_files: bool,
}

/// A worker's configs.
#[derive(Debug, Default)]
pub struct TlsCache {
    servers: HashMap<Key, Entry<ServerTls>>,
    clients: HashMap<Key, Entry<Arc<ClientTls>>>,
    next_transport_id: u64,
}

/// (owner address, context address).
type Key = (usize, usize);

#[derive(Debug)]
struct Entry<T> {
    owner: Weak<dyn Any + Send + Sync>,
    stamps: Vec<Stamp>,
    files: FileStamps,
    value: T,
}

impl<T> Entry<T> {
    fn current(&self, context: &crate::config::tls::CommonTlsContext, secrets: &dyn SecretSource) -> bool {
        secrets::current(context, secrets, &self.stamps) && self.files.current()
    }
}

impl TlsCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The server configs of `context`, which `owner` (a listener) holds.
    pub fn server<O: Any + Send + Sync>(
        &mut self,
        owner: &Arc<O>,
        context: &DownstreamTlsContext,
        secrets: &dyn SecretSource,
    ) -> Result<ServerTls, TlsError> {
        let key = key(owner, context);
        if let Some(entry) = self.servers.get(&key)
            && entry.current(&context.common, secrets)
        {
            return Ok(entry.value.clone());
        }
        let material = secrets::resolve(&context.common, secrets)?;
        let files = material.file_stamps();
        let config = server::server_config(context, &material)?;
        let mut without_alpn = config.clone();
        without_alpn.alpn_protocols.clear();
        let value = ServerTls {
            config: Arc::new(config),
            without_alpn: Arc::new(without_alpn),
            require_sni: context.require_sni,
            local_uri_san: source::local_uri_san(&material.certificates),
        };
        tracing::debug!(secrets = ?context.common.secret_names(), "downstream TLS config built");
        self.servers.retain(|_, e| e.owner.strong_count() > 0);
        self.servers.insert(key, entry(owner, material.stamps, files, value.clone()));
        Ok(value)
    }

    /// The client configs of `context`, which `owner` (a cluster) holds.
    pub fn client<O: Any + Send + Sync>(
        &mut self,
        owner: &Arc<O>,
        context: &UpstreamTlsContext,
        secrets: &dyn SecretSource,
    ) -> Result<Arc<ClientTls>, TlsError> {
        let key = key(owner, context);
        let previous = self.clients.get(&key);
        if let Some(entry) = previous
            && entry.current(&context.common, secrets)
        {
            return Ok(entry.value.clone());
        }
        // A rotated secret keeps the context's id: pooled connections stay reusable.
        let transport_id = match previous {
            Some(entry) => entry.value.transport_id,
            None => {
                self.next_transport_id += 1;
                self.next_transport_id
            }
        };
        let material = secrets::resolve(&context.common, secrets)?;
        let files = material.file_stamps();
        let config = client::client_config(context, &material)?;
        let with_alpn = |use_| {
            let mut config = config.clone();
            config.alpn_protocols = client::offered(context, use_);
            Arc::new(config)
        };
        let server_name = server_name(&context.sni);
        let value = Arc::new(ClientTls {
            http1: with_alpn(ClientAlpn::Http1),
            http2: with_alpn(ClientAlpn::Http2),
            tcp: with_alpn(ClientAlpn::Tcp),
            server_name,
            local_uri_san: source::local_uri_san(&material.certificates),
            transport_id,
            reads_files: !files.is_empty(),
        });
        tracing::debug!(secrets = ?context.common.secret_names(), sni = %context.sni, "upstream TLS config built");
        self.clients.retain(|_, e| e.owner.strong_count() > 0);
        self.clients.insert(key, entry(owner, material.stamps, files, value.clone()));
        Ok(value)
    }

    /// Cached configs (server, client), for tests.
    pub fn len(&self) -> (usize, usize) {
        (self.servers.len(), self.clients.len())
    }
}

impl ServerTls {
    /// The config for a client that offered `client_alpn`.
    pub fn config_for(&self, client_alpn: &[Vec<u8>]) -> Arc<ServerConfig> {
        let ours = &self.config.alpn_protocols;
        if ours.is_empty() || client_alpn.is_empty() || ours.iter().any(|p| client_alpn.contains(p)) {
            self.config.clone()
        } else {
            self.without_alpn.clone()
        }
    }
}

impl ClientTls {
    pub fn config(&self, use_: ClientAlpn) -> &Arc<ClientConfig> {
        match use_ {
            ClientAlpn::Http1 => &self.http1,
            ClientAlpn::Http2 => &self.http2,
            ClientAlpn::Tcp => &self.tcp,
        }
    }
}

fn key<O, C>(owner: &Arc<O>, context: &C) -> Key {
    (Arc::as_ptr(owner) as *const () as usize, context as *const C as usize)
}

fn entry<O: Any + Send + Sync, T>(owner: &Arc<O>, stamps: Vec<Stamp>, files: FileStamps, value: T) -> Entry<T> {
    let owner: Weak<dyn Any + Send + Sync> = Arc::downgrade(owner) as Weak<dyn Any + Send + Sync>;
    Entry { owner, stamps, files, value }
}

/// The name sent as SNI; when none is configured SNI is off and this only satisfies the
/// API (the verifier never compares names with it).
fn server_name(sni: &str) -> ServerName<'static> {
    ServerName::try_from(sni.to_owned()).unwrap_or(ServerName::IpAddress(std::net::Ipv4Addr::UNSPECIFIED.into()))
}

#[cfg(test)]
mod tests;
