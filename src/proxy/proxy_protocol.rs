//! The PROXY protocol listener filter (`envoy.filters.listener.proxy_protocol`): a load
//! balancer in front of the proxy (an NLB before an ingress gateway, a waypoint's tunnel)
//! puts HAProxy's header before the connection's bytes, naming the client and the address
//! it connected to. As Envoy: the header's source becomes the connection's peer and its
//! destination the restored local address (what filter chains, RBAC and
//! `x-forwarded-for` then see); a `LOCAL` command, `UNKNOWN` or an unspecified family
//! leaves both as they were; any other family, a malformed header or a disallowed version
//! closes the connection. Without a header the connection is closed, unless the filter
//! allows connections without one.
//!
//! The bytes are read into the same buffer the inspectors read into; the header is taken
//! off it and the rest is the connection's first bytes. The header itself is parsed by the
//! `ppp` crate; how much to read is decided here from the two versions' framing.

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::config::listener::ProxyProtocolConfig;

/// Version 2's signature.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// Version 2's fixed part: the signature, version and command, family, and length.
const V2_FIXED: usize = 16;
/// Version 1's start.
const V1_START: &[u8; 6] = b"PROXY ";
/// The longest version 1 header, its CRLF included.
const V1_MAX: usize = 107;

/// What the header said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The client's address and the one it connected to.
    Proxied { source: SocketAddr, destination: SocketAddr },
    /// A header that keeps the connection's own addresses (`LOCAL`, `UNKNOWN`, unspecified).
    Local,
    /// No header, where the filter allows that.
    Absent,
}

/// Reads the header off the start of `stream` (into and then out of `read`, which keeps
/// whatever came after it). `Err` closes the connection.
pub async fn read_header<S: AsyncRead + Unpin>(
    stream: &mut S,
    read: &mut Vec<u8>,
    config: &ProxyProtocolConfig,
) -> Result<Header, String> {
    loop {
        match frame(read) {
            Framing::NeedMore => {}
            Framing::NotProxy if config.allow_without_header => return Ok(Header::Absent),
            Framing::NotProxy => return Err("the connection does not start with a PROXY protocol header".into()),
            Framing::V1(length) => {
                if config.v1_disallowed {
                    return Err("PROXY protocol version 1 is disallowed".into());
                }
                let header = v1(&read[..length])?;
                read.drain(..length);
                return Ok(header);
            }
            Framing::V2(length) => {
                if config.v2_disallowed {
                    return Err("PROXY protocol version 2 is disallowed".into());
                }
                let header = v2(&read[..length])?;
                read.drain(..length);
                return Ok(header);
            }
            Framing::Malformed(reason) => return Err(reason),
        }
        let mut chunk = [0u8; 256];
        let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the connection closed before its PROXY protocol header ended".into());
        }
        read.extend_from_slice(&chunk[..n]);
    }
}

/// How far the buffer's start is a header.
#[derive(Debug, PartialEq, Eq)]
enum Framing {
    NeedMore,
    NotProxy,
    /// A version 1 header of this many bytes (CRLF included).
    V1(usize),
    /// A version 2 header of this many bytes.
    V2(usize),
    Malformed(String),
}

fn frame(read: &[u8]) -> Framing {
    // The buffer so far agrees with `prefix` (all of it, or as much as has arrived).
    let starts = |prefix: &[u8]| prefix.starts_with(&read[..read.len().min(prefix.len())]);
    if read.is_empty() {
        return Framing::NeedMore;
    }
    if starts(V2_SIGNATURE) {
        if read.len() < V2_FIXED {
            return Framing::NeedMore;
        }
        let length = V2_FIXED + usize::from(u16::from_be_bytes([read[14], read[15]]));
        return if read.len() < length { Framing::NeedMore } else { Framing::V2(length) };
    }
    if starts(V1_START) {
        if read.len() < V1_START.len() {
            return Framing::NeedMore;
        }
        return match read.windows(2).take(V1_MAX - 1).position(|w| w == b"\r\n") {
            Some(end) => Framing::V1(end + 2),
            None if read.len() >= V1_MAX => {
                Framing::Malformed("PROXY protocol version 1 header longer than 107 bytes".into())
            }
            None => Framing::NeedMore,
        };
    }
    Framing::NotProxy
}

fn v1(bytes: &[u8]) -> Result<Header, String> {
    use ppp::v1::Addresses;
    let header = ppp::v1::Header::try_from(bytes).map_err(|e| format!("malformed PROXY protocol header: {e}"))?;
    Ok(match header.addresses {
        Addresses::Unknown => Header::Local,
        Addresses::Tcp4(a) => Header::Proxied {
            source: SocketAddr::from((a.source_address, a.source_port)),
            destination: SocketAddr::from((a.destination_address, a.destination_port)),
        },
        Addresses::Tcp6(a) => Header::Proxied {
            source: SocketAddr::from((a.source_address, a.source_port)),
            destination: SocketAddr::from((a.destination_address, a.destination_port)),
        },
    })
}

