//! Access log lines side by side with Envoy 1.40: one listener logs every request to
//! files in several formats (Envoy's default, Istio's default text and JSON formats, a
//! custom one with header alternatives, lengths, a `START_TIME` format and dynamic
//! metadata), the same requests go through both proxies (a success, a 404 without a
//! route, a 503 without a healthy upstream, a request with `x-forwarded-for` and a user
//! agent), and the lines are compared field by field. Two more loggers carry filters (a
//! status code comparison; an `or_filter` of a response flag and a header), and must
//! write the same requests as Envoy.
//!
//! Only what differs by nature is normalised: start times (checked against their
//! format instead), durations and the upstream service time (checked to be numbers or
//! `-` alike), generated request ids (checked present), and ports of addresses that
//! differ between the two proxies (their listener ports, the client's and upstream
//! connections' ephemeral ports). `UPSTREAM_LOCAL_ADDRESS` is the one field compared
//! for presence only: Outrider's request does not learn its upstream connection's local
//! address and prints `-`.

use crate::common;

use std::path::{Path, PathBuf};

use crate::common::skip::{Tool, skipped};
use bytes::Bytes;
use common::backends;
use common::differential::{Pair, raw_http1};
use common::wait;
use http::Response;
use http_body_util::Full;

const ISTIO_TEXT: &str = "[%START_TIME%] \\\"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%\\\" \
%RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% \
\\\"%UPSTREAM_TRANSPORT_FAILURE_REASON%\\\" %BYTES_RECEIVED% %BYTES_SENT% %DURATION% \
%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% \\\"%REQ(X-FORWARDED-FOR)%\\\" \\\"%REQ(USER-AGENT)%\\\" \
\\\"%REQ(X-REQUEST-ID)%\\\" \\\"%REQ(:AUTHORITY)%\\\" \\\"%UPSTREAM_HOST%\\\" %UPSTREAM_CLUSTER_RAW% \
%UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% \
%ROUTE_NAME%\\n";

/// Istio's `EnvoyJSONLogFormatIstio`.
const ISTIO_JSON: &[(&str, &str)] = &[
    ("start_time", "%START_TIME%"),
    ("route_name", "%ROUTE_NAME%"),
    ("method", "%REQ(:METHOD)%"),
    ("path", "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"),
    ("protocol", "%PROTOCOL%"),
    ("response_code", "%RESPONSE_CODE%"),
    ("response_flags", "%RESPONSE_FLAGS%"),
    ("response_code_details", "%RESPONSE_CODE_DETAILS%"),
    ("connection_termination_details", "%CONNECTION_TERMINATION_DETAILS%"),
    ("bytes_received", "%BYTES_RECEIVED%"),
    ("bytes_sent", "%BYTES_SENT%"),
    ("duration", "%DURATION%"),
    ("upstream_service_time", "%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%"),
    ("x_forwarded_for", "%REQ(X-FORWARDED-FOR)%"),
    ("user_agent", "%REQ(USER-AGENT)%"),
    ("request_id", "%REQ(X-REQUEST-ID)%"),
    ("authority", "%REQ(:AUTHORITY)%"),
    ("upstream_host", "%UPSTREAM_HOST%"),
    ("upstream_cluster", "%UPSTREAM_CLUSTER_RAW%"),
    ("upstream_local_address", "%UPSTREAM_LOCAL_ADDRESS%"),
    ("downstream_local_address", "%DOWNSTREAM_LOCAL_ADDRESS%"),
    ("downstream_remote_address", "%DOWNSTREAM_REMOTE_ADDRESS%"),
    ("requested_server_name", "%REQUESTED_SERVER_NAME%"),
    ("upstream_transport_failure_reason", "%UPSTREAM_TRANSPORT_FAILURE_REASON%"),
];

