//! One authority, side by side with Envoy 1.40: an RBAC DENY on `:authority
//! admin.example` in front of the router, with `strip_trailing_host_dot` and a port
//! stripping mode. The tricks a client may try — a trailing dot, a port, an absolute-form
//! target beside another `Host`, an HTTP/2 `host` beside `:authority` — must get Envoy's
//! answer, and an allowed request must reach the upstream with Envoy's `Host`.

use crate::common;

use common::differential::{HttpListenerExtra, Pair, ROUTE_TO_BACKEND, ROUTER, static_cluster};

use super::edge_echo::{h2, last_head, plain, recording, values};
use crate::common::skip::{Tool, skipped};

fn bootstrap(port: u16, backend: u16, strip: &str) -> String {
    let hcm = format!(
        "\n          strip_trailing_host_dot: true\n          {strip}\n          \
         http2_protocol_options: {{}}\n          codec_type: AUTO"
    );
    let rbac = r#"
          - name: envoy.filters.http.rbac
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
              rules:
                action: DENY
                policies:
                  admin-host:
                    permissions: [{ header: { name: ":authority", string_match: { exact: admin.example } } }]
                    principals: [{ any: true }]"#;
    let listener = common::differential::http_listener(
        "edge",
        port,
        "edge",
        HttpListenerExtra { hcm: &hcm, ..Default::default() },
        ROUTE_TO_BACKEND,
    )
    .replace(
        &format!("http_filters: [{{ name: envoy.filters.http.router, typed_config: {{ \"@type\": {ROUTER} }} }}]"),
        &format!("http_filters:{rbac}\n          - {{ name: envoy.filters.http.router, typed_config: {{ \"@type\": {ROUTER} }} }}"),
    );
    format!("static_resources:\n  listeners:{listener}\n  clusters:{}\n", static_cluster("backend", backend))
}

/// What a client sends.
enum Send {
    H1(String),
    H2 { uri: String, host: Option<&'static str> },
}

fn h1(target: &str, host: &str) -> Send {
    Send::H1(format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"))
}

/// Runs each case on both proxies: the status, and the `host` the upstream saw when the
/// request reached it, must agree; Outrider's are returned.
async fn compare(strip: &str, cases: &[Send]) -> Vec<(u16, Option<String>)> {
    let (backend, heads) = recording().await;
    let pair = Pair::start(|port| bootstrap(port, backend.port, strip)).await;
    let mut outrider = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let mut seen = Vec::new();
        for (name, port) in pair.ports() {
            let before = backend.seen.requests();
            let status = match case {
                Send::H1(text) => plain(port, &text.replace("{port}", &port.to_string())).await,
                Send::H2 { uri, host } => {
                    let uri = uri.replace("{port}", &port.to_string());
                    h2(port, &uri, host.map(|h| ("host", h)).as_slice()).await
                }
            };
            let reached = backend.seen.requests() > before;
            // Lines kept apart: one `host` line is not two.
            let host = reached.then(|| values(&last_head(&heads), "host").join(" | "));
            seen.push((name, (status, host)));
        }
        match seen.as_slice() {
            [(_, envoy), (_, ours)] => assert_eq!(ours, envoy, "case {i} with {strip}"),
            _ => skipped(Tool::Envoy, "the Envoy half of the authority comparison", "envoy not found"),
        }
        outrider.push(seen.pop().map(|(_, s)| s).unwrap_or((0, None)));
    }
    outrider
}

#[tokio::test(flavor = "multi_thread")]
async fn authority_tricks_do_not_pass_the_deny_and_upstream_gets_envoys_host() {
    let cases = [
        h1("/x", "admin.example"),
        h1("/x", "admin.example."),
        h1("/x", "admin.example:80"),
        h1("/x", "admin.example.:8080"),
        h1("http://admin.example/x", "public.example"),
        h1("http://public.example/x", "admin.example"),
        h1("http://public.example:81/x", "admin.example"),
        h1("/x", "public.example."),
        Send::H2 { uri: "http://public.example/x".into(), host: Some("admin.example") },
        Send::H2 { uri: "http://admin.example./x".into(), host: Some("public.example") },
        Send::H2 { uri: "http://admin.example:443/x".into(), host: None },
        h1("https://public.example/x", "admin.example"),
        Send::H1("GET http://public.example/x HTTP/1.1\r\nConnection: close\r\n\r\n".into()),
        h1("http://ADMIN.example/x", "public.example"),
        h1("/x", "public.example\r\nHost: admin.example"),
        h1("/x", "admin.example\r\nHost: public.example"),
    ];
    let got = compare("strip_any_host_port: true", &cases).await;
    let denied = |i: usize| assert_eq!(got[i], (403, None), "case {i} is denied");
    (0..5).for_each(denied);
    assert_eq!(got[5], (200, Some("public.example".into())), "the absolute target is the authority");
    assert_eq!(got[6], (200, Some("public.example".into())));
    assert_eq!(got[7], (200, Some("public.example".into())));
    assert_eq!(got[8], (200, Some("public.example".into())), "HTTP/2 host beside :authority is dropped");
    denied(9);
    denied(10);
    // Two `Host` lines are one value to Envoy (joined with `,`), which is not the denied
    // host, and the upstream gets that one line, never a line a backend could pick.
    assert_eq!(got[14], (200, Some("public.example,admin.example".into())));
    assert_eq!(got[15], (200, Some("admin.example,public.example".into())));
}

#[tokio::test(flavor = "multi_thread")]
async fn strip_matching_host_port_strips_only_the_listener_port() {
    let cases = [
        h1("/x", "admin.example:{port}"),
        h1("/x", "admin.example:1"),
        h1("/x", "public.example:{port}"),
        h1("http://admin.example.:{port}/x", "public.example"),
    ];
    let got = compare("strip_matching_host_port: true", &cases).await;
    assert_eq!(got[0], (403, None));
    assert_eq!(got[1], (200, Some("admin.example:1".into())), "another port stays, and is not the denied host");
    assert_eq!(got[2], (200, Some("public.example".into())));
    assert_eq!(got[3], (403, None));
}
