//! Transparent capture end to end, as in an Istio pod: in network namespaces made by the
//! test, `outrider capture` installs the iptables rules in the pod's namespace, Outrider
//! runs there as uid 1337 with Istio's listener layout (virtualOutbound on 15001 with
//! `use_original_dst`, virtualInbound on 15006 with the `original_dst` filter, a per-port
//! outbound listener that is not bound, ORIGINAL_DST passthrough clusters), and traffic in
//! both directions, IPv4 and IPv6, goes through it to the right destination.
//!
//! Skipped (with the reason printed) where it cannot run: not root, or no iptables or
//! iproute2. Under CI (`CI` set) a missing prerequisite fails instead: `.ci/run` installs
//! them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod netns;

use netns::{CLIENT_V4, CLIENT_V6, Lab, POD_V4, POD_V6, get, serve, wait_for_listener};

/// Istio's sidecar listeners and clusters, reduced to what capture needs.
fn bootstrap() -> String {
    let tcp = |cluster: &str| {
        format!(
            r#"[{{ name: envoy.filters.network.tcp_proxy, typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: "{cluster}", cluster: "{cluster}" }} }}]"#
        )
    };
    let http = |cluster: &str| {
        format!(
            r#"[{{ name: envoy.filters.network.http_connection_manager, typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: "{cluster}", route_config: {{ virtual_hosts: [{{ name: all, domains: ["*"], routes: [{{ match: {{ prefix: "/" }}, route: {{ cluster: "{cluster}" }} }}] }}] }}, http_filters: [{{ name: envoy.filters.http.router, typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }} }}] }} }}]"#
        )
    };
    let any =
        |address: &str, port: u16| format!("{{ socket_address: {{ address: \"{address}\", port_value: {port} }} }}");
    let original_dst = |name: &str, bind: &str| {
        format!(
            "  - {{ name: {name}, type: ORIGINAL_DST, lb_policy: CLUSTER_PROVIDED, connect_timeout: 5s, cleanup_interval: 60s, upstream_bind_config: {{ source_address: {{ address: \"{bind}\", port_value: 0 }} }} }}\n"
        )
    };
    format!(
        r#"
admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 15000 }} }} }}
static_resources:
  listeners:
  - name: virtualOutbound
    address: {v4_15001}
    additional_addresses: [{{ address: {v6_15001} }}]
    use_original_dst: true
    traffic_direction: OUTBOUND
    filter_chains:
    - {{ name: virtualOutbound-blackhole, filter_chain_match: {{ destination_port: 15001 }}, filters: {blackhole} }}
    - {{ name: virtualOutbound-catchall-tcp, filters: {passthrough} }}
  - name: 0.0.0.0_8080
    address: {v4_8080}
    bind_to_port: false
    traffic_direction: OUTBOUND
    filter_chains:
    - {{ filters: {remote} }}
  - name: virtualInbound
    address: {v4_15006}
    additional_addresses: [{{ address: {v6_15006} }}]
    traffic_direction: INBOUND
    listener_filters:
    - {{ name: envoy.filters.listener.original_dst, typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.listener.original_dst.v3.OriginalDst }} }}
    filter_chains:
    - {{ name: virtualInbound-blackhole, filter_chain_match: {{ destination_port: 15006 }}, filters: {blackhole} }}
    - {{ name: 0.0.0.0_8080, filter_chain_match: {{ destination_port: 8080 }}, filters: {inbound_http} }}
    - {{ name: virtualInbound, filter_chain_match: {{ prefix_ranges: [{{ address_prefix: 0.0.0.0, prefix_len: 0 }}] }}, filters: {inbound_v4} }}
    - {{ name: virtualInbound, filter_chain_match: {{ prefix_ranges: [{{ address_prefix: "::", prefix_len: 0 }}] }}, filters: {inbound_v6} }}
  clusters:
  - {{ name: BlackHoleCluster, type: STATIC, connect_timeout: 5s }}
  - {{ name: PassthroughCluster, type: ORIGINAL_DST, lb_policy: CLUSTER_PROVIDED, connect_timeout: 5s }}
{inbound_8080}{passthrough_v4}{passthrough_v6}  - name: outbound|8080||remote
    type: STATIC
    connect_timeout: 5s
    load_assignment:
      cluster_name: outbound|8080||remote
      endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {remote_8081} }} }}] }}]
