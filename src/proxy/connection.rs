//! One accepted connection: choose the filter chain, then hand the connection to its
//! terminal filter (HTTP connection manager or TCP proxy).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use tokio::net::TcpStream;

use super::filter_chain::{self, ConnectionInfo};
use super::worker::WorkerContext;
use super::{hcm, original_dst, tcp_proxy};
use crate::config::Listener;
use crate::config::listener::TerminalFilter;
use crate::store::Versioned;

pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<Versioned<Listener>>,
    context: Rc<WorkerContext>,
) {
    let _ = stream.set_nodelay(true);
    // Restores the original destination and hands off to the listener bound to it.
    let Some(original_dst::Accepted { listener, local, restored }) = original_dst::accept(&stream, listener, &context)
    else {
        return;
    };
    let info = ConnectionInfo {
        local,
        local_restored: restored,
        peer,
        server_name: None,
        transport_protocol: None,
        application_protocols: Vec::new(),
    };
    let Some(chain) = filter_chain::select(&listener.resource, &info) else {
        tracing::debug!(listener = %listener.resource.name, %peer, "no filter chain matches; closing");
        return;
    };
    if chain.tls.is_some() {
        tracing::warn!(listener = %listener.resource.name, chain = %chain.name, "downstream TLS is not served yet; closing");
        return;
    }
    match &chain.terminal {
        TerminalFilter::HttpConnectionManager(manager) => {
            hcm::serve(stream, info, Arc::new((**manager).clone()), context).await
        }
        TerminalFilter::TcpProxy(proxy) => tcp_proxy::serve(stream, info, proxy, &context).await,
    }
}
