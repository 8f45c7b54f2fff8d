//! Istio's HBONE mechanics, as istiod renders them for a sidecar with `ENABLE_HBONE`,
//! through Envoy 1.40 and Outrider and compared:
//! - inbound: the `CONNECT` terminating listener sets the tunnel's destination (its
//!   `:authority`) as filter state shared with the upstream (`set_filter_state`, Istio's
//!   `connect_authority`); the terminated stream goes to the internal listener
//!   `main_internal`, whose `original_dst` listener filter restores that destination, so the
//!   filter chain of the destination's port serves the stream;
//! - outbound: an endpoint that is the internal listener `connect_originate` carries the
//!   destination in its metadata, passed through by the `internal_upstream` transport;
//!   `connect_originate` restores it and tunnels to it through an ORIGINAL_DST cluster whose
//!   `upstream_port_override` is the HBONE port and whose `metadata_key` would name a
//!   waypoint; tunnels to one destination share one HTTP/2 connection;
//! - a waypoint's double HBONE: a network `set_filter_state` names the inner tunnel's
//!   target, and the TCP proxy's tunnel takes it as its authority
//!   (`%FILTER_STATE(…:PLAIN)%`).

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common;
use common::WAIT;
use common::differential::{
    INTERNAL, INTERNAL_LISTENER_EXTENSION, Pair, free_port, http2_cluster, on_loopback, stat_value, static_cluster,
    tcp_proxy_listener,
};
use common::tunnel::{
    MAIN_INTERNAL_CLUSTER, connect_originate_cluster, connect_terminate_listener, echo_round, echo_server,
};

/// The application ports behind the sidecar, as `main_internal` matches them.
const PORT_A: u16 = 8080;
const PORT_B: u16 = 9090;

/// Istio's `connect_authority` filter (the part that needs no TLS): the destination and the
/// source of the tunnel, shared with the upstream once.
const CONNECT_AUTHORITY: &str = r#"
          - name: connect_authority
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.set_filter_state.v3.Config
              on_request_headers:
              - object_key: envoy.filters.listener.original_dst.local_ip
                format_string: { text_format_source: { inline_string: "%REQ(:AUTHORITY)%" } }
                shared_with_upstream: ONCE
              - object_key: envoy.filters.listener.original_dst.remote_ip
                format_string: { text_format_source: { inline_string: "%DOWNSTREAM_REMOTE_ADDRESS%" } }
                shared_with_upstream: ONCE"#;

/// The terminating listener on 127.0.0.1:`port`, as istiod renders `connect_terminate`
/// (plaintext here: TLS is the listener's transport socket, tested elsewhere).
fn connect_terminate(port: u16) -> String {
    connect_terminate_listener("connect_terminate", port, CONNECT_AUTHORITY)
}

/// `main_internal`: the destination restored by `original_dst`, one filter chain per
/// application port (each proxying TCP to its application, `app_a` and `app_b`).
fn main_internal() -> String {
    let chain = |port: u16, cluster: &str| {
        format!(
            r#"
    - filter_chain_match: {{ destination_port: {port}, prefix_ranges: [{{ address_prefix: 127.0.0.1, prefix_len: 32 }}] }}
      filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: {cluster}
          cluster: {cluster}"#
        )
    };
    format!(
        r#"
  - name: main_internal{INTERNAL}
    listener_filters:
    - name: envoy.filters.listener.original_dst
      typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst }}
    filter_chains:{}{}"#,
        chain(PORT_A, "app_a"),
        chain(PORT_B, "app_b")
    )
}

/// The inbound half: the terminating listener on `terminate`, `main_internal` and their
/// clusters; `listeners` and `clusters` are more of each.
fn inbound(terminate: u16, apps: (u16, u16), listeners: &str, clusters: &str) -> String {
    format!(
        "{INTERNAL_LISTENER_EXTENSION}static_resources:\n  listeners:{}{}{listeners}\n  clusters:{MAIN_INTERNAL_CLUSTER}{}{}{clusters}\n",
        connect_terminate(terminate),
        main_internal(),
        static_cluster("app_a", apps.0),
        static_cluster("app_b", apps.1),
    )
}

