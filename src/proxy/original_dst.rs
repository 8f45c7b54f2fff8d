//! Original destination: where a connection was going before iptables redirected it to
//! the proxy, as Envoy's `original_dst` listener filter and `use_original_dst` do.
//!
//! - A listener with the `envoy.filters.listener.original_dst` filter (Istio's
//!   `virtualInbound`, 15006) restores the connection's local address from
//!   `SO_ORIGINAL_DST` (`IP6T_SO_ORIGINAL_DST` for IPv6), so filter chains match on the
//!   original destination port and IP.
//! - A listener with `use_original_dst` (Istio's `virtualOutbound`, 15001) restores it too,
//!   then hands the connection to the listener bound to that address (exact IP first, then
//!   the wildcard of the port), bound to a port or not (Istio's per-service listeners have
//!   `bind_to_port: false`). The connection is then that listener's, and is not handed on
//!   again. When no listener has the address, the receiving listener's own chains take it
//!   (Istio's `PassthroughCluster`).
//! - An ORIGINAL_DST cluster connects to the restored address, or to one named by filter
//!   state, by its `metadata_key` or by its HTTP header ([`upstream_destination`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use http::HeaderMap;
use socket2::SockRef;
use tokio::net::TcpStream;

use crate::config::cluster::OriginalDstConfig;
use crate::config::listener::ListenerFilterKind;
use crate::config::{Address, Listener};
use crate::proxy::stream_info::{ORIGINAL_DST_ADDRESS, StreamState};
use crate::store::{Snapshot, Store, Versioned};

/// The listener that serves an accepted connection, and its local address as filter chain
/// matching sees it.
#[derive(Debug)]
pub struct Accepted {
    pub listener: Arc<Versioned<Listener>>,
    /// The original destination when restored, else the socket's local address.
    pub local: SocketAddr,
    /// Envoy's `localAddressRestored()`: only then may an ORIGINAL_DST cluster use `local`.
    pub restored: bool,
}

/// Restores the original destination of `stream` if `listener` asks for it, and hands the
/// connection over to the listener bound to it (`use_original_dst`), found in the worker's
/// `index` of the `store`'s listeners. `None` when the socket has no local address (it is
/// already gone).
pub fn accept(
    stream: &TcpStream,
    listener: Arc<Versioned<Listener>>,
    index: &RefCell<ListenerIndex>,
    store: &Store,
) -> Option<Accepted> {
    let local = stream.local_addr().ok()?;
    if !restores(&listener.resource, local.port()) {
        return Some(Accepted { listener, local, restored: false });
    }
    let Some(original) = original_destination(stream, local) else {
        // Not redirected (or conntrack does not know it): served as is, like Envoy.
        return Some(Accepted { listener, local, restored: false });
    };
    if !listener.resource.use_original_dst {
        return Some(Accepted { listener, local: original, restored: true });
    }
    let target = index.borrow_mut().find(&store.load(), original);
    let listener = match target {
        Some(target) if !Arc::ptr_eq(&target, &listener) => {
            tracing::trace!(from = %listener.resource.name, to = %target.resource.name, %original, "handed off");
            target
        }
        _ => listener,
    };
    Some(Accepted { listener, local: original, restored: true })
}

/// Whether `listener` restores original destinations for a connection to `port`: with
/// `use_original_dst`, or an `original_dst` listener filter not disabled for the port.
fn restores(listener: &Listener, port: u16) -> bool {
    listener.use_original_dst
        || listener.listener_filters.iter().any(|f| {
            f.kind == ListenerFilterKind::OriginalDst && !f.disabled_when.as_ref().is_some_and(|p| p.matches(port))
        })
}

/// `SO_ORIGINAL_DST` (IPv4, also for IPv4-mapped sockets) or `IP6T_SO_ORIGINAL_DST`:
/// the destination before NAT, from conntrack. `None` when the kernel has none.
pub fn original_destination(stream: &TcpStream, local: SocketAddr) -> Option<SocketAddr> {
    let socket = SockRef::from(stream);
    let v4 = match local.ip() {
        IpAddr::V4(_) => true,
        IpAddr::V6(ip) => ip.to_ipv4_mapped().is_some(),
    };
    let address = if v4 { socket.original_dst_v4() } else { socket.original_dst_v6() };
    match address {
        Ok(address) => address.as_socket().map(canonical),
        Err(e) => {
            tracing::trace!(%local, error = %e, "no original destination");
            None
        }
    }
}

/// IPv4-mapped IPv6 addresses as the IPv4 addresses they are.
fn canonical(address: SocketAddr) -> SocketAddr {
    SocketAddr::new(address.ip().to_canonical(), address.port())
}

