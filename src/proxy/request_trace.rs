//! The span of one proxied request: started when the connection manager has handled the
//! request's headers (so a generated `x-request-id` is recorded), carried to the
//! upstream as `traceparent`, and ended with the response. Attribute names are Envoy's
//! (`upstream_cluster`, `upstream_address`, `response_flags`, `http.status_code`, …) plus
//! Outrider's `outrider.lb_policy` and `outrider.retries`.

use http::request::Parts;
use http::{HeaderMap, HeaderValue};

use super::filters::DynamicMetadata;
use super::stream_info::FilterState;
use crate::config::cluster::LbPolicy;
use crate::config::filters::peer_metadata::WorkloadMetadata;
use crate::config::format::{Command, FilterStateForm, Piece};
use crate::config::tracing::{CustomTag, CustomTagValue, HcmTracing, PEER_OBJECTS, RouteTracing, Sampling};
use crate::telemetry::{KeyValue, RequestSpan, SpanKind, Tracing};

const X_REQUEST_ID: &str = "x-request-id";
const X_CLIENT_TRACE_ID: &str = "x-client-trace-id";
const X_ENVOY_FORCE_TRACE: &str = "x-envoy-force-trace";

/// Why a request is traced, as Envoy packs it into the `x-request-id` UUID (the character
/// at [`TRACE_BYTE_POSITION`]), so the next proxy along honours the same decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceReason {
    NotTraceable,
    /// `random_sampling` chose it.
    Sampling,
    /// `x-client-trace-id`, within `client_sampling`.
    ClientForced,
    /// `x-envoy-force-trace` (only internal requests keep it).
    ServiceForced,
}

impl TraceReason {
    pub fn traced(self) -> bool {
        self != TraceReason::NotTraceable
    }
}

/// Where a UUID4 has its version digit, `4`; Envoy replaces it with the trace reason.
const TRACE_BYTE_POSITION: usize = 14;
const UUID_LENGTH: usize = 36;

/// Envoy's `mutateTracingRequestHeader`: the reason packed in `x-request-id`, else
/// `x-client-trace-id` within `client_sampling`, else `x-envoy-force-trace`, else
/// `random_sampling` — keyed on the request ID (its first 8 hex digits modulo 10 000), so
/// every proxy that sees the same ID decides the same — and finally `overall_sampling`
/// on the same key. The decision is written back into `x-request-id`. `sampling` is the
/// route's when it has its own. `random` draws the `client_sampling` lottery, which Envoy
/// does not key on the ID.
pub fn trace_reason(
    tracing: &HcmTracing,
    sampling: &Sampling,
    headers: &mut HeaderMap,
    random: impl FnOnce() -> u64,
) -> TraceReason {
    if !tracing.request_id_sampling {
        return TraceReason::Sampling;
    }
    let Some(id) = headers.get(X_REQUEST_ID).and_then(|v| v.to_str().ok()) else {
        return TraceReason::NotTraceable;
    };
    let Some(key) = id.get(..8).and_then(|hex| u64::from_str_radix(hex, 16).ok()) else {
        return TraceReason::NotTraceable;
    };
    let key = key % 10_000;
    let mut reason = packed_reason(id);
    if reason == TraceReason::NotTraceable {
        reason = if headers.contains_key(X_CLIENT_TRACE_ID) && sampling.client.includes(random()) {
            TraceReason::ClientForced
        } else if headers.contains_key(X_ENVOY_FORCE_TRACE) {
            TraceReason::ServiceForced
        } else if sampling.random.includes(key) {
            TraceReason::Sampling
        } else {
            return TraceReason::NotTraceable;
        };
        pack_reason(tracing, headers, reason);
    }
    if reason.traced() && !sampling.overall.includes(key) {
        reason = TraceReason::NotTraceable;
        pack_reason(tracing, headers, reason);
    }
    reason
}

fn packed_reason(id: &str) -> TraceReason {
    if id.len() != UUID_LENGTH {
        return TraceReason::NotTraceable;
    }
    match id.as_bytes().get(TRACE_BYTE_POSITION) {
        Some(b'9') => TraceReason::Sampling,
        Some(b'a') => TraceReason::ServiceForced,
        Some(b'b') => TraceReason::ClientForced,
        _ => TraceReason::NotTraceable,
    }
}

fn pack_reason(tracing: &HcmTracing, headers: &mut HeaderMap, reason: TraceReason) {
    if !tracing.pack_trace_reason {
        return;
    }
    let Some(id) = headers.get(X_REQUEST_ID) else { return };
    let mut id = id.as_bytes().to_vec();
    if id.len() != UUID_LENGTH {
        return;
    }
    let Some(byte) = id.get_mut(TRACE_BYTE_POSITION) else { return };
    *byte = match reason {
        TraceReason::Sampling => b'9',
        TraceReason::ServiceForced => b'a',
        TraceReason::ClientForced => b'b',
        TraceReason::NotTraceable => b'4',
    };
    if let Ok(value) = HeaderValue::from_bytes(&id) {
        headers.insert(X_REQUEST_ID, value);
    }
}

