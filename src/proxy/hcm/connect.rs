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
use tokio_util::either::Either;

use super::local_reply::{direct, local, reset_reply};
use super::observed::StreamInfo;
use super::{Exchange, ProxyBody};
use crate::config::route::RouteAction;
use crate::lb::PickContext;
use crate::proxy::byte_count::ByteCounted;
use crate::proxy::clusters::ThreadLocalCluster;
use crate::proxy::headers::LocalReply;
use crate::proxy::router::Forward;
use crate::proxy::stream_info::StreamState;
use crate::proxy::upstream::{UpstreamError, raw};
use crate::store::Snapshot;
use crate::telemetry::ConnectionLife;
use crate::tls::ClientAlpn;

/// Whether `action` terminates this request: an HTTP/2 `CONNECT` and a route whose
/// enabled `CONNECT` entry has a `connect_config`.
pub(super) fn terminates(parts: &Parts, action: &RouteAction) -> bool {
    parts.method == Method::CONNECT
        && parts.version == Version::HTTP_2
        && action.upgrade_configs.iter().any(|u| u.terminates_connect && u.enabled && u.upgrade_type == "connect")
}

/// Opens the raw connection for the `CONNECT` in `parts` and answers `200`; the tunnel
/// then runs on a task of its own, counted as the cluster's upstream connection.
pub(super) async fn terminate(
    mut parts: Parts,
    forward: &Forward<'_>,
    cluster: &ThreadLocalCluster,
    snapshot: &Snapshot,
    exchange: Exchange<'_>,
    stream: &mut StreamInfo,
) -> Response<ProxyBody> {
    let Exchange { downstream, manager, context, .. } = exchange;
    // Put there by hyper for every HTTP/2 CONNECT.
    let Some(upgrade) = parts.extensions.remove::<OnUpgrade>() else {
        return local(manager, stream, LocalReply::NoHealthyUpstream, false);
    };
    let now = Instant::now();
    let hash = crate::lb::hash_policy::request_hash(forward.hash_policy, &parts, Some(downstream.peer.ip()));
    let ctx = PickContext { hash, attempt: 0, previous: &[], now };
    let Some(host) = cluster.pick(&ctx, || exchange.destination_sources(&parts)) else {
        return local(manager, stream, LocalReply::NoHealthyUpstream, false);
    };
    let address = host.address().to_string();
    let downstream_state = [parts.extensions.get::<StreamState>(), exchange.connection.stream.as_deref()];
    let failure = |reason: String| UpstreamError::ConnectFailure { address: address.clone(), reason };
    let tls = match cluster.tls(&host.endpoint, snapshot, &context.clusters.tls) {
        Ok(tls) => tls,
        Err(error) => return reset_reply(manager, stream, Some(failure(error.to_string())), false, false),
    };
    let config = cluster.cluster();
    let stats = &host.cluster_stats;
    let in_flight = host.stats.start(now);
    let upstream =
        match tokio::time::timeout(config.connect_timeout, raw::connect_host(&host, config, downstream_state)).await {
            Ok(Ok(upstream)) => upstream,
            failed => {
                stats.upstream_cx_connect_fail.inc();
                host.stats.record(Instant::now(), now.elapsed(), false);
                let error = match failed {
                    Ok(Err(error)) => {
                        tracing::debug!(%address, %error, "CONNECT: no upstream connection");
                        failure(error.to_string())
                    }
                    _ => {
                        stats.upstream_cx_connect_timeout.inc();
                        UpstreamError::ConnectTimeout { address: address.clone(), timeout: config.connect_timeout }
                    }
                };
                return reset_reply(manager, stream, Some(error), false, false);
            }
        };
    let life = ConnectionLife::open(
        &stats.upstream_cx_total,
        &stats.upstream_cx_active,
        &stats.upstream_cx_destroy,
        &stats.upstream_cx_length_ms,
    );
    let upstream = match tls {
        None => Either::Left(upstream),
        Some(tls) => {
            let remaining = config.connect_timeout.saturating_sub(now.elapsed());
            let worker_tls = &context.clusters.tls.stats.upstream;
            let Some(upstream) = raw::handshake(upstream, &tls, ClientAlpn::Tcp, remaining, &host, worker_tls).await
            else {
                host.stats.record(Instant::now(), now.elapsed(), false);
                return reset_reply(manager, stream, Some(failure("TLS handshake refused".into())), false, false);
            };
            Either::Right(upstream)
        }
    };
    host.stats.record(Instant::now(), now.elapsed(), true);
    let counted = ByteCounted::new(upstream, &stats.upstream_cx_rx_bytes_total, &stats.upstream_cx_tx_bytes_total);
    tokio::task::spawn_local(async move {
        let (_in_flight, _life) = (in_flight, life);
        let Ok(upgraded) = upgrade.await else { return };
        let (mut client, mut upstream) = (TokioIo::new(upgraded), counted);
        if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
            tracing::debug!(%address, %error, "CONNECT tunnel ended");
        }
    });
    direct(manager, StatusCode::OK, Bytes::new())
}