/// What an ORIGINAL_DST cluster may take a destination from.
#[derive(Debug, Clone, Copy, Default)]
pub struct DestinationSources<'a> {
    /// The connection's restored original destination.
    pub restored: Option<SocketAddr>,
    /// The request's headers (`use_http_header`).
    pub headers: Option<&'a HeaderMap>,
    /// The request's filter state and dynamic metadata, then the connection's.
    pub streams: [Option<&'a StreamState>; 2],
}

/// Where an ORIGINAL_DST cluster connects, in Envoy's order: the filter state
/// `envoy.network.transport_socket.original_dst_address`; the cluster's `metadata_key` in
/// the dynamic metadata; its header when `use_http_header` is set; the connection's restored
/// original destination. Only a value that is an `IP:port` counts. `None` means no host
/// (Envoy: "no downstream connection or no original_dst"), answered as no healthy upstream.
pub fn upstream_destination(config: &OriginalDstConfig, sources: &DestinationSources<'_>) -> Option<SocketAddr> {
    let streams = || sources.streams.iter().flatten();
    let from_filter_state = || streams().find_map(|s| s.filter_state.address(ORIGINAL_DST_ADDRESS));
    let from_metadata =
        || config.metadata_key.as_ref().and_then(|k| streams().find_map(|s| s.metadata.address(&k.key, &k.path)));
    let from_header = || {
        sources
            .headers
            .filter(|_| config.use_http_header)
            .and_then(|h| h.get(config.http_header_name.as_str()))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<SocketAddr>().ok())
    };
    from_filter_state().or_else(from_metadata).or_else(from_header).or(sources.restored)
}

// === impl ListenerIndex ===

/// A worker's map from bound address to listener, for hand-offs. Rebuilt when the
/// worker first hands off a connection after a new snapshot.
#[derive(Debug, Default)]
pub struct ListenerIndex {
    /// The listeners indexed: a snapshot whose listeners map is the same (shared, as after
    /// any change that was not a listener's) needs no new index.
    indexed: Option<crate::store::Resources<Listener>>,
    by_address: HashMap<SocketAddr, Arc<Versioned<Listener>>>,
}

impl ListenerIndex {
    /// The listener for `destination`: the one bound to it exactly, else the one bound to
    /// the wildcard address of its family and port (`0.0.0.0:port` or `[::]:port`).
    pub fn find(&mut self, snapshot: &Snapshot, destination: SocketAddr) -> Option<Arc<Versioned<Listener>>> {
        if !self.indexed.as_ref().is_some_and(|indexed| indexed.ptr_eq(&snapshot.listeners)) {
            self.rebuild(snapshot);
        }
        let wildcard = match destination.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        self.by_address
            .get(&destination)
            .or_else(|| self.by_address.get(&SocketAddr::new(wildcard, destination.port())))
            .cloned()
    }

    fn rebuild(&mut self, snapshot: &Snapshot) {
        self.by_address.clear();
        for listener in snapshot.listeners.values().filter(|l| !l.resource.internal) {
            for address in listener.resource.addresses() {
                if let Address::Socket(address) = address {
                    // Two listeners on one address is a configuration Envoy refuses; the
                    // first by name wins here.
                    self.by_address.entry(canonical(*address)).or_insert_with(|| listener.clone());
                }
            }
        }
        self.indexed = Some(snapshot.listeners.clone());
    }
}

#[cfg(test)]
mod tests {

    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::config::cluster::DEFAULT_ORIGINAL_DST_HEADER;

    /// A listener converted from a bootstrap, as the proxy receives them.
    fn listener(name: &str, address: &str, extra: &[&str]) -> Arc<Versioned<Listener>> {
        let socket = |a: &str| {
            let (ip, port) = a.rsplit_once(':').unwrap();
            format!("{{ socket_address: {{ address: \"{}\", port_value: {port} }} }}", ip.trim_matches(['[', ']']))
        };
        let extra: Vec<String> = extra.iter().map(|a| format!("{{ address: {} }}", socket(a))).collect();
        let yaml = format!(
            r#"
static_resources:
  listeners:
  - name: "{name}"
    address: {}
    additional_addresses: [{}]
    bind_to_port: false
    filter_chains:
    - filters:
      - name: tcp
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: t
          cluster: c
"#,
            socket(address),
            extra.join(", ")
        );
        let mut bootstrap = crate::config::bootstrap::Bootstrap::parse(&yaml).unwrap();
        let resource = bootstrap.static_listeners.remove(0);
        Arc::new(Versioned {
            resource,
            version: String::new(),
            last_updated: SystemTime::now(),
            raw: Default::default(),
        })
    }

    fn snapshot(generation: u64, listeners: &[Arc<Versioned<Listener>>]) -> Snapshot {
        let listeners = listeners.iter().map(|l| (l.resource.name.clone(), l.clone())).collect();
        Snapshot { generation, listeners, ..Snapshot::default() }
    }

