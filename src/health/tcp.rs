//! The TCP health checker: connect, write `send` if any, then pass once every `receive`
//! block has been read, in order (connect-only checks pass on connect and close). A
//! refused or closed connection is a network failure, as in Envoy.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::http::network;
use super::transport::{BoxIo, Target};
use crate::config::cluster::TcpHealthCheck;
use crate::lb::health_check::ProbeResult;
use crate::tls::ClientAlpn;

/// Reading stops here: an answer this long that still lacks the blocks does not pass.
const MAX_BUFFERED: usize = 64 * 1024;

/// One host's TCP checker.
pub(super) struct TcpProber {
    config: TcpHealthCheck,
    target: Target,
    reuse: bool,
    connection: Option<BoxIo>,
}

impl TcpProber {
    pub fn new(config: TcpHealthCheck, target: Target, reuse: bool) -> Self {
        Self { config, target, reuse, connection: None }
    }

    pub fn close(&mut self) {
        self.connection = None;
    }

    pub async fn probe(&mut self) -> ProbeResult {
        let mut io = match self.connection.take() {
            Some(io) => io,
            None => match self.target.connect(ClientAlpn::Tcp).await {
                Ok(io) => io,
                Err(error) => return network(&self.target, error),
            },
        };
        if let Some(send) = &self.config.send
            && let Err(error) = io.write_all(send).await
        {
            return network(&self.target, error);
        }
        if self.config.receive.is_empty() {
            // Only the connect was tested; Envoy closes such connections.
            return ProbeResult::Passed { degraded: false };
        }
        let mut buffer = Vec::new();
        let mut chunk = [0u8; 4096];
        while !matches_in_order(&buffer, &self.config.receive) {
            match io.read(&mut chunk).await {
                Ok(0) => return network(&self.target, "connection closed before the expected bytes"),
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                Err(error) => return network(&self.target, error),
            }
            if buffer.len() > MAX_BUFFERED {
                return network(&self.target, "the expected bytes did not come");
            }
        }
        if self.reuse {
            self.connection = Some(io);
        }
        ProbeResult::Passed { degraded: false }
    }
}

/// Envoy's `PayloadMatcher::match`: each block occurs in `data`, after the previous one.
fn matches_in_order(data: &[u8], blocks: &[Vec<u8>]) -> bool {
    let mut from = 0;
    for block in blocks {
        let found = data.get(from..).and_then(|rest| {
            if block.is_empty() { Some(0) } else { rest.windows(block.len()).position(|w| w == block.as_slice()) }
        });
        match found {
            Some(at) => from += at + block.len(),
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_must_appear_in_order() {
        let blocks = vec![b"PONG".to_vec(), b"OK".to_vec()];
        assert!(matches_in_order(b"+PONG\r\n+OK\r\n", &blocks));
        assert!(!matches_in_order(b"+OK\r\n+PONG\r\n", &blocks));
        assert!(!matches_in_order(b"+PON", &blocks));
        assert!(matches_in_order(b"anything", &[]));
    }
}