"#,
        v4_15001 = any("0.0.0.0", 15001),
        v6_15001 = any("::", 15001),
        v4_15006 = any("0.0.0.0", 15006),
        v6_15006 = any("::", 15006),
        v4_8080 = any("0.0.0.0", 8080),
        blackhole = tcp("BlackHoleCluster"),
        passthrough = tcp("PassthroughCluster"),
        remote = http("outbound|8080||remote"),
        inbound_http = http("inbound|8080||"),
        inbound_v4 = tcp("InboundPassthroughClusterIpv4"),
        inbound_v6 = tcp("InboundPassthroughClusterIpv6"),
        inbound_8080 = original_dst("inbound|8080||", "127.0.0.6"),
        passthrough_v4 = original_dst("InboundPassthroughClusterIpv4", "127.0.0.6"),
        passthrough_v6 = original_dst("InboundPassthroughClusterIpv6", "::6"),
        remote_8081 = any(CLIENT_V4, 8081),
    )
}

fn skip_or_fail(why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("the capture test must run in CI, but {why}");
    }
    println!("skipped: {why}");
}

/// The ISTIO_* rules of the pod's nat tables, IPv4 and IPv6.
fn capture_rules(lab: &Lab) -> Vec<String> {
    ["iptables-save", "ip6tables-save"]
        .iter()
        .flat_map(|tool| lab.exec(&lab.pod, tool, &["-t", "nat"]).lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|l| l.contains("ISTIO_"))
        .collect()
}

