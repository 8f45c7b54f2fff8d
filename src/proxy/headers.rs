//! The HTTP connection manager's own header handling, as Envoy's
//! `ConnectionManagerUtility`: hop-by-hop headers, `x-forwarded-for` / `-proto`, whether
//! the request is internal, sanitizing `x-envoy-*` headers from external clients,
//! `x-request-id`, `x-forwarded-client-cert` ([`xfcc`]); and on responses `server`,
//! `x-request-id`, `via`, `x-envoy-upstream-service-time`. The request's one authority is
//! settled in [`authority`]; local replies are in [`local_reply`].

pub mod authority;
pub mod connection;
pub mod local_reply;
mod xfcc;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http::header::{CONNECTION, SERVER, TE, UPGRADE, VIA};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::config::listener::http_connection_manager::{HttpConnectionManager, ServerHeaderTransformation};
use crate::tls::PeerIdentity;

pub use local_reply::{LocalReply, ResetReason, grpc_local_reply, local_reply};

// Header names as constants: a look-up by `&str` parses and validates the name first.
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const X_ENVOY_INTERNAL: HeaderName = HeaderName::from_static("x-envoy-internal");
const X_ENVOY_EXTERNAL_ADDRESS: HeaderName = HeaderName::from_static("x-envoy-external-address");
const X_ENVOY_FORCE_TRACE: HeaderName = HeaderName::from_static("x-envoy-force-trace");
const X_ENVOY_UPSTREAM_SERVICE_TIME: HeaderName = HeaderName::from_static("x-envoy-upstream-service-time");

/// What every name in [`EXTERNAL_STRIPPED`] and [`EDGE_STRIPPED`] begins with: a request
/// without such a header (most of them) skips their removal.
const X_ENVOY_PREFIX: &str = "x-envoy-";

/// Whether the message carries any `x-envoy-*` header: one pass over its names, cheaper
/// than hashing the long names of the ones looked for, which most requests do not have.
pub fn has_envoy_header(headers: &HeaderMap) -> bool {
    headers.keys().any(|name| name.as_str().starts_with(X_ENVOY_PREFIX))
}

/// Hop-by-hop headers never forwarded (besides `connection`, `upgrade` and `te`, which
/// have their own rules).
const HOP_BY_HOP: [HeaderName; 3] = [
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    http::header::TRANSFER_ENCODING,
];

/// `x-envoy-*` headers that steer Envoy, removed from every external request so clients
/// cannot set them (Envoy's `cleanInternalHeaders`).
const EXTERNAL_STRIPPED: [HeaderName; 14] = [
    HeaderName::from_static("x-envoy-retriable-status-codes"),
    HeaderName::from_static("x-envoy-retriable-header-names"),
    HeaderName::from_static("x-envoy-retry-on"),
    HeaderName::from_static("x-envoy-retry-grpc-on"),
    HeaderName::from_static("x-envoy-max-retries"),
    HeaderName::from_static("x-envoy-upstream-alt-stat-name"),
    HeaderName::from_static("x-envoy-upstream-rq-timeout-ms"),
    HeaderName::from_static("x-envoy-upstream-rq-per-try-timeout-ms"),
    HeaderName::from_static("x-envoy-upstream-rq-timeout-alt-response"),
    HeaderName::from_static("x-envoy-expected-rq-timeout-ms"),
    X_ENVOY_FORCE_TRACE,
    HeaderName::from_static("x-envoy-ip-tags"),
    HeaderName::from_static("x-envoy-original-url"),
    HeaderName::from_static("x-envoy-hedge-on-per-try-timeout"),
];

/// Removed from edge requests only (the first hop into the mesh).
const EDGE_STRIPPED: [HeaderName; 4] = [
    HeaderName::from_static("x-envoy-decorator-operation"),
    X_ENVOY_DOWNSTREAM_SERVICE_CLUSTER,
    X_ENVOY_DOWNSTREAM_SERVICE_NODE,
    HeaderName::from_static("x-envoy-original-path"),
];
const X_ENVOY_DOWNSTREAM_SERVICE_CLUSTER: HeaderName = HeaderName::from_static("x-envoy-downstream-service-cluster");
const X_ENVOY_DOWNSTREAM_SERVICE_NODE: HeaderName = HeaderName::from_static("x-envoy-downstream-service-node");