/// Starts the request's span, named `<authority><path>` as Envoy names it by default:
/// a server span, or a client span on an OUTBOUND listener whose connection manager
/// starts no upstream spans (Envoy's choice of kind). `None` when the request's
/// `traceparent` is malformed (Envoy then traces nothing).
pub fn start(
    tracer: &Tracing,
    tracing: &HcmTracing,
    route: Option<&RouteTracing>,
    parts: &Parts,
    reason: TraceReason,
    outbound: bool,
) -> Option<RequestSpan> {
    let authority = parts
        .uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| parts.headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).map(str::to_owned));
    let path = parts.uri.path();
    let name = format!("{}{path}", authority.as_deref().unwrap_or(""));
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let protocol = match parts.version {
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_10 => "HTTP/1.0",
        _ => "HTTP/1.1",
    };
    let mut attributes = vec![
        KeyValue::new("component", "proxy"),
        KeyValue::new("http.method", parts.method.to_string()),
        KeyValue::new("http.url", url(parts, authority.as_deref().unwrap_or(""), tracing.max_path_tag_length)),
        KeyValue::new("http.protocol", protocol),
        KeyValue::new("guid:x-request-id", header(X_REQUEST_ID)),
        KeyValue::new("user_agent", header("user-agent")),
    ];
    attributes.extend(request_tags(&custom_tags(tracing, route), &parts.headers));
    let kind = if outbound && !tracing.spawn_upstream_span { SpanKind::Client } else { SpanKind::Server };
    tracer.start(name, &parts.headers, kind, reason.traced(), attributes)
}

/// Envoy's `http.url`: `<x-forwarded-proto>://<host><path>`, the path (with its query)
/// cut to `max_path_tag_length` bytes.
fn url(parts: &Parts, authority: &str, max_path: usize) -> String {
    let scheme = parts.headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()).unwrap_or("");
    let path = parts.uri.path_and_query().map_or("", |p| p.as_str());
    let mut cut = max_path.min(path.len());
    while !path.is_char_boundary(cut) {
        cut = cut.saturating_sub(1);
    }
    format!("{scheme}://{authority}{}", path.get(..cut).unwrap_or(""))
}

/// The connection manager's custom tags, those of the route replacing the ones of the
/// same name (Envoy keeps them in one map keyed by tag).
pub fn custom_tags<'a>(tracing: &'a HcmTracing, route: Option<&'a RouteTracing>) -> Vec<&'a CustomTag> {
    let route = route.map_or(&[][..], |r| r.custom_tags.as_slice());
    let kept = tracing.custom_tags.iter().filter(|tag| !route.iter().any(|r| r.tag == tag.tag));
    kept.chain(route).collect()
}

/// The custom tags known when the request's headers are: literals and request headers.
/// Envoy adds a tag only when its value is not empty.
fn request_tags(tags: &[&CustomTag], headers: &HeaderMap) -> Vec<KeyValue> {
    tags.iter()
        .filter_map(|tag| {
            let value = match &tag.value {
                CustomTagValue::Literal(value) => value.clone(),
                CustomTagValue::RequestHeader { name, default_value } => {
                    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or(default_value).to_owned()
                }
                CustomTagValue::RequestMetadata { .. } | CustomTagValue::Format(_) => return None,
            };
            (!value.is_empty()).then(|| KeyValue::new(tag.tag.clone(), value))
        })
        .collect()
}

/// The custom tags read from the request's dynamic metadata, once the filters ran.
/// Strings as they are, other values as JSON (Envoy's rendering of a `Value`).
pub fn metadata_tags(tags: &[&CustomTag], metadata: &DynamicMetadata) -> Vec<KeyValue> {
    tags.iter()
        .filter_map(|tag| {
            let CustomTagValue::RequestMetadata { namespace, path, default_value } = &tag.value else {
                return None;
            };
            let value = match metadata.get(namespace, path) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => default_value.clone(),
            };
            (!value.is_empty()).then(|| KeyValue::new(tag.tag.clone(), value))
        })
        .collect()
}

/// What a format tag (`value`) reads: the request's filter state and its peers.
#[derive(Debug, Clone, Copy, Default)]
pub struct TagFacts<'a> {
    pub filter_state: Option<&'a FilterState>,
    pub downstream_peer: Option<&'a WorkloadMetadata>,
    pub upstream_peer: Option<&'a WorkloadMetadata>,
}

