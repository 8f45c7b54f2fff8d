//! `envoy.filters.http.compressor`: compresses the response body with the encoding the
//! client prefers among the compressor filters of the chain (Istio's stats listener chains
//! brotli, zstd and gzip). Each filter notes the request's `accept-encoding` on the way
//! in and, on the way out, decides as Envoy's `encodeHeaders` does: only one filter of
//! the chain (the one whose encoding was chosen) compresses, each counts why it did not.
//!
//! Envoy caches the choice in the stream's filter state for the other compressors; here
//! every filter recomputes it from the same inputs (the chain's compressors enabled for the
//! request, the response's content type, and the one `accept-encoding` value they all
//! saw), which gives the same answer without shared per-request state.

mod accept_encoding;
mod body;

use std::sync::Arc;

use http::header::{
    ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, ETAG, TRANSFER_ENCODING, VARY,
};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Body;

use self::accept_encoding::{Candidate, Reason};
use self::body::{ByteCounters, CompressedBody};
use super::context::{ProxyBody, RequestContext, ResponseHook};
use super::http::{FactoryContext, FilterHeadersStatus, HttpFilter};
use crate::config::filters::compressor::Compressor;
use crate::config::filters::{FilterOverride, HttpFilterConfig};
use crate::telemetry::{Counter, Scope};

/// Envoy's `http.<prefix>.compressor.<library name>.<library>.…` counters.
struct Counters {
    // The response's: at the library's root.
    no_accept_header: Counter,
    header_identity: Counter,
    header_compressor_used: Counter,
    header_compressor_overshadowed: Counter,
    header_wildcard: Counter,
    header_not_valid: Counter,
    not_compressed_etag: Counter,
    // Common to both directions: under `response.` when `response_direction_config` is set.
    compressed: Counter,
    not_compressed: Counter,
    content_length_too_small: Counter,
    bytes: ByteCounters,
    /// `request.not_compressed`: Outrider never compresses requests (a configuration that
    /// asks for it is refused), so every request counts here, as in Envoy without request
    /// compression.
    request_not_compressed: Counter,
}

impl Counters {
    fn new(config: &Compressor, factory: FactoryContext<'_>) -> Self {
        let root = Scope::envoy()
            .child("http")
            .tagged("envoy_http_conn_manager_prefix", factory.stat_prefix)
            .child("compressor")
            .child(&config.library_name)
            .child(config.library.stat_prefix());
        let response = if config.response_stats_scoped { root.child("response") } else { root.clone() };
        let request = root.child("request");
        let counter = |scope: &Scope, name: &str| factory.stats.counter(scope.name(name));
        // Envoy registers the request direction's counters too; they stay at 0.
        for name in ["compressed", "content_length_too_small", "total_compressed_bytes", "total_uncompressed_bytes"] {
            drop(counter(&request, name));
        }
        Self {
            no_accept_header: counter(&root, "no_accept_header"),
            header_identity: counter(&root, "header_identity"),
            header_compressor_used: counter(&root, "header_compressor_used"),
            header_compressor_overshadowed: counter(&root, "header_compressor_overshadowed"),
            header_wildcard: counter(&root, "header_wildcard"),
            header_not_valid: counter(&root, "header_not_valid"),
            not_compressed_etag: counter(&root, "not_compressed_etag"),
            compressed: counter(&response, "compressed"),
            not_compressed: counter(&response, "not_compressed"),
            content_length_too_small: counter(&response, "content_length_too_small"),
            bytes: ByteCounters {
                uncompressed: counter(&response, "total_uncompressed_bytes"),
                compressed: counter(&response, "total_compressed_bytes"),
            },
            request_not_compressed: counter(&request, "not_compressed"),
        }
    }
}

/// A compressor filter of the chain, as every compressor sees the others.
struct Sibling {
    name: String,
    disabled: bool,
    config: Arc<Compressor>,
}

/// What one filter's decisions need, shared with the hooks of its requests.
struct Shared {
    config: Arc<Compressor>,
    /// The chain's compressor filters in order, this one included (Envoy's per-stream
    /// registry of compressors).
    chain: Vec<Sibling>,
    counters: Counters,
}

pub struct CompressorFilter {
    shared: Arc<Shared>,
}

impl CompressorFilter {
    /// `chain` is the connection manager's whole filter list.
    pub fn new(
        config: Arc<Compressor>,
        chain: &[crate::config::filters::HttpFilter],
        factory: FactoryContext<'_>,
    ) -> Self {
        let chain = chain
            .iter()
            .filter_map(|f| match &f.config {
                HttpFilterConfig::Compressor(config) => {
                    Some(Sibling { name: f.name.clone(), disabled: f.disabled, config: config.clone() })
                }
                _ => None,
            })
            .collect();
        let counters = Counters::new(&config, factory);
        Self { shared: Arc::new(Shared { config, chain, counters }) }
    }
}

