//! Updates cost what changed, not what exists: one EDS change among thousands of served
//! clusters settles one cluster in the store, is recorded as that one name, and compares,
//! rebuilds and syncs one balancer; the counts are the same at 100 clusters and at 1 000.
//! And end to end through the proxy: after one cluster's EDS change traffic goes to its new
//! endpoint while the other clusters keep their balancers, and a CDS removal still drains
//! the removed cluster's pooled connections.

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::SystemTime;

use common::*;
use outrider::config::convert::decode_resource;
use outrider::config::{Resource, ResourceType, Warnings};
use outrider::control::balancing::Keeper;
use outrider::core::shutdown;
use outrider::lb::{BalancerBuilder, Balancers};
use outrider::store::{ConfigState, Store, Versioned};
use prost::Message;

fn cluster_name(i: usize) -> String {
    format!("outbound|8080||svc-{i}.default.svc.cluster.local")
}

fn decoded(resource_type: ResourceType, bytes: Vec<u8>) -> Versioned<Resource> {
    let resource = decode_resource(resource_type, &bytes, &mut Warnings::new()).unwrap();
    Versioned { resource, version: "v".into(), last_updated: SystemTime::now(), raw: bytes.into() }
}

type ClusterProto = outrider::pb::envoy::config::cluster::v3::Cluster;
type AssignmentProto = outrider::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;

/// Istio's shape of an outbound cluster, parsed once (the tests change its names).
fn cluster_template() -> &'static ClusterProto {
    static TEMPLATE: std::sync::OnceLock<ClusterProto> = std::sync::OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let value = serde_json::json!({ "name": "x", "type": "EDS", "lb_policy": "LEAST_REQUEST",
            "eds_cluster_config": { "eds_config": { "ads": {} }, "service_name": "x" } });
        outrider::pb::json::from_value("envoy.config.cluster.v3.Cluster", value).unwrap().0
    })
}

fn cluster(i: usize) -> Versioned<Resource> {
    let mut proto = cluster_template().clone();
    proto.name = cluster_name(i);
    if let Some(eds) = proto.eds_cluster_config.as_mut() {
        eds.service_name = cluster_name(i);
    }
    decoded(ResourceType::Cluster, proto.encode_to_vec())
}

fn assignment(i: usize, ports: std::ops::Range<u32>) -> Versioned<Resource> {
    let mut proto = assignment_proto(i, ports);
    proto.cluster_name = cluster_name(i);
    decoded(ResourceType::ClusterLoadAssignment, proto.encode_to_vec())
}

/// Endpoints on `ports` of an address of cluster `i`'s own.
fn assignment_proto(i: usize, ports: std::ops::Range<u32>) -> AssignmentProto {
    let lb_endpoints: Vec<_> = ports
        .map(|p| {
            serde_json::json!({ "endpoint": { "address": { "socket_address": {
            "address": format!("10.{}.{}.1", i / 256 % 256, i % 256), "port_value": p } } } })
        })
        .collect();
    let value = serde_json::json!({ "cluster_name": cluster_name(i), "endpoints": [{ "lb_endpoints": lb_endpoints }] });
    outrider::pb::json::from_value("envoy.config.endpoint.v3.ClusterLoadAssignment", value).unwrap().0
}

/// The first endpoints of every cluster: one parsed list, named per cluster (parsing JSON
/// per cluster would dominate the test).
fn first_assignment(i: usize, template: &AssignmentProto) -> Versioned<Resource> {
    let mut proto = template.clone();
    proto.cluster_name = cluster_name(i);
    decoded(ResourceType::ClusterLoadAssignment, proto.encode_to_vec())
}

/// The work one change did, counted by the store, the builder and the balancing task.
#[derive(Debug, PartialEq, Eq)]
struct Work {
    settled: usize,
    compared: usize,
    rebuilt: usize,
    visited: usize,
}

/// A sidecar with `n` served clusters and their balancers, followed by a balancing task's
/// state as `keep_balancers` runs it.
struct Mesh {
    state: ConfigState,
    store: Arc<Store>,
    keeper: Keeper,
    balancers: Arc<Balancers>,
    _trigger: shutdown::Trigger,
    shutdown: shutdown::Signal,
}

