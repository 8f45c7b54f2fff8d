//! Sending mirrored requests (shadows), fire and forget: each goes to its cluster through
//! the balancer, the worker's pools and the cluster's circuit breakers, like a filter's
//! callout ([`Callouts::forward`]); its response is read and thrown away, and nothing of
//! it (failure, slowness, an absent cluster) reaches the request it copies.
//!
//! Bounded: a worker keeps at most [`MAX_IN_FLIGHT`] shadows in flight. Past that a shadow
//! is not sent and is counted (`retry_or_shadow_abandoned` of the route's cluster, the
//! counter Envoy uses for shadows it gives up), so a slow mirror cluster costs a fixed
//! amount of memory, never a growing one.

use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};

use super::clusters::WorkerClusters;
use super::filters::Callouts;
use super::router::Shadow;
use super::upstream::RequestBody;
use crate::telemetry::Counter;

/// Shadows one worker keeps in flight at most.
pub const MAX_IN_FLIGHT: usize = 256;

/// A worker's count of shadows in flight.
#[derive(Debug, Default)]
pub struct ShadowSlots {
    in_flight: Rc<Cell<usize>>,
}

/// A shadow's place among the in-flight ones, given back when dropped.
struct Slot(Rc<Cell<usize>>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

impl ShadowSlots {
    fn take(&self) -> Option<Slot> {
        let now = self.in_flight.get();
        if now >= MAX_IN_FLIGHT {
            return None;
        }
        self.in_flight.set(now + 1);
        Some(Slot(self.in_flight.clone()))
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.get()
    }
}

/// Starts `shadows` with `body` (the whole request body) through the worker's `clusters`,
/// each in one of its `slots`, and returns at once. `timeout` bounds each shadow, the
/// route's timeout as in Envoy (`None`: the slot bounds it). `abandoned` counts the
/// shadows not sent.
pub fn send(
    clusters: &Rc<WorkerClusters>,
    slots: &ShadowSlots,
    shadows: Vec<Shadow>,
    body: &Bytes,
    timeout: Option<Duration>,
    downstream_is_h2: bool,
    abandoned: Option<&Counter>,
) {
    for Shadow { cluster, head } in shadows {
        let Some(slot) = slots.take() else {
            tracing::debug!(cluster, in_flight = slots.in_flight(), "too many shadows in flight; not mirrored");
            if let Some(counter) = abandoned {
                counter.inc();
            }
            continue;
        };
        let request = Request::from_parts(head, full(body.clone()));
        let clusters = clusters.clone();
        tokio::task::spawn_local(async move {
            let _slot = slot;
            let exchange = async {
                let callouts = Callouts::new(&clusters);
                let response = callouts.forward(&cluster, request, downstream_is_h2).await?;
                // Read to the end (so the connection goes back to the pool), keep nothing.
                let mut body = response.into_body();
                while let Some(frame) = body.frame().await {
                    if frame.is_err() {
                        break;
                    }
                }
                Ok::<_, super::filters::CalloutError>(())
            };
            let outcome = match timeout {
                Some(limit) => tokio::time::timeout(limit, exchange).await.ok(),
                None => Some(exchange.await),
            };
            match outcome {
                Some(Ok(())) => {}
                Some(Err(error)) => tracing::debug!(cluster, %error, "shadow failed"),
                None => tracing::debug!(cluster, "shadow timed out"),
            }
        });
    }
}

fn full(body: Bytes) -> RequestBody {
    Full::new(body).map_err(|never| match never {}).boxed()
}

/// The address Envoy's async client appends to a shadow's `x-forwarded-for`: the node's
/// own IPv4 address (Envoy takes the first non-loopback interface address). Found once as
/// the source address of the default route (a UDP socket connected, nothing sent); the
/// loopback address when there is none, as Envoy falls back to it.
pub fn local_address() -> IpAddr {
    static LOCAL: OnceLock<IpAddr> = OnceLock::new();
    *LOCAL.get_or_init(|| {
        let found = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
            .and_then(|socket| {
                socket.connect((Ipv4Addr::new(192, 0, 2, 1), 9))?;
                socket.local_addr()
            })
            .map(|addr| addr.ip())
            .ok()
            .filter(|ip| !ip.is_unspecified() && !ip.is_loopback());
        found.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_and_given_back() {
        let slots = ShadowSlots::default();
        let taken: Vec<_> = (0..MAX_IN_FLIGHT).map_while(|_| slots.take()).collect();
        assert_eq!(taken.len(), MAX_IN_FLIGHT);
        assert!(slots.take().is_none(), "one past the bound");
        drop(taken);
        assert_eq!(slots.in_flight(), 0);
        assert!(slots.take().is_some());
    }
}
