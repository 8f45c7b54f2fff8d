//! The `CheckRequest` Envoy sends for a request (`CheckRequestUtils::createHttpCheck`) or a
//! connection (`createTcpCheck`): the peers' addresses and principals, the request's
//! method, path, host, scheme, protocol and headers, and the route's context extensions.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::SystemTime;

use http::Version;

use super::metadata::json_to_struct;
use crate::config::filters::ext_authz::ExtAuthz;
use crate::config::route::StringMatcher;
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer, Request, TlsSession};
use crate::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest};
use crate::proxy::filters::context::{DownstreamConnection, RequestContext};

/// Envoy skips a client's own copy of this header: it marks a partial body in the check.
const PARTIAL_BODY_HEADER: &str = "x-envoy-auth-partial-body";

/// The check for one HTTP request.
pub fn http_check(
    config: &ExtAuthz,
    request: &RequestContext<'_>,
    context_extensions: BTreeMap<String, String>,
    stream_id: u64,
) -> CheckRequest {
    let connection = request.connection;
    let service = request
        .parts
        .headers
        .get("x-envoy-downstream-service-cluster")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let mut source = peer(connection.peer, connection, false);
    source.service = service;
    let destination = peer(connection.local, connection, true);
    let headers = request_headers(request);
    let (mut map, mut raw) = (HashMap::new(), Vec::new());
    for (name, value) in headers {
        if name == PARTIAL_BODY_HEADER || !allowed(config, &name) {
            continue;
        }
        if config.encode_raw_headers {
            raw.push(core::HeaderValue { key: name, value: String::new(), raw_value: value.into_bytes() });
        } else {
            // Envoy joins the values of a repeated header with commas.
            map.entry(name)
                .and_modify(|joined: &mut String| {
                    joined.push(',');
                    joined.push_str(&value);
                })
                .or_insert(value);
        }
    }
    let parts = &*request.parts;
    let http = HttpRequest {
        id: stream_id.to_string(),
        method: parts.method.as_str().to_owned(),
        path: request.path().to_owned(),
        host: authority(request).unwrap_or_default(),
        scheme: scheme(request).to_owned(),
        protocol: protocol(parts.version).to_owned(),
        headers: map,
        header_map: config.encode_raw_headers.then_some(core::HeaderMap { headers: raw }),
        ..HttpRequest::default()
    };
    let mut metadata_context = core::Metadata::default();
    for namespace in &config.metadata_context_namespaces {
        if let Some(fields) = request.metadata.0.get(namespace) {
            metadata_context.filter_metadata.insert(namespace.clone(), json_to_struct(fields));
        }
    }
    let attributes = AttributeContext {
        source: Some(source),
        destination: Some(destination),
        request: Some(Request { time: Some(timestamp(SystemTime::now())), http: Some(http) }),
        context_extensions: context_extensions.into_iter().collect(),
        metadata_context: Some(metadata_context),
        route_metadata_context: Some(core::Metadata::default()),
        tls_session: config.include_tls_session.then(|| tls_session(connection)),
    };
    CheckRequest { attributes: Some(attributes) }
}

/// The check for a new connection (the network filter): its peers only; the destination's
/// service is the SNI, as in Envoy.
pub fn tcp_check(connection: &DownstreamConnection, include_tls_session: bool) -> CheckRequest {
    let source = peer(connection.peer, connection, false);
    let mut destination = peer(connection.local, connection, true);
    destination.service = connection.server_name.clone().unwrap_or_default();
    let attributes = AttributeContext {
        source: Some(source),
        destination: Some(destination),
        tls_session: include_tls_session.then(|| tls_session(connection)),
        ..AttributeContext::default()
    };
    CheckRequest { attributes: Some(attributes) }
}

fn allowed(config: &ExtAuthz, name: &str) -> bool {
    let matches = |list: &[StringMatcher]| list.iter().any(|m| m.matches(name));
    !matches(&config.disallowed_headers) && config.allowed_headers.as_deref().is_none_or(matches)
}

/// The request's headers as Envoy's header map holds them: the pseudo-headers first
/// (`:authority` in place of HTTP/1's `host`), then the others in order, lower-cased.
fn request_headers(request: &RequestContext<'_>) -> Vec<(String, String)> {
    let parts = &*request.parts;
    let mut headers = Vec::with_capacity(parts.headers.len() + 4);
    if let Some(authority) = authority(request) {
        headers.push((":authority".to_owned(), authority));
    }
    headers.push((":path".to_owned(), request.path().to_owned()));
    headers.push((":method".to_owned(), parts.method.as_str().to_owned()));
    headers.push((":scheme".to_owned(), scheme(request).to_owned()));
    for (name, value) in &parts.headers {
        if name == http::header::HOST {
            continue;
        }
        headers.push((name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()));
    }
    headers
}

fn authority(request: &RequestContext<'_>) -> Option<String> {
    let parts = &*request.parts;
    parts
        .uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| parts.headers.get(http::header::HOST).map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned()))
}

fn scheme<'a>(request: &'a RequestContext<'_>) -> &'a str {
    match request.parts.uri.scheme_str() {
        Some(scheme) => scheme,
        None if request.connection.tls => "https",
        None => "http",
    }
}

/// Envoy's protocol strings.
fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 | Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

/// A peer: its address, and its principal (the first URI SAN, else the first DNS SAN,
/// else the subject) when the connection is TLS. Outrider does not keep its own
/// certificate's names per connection, so the destination's principal stays empty.
fn peer(address: SocketAddr, connection: &DownstreamConnection, local: bool) -> Peer {
    let principal = match (&connection.peer_identity, local) {
        (Some(identity), false) => {
            identity.uri_sans.first().or(identity.dns_sans.first()).cloned().unwrap_or_else(|| identity.subject.clone())
        }
        _ => String::new(),
    };
    Peer { address: Some(socket_address(address)), principal, ..Peer::default() }
}

pub fn socket_address(address: SocketAddr) -> core::Address {
    core::Address {
        address: Some(core::address::Address::SocketAddress(core::SocketAddress {
            address: address.ip().to_string(),
            port_specifier: Some(core::socket_address::PortSpecifier::PortValue(u32::from(address.port()))),
            ..core::SocketAddress::default()
        })),
    }
}

fn tls_session(connection: &DownstreamConnection) -> TlsSession {
    TlsSession { sni: connection.server_name.clone().unwrap_or_default() }
}

fn timestamp(time: SystemTime) -> crate::pb::google::protobuf::Timestamp {
    let since = time.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    crate::pb::google::protobuf::Timestamp {
        seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(since.subsec_nanos()).unwrap_or(0),
    }
}