    fn name(found: Option<Arc<Versioned<Listener>>>) -> Option<String> {
        found.map(|l| l.resource.name.clone())
    }

    #[test]
    fn exact_address_first_then_the_wildcard_of_the_port() {
        let service = listener("10.96.0.10_53", "10.96.0.10:53", &[]);
        let port = listener("0.0.0.0_53", "0.0.0.0:53", &["[::]:53"]);
        let mut index = ListenerIndex::default();
        let snap = snapshot(1, &[service, port]);
        assert_eq!(name(index.find(&snap, "10.96.0.10:53".parse().unwrap())).unwrap(), "10.96.0.10_53");
        assert_eq!(name(index.find(&snap, "10.96.0.11:53".parse().unwrap())).unwrap(), "0.0.0.0_53");
        assert_eq!(name(index.find(&snap, "[2001:db8::1]:53".parse().unwrap())).unwrap(), "0.0.0.0_53");
        assert_eq!(name(index.find(&snap, "10.96.0.10:54".parse().unwrap())), None);
    }

    #[test]
    fn the_index_follows_new_snapshots() {
        let mut index = ListenerIndex::default();
        let destination = "10.0.0.1:80".parse().unwrap();
        assert_eq!(name(index.find(&snapshot(1, &[]), destination)), None);
        let snap = snapshot(2, &[listener("0.0.0.0_80", "0.0.0.0:80", &[])]);
        assert_eq!(name(index.find(&snap, destination)).unwrap(), "0.0.0.0_80");
    }

    #[test]
    fn a_header_overrides_the_destination_only_when_enabled_and_valid() {
        let mut config = OriginalDstConfig {
            use_http_header: false,
            http_header_name: DEFAULT_ORIGINAL_DST_HEADER.to_owned(),
            upstream_port_override: None,
            metadata_key: None,
            cleanup_interval: Duration::from_secs(5),
        };
        let restored: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(DEFAULT_ORIGINAL_DST_HEADER, "[2001:db8::7]:8080".parse().unwrap());
        fn destination(
            config: &OriginalDstConfig,
            restored: Option<SocketAddr>,
            headers: Option<&HeaderMap>,
        ) -> Option<SocketAddr> {
            upstream_destination(config, &DestinationSources { restored, headers, streams: [None, None] })
        }
        assert_eq!(destination(&config, Some(restored), Some(&headers)), Some(restored));
        config.use_http_header = true;
        let header = "[2001:db8::7]:8080".parse().ok();
        assert_eq!(destination(&config, Some(restored), Some(&headers)), header);
        headers.insert(DEFAULT_ORIGINAL_DST_HEADER, "not-an-address".parse().unwrap());
        assert_eq!(destination(&config, Some(restored), Some(&headers)), Some(restored));
        assert_eq!(destination(&config, None, Some(&headers)), None);
        assert_eq!(destination(&config, None, None), None);
    }

    #[test]
    fn filter_state_then_metadata_then_the_restored_destination() {
        use crate::config::cluster::MetadataKey;
        use crate::proxy::stream_info::{ORIGINAL_DST_NAMESPACE, SharedWithUpstream};
        let config = OriginalDstConfig {
            use_http_header: false,
            http_header_name: DEFAULT_ORIGINAL_DST_HEADER.to_owned(),
            upstream_port_override: Some(15008),
            metadata_key: Some(MetadataKey { key: ORIGINAL_DST_NAMESPACE.into(), path: vec!["waypoint".into()] }),
            cleanup_interval: Duration::from_secs(5),
        };
        let restored = "10.0.0.1:80".parse().ok();
        let mut connection = StreamState::default();
        let destination = |connection: &StreamState| {
            upstream_destination(
                &config,
                &DestinationSources { restored, headers: None, streams: [None, Some(connection)] },
            )
        };
        assert_eq!(destination(&connection), restored);
        connection.metadata.set(ORIGINAL_DST_NAMESPACE, "waypoint".into(), "10.0.0.9:15008".into());
        assert_eq!(destination(&connection), "10.0.0.9:15008".parse().ok());
        connection.filter_state.set(ORIGINAL_DST_ADDRESS.into(), "10.0.0.7:443".into(), SharedWithUpstream::None);
        assert_eq!(destination(&connection), "10.0.0.7:443".parse().ok());
    }

    #[test]
    fn canonical_unmaps_ipv4_mapped_addresses() {
        assert_eq!(canonical("[::ffff:10.0.0.1]:80".parse().unwrap()), "10.0.0.1:80".parse().unwrap());
        assert_eq!(canonical("[2001:db8::1]:80".parse().unwrap()), "[2001:db8::1]:80".parse().unwrap());
    }
}
