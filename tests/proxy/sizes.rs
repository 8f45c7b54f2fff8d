//! Sizes at the largest value Envoy accepts: each is accepted (or refused as Envoy refuses
//! it), works, and costs what was sent rather than what the value's magnitude could ask
//! for. The cost is asserted on counts (entries of a ring, slots of a table, host sets of
//! a balancer, resources held), never on time.

use crate::common;

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use common::lab;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use outrider::config::cluster::{MaglevConfig, RingHashConfig};
use outrider::config::convert::decode_resource;
use outrider::config::endpoint::{ClusterLoadAssignment, HealthStatus, LbEndpoint, Locality, LocalityLbEndpoints};
use outrider::config::{Address, Resource, ResourceType, Warnings};
use outrider::lb::maglev::Maglev;
use outrider::lb::ring_hash::RingHash;
use outrider::lb::{ClusterLb, Host, PickContext, Picker, StatsRegistry};
use outrider::store::{ConfigState, Versioned};
use prost::Message;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Envoy's caps: `RingHashLbConfig.maximum_ring_size` (`lte: 8388608`) and the largest
/// maglev `table_size` (a prime, at most 5 000 011).
const MAX_RING: u64 = 8_388_608;
const MAX_MAGLEV: u64 = 5_000_011;

/// `n` hosts `10.x.y.z:8080` of weight 1 in one locality at priority 0.
fn hosts(n: u32) -> Vec<Arc<Host>> {
    let endpoints = (0..n)
        .map(|i| {
            Arc::new(LbEndpoint {
                address: Address::Socket(SocketAddr::new(Ipv4Addr::from(0x0a00_0000 + i).into(), 8080)),
                weight: 1,
                health: HealthStatus::Healthy,
                hash_key: None,
                transport_socket_match: Default::default(),
                hostname: String::new(),
                health_check: None,
                additional_addresses: Box::default(),
                metadata: None,
            })
        })
        .collect();
    let mut assignment = ClusterLoadAssignment::empty("sizes");
    assignment.localities.push(LocalityLbEndpoints {
        locality: Locality::default(),
        priority: 0,
        load_balancing_weight: None,
        endpoints,
    });
    StatsRegistry::default().hosts(&assignment, Instant::now()).into_iter().map(Arc::new).collect()
}

/// Envoy's JSON of a resource → its protobuf bytes.
fn bytes_of<M: Message + Default>(full_name: &str, value: Value) -> Vec<u8> {
    outrider::pb::json::from_value::<M>(full_name, value).unwrap().0.encode_to_vec()
}

fn convert(resource_type: ResourceType, bytes: &[u8]) -> Result<Resource, String> {
    let mut warnings = Warnings::new();
    outrider::pb::pgv::with_extension_checks(|| decode_resource(resource_type, bytes, &mut warnings))
        .map_err(|e| e.to_string())
}

fn cluster_json(name: &str, extra: Value) -> Value {
    let mut cluster = json!({
        "name": name, "type": "EDS", "connect_timeout": "1s",
        "eds_cluster_config": { "eds_config": { "ads": {}, "resource_api_version": "V3" } },
    });
    if let (Some(cluster), Some(extra)) = (cluster.as_object_mut(), extra.as_object()) {
        cluster.extend(extra.clone());
    }
    cluster
}

fn cluster(name: &str, extra: Value) -> Result<Resource, String> {
    let bytes = bytes_of::<outrider::pb::envoy::config::cluster::v3::Cluster>(
        "envoy.config.cluster.v3.Cluster",
        cluster_json(name, extra),
    );
    // Through the constraints check of the response, as the ADS client runs it.
    outrider::config::convert::constraints::check(ResourceType::Cluster, [bytes.as_slice()])
        .map_err(|(_, e)| e.to_string())?;
    convert(ResourceType::Cluster, &bytes)
}