#[test]
fn captured_traffic_goes_through_outrider_both_ways() {
    if let Some(why) = netns::unavailable() {
        return skip_or_fail(&why);
    }
    let mut lab = Lab::new();
    let dir = tempfile::tempdir().unwrap();
    // Outrider runs as uid 1337, like Istio's proxy: it must reach its binary and config.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let binary = dir.path().join("outrider");
    std::fs::copy(env!("CARGO_BIN_EXE_outrider"), &binary).unwrap();
    let binary = binary.to_str().unwrap().to_owned();
    let config = dir.path().join("bootstrap.yaml");
    std::fs::write(&config, bootstrap()).unwrap();

    // The world outside the pod: a service behind a ClusterIP-like port and a plain server.
    serve(&lab.client, &format!("{CLIENT_V4}:8081"), "remote-8081");
    serve(&lab.client, &format!("{CLIENT_V4}:9090"), "client-9090");
    serve(&lab.client, &format!("[{CLIENT_V6}]:9090"), "client-9090");
    // The application in the pod, and a port capture leaves alone (Istio's agent port).
    serve(&lab.pod, "0.0.0.0:8080", "app-8080");
    serve(&lab.pod, "0.0.0.0:9091", "app-9091");
    serve(&lab.pod, "[::]:9091", "app-9091");
    serve(&lab.pod, "0.0.0.0:15020", "agent-15020");

    // Istio's init container arguments; twice, to show a rerun leaves one set of rules.
    let init = [
        "capture",
        "-p",
        "15001",
        "-z",
        "15006",
        "-u",
        "1337",
        "-m",
        "REDIRECT",
        "-i",
        "*",
        "-x",
        "",
        "-b",
        "*",
        "-d",
        "15090,15021,15020",
        "--ipv6",
    ];
    lab.exec(&lab.pod, &binary, &init);
    let installed = capture_rules(&lab);
    lab.exec(&lab.pod, &binary, &init);
    assert_eq!(capture_rules(&lab), installed, "capture is idempotent");
    assert!(installed.iter().any(|r| r == "-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN"), "{installed:#?}");

    lab.exec(&lab.pod, &binary, &["validate", "--config", config.to_str().unwrap()]);
    lab.spawn_as(
        &lab.pod.clone(),
        1337,
        &binary,
        &["run", "--concurrency", "2", "--config", config.to_str().unwrap()],
        dir.path().join("outrider.log"),
    );
    wait_for_listener(&lab.pod, "127.0.0.1:15001");
    wait_for_listener(&lab.pod, "127.0.0.1:15006");
    wait_for_listener(&lab.pod, "[::1]:15001");
    wait_for_listener(&lab.pod, "[::1]:15006");

    // Outbound to a service port: 15001 hands the connection to the 0.0.0.0_8080 listener,
    // whose route sends it to the service's endpoint (nothing listens on :8080 out there).
    let reply = get(&lab.pod, &format!("{CLIENT_V4}:8080"), "remote").unwrap();
    assert_eq!((reply.status, reply.body.split(' ').next()), (200, Some("remote-8081")), "{reply:?}");
    assert!(reply.header("x-envoy-upstream-service-time").is_some(), "the HTTP connection manager answered");

    // Outbound to anything else: PassthroughCluster connects to the original destination.
    // The server saw another connection than the application's: Outrider's own.
    for target in [format!("{CLIENT_V4}:9090"), format!("[{CLIENT_V6}]:9090")] {
        let reply = get(&lab.pod, &target, "passthrough").unwrap();
        assert!(reply.body.starts_with("client-9090"), "{reply:?}");
        assert_eq!(reply.peer().ip(), reply.local.ip(), "from the pod's address");
        assert_ne!(reply.peer().port(), reply.local.port(), "a second connection, made by the proxy: {reply:?}");
        assert!(reply.header("x-envoy-upstream-service-time").is_none(), "bytes passed through untouched");
    }

    // Inbound HTTP to 8080: 15006 matches the port's chain; the application sees the
    // connection coming from 127.0.0.6, the inbound cluster's bind address.
    let reply = get(&lab.client, &format!("{POD_V4}:8080"), "app").unwrap();
    assert!(reply.body.starts_with("app-8080"), "{reply:?}");
    assert_eq!(reply.peer().ip().to_string(), "127.0.0.6", "{reply:?}");
    assert!(reply.header("x-envoy-upstream-service-time").is_some());

    // Inbound TCP to another port, both families: the passthrough chains by prefix.
    let reply = get(&lab.client, &format!("{POD_V4}:9091"), "app").unwrap();
    assert_eq!((reply.body.split(' ').next(), reply.peer().ip().to_string().as_str()), (Some("app-9091"), "127.0.0.6"));
    let reply = get(&lab.client, &format!("[{POD_V6}]:9091"), "app").unwrap();
    assert_eq!((reply.body.split(' ').next(), reply.peer().ip().to_string().as_str()), (Some("app-9091"), "::6"));

    // Excluded inbound port: reached directly, from the client's own address.
    let reply = get(&lab.client, &format!("{POD_V4}:15020"), "agent").unwrap();
    assert_eq!(reply.peer().ip().to_string(), CLIENT_V4, "not captured: {reply:?}");

    // --clean removes every rule: the service port is no longer served by the proxy.
    lab.exec(&lab.pod, &binary, &["capture", "--clean", "--ipv6"]);
    assert_eq!(capture_rules(&lab), Vec::<String>::new());
    let direct = get(&lab.pod, &format!("{CLIENT_V4}:8080"), "remote");
    assert!(direct.is_err(), "without capture nothing answers on :8080: {direct:?}");
    let reply = get(&lab.client, &format!("{POD_V4}:9091"), "app").unwrap();
    assert_eq!(reply.peer().ip().to_string(), CLIENT_V4, "inbound no longer captured");
}
