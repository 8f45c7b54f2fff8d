//! A worker's listeners: bound, rebound and closed as LDS changes them. A changed listener
//! gets a new socket (SO_REUSEPORT lets it bind beside the old one) before the old one
//! stops accepting; connections already accepted finish on the old configuration.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use socket2::{Domain, Socket, Type};
use tokio::net::TcpListener;

use super::connection;
use super::worker::WorkerContext;
use crate::config::{Address, Listener};
use crate::core::shutdown::{self, Trigger};
use crate::store::{Snapshot, Versioned};

/// Listen backlog, as Envoy's default.
const BACKLOG: i32 = 1024;

struct Active {
    config: Arc<Versioned<Listener>>,
    _stop: Trigger,
}

/// The listeners one worker serves.
#[derive(Default)]
pub struct ListenerManager {
    active: HashMap<String, Active>,
}

impl ListenerManager {
    /// Binds new and changed listeners and stops removed ones.
    pub fn sync(&mut self, snapshot: &Snapshot, context: &Rc<WorkerContext>) {
        self.active.retain(|name, _| snapshot.listeners.contains_key(name));
        for (name, listener) in &snapshot.listeners {
            if self.active.get(name).is_some_and(|a| Arc::ptr_eq(&a.config, listener)) {
                continue;
            }
            let Some(address) = bind_address(&listener.resource) else {
                // Not bound (bind_to_port false, pipes, internal): reached through others.
                self.active.remove(name);
                continue;
            };
            match bind(address) {
                Ok(socket) => {
                    let (stop, stopped) = shutdown::channel();
                    tokio::task::spawn_local(accept_loop(socket, listener.clone(), context.clone(), stopped));
                    // Replacing the entry drops the old trigger: the old socket stops accepting.
                    self.active.insert(name.clone(), Active { config: listener.clone(), _stop: stop });
                    tracing::debug!(worker = context.id, listener = %name, %address, "listening");
                }
                Err(e) => {
                    tracing::error!(worker = context.id, listener = %name, %address, error = %e, "cannot bind listener")
                }
            }
        }
    }

    pub fn stop_all(&mut self) {
        self.active.clear();
    }
}

fn bind_address(listener: &Listener) -> Option<SocketAddr> {
    match &listener.address {
        Address::Socket(address) if listener.bind_to_port && !listener.internal => Some(*address),
        _ => None,
    }
}

/// A non-blocking listening socket with SO_REUSEADDR and SO_REUSEPORT.
fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(address), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(BACKLOG)?;
    TcpListener::from_std(socket.into())
}

async fn accept_loop(
    socket: TcpListener,
    listener: Arc<Versioned<Listener>>,
    context: Rc<WorkerContext>,
    stopped: shutdown::Signal,
) {
    let stats = context.telemetry.listener(&listener.resource);
    loop {
        let accepted = tokio::select! {
            accepted = socket.accept() => accepted,
            _ = stopped.clone().triggered() => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                // Counted until the connection ends: listener stats and the worker's drain.
                let counted = (stats.accepted(), context.connections.open());
                let serve = connection::serve(stream, peer, listener.clone(), context.clone());
                tokio::task::spawn_local(async move {
                    serve.await;
                    drop(counted);
                });
            }
            Err(e) => tracing::warn!(listener = %listener.resource.name, error = %e, "accept failed"),
        }
    }
}
