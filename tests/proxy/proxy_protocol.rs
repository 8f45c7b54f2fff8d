//! The PROXY protocol listener filter, side by side with Envoy 1.40: a load balancer's
//! header (version 1 text, version 2 binary, IPv4 and IPv6) makes the client the
//! connection's peer and the address it connected to the local one, which then choose the
//! filter chain (`destination_port`) and fill `x-forwarded-for` with `use_remote_address`;
//! `LOCAL` keeps the connection's own addresses; a connection without a header, or with a
//! malformed one, is closed, unless the filter allows connections without one.

use crate::common;

use common::differential::{Pair, parse_response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A chain for connections to port 443 and a default one, each answering with what the
/// connection manager saw of the connection.
fn bootstrap(port: u16, allow_without_header: bool) -> String {
    let chain = |name: &str| {
        format!(
            r#"
      filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          use_remote_address: true
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                direct_response: {{ status: 200, body: {{ inline_string: "{name}" }} }}
              response_headers_to_add:
              - header: {{ key: x-remote, value: "%DOWNSTREAM_REMOTE_ADDRESS%" }}
              - header: {{ key: x-local, value: "%DOWNSTREAM_LOCAL_ADDRESS%" }}
              - header: {{ key: x-xff, value: "%REQ(x-forwarded-for)%" }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}"#
        )
    };
    format!(
        r#"
static_resources:
  listeners:
  - name: behind_a_load_balancer
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    listener_filters:
    - name: envoy.filters.listener.proxy_protocol
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.listener.proxy_protocol.v3.ProxyProtocol
        allow_requests_without_proxy_protocol: {allow_without_header}
    filter_chains:
    - filter_chain_match: {{ destination_port: 443 }}{}
    default_filter_chain:{}
"#,
        chain("port-443"),
        chain("other-port"),
    )
}

/// What the default chain saw of a connection whose addresses the header left alone.
const UNCHANGED: &str = "200 other-port remote=CLIENT local=127.0.0.1:LISTENER xff=";

/// A version 2 header from `source` to `destination` (`LOCAL` when `None`).
fn v2(addresses: Option<(&str, &str)>) -> Vec<u8> {
    use ppp::v2::{Addresses, Builder, Command, Protocol, Version};
    match addresses {
        Some((source, destination)) => {
            let addresses = (source.parse::<std::net::SocketAddr>().unwrap(), destination.parse().unwrap());
            Builder::with_addresses(Version::Two | Command::Proxy, Protocol::Stream, addresses).build().unwrap()
        }
        None => Builder::with_addresses(Version::Two | Command::Local, Protocol::Unspecified, Addresses::Unspecified)
            .build()
            .unwrap(),
    }
}

/// `header` then a GET on a new connection to `port`: the status, the chain that answered
/// and what it saw, the client's own port shown as `CLIENT` (it differs run to run).
async fn get(port: u16, header: &[u8]) -> String {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let client = stream.local_addr().unwrap().to_string();
    let mut sent = header.to_vec();
    sent.extend_from_slice(b"GET / HTTP/1.1\r\nhost: app\r\nconnection: close\r\n\r\n");
    // A proxy that refuses the header may close before reading all of it.
    let _ = stream.write_all(&sent).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(common::WAIT, stream.read_to_end(&mut answer)).await;
    let (status, headers, body) = parse_response(&String::from_utf8_lossy(&answer));
    let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()).unwrap_or_default();
    let seen =
        format!("{status} {body} remote={} local={} xff={}", header("x-remote"), header("x-local"), header("x-xff"));
    seen.replace(&client, "CLIENT").replace(&format!(":{port}"), ":LISTENER")
}

#[tokio::test]
async fn the_header_names_the_client_and_the_address_it_connected_to() {
    let pair = Pair::start(|port| bootstrap(port, false)).await;
    let mut seen = Vec::new();
    for (who, port) in pair.ports() {
        let answers = vec![
            get(port, b"PROXY TCP4 192.0.2.7 198.51.100.1 41000 443\r\n").await,
            get(port, b"PROXY TCP6 2001:db8::7 2001:db8::1 41000 8443\r\n").await,
            get(port, &v2(Some(("192.0.2.8:42000", "198.51.100.2:443")))).await,
            get(port, &v2(Some(("[2001:db8::8]:42000", "[2001:db8::2]:8443")))).await,
            get(port, b"PROXY UNKNOWN\r\n").await,
            get(port, &v2(None)).await,
            // No header, a malformed one, a cut-off one: closed without an answer.
            get(port, b"").await,
            get(port, b"PROXY TCP4 192.0.2.7\r\n").await,
            get(port, b"PROXY TCP4 not an address at all 1 2\r\n").await,
        ];
        assert_eq!(
            answers[..4],
            [
                "200 port-443 remote=192.0.2.7:41000 local=198.51.100.1:443 xff=192.0.2.7",
                "200 other-port remote=[2001:db8::7]:41000 local=[2001:db8::1]:8443 xff=2001:db8::7",
                "200 port-443 remote=192.0.2.8:42000 local=198.51.100.2:443 xff=192.0.2.8",
                "200 other-port remote=[2001:db8::8]:42000 local=[2001:db8::2]:8443 xff=2001:db8::8",
            ],
            "{who}"
        );
        // The connection's own addresses; for a loopback client, `x-forwarded-for` gets the
        // node's address (compared between the proxies below).
        for local in &answers[4..6] {
            assert!(local.starts_with(UNCHANGED), "{who}: {local}");
        }
        for refused in &answers[6..] {
            assert_eq!(refused, "0  remote= local= xff=", "{who}");
        }
        seen.push(answers);
    }
    if let [envoy, outrider] = seen.as_slice() {
        assert_eq!(envoy, outrider, "Envoy and Outrider differ");
    }
    pair.outrider.stop();
}

#[tokio::test]
async fn a_connection_without_a_header_is_served_where_the_filter_allows_it() {
    let pair = Pair::start(|port| bootstrap(port, true)).await;
    let mut seen = Vec::new();
    for (who, port) in pair.ports() {
        let answers = [get(port, b"").await, get(port, b"PROXY TCP4 192.0.2.7 198.51.100.1 41000 443\r\n").await];
        assert!(answers[0].starts_with(UNCHANGED), "{who}: {}", answers[0]);
        assert_eq!(answers[1], "200 port-443 remote=192.0.2.7:41000 local=198.51.100.1:443 xff=192.0.2.7", "{who}");
        seen.push(answers);
    }
    if let [envoy, outrider] = seen.as_slice() {
        assert_eq!(envoy, outrider, "Envoy and Outrider differ");
    }
    pair.outrider.stop();
}
