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

/// The `Upgrade:` type an HTTP/1.1 request asks for (lower-cased), if it asks for one.
/// `h2c` is not an upgrade Outrider (or Envoy) performs: its headers are removed and the
/// request goes on as a plain one.
pub(super) fn requested(parts: &mut Parts) -> Option<String> {
    // CONNECT is not an upgrade here: it can only match a route with a `connect_matcher`,
    // which Outrider refuses, so the router answers 404, as Envoy does without one.
    if parts.version != http::Version::HTTP_11 || !super::super::headers::is_upgrade(&parts.headers) {
        return None;
    }
    let kind = parts.headers.get(UPGRADE)?.to_str().ok()?.split(',').next()?.trim().to_ascii_lowercase();
    if kind == "h2c" {
        parts.headers.remove(UPGRADE);
        parts.headers.remove(CONNECTION);
        parts.headers.remove("http2-settings");
        return None;
    }
    Some(kind)
}

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
