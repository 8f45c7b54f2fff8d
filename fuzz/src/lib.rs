//! The bodies of Outrider's fuzz targets: each feeds untrusted bytes to a parser or
//! converter that takes input from outside the process, and must return (with an error or
//! not) for every input. A panic, an overflow or a hang is a bug in Outrider.
//!
//! The cargo-fuzz targets in `fuzz_targets/` call these, and so does
//! `tests/proxy/fuzz_smoke.rs`, which runs them on stable with seeded mutations of `corpus/`.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use outrider::config::bootstrap::Bootstrap;
use outrider::config::convert::{decode_resource, resource_name};
use outrider::config::listener::{HttpConnectionManager, RouteSource, TerminalFilter};
use outrider::config::route::RouteConfiguration;
use outrider::config::{ResourceType, Warnings};
use outrider::proxy::headers::{Downstream, RequestOrigin, authority, mutate_request_headers, mutate_response_headers};
use outrider::proxy::router::{
    DownstreamInfo, Routing, UpstreamRequestOptions, apply_request_mutations, apply_response_mutations, route,
};

/// A target's body: one input, no result (only a panic says something).
pub type Body = fn(&[u8]);

/// Every target, by the name of its `fuzz_targets/` file and `corpus/` directory.
pub const TARGETS: [(&str, Body); 4] =
    [("xds_convert", xds_convert), ("orca", orca), ("bootstrap", bootstrap), ("http_headers", http_headers)];

/// One xDS resource as the ADS client receives it: protobuf bytes, decoded and converted
/// as each of the five resource types (as a control plane could send any bytes under any
/// type URL), and named for a NACK.
pub fn xds_convert(data: &[u8]) {
    keep_descriptors();
    for resource_type in ResourceType::ALL {
        let mut warnings = Warnings::new();
        if let Ok(resource) = decode_resource(resource_type, data, &mut warnings) {
            assert_eq!(resource.resource_type(), resource_type);
        }
        let _ = resource_name(resource_type, data);
    }
}

/// A backend's ORCA load report in response headers or trailers: the input is a header
/// block, `name: value` per line (so `endpoint-load-metrics` in its `BIN`, `TEXT` and
/// `JSON` forms, `endpoint-load-metrics-bin`, duplicates and both together are reachable).
pub fn orca(data: &[u8]) {
    let headers = header_block(data.split(|b| *b == b'\n'));
    let _ = outrider::orca::from_headers(&headers);
}

/// Envoy's bootstrap as the text of the file (YAML or JSON); invalid UTF-8 is replaced,
/// as the loader itself only ever sees text.
pub fn bootstrap(data: &[u8]) {
    keep_descriptors();
    let _ = Bootstrap::parse(&String::from_utf8_lossy(data));
}

/// A downstream request head through the connection manager's header handling, the
/// router (route match, redirects, direct responses, timeouts from headers) and the route's
/// header mutations and rewrites, then its response head back through both.
///
/// The first byte picks the connection manager (bit 0), TLS with a client certificate
/// (bit 1) and whether the peer is a private address (bit 2; internal for the edge
/// manager, which sets `internal_address_config`); then a request line `METHOD URI` and
/// header lines follow.
pub fn http_headers(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else { return };
    let fixture = http_fixture();
    let Some(mut parts) = request_head(rest) else { return };
    let hcm = &fixture.connection_managers[usize::from(flags & 1)];
    let peer: SocketAddr =
        if flags & 4 == 0 { ([10, 1, 2, 3], 41000).into() } else { ([203, 0, 113, 9], 41000).into() };
    let local: SocketAddr = ([10, 0, 0, 100], 8080).into();
    let downstream = Downstream { peer, local, tls: flags & 2 != 0 };
    if authority::normalize(hcm, &mut parts, local.port()).is_err() {
        return;
    }
    // A TLS client presented a certificate: the edge manager's XFCC quotes it.
    let peer_certificate = downstream.tls.then(client_certificate);
    let origin = RequestOrigin {
        downstream,
        node_address: local.ip(),
        peer_certificate: peer_certificate.as_ref(),
        local_uri_san: Some("spiffe://cluster.local/ns/default/sa/server"),
    };
    mutate_request_headers(hcm, &fixture.internal_only_headers, &origin, &mut parts.headers);

    let info = DownstreamInfo { remote: Some(peer), local: Some(local), protocol: "HTTP/1.1" };
    let request = parts.headers.clone();
    let mut response = parts.headers.clone();
    match route(&fixture.routes, &parts, u64::from(flags)) {
        Routing::Forward(forward) => {
            let options = UpstreamRequestOptions { suppress_envoy_headers: false, downstream: info };
            apply_request_mutations(&forward, &mut parts, &options);
            apply_response_mutations(&forward.headers, &mut response, &info, Some(&request));
        }
        Routing::DirectResponse { response_headers, .. } | Routing::Redirect { response_headers, .. } => {
            apply_response_mutations(&response_headers, &mut response, &info, Some(&request));
        }
        Routing::NoRoute => {}
    }
    mutate_response_headers(hcm, Some(&request), &mut response);
}