fn v2(bytes: &[u8]) -> Result<Header, String> {
    use ppp::v2::{Addresses, Command};
    let header = ppp::v2::Header::try_from(bytes).map_err(|e| format!("malformed PROXY protocol header: {e}"))?;
    if header.command == Command::Local {
        return Ok(Header::Local);
    }
    match header.addresses {
        Addresses::Unspecified => Ok(Header::Local),
        Addresses::IPv4(a) => Ok(Header::Proxied {
            source: SocketAddr::from((a.source_address, a.source_port)),
            destination: SocketAddr::from((a.destination_address, a.destination_port)),
        }),
        Addresses::IPv6(a) => Ok(Header::Proxied {
            source: SocketAddr::from((a.source_address, a.source_port)),
            destination: SocketAddr::from((a.destination_address, a.destination_port)),
        }),
        Addresses::Unix(_) => Err("PROXY protocol header with AF_UNIX addresses".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default: a header required, either version.
    const STRICT: ProxyProtocolConfig =
        ProxyProtocolConfig { allow_without_header: false, v1_disallowed: false, v2_disallowed: false };

    /// A stream that yields `bytes` at most `step` at a time, then ends.
    struct Pieces<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl AsyncRead for Pieces<'_> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let n = self.step.min(self.bytes.len()).min(buf.remaining());
            buf.put_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// Feeds `bytes` in pieces of `step` bytes; the header and what is left.
    fn read(bytes: &[u8], step: usize, config: ProxyProtocolConfig) -> (Result<Header, String>, Vec<u8>) {
        let mut stream = Pieces { bytes, step };
        let mut buffer = Vec::new();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let header = runtime.block_on(read_header(&mut stream, &mut buffer, &config));
        (header, buffer)
    }

    fn proxied(source: &str, destination: &str) -> Header {
        Header::Proxied { source: source.parse().unwrap(), destination: destination.parse().unwrap() }
    }

    fn v2_header(source: &str, destination: &str) -> Vec<u8> {
        let addresses = (source.parse::<SocketAddr>().unwrap(), destination.parse::<SocketAddr>().unwrap());
        ppp::v2::Builder::with_addresses(
            ppp::v2::Version::Two | ppp::v2::Command::Proxy,
            ppp::v2::Protocol::Stream,
            addresses,
        )
        .build()
        .unwrap()
    }

    #[test]
    fn both_versions_give_the_client_and_the_address_it_connected_to_in_any_pieces() {
        let v1 = b"PROXY TCP4 192.0.2.7 198.51.100.1 41000 443\r\nGET / HTTP/1.1\r\n".to_vec();
        for step in [1, 5, 200] {
            let (header, rest) = read(&v1, step, STRICT);
            assert_eq!(header, Ok(proxied("192.0.2.7:41000", "198.51.100.1:443")), "step {step}");
            assert!(b"GET / HTTP/1.1\r\n".starts_with(&rest), "step {step}: {rest:?}");
        }
        let mut v2 = v2_header("[2001:db8::7]:41000", "[2001:db8::1]:443");
        v2.extend_from_slice(b"hello");
        for step in [1, 7, 200] {
            let (header, rest) = read(&v2, step, STRICT);
            assert_eq!(header, Ok(proxied("[2001:db8::7]:41000", "[2001:db8::1]:443")), "step {step}");
            assert!(b"hello".starts_with(&rest), "step {step}");
        }
    }

    #[test]
    fn local_and_unknown_keep_the_connections_addresses() {
        assert_eq!(read(b"PROXY UNKNOWN\r\nx", 100, STRICT).0, Ok(Header::Local));
        let local = ppp::v2::Builder::with_addresses(
            ppp::v2::Version::Two | ppp::v2::Command::Local,
            ppp::v2::Protocol::Unspecified,
            ppp::v2::Addresses::Unspecified,
        )
        .build()
        .unwrap();
        assert_eq!(read(&local, 100, STRICT).0, Ok(Header::Local));
    }

    #[test]
    fn what_is_no_header_closes_the_connection_unless_allowed() {
        assert!(read(b"GET / HTTP/1.1\r\n\r\n", 100, STRICT).0.is_err());
        let allowed = ProxyProtocolConfig { allow_without_header: true, ..STRICT };
        let (header, rest_allowed) = read(b"GET / HTTP/1.1\r\n\r\n", 100, allowed);
        assert_eq!(header, Ok(Header::Absent));
        assert_eq!(rest_allowed, b"GET / HTTP/1.1\r\n\r\n");
        // Malformed, too long, cut short, a disallowed version.
        assert!(read(b"PROXY TCP4 not-an-address\r\n", 100, allowed).0.is_err());
        assert!(read(&[b"PROXY ".as_slice(), &[b'1'; 200]].concat(), 100, STRICT).0.is_err());
        assert!(read(b"PROXY TCP4 192.0.2.7", 100, STRICT).0.is_err());
        let no_v1 = ProxyProtocolConfig { v1_disallowed: true, ..STRICT };
        assert!(read(b"PROXY TCP4 192.0.2.7 198.51.100.1 1 2\r\n", 100, no_v1).0.is_err());
        let no_v2 = ProxyProtocolConfig { v2_disallowed: true, ..STRICT };
        assert!(read(&v2_header("192.0.2.7:1", "198.51.100.1:2"), 100, no_v2).0.is_err());
    }
}
