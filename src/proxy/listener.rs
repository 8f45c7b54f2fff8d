//! A worker's listeners: bound, updated and closed as LDS changes them. A changed listener
//! on the same addresses keeps its sockets, and new connections get the new configuration;
//! one whose addresses change gets new sockets (SO_REUSEPORT lets them bind beside the old
//! ones) before the old ones stop accepting. Connections already accepted keep the
//! configuration they were accepted with; those whose filter chain the update changed or
//! removed are drained (`chain_drain`).

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

mod socket;

use rand::Rng;
use tokio::io::DuplexStream;
use tokio::net::TcpListener;

use self::socket::SocketOptions;
use super::accept_backoff::AcceptBackoff;
use super::connection;
use super::context::WorkerContext;
use super::overload::OverloadState;
use super::stream_info::StreamState;
use crate::config::listener::TrafficDirection;
use crate::config::overload::{ActionKind, LoadShedKind};
use crate::config::{Address, Listener};
use crate::core::shutdown::{self, Trigger};
use crate::store::{Snapshot, Versioned};

struct Active {
    config: Arc<Versioned<Listener>>,
    addresses: Vec<SocketAddr>,
    /// What the sockets were made with: a change binds new ones.
    options: SocketOptions,
    /// The configuration the accept loops hand to each new connection.
    current: Current,
    _stop: Trigger,
    /// The accept loops, one per socket.
    accepting: Vec<tokio::task::JoinHandle<()>>,
}

/// A listener's configuration as its accept loops see it; shared within one worker.
type Current = Rc<RefCell<Arc<Versioned<Listener>>>>;

/// The listeners one worker serves.
#[derive(Default)]
pub struct ListenerManager {
    active: HashMap<String, Active>,
    /// Listeners that could not be bound: tried again with every snapshot.
    unbound: BTreeSet<String>,
    /// Set by an inbound drain: INBOUND listeners stay closed from then on.
    inbound_stopped: bool,
}

impl ListenerManager {
    /// Binds new and changed listeners and stops removed ones. Visits every listener: for
    /// when what changed is not known.
    pub fn sync(&mut self, snapshot: &Snapshot, context: &Rc<WorkerContext>) {
        self.active.retain(|name, _| snapshot.listeners.contains_key(name));
        context.chain_drains.borrow_mut().retain(|name| snapshot.listeners.contains_key(name));
        let names: Vec<String> = snapshot.listeners.keys().cloned().collect();
        self.unbound.clear();
        self.sync_listeners(snapshot, &names, context);
    }

    /// As [`sync`](Self::sync), for the named listeners (those the snapshot's change
    /// records name) and those not bound yet.
    pub fn sync_listeners(&mut self, snapshot: &Snapshot, names: &[String], context: &Rc<WorkerContext>) {
        let mut names: BTreeSet<&String> = names.iter().collect();
        let unbound = std::mem::take(&mut self.unbound);
        names.extend(unbound.iter());
        for name in names {
            context.chain_drains.borrow_mut().update(name, snapshot.listeners.get(name));
            let Some(listener) = snapshot.listeners.get(name) else {
                self.active.remove(name);
                continue;
            };
            if self.inbound_stopped && is_inbound(&listener.resource) {
                continue;
            }
            if self.active.get(name).is_some_and(|a| Arc::ptr_eq(&a.config, listener)) {
                continue;
            }
            let addresses = bind_addresses(&listener.resource);
            let options = SocketOptions::of(&listener.resource);
            if let Some(active) = self.active.get_mut(name)
                && !addresses.is_empty()
                && active.addresses == addresses
                && active.options == options
            {
                // Same addresses: the bound sockets stay and take the new configuration for
                // new connections, as Envoy passes a listener's socket to its replacement.
                // Binding anew and closing the old sockets would reset connections that
                // were in the old sockets' accept queues.
                active.config = listener.clone();
                *active.current.borrow_mut() = listener.clone();
                tracing::debug!(worker = context.id, listener = %name, "listener updated in place");
                continue;
            }
            if addresses.is_empty() {
                // Not bound (bind_to_port false, internal): reached through others.
                self.active.remove(name);
                continue;
            }
            // Every address or none, as Envoy: a listener is not served half bound.
            let bound: std::io::Result<Vec<TcpListener>> =
                addresses.iter().map(|a| socket::bind(*a, options)).collect();
            match bound {
                Ok(sockets) => {
                    let (stop, stopped) = shutdown::channel();
                    let current = Rc::new(RefCell::new(listener.clone()));
                    let accepting = sockets
                        .into_iter()
                        .map(|socket| {
                            let task = accept_loop(socket, current.clone(), context.clone(), stopped.clone());
                            tokio::task::spawn_local(task)
                        })
                        .collect();
                    // Replacing the entry drops the old trigger: the old sockets stop accepting.
                    let bound = addresses.clone();
                    let active =
                        Active { config: listener.clone(), addresses: bound, options, current, _stop: stop, accepting };
                    self.active.insert(name.clone(), active);
                    tracing::debug!(worker = context.id, listener = %name, ?addresses, "listening");
                }
                Err(e) => {
                    tracing::error!(worker = context.id, listener = %name, ?addresses, error = %e, "cannot bind listener");
                    self.unbound.insert(name.clone());
                }
            }
        }
    }