const CUSTOM: &str = "%REQ(X-MISSING?USER-AGENT):6% %START_TIME(%Y-%m-%dT%H:%M:%S.%3fZ)% \
%DYNAMIC_METADATA(envoy.common:access_log_hint)% %ROUTE_NAME% %RESPONSE_FLAGS_LONG% %REQUEST_DURATION% \
%RESPONSE_DURATION% %UPSTREAM_CLUSTER% %REQ(:PATH):4% %FILTER_STATE(test.path:PLAIN)% %FILTER_STATE(test.path)% \
%FILTER_STATE(test.absent:PLAIN)% %%done\\n";

/// The formats, by the name of their file.
const FORMATS: [&str; 4] = ["default", "istio-text", "istio-json", "custom"];

fn file_logger(dir: &Path, port: u16, name: &str, format: &str) -> String {
    let path = dir.join(format!("{port}-{name}.log"));
    format!(
        r#"
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: {}
              {format}"#,
        path.display()
    )
}

/// A logger of the response code and path, with `filter`.
fn filtered(dir: &Path, port: u16, name: &str, filter: &str) -> String {
    let format = "log_format: { text_format_source: { inline_string: \"%RESPONSE_CODE% %REQ(:PATH)%\\n\" } }";
    format!("{}\n            filter: {{ {filter} }}", file_logger(dir, port, name, format))
}

fn loggers(dir: &Path, port: u16) -> String {
    let json: Vec<String> = ISTIO_JSON.iter().map(|(k, v)| format!("{k}: \"{v}\"")).collect();
    [
        file_logger(dir, port, "default", ""),
        file_logger(
            dir,
            port,
            "istio-text",
            &format!("log_format: {{ text_format_source: {{ inline_string: \"{ISTIO_TEXT}\" }} }}"),
        ),
        file_logger(dir, port, "istio-json", &format!("log_format: {{ json_format: {{ {} }} }}", json.join(", "))),
        file_logger(
            dir,
            port,
            "custom",
            &format!("log_format: {{ text_format_source: {{ inline_string: \"{CUSTOM}\" }} }}"),
        ),
        filtered(
            dir,
            port,
            "errors",
            "status_code_filter: { comparison: { op: GE, value: { default_value: 400, runtime_key: errors } } }",
        ),
        filtered(
            dir,
            port,
            "uh-or-xff",
            "or_filter: { filters: [ { response_flag_filter: { flags: [UH] } }, \
             { header_filter: { header: { name: x-forwarded-for, present_match: true } } } ] }",
        ),
    ]
    .concat()
}

fn bootstrap(port: u16, backend: u16, dir: &Path) -> String {
    let loggers = loggers(dir, port);
    format!(
        r#"
static_resources:
  listeners:
  - name: http
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          access_log:{loggers}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - name: ok
                match: {{ prefix: "/ok" }}
                route: {{ cluster: backend }}
              - name: down
                match: {{ prefix: "/down" }}
                route: {{ cluster: dead }}
          http_filters:
          - name: path_as_filter_state
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.set_filter_state.v3.Config
              on_request_headers:
              - object_key: test.path
                factory_key: envoy.string
                format_string: {{ text_format_source: {{ inline_string: "%REQ(:PATH)%" }} }}
          - name: envoy.filters.http.rbac
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
              rules:
                action: LOG
                policies:
                  log-ok:
                    permissions: [{{ url_path: {{ path: {{ prefix: "/ok" }} }} }}]
                    principals: [{{ any: true }}]
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {backend} }} }} }}
  - name: dead
    type: STATIC
    connect_timeout: 1s
    load_assignment: {{ cluster_name: dead }}
"#
    )
}

/// The requests, in order.
const REQUESTS: [&str; 4] = [
    "GET /ok/a?x=1 HTTP/1.1\r\nhost: svc.local\r\nconnection: close\r\n\r\n",
    "GET /nowhere HTTP/1.1\r\nhost: svc.local\r\nconnection: close\r\n\r\n",
    "GET /down HTTP/1.1\r\nhost: svc.local\r\nconnection: close\r\n\r\n",
    "POST /ok/b HTTP/1.1\r\nhost: svc.local\r\nx-forwarded-for: 10.1.2.3\r\nuser-agent: diff-client/1.0\r\n\
     content-length: 5\r\nconnection: close\r\n\r\nhello",
];

