//! The TLS inspector listener filter (`envoy.filters.listener.tls_inspector`): before a
//! filter chain is chosen, read the first bytes of a connection and decide whether it is
//! TLS; if so, take the SNI and the ALPN protocols from its ClientHello.
//!
//! Envoy's semantics: bytes that are not a TLS handshake (or not a well-formed ClientHello)
//! make the connection `raw_buffer` at once; a ClientHello larger than 64 KiB, or a
//! connection that closes before its ClientHello is complete, closes the connection. The
//! caller bounds the wait (`listener_filters_timeout`). Nothing is lost: the bytes read
//! are replayed to whatever serves the connection (see [`PrefixedStream`]).
//!
//! [`PrefixedStream`]: super::PrefixedStream

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Envoy's default `max_client_hello_size`.
pub const MAX_CLIENT_HELLO: usize = 64 * 1024;

const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXTENSION_SERVER_NAME: u16 = 0;
const EXTENSION_ALPN: u16 = 16;

/// What the inspector found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inspection {
    /// Not TLS: the connection's transport protocol is `raw_buffer`.
    NotTls,
    /// A TLS ClientHello (transport protocol `tls`).
    Tls { server_name: Option<String>, application_protocols: Vec<String> },
}

/// The state of parsing the bytes received so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parse {
    Done(Inspection),
    NeedMore,
}

/// Reads from `stream` into `buffer` until the first bytes are known to be TLS or not.
/// `buffer` keeps every byte read, for replay.
pub async fn inspect<S: AsyncRead + Unpin>(stream: &mut S, buffer: &mut Vec<u8>) -> io::Result<Inspection> {
    loop {
        if let Parse::Done(inspection) = parse(buffer) {
            return Ok(inspection);
        }
        if buffer.len() >= MAX_CLIENT_HELLO {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "TLS ClientHello larger than 64 KiB"));
        }
        buffer.reserve(4096.min(MAX_CLIENT_HELLO - buffer.len()));
        if stream.read_buf(buffer).await? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed before its ClientHello ended"));
        }
    }
}

/// Inspects the first bytes of a connection.
pub fn parse(bytes: &[u8]) -> Parse {
    // The handshake message may span several records: gather their payloads.
    let mut handshake = Vec::new();
    let mut rest = bytes;
    loop {
        let Some(&content_type) = rest.first() else { return Parse::NeedMore };
        if content_type != CONTENT_HANDSHAKE {
            return Parse::Done(Inspection::NotTls);
        }
        if rest.len() >= 2 && rest[1] != 3 {
            return Parse::Done(Inspection::NotTls);
        }
        if rest.len() < 5 {
            return Parse::NeedMore;
        }
        let length = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        let Some(payload) = rest.get(5..5 + length) else {
            handshake.extend_from_slice(&rest[5..]);
            return first_message(&handshake);
        };
        handshake.extend_from_slice(payload);
        rest = &rest[5 + length..];
        match first_message(&handshake) {
            Parse::NeedMore if rest.is_empty() => return Parse::NeedMore,
            Parse::NeedMore => continue,
            done => return done,
        }
    }
}

/// The ClientHello at the start of the handshake bytes, once whole.
fn first_message(handshake: &[u8]) -> Parse {
    if let Some(&kind) = handshake.first()
        && kind != HANDSHAKE_CLIENT_HELLO
    {
        return Parse::Done(Inspection::NotTls);
    }
    if handshake.len() < 4 {
        return Parse::NeedMore;
    }
    let length = usize::from(handshake[1]) << 16 | usize::from(handshake[2]) << 8 | usize::from(handshake[3]);
    match handshake.get(4..4 + length) {
        None => Parse::NeedMore,
        Some(body) => Parse::Done(client_hello(body).unwrap_or(Inspection::NotTls)),
    }
}

/// SNI and ALPN of a ClientHello body; `None` when it is malformed.
fn client_hello(body: &[u8]) -> Option<Inspection> {
    let mut r = Reader(body);
    r.take(2 + 32)?; // legacy_version, random
    r.vec8()?; // legacy_session_id
    r.vec16()?; // cipher_suites
    r.vec8()?; // legacy_compression_methods
    let mut server_name = None;
    let mut application_protocols = Vec::new();
    if !r.0.is_empty() {
        let mut extensions = Reader(r.vec16()?);
        while !extensions.0.is_empty() {
            let kind = extensions.u16()?;
            let data = extensions.vec16()?;
            match kind {
                EXTENSION_SERVER_NAME => server_name = sni(data)?,
                EXTENSION_ALPN => application_protocols = alpn(data)?,
                _ => {}
            }
        }
    }
    Some(Inspection::Tls { server_name, application_protocols })
}

fn sni(data: &[u8]) -> Option<Option<String>> {
    let mut list = Reader(Reader(data).vec16()?);
    while !list.0.is_empty() {
        let name_type = list.take(1)?[0];
        let name = list.vec16()?;
        if name_type == 0 {
            return Some(Some(String::from_utf8(name.to_vec()).ok()?));
        }
    }
    Some(None)
}

fn alpn(data: &[u8]) -> Option<Vec<String>> {
    let mut list = Reader(Reader(data).vec16()?);
    let mut protocols = Vec::new();
    while !list.0.is_empty() {
        protocols.push(String::from_utf8_lossy(list.vec8()?).into_owned());
    }
    Some(protocols)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = tail;
        Some(head)
    }

    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }

    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.take(1)?[0]);
        self.take(n)
    }

    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u16()?);
        self.take(n)
    }
}

#[cfg(test)]
mod tests;
