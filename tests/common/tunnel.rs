//! The client side of a byte tunnel through a proxy (a TCP proxy's `tunneling_config`, a
//! terminated `CONNECT`), for tests that check what comes back through it.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::WAIT;

/// Writes `sent` on `stream`, closes its side once what came back ends with `sent` (or
/// the far end closed first), and reads until the far end closes too, so that no tunnel is
/// left for a proxy's stop to drain. Returns everything read.
pub async fn echo_round<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, sent: &[u8]) -> String {
    stream.write_all(sent).await.unwrap();
    let mut seen = Vec::new();
    let mut buffer = [0u8; 1024];
    let mut closed = false;
    loop {
        if seen.ends_with(sent) && !closed {
            stream.shutdown().await.unwrap();
            closed = true;
        }
        match tokio::time::timeout(WAIT, stream.read(&mut buffer)).await {
            Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&buffer[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}