impl Mesh {
    fn new(n: usize) -> Self {
        let mut state = ConfigState::new(Vec::new(), Vec::new(), Vec::new(), [], Default::default());
        let store = Arc::new(Store::new(state.snapshot()));
        // One validator of the extensions' configs per response, as the ADS client has.
        let (clusters, assignments) = outrider::pb::pgv::with_extension_checks(|| {
            let template = assignment_proto(0, 80..83);
            ((0..n).map(cluster).collect(), (0..n).map(|i| first_assignment(i, &template)).collect())
        });
        state.apply(ResourceType::Cluster, "1", clusters, &[], true);
        state.apply(ResourceType::ClusterLoadAssignment, "1", assignments, &[], false);
        store.publish(state.snapshot());
        let (keeper, _events) = Keeper::new(BalancerBuilder::default(), None);
        let (trigger, shutdown) = shutdown::channel();
        let mut mesh = Self { state, store, keeper, balancers: Arc::default(), _trigger: trigger, shutdown };
        mesh.keeper.follow(&mesh.store, &mesh.balancers, &mesh.shutdown);
        assert_eq!(mesh.balancers.all().len(), n);
        mesh
    }

    /// Applies one response, publishes, lets the balancing task follow; returns its work.
    fn push(&mut self, resource_type: ResourceType, updated: Vec<Versioned<Resource>>, removed: &[String]) -> Work {
        let builder = self.keeper.builder();
        let (compared, rebuilt, visited) = (builder.compared(), builder.rebuilds(), self.keeper.visited());
        self.state.apply(resource_type, "2", updated, removed, false);
        self.store.publish(self.state.snapshot());
        self.keeper.follow(&self.store, &self.balancers, &self.shutdown);
        let builder = self.keeper.builder();
        Work {
            settled: self.state.last_settled(),
            compared: builder.compared() - compared,
            rebuilt: builder.rebuilds() - rebuilt,
            visited: self.keeper.visited() - visited,
        }
    }
}

fn one_eds_change(n: usize) -> Work {
    let mut mesh = Mesh::new(n);
    let before = mesh.balancers.all();
    let work = mesh.push(ResourceType::ClusterLoadAssignment, vec![assignment(7, 81..84)], &[]);

    let snapshot = mesh.store.load();
    let changes = &snapshot.changes;
    assert_eq!(changes.endpoints, BTreeSet::from([cluster_name(7)]), "the change record names the one cluster");
    assert!(changes.clusters.is_empty() && changes.listeners.is_empty());
    let after = mesh.balancers.all();
    assert_eq!(after.get(&cluster_name(7)).unwrap().hosts().len(), 3);
    assert!(!Arc::ptr_eq(&before[&cluster_name(7)], &after[&cluster_name(7)]), "its balancer is rebuilt");
    for i in (0..n).filter(|i| *i != 7).step_by(97) {
        assert!(Arc::ptr_eq(&before[&cluster_name(i)], &after[&cluster_name(i)]), "cluster {i} keeps its balancer");
        assert!(Arc::ptr_eq(&mesh.store.load().endpoints[&cluster_name(i)], &snapshot.endpoints[&cluster_name(i)]));
    }
    work
}

#[tokio::test]
async fn one_eds_change_costs_the_same_among_100_or_1000_clusters() {
    let one = Work { settled: 1, compared: 1, rebuilt: 1, visited: 1 };
    assert_eq!(one_eds_change(100), one);
    assert_eq!(one_eds_change(1_000), one);
}

#[tokio::test]
async fn adding_and_removing_one_cluster_costs_that_cluster() {
    for n in [100, 1_000] {
        let mut mesh = Mesh::new(n);
        // A new cluster waits for its endpoints (nothing to balance yet), then is served.
        let work = mesh.push(ResourceType::Cluster, vec![cluster(n)], &[]);
        assert_eq!(work, Work { settled: 1, compared: 0, rebuilt: 0, visited: 0 });
        assert!(mesh.store.load().warming_clusters.contains_key(&cluster_name(n)));
        let work = mesh.push(ResourceType::ClusterLoadAssignment, vec![assignment(n, 80..82)], &[]);
        assert_eq!(work, Work { settled: 1, compared: 1, rebuilt: 1, visited: 1 });
        assert_eq!(mesh.balancers.all().len(), n + 1);

        let work = mesh.push(ResourceType::Cluster, Vec::new(), &[cluster_name(3)]);
        assert_eq!(work, Work { settled: 1, compared: 0, rebuilt: 0, visited: 1 });
        assert!(mesh.balancers.get(&cluster_name(3)).is_none());
        assert_eq!(mesh.balancers.all().len(), n);
    }
}

