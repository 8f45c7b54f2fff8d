//! The resolver's answers, over real sockets on loopback: from the table, relayed to a
//! resolver, and to bad input.

use std::net::Ipv4Addr;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

use super::*;
use crate::agent::dns::table::{LookupTable, NameInfo, PodDns};
use crate::core::shutdown;

fn query(name: &str, qtype: RecordType) -> Vec<u8> {
    let mut message = Message::new(0x1234, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    message.to_vec().unwrap()
}

fn table() -> LookupTable {
    let info = NameInfo { ips: vec!["240.240.0.1".into()], registry: "External".into(), ..NameInfo::default() };
    LookupTable::build([("db.example.com", &info)], &PodDns::new("ns1", "ns1.svc.cluster.local", Vec::new()))
}

/// A resolver on loopback that answers every A question with 192.0.2.7.
async fn resolver() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let address = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 4096];
        while let Ok((n, client)) = socket.recv_from(&mut buffer).await {
            let request = Message::from_vec(&buffer[..n]).unwrap();
            let mut reply = reply_to(&request);
            let name = request.queries[0].name.clone();
            reply.add_answer(DnsRecord::from_rdata(name, 60, RData::A(A(Ipv4Addr::new(192, 0, 2, 7)))));
            let _ = socket.send_to(&reply.to_vec().unwrap(), client).await;
        }
    });
    address
}

async fn ask(address: SocketAddr, query: &[u8]) -> Message {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(query, address).await.unwrap();
    let mut buffer = vec![0u8; 65_535];
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), socket.recv_from(&mut buffer)).await.unwrap().unwrap();
    Message::from_vec(&buffer[..n]).unwrap()
}

fn addresses(message: &Message) -> Vec<String> {
    message.answers.iter().map(|r| r.data.to_string()).collect()
}

#[tokio::test]
async fn mesh_names_from_the_table_the_rest_from_the_pods_resolver() {
    let (_stop, stopped) = shutdown::channel();
    let proxy = DnsProxy::new(vec![resolver().await]);
    let address = serve("127.0.0.1:0".parse().unwrap(), proxy.clone(), stopped).unwrap();

    // Before istiod's table: SERVFAIL, so the client asks again.
    let early = ask(address, &query("db.example.com.", RecordType::A)).await;
    assert_eq!(early.metadata.response_code, ResponseCode::ServFail);

    proxy.update(table());
    let local = ask(address, &query("db.example.com.", RecordType::A)).await;
    assert_eq!(
        (local.metadata.id, local.metadata.response_code, local.metadata.authoritative),
        (0x1234, ResponseCode::NoError, true)
    );
    assert_eq!(addresses(&local), ["240.240.0.1"]);
    // A known name without an IPv6 address: an empty answer, not NXDOMAIN.
    let empty = ask(address, &query("db.example.com.", RecordType::AAAA)).await;
    assert_eq!((empty.metadata.response_code, empty.answers.len()), (ResponseCode::NoError, 0));
    // Everything else is the pod's resolver's answer.
    let relayed = ask(address, &query("www.example.org.", RecordType::A)).await;
    assert_eq!((relayed.metadata.authoritative, addresses(&relayed)), (false, vec!["192.0.2.7".to_owned()]));
}

#[tokio::test]
async fn bad_input_gets_a_dns_error_and_the_resolver_keeps_serving() {
    let (_stop, stopped) = shutdown::channel();
    let proxy = DnsProxy::new(Vec::new());
    proxy.update(table());
    let address = serve("127.0.0.1:0".parse().unwrap(), proxy.clone(), stopped).unwrap();

    // A header and garbage after it: FORMERR with the query's id.
    let mut garbage = vec![0xab, 0xcd, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00];
    garbage.extend_from_slice(&[0xff; 7]);
    let refused = ask(address, &garbage).await;
    assert_eq!((refused.metadata.id, refused.metadata.response_code), (0xabcd, ResponseCode::FormErr));
    // No question: SERVFAIL (pilot-agent's answer).
    let mut empty = Message::new(7, MessageType::Query, OpCode::Query);
    empty.metadata.recursion_desired = true;
    assert_eq!(ask(address, &empty.to_vec().unwrap()).await.metadata.response_code, ResponseCode::ServFail);
    // A name outside the mesh and no resolver to relay to: SERVFAIL.
    let unknown = ask(address, &query("www.example.org.", RecordType::A)).await;
    assert_eq!(unknown.metadata.response_code, ResponseCode::ServFail);
    // Too short to have a header: no answer at all; the resolver still serves after it.
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(&[0x01], address).await.unwrap();
    assert_eq!(addresses(&ask(address, &query("db.example.com.", RecordType::A)).await), ["240.240.0.1"]);
}

#[tokio::test]
async fn tcp_carries_several_queries_on_one_connection() {
    let (_stop, stopped) = shutdown::channel();
    let proxy = DnsProxy::new(Vec::new());
    proxy.update(table());
    let address = serve("127.0.0.1:0".parse().unwrap(), proxy, stopped).unwrap();
    let mut stream = TcpStream::connect(address).await.unwrap();
    for _ in 0..2 {
        write_framed(&mut stream, &query("db.example.com.", RecordType::A)).await.unwrap();
        let answer = read_framed(&mut stream).await.unwrap().unwrap();
        assert_eq!(addresses(&Message::from_vec(&answer).unwrap()), ["240.240.0.1"]);
    }
}
