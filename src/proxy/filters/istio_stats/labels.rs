//! The values of Istio's standard labels for one request, computed as Istio's stats filter
//! computes them (`populatePeerInfo`): this proxy's workload on its own side, the peer's
//! from the metadata exchange on the other, `unknown` (or `latest` for a revision) where
//! nothing says, and the destination service from the cluster or the `host` header.

use std::borrow::Cow;
use std::sync::Arc;

use crate::config::filters::peer_metadata::WorkloadMetadata;
use crate::proxy::response_flags::ResponseFlags;

const UNKNOWN: &str = "unknown";
const LATEST: &str = "latest";

/// Which side reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reporter {
    /// A sidecar's outbound listener: `reporter="source"`.
    ClientSidecar,
    /// A sidecar's inbound listener: `reporter="destination"`.
    ServerSidecar,
    /// A gateway, for the workloads behind it: `reporter="destination"`.
    ServerGateway,
}

/// What is known about one request when its response ends.
#[derive(Debug, Clone)]
pub struct Facts<'a> {
    pub reporter: Reporter,
    pub local: &'a WorkloadMetadata,
    /// The downstream peer (server side) or the upstream one (client side).
    pub peer: Option<&'a Arc<WorkloadMetadata>>,
    /// On a gateway: the upstream workload, the destination.
    pub endpoint_peer: Option<&'a Arc<WorkloadMetadata>>,
    /// The peer's SPIFFE identity (server side: the client certificate's first URI SAN).
    pub peer_san: Option<&'a str>,
    /// This proxy's own identity on the connection, when known.
    pub local_san: Option<&'a str>,
    /// The `host` header, unless `disable_host_header_fallback`.
    pub host: Option<&'a str>,
    pub route_name: Option<&'a str>,
    pub cluster: Option<&'a str>,
    /// The cluster's `istio.services[0].host` metadata, when istiod set it.
    pub cluster_service_host: Option<&'a str>,
    pub grpc: bool,
    pub response_code: u16,
    pub grpc_status: Option<u32>,
    pub flags: ResponseFlags,
}

fn or<'a>(value: &'a str, fallback: &'a str) -> &'a str {
    if value.is_empty() { fallback } else { value }
}

/// The namespace of a SPIFFE identity: `spiffe://td/ns/<namespace>/sa/<account>`.
fn san_namespace(san: &str) -> Option<&str> {
    let path = san.strip_prefix("spiffe://")?;
    let mut segments = path.split('/').skip(1);
    while let Some(segment) = segments.next() {
        if segment == "ns" {
            return segments.next().filter(|ns| !ns.is_empty());
        }
    }
    None
}

/// `(destination_service, destination_service_name)` before the `unknown` fallbacks:
/// Istio's special clusters and routes by name, else the service of an Istio cluster
/// (`outbound|80||reviews.default.svc.cluster.local`: host, then its first label), else
/// the `host` header.
fn service<'a>(facts: &Facts<'a>) -> (&'a str, &'a str) {
    let host = facts.host.unwrap_or_default();
    match facts.route_name {
        Some("block_all") => return (host, "BlackHoleCluster"),
        Some("allow_any") => return (host, "PassthroughCluster"),
        _ => {}
    }
    let Some(cluster) = facts.cluster else { return (host, host) };
    match cluster {
        "BlackHoleCluster"
        | "PassthroughCluster"
        | "InboundPassthroughClusterIpv4"
        | "InboundPassthroughClusterIpv6"
        | "InboundPassthroughCluster" => (host, cluster),
        _ => {
            // istiod's `istio.services` metadata of such a cluster names this host;
            // the name carries it too, but for inbound clusters (`inbound|8080||`).
            if let Some(service) = facts.cluster_service_host {
                return (service, service.split('.').next().unwrap_or(service));
            }
            let mut parts = cluster.splitn(4, '|');
            let direction = parts.next();
            match parts.nth(2).filter(|h| !h.is_empty()) {
                Some(service) if matches!(direction, Some("outbound" | "inbound")) => {
                    (service, service.split('.').next().unwrap_or(service))
                }
                _ => (host, host),
            }
        }
    }
}

/// A label and its value, borrowed from the facts where it can be.
pub type Label<'a> = (&'static str, Cow<'a, str>);