/// A worker resolves a cluster (its balancer and picker, breakers, pool, TLS) once per
/// publication: between publications every request gets the same thread-local cluster; after
/// one cluster's EDS change only that cluster's is made anew, the others' are kept; a
/// removed cluster is forgotten.
#[tokio::test]
async fn a_worker_resolves_a_cluster_once_per_publication() {
    use outrider::lb::PickContext;
    use outrider::proxy::clusters::WorkerClusters;
    use outrider::proxy::transport::WorkerTls;
    use outrider::proxy::upstream::Upstreams;
    use std::rc::Rc;

    let mut mesh = Mesh::new(100);
    let tls = WorkerTls::new(Arc::default());
    let worker = WorkerClusters::new(mesh.store.clone(), mesh.balancers.clone(), Upstreams::new(), tls, 1);
    let snapshot = mesh.store.load();
    let (kept, changed) = (cluster_name(3), cluster_name(7));
    let first = worker.get(&snapshot, &kept).unwrap();
    let other = worker.get(&snapshot, &changed).unwrap();
    assert!(Rc::ptr_eq(&first, &worker.get(&snapshot, &kept).unwrap()), "no new resolution without a publication");
    let ctx = PickContext { hash: None, attempt: 0, previous: &[], now: std::time::Instant::now() };
    assert!(first.pick(&ctx, outrider::proxy::original_dst::DestinationSources::default).is_some());

    mesh.push(ResourceType::ClusterLoadAssignment, vec![assignment(7, 81..84)], &[]);
    let snapshot = mesh.store.load();
    assert!(Rc::ptr_eq(&first, &worker.get(&snapshot, &kept).unwrap()), "an unchanged cluster is kept");
    let rebuilt = worker.get(&snapshot, &changed).unwrap();
    assert!(!Rc::ptr_eq(&other, &rebuilt), "the changed cluster is resolved anew");
    let picked = rebuilt.pick(&ctx, outrider::proxy::original_dst::DestinationSources::default).unwrap();
    assert!((81..84).contains(&picked.address().to_string().rsplit(':').next().unwrap().parse::<u32>().unwrap()));

    mesh.push(ResourceType::Cluster, Vec::new(), std::slice::from_ref(&kept));
    let snapshot = mesh.store.load();
    worker.forget_removed(&snapshot, Some(snapshot.changes.clusters.iter()));
    assert!(worker.get(&snapshot, &kept).is_none(), "a removed cluster is gone");
    assert_eq!(Rc::strong_count(&first), 1, "and the worker no longer holds it");
}

/// A watcher that skipped generations gets the union of their changes; one that is too far
/// behind (or follows a snapshot made by hand) compares everything.
#[tokio::test]
async fn a_follower_that_skipped_generations_gets_their_union() {
    let mut mesh = Mesh::new(50);
    let from = mesh.store.load().generation;
    for i in [4, 9, 4] {
        mesh.state.apply(ResourceType::ClusterLoadAssignment, "3", vec![assignment(i, 90..90 + i as u32)], &[], false);
        mesh.store.publish(mesh.state.snapshot());
    }
    let to = mesh.store.load().generation;
    let union = mesh.store.changes_since(from, to).unwrap();
    assert_eq!(union.endpoints, BTreeSet::from([cluster_name(4), cluster_name(9)]));

    let builder = mesh.keeper.builder();
    let (compared, rebuilt) = (builder.compared(), builder.rebuilds());
    mesh.keeper.follow(&mesh.store, &mesh.balancers, &mesh.shutdown);
    let builder = mesh.keeper.builder();
    assert_eq!((builder.compared() - compared, builder.rebuilds() - rebuilt), (2, 2));
    assert_eq!(mesh.balancers.get(&cluster_name(9)).unwrap().hosts().len(), 9);

    // A snapshot made by hand says nothing: the next follower compares every cluster.
    mesh.store.publish(outrider::store::Snapshot { generation: to + 1, ..(*mesh.store.load()).clone() });
    assert!(mesh.store.changes_since(to, to + 1).is_none());
    let compared = mesh.keeper.builder().compared();
    mesh.keeper.follow(&mesh.store, &mesh.balancers, &mesh.shutdown);
    assert_eq!(mesh.keeper.builder().compared() - compared, 50);
}

