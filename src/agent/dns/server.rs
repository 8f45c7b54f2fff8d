//! The DNS proxy pilot-agent runs on 15053 (UDP and TCP): names the mesh knows are answered
//! from istiod's name table ([`LookupTable`]), every other question is relayed as it is to
//! the pod's own resolvers (its `resolv.conf`), and their answer back. The wire format is
//! hickory's.
//!
//! Bad input never costs more than its own answer: a message that does not parse gets
//! FORMERR (or nothing, when not even its header is there), one without a question
//! SERVFAIL, as pilot-agent answers; each query is answered on its own task, at most
//! [`MAX_IN_FLIGHT`] at once, so a slow resolver or a flood holds no other query up.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME};
use hickory_proto::rr::{Name, RData, Record as DnsRecord, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;

use super::table::{LookupTable, QueryType, Record, TTL_SECONDS};
use crate::core::shutdown::Signal;

/// Queries answered at once; more wait (TCP) or are dropped (UDP, whose clients retry).
pub const MAX_IN_FLIGHT: usize = 1024;

/// How long a pod's resolver has to answer a relayed question (pilot-agent's 5 s).
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(5);

/// The smallest answer a UDP client takes without EDNS (RFC 1035).
const UDP_MINIMUM: usize = 512;

/// What the DNS proxy answers from: the name table (none until istiod's first one), and
/// the pod's resolvers.
#[derive(Debug)]
pub struct DnsProxy {
    table: ArcSwapOption<LookupTable>,
    upstreams: Vec<SocketAddr>,
    in_flight: Semaphore,
}

/// The transport a query came over: it bounds the answer's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

impl DnsProxy {
    pub fn new(upstreams: Vec<SocketAddr>) -> Arc<Self> {
        Arc::new(Self { table: ArcSwapOption::empty(), upstreams, in_flight: Semaphore::new(MAX_IN_FLIGHT) })
    }

    /// Replaces the name table (istiod sent a new one).
    pub fn update(&self, table: LookupTable) {
        tracing::debug!(names = table.len(), "DNS name table updated");
        self.table.store(Some(Arc::new(table)));
    }

    /// Whether a name table has arrived.
    pub fn is_ready(&self) -> bool {
        self.table.load().is_some()
    }

    /// The answer to one query message; `None` when nothing can be answered (not even a
    /// header to answer).
    pub async fn answer(&self, query: &[u8], transport: Transport) -> Option<Vec<u8>> {
        let request = match Message::from_vec(query) {
            Ok(request) => request,
            Err(_) => return format_error(query),
        };
        let Some(question) = request.queries.first() else {
            return encode(error_reply(&request, ResponseCode::ServFail));
        };
        let table = self.table.load_full();
        let Some(table) = table else {
            // Before istiod's first table: a failure, so the client retries (pilot-agent's
            // answer off port 53).
            return encode(error_reply(&request, ResponseCode::ServFail));
        };
        let name = question.name.to_ascii().to_ascii_lowercase();
        let qtype = match question.query_type {
            RecordType::A => QueryType::A,
            RecordType::AAAA => QueryType::Aaaa,
            _ => QueryType::Other,
        };
        match table.lookup(qtype, &name) {
            Some(records) => encode_limited(local_reply(&request, &records), limit(&request, transport)),
            None => Some(self.relay(query, &request, transport).await),
        }
    }

    /// The question relayed to the pod's resolvers, first to last until one answers; a
    /// SERVFAIL when none does.
    async fn relay(&self, query: &[u8], request: &Message, transport: Transport) -> Vec<u8> {
        for upstream in &self.upstreams {
            let answer = tokio::time::timeout(UPSTREAM_TIMEOUT, exchange(*upstream, query, transport)).await;
            match answer {
                Ok(Ok(answer)) => return answer,
                Ok(Err(error)) => tracing::debug!(%upstream, %error, "DNS resolver failed"),
                Err(_) => tracing::debug!(%upstream, "DNS resolver timed out"),
            }
        }
        encode(error_reply(request, ResponseCode::ServFail)).unwrap_or_default()
    }
}

/// One exchange with a resolver, over the transport the question came by.
async fn exchange(upstream: SocketAddr, query: &[u8], transport: Transport) -> std::io::Result<Vec<u8>> {
    match transport {
        Transport::Udp => {
            let bind: SocketAddr = if upstream.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
            let socket = UdpSocket::bind(bind).await?;
            socket.connect(upstream).await?;
            socket.send(query).await?;
            let mut buffer = vec![0u8; 65_535];
            let read = socket.recv(&mut buffer).await?;
            buffer.truncate(read);
            Ok(buffer)
        }
        Transport::Tcp => {
            let mut stream = TcpStream::connect(upstream).await?;
            write_framed(&mut stream, query).await?;
            read_framed(&mut stream).await?.ok_or_else(|| std::io::ErrorKind::UnexpectedEof.into())
        }
    }
}

/// The largest answer the client takes: 64 KiB over TCP; over UDP its EDNS payload size,
/// at least 512 bytes.
fn limit(request: &Message, transport: Transport) -> usize {
    match transport {
        Transport::Tcp => usize::from(u16::MAX),
        Transport::Udp => request.edns.as_ref().map_or(UDP_MINIMUM, |e| usize::from(e.max_payload())).max(UDP_MINIMUM),
    }
}

/// An answer from the table: authoritative, with the records found (none is still an
/// answer: NOERROR, never NXDOMAIN, as pilot-agent answers).
fn local_reply(request: &Message, records: &[Record]) -> Message {
    let mut reply = reply_to(request);
    reply.metadata.authoritative = true;
    for record in records {
        if let Some(record) = dns_record(record) {
            reply.add_answer(record);
        }
    }
    reply
}

fn dns_record(record: &Record) -> Option<DnsRecord> {
    Some(match record {
        Record::A { name, ip } => DnsRecord::from_rdata(Name::from_ascii(name).ok()?, TTL_SECONDS, RData::A(A(*ip))),
        Record::Aaaa { name, ip } => {
            DnsRecord::from_rdata(Name::from_ascii(name).ok()?, TTL_SECONDS, RData::AAAA(AAAA(*ip)))
        }
        Record::Cname { name, target } => DnsRecord::from_rdata(
            Name::from_ascii(name).ok()?,
            TTL_SECONDS,
            RData::CNAME(CNAME(Name::from_ascii(target).ok()?)),
        ),
    })
}

/// A response to `request`: its id, op code, question and recursion-desired flag.
fn reply_to(request: &Message) -> Message {
    let mut reply = Message::new(request.metadata.id, MessageType::Response, request.metadata.op_code);
    reply.metadata.recursion_desired = request.metadata.recursion_desired;
    reply.add_queries(request.queries.iter().cloned());
    reply
}

fn error_reply(request: &Message, code: ResponseCode) -> Message {
    let mut reply = reply_to(request);
    reply.metadata.response_code = code;
    reply
}

/// FORMERR for a message whose header (its first 12 bytes) is there but not the rest.
fn format_error(query: &[u8]) -> Option<Vec<u8>> {
    let id = u16::from_be_bytes([*query.first()?, *query.get(1)?]);
    if query.len() < 12 {
        return None;
    }
    encode(Message::error_msg(id, OpCode::Query, ResponseCode::FormErr))
}

fn encode(message: Message) -> Option<Vec<u8>> {
    message.to_vec().ok()
}

/// The message, or its truncated form (no records, TC set) when over `limit`.
fn encode_limited(message: Message, limit: usize) -> Option<Vec<u8>> {
    let bytes = message.to_vec().ok()?;
    if bytes.len() <= limit {
        return Some(bytes);
    }
    message.truncate().to_vec().ok()
}

/// Serves DNS over UDP and TCP on `address` until `stopped`; returns the address bound
/// (the same port for both). Binds at once; must run inside a Tokio runtime.
pub fn serve(address: SocketAddr, proxy: Arc<DnsProxy>, stopped: Signal) -> std::io::Result<SocketAddr> {
    let (udp, tcp) = bind_both(address)?;
    let bound = udp.local_addr()?;
    udp.set_nonblocking(true)?;
    tcp.set_nonblocking(true)?;
    let (udp, tcp) = (UdpSocket::from_std(udp)?, TcpListener::from_std(tcp)?);
    tokio::spawn(serve_udp(Arc::new(udp), proxy.clone(), stopped.clone()));
    tokio::spawn(serve_tcp(tcp, proxy, stopped));
    Ok(bound)
}

/// A UDP socket and a TCP listener on one port. With port 0 the system picks the UDP port,
/// which TCP may have in use: another is tried then, a few times.
fn bind_both(address: SocketAddr) -> std::io::Result<(std::net::UdpSocket, std::net::TcpListener)> {
    let attempts = if address.port() == 0 { 16 } else { 1 };
    let mut last = None;
    for _ in 0..attempts {
        let udp = std::net::UdpSocket::bind(address)?;
        match std::net::TcpListener::bind(udp.local_addr()?) {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => last = Some(error),
            Err(error) => return Err(error),
        }
    }
    Err(last.unwrap_or_else(|| std::io::ErrorKind::AddrInUse.into()))
}

async fn serve_udp(socket: Arc<UdpSocket>, proxy: Arc<DnsProxy>, stopped: Signal) {
    let mut buffer = vec![0u8; 65_535];
    loop {
        let received = tokio::select! {
            received = socket.recv_from(&mut buffer) => received,
            () = stopped.clone().triggered() => return,
        };
        let Ok((length, client)) = received else { continue };
        let Some(query) = buffer.get(..length).map(<[u8]>::to_vec) else { continue };
        // Full: this query is dropped, and its client asks again.
        let Ok(permit) = proxy.in_flight.try_acquire() else { continue };
        permit.forget();
        let (socket, proxy) = (socket.clone(), proxy.clone());
        tokio::spawn(async move {
            if let Some(answer) = proxy.answer(&query, Transport::Udp).await {
                let _ = socket.send_to(&answer, client).await;
            }
            proxy.in_flight.add_permits(1);
        });
    }
}

async fn serve_tcp(listener: TcpListener, proxy: Arc<DnsProxy>, stopped: Signal) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stopped.clone().triggered() => return,
        };
        let Ok((mut stream, _)) = accepted else { continue };
        let proxy = proxy.clone();
        let stopped = stopped.clone();
        tokio::spawn(async move {
            // A connection may carry many queries, answered in order; an idle one is closed.
            loop {
                let read = tokio::select! {
                    read = tokio::time::timeout(UPSTREAM_TIMEOUT, read_framed(&mut stream)) => read,
                    () = stopped.clone().triggered() => return,
                };
                let Ok(Ok(Some(query))) = read else { return };
                let Ok(_permit) = proxy.in_flight.acquire().await else { return };
                let Some(answer) = proxy.answer(&query, Transport::Tcp).await else { return };
                if write_framed(&mut stream, &answer).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// One length-prefixed message of DNS over TCP; `None` at a clean end of the stream.
async fn read_framed(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut length = [0u8; 2];
    match stream.read_exact(&mut length).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut message = vec![0u8; usize::from(u16::from_be_bytes(length))];
    stream.read_exact(&mut message).await?;
    Ok(Some(message))
}

async fn write_framed(stream: &mut TcpStream, message: &[u8]) -> std::io::Result<()> {
    let length = u16::try_from(message.len()).map_err(|_| std::io::Error::other("a DNS message over 64 KiB"))?;
    let mut framed = Vec::with_capacity(message.len() + 2);
    framed.extend_from_slice(&length.to_be_bytes());
    framed.extend_from_slice(message);
    stream.write_all(&framed).await
}

#[cfg(test)]
mod tests;