/// Istio's 25 standard labels, in Istio's order, for `facts`.
pub fn standard<'a>(facts: &Facts<'a>) -> Vec<Label<'a>> {
    let local: &'a WorkloadMetadata = facts.local;
    let peer: Option<&'a WorkloadMetadata> = facts.peer.map(|p| p.as_ref());
    let peer_text = |f: fn(&WorkloadMetadata) -> &str, fallback: &'static str| -> Cow<'a, str> {
        Cow::Borrowed(peer.map_or(fallback, |p| or(f(p), fallback)))
    };
    let peer_namespace: &'a str = facts
        .peer_san
        .and_then(san_namespace)
        .or_else(|| peer.map(|p| p.namespace.as_str()).filter(|ns| !ns.is_empty()))
        .unwrap_or(UNKNOWN);
    let peer_san = facts.peer_san.filter(|s| !s.is_empty()).unwrap_or(UNKNOWN);
    let local_san = facts.local_san.filter(|s| !s.is_empty()).unwrap_or(UNKNOWN);
    let (service_host, service_name) = service(facts);
    let b = Cow::Borrowed;
    let mut labels: Vec<Label<'a>> = Vec::with_capacity(25);
    match facts.reporter {
        Reporter::ServerSidecar | Reporter::ServerGateway => {
            labels.push(("reporter", b("destination")));
            labels.push(("source_workload", peer_text(|p| &p.workload_name, UNKNOWN)));
            labels.push(("source_canonical_service", peer_text(WorkloadMetadata::canonical_name, UNKNOWN)));
            labels.push(("source_canonical_revision", peer_text(WorkloadMetadata::canonical_revision, LATEST)));
            labels.push(("source_workload_namespace", b(peer_namespace)));
            labels.push(("source_principal", b(peer_san)));
            labels.push(("source_app", peer_text(WorkloadMetadata::app, UNKNOWN)));
            labels.push(("source_version", peer_text(WorkloadMetadata::version, UNKNOWN)));
            labels.push(("source_cluster", peer_text(|p| &p.cluster_id, UNKNOWN)));
            if facts.reporter == Reporter::ServerGateway {
                let endpoint: Option<&'a WorkloadMetadata> = facts.endpoint_peer.map(|p| p.as_ref());
                let canonical = endpoint.map_or(UNKNOWN, WorkloadMetadata::canonical_name);
                labels.push(("destination_workload", b(endpoint.map_or(UNKNOWN, |p| &p.workload_name))));
                labels.push(("destination_workload_namespace", b(&local.namespace)));
                labels.push(("destination_principal", b(local_san)));
                // The endpoint form has no app and version.
                labels.push(("destination_app", b(UNKNOWN)));
                labels.push(("destination_version", b(UNKNOWN)));
                labels.push(("destination_service", b(or(service_host, canonical))));
                labels.push(("destination_canonical_service", b(canonical)));
                labels.push((
                    "destination_canonical_revision",
                    b(endpoint.map_or(UNKNOWN, WorkloadMetadata::canonical_revision)),
                ));
                labels.push(("destination_service_name", b(or(service_name, canonical))));
            } else {
                let canonical = local.canonical_name();
                labels.push(("destination_workload", b(&local.workload_name)));
                labels.push(("destination_workload_namespace", b(&local.namespace)));
                labels.push(("destination_principal", b(local_san)));
                labels.push(("destination_app", b(local.app())));
                labels.push(("destination_version", b(local.version())));
                labels.push(("destination_service", b(or(service_host, canonical))));
                labels.push(("destination_canonical_service", b(canonical)));
                labels.push(("destination_canonical_revision", b(local.canonical_revision())));
                labels.push(("destination_service_name", b(or(service_name, canonical))));
            }
            labels.push(("destination_service_namespace", b(&local.namespace)));
            labels.push(("destination_cluster", b(&local.cluster_id)));
        }
        Reporter::ClientSidecar => {
            labels.push(("reporter", b("source")));
            labels.push(("source_workload", b(&local.workload_name)));
            labels.push(("source_canonical_service", b(local.canonical_name())));
            labels.push(("source_canonical_revision", b(local.canonical_revision())));
            labels.push(("source_workload_namespace", b(&local.namespace)));
            labels.push(("source_principal", b(local_san)));
            labels.push(("source_app", b(local.app())));
            labels.push(("source_version", b(local.version())));
            labels.push(("source_cluster", b(&local.cluster_id)));
            labels.push(("destination_workload", peer_text(|p| &p.workload_name, UNKNOWN)));
            labels.push(("destination_workload_namespace", b(peer_namespace)));
            labels.push(("destination_principal", b(peer_san)));
            labels.push(("destination_app", peer_text(WorkloadMetadata::app, UNKNOWN)));
            labels.push(("destination_version", peer_text(WorkloadMetadata::version, UNKNOWN)));
            labels.push(("destination_service", b(or(service_host, UNKNOWN))));
            labels.push(("destination_canonical_service", peer_text(WorkloadMetadata::canonical_name, UNKNOWN)));
            labels.push(("destination_canonical_revision", peer_text(WorkloadMetadata::canonical_revision, LATEST)));
            labels.push(("destination_service_name", b(or(service_name, UNKNOWN))));
            labels.push(("destination_service_namespace", b(peer_namespace)));
            labels.push(("destination_cluster", peer_text(|p| &p.cluster_id, UNKNOWN)));
        }
    }
    labels.push(("request_protocol", b(if facts.grpc { "grpc" } else { "http" })));
    labels.push(("response_code", Cow::Owned(facts.response_code.to_string())));
    let grpc_status = match (facts.grpc, facts.grpc_status) {
        (true, Some(status)) => Cow::Owned(status.to_string()),
        _ => b(""),
    };
    labels.push(("grpc_response_status", grpc_status));
    let flags = if facts.flags.is_empty() { b("-") } else { Cow::Owned(facts.flags.to_string()) };
    labels.push(("response_flags", flags));
    // Istio knows mutual TLS only on the server side: the client side says `unknown`.
    let security = match facts.reporter {
        Reporter::ClientSidecar => UNKNOWN,
        _ if facts.peer_san.is_some_and(|s| !s.is_empty()) => "mutual_tls",
        _ => "none",
    };
    labels.push(("connection_security_policy", b(security)));
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(name: &str, namespace: &str) -> WorkloadMetadata {
        let mut w = WorkloadMetadata {
            workload_name: name.into(),
            namespace: namespace.into(),
            cluster_id: "Kubernetes".into(),
            ..WorkloadMetadata::default()
        };
        w.labels.insert("app".into(), name.into());
        w.labels.insert("service.istio.io/canonical-name".into(), name.into());
        w
    }

    fn facts<'a>(reporter: Reporter, local: &'a WorkloadMetadata) -> Facts<'a> {
        Facts {
            cluster_service_host: None,
            reporter,
            local,
            peer: None,
            endpoint_peer: None,
            peer_san: None,
            local_san: None,
            host: None,
            route_name: None,
            cluster: None,
            grpc: false,
            response_code: 200,
            grpc_status: None,
            flags: ResponseFlags::NONE,
        }
    }

    fn get<'a>(labels: &'a [Label<'_>], key: &str) -> &'a str {
        &labels.iter().find(|(k, _)| *k == key).unwrap().1
    }

    #[test]
    fn a_client_without_a_peer_reports_istios_fallbacks() {
        let local = workload("productpage", "bookinfo");
        let mut f = facts(Reporter::ClientSidecar, &local);
        f.cluster = Some("outbound|9080||reviews.bookinfo.svc.cluster.local");
        let labels = standard(&f);
        assert_eq!(labels.len(), 25);
        assert_eq!(
            labels.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            crate::config::filters::istio_stats::STANDARD_TAGS
        );
        assert_eq!(get(&labels, "reporter"), "source");
        assert_eq!(get(&labels, "source_workload"), "productpage");
        assert_eq!(get(&labels, "destination_workload"), "unknown");
        assert_eq!(get(&labels, "destination_canonical_revision"), "latest");
        assert_eq!(get(&labels, "destination_service"), "reviews.bookinfo.svc.cluster.local");
        assert_eq!(get(&labels, "destination_service_name"), "reviews");
        assert_eq!(get(&labels, "response_flags"), "-");
        assert_eq!(get(&labels, "connection_security_policy"), "unknown");
        assert_eq!(get(&labels, "grpc_response_status"), "");
    }

    #[test]
    fn a_server_names_its_peer_and_takes_the_namespace_from_the_certificate() {
        let local = workload("reviews", "bookinfo");
        let peer = Arc::new(workload("productpage", "elsewhere"));
        let mut f = facts(Reporter::ServerSidecar, &local);
        f.peer = Some(&peer);
        f.peer_san = Some("spiffe://cluster.local/ns/bookinfo/sa/productpage");
        f.grpc = true;
        f.grpc_status = Some(5);
        let labels = standard(&f);
        assert_eq!(get(&labels, "reporter"), "destination");
        assert_eq!(get(&labels, "source_workload"), "productpage");
        assert_eq!(get(&labels, "source_workload_namespace"), "bookinfo");
        assert_eq!(get(&labels, "source_principal"), "spiffe://cluster.local/ns/bookinfo/sa/productpage");
        assert_eq!(get(&labels, "destination_workload"), "reviews");
        assert_eq!(get(&labels, "destination_service"), "reviews", "no host: the canonical service");
        assert_eq!(get(&labels, "request_protocol"), "grpc");
        assert_eq!(get(&labels, "grpc_response_status"), "5");
        assert_eq!(get(&labels, "connection_security_policy"), "mutual_tls");
    }

    #[test]
    fn special_routes_and_clusters_name_the_service() {
        let local = workload("a", "ns");
        let mut f = facts(Reporter::ClientSidecar, &local);
        f.host = Some("example.com");
        f.cluster = Some("PassthroughCluster");
        let labels = standard(&f);
        assert_eq!(get(&labels, "destination_service"), "example.com");
        assert_eq!(get(&labels, "destination_service_name"), "PassthroughCluster");
        f.route_name = Some("block_all");
        assert_eq!(get(&standard(&f), "destination_service_name"), "BlackHoleCluster");
    }
}
