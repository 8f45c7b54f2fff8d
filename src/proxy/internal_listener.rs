//! Internal listeners (`internal_listener` on a listener, `envoy_internal_address` on an
//! endpoint): a connection to one never leaves the process. The worker that opens it gets
//! one end of an in-memory pipe and serves the other end itself, with the named listener's
//! filter chains, as Envoy's per-worker internal listener registry does: nothing binds a
//! socket, nothing crosses threads, and the connection's two halves share a worker.
//!
//! The worker installs how it serves a connection ([`install`]); the upstream connector
//! asks for one with [`connect`]. The indirection keeps this module below both: the
//! connector does not know the listeners, and the listeners do not know the connector.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;

use tokio::io::DuplexStream;

use crate::proxy::stream_info::StreamState;

/// How much each direction of an internal connection buffers before its writer waits, by
/// default: Envoy's default `buffer_size_kb` of `envoy.bootstrap.internal_listener`, 1 MiB.
pub const DEFAULT_BUFFER_BYTES: usize = 1024 * 1024;

/// Serves the server end of a connection to the named listener, which starts with the
/// state carried across; why not when this worker has no internal listener of that name or
/// the listener does not take the connection.
type Serve = Rc<dyn Fn(DuplexStream, &str, StreamState) -> Result<(), String>>;

thread_local! {
    static SERVE: RefCell<Option<(Serve, usize)>> = const { RefCell::new(None) };
}

/// Makes this thread (a worker's) serve the connections it opens to internal listeners,
/// each direction buffering `buffer_bytes` (the bootstrap extension's `buffer_size_kb`).
pub fn install(buffer_bytes: usize, serve: impl Fn(DuplexStream, &str, StreamState) -> Result<(), String> + 'static) {
    SERVE.with_borrow_mut(|slot| *slot = Some((Rc::new(serve), buffer_bytes)));
}

/// A connection to the internal listener `name`, served by this thread's worker, carrying
/// `carried` (filter state and metadata) across.
pub fn connect(name: &str, carried: StreamState) -> io::Result<DuplexStream> {
    let Some((serve, buffer_bytes)) = SERVE.with_borrow(Clone::clone) else {
        return Err(io::Error::other("internal listeners are reached from a worker only"));
    };
    let (client, server) = tokio::io::duplex(buffer_bytes);
    match serve(server, name, carried) {
        Ok(()) => Ok(client),
        Err(reason) => Err(io::Error::new(io::ErrorKind::ConnectionRefused, reason)),
    }
}