impl HttpFilter for CompressorFilter {
    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        let shared = &self.shared;
        shared.counters.request_not_compressed.inc();
        let accept_encoding = joined(&request.parts.headers, &ACCEPT_ENCODING);
        let response = &shared.config.response;
        if response.enabled && response.remove_accept_encoding_header {
            request.parts.headers.remove(ACCEPT_ENCODING);
        }
        // The compressors that run for this request (a route may turn one off), as the
        // filters Envoy instantiates for the stream register themselves.
        let running = shared
            .chain
            .iter()
            .enumerate()
            .filter(|(_, s)| match request.per_filter(&s.name) {
                Some(FilterOverride::Enabled(enabled)) => *enabled,
                Some(_) => true,
                None => !s.disabled,
            })
            .map(|(i, _)| i)
            .collect();
        request.response_hooks.push(Box::new(CompressorHook {
            shared: shared.clone(),
            accept_encoding,
            running,
            is_head: request.parts.method == Method::HEAD,
        }));
        FilterHeadersStatus::Continue
    }
}

/// One request's pass of a compressor filter over the response.
struct CompressorHook {
    shared: Arc<Shared>,
    /// The request's `accept-encoding` as this filter saw it (its values joined by `,`).
    accept_encoding: Option<String>,
    /// Indexes into `shared.chain` of the compressors running for this request.
    running: Vec<usize>,
    /// A HEAD request's response ends with its headers.
    is_head: bool,
}

impl ResponseHook for CompressorHook {
    fn on_response(&self, response: Response<ProxyBody>) -> Response<ProxyBody> {
        let (mut parts, body) = response.into_parts();
        let shared = &self.shared;
        let counters = &shared.counters;
        let config = &shared.config.response;
        let end_stream = self.is_head
            || matches!(parts.status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
            || body.is_end_stream();
        let headers = &parts.headers;
        let long_enough = config.enabled && self.minimum_content_length(headers);
        let compressible = long_enough
            && !is_upgrade(parts.status, headers)
            && !config.uncompressible_response_codes.contains(&parts.status.as_u16())
            && content_type(headers).is_none_or(|mime| config.content_types.allows(mime))
            && !has_token(headers, &CACHE_CONTROL, "no-transform")
            && self.etag_allowed(headers)
            && !headers.contains_key(CONTENT_ENCODING);
        let compress = !end_stream
            && long_enough
            && self.accept_encoding_allowed(headers)
            && compressible
            && self.transfer_encoding_allowed(headers);
        let body = if compress {
            match body::encoder(&shared.config.library) {
                Ok(encoder) => {
                    sanitize_etag(&mut parts.headers, config.weaken_etag_on_compress);
                    parts.headers.remove(CONTENT_LENGTH);
                    let encoding = HeaderValue::from_static(shared.config.library.content_encoding());
                    parts.headers.insert(CONTENT_ENCODING, encoding);
                    counters.compressed.inc();
                    CompressedBody::new(body, encoder, counters.bytes.clone()).boxed_unsync()
                }
                Err(error) => {
                    tracing::warn!(%error, "compressor could not start; the response goes uncompressed");
                    counters.not_compressed.inc();
                    body
                }
            }
        } else {
            counters.not_compressed.inc();
            body
        };
        // Even when this client gets no compression, a cache in front must know that the
        // resource varies by `accept-encoding`.
        if compressible {
            insert_vary(&mut parts.headers);
        }
        Response::from_parts(parts, body)
    }
}

impl CompressorHook {
    /// `content-length` at least the minimum; a response without one may be compressed.
    fn minimum_content_length(&self, headers: &HeaderMap) -> bool {
        let Some(length) = headers.get(CONTENT_LENGTH) else {
            return true;
        };
        let long_enough = length
            .to_str()
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|v| v >= self.shared.config.response.min_content_length);
        if !long_enough {
            self.shared.counters.content_length_too_small.inc();
        }
        long_enough
    }

    fn etag_allowed(&self, headers: &HeaderMap) -> bool {
        let config = &self.shared.config.response;
        let allowed = !(config.disable_on_etag_header && !config.weaken_etag_on_compress && headers.contains_key(ETAG));
        if !allowed {
            self.shared.counters.not_compressed_etag.inc();
        }
        allowed
    }

