//! The HTTP/2 side of the pools: one multiplexed connection per endpoint, opened once
//! for concurrent first requests (a shared connect), retired after
//! `max_requests_per_connection` requests.

use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt, Shared};
use hyper::client::conn::http2;

use super::super::RequestBody;
use super::super::activity::Activity;
use super::super::connect::Target;
use super::super::error::UpstreamError;
use super::super::limits::{self, Breakers};
use super::ClusterPool;

/// An HTTP/2 connection; clones share it.
#[derive(Debug, Clone)]
pub(crate) struct Http2Conn {
    pub sender: http2::SendRequest<RequestBody>,
    pub activity: Arc<Activity>,
    pub transport: u64,
}

type Connecting = Shared<BoxFuture<'static, Result<Http2Conn, UpstreamError>>>;

pub(super) enum Http2Entry {
    Connecting(Connecting, u64),
    Ready { conn: Http2Conn, requests: u32 },
}

impl std::fmt::Debug for Http2Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connecting(..) => f.write_str("Connecting"),
            Self::Ready { requests, .. } => f.debug_struct("Ready").field("requests", requests).finish(),
        }
    }
}

impl ClusterPool {
    /// The endpoint's HTTP/2 connection, connecting (once, shared) when there is none or it
    /// closed; the request is pending while it waits for the connect. `max_requests`
    /// retires a connection from the pool after that many requests; its open streams
    /// finish on it.
    pub(crate) async fn http2(
        &self,
        target: &Target<'_>,
        max_requests: Option<u32>,
        breakers: Option<&Breakers<'_>>,
    ) -> Result<Http2Conn, UpstreamError> {
        let transport = target.transport_id();
        let mut pending = None;
        let connecting = loop {
            let (connecting, endpoint) = {
                let mut pools = self.lock();
                let endpoint = pools.endpoints.entry(target.address.clone()).or_default().clone();
                match pools.http2.get_mut(target.address) {
                    Some(Http2Entry::Ready { conn, requests })
                        if !conn.sender.is_closed() && conn.transport == transport =>
                    {
                        *requests += 1;
                        let conn = conn.clone();
                        if max_requests.is_some_and(|max| *requests >= max) {
                            pools.http2.remove(target.address);
                        }
                        return Ok(conn);
                    }
                    Some(Http2Entry::Connecting(connecting, of)) if *of == transport => {
                        (Some(connecting.clone()), endpoint)
                    }
                    _ => {
                        if pending.is_none() {
                            pending = Some(limits::pending(breakers)?);
                        }
                        match limits::connection(breakers, &endpoint) {
                            Some(permit) => {
                                let owned = target.dial();
                                let connecting = async move {
                                    let (sender, activity) = owned.http2(permit).await?;
                                    Ok(Http2Conn { sender, activity, transport })
                                }
                                .boxed()
                                .shared();
                                let entry = Http2Entry::Connecting(connecting.clone(), transport);
                                pools.http2.insert(target.address.clone(), entry);
                                (Some(connecting), endpoint)
                            }
                            None => (None, endpoint),
                        }
                    }
                }
            };
            match connecting {
                Some(connecting) => break connecting,
                // Only a retired connection still finishing its streams is open: wait for it.
                None => endpoint.released().await,
            }
        };
        if pending.is_none() {
            pending = Some(limits::pending(breakers)?);
        }
        let result = connecting.await;
        drop(pending);
        let mut pools = self.lock();
        let still_connecting = matches!(pools.http2.get(target.address), Some(Http2Entry::Connecting(..)));
        match &result {
            Ok(conn) => match pools.http2.get_mut(target.address) {
                Some(Http2Entry::Ready { conn: ready, requests }) if ready.activity_is(conn) => *requests += 1,
                _ if still_connecting => {
                    pools.http2.insert(target.address.clone(), Http2Entry::Ready { conn: conn.clone(), requests: 1 });
                }
                _ => {}
            },
            Err(_) if still_connecting => {
                pools.http2.remove(target.address);
            }
            Err(_) => {}
        }
        result
    }
}

impl Http2Conn {
    fn activity_is(&self, other: &Http2Conn) -> bool {
        Arc::ptr_eq(&self.activity, &other.activity)
    }
}