/// The custom tags from format strings, filled in from `facts` once the response's head is
/// known (the upstream peer is learnt from it). A tag whose value comes out empty is left
/// off, as Envoy leaves it.
pub fn format_tags(tags: &[&CustomTag], facts: TagFacts<'_>) -> Vec<KeyValue> {
    tags.iter()
        .filter_map(|tag| {
            let CustomTagValue::Format(pieces) = &tag.value else { return None };
            let mut value = String::new();
            for piece in pieces {
                match piece {
                    Piece::Literal(text) => value.push_str(text),
                    Piece::Command { command, max_length } => {
                        let text = format_command(command, facts);
                        let end =
                            max_length.and_then(|max| text.char_indices().nth(max)).map_or(text.len(), |(i, _)| i);
                        value.push_str(&text[..end]);
                    }
                }
            }
            (!value.is_empty()).then(|| KeyValue::new(tag.tag.clone(), value))
        })
        .collect()
}

/// One command of a format tag (conversion admits only these); missing is empty.
fn format_command<'a>(command: &'a Command, facts: TagFacts<'a>) -> std::borrow::Cow<'a, str> {
    use std::borrow::Cow;
    match command {
        Command::Constant(value) => Cow::Borrowed(value.as_deref().unwrap_or_default()),
        Command::FilterState { key, form: FilterStateForm::Plain } => {
            Cow::Borrowed(facts.filter_state.and_then(|s| s.get(key)).unwrap_or_default())
        }
        Command::FilterState { key, form: FilterStateForm::Field(field) } => {
            let peer = if key == PEER_OBJECTS[0] { facts.downstream_peer } else { facts.upstream_peer };
            peer.map_or(Cow::Borrowed(""), |peer| peer_field(peer, field))
        }
        _ => Cow::Borrowed(""),
    }
}

/// A field of Istio's peer object (`WorkloadMetadataObject`) for `peer`.
fn peer_field<'a>(peer: &'a WorkloadMetadata, field: &str) -> std::borrow::Cow<'a, str> {
    use std::borrow::Cow;
    Cow::Borrowed(match field {
        "namespace" => &peer.namespace,
        "cluster" => &peer.cluster_id,
        "service" => peer.canonical_name(),
        "revision" => peer.canonical_revision(),
        "app" => peer.app(),
        "version" => peer.version(),
        "workload" => &peer.workload_name,
        "name" => &peer.name,
        "type" => peer.workload_type(),
        _ => "",
    })
}