/// A backend answering its `name`, with how many of its connections have closed.
async fn named_backend(name: &'static str) -> (u32, tokio::sync::watch::Receiver<usize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port() as u32;
    let (closed, closes) = tokio::sync::watch::channel(0usize);
    let closed = Arc::new(closed);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let closed = closed.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_| async move {
                    Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                        bytes::Bytes::from_static(name.as_bytes()),
                    )))
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                closed.send_modify(|n| *n += 1);
            });
        }
    });
    (port, closes)
}

fn eds_cluster(name: &str) -> String {
    CLUSTER.replace("name: backend", &format!("name: {name}"))
}

const ROUTES: &str = r#"
name: local_route
virtual_hosts:
- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/a" }
    route: { cluster: a }
  - match: { prefix: "/b" }
    route: { cluster: b }
  - match: { prefix: "/c" }
    route: { cluster: c }
"#;

/// One request on a kept-alive connection to the proxy: (status, body).
async fn get(
    sender: &mut hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
    path: &str,
) -> (u16, String) {
    use http_body_util::BodyExt;
    let request = http::Request::get(path).header("host", "example.com").body(Default::default()).unwrap();
    let response = tokio::time::timeout(WAIT, sender.send_request(request)).await.unwrap().unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn one_clusters_eds_change_moves_its_traffic_only_and_a_cds_removal_drains() {
    let (a1, _) = named_backend("a1").await;
    let (a2, _) = named_backend("a2").await;
    let (b, _) = named_backend("b").await;
    let (c, mut c_closed) = named_backend("c").await;
    let proxy_port = crate::common::lab::free_port();
    let control_plane = ControlPlane::start().await;
    control_plane.set(ResourceType::Cluster, &[&eds_cluster("a"), &eds_cluster("b"), &eds_cluster("c")]);
    control_plane.set(
        ResourceType::ClusterLoadAssignment,
        &[&endpoints("a", &[a1]), &endpoints("b", &[b]), &endpoints("c", &[c])],
    );
    control_plane
        .set(ResourceType::Listener, &[&LISTENER.replace("port_value: 0 ", &format!("port_value: {proxy_port} "))]);
    control_plane.set(ResourceType::RouteConfiguration, &[ROUTES]);
    let outrider = outrider::app::start_with(bootstrap(control_plane.port, "DELTA_GRPC"), 1).await.unwrap();
    wait_snapshot(&outrider.store, |s| s.ready && s.endpoints.len() >= 3).await;
    outrider.listeners_ready().await;

    let stream = tokio::net::TcpStream::connect(("127.0.0.1", proxy_port)).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    for (path, body) in [("/a", "a1"), ("/b", "b"), ("/c", "c")] {
        assert_eq!(get(&mut sender, path).await, (200, body.to_owned()));
    }
    let b_balancer = outrider.balancers.get("b").unwrap();

    // One cluster's endpoints move: its traffic follows, the others keep their balancers.
    control_plane.set(
        ResourceType::ClusterLoadAssignment,
        &[&endpoints("a", &[a2]), &endpoints("b", &[b]), &endpoints("c", &[c])],
    );
    let moved = wait_snapshot(&outrider.store, |s| {
        s.endpoints
            .get("a")
            .is_some_and(|e| e.resource.endpoints().any(|e| e.address.to_string().ends_with(&format!(":{a2}"))))
    })
    .await;
    assert!(outrider.balancers.wait_built_from(moved.generation, WAIT).await);
    assert_eq!(get(&mut sender, "/a").await, (200, "a2".to_owned()));
    assert_eq!(get(&mut sender, "/b").await, (200, "b".to_owned()));
    assert!(Arc::ptr_eq(&b_balancer, &outrider.balancers.get("b").unwrap()), "b's balancer is not rebuilt");

    // The cluster leaves: the connection pooled to its endpoint is drained (closed).
    control_plane.set(ResourceType::Cluster, &[&eds_cluster("a"), &eds_cluster("b")]);
    wait_snapshot(&outrider.store, |s| !s.clusters.contains_key("c")).await;
    tokio::time::timeout(WAIT, c_closed.wait_for(|closed| *closed >= 1)).await.unwrap().unwrap();
    assert_eq!(get(&mut sender, "/c").await.0, 503);
    assert_eq!(get(&mut sender, "/b").await, (200, "b".to_owned()));
    outrider.stop();
    drop(control_plane);
}
