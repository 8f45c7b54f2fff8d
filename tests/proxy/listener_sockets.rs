//! A listener's socket options, side by side with Envoy 1.40: `freebind` and `transparent`
//! let a listener bind an address this host does not have (TEST-NET-1 here), and
//! `tcp_backlog_size` sizes its accept queue. Seen from outside, in the kernel's socket
//! table (`ss`): without the options the bind fails and nothing listens there.

use crate::common;

use common::differential::Pair;
use common::skip::{Tool, skipped};

fn listener(name: &str, address: &str, port: u16, options: &str) -> String {
    format!(
        r#"
  - name: {name}
    address: {{ socket_address: {{ address: {address}, port_value: {port} }} }}
    {options}
    filter_chains:
    - filters:
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: tcp
          cluster: nowhere"#
    )
}

fn bootstrap(port: u16, listeners: &[(&str, &str, &str)]) -> String {
    let listeners: String =
        listeners.iter().map(|(name, address, options)| listener(name, address, port, options)).collect();
    format!(
        r#"
static_resources:
  listeners:{listeners}
  clusters:
  - name: nowhere
    type: STATIC
    connect_timeout: 1s
    load_assignment: {{ cluster_name: nowhere }}
"#
    )
}

/// The accept queue size (`ss`'s Send-Q) of the socket listening on `address`, once there is one.
async fn backlog_of(address: &str) -> Option<u32> {
    common::wait::within(async || {
        let out = std::process::Command::new("ss").args(["-Hltn"]).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(3) == Some(&address)).then(|| fields.get(2)?.parse().ok()).flatten()
        })
    })
    .await
}

fn has_ss() -> bool {
    std::process::Command::new("ss").arg("-V").output().is_ok_and(|o| o.status.success())
}

#[tokio::test(flavor = "multi_thread")]
async fn freebind_binds_an_address_the_host_lacks_with_its_backlog() {
    if !has_ss() {
        return skipped(Tool::Netns, "listener socket options", "ss (iproute2) not found");
    }
    let listeners = [("freebind", "192.0.2.10", "freebind: true\n    tcp_backlog_size: 7")];
    let pair = Pair::start(|port| bootstrap(port, &listeners)).await;
    for (name, port) in pair.ports() {
        let backlog = backlog_of(&format!("192.0.2.10:{port}")).await;
        assert_eq!(backlog, Some(7), "{name}: not listening on 192.0.2.10:{port} with backlog 7");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn transparent_binds_an_address_the_host_lacks() {
    // IP_TRANSPARENT needs CAP_NET_ADMIN.
    if !has_ss() || !rustix::process::geteuid().is_root() {
        return skipped(Tool::Netns, "the transparent listener option", "not root, or ss (iproute2) not found");
    }
    let listeners = [("transparent", "192.0.2.11", "transparent: true")];
    let pair = Pair::start(|port| bootstrap(port, &listeners)).await;
    for (name, port) in pair.ports() {
        let backlog = backlog_of(&format!("192.0.2.11:{port}")).await;
        assert!(backlog.is_some(), "{name}: not listening on 192.0.2.11:{port}");
    }
}