/// The downstream connection a request came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Downstream {
    pub peer: SocketAddr,
    /// The listener address the connection was accepted on.
    pub local: SocketAddr,
    pub tls: bool,
}

/// What the request handling decided, for routing, access logs and the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestClassification {
    /// The client's address: the peer, or taken from `x-forwarded-for`.
    pub client: IpAddr,
    /// From an internal address through at most trusted hops: `x-envoy-*` headers kept.
    pub internal: bool,
    /// External and `use_remote_address`: this proxy is the first hop.
    pub edge: bool,
}

/// Where a request came from, as the connection manager's header rules need it.
#[derive(Debug, Clone, Copy)]
pub struct RequestOrigin<'a> {
    pub downstream: Downstream,
    /// This node's own address (Envoy's `localAddress()`: its first non-loopback
    /// interface address), appended to `x-forwarded-for` in place of a loopback peer.
    pub node_address: IpAddr,
    /// The client's certificate, on a TLS connection where it presented one.
    pub peer_certificate: Option<&'a PeerIdentity>,
    /// The first URI SAN of the certificate this side presented (`By=` of XFCC).
    pub local_uri_san: Option<&'a str>,
    /// This proxy's node: its cluster and id (for `add_user_agent`).
    pub local_node: LocalNodeNames<'a>,
}

/// A node's cluster and id, as the bootstrap's `node` (or `--service-cluster` and
/// `--service-node`) gives them.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalNodeNames<'a> {
    pub cluster: &'a str,
    pub id: &'a str,
}

/// Applies the connection manager's request header rules before routing, in Envoy's
/// order (`ConnectionManagerUtility::mutateRequestHeaders`). `internal_only_headers` is
/// the route configuration's; which clients are internal is `internal_address_config`
/// (none when it is unset, as Envoy 1.40).
pub fn mutate_request_headers(
    hcm: &HttpConnectionManager,
    internal_only_headers: &[HeaderName],
    origin: &RequestOrigin<'_>,
    headers: &mut HeaderMap,
) -> RequestClassification {
    let downstream = &origin.downstream;
    // Envoy's header map holds one `x-forwarded-for` and one XFCC, repeated lines joined
    // with `,` as they are parsed; the upstream gets that one line whatever else happens.
    for name in [X_FORWARDED_FOR, xfcc::X_FORWARDED_CLIENT_CERT] {
        coalesce(headers, name);
    }
    strip_hop_by_hop(headers);
    headers.remove(X_ENVOY_INTERNAL);
    let proto = if downstream.tls { "https" } else { "http" };

    let (client, trusted_checks) = if hcm.use_remote_address {
        // Checks on a trusted address only when the client sent no XFF.
        let trusted_checks = !headers.contains_key(X_FORWARDED_FOR);
        let from_xff = match hcm.xff_num_trusted_hops {
            0 => None,
            hops => last_xff_address(headers, hops - 1).map(|(ip, _)| ip),
        };
        if !hcm.skip_xff_append {
            let peer = downstream.peer.ip();
            append_xff(headers, if peer.is_loopback() { origin.node_address } else { peer });
        }
        if hcm.xff_num_trusted_hops == 0 || !headers.contains_key(X_FORWARDED_PROTO) {
            headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
        }
        (from_xff.unwrap_or(downstream.peer.ip()), trusted_checks)
    } else {
        match last_xff_address(headers, hcm.xff_num_trusted_hops) {
            Some((ip, single)) => (ip, single),
            None => (downstream.peer.ip(), false),
        }
    };
    if !headers.contains_key(X_FORWARDED_PROTO) {
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    }
    if hcm.append_x_forwarded_port && (!headers.contains_key(X_FORWARDED_PORT) || hcm.xff_num_trusted_hops == 0) {
        headers.insert(X_FORWARDED_PORT, HeaderValue::from(downstream.local.port()));
    }

    let internal = trusted_checks && hcm.internal_address.contains(client);
    let edge = !internal && hcm.use_remote_address;
    if internal {
        headers.insert(X_ENVOY_INTERNAL, HeaderValue::from_static("true"));
    } else {
        // One pass over the request's names instead of seventeen look-ups.
        if has_envoy_header(headers) {
            if edge {
                EDGE_STRIPPED.iter().for_each(|h| drop(headers.remove(h)));
            }
            EXTERNAL_STRIPPED.iter().for_each(|h| drop(headers.remove(h)));
        }
        internal_only_headers.iter().for_each(|h| drop(headers.remove(h)));
    }
    if hcm.add_user_agent {
        add_user_agent(headers, origin.local_node);
    }
    append_via(headers, &hcm.via);
    // Set (replacing whatever the client wrote) on every edge request: the first hop into
    // the trusted network says who the client is.
    if edge && let Ok(value) = HeaderValue::from_str(&client.to_string()) {
        headers.insert(X_ENVOY_EXTERNAL_ADDRESS, value);
    }

    // An edge request gets a fresh id unless external ids are preserved; any request
    // without one gets one.
    // Two ids are none that can be trusted: Envoy forwards one it generates.
    if hcm.generate_request_id && headers.get_all(X_REQUEST_ID).iter().nth(1).is_some() {
        headers.remove(X_REQUEST_ID);
    }
    if hcm.generate_request_id && (!headers.contains_key(X_REQUEST_ID) || (edge && !hcm.preserve_external_request_id)) {
        headers.insert(X_REQUEST_ID, new_request_id());
    }
    xfcc::mutate(hcm, origin.downstream.tls, origin.peer_certificate, origin.local_uri_san, headers);
    RequestClassification { client, internal, edge }
}