#[test]
fn ring_hash_at_envoys_largest_ring() {
    // Accepted at the cap, refused one above it, as Envoy refuses it (`lte: 8388608`).
    let at_cap = json!({ "lb_policy": "RING_HASH",
        "ring_hash_lb_config": { "minimum_ring_size": MAX_RING, "maximum_ring_size": MAX_RING } });
    assert!(cluster("ring", at_cap).is_ok());
    let above = json!({ "lb_policy": "RING_HASH", "ring_hash_lb_config": { "maximum_ring_size": MAX_RING + 1 } });
    let refused = cluster("ring", above).unwrap_err();
    assert!(refused.contains("ring_hash_lb_config.maximum_ring_size"), "{refused}");

    // The ring has exactly the configured entries (12 bytes each), however few hosts.
    let hosts = hosts(3);
    let config =
        RingHashConfig { minimum_ring_size: MAX_RING, maximum_ring_size: MAX_RING, ..RingHashConfig::default() };
    let ring = RingHash::new(&hosts, &[1.0; 3], &config);
    assert_eq!(ring.len() as u64, MAX_RING);
    let (fewest, most) = ring.hashes_per_host();
    assert!(fewest * 3 <= MAX_RING && most * 3 >= MAX_RING && most - fewest <= 1, "{fewest} {most}");
    // Works: every hash lands on one of the hosts, the same one each time.
    for hash in [0, 1, u64::MAX / 2, u64::MAX] {
        let host = ring.choose(hash, 0).unwrap();
        assert!(host < 3);
        assert_eq!(ring.choose(hash, 0), Some(host));
    }
}

#[test]
fn maglev_at_envoys_largest_table() {
    let at_cap = json!({ "lb_policy": "MAGLEV", "maglev_lb_config": { "table_size": MAX_MAGLEV } });
    assert!(cluster("maglev", at_cap).is_ok());
    let above = json!({ "lb_policy": "MAGLEV", "maglev_lb_config": { "table_size": MAX_MAGLEV + 2 } });
    let refused = cluster("maglev", above).unwrap_err();
    assert!(refused.contains("maglev_lb_config.table_size"), "{refused}");

    let hosts = hosts(3);
    let table = Maglev::new(&hosts, &[1.0; 3], &MaglevConfig { table_size: MAX_MAGLEV, ..MaglevConfig::default() });
    // Every slot is one host's: the slots per host add up to the table, no more.
    let (fewest, most) = table.entries_per_host();
    assert!(fewest * 3 <= MAX_MAGLEV && most * 3 >= MAX_MAGLEV && most - fewest <= 1, "{fewest} {most}");
    for hash in [0, 1, u64::MAX / 2, u64::MAX] {
        assert!(table.choose(hash, 0).unwrap() < 3);
    }
}

#[test]
fn one_ring_per_priority_level_shared_by_its_healthy_list() {
    // Every host healthy: the level's healthy list is its whole list, and shares its ring
    // (Envoy builds one per level). The (empty) degraded list is a set of its own.
    let mut assignment = ClusterLoadAssignment::empty("ring");
    let endpoints = hosts(4).iter().map(|h| h.endpoint.clone()).collect();
    assignment.localities.push(LocalityLbEndpoints {
        locality: Locality::default(),
        priority: 0,
        load_balancing_weight: None,
        endpoints,
    });
    let Resource::Cluster(ring_cluster) =
        cluster("ring", json!({ "lb_policy": "RING_HASH", "ring_hash_lb_config": { "minimum_ring_size": 1024 } }))
            .unwrap()
    else {
        panic!("not a cluster")
    };
    let lb = ClusterLb::build(&ring_cluster, &assignment, &mut StatsRegistry::default(), Instant::now());
    assert_eq!(lb.host_sets(), 2, "all = healthy, and degraded");
    let mut picker = Picker::new(Arc::new(lb), 7);
    let ctx = PickContext { hash: Some(42), ..PickContext::at(Instant::now()) };
    let first = picker.pick(&ctx).unwrap().clone();
    assert_eq!(picker.pick(&ctx).unwrap().endpoint.address, first.endpoint.address, "a hash sticks to its host");
}