/// A balancing policy, by Envoy's name (`None`: a cluster without one, as Envoy's round
/// robin default names it).
pub fn policy(policy: Option<&LbPolicy>) -> &'static str {
    match policy {
        None | Some(LbPolicy::RoundRobin(_)) => "ROUND_ROBIN",
        Some(LbPolicy::LeastRequest(_)) => "LEAST_REQUEST",
        Some(LbPolicy::Random) => "RANDOM",
        Some(LbPolicy::RingHash(_)) => "RING_HASH",
        Some(LbPolicy::Maglev(_)) => "MAGLEV",
        Some(LbPolicy::ClientSideWeightedRoundRobin(_)) => "client_side_weighted_round_robin",
        Some(LbPolicy::PeakEwma(_)) => "peak_ewma",
        Some(LbPolicy::Adaptive(_)) => "adaptive",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::filters::fractional_percent::FractionalPercent;

    fn headers(id: &str, extra: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(X_REQUEST_ID, HeaderValue::from_str(id).unwrap_or(HeaderValue::from_static("")));
        for (name, value) in extra {
            headers.insert(*name, HeaderValue::from_str(value).unwrap_or(HeaderValue::from_static("")));
        }
        headers
    }

    fn sampling(random: u32, client: u32, overall: u32) -> Sampling {
        let of = |numerator, denominator| FractionalPercent { numerator, denominator };
        Sampling { random: of(random, 10_000), client: of(client, 100), overall: of(overall, 10_000) }
    }

    fn reason(sampling: Sampling, headers: &mut HeaderMap, random: u64) -> TraceReason {
        trace_reason(&HcmTracing::default(), &sampling, headers, || random)
    }

    // 0x0000_1388 = 5000: the key of this request ID is 5000.
    const ID: &str = "00001388-0000-4000-8000-000000000000";

    #[test]
    fn random_sampling_is_keyed_on_the_request_id_and_packed_into_it() {
        let mut h = headers(ID, &[]);
        assert_eq!(reason(sampling(5_001, 100, 10_000), &mut h, 0), TraceReason::Sampling);
        assert_eq!(h.get(X_REQUEST_ID).map(HeaderValue::as_bytes), Some(&b"00001388-0000-9000-8000-000000000000"[..]));
        // The next proxy honours the packed decision whatever its own percentage.
        assert_eq!(reason(sampling(0, 100, 10_000), &mut h, 0), TraceReason::Sampling);
        let mut h = headers(ID, &[]);
        assert_eq!(reason(sampling(5_000, 100, 10_000), &mut h, 0), TraceReason::NotTraceable);
        assert_eq!(h.get(X_REQUEST_ID).map(HeaderValue::as_bytes), Some(ID.as_bytes()), "left alone");
    }

    #[test]
    fn client_and_forced_traces_then_the_overall_cap() {
        let mut h = headers(ID, &[(X_CLIENT_TRACE_ID, "abc")]);
        assert_eq!(reason(sampling(0, 100, 10_000), &mut h, 99), TraceReason::ClientForced);
        let mut h = headers(ID, &[(X_CLIENT_TRACE_ID, "abc")]);
        assert_eq!(reason(sampling(0, 0, 10_000), &mut h, 0), TraceReason::NotTraceable);
        let mut h = headers(ID, &[(X_ENVOY_FORCE_TRACE, "true")]);
        assert_eq!(reason(sampling(0, 100, 10_000), &mut h, 0), TraceReason::ServiceForced);
        let mut h = headers(ID, &[(X_ENVOY_FORCE_TRACE, "true")]);
        assert_eq!(reason(sampling(0, 100, 5_000), &mut h, 0), TraceReason::NotTraceable);
        assert_eq!(h.get(X_REQUEST_ID).map(HeaderValue::as_bytes), Some(ID.as_bytes()), "packed back to 4");
        let mut no_id = HeaderMap::new();
        assert_eq!(reason(sampling(10_000, 100, 10_000), &mut no_id, 0), TraceReason::NotTraceable);
    }

    #[test]
    fn the_url_tag_cuts_the_path() {
        let (mut parts, ()) = http::Request::get("/a/long/path?q=1").body(()).unwrap_or_default().into_parts();
        parts.headers.insert("x-forwarded-proto", HeaderValue::from_static("http"));
        assert_eq!(url(&parts, "example.com", 256), "http://example.com/a/long/path?q=1");
        assert_eq!(url(&parts, "example.com", 2), "http://example.com/a");
    }

    #[test]
    fn format_tags_read_the_peers_fields_and_the_filter_state() {
        use crate::config::format::{Command, FilterStateForm, Piece};
        use crate::proxy::stream_info::SharedWithUpstream;
        let field = |key: &str, field: &str| Piece::Command {
            command: Command::FilterState { key: key.into(), form: FilterStateForm::Field(field.into()) },
            max_length: None,
        };
        let tag =
            |name: &str, pieces: Vec<Piece>| CustomTag { tag: name.into(), value: CustomTagValue::Format(pieces) };
        let plain = Piece::Command {
            command: Command::FilterState { key: "io.istio.peer_principal".into(), form: FilterStateForm::Plain },
            max_length: Some(6),
        };
        let tags = [
            tag("istio.destination_app", vec![field("upstream_peer_obj", "app")]),
            tag("istio.source_workload_type", vec![field("downstream_peer_obj", "type")]),
            tag("istio.source_namespace", vec![field("downstream_peer_obj", "namespace")]),
            tag("peer", vec![Piece::Literal("p=".into()), plain]),
            tag("literal only", vec![Piece::Literal(String::new())]),
        ];
        let mut upstream = WorkloadMetadata::default();
        upstream.labels.insert("app".into(), "echo".into());
        let downstream = WorkloadMetadata {
            namespace: "shop".into(),
            owner: "kubernetes://apis/batch/v1/namespaces/shop/cronjobs/nightly".into(),
            ..WorkloadMetadata::default()
        };
        let mut state = FilterState::default();
        state.set("io.istio.peer_principal".into(), "spiffe://x".into(), SharedWithUpstream::None);
        let facts =
            TagFacts { filter_state: Some(&state), downstream_peer: Some(&downstream), upstream_peer: Some(&upstream) };
        let found: Vec<String> = format_tags(&tags.iter().collect::<Vec<_>>(), facts)
            .iter()
            .map(|kv| format!("{}={}", kv.key, kv.value))
            .collect();
        assert_eq!(
            found,
            [
                "istio.destination_app=echo",
                "istio.source_workload_type=cronjob",
                "istio.source_namespace=shop",
                "peer=p=spiffe"
            ]
        );
        // Without peers or state, the fields are empty (Envoy's formatter omits empty values
        // here) and a tag left empty is left off; a literal around them stays.
        let none = format_tags(&tags.iter().collect::<Vec<_>>(), TagFacts::default());
        let none: Vec<String> = none.iter().map(|kv| format!("{}={}", kv.key, kv.value)).collect();
        assert_eq!(none, ["peer=p="]);
    }
}