/// `add_user_agent`, in Envoy's order (after the external request's `x-envoy-*` headers
/// are removed, so these replace whatever the client sent): the node's cluster as
/// `x-envoy-downstream-service-cluster` (even when empty) and as `user-agent` when the
/// request has none or an empty one, its id as `x-envoy-downstream-service-node` when set.
fn add_user_agent(headers: &mut HeaderMap, node: LocalNodeNames<'_>) {
    let Ok(cluster) = HeaderValue::from_str(node.cluster) else { return };
    headers.insert(X_ENVOY_DOWNSTREAM_SERVICE_CLUSTER, cluster.clone());
    if headers.get(http::header::USER_AGENT).is_none_or(|v| v.is_empty()) {
        headers.insert(http::header::USER_AGENT, cluster);
    }
    if !node.id.is_empty()
        && let Ok(id) = HeaderValue::from_str(node.id)
    {
        headers.insert(X_ENVOY_DOWNSTREAM_SERVICE_NODE, id);
    }
}

/// A random (version 4) UUID, as Envoy's default request id extension makes. Drawn from
/// the thread's CSPRNG (rand's, seeded from the operating system and reseeded by it), not
/// from a `getrandom` call per request as `Uuid::new_v4` makes.
pub fn new_request_id() -> HeaderValue {
    let mut buffer = uuid::Uuid::encode_buffer();
    let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
    HeaderValue::from_str(id.hyphenated().encode_lower(&mut buffer))
        .unwrap_or(HeaderValue::from_static("00000000-0000-4000-8000-000000000000"))
}

/// Removes the hop-by-hop headers of a request or response. `connection` and `upgrade`
/// stay on an upgrade (WebSocket) exchange, which forwards them verbatim; `te` keeps only
/// `trailers`, the one value meaningful end to end (gRPC needs it).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if !has_hop_by_hop(headers) {
        return;
    }
    HOP_BY_HOP.iter().for_each(|h| drop(headers.remove(h)));
    if !is_upgrade(headers) {
        headers.remove(CONNECTION);
        headers.remove(UPGRADE);
    }
    let keeps_trailers = headers
        .get_all(TE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("trailers")));
    headers.remove(TE);
    if keeps_trailers {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
}

/// Whether any hop-by-hop header is present (`connection`, `upgrade` and `te` included):
/// one pass over the names, where removing each would hash it and probe the map, and most
/// messages carry none.
fn has_hop_by_hop(headers: &HeaderMap) -> bool {
    headers.keys().any(|name| HOP_BY_HOP.contains(name) || name == CONNECTION || name == UPGRADE || name == TE)
}

/// An upgrade request or response: `upgrade` present and `connection` lists `upgrade`.
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(UPGRADE)
        && headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// The address `skip` entries from the right of `x-forwarded-for`, and whether the header
/// held a single address. `None` when there are not enough entries or it is not an IP.
fn last_xff_address(headers: &HeaderMap, skip: u32) -> Option<(IpAddr, bool)> {
    let values: Vec<&str> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let index = values.len().checked_sub(1)?.checked_sub(usize::try_from(skip).ok()?)?;
    let ip = values[index].parse().ok()?;
    Some((ip, values.len() == 1))
}