/// An HTTP/2 `CONNECT` to `authority` through the proxy on `port`: its status, and what
/// came back through the tunnel for `hello`.
async fn connect(port: u16, authority: &str) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    let driver = tokio::spawn(connection);
    let request = http::Request::connect(authority).body(Empty::<Bytes>::new()).unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let mut echoed = String::new();
    if status == 200 {
        let mut tunnel = TokioIo::new(hyper::upgrade::on(response).await.unwrap());
        echoed = echo_round(&mut tunnel, b"hello").await;
    } else {
        drop(response);
    }
    // The connection closes with its last sender, before the proxy stops.
    drop(sender);
    let _ = tokio::time::timeout(WAIT, driver).await;
    (status, echoed)
}

#[tokio::test]
async fn the_tunnels_authority_chooses_the_inner_filter_chain() {
    let apps = (echo_server("a:").await, echo_server("b:").await);
    let t = std::time::Instant::now();
    let pair = Pair::start(|port| inbound(port, apps, "", "")).await;
    eprintln!("TIMING start {:?}", t.elapsed());
    let mut seen = Vec::new();
    for (who, port) in pair.ports() {
        let answers = (
            connect(port, &format!("127.0.0.1:{PORT_A}")).await,
            connect(port, &format!("127.0.0.1:{PORT_B}")).await,
            // No filter chain for the port: the inner connection is closed at once.
            connect(port, "127.0.0.1:7070").await,
        );
        assert_eq!(answers.0, (200, "a:hello".to_owned()), "{who}");
        assert_eq!(answers.1, (200, "b:hello".to_owned()), "{who}");
        assert!(!answers.2.1.contains("hello"), "{who}: {answers:?}");
        seen.push((who, answers));
    }
    if let [(_, envoy), (_, outrider)] = seen.as_slice() {
        assert_eq!(envoy, outrider, "Envoy and Outrider differ");
    }
    let t = std::time::Instant::now();
    pair.outrider.stop();
    eprintln!("TIMING stop {:?}", t.elapsed());
}

/// The outbound half on the client's `port`: a TCP proxy to the cluster `amb`, whose one
/// endpoint is `connect_originate` with the destination 127.0.0.1:`PORT_B` in its metadata
/// (passed through when `passthrough` is set), and `connect_originate` tunnelling to that
/// destination's HBONE port, `terminate`.
fn outbound(port: u16, terminate: u16, passthrough: bool) -> (String, String) {
    let transport = if passthrough {
        r#"
    transport_socket_matches:
    - name: hbone
      match: { tunnel: http }
      transport_socket:
        name: envoy.transport_sockets.internal_upstream
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.internal_upstream.v3.InternalUpstreamTransport
          passthrough_metadata: [{ kind: { host: {} }, name: envoy.filters.listener.original_dst }]
          transport_socket:
            name: envoy.transport_sockets.raw_buffer
            typed_config: { "@type": type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer }"#
    } else {
        ""
    };
    let listeners = format!(
        "{}{}",
        tcp_proxy_listener("outbound", &on_loopback(port), "amb", ""),
        tcp_proxy_listener(
            "connect_originate",
            &format!(
                "{INTERNAL}
    listener_filters:
    - name: envoy.filters.listener.original_dst
      typed_config: {{ \"@type\": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst }}"
            ),
            "connect_originate",
            "\n          tunneling_config: { hostname: \"%DOWNSTREAM_LOCAL_ADDRESS%\" }"
        )
    );
    let clusters = format!(
        r#"
  - name: amb
    type: STATIC
    connect_timeout: 1s{transport}
    load_assignment:
      cluster_name: amb
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ envoy_internal_address: {{ server_listener_name: connect_originate, endpoint_id: "127.0.0.1:{PORT_B}" }} }} }}
          metadata:
            filter_metadata:
              envoy.filters.listener.original_dst: {{ local: "127.0.0.1:{PORT_B}" }}
              envoy.transport_socket_match: {{ tunnel: http }}{}"#,
        connect_originate_cluster("connect_originate", terminate, "")
    );
    (listeners, clusters)
}

/// What comes back for `hello` sent on a new connection to each proxy of `pair`, by proxy.
async fn echoes_of(pair: &Pair) -> Vec<(&'static str, String)> {
    let mut seen = Vec::new();
    for (who, port) in pair.ports() {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        seen.push((who, echo_round(&mut stream, b"hello").await));
    }
    seen
}

