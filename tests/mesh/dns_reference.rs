//! Outrider's DNS proxy against Istio's own (`istio.io/istio/pkg/dns/client`, the code
//! pilot-agent runs, built from Istio's module as `istio-dns-reference`): both load the same
//! name table, for a pod in the same namespace with the same `resolv.conf`, and every
//! question about the mesh's names gets the same answer from both: response code,
//! authority, and records (in any order: both shuffle addresses).

use crate::common;

use std::net::SocketAddr;
use std::process::Stdio;

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use outrider::agent::dns::{Dns, DnsSettings, NAME_TABLE_TYPE};
use outrider::pb::google::protobuf::Any;
use outrider::pb::istio_nds::NameTable;
use outrider::pb::istio_nds::name_table::NameInfo;
use tokio::io::AsyncBufReadExt;

/// (host, addresses, registry, short name, namespace).
const TABLE: &[(&str, &[&str], &str, &str, &str)] = &[
    ("productpage.default.svc.cluster.local", &["10.96.0.11"], "Kubernetes", "productpage", "default"),
    ("reviews.other.svc.cluster.local", &["10.96.0.12", "fd00::12"], "Kubernetes", "reviews", "other"),
    (
        "headless.default.svc.cluster.local",
        &["10.0.0.21", "10.0.0.22", "10.0.0.23"],
        "Kubernetes",
        "headless",
        "default",
    ),
    ("remote.default.svc.other.local", &["10.96.1.1"], "Kubernetes", "remote", "default"),
    ("db.mesh.example", &["240.240.1.1"], "External", "", ""),
    ("v6only.mesh.example", &["fd00::30"], "External", "", ""),
    ("*.wild.mesh.example", &["240.240.1.2"], "External", "", ""),
    ("broken.mesh.example", &["not-an-address"], "External", "", ""),
];

/// The questions: each name of the table in every form a client asks it.
fn questions(search: Option<&str>) -> Vec<String> {
    let mut names = vec![
        "productpage.default.svc.cluster.local.",
        "productpage.default.",
        "productpage.default.svc.",
        "productpage.",
        "reviews.other.svc.cluster.local.",
        "reviews.other.",
        "reviews.other.svc.",
        "headless.",
        "remote.default.svc.other.local.",
        "db.mesh.example.",
        "DB.Mesh.Example.",
        "v6only.mesh.example.",
        "api.wild.mesh.example.",
        "deep.api.wild.mesh.example.",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect::<Vec<_>>();
    if let Some(search) = search {
        // What a resolver asks first for a name with fewer dots than `ndots`.
        let search = search.trim_end_matches('.');
        names.extend(["db.mesh.example", "productpage", "api.wild.mesh.example"].map(|n| format!("{n}.{search}.")));
    }
    names
}

fn name_table() -> NameTable {
    let table = TABLE
        .iter()
        .map(|(host, ips, registry, shortname, namespace)| {
            let info = NameInfo {
                ips: ips.iter().map(|s| (*s).to_owned()).collect(),
                registry: (*registry).to_owned(),
                shortname: (*shortname).to_owned(),
                namespace: (*namespace).to_owned(),
                ..NameInfo::default()
            };
            ((*host).to_owned(), info)
        })
        .collect();
    NameTable { table }
}

/// The table as protobuf JSON, for Istio's side.
fn table_json() -> String {
    let table: serde_json::Map<String, serde_json::Value> = TABLE
        .iter()
        .map(|(host, ips, registry, shortname, namespace)| {
            let info =
                serde_json::json!({ "ips": ips, "registry": registry, "shortname": shortname, "namespace": namespace });
            ((*host).to_owned(), info)
        })
        .collect();
    serde_json::json!({ "table": table }).to_string()
}

/// A question over UDP: (response code, authoritative, records sorted).
async fn ask(server: SocketAddr, name: &str, qtype: RecordType) -> (u16, bool, Vec<String>) {
    let mut message = Message::new(42, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(&message.to_vec().unwrap(), server).await.unwrap();
    let mut buffer = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(common::WAIT, socket.recv_from(&mut buffer)).await.unwrap().unwrap();
    let answer = Message::from_vec(&buffer[..n]).unwrap();
    let mut records: Vec<String> =
        answer.answers.iter().map(|r| format!("{} {} {} {}", r.name, r.ttl, r.record_type(), r.data)).collect();
    records.sort();
    (u16::from(answer.metadata.response_code), answer.metadata.authoritative, records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_match_istios_dns_proxy_for_the_same_name_table() {
    let Some(reference) = common::peers::peer("istio-dns-reference", "answers_match_istios_dns_proxy") else { return };
    let dir = tempfile::tempdir().unwrap();
    let table_file = dir.path().join("table.json");
    std::fs::write(&table_file, table_json()).unwrap();
    // Istio's reads /etc/resolv.conf; Outrider's is given the same.
    let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let search = resolv.lines().find_map(|l| l.strip_prefix("search ")).and_then(|s| s.split_whitespace().next());

    let istio_address = SocketAddr::from(([127, 0, 0, 1], common::lab::free_port()));
    let mut istio = tokio::process::Command::new(reference)
        .args([&istio_address.to_string(), "default", "default.svc.cluster.local"])
        .arg(&table_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Istio's log shares its standard output; "ready" comes after the sockets are bound.
    let mut lines = tokio::io::BufReader::new(istio.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(common::WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line == "ready" {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(ready, Ok(true), "Istio's DNS proxy did not start");

    let settings = DnsSettings {
        address: "127.0.0.1:0".parse().unwrap(),
        localhost: false,
        namespace: "default".into(),
        domain: "default.svc.cluster.local".into(),
        resolv_conf: "/etc/resolv.conf".into(),
    };
    let (_stop, stopped) = outrider::core::shutdown::channel();
    let outrider = Dns::start(&settings, stopped).unwrap();
    let table = Any { type_url: NAME_TABLE_TYPE.to_owned(), value: prost::Message::encode_to_vec(&name_table()) };
    outrider.apply(&table).unwrap();

    let mut answered = 0;
    for name in questions(search) {
        for qtype in [RecordType::A, RecordType::AAAA] {
            let theirs = ask(istio_address, &name, qtype).await;
            let ours = ask(outrider.address, &name, qtype).await;
            assert_eq!(ours, theirs, "{qtype} {name}");
            answered += usize::from(!theirs.2.is_empty());
        }
    }
    // Not a comparison of failures: most questions have records.
    assert!(answered >= 12, "{answered} questions answered with records");
    let (code, authoritative, records) = ask(outrider.address, "productpage.", RecordType::A).await;
    assert_eq!((code, authoritative, records), (0, true, vec!["productpage. 30 A 10.96.0.11".to_owned()]));
}