    /// Whether the client's `accept-encoding` chose this filter's encoding, counting why.
    fn accept_encoding_allowed(&self, headers: &HeaderMap) -> bool {
        let counters = &self.shared.counters;
        let Some(accept_encoding) = &self.accept_encoding else {
            counters.no_accept_header.inc();
            return false;
        };
        let mime = content_type(headers).filter(|m| !m.is_empty());
        let candidates: Vec<Candidate<'_>> = self
            .running
            .iter()
            .filter_map(|&i| self.shared.chain.get(i))
            .map(|s| Candidate {
                encoding: s.config.library.content_encoding(),
                allows_content_type: mime.is_none_or(|m| s.config.response.content_types.allows(m)),
                choose_first: s.config.choose_first,
            })
            .collect();
        let decision = accept_encoding::choose(accept_encoding, &candidates);
        let mine = decision.encoding.eq_ignore_ascii_case(self.shared.config.library.content_encoding());
        match decision.reason {
            Reason::Valid if mine => counters.header_compressor_used.inc(),
            Reason::Valid => counters.header_compressor_overshadowed.inc(),
            Reason::Identity => counters.header_identity.inc(),
            Reason::Wildcard => counters.header_wildcard.inc(),
            Reason::NotValid => counters.header_not_valid.inc(),
        }
        mine
    }

    /// A response already transfer-encoded with a compression is left alone.
    fn transfer_encoding_allowed(&self, headers: &HeaderMap) -> bool {
        let mine = self.shared.config.library.content_encoding();
        !["gzip", "br", "deflate", "compress", "zstd", mine]
            .iter()
            .any(|coding| has_token(headers, &TRANSFER_ENCODING, coding))
    }
}

/// The values of `name` joined by `,`, as Envoy keeps a repeated header.
fn joined(headers: &HeaderMap, name: &http::HeaderName) -> Option<String> {
    let values: Vec<&str> = headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// The mime type of `content-type`, without its parameters.
fn content_type(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(CONTENT_TYPE)?.to_str().ok()?;
    Some(value.split(';').next().unwrap_or_default().trim())
}

/// Whether a `,`-separated header has `token` (trimmed, ASCII case-insensitive).
fn has_token(headers: &HeaderMap, name: &http::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

fn is_upgrade(status: StatusCode, headers: &HeaderMap) -> bool {
    status == StatusCode::SWITCHING_PROTOCOLS || headers.contains_key(http::header::UPGRADE)
}

/// A strong `etag` no longer holds for the compressed body: Envoy removes it, or weakens
/// it with `weaken_etag_on_compress`. A weak one stays.
fn sanitize_etag(headers: &mut HeaderMap, weaken: bool) {
    let Some(etag) = headers.get(ETAG) else {
        return;
    };
    if etag.as_bytes().starts_with(b"W/") {
        return;
    }
    let weakened = weaken.then(|| HeaderValue::from_bytes(&[b"W/", etag.as_bytes()].concat()).ok()).flatten();
    match weakened {
        Some(value) => {
            headers.insert(ETAG, value);
        }
        None => {
            headers.remove(ETAG);
        }
    }
}

/// `vary: Accept-Encoding`, added to an existing `vary` unless it names it already (as
/// Envoy compares: the exact token).
fn insert_vary(headers: &mut HeaderMap) {
    const ACCEPT_ENCODING_TOKEN: &str = "Accept-Encoding";
    let value = match joined(headers, &VARY) {
        Some(existing) if existing.split(',').any(|t| t.trim() == ACCEPT_ENCODING_TOKEN) => return,
        Some(existing) => format!("{existing}, {ACCEPT_ENCODING_TOKEN}"),
        None => ACCEPT_ENCODING_TOKEN.to_owned(),
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(VARY, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(n, v)| (http::HeaderName::from_static(n), HeaderValue::from_static(v))).collect()
    }

    #[test]
    fn vary_is_merged_as_envoy_merges_it() {
        let mut h = headers(&[]);
        insert_vary(&mut h);
        assert_eq!(h[VARY], "Accept-Encoding");
        let mut h = headers(&[("vary", "Origin")]);
        insert_vary(&mut h);
        assert_eq!(h[VARY], "Origin, Accept-Encoding");
        let mut h = headers(&[("vary", "Origin, Accept-Encoding")]);
        insert_vary(&mut h);
        assert_eq!(h[VARY], "Origin, Accept-Encoding");
    }

    #[test]
    fn strong_etags_are_removed_or_weakened() {
        let mut h = headers(&[("etag", "\"abc\"")]);
        sanitize_etag(&mut h, false);
        assert!(!h.contains_key(ETAG));
        let mut h = headers(&[("etag", "\"abc\"")]);
        sanitize_etag(&mut h, true);
        assert_eq!(h[ETAG], "W/\"abc\"");
        let mut h = headers(&[("etag", "W/\"abc\"")]);
        sanitize_etag(&mut h, false);
        assert_eq!(h[ETAG], "W/\"abc\"");
    }

    #[test]
    fn content_type_drops_parameters() {
        assert_eq!(content_type(&headers(&[("content-type", "text/html; charset=utf-8")])), Some("text/html"));
        assert_eq!(content_type(&headers(&[])), None);
    }
}
