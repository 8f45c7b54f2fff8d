//! The TCP proxy's connection limits, side by side with Envoy 1.40: `idle_timeout` closes a
//! connection on which no byte has moved for that long, `max_downstream_connection_duration`
//! one that has lived that long however busy it is. Without them (or before Outrider read
//! them) these connections would stay open for the default hour.

use crate::common;

use common::WAIT;
use common::differential::{Pair, static_cluster};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP backend that echoes what it reads until the peer closes.
async fn echo() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    port
}

fn bootstrap(port: u16, backend: u16, limits: &str) -> String {
    format!(
        r#"
static_resources:
  listeners:
  - name: tcp
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: tcp
          cluster: backend
          {limits}
  clusters:{}
"#,
        static_cluster("backend", backend)
    )
}

/// Echoes one message through the proxy, then waits for the proxy to close the connection:
/// `true` when it did within [`WAIT`].
async fn closed_by_proxy(port: u16) -> bool {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.write_all(b"ping").await.unwrap();
    let mut echoed = [0u8; 4];
    tokio::time::timeout(WAIT, stream.read_exact(&mut echoed)).await.unwrap().unwrap();
    assert_eq!(&echoed, b"ping");
    let mut rest = Vec::new();
    match tokio::time::timeout(WAIT, stream.read_to_end(&mut rest)).await {
        Ok(Ok(_)) | Ok(Err(_)) => rest.is_empty(),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_timeout_closes_a_quiet_connection() {
    let backend = echo().await;
    let pair = Pair::start(|port| bootstrap(port, backend, "idle_timeout: 0.2s")).await;
    for (name, port) in pair.ports() {
        assert!(closed_by_proxy(port).await, "{name}: the idle connection stayed open");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn max_downstream_connection_duration_closes_the_connection() {
    let backend = echo().await;
    // No idle limit: only the duration can close it.
    let limits = "idle_timeout: 0s\n          max_downstream_connection_duration: 0.3s";
    let pair = Pair::start(|port| bootstrap(port, backend, limits)).await;
    for (name, port) in pair.ports() {
        assert!(closed_by_proxy(port).await, "{name}: the connection outlived its maximum duration");
    }
}