#[test]
fn weights_at_their_largest_do_not_overflow() {
    // Two localities of weight 2³² − 1, each with two endpoints of weight 2³² − 1 (Envoy
    // accepts them): the sums are taken in wider types, the picks stay spread.
    let max = u32::MAX;
    let endpoint = |i: u32| {
        json!({ "endpoint": { "address": { "socket_address": {
            "address": Ipv4Addr::from(0x0a00_0000 + i).to_string(), "port_value": 8080 } } },
            "load_balancing_weight": max })
    };
    let assignment = json!({ "cluster_name": "w", "policy": { "weighted_priority_health": true }, "endpoints": [
        { "locality": { "zone": "a" }, "load_balancing_weight": max, "lb_endpoints": [endpoint(1), endpoint(2)] },
        { "locality": { "zone": "b" }, "load_balancing_weight": max, "lb_endpoints": [endpoint(3), endpoint(4)] },
    ] });
    let bytes = bytes_of::<outrider::pb::envoy::config::endpoint::v3::ClusterLoadAssignment>(
        "envoy.config.endpoint.v3.ClusterLoadAssignment",
        assignment,
    );
    let Resource::ClusterLoadAssignment(cla) = convert(ResourceType::ClusterLoadAssignment, &bytes).unwrap() else {
        panic!("not an assignment")
    };
    for (policy, extra) in [
        ("round robin", json!({ "common_lb_config": { "locality_weighted_lb_config": {} } })),
        ("least request", json!({ "lb_policy": "LEAST_REQUEST" })),
        ("ring hash", json!({ "lb_policy": "RING_HASH" })),
        ("maglev", json!({ "lb_policy": "MAGLEV" })),
    ] {
        let Resource::Cluster(c) = cluster("w", extra).unwrap() else { panic!("not a cluster") };
        let lb = ClusterLb::build(&c, &cla, &mut StatsRegistry::default(), Instant::now());
        assert_eq!(lb.priority_load().healthy, vec![100], "{policy}");
        let mut picker = Picker::new(Arc::new(lb), 3);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..400_u64 {
            let ctx =
                PickContext { hash: Some(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)), ..PickContext::at(Instant::now()) };
            seen.insert(format!("{:?}", picker.pick(&ctx).unwrap().endpoint.address));
        }
        assert_eq!(seen.len(), 4, "{policy}: {seen:?}");
    }
}

