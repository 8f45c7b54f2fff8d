//! The ADS server through a real tonic client over loopback TCP. "No reply" is asserted by
//! making a change afterwards and checking that the next message is its push.

use std::collections::HashMap;
use std::time::Duration;

use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use super::*;
use crate::config::ResourceType;
use crate::pb::envoy::config::cluster::v3::Cluster;
use crate::pb::envoy::config::core::v3::Node;
use crate::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use crate::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use crate::pb::google::rpc::Status;

const T: Duration = Duration::from_secs(5);
const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

fn cluster(name: &str, timeout_s: i64) -> Any {
    let connect_timeout = Some(crate::pb::google::protobuf::Duration { seconds: timeout_s, nanos: 0 });
    let c = Cluster { name: name.into(), connect_timeout, ..Default::default() };
    Any { type_url: ResourceType::Cluster.type_url().into(), value: c.encode_to_vec() }
}

fn cla(name: &str, priority_marker: u32) -> Any {
    let c = ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![crate::pb::envoy::config::endpoint::v3::LocalityLbEndpoints {
            priority: priority_marker,
            ..Default::default()
        }],
        ..Default::default()
    };
    Any { type_url: EDS.into(), value: c.encode_to_vec() }
}

fn node() -> Option<Node> {
    Some(Node { id: "test-node".into(), ..Default::default() })
}