    /// Closes the sockets of the INBOUND listeners, now and for every later snapshot.
    pub async fn stop_inbound(&mut self) {
        self.inbound_stopped = true;
        let inbound: Vec<String> =
            self.active.iter().filter(|(_, a)| is_inbound(&a.config.resource)).map(|(n, _)| n.clone()).collect();
        for name in inbound {
            if let Some(active) = self.active.remove(&name) {
                for task in active.accepting {
                    task.abort();
                    let _ = task.await;
                }
            }
        }
    }

    /// Closes every listening socket, and returns once they are closed: from then on new
    /// connections are refused.
    pub async fn stop_all(&mut self) {
        for (_, active) in self.active.drain() {
            for task in active.accepting {
                task.abort();
                let _ = task.await; // the loop, and with it the socket, is dropped
            }
        }
    }
}

fn is_inbound(listener: &Listener) -> bool {
    listener.traffic_direction == TrafficDirection::Inbound
}

/// The IP addresses a listener binds: `address` and `additional_addresses` (Istio's
/// dual-stack listeners put `[::]` there), none when it does not bind.
fn bind_addresses(listener: &Listener) -> Vec<SocketAddr> {
    if !listener.bind_to_port || listener.internal {
        return Vec::new();
    }
    listener
        .addresses()
        .filter_map(|a| match a {
            Address::Socket(address) => Some(*address),
            _ => None,
        })
        .collect()
}

/// `reject_incoming_connections` or the `tcp_listener_accept` load-shed point close the
/// connection just accepted (with probability their scale when it is below 1).
fn rejected_by_overload(overload: &OverloadState, context: &WorkerContext) -> bool {
    let draw = || context.rng.borrow_mut().random::<f32>();
    overload.rejects_connection(draw) || overload.sheds(LoadShedKind::TcpListenerAccept, draw)
}

/// Serves `stream`, the server end of a connection this worker opened to the internal
/// listener `name` (see `internal_listener`); why not when there is no such listener or
/// none of its filter chains takes the connection. Counted as an accepted connection is:
/// listener stats and the worker's drain.
pub fn accept_internal(
    stream: DuplexStream,
    name: &str,
    carried: StreamState,
    context: &Rc<WorkerContext>,
) -> Result<(), String> {
    let snapshot = context.clusters.store.load();
    let Some(listener) = snapshot.listeners.get(name).filter(|l| l.resource.internal) else {
        return Err(format!("no internal listener named {name:?}"));
    };
    let Some(serve) = connection::serve_internal(stream, listener.clone(), carried, context.clone()) else {
        return Err(format!("no filter chain of internal listener {name:?} takes the connection"));
    };
    let counted = (context.telemetry.listener(&listener.resource).accepted(), context.connections.open());
    tokio::task::spawn_local(async move {
        serve.await;
        drop(counted);
    });
    Ok(())
}

async fn accept_loop(socket: TcpListener, current: Current, context: Rc<WorkerContext>, stopped: shutdown::Signal) {
    // Listener stats are per address, which an update in place keeps.
    let stats = context.telemetry.listener(&current.borrow().resource);
    let exhausted = context.telemetry.accept_backoffs(&current.borrow().resource);
    let mut backoff = AcceptBackoff::default();
    let overload = context.overload.clone();
    let pausable = overload.config().actions.iter().any(|a| a.kind == ActionKind::StopAcceptingConnections);
    loop {
        // `stop_accepting_connections`: the socket is not polled, new connections wait in
        // the kernel's backlog, as Envoy disables its listeners.
        let paused = pausable && !current.borrow().resource.bypass_overload_manager;
        if paused && overload.accept_paused() {
            tokio::select! {
                _ = overload.accepting() => continue,
                _ = stopped.clone().triggered() => return,
            }
        }
        let accepted = tokio::select! {
            accepted = socket.accept() => accepted,
            _ = overload.accept_pausing(), if paused => continue,
            _ = stopped.clone().triggered() => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff.on_success();
                let listener = current.borrow().clone();
                let Some(global) = overload.open_connection(listener.resource.ignore_global_conn_limit) else {
                    // Closed at once, as Envoy closes a connection over the global limit.
                    stats.downstream_global_cx_overflow.inc();
                    continue;
                };
                if !listener.resource.bypass_overload_manager && rejected_by_overload(&overload, &context) {
                    stats.downstream_cx_overload_reject.inc();
                    continue;
                }
                // Counted until the connection ends: listener stats, the worker's drain and
                // the global connection limit.
                let counted = (stats.accepted(), context.connections.open(), global);
                let serve = connection::serve(stream, peer, listener, context.clone());
                tokio::task::spawn_local(async move {
                    serve.await;
                    drop(counted);
                });
            }
            Err(e) => match backoff.on_error(&e) {
                Some(delay) => {
                    exhausted.inc();
                    let name = current.borrow().resource.name.clone();
                    if backoff.first_of_run() {
                        tracing::warn!(listener = %name, error = %e, "accept failed; backing off until resources free up");
                    } else {
                        tracing::debug!(listener = %name, error = %e, ?delay, "accept failed; backing off");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = stopped.clone().triggered() => return,
                    }
                }
                None => tracing::warn!(listener = %current.borrow().resource.name, error = %e, "accept failed"),
            },
        }
    }
}
