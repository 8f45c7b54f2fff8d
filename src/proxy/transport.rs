//! Where the proxy meets the `tls` module: the snapshot's secrets as a secret source, the
//! transport socket of an upstream endpoint (`transport_socket_matches` by endpoint
//! metadata, else the cluster's own), and the worker's TLS state.

use std::cell::RefCell;
use std::sync::Arc;

use crate::config::Cluster;
use crate::config::endpoint::LbEndpoint;
use crate::store::{Snapshot, Versioned};
use crate::tls::{ClientTls, SecretRef, SecretSource, TlsCache, TlsError, TlsStats};

/// The secrets of one snapshot.
pub struct SnapshotSecrets<'a>(pub &'a Snapshot);

impl SecretSource for SnapshotSecrets<'_> {
    fn secret(&self, name: &str) -> Option<SecretRef<'_>> {
        self.0.secrets.get(name).map(|s| SecretRef {
            secret: &s.resource,
            version: &s.version,
            updated: s.last_updated,
        })
    }
}

/// Handshake counters of both directions, shared by every worker.
#[derive(Debug, Default)]
pub struct HandshakeStats {
    /// Handshakes with downstream clients (listeners with TLS filter chains).
    pub downstream: TlsStats,
    /// Handshakes with upstream servers (clusters with TLS transport sockets).
    pub upstream: TlsStats,
}

/// A worker's TLS state: its config cache (no lock: one thread uses it) and the counters.
#[derive(Debug)]
pub struct WorkerTls {
    pub cache: RefCell<TlsCache>,
    pub stats: Arc<HandshakeStats>,
}

impl WorkerTls {
    pub fn new(stats: Arc<HandshakeStats>) -> Self {
        Self { cache: RefCell::new(TlsCache::new()), stats }
    }

    /// The TLS to originate towards `endpoint` of `cluster`; `None` for plaintext.
    pub fn upstream(
        &self,
        cluster: &Arc<Versioned<Cluster>>,
        endpoint: &LbEndpoint,
        snapshot: &Snapshot,
    ) -> Result<Option<Arc<ClientTls>>, TlsError> {
        let Some(context) = cluster.resource.upstream_tls_context(endpoint) else { return Ok(None) };
        let result = self.cache.borrow_mut().client(cluster, context, &SnapshotSecrets(snapshot));
        if let Err(error) = &result {
            self.stats.upstream.refused(crate::tls::Refusal::NoConfig);
            tracing::info!(cluster = %cluster.resource.name, address = %endpoint.address, reason = %error, "upstream TLS handshake refused");
        }
        result.map(Some)
    }
}