/// The file's lines once it has `count` of them (polled: the proxies flush their buffers
/// on a timer, Envoy in another process).
async fn lines(path: &PathBuf, count: usize) -> Vec<String> {
    let mut text = String::new();
    let lines = wait::within(async || {
        text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        (lines.len() >= count).then_some(lines)
    })
    .await;
    lines.unwrap_or_else(|| panic!("{} has {} lines: {text}", path.display(), text.lines().count()))
}

/// Splits a text line into space-separated fields, a quoted run being one field.
fn fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            ' ' if !quoted => fields.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    fields.push(current);
    fields
}

/// How one field is normalised before comparing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Norm {
    Same,
    /// `[2023-11-14T22:13:20.123Z]` or a bare ISO time with milliseconds.
    Time,
    /// A duration in milliseconds: a number, or `-` (compared as such).
    Number,
    /// A generated id: present (not `-`).
    Present,
    /// `address:port`: the address compared, the port only for presence.
    Port,
    /// Compared for the shape only (`-` in Outrider, an address in Envoy).
    Ignored,
}

fn normalise(value: &str, norm: Norm) -> String {
    let bare = value.trim_matches(|c| c == '"' || c == '[' || c == ']');
    match norm {
        Norm::Same => value.to_owned(),
        Norm::Time => {
            let b = bare.as_bytes();
            let iso = b.len() == 24 && b[4] == b'-' && b[10] == b'T' && b[19] == b'.' && b[23] == b'Z';
            assert!(iso, "not a start time: {value}");
            "<time>".to_owned()
        }
        Norm::Number if bare == "-" || bare == "null" => "-".to_owned(),
        Norm::Number => {
            assert!(bare.chars().all(|c| c.is_ascii_digit()), "not a duration: {value}");
            "<n>".to_owned()
        }
        Norm::Present => {
            assert!(!bare.is_empty() && bare != "-" && bare != "null", "missing: {value}");
            "<id>".to_owned()
        }
        Norm::Port => match bare.rsplit_once(':') {
            Some((address, port)) if port.chars().all(|c| c.is_ascii_digit()) => {
                let port = if port == "0" { "0" } else { "<port>" };
                format!("{address}:{port}")
            }
            _ => bare.to_owned(),
        },
        Norm::Ignored => "<ignored>".to_owned(),
    }
}

/// The normalisation of each field of a text format, by position.
fn text_norms(format: &str) -> Vec<Norm> {
    use Norm::*;
    match format {
        // [time] "method path protocol" code flags rx tx duration upstream-time "xff" "ua"
        // "request id" "authority" "upstream host"
        "default" => vec![Time, Same, Same, Same, Same, Same, Number, Number, Same, Same, Present, Same, Same],
        // [time] "method path protocol" code flags details termination "transport failure"
        // rx tx duration upstream-time "xff" "ua" "request id" "authority" "upstream host"
        // cluster upstream-local downstream-local downstream-remote sni route
        "istio-text" => vec![
            Time, Same, Same, Same, Same, Same, Same, Same, Same, Number, Number, Same, Same, Present, Same, Same,
            Same, Ignored, Port, Port, Same, Same,
        ],
        // ua(6) time metadata route flags request-duration response-duration cluster path(4)
        // filter-state(plain) filter-state(typed) filter-state(absent) %done
        "custom" => vec![Same, Time, Same, Same, Same, Number, Number, Same, Same, Same, Same, Same, Same],
        other => panic!("{other}"),
    }
}

fn json_norm(key: &str) -> Norm {
    match key {
        "start_time" => Norm::Time,
        "duration" | "upstream_service_time" => Norm::Number,
        "request_id" => Norm::Present,
        "downstream_local_address" | "downstream_remote_address" => Norm::Port,
        "upstream_local_address" => Norm::Ignored,
        _ => Norm::Same,
    }
}

