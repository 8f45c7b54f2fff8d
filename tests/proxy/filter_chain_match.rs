//! Filter chain matching on the direct source address, side by side with Envoy 1.40:
//! `direct_source_prefix_ranges` takes part in choosing the chain, by longest prefix, and
//! before `source_type` (Envoy's order), so a chain that names the connecting address
//! beats one that only says "from this host".

use crate::common;

use std::net::SocketAddr;

use common::WAIT;
use common::differential::{Pair, parse_response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

fn chain(name: &str, filter_chain_match: &str) -> String {
    format!(
        r#"
    - name: {name}
      filter_chain_match: {filter_chain_match}
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                direct_response: {{ status: 200, body: {{ inline_string: "{name}" }} }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}"#
    )
}

fn bootstrap(port: u16) -> String {
    let chains = [
        chain("elsewhere", "{ direct_source_prefix_ranges: [{ address_prefix: 10.0.0.0, prefix_len: 8 }] }"),
        chain("same-host", "{ source_type: SAME_IP_OR_LOOPBACK }"),
        chain("loopback-net", "{ direct_source_prefix_ranges: [{ address_prefix: 127.0.0.0, prefix_len: 8 }] }"),
        chain("exact", "{ direct_source_prefix_ranges: [{ address_prefix: 127.0.0.1, prefix_len: 32 }] }"),
    ]
    .concat();
    format!(
        r#"
static_resources:
  listeners:
  - name: inbound
    address: {{ socket_address: {{ address: 0.0.0.0, port_value: {port} }} }}
    filter_chains:{chains}
"#
    )
}

/// The body of `GET /` sent from `source` (any port) to the listener on `port`.
async fn chain_for(source: &str, port: u16) -> String {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source.parse().unwrap(), 0)).unwrap();
    let mut stream = socket.connect(SocketAddr::from(([127, 0, 0, 1], port))).await.unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut response)).await.unwrap().unwrap();
    let (status, _, body) = parse_response(&String::from_utf8_lossy(&response));
    assert_eq!(status, 200, "from {source}: {body}");
    body
}

#[tokio::test(flavor = "multi_thread")]
async fn direct_source_prefix_ranges_choose_the_chain_before_source_type() {
    let pair = Pair::start(bootstrap).await;
    for (name, port) in pair.ports() {
        assert_eq!(chain_for("127.0.0.1", port).await, "exact", "{name}: the longest prefix wins");
        assert_eq!(chain_for("127.0.0.2", port).await, "loopback-net", "{name}: before source_type");
    }
}