fn sotw(type_url: &str, names: &[&str], version: &str, nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        node: node(),
        type_url: type_url.into(),
        resource_names: names.iter().map(|n| n.to_string()).collect(),
        version_info: version.into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

fn delta(type_url: &str, subscribe: &[&str], unsubscribe: &[&str], nonce: &str) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        node: node(),
        type_url: type_url.into(),
        resource_names_subscribe: subscribe.iter().map(|n| n.to_string()).collect(),
        resource_names_unsubscribe: unsubscribe.iter().map(|n| n.to_string()).collect(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

/// One client stream: requests in, responses out.
struct Client<Req, Resp> {
    tx: mpsc::Sender<Req>,
    rx: Streaming<Resp>,
}

impl<Req, Resp> Client<Req, Resp> {
    async fn send(&self, request: Req) {
        self.tx.send(request).await.map_err(|_| "closed").unwrap();
    }

    async fn recv(&mut self) -> Resp {
        tokio::time::timeout(T, self.rx.message()).await.expect("response in time").unwrap().expect("a response")
    }
}

async fn start() -> (XdsServer, Serving, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = XdsServer::new();
    let serving = server.serve(listener);
    (server, serving, url)
}

async fn open_sotw(url: &str, first: DiscoveryRequest) -> Client<DiscoveryRequest, DiscoveryResponse> {
    let mut client = AggregatedDiscoveryServiceClient::connect(url.to_owned()).await.unwrap();
    let (tx, rx) = mpsc::channel(8);
    tx.send(first).await.unwrap();
    let rx = client.stream_aggregated_resources(ReceiverStream::new(rx)).await.unwrap().into_inner();
    Client { tx, rx }
}

async fn open_delta(url: &str, first: DeltaDiscoveryRequest) -> Client<DeltaDiscoveryRequest, DeltaDiscoveryResponse> {
    let mut client = AggregatedDiscoveryServiceClient::connect(url.to_owned()).await.unwrap();
    let (tx, rx) = mpsc::channel(8);
    tx.send(first).await.unwrap();
    let rx = client.delta_aggregated_resources(ReceiverStream::new(rx)).await.unwrap().into_inner();
    Client { tx, rx }
}

fn names(response: &DiscoveryResponse) -> Vec<String> {
    let decode = |a: &Any| match a.type_url.as_str() {
        EDS => ClusterLoadAssignment::decode(a.value.as_slice()).unwrap().cluster_name,
        _ => Cluster::decode(a.value.as_slice()).unwrap().name,
    };
    response.resources.iter().map(decode).collect()
}

fn delta_names(response: &DeltaDiscoveryResponse) -> Vec<&str> {
    response.resources.iter().map(|r| r.name.as_str()).collect()
}

#[tokio::test]
async fn sotw_initial_response_ack_and_pushes() {
    let (server, _serving, url) = start().await;
    server.set_resources(CDS, vec![("a".into(), cluster("a", 1)), ("b".into(), cluster("b", 1))]);
    let mut client = open_sotw(&url, sotw(CDS, &[], "", "")).await;

    let first = client.recv().await;
    assert_eq!(names(&first), ["a", "b"]);
    assert_eq!(first.version_info, server.version().to_string());
    client.send(sotw(CDS, &[], &first.version_info, &first.nonce)).await;
    server.wait_until(T, |j| j.is_acked(CDS)).await.unwrap();
    let ack = server.wait_for_request(T, |r| r.response_nonce == first.nonce).await.unwrap();
    assert_eq!((ack.node_id.as_str(), ack.protocol, ack.error_detail), ("test-node", Protocol::Sotw, None));

    // The ACK got no reply: the next message is the push of the change.
    server.upsert(CDS, "c", cluster("c", 1));
    let push = client.recv().await;
    assert_eq!(names(&push), ["a", "b", "c"]);
    assert_ne!(push.nonce, first.nonce);
    assert_ne!(push.version_info, first.version_info);

    // Removal is absence from the full set.
    server.remove(CDS, "a");
    assert_eq!(names(&client.recv().await), ["b", "c"]);
    // Setting the same content again changes nothing and pushes nothing.
    let version = server.version();
    server.set_resources(CDS, vec![("b".into(), cluster("b", 1)), ("c".into(), cluster("c", 1))]);
    assert_eq!(server.version(), version);
    server.upsert(CDS, "b", cluster("b", 2));
    assert_eq!(names(&client.recv().await), ["b", "c"]);
}

#[tokio::test]
async fn sotw_by_name_nack_and_stale_nonce() {
    let (server, _serving, url) = start().await;
    server.set_resources(EDS, vec![("x".into(), cla("x", 0)), ("y".into(), cla("y", 0))]);
    let mut client = open_sotw(&url, sotw(EDS, &["x"], "", "")).await;
    let first = client.recv().await;
    assert_eq!(names(&first), ["x"]);

    // NACK: no reply; a change to an unsubscribed resource: no push.
    let mut nack = sotw(EDS, &["x"], "", &first.nonce);
    nack.error_detail = Some(Status { code: 3, message: "bad endpoints".into(), details: vec![] });
    client.send(nack).await;
    server.upsert(EDS, "y", cla("y", 1));
    server.upsert(EDS, "x", cla("x", 1));
    let push = client.recv().await;
    assert_eq!(names(&push), ["x"]);
    let journal = server.journal();
    let nacks = journal.nacks(EDS);
    assert_eq!(nacks.len(), 1);
    assert_eq!(nacks[0].error_detail.as_ref().unwrap().message, "bad endpoints");

    // A request with the old nonce is stale and ignored; with the current one, answered.
    client.send(sotw(EDS, &["x", "y"], "", &first.nonce)).await;
    client.send(sotw(EDS, &["x", "y"], &push.version_info, &push.nonce)).await;
    let both = client.recv().await;
    assert_eq!(names(&both), ["x", "y"]);
    let stale = server.wait_for_request(T, |r| r.resource_names.len() == 2).await.unwrap();
    assert_eq!(stale.response_nonce, first.nonce);
}

#[tokio::test]
async fn delta_initial_versions_changes_and_removal() {
    let (server, _serving, url) = start().await;
    server.set_resources(CDS, vec![("a".into(), cluster("a", 1)), ("b".into(), cluster("b", 1))]);
    server.upsert(CDS, "c", cluster("c", 1));
    let version_a = server.resources(CDS)["a"].version.clone();
    let mut first = delta(CDS, &[], &[], "");
    first.initial_resource_versions = HashMap::from([("a".into(), version_a), ("gone".into(), "7".into())]);
    let mut client = open_delta(&url, first).await;

    let initial = client.recv().await;
    assert_eq!(delta_names(&initial), ["b", "c"]);
    assert_eq!(initial.removed_resources, ["gone"]);
    assert_eq!(initial.resources[0].version, server.resources(CDS)["b"].version);
    assert!(initial.resources[0].resource.is_some());
    client.send(delta(CDS, &[], &[], &initial.nonce)).await;
    server.wait_until(T, |j| j.is_acked(CDS)).await.unwrap();

    // Only what changed, then removals.
    server.upsert(CDS, "b", cluster("b", 2));
    let changed = client.recv().await;
    assert_eq!((delta_names(&changed), changed.removed_resources.len()), (vec!["b"], 0));
    server.remove(CDS, "a");
    let removed = client.recv().await;
    assert_eq!((delta_names(&removed).len(), removed.removed_resources), (0, vec!["a".to_owned()]));

    // EDS by name on the same stream; unsubscribe is honoured.
    server.set_resources(EDS, vec![("x".into(), cla("x", 0)), ("y".into(), cla("y", 0))]);
    client.send(delta(EDS, &["x"], &[], "")).await;
    let x = client.recv().await;
    assert_eq!((x.type_url.as_str(), delta_names(&x)), (EDS, vec!["x"]));
    client.send(delta(EDS, &["y"], &["x"], &x.nonce)).await;
    let y = client.recv().await;
    assert_eq!(delta_names(&y), ["y"]);
    server.upsert(EDS, "x", cla("x", 1));
    server.upsert(EDS, "y", cla("y", 1));
    assert_eq!(delta_names(&client.recv().await), ["y"]);
}

#[tokio::test]
async fn delta_empty_wildcard_is_answered_and_nack_recorded() {
    let (server, _serving, url) = start().await;
    let mut client = open_delta(&url, delta(CDS, &["*"], &[], "")).await;
    let empty = client.recv().await;
    assert!(empty.resources.is_empty() && empty.removed_resources.is_empty());
    let mut nack = delta(CDS, &[], &[], &empty.nonce);
    nack.error_detail = Some(Status { code: 3, message: "no".into(), details: vec![] });
    client.send(nack).await;
    server.wait_until(T, |j| j.nacks(CDS).len() == 1).await.unwrap();
    server.upsert(CDS, "a", cluster("a", 1));
    assert_eq!(delta_names(&client.recv().await), ["a"]);
}

#[tokio::test]
async fn shutdown_ends_streams_and_a_new_server_serves_again() {
    let (server, serving, url) = start().await;
    server.upsert(CDS, "a", cluster("a", 1));
    let mut client = open_sotw(&url, sotw(CDS, &[], "", "")).await;
    client.recv().await;
    tokio::time::timeout(T, serving.shutdown()).await.unwrap().unwrap();
    let ended = tokio::time::timeout(T, client.rx.message()).await.unwrap();
    assert_eq!(ended.unwrap_err().code(), tonic::Code::Unavailable);

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let _serving = server.serve(listener);
    let mut client = open_sotw(&url, sotw(CDS, &[], "", "")).await;
    assert_eq!(names(&client.recv().await), ["a"]);
}

#[tokio::test]
async fn wait_until_times_out() {
    let server = XdsServer::new();
    let waited = server.wait_until(Duration::from_millis(10), |j| !j.requests.is_empty()).await;
    assert_eq!(waited, Err(WaitTimeout(Duration::from_millis(10))));
}

#[tokio::test]
async fn serves_on_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("xds.sock");
    let server = XdsServer::new();
    server.upsert(CDS, "a", cluster("a", 1));
    let _serving = server.serve_unix(tokio::net::UnixListener::bind(&path).unwrap());
    let connector = tower::service_fn(move |_: http::Uri| {
        let path = path.clone();
        async move { Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
    });
    let channel =
        tonic::transport::Endpoint::from_static("http://xds").connect_with_connector(connector).await.unwrap();
    let (tx, rx) = mpsc::channel(8);
    tx.send(sotw(CDS, &[], "", "")).await.unwrap();
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    let rx = client.stream_aggregated_resources(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let mut client = Client { tx, rx };
    assert_eq!(names(&client.recv().await), ["a"]);
}
