//! Fills a parsed format ([`LogFormat`]) in with one request's record: a text line, or a
//! JSON object on one line. A missing value is `-` in text (nothing with
//! `omit_empty_values`) and `null` in JSON (the key left out with `omit_empty_values`);
//! in JSON a lone command keeps its type, so codes, sizes and durations are numbers, as
//! Envoy writes them.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write as _;

use super::{PendingLog, protocol, time};
use crate::config::access_log::LogFormat;
use crate::config::format::{Command, FilterStateForm, JsonField, Piece};

/// One command's value.
#[derive(Debug)]
enum Value<'a> {
    Missing,
    Text(Cow<'a, str>),
    Number(u64),
    Json(&'a serde_json::Value),
    /// A whole metadata namespace (`%DYNAMIC_METADATA(ns)%`).
    Object(&'a serde_json::Map<String, serde_json::Value>),
}

/// Appends `record`'s line in `format`, newline included for JSON (a text format ends
/// its lines itself, as Envoy's do).
pub fn write(format: &LogFormat, record: &PendingLog, out: &mut Vec<u8>) {
    match format {
        LogFormat::Text { pieces, omit_empty } => text(pieces, record, *omit_empty, out),
        LogFormat::Json { fields, omit_empty } => {
            object(fields, record, *omit_empty, out);
            out.push(b'\n');
        }
    }
}

/// A text format's pieces, filled in (also the OpenTelemetry logger's strings).
pub(super) fn text(pieces: &[Piece], record: &PendingLog, omit_empty: bool, out: &mut Vec<u8>) {
    for piece in pieces {
        match piece {
            Piece::Literal(literal) => out.extend_from_slice(literal.as_bytes()),
            Piece::Command { command, max_length } => {
                let value = value(command, record, out);
                write_text(value, *max_length, omit_empty, out);
            }
        }
    }
}

fn write_text(value: Option<Value<'_>>, max_length: Option<usize>, omit_empty: bool, out: &mut Vec<u8>) {
    match value {
        // START_TIME wrote itself.
        None => {}
        Some(Value::Missing) if !omit_empty => out.push(b'-'),
        Some(Value::Missing) => {}
        Some(Value::Text(text)) => out.extend_from_slice(truncate(&text, max_length).as_bytes()),
        Some(Value::Number(n)) => {
            let _ = write!(out, "{n}");
        }
        Some(Value::Json(serde_json::Value::String(s))) => out.extend_from_slice(truncate(s, max_length).as_bytes()),
        Some(Value::Json(value)) => {
            let text = value.to_string();
            out.extend_from_slice(truncate(&text, max_length).as_bytes());
        }
        Some(Value::Object(object)) => {
            let text = serde_json::to_string(object).unwrap_or_default();
            out.extend_from_slice(truncate(&text, max_length).as_bytes());
        }
    }
}

/// Envoy truncates to `max_length` bytes; a cut inside a character backs off to its start.
fn truncate(text: &str, max_length: Option<usize>) -> &str {
    match max_length {
        Some(max) if text.len() > max => {
            let mut end = max;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            &text[..end]
        }
        _ => text,
    }
}

fn object(fields: &[(String, JsonField)], record: &PendingLog, omit_empty: bool, out: &mut Vec<u8>) {
    out.push(b'{');
    let mut first = true;
    for (key, field) in fields {
        let start = out.len();
        if !first {
            out.push(b',');
        }
        json_string(key, out);
        out.push(b':');
        let written = match field {
            JsonField::Object(nested) => {
                object(nested, record, omit_empty, out);
                true
            }
            JsonField::Template(pieces) => template(pieces, record, omit_empty, out),
        };
        if written {
            first = false;
        } else {
            out.truncate(start);
        }
    }
    out.push(b'}');
}

/// A JSON value from a template; false when it is missing and left out.
fn template(pieces: &[Piece], record: &PendingLog, omit_empty: bool, out: &mut Vec<u8>) -> bool {
    if let [Piece::Command { command, max_length }] = pieces {
        let mut scratch = Vec::new();
        let value = value(command, record, &mut scratch);
        match value {
            None => json_string(&String::from_utf8_lossy(&scratch), out),
            Some(Value::Missing) => {
                if omit_empty {
                    return false;
                }
                out.extend_from_slice(b"null");
            }
            Some(Value::Text(text)) => json_string(truncate(&text, *max_length), out),
            Some(Value::Number(n)) => {
                let _ = write!(out, "{n}");
            }
            Some(Value::Json(serde_json::Value::String(s))) => json_string(truncate(s, *max_length), out),
            Some(Value::Json(value)) => {
                let _ = serde_json::to_writer(&mut *out, value);
            }
            Some(Value::Object(object)) => {
                let _ = serde_json::to_writer(&mut *out, object);
            }
        }
        return true;
    }
    let mut line = Vec::new();
    text(pieces, record, omit_empty, &mut line);
    json_string(&String::from_utf8_lossy(&line), out);
    true
}

fn json_string(text: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for c in text.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn optional<'a>(value: Option<&'a str>) -> Value<'a> {
    value.map_or(Value::Missing, |v| Value::Text(Cow::Borrowed(v)))
}

/// A command's value; `None` when it wrote itself into `out` (START_TIME).
fn value<'a>(command: &'a Command, record: &'a PendingLog, out: &mut Vec<u8>) -> Option<Value<'a>> {
    let header = |found: Option<Cow<'a, str>>| found.map_or(Value::Missing, Value::Text);
    Some(match command {
        Command::StartTime(format) => {
            time::write(record.start, format.as_ref(), out);
            return None;
        }
        Command::Request(lookup) => header(
            record
                .request_header(&lookup.name)
                .or_else(|| lookup.alternative.as_deref().and_then(|alt| record.request_header(alt))),
        ),
        Command::Response(lookup) => header(
            record
                .response_header(&lookup.name)
                .or_else(|| lookup.alternative.as_deref().and_then(|alt| record.response_header(alt))),
        ),
        Command::Trailer(lookup) => header(
            record.trailer(&lookup.name).or_else(|| lookup.alternative.as_deref().and_then(|alt| record.trailer(alt))),
        ),
        Command::Protocol => Value::Text(Cow::Borrowed(protocol(record.version))),
        Command::ResponseCode => Value::Number(u64::from(record.response_code)),
        Command::ResponseCodeDetails => optional(record.details.as_deref()),
        Command::ConnectionTerminationDetails | Command::UpstreamTransportFailureReason => Value::Missing,
        Command::ResponseFlags => Value::Text(Cow::Owned(record.flags.to_string())),
        Command::ResponseFlagsLong => Value::Text(Cow::Owned(record.flags.long_names())),
        Command::BytesReceived => Value::Number(record.bytes_received),
        Command::BytesSent => Value::Number(record.bytes_sent),
        Command::Duration => Value::Number(millis(record.duration)),
        Command::RequestDuration => record.request_duration.map_or(Value::Missing, |d| Value::Number(millis(d))),
        Command::ResponseDuration => record.response_duration.map_or(Value::Missing, |d| Value::Number(millis(d))),
        Command::UpstreamHost => optional(record.upstream_host.as_deref()),
        Command::UpstreamCluster | Command::UpstreamClusterRaw => optional(record.upstream_cluster.as_deref()),
        // The upstream connection's own address is not known to the request.
        Command::UpstreamLocalAddress => Value::Missing,
        Command::DownstreamLocalAddress => Value::Text(Cow::Owned(address(record.downstream.local))),
        Command::DownstreamRemoteAddress => Value::Text(Cow::Owned(address(record.downstream.remote))),
        Command::DownstreamPeerUriSan => optional(record.downstream.peer_uri_san.as_deref()),
        Command::DownstreamLocalUriSan => optional(record.downstream.local_uri_san.as_deref()),
        Command::RequestedServerName => optional(record.downstream.server_name.as_deref()),
        Command::RouteName => optional(record.route_name.as_deref().filter(|n| !n.is_empty())),
        Command::DynamicMetadata { namespace, path } => {
            let metadata = record.metadata.as_ref();
            if path.is_empty() {
                metadata.and_then(|m| m.0.get(namespace)).map_or(Value::Missing, Value::Object)
            } else {
                metadata.and_then(|m| m.get(namespace, path)).map_or(Value::Missing, Value::Json)
            }
        }
        // Outrider's objects are text: PLAIN is the text, TYPED its serialised form (a JSON
        // string). An object without fields has no FIELD (the peer objects' fields are
        // span tags', not here): missing, as Envoy prints an absent object or field.
        Command::FilterState { key, form } => match (record.filter_state.as_ref().and_then(|s| s.get(key)), form) {
            (Some(text), FilterStateForm::Plain) => Value::Text(Cow::Borrowed(text)),
            (Some(text), FilterStateForm::Typed) => {
                Value::Text(Cow::Owned(serde_json::Value::String(text.to_owned()).to_string()))
            }
            _ => Value::Missing,
        },
        Command::Constant(value) => optional(value.as_deref()),
    })
}

fn address(address: std::net::SocketAddr) -> String {
    let mut text = String::with_capacity(24);
    let _ = write!(text, "{address}");
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::format::parse;
    use crate::proxy::access_log::DownstreamLogInfo;
    use crate::proxy::response_flags::ResponseFlags;
    use std::time::{Duration, Instant, SystemTime};

    fn record() -> PendingLog {
        let request = http::Request::get("/a?b=1")
            .header("host", "svc")
            .header("user-agent", "curl/8")
            .header("x-request-id", "r-1")
            .body(())
            .unwrap_or_default();
        let (parts, ()) = request.into_parts();
        let start = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let downstream = DownstreamLogInfo {
            local: ([127, 0, 0, 1], 8080).into(),
            remote: ([10, 0, 0, 1], 0).into(),
            server_name: None,
            peer_uri_san: None,
            local_uri_san: None,
        };
        let mut log = PendingLog::new(Vec::new().into(), start, Instant::now(), &parts, downstream);
        let mut headers = http::HeaderMap::new();
        headers.insert("x-envoy-upstream-service-time", http::HeaderValue::from_static("7"));
        log.respond(503, &headers, ResponseFlags::UPSTREAM_CONNECTION_FAILURE);
        log.flags.insert(ResponseFlags::UPSTREAM_RETRY_LIMIT_EXCEEDED);
        log.upstream_host = Some("127.0.0.1:9090".into());
        log.bytes_sent = 91;
        log.duration = Duration::from_millis(12);
        log
    }

    fn line(format: &LogFormat) -> String {
        let mut out = Vec::new();
        write(format, &record(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn filter_state_objects_as_text_and_as_json() {
        use crate::proxy::stream_info::SharedWithUpstream;
        let pieces = parse("%FILTER_STATE(io.istio.peer_principal:PLAIN)% %FILTER_STATE(io.istio.peer_principal)% %FILTER_STATE(absent:PLAIN)% %FILTER_STATE(io.istio.peer_principal:FIELD:app)%\n")
            .unwrap_or_default();
        let text = LogFormat::Text { pieces, omit_empty: false };
        let mut log = record();
        let mut out = Vec::new();
        write(&text, &log, &mut out);
        assert_eq!(String::from_utf8_lossy(&out), "- - - -\n", "a record without filter state");
        let mut state = crate::proxy::stream_info::FilterState::default();
        state.set("io.istio.peer_principal".into(), "spiffe://a/b".into(), SharedWithUpstream::None);
        log.filter_state = Some(state);
        let mut out = Vec::new();
        write(&text, &log, &mut out);
        assert_eq!(String::from_utf8_lossy(&out), "spiffe://a/b \"spiffe://a/b\" - -\n");
    }

    #[test]
    fn envoy_default_format() {
        assert_eq!(
            line(&LogFormat::envoy_default()),
            "[2023-11-14T22:13:20.123Z] \"GET /a?b=1 HTTP/1.1\" 503 UF,URX 0 91 12 7 \"-\" \"curl/8\" \"r-1\" \"svc\" \"127.0.0.1:9090\"\n"
        );
    }

    #[test]
    fn alternatives_lengths_and_omitted_values() {
        let pieces =
            parse("%REQ(X-MISSING?USER-AGENT):4% %REQ(X-MISSING)% %RESPONSE_FLAGS_LONG% %DOWNSTREAM_REMOTE_ADDRESS%\n")
                .unwrap_or_default();
        let text = LogFormat::Text { pieces: pieces.clone(), omit_empty: false };
        assert_eq!(line(&text), "curl - UpstreamConnectionFailure,UpstreamRetryLimitExceeded 10.0.0.1:0\n");
        let omitted = LogFormat::Text { pieces, omit_empty: true };
        assert_eq!(line(&omitted), "curl  UpstreamConnectionFailure,UpstreamRetryLimitExceeded 10.0.0.1:0\n");
    }

    #[test]
    fn dynamic_metadata_values_and_namespaces() {
        let mut log = record();
        let mut metadata = crate::proxy::filters::DynamicMetadata::default();
        metadata.set("ns", "hint".into(), serde_json::Value::Bool(true));
        metadata.set("ns", "who".into(), serde_json::Value::String("a".into()));
        log.metadata = Some(metadata);
        let pieces = parse(
            "%DYNAMIC_METADATA(ns:who)% %DYNAMIC_METADATA(ns:hint)% %DYNAMIC_METADATA(ns)% %DYNAMIC_METADATA(other:x)%",
        )
        .unwrap_or_default();
        let mut out = Vec::new();
        write(&LogFormat::Text { pieces, omit_empty: false }, &log, &mut out);
        assert_eq!(String::from_utf8(out).unwrap_or_default(), "a true {\"hint\":true,\"who\":\"a\"} -");
    }

    #[test]
    fn json_keeps_numbers_and_nulls() {
        let field = |t: &str| JsonField::Template(parse(t).unwrap_or_default());
        let fields = vec![
            ("code".to_owned(), field("%RESPONSE_CODE%")),
            ("nested".to_owned(), JsonField::Object(vec![("ua".to_owned(), field("%REQ(USER-AGENT)%"))])),
            ("route".to_owned(), field("%ROUTE_NAME%")),
            ("text".to_owned(), field("code=%RESPONSE_CODE% \"q\"")),
        ];
        let json = LogFormat::Json { fields: fields.clone(), omit_empty: false };
        assert_eq!(
            line(&json),
            "{\"code\":503,\"nested\":{\"ua\":\"curl/8\"},\"route\":null,\"text\":\"code=503 \\\"q\\\"\"}\n"
        );
        let omitted = LogFormat::Json { fields, omit_empty: true };
        assert_eq!(line(&omitted), "{\"code\":503,\"nested\":{\"ua\":\"curl/8\"},\"text\":\"code=503 \\\"q\\\"\"}\n");
    }
}
