//! What the proxy tells a balancer about a request when it asks for a host: the argument of
//! every policy's `pick`, apart from the dispatch over policies (`policy`) so that the
//! policies and the dispatch both use it without using each other.

use std::sync::Arc;
use std::time::Instant;

use super::host::Host;

/// What the proxy knows about a request when it asks for a host.
#[derive(Debug, Clone, Copy)]
pub struct PickContext<'a> {
    /// The request hash from the route's hash policies (ring hash, maglev); `None` picks
    /// at random, as Envoy does.
    pub hash: Option<u64>,
    /// Envoy's host-selection attempt: 0, then 1, 2, … when a picked host is rejected by
    /// the retry host predicate. A plain router retry picks with 0 again.
    pub attempt: u32,
    /// Hosts already tried by this request (the `previous_hosts` retry predicate): avoided
    /// when another usable host exists.
    pub previous: &'a [Arc<Host>],
    pub now: Instant,
}

impl PickContext<'_> {
    /// A first attempt with no hash at `now`.
    pub fn at(now: Instant) -> PickContext<'static> {
        PickContext { hash: None, attempt: 0, previous: &[], now }
    }
}