#[tokio::test]
async fn an_endpoints_metadata_names_the_destination_of_its_tunnel() {
    let apps = (echo_server("a:").await, echo_server("b:").await);
    for passthrough in [true, false] {
        let pair = Pair::start(|port| {
            let terminate = free_port();
            let (listeners, clusters) = outbound(port, terminate, passthrough);
            inbound(terminate, apps, &listeners, &clusters)
        })
        .await;
        let seen = echoes_of(&pair).await;
        for (who, echoed) in &seen {
            if passthrough {
                // Outbound HBONE to the application on PORT_B, through the same proxy's
                // inbound HBONE.
                assert_eq!(echoed, "b:hello", "{who}");
            } else {
                // Without the metadata, connect_originate has no destination to restore:
                // the ORIGINAL_DST cluster has no host, and nothing reaches an application.
                assert!(!echoed.contains(':'), "{who}: {echoed}");
            }
        }
        if let [(_, envoy), (_, outrider)] = seen.as_slice() {
            assert_eq!(envoy, outrider, "Envoy and Outrider differ (passthrough {passthrough})");
        }
        pair.outrider.stop();
    }
}

#[tokio::test]
async fn tunnels_to_one_destination_share_one_http2_connection() {
    let apps = (echo_server("a:").await, echo_server("b:").await);
    let pair = Pair::start(|port| {
        let terminate = free_port();
        let (listeners, clusters) = outbound(port, terminate, true);
        inbound(terminate, apps, &listeners, &clusters)
    })
    .await;
    for (who, port) in pair.ports() {
        // Three tunnels open at once, each answered before the next opens.
        let mut open = Vec::new();
        for _ in 0..3 {
            let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            stream.write_all(b"hello").await.unwrap();
            let mut answer = vec![0u8; "b:hello".len()];
            tokio::time::timeout(WAIT, stream.read_exact(&mut answer)).await.unwrap().unwrap();
            assert_eq!(answer, b"b:hello", "{who}");
            open.push(stream);
        }
        let admin = match who {
            "envoy" => pair.envoy.as_ref().unwrap().admin,
            _ => pair.outrider.admin_address,
        };
        let (_, stats) = common::admin_get(admin, "/stats").await;
        let connections = stat_value(&stats, "cluster.connect_originate.upstream_cx_total");
        assert_eq!(connections, 1, "{who}: one HTTP/2 connection carries the three tunnels");
        for mut stream in open {
            stream.shutdown().await.unwrap();
            let mut rest = Vec::new();
            let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut rest)).await;
        }
    }
    pair.outrider.stop();
}

/// A TCP listener on `port` whose network `set_filter_state` names the tunnel's target
/// (`target`, as text) and whose TCP proxy tunnels to the terminating listener on
/// `terminate` with that object as the `CONNECT`'s authority: Istio's
/// `inner_connect_originate`, its target from the endpoint's metadata there.
fn named_target(port: u16, terminate: u16, target: &str) -> (String, String) {
    const KEY: &str = "istio.double_hbone.hbone_target_address";
    let listener = tcp_proxy_listener(
        "outbound",
        &on_loopback(port),
        "terminator",
        &format!("\n          tunneling_config: {{ hostname: \"%FILTER_STATE({KEY}:PLAIN)%\" }}"),
    );
    let set = format!(
        r#"    - filters:
      - name: propagate_endpoint_metadata
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.set_filter_state.v3.Config
          on_new_connection:
          - object_key: {KEY}
            factory_key: envoy.string
            format_string: {{ text_format_source: {{ inline_string: "{target}" }} }}
            shared_with_upstream: TRANSITIVE
"#
    );
    (listener.replacen("    - filters:\n", &set, 1), http2_cluster("terminator", terminate))
}

#[tokio::test]
async fn a_filter_state_object_is_the_tunnels_authority() {
    let apps = (echo_server("a:").await, echo_server("b:").await);
    for (target, expected) in [(format!("127.0.0.1:{PORT_A}"), "a:hello"), (format!("127.0.0.1:{PORT_B}"), "b:hello")] {
        let pair = Pair::start(|port| {
            let terminate = free_port();
            let (listeners, clusters) = named_target(port, terminate, &target);
            inbound(terminate, apps, &listeners, &clusters)
        })
        .await;
        let seen = echoes_of(&pair).await;
        for (who, echoed) in &seen {
            // The terminating side restores the CONNECT's authority as the destination, whose
            // port picks the application.
            assert_eq!(echoed, expected, "{who}");
        }
        if let [(_, envoy), (_, outrider)] = seen.as_slice() {
            assert_eq!(envoy, outrider, "Envoy and Outrider differ");
        }
        pair.outrider.stop();
    }
}