/// Joins the repeated lines of `name` into one with `,` (nothing to do for most requests).
fn coalesce(headers: &mut HeaderMap, name: HeaderName) {
    let mut values = headers.get_all(&name).iter();
    if values.next().is_none() || values.next().is_none() {
        return;
    }
    let joined: Vec<&[u8]> = headers.get_all(&name).iter().map(HeaderValue::as_bytes).collect();
    if let Ok(value) = HeaderValue::from_bytes(&joined.join(&b","[..])) {
        headers.insert(name, value);
    }
}

/// Envoy appends to `x-forwarded-for` with a bare `,` (its codecs join repeated lines of
/// the header with `,` too).
fn append_xff(headers: &mut HeaderMap, ip: IpAddr) {
    append_list(headers, X_FORWARDED_FOR, &ip.to_string(), ",");
}

fn append_via(headers: &mut HeaderMap, via: &str) {
    if !via.is_empty() {
        append_list(headers, VIA, via, ", ");
    }
}

/// Appends `value` to a comma-separated header (joining repeated headers into one) after
/// `separator`.
pub(crate) fn append_list(headers: &mut HeaderMap, name: HeaderName, value: &str, separator: &str) {
    let existing: Vec<&[u8]> = headers.get_all(&name).iter().map(HeaderValue::as_bytes).collect();
    let mut joined = Vec::new();
    for part in existing {
        joined.extend_from_slice(part);
        joined.extend_from_slice(separator.as_bytes());
    }
    joined.extend_from_slice(value.as_bytes());
    if let Ok(joined) = HeaderValue::from_bytes(&joined) {
        headers.insert(name, joined);
    }
}

/// Applies the connection manager's response header rules: hop-by-hop headers removed
/// (upgrade responses to upgrade requests keep `connection`/`upgrade`), `via` appended
/// when configured, and `server` per `server_header_transformation`. The request's id is
/// [`request_id_for_response`]'s.
pub fn mutate_response_headers(hcm: &HttpConnectionManager, request: Option<&HeaderMap>, response: &mut HeaderMap) {
    if has_hop_by_hop(response) {
        let upgrade = request.is_some_and(is_upgrade) && is_upgrade(response);
        HOP_BY_HOP.iter().for_each(|h| drop(response.remove(h)));
        if !upgrade {
            response.remove(CONNECTION);
            response.remove(UPGRADE);
        }
    }
    append_via(response, &hcm.via);
    set_server(hcm, response);
}

/// The `x-request-id` a response gets: the request's, when `always_set_request_id_in_response`
/// or the request forced a trace (`x-envoy-force-trace`, kept only from internal clients).
/// Taken from the request as the filters leave it, and set on every response to it,
/// forwarded or local, as Envoy's encoder does.
pub fn request_id_for_response(hcm: &HttpConnectionManager, request: &HeaderMap) -> Option<HeaderValue> {
    (hcm.always_set_request_id_in_response || request.contains_key(X_ENVOY_FORCE_TRACE))
        .then(|| request.get(X_REQUEST_ID).cloned())
        .flatten()
}

/// `server`: overwritten with `server_name` (Envoy's default transformation), set only when
/// absent, or passed through.
pub fn set_server(hcm: &HttpConnectionManager, response: &mut HeaderMap) {
    let set = match hcm.server_header_transformation {
        ServerHeaderTransformation::Overwrite => true,
        ServerHeaderTransformation::AppendIfAbsent => !response.contains_key(SERVER),
        ServerHeaderTransformation::PassThrough => false,
    };
    if set && let Ok(value) = HeaderValue::from_str(&hcm.server_name) {
        response.insert(SERVER, value);
    }
}

/// `x-envoy-upstream-service-time`: milliseconds from the end of the downstream request
/// to the upstream response headers, unless the router suppresses Envoy headers.
pub fn set_upstream_service_time(response: &mut HeaderMap, elapsed: Duration, suppress_envoy_headers: bool) {
    if !suppress_envoy_headers {
        let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        response.insert(X_ENVOY_UPSTREAM_SERVICE_TIME, HeaderValue::from(ms));
    }
}

#[cfg(test)]
pub(crate) mod tests;
