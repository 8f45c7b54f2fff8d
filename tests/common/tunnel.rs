//! The client side of a byte tunnel through a proxy (a TCP proxy's `tunneling_config`, a
//! terminated `CONNECT`), for tests that check what comes back through it.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::WAIT;

/// A TCP server on loopback that answers each connection with `prefix`, then echoes what it
/// reads until the client closes.
pub async fn echo_server(prefix: &'static str) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.write_all(prefix.as_bytes()).await;
                let mut buffer = [0u8; 1024];
                while let Ok(n) = stream.read(&mut buffer).await {
                    if n == 0 || stream.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
                let _ = stream.shutdown().await;
            });
        }
    });
    port
}

/// Writes `sent` on `stream`, closes its side once what came back ends with `sent` (or
/// the far end closed first), and reads until the far end closes too, so that no tunnel is
/// left for a proxy's stop to drain. Returns everything read.
pub async fn echo_round<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, sent: &[u8]) -> String {
    stream.write_all(sent).await.unwrap();
    let mut seen = Vec::new();
    let mut buffer = [0u8; 1024];
    let mut closed = false;
    loop {
        if seen.ends_with(sent) && !closed {
            stream.shutdown().await.unwrap();
            closed = true;
        }
        match tokio::time::timeout(WAIT, stream.read(&mut buffer)).await {
            Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&buffer[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// One item of a bootstrap's `static_resources.listeners`: `name` on 127.0.0.1:`port`, a
/// connection manager that terminates HTTP/2 `CONNECT`s (Istio's `connect_terminate`) and
/// sends them to `main_internal`; `filters` are HTTP filters before the router, each line a
/// newline and 10 spaces deep.
pub fn connect_terminate_listener(name: &str, port: u16, filters: &str) -> String {
    connect_terminate_at(
        name,
        &format!("{{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}"),
        "",
        filters,
    )
}

/// [`connect_terminate_listener`] at `address` (YAML flow), with `transport`: the filter
/// chain's `transport_socket` block (each line a newline and 6 spaces deep), or nothing.
pub fn connect_terminate_at(name: &str, address: &str, transport: &str, filters: &str) -> String {
    let router = super::differential::ROUTER;
    format!(
        r#"
  - name: {name}
    address: {address}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          codec_type: AUTO
          http2_protocol_options: {{ allow_connect: true }}
          upgrade_configs: [{{ upgrade_type: CONNECT }}]
          http_filters:{filters}
          - {{ name: envoy.filters.http.router, typed_config: {{ "@type": {router} }} }}
          route_config:
            virtual_hosts:
            - name: default
              domains: ["*"]
              routes:
              - match: {{ connect_matcher: {{}} }}
                route:
                  cluster: main_internal
                  upgrade_configs: [{{ upgrade_type: CONNECT, connect_config: {{}} }}]{transport}"#
    )
}

/// Istio's `connect_originate` cluster as an item of `static_resources.clusters`: ORIGINAL_DST
/// to the restored destination's port `hbone` (or the waypoint the endpoint metadata names),
/// HTTP/2 with `CONNECT`; `extra` is more of the cluster's fields (4 spaces deep).
pub fn connect_originate_cluster(name: &str, hbone: u16, extra: &str) -> String {
    format!(
        r#"
  - name: {name}
    type: ORIGINAL_DST
    lb_policy: CLUSTER_PROVIDED
    connect_timeout: 5s
    original_dst_lb_config:
      upstream_port_override: {hbone}
      metadata_key: {{ key: envoy.filters.listener.original_dst, path: [{{ key: waypoint }}] }}
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{ http2_protocol_options: {{ allow_connect: true }} }}{extra}"#
    )
}

/// The `main_internal` cluster as istiod renders it: the internal upstream transport, which
/// carries the filter state shared with the upstream across.
pub const MAIN_INTERNAL_CLUSTER: &str = r#"
  - name: main_internal
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: main_internal
      endpoints:
      - lb_endpoints:
        - endpoint: { address: { envoy_internal_address: { server_listener_name: main_internal } } }
    transport_socket:
      name: internal_upstream
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.internal_upstream.v3.InternalUpstreamTransport
        transport_socket:
          name: raw_buffer
          typed_config: { "@type": type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer }"#;

/// Where a proxy's HBONE certificate chain, key and trusted root are (files).
pub struct Certificates {
    pub chain: String,
    pub key: String,
    pub root: String,
}

impl Certificates {
    /// The `common_tls_context` of a TLS context whose other fields are `depth` spaces deep:
    /// this pair and root, TLS 1.3 and `h2`, the peer's URI SAN matched by `san_matcher`.
    pub fn tls(&self, depth: usize, san_matcher: &str) -> String {
        let text = format!(
            r#"
          common_tls_context:
            tls_params: {{ tls_minimum_protocol_version: TLSv1_3, tls_maximum_protocol_version: TLSv1_3 }}
            alpn_protocols: [h2]
            tls_certificates: [{{ certificate_chain: {{ filename: "{}" }}, private_key: {{ filename: "{}" }} }}]
            validation_context:
              trusted_ca: {{ filename: "{}" }}
              match_typed_subject_alt_names: [{{ san_type: URI, matcher: {san_matcher} }}]"#,
            self.chain, self.key, self.root
        );
        text.replace("\n          ", &format!("\n{}", " ".repeat(depth)))
    }
}
