//! `CONNECT` termination (a route's `CONNECT` upgrade entry with `connect_config`, Istio's
//! HBONE on 15008): the `CONNECT` ends at this proxy. After the HTTP filters ran on it
//! (RBAC, telemetry), the route's cluster gets a raw connection (TCP, or a pipe to an
//! internal listener such as Istio's `main_internal`), the client gets `200`, and what it
//! sends in its stream goes to that connection and back until either side closes.
//!
//! HTTP/2 only: hyper hands over an HTTP/2 `CONNECT` stream as a byte stream once it has
//! sent the `200`. An HTTP/1.1 `CONNECT` is refused with 403 (see `hcm::upgrade`), where
//! Envoy also terminates it; Istio sends HBONE over HTTP/2 only.

use std::time::Instant;

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Response, StatusCode, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::local_reply::{direct, local, reset_reply};
use super::observed::StreamInfo;
use super::{Exchange, ProxyBody};
use crate::config::route::RouteAction;
use crate::lb::PickContext;
use crate::proxy::clusters::ThreadLocalCluster;
use crate::proxy::headers::LocalReply;
use crate::proxy::upstream::{UpstreamError, raw};
use crate::store::Snapshot;
use crate::tls::ClientAlpn;

/// Whether `action` terminates this request: an HTTP/2 `CONNECT` and a route whose
/// enabled `CONNECT` entry has a `connect_config`.
pub(super) fn terminates(parts: &Parts, action: &RouteAction) -> bool {
    parts.method == Method::CONNECT
        && parts.version == Version::HTTP_2
        && action.upgrade_configs.iter().any(|u| u.terminates_connect && u.enabled && u.upgrade_type == "connect")
}

/// Opens the raw connection for the `CONNECT` in `parts` and answers `200`; the tunnel
/// then runs on a task of its own.
pub(super) async fn terminate(
    mut parts: Parts,
    cluster: &ThreadLocalCluster,
    snapshot: &Snapshot,
    exchange: Exchange<'_>,
    stream: &mut StreamInfo,
) -> Response<ProxyBody> {
    let Exchange { downstream, original_dst, manager, context, .. } = exchange;
    // Put there by hyper for every HTTP/2 CONNECT.
    let Some(upgrade) = parts.extensions.remove::<OnUpgrade>() else {
        return local(manager, stream, LocalReply::NoHealthyUpstream, false);
    };
    let now = Instant::now();
    let hash = crate::lb::hash_policy::request_hash(&[], &parts, Some(downstream.peer.ip()));
    let ctx = PickContext { hash, attempt: 0, previous: &[], now };
    let Some(host) = cluster.pick(&ctx, original_dst, Some(&parts.headers)) else {
        return local(manager, stream, LocalReply::NoHealthyUpstream, false);
    };
    let failure = |reason: String| UpstreamError::ConnectFailure { address: host.address().to_string(), reason };
    let tls = match cluster.tls(&host.endpoint, snapshot, &context.clusters.tls) {
        Ok(tls) => tls,
        Err(error) => return reset_reply(manager, stream, Some(failure(error.to_string())), false, false),
    };
    let config = cluster.cluster();
    let in_flight = host.stats.start(now);
    let connected = tokio::time::timeout(config.connect_timeout, raw::connect(host.address(), &host.endpoint, config));
    let upstream = match connected.await {
        Ok(Ok(upstream)) => upstream,
        Ok(Err(error)) => {
            host.stats.record(Instant::now(), now.elapsed(), false);
            return reset_reply(manager, stream, Some(failure(error.to_string())), false, false);
        }
        Err(_) => {
            host.stats.record(Instant::now(), now.elapsed(), false);
            let timeout =
                UpstreamError::ConnectTimeout { address: host.address().to_string(), timeout: config.connect_timeout };
            return reset_reply(manager, stream, Some(timeout), false, false);
        }
    };
    let upstream = match tls {
        None => tokio_util::either::Either::Left(upstream),
        Some(tls) => match crate::tls::connect(upstream, &tls, ClientAlpn::Tcp).await {
            Ok(upstream) => tokio_util::either::Either::Right(upstream),
            Err(refused) => {
                host.stats.record(Instant::now(), now.elapsed(), false);
                return reset_reply(manager, stream, Some(failure(refused.reason)), false, false);
            }
        },
    };
    host.stats.record(Instant::now(), now.elapsed(), true);
    let address = host.address().to_string();
    tokio::task::spawn_local(async move {
        let _in_flight = in_flight;
        let Ok(upgraded) = upgrade.await else { return };
        let (mut client, mut upstream) = (TokioIo::new(upgraded), upstream);
        if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
            tracing::debug!(%address, %error, "CONNECT tunnel ended");
        }
    });
    direct(manager, StatusCode::OK, Bytes::new())
}