fn normalised(format: &str, line: &str) -> Vec<(String, String)> {
    if format == "istio-json" {
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        return object
            .into_iter()
            .map(|(key, value)| {
                let norm = json_norm(&key);
                let shown = match (&value, norm) {
                    (serde_json::Value::String(s), Norm::Same) => format!("{s:?}"),
                    (serde_json::Value::String(s), norm) => normalise(s, norm),
                    (other, Norm::Same) => other.to_string(),
                    (other, norm) => normalise(&other.to_string(), norm),
                };
                (key, shown)
            })
            .collect();
    }
    let norms = text_norms(format);
    let fields = fields(line);
    assert_eq!(fields.len(), norms.len(), "{format}: {line}");
    fields.iter().zip(norms).enumerate().map(|(i, (f, n))| (i.to_string(), normalise(f, n))).collect()
}

#[tokio::test]
async fn lines_match_envoy_field_by_field() {
    let backend = backends::http(|_| async { Response::new(Full::new(Bytes::from_static(b"hello back"))) }).await;
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().to_owned();
    let pair = Pair::start(|port| bootstrap(port, backend.port, &dir_path)).await;
    let mut by_proxy = Vec::new();
    for (proxy, port) in pair.ports() {
        let mut statuses = Vec::new();
        for request in REQUESTS {
            statuses.push(raw_http1(port, request).await.0);
        }
        assert_eq!(statuses, [200, 404, 503, 200], "{proxy}");
        let mut logs = Vec::new();
        for format in FORMATS {
            let path = dir.path().join(format!("{port}-{format}.log"));
            let lines = lines(&path, REQUESTS.len()).await;
            logs.push(lines);
        }
        let errors = lines(&dir.path().join(format!("{port}-errors.log")), 2).await;
        assert_eq!(errors, ["404 /nowhere", "503 /down"], "{proxy}");
        let uh_or_xff = lines(&dir.path().join(format!("{port}-uh-or-xff.log")), 2).await;
        assert_eq!(uh_or_xff, ["503 /down", "200 /ok/b"], "{proxy}");
        by_proxy.push((proxy, logs));
    }
    let (_, outrider) = by_proxy.last().unwrap();
    // Outrider's own lines, as Envoy must also write them (normalised).
    let custom = &outrider[3];
    assert_eq!(normalised("custom", &custom[0])[0].1, "-");
    assert!(custom[3].starts_with("diff-c "), "{}", custom[3]);
    // The request's path as a filter state object, as text and as a JSON string.
    let ok = " backend /ok/ /ok/a?x=1 \"/ok/a?x=1\" - %done";
    assert!(custom[0].contains(" true ok - ") && custom[0].ends_with(ok), "{}", custom[0]);
    assert!(custom[1].contains(" false - NoRouteFound ") && custom[1].contains(" - - /now "), "{}", custom[1]);
    assert!(custom[2].contains(" false down NoHealthyUpstream "), "{}", custom[2]);
    let json: serde_json::Value = serde_json::from_str(&outrider[2][3]).unwrap();
    assert_eq!(json["response_code"], 200);
    assert_eq!(json["bytes_received"], 5);
    assert_eq!(json["downstream_remote_address"], "10.1.2.3:0");
    assert_eq!(json["requested_server_name"], serde_json::Value::Null);
    assert!(outrider[1][2].contains(" 503 UH no_healthy_upstream - \"-\" 0 19 "), "{}", outrider[1][2]);
    assert!(outrider[1][1].contains(" 404 NR route_not_found - \"-\" 0 0 "), "{}", outrider[1][1]);
    let Some((_, envoy)) = by_proxy.first().filter(|(proxy, _)| *proxy == "envoy") else {
        skipped(Tool::Envoy, "the Envoy half of access_log_format", "envoy not found");
        return;
    };
    for (f, format) in FORMATS.iter().enumerate() {
        for (i, (theirs, ours)) in envoy[f].iter().zip(&outrider[f]).enumerate() {
            assert_eq!(
                normalised(format, theirs),
                normalised(format, ours),
                "{format} line {i}:\n envoy:    {theirs}\n outrider: {ours}"
            );
        }
    }
}