/// The certificate a fuzzed TLS client presents.
fn client_certificate() -> outrider::tls::PeerIdentity {
    outrider::tls::PeerIdentity {
        uri_sans: vec!["spiffe://cluster.local/ns/default/sa/client".into()],
        dns_sans: vec!["client.test".into()],
        subject: "CN=client,O=Example\\, Inc.".into(),
        certificates: Arc::from(vec![b"client".to_vec(), b"root".to_vec()]),
    }
}

/// Keeps Envoy's descriptor pool decoded across runs: it is decoded on demand and dropped
/// when unused, which would make every run pay for decoding several MiB.
fn keep_descriptors() {
    static POOL: OnceLock<Box<dyn std::any::Any + Send + Sync>> = OnceLock::new();
    POOL.get_or_init(|| Box::new(outrider::pb::json::pool().ok()));
    // The typed configs' constraint check decodes its pool unless someone holds it.
    static EXTENSIONS: OnceLock<Box<dyn std::any::Any + Send + Sync>> = OnceLock::new();
    EXTENSIONS.get_or_init(|| Box::new(outrider::pb::pgv::extension_pool().ok()));
}

/// `name: value` lines into a header map; lines that are not a valid header are skipped.
fn header_block<'a>(lines: impl Iterator<Item = &'a [u8]>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|b| *b == b':') else { continue };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(name, value);
        }
    }
    headers
}

/// `METHOD URI` on the first line, header lines after it. `None` when the request line
/// is not one hyper would have accepted.
pub fn request_head(data: &[u8]) -> Option<Parts> {
    let mut lines = data.split(|b| *b == b'\n');
    let request_line = lines.next()?;
    let mut words = request_line.trim_ascii().split(|b| *b == b' ');
    let method = Method::from_bytes(words.next()?).ok()?;
    let uri = Uri::try_from(words.next()?).ok()?;
    let (mut parts, ()) = Request::builder().method(method).uri(uri).body(()).ok()?.into_parts();
    parts.headers = header_block(lines);
    Some(parts)
}

/// What the `http_headers` target routes with, loaded once from `http_fixture.yaml`.
struct HttpFixture {
    /// The default connection manager, and one at the edge (`use_remote_address`, a
    /// trusted hop, `via`, `x-forwarded-port`).
    connection_managers: [HttpConnectionManager; 2],
    routes: Arc<RouteConfiguration>,
    internal_only_headers: Vec<HeaderName>,
}

#[allow(clippy::expect_used, clippy::panic)] // a fixed fixture that fails to load is a bug to report
fn http_fixture() -> &'static HttpFixture {
    static FIXTURE: OnceLock<HttpFixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let bootstrap = Bootstrap::parse(include_str!("http_fixture.yaml")).expect("http_fixture.yaml loads");
        let hcms: Vec<HttpConnectionManager> = bootstrap
            .static_listeners
            .iter()
            .flat_map(|l| l.filter_chains.iter())
            .filter_map(|chain| match &chain.terminal {
                TerminalFilter::HttpConnectionManager(hcm) => Some((**hcm).clone()),
                TerminalFilter::TcpProxy(_) => None,
            })
            .collect();
        let [plain, edge] = <[HttpConnectionManager; 2]>::try_from(hcms).expect("two connection managers");
        let RouteSource::Inline(routes) = plain.route_source.clone() else {
            panic!("http_fixture.yaml: the first connection manager has inline routes")
        };
        let internal_only_headers = routes.internal_only_headers.clone();
        HttpFixture { connection_managers: [plain, edge], routes, internal_only_headers }
    })
}
