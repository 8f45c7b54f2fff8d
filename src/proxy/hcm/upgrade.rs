//! HTTP/1.1 protocol upgrades (WebSocket and any other `Upgrade:` type the connection
//! manager or the route allows): the request goes to the upstream on a connection of its
//! own; when the upstream answers `101 Switching Protocols`, the downstream connection
//! and that upstream connection are joined into a byte tunnel until either side closes.
//!
//! The downstream codec is run without hyper's own upgrade support (the connection
//! manager keeps the socket to answer a request-header timeout itself), so the tunnel is
//! made here: the request's handling leaves the upstream half in the connection's
//! [`UpgradeSlot`], and once hyper has written the `101` and handed the socket back, the
//! connection's task joins the two.

use std::cell::RefCell;

use bytes::Bytes;
use http::header::{CONNECTION, UPGRADE};
use http::request::Parts;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// Where a request that was upgraded leaves the upstream half of its tunnel.
pub(crate) type UpgradeSlot = RefCell<Option<OnUpgrade>>;

/// The `Upgrade:` type an HTTP/1.1 request asks for (lower-cased), if it asks for one,
/// to be checked against `upgrade_configs`. As Envoy, the whole value is the type (all
/// `Upgrade` lines, joined): `websocket, h2c` is a type nobody configures, so a list is
/// refused unless that very list is allowed, never taken by its first token. A value
/// that is not text is a type nobody configures either.
///
/// `h2c` alone is made a plain request here: Outrider, like Envoy, does not perform it
/// (its headers are removed). An upgrade on HTTP/1.0 is returned like any other, and the
/// caller refuses it wherever it is allowed: it never gets a tunnel. `HTTP2-Settings` is
/// removed from every request: it only means something to an h2c upgrade, which never
/// leaves the proxy.
pub(super) fn requested(parts: &mut Parts) -> Option<String> {
    parts.headers.remove(HTTP2_SETTINGS);
    if !super::super::headers::is_upgrade(&parts.headers) {
        return None;
    }
    let mut kind = String::new();
    for value in parts.headers.get_all(UPGRADE) {
        let Ok(value) = value.to_str() else { return Some(String::new()) };
        if !kind.is_empty() {
            kind.push(',');
        }
        kind.push_str(value.trim());
    }
    kind.make_ascii_lowercase();
    if kind == "h2c" {
        parts.headers.remove(UPGRADE);
        parts.headers.remove(CONNECTION);
        return None;
    }
    Some(kind)
}

/// `HTTP2-Settings` (RFC 9113 §3.2.1, kept by RFC 7540's h2c upgrade).
const HTTP2_SETTINGS: &str = "http2-settings";

/// Joins the downstream connection (with the bytes hyper had read past the request) and
/// the upstream's upgraded connection, copying both ways until either ends.
pub(super) async fn tunnel<D>(mut downstream: D, read_ahead: Bytes, upstream: OnUpgrade)
where
    D: AsyncRead + AsyncWrite + Unpin,
{
    let upstream = match upstream.await {
        Ok(upgraded) => upgraded,
        Err(error) => {
            tracing::debug!(%error, "upstream upgrade failed");
            return;
        }
    };
    let mut upstream = TokioIo::new(upstream);
    if !read_ahead.is_empty() && upstream.write_all(&read_ahead).await.is_err() {
        return;
    }
    if let Err(error) = tokio::io::copy_bidirectional(&mut downstream, &mut upstream).await {
        tracing::debug!(%error, "upgraded connection ended");
    }
    let _ = downstream.shutdown().await;
}