#[test]
fn eds_with_100_000_endpoints_over_129_priorities() {
    const ENDPOINTS: usize = 100_000;
    const LEVELS: usize = 129; // priorities 0..=128, Envoy's bound
    let localities: Vec<Value> = (0..LEVELS)
        .map(|priority| {
            let endpoints: Vec<Value> = (priority..ENDPOINTS)
                .step_by(LEVELS)
                .map(|i| {
                    json!({ "endpoint": { "address": { "socket_address": {
                        "address": Ipv4Addr::from(0x0a00_0000 + i as u32).to_string(), "port_value": 8080 } } } })
                })
                .collect();
            json!({ "priority": priority, "locality": { "zone": format!("z{priority}") }, "lb_endpoints": endpoints })
        })
        .collect();
    let assignment = json!({ "cluster_name": "eds", "endpoints": localities });
    let cla_bytes = |value: Value| {
        bytes_of::<outrider::pb::envoy::config::endpoint::v3::ClusterLoadAssignment>(
            "envoy.config.endpoint.v3.ClusterLoadAssignment",
            value,
        )
    };
    let Resource::ClusterLoadAssignment(cla) =
        convert(ResourceType::ClusterLoadAssignment, &cla_bytes(assignment)).unwrap()
    else {
        panic!("not an assignment")
    };
    assert_eq!(cla.endpoints().count(), ENDPOINTS);
    // Priority 129 is refused (Envoy: at most 128).
    let beyond = json!({ "cluster_name": "eds", "endpoints": [{ "priority": 129, "lb_endpoints": [
        { "endpoint": { "address": { "socket_address": { "address": "10.0.0.1", "port_value": 8080 } } } }] }] });
    let refused = convert(ResourceType::ClusterLoadAssignment, &cla_bytes(beyond)).unwrap_err();
    assert!(refused.contains("priority"), "{refused}");

    let Resource::Cluster(eds) = cluster("eds", json!({})).unwrap() else { panic!("not a cluster") };
    let lb = ClusterLb::build(&eds, &cla, &mut StatsRegistry::default(), Instant::now());
    assert_eq!(lb.hosts().len(), ENDPOINTS);
    assert_eq!(lb.priority_load().healthy.len(), LEVELS);
    assert_eq!(lb.priority_load().healthy[0], 100, "all healthy: priority 0 takes everything");
    // Two sets per level (the whole list, shared with the healthy one, and the empty
    // degraded one): linear in the levels sent, never in their numbers' magnitude.
    assert_eq!(lb.host_sets(), 2 * LEVELS);
    let mut picker = Picker::new(Arc::new(lb), 1);
    for _ in 0..10 {
        assert_eq!(picker.pick(&PickContext::at(Instant::now())).unwrap().priority, 0);
    }

    // Only the deepest level sent: the levels above it are empty, and cost two empty
    // sets each, bounded by the 129 levels.
    let deepest = json!({ "cluster_name": "eds", "endpoints": [{ "priority": 128, "lb_endpoints": [
        { "endpoint": { "address": { "socket_address": { "address": "10.0.0.1", "port_value": 8080 } } } }] }] });
    let Resource::ClusterLoadAssignment(cla) =
        convert(ResourceType::ClusterLoadAssignment, &cla_bytes(deepest)).unwrap()
    else {
        panic!("not an assignment")
    };
    let lb = ClusterLb::build(&eds, &cla, &mut StatsRegistry::default(), Instant::now());
    assert!(lb.host_sets() <= 3 * LEVELS);
    let mut picker = Picker::new(Arc::new(lb), 1);
    assert_eq!(picker.pick(&PickContext::at(Instant::now())).unwrap().priority, 128);
}

#[test]
fn a_route_table_of_10_000_virtual_hosts() {
    const HOSTS: usize = 10_000;
    let virtual_hosts: Vec<Value> = (0..HOSTS)
        .map(|i| {
            json!({ "name": format!("vh{i}"), "domains": [format!("svc-{i}.mesh")],
                "routes": [{ "match": { "prefix": "/" }, "route": { "cluster": format!("c{i}") } }] })
        })
        .collect();
    let bytes = bytes_of::<outrider::pb::envoy::config::route::v3::RouteConfiguration>(
        "envoy.config.route.v3.RouteConfiguration",
        json!({ "name": "big", "virtual_hosts": virtual_hosts }),
    );
    outrider::config::convert::constraints::check(ResourceType::RouteConfiguration, [bytes.as_slice()]).unwrap();
    let Resource::RouteConfiguration(table) = convert(ResourceType::RouteConfiguration, &bytes).unwrap() else {
        panic!("not a route configuration")
    };
    assert_eq!(table.virtual_hosts.len(), HOSTS);
    for i in [0, HOSTS / 2, HOSTS - 1] {
        assert_eq!(table.find_virtual_host(&format!("svc-{i}.mesh")).unwrap().name, format!("vh{i}"));
    }
    assert!(table.find_virtual_host("svc-10000.mesh").is_none());
}

