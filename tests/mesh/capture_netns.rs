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

use crate::netns;

use crate::common::skip::{Tool, skipped};
use netns::istio::bootstrap;
use netns::{CLIENT_V4, CLIENT_V6, Lab, POD_V4, POD_V6, get, in_netns, serve, wait_for_listener};

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
        return skipped(Tool::Netns, "captured_traffic_goes_through_outrider_both_ways", &why);
    }
    let mut lab = Lab::new();
    let files = netns::Files::new(&bootstrap());
    let binary = files.binary.clone();

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

    lab.exec(&lab.pod, &binary, &["validate", "--config", &files.config()]);
    lab.spawn_as(
        &lab.pod.clone(),
        1337,
        &binary,
        &["run", "--concurrency", "2", "--config", &files.config()],
        files.log(),
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

/// Not a test: the cost of capture, run by `bench/capture-overhead.sh`. New-connection HTTP
/// requests from the pod to a server in the client namespace: directly (no rules), through
/// Outrider's explicitly addressed listener (no capture), and captured (NAT to 15001,
/// SO_ORIGINAL_DST, hand-off to the port's listener). Same route and cluster both times.
#[test]
#[ignore = "a benchmark: bench/capture-overhead.sh runs it"]
fn capture_overhead() {
    if let Some(why) = netns::unavailable() {
        return skipped(Tool::Netns, "capture_overhead", &why);
    }
    let requests: usize = std::env::var("CAPTURE_BENCH_REQUESTS").ok().and_then(|n| n.parse().ok()).unwrap_or(2000);
    let mut lab = Lab::new();
    let files = netns::Files::new(&bootstrap());
    let binary = files.binary.clone();
    serve(&lab.client, &format!("{CLIENT_V4}:8081"), "remote-8081");
    let direct = netns::time_requests(&lab.pod, &format!("{CLIENT_V4}:8081"), requests);
    lab.exec(&lab.pod, &binary, &["capture"]);
    lab.spawn_as(
        &lab.pod.clone(),
        1337,
        &binary,
        &["run", "--concurrency", "1", "--config", &files.config()],
        files.log(),
    );
    wait_for_listener(&lab.pod, "127.0.0.1:18080");
    // Warm up the worker's upstream pool and route on both paths.
    netns::time_requests(&lab.pod, "127.0.0.1:18080", 100);
    netns::time_requests(&lab.pod, &format!("{CLIENT_V4}:8080"), 100);
    let explicit = netns::time_requests(&lab.pod, "127.0.0.1:18080", requests);
    let captured = netns::time_requests(&lab.pod, &format!("{CLIENT_V4}:8080"), requests);
    println!("{requests} requests, one connection each, sequential (µs per request)");
    for (name, mut samples) in [("direct", direct), ("explicit proxy", explicit), ("captured proxy", captured)] {
        samples.sort();
        let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
        let mean = samples.iter().map(|d| us(*d)).sum::<f64>() / samples.len() as f64;
        let at = |q: f64| us(samples[((samples.len() - 1) as f64 * q) as usize]);
        println!("{name:>15}: mean {mean:8.1}  p50 {:8.1}  p90 {:8.1}  p99 {:8.1}", at(0.5), at(0.9), at(0.99));
    }
}

/// A DNS question to `server` (port 53) from a process in `ns` that is not the proxy, over
/// UDP or TCP: the addresses answered.
fn dns_query(ns: &str, server: &str, name: &'static str, tcp: bool) -> Vec<String> {
    use hickory_proto::op::{Message, MessageType, OpCode, Query};
    use hickory_proto::rr::{Name, RecordType};
    use std::io::{Read, Write};
    let server: std::net::SocketAddr = format!("{server}:53").parse().unwrap();
    in_netns(ns, move || {
        let mut message = Message::new(9, MessageType::Query, OpCode::Query);
        message.metadata.recursion_desired = true;
        message.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
        let query = message.to_vec().unwrap();
        let limit = std::time::Duration::from_secs(5);
        let timeout = Some(limit);
        let answer = if tcp {
            let mut stream = std::net::TcpStream::connect_timeout(&server, limit).unwrap();
            stream.set_read_timeout(timeout).unwrap();
            let mut framed = u16::try_from(query.len()).unwrap().to_be_bytes().to_vec();
            framed.extend_from_slice(&query);
            stream.write_all(&framed).unwrap();
            let mut length = [0u8; 2];
            stream.read_exact(&mut length).unwrap();
            let mut answer = vec![0u8; usize::from(u16::from_be_bytes(length))];
            stream.read_exact(&mut answer).unwrap();
            answer
        } else {
            let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
            socket.set_read_timeout(timeout).unwrap();
            socket.send_to(&query, server).unwrap();
            let mut buffer = vec![0u8; 4096];
            let (n, from) = socket.recv_from(&mut buffer).unwrap();
            assert_eq!(from, server, "the answer comes back from the address asked");
            buffer.truncate(n);
            buffer
        };
        Message::from_vec(&answer).unwrap().answers.iter().map(|r| r.data.to_string()).collect()
    })
}

/// DNS capture as Istio's init container installs it with `ISTIO_META_DNS_CAPTURE`: the
/// application's questions to the pod's resolver (here the client's address, where no DNS
/// server runs) reach the DNS proxy on 15053 in the pod, over UDP and TCP, and get its
/// answers as if from the resolver; `--clean` removes the `raw` table's rules too.
#[test]
fn dns_to_the_pods_resolver_reaches_the_dns_proxy() {
    if let Some(why) = netns::unavailable() {
        return skipped(Tool::Netns, "dns_to_the_pods_resolver_reaches_the_dns_proxy", &why);
    }
    use outrider::agent::dns::{Dns, DnsSettings, NAME_TABLE_TYPE};
    use outrider::pb::istio_nds::NameTable;
    use outrider::pb::istio_nds::name_table::NameInfo;

    let lab = Lab::new();
    let files = netns::Files::new(&bootstrap());
    let binary = files.binary.clone();
    let capture = ["capture", "-u", "1337", "-b", "", "-i", "", "--redirect-dns", "--dns-servers", CLIENT_V4];
    lab.exec(&lab.pod, &binary, &capture);
    let raw = lab.exec(&lab.pod, "iptables-save", &["-t", "raw"]);
    assert!(
        raw.contains("-A ISTIO_OUTPUT_DNS -p udp -m udp --dport 53 -m owner --uid-owner 1337 -j CT --zone 1"),
        "{raw}"
    );

    // The DNS proxy, on a thread in the pod's namespace for the test's life, as the proxy's
    // uid (1337): its answers are told apart from the application's queries by owner.
    let (ready, started) = std::sync::mpsc::channel();
    in_netns(&lab.pod, move || {
        std::thread::spawn(move || {
            // This thread only: the test's other threads stay root.
            rustix::thread::set_thread_uid(rustix::process::Uid::from_raw(1337)).unwrap();
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let (_keep, stopped) = outrider::core::shutdown::channel();
                let settings = DnsSettings {
                    // pilot-agent's address: answers leave from the address captured queries
                    // were redirected to, so conntrack maps them back to the resolver's.
                    address: "127.0.0.1:15053".parse().unwrap(),
                    localhost: false,
                    namespace: "default".into(),
                    domain: "default.svc.cluster.local".into(),
                    resolv_conf: "/nonexistent".into(),
                };
                let dns = Dns::start(&settings, stopped).unwrap();
                let info =
                    NameInfo { ips: vec!["240.240.1.1".into()], registry: "External".into(), ..NameInfo::default() };
                let table = NameTable { table: [("db.mesh.example".to_owned(), info)].into_iter().collect() };
                let any = outrider::pb::google::protobuf::Any {
                    type_url: NAME_TABLE_TYPE.to_owned(),
                    value: prost::Message::encode_to_vec(&table),
                };
                dns.apply(&any).unwrap();
                ready.send(()).unwrap();
                std::future::pending::<()>().await;
            });
        });
    });
    started.recv_timeout(std::time::Duration::from_secs(10)).unwrap();

    assert_eq!(dns_query(&lab.pod, CLIENT_V4, "db.mesh.example.", false), ["240.240.1.1"]);
    assert_eq!(dns_query(&lab.pod, CLIENT_V4, "db.mesh.example.", true), ["240.240.1.1"]);

    lab.exec(&lab.pod, &binary, &["capture", "--clean"]);
    let raw = lab.exec(&lab.pod, "iptables-save", &["-t", "raw"]);
    assert!(!raw.contains("ISTIO_"), "{raw}");
    assert_eq!(capture_rules(&lab), Vec::<String>::new());
}