#[test]
fn a_cds_response_of_10_000_clusters() {
    const CLUSTERS: usize = 10_000;
    // One cluster read from JSON (the JSON reader decodes its descriptors per call), the
    // others renamed copies.
    let (template, _) = outrider::pb::json::from_value::<outrider::pb::envoy::config::cluster::v3::Cluster>(
        "envoy.config.cluster.v3.Cluster",
        cluster_json("template", json!({})),
    )
    .unwrap();
    let items: Vec<Vec<u8>> = (0..CLUSTERS)
        .map(|i| {
            let mut cluster = template.clone();
            cluster.name = format!("outbound|80||svc-{i}.mesh");
            cluster.encode_to_vec()
        })
        .collect();
    outrider::config::convert::constraints::check(ResourceType::Cluster, items.iter().map(Vec::as_slice)).unwrap();
    let accepted: Vec<Versioned<Resource>> = outrider::pb::pgv::with_extension_checks(|| {
        items
            .iter()
            .map(|bytes| Versioned {
                resource: decode_resource(ResourceType::Cluster, bytes, &mut Warnings::new()).unwrap(),
                version: "1".into(),
                last_updated: SystemTime::now(),
                raw: bytes.as_slice().into(),
            })
            .collect()
    });
    let mut state = ConfigState::new(Vec::new(), Vec::new(), Vec::new(), [], Default::default());
    state.apply(ResourceType::Cluster, "1", accepted, &[], true);
    let snapshot = state.snapshot();
    // EDS clusters warm until their endpoints come, as in Envoy: all held, one entry each.
    assert_eq!(snapshot.clusters.len() + snapshot.warming_clusters.len(), CLUSTERS);
    assert!(snapshot.warming_clusters.contains_key("outbound|80||svc-9999.mesh"));
}

/// A backend that takes heads as large as the proxy may send (hyper's defaults are far
/// smaller) and answers with the number of headers it got.
async fn header_counting_backend() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|request: http::Request<hyper::body::Incoming>| async move {
                    let count = request.headers().len().to_string();
                    Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from(count))))
                });
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder.max_buf_size(16 << 20).max_headers(200_000);
                let _ = builder.serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    port
}

/// Writes `head` on a new connection; the status and body of the answer.
async fn raw(port: u16, head: &[u8]) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // Written while the answer is read: a refused head is answered before it is all sent.
    let (mut reader, mut writer) = stream.split();
    let write = async {
        let _ = writer.write_all(head).await;
    };
    let mut answer = Vec::new();
    let read = async {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match reader.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(common::WAIT * 3, async { tokio::join!(write, read) }).await.unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn request_headers_at_envoys_largest_limits() {
    // `max_request_headers_kb` at its cap (8192) and `max_headers_count` at 2³² − 1.
    let backend = header_counting_backend().await;
    let hcm =
        "      max_request_headers_kb: 8192\n      common_http_protocol_options: { max_headers_count: 4294967295 }\n";
    let lab = lab::start_logged(&[backend], "", common::ROUTE, "DELTA_GRPC", hcm).await;
    lab.outrider.listeners_ready().await;
    let port = lab.proxy_port;
    let head = |headers: &str| {
        format!("GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n{headers}\r\n").into_bytes()
    };

    // Just under 8 MiB of headers (1 000 of 8 000 bytes): served, every header forwarded.
    let big: String = (0..1_000).map(|i| format!("x-big-{i}: {}\r\n", "v".repeat(8_000))).collect();
    let (status, body) = raw(port, &head(&big)).await;
    assert_eq!(status, 200);
    assert!(body.parse::<usize>().unwrap() >= 1_000, "{body}");
    // 24 000 small headers, far above the default count of 100: served.
    let many = |n: usize| (0..n).map(|i| format!("x-h{i}: v\r\n")).collect::<String>();
    let (status, body) = raw(port, &head(&many(24_000))).await;
    assert_eq!(status, 200);
    assert!(body.parse::<usize>().unwrap() >= 24_000, "{body}");
    // 30 000: more than the codec's header map holds (24 576, see the README's Limits):
    // 431, and the worker keeps serving.
    assert_eq!(raw(port, &head(&many(30_000))).await.0, 431);
    assert_eq!(raw(port, &head("")).await.0, 200);
    // Over 8 MiB: 431, as Envoy answers.
    let over: String = (0..1_100).map(|i| format!("x-big-{i}: {}\r\n", "v".repeat(8_000))).collect();
    assert_eq!(raw(port, &head(&over)).await.0, 431);
    lab.outrider.stop();
}
