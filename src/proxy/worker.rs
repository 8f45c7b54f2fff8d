//! Workers: `--concurrency` threads, each a current-thread tokio runtime with its own
//! listener sockets (SO_REUSEPORT: the kernel spreads connections over workers), its own
//! upstream pools and its own balancer cursors. Nothing here is shared between workers
//! except the published snapshot, the published balancers and per-endpoint stats.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::watch;

use super::listener::ListenerManager;
use super::original_dst::ListenerIndex;
use super::transport::{HandshakeStats, WorkerTls};
use super::upstream::Upstreams;
use crate::core::shutdown::Signal;
use crate::lb::{Balancers, WorkerPickers};
use crate::store::Store;

/// What every task of one worker shares. Not `Send`: it never leaves its thread.
pub struct WorkerContext {
    pub id: usize,
    pub store: Arc<Store>,
    pub balancers: Arc<Balancers>,
    pub pickers: RefCell<WorkerPickers>,
    pub upstreams: Upstreams,
    pub rng: RefCell<SmallRng>,
    pub tls: WorkerTls,
    /// Listeners by address, for `use_original_dst` hand-offs.
    pub listener_index: RefCell<ListenerIndex>,
}

/// The running workers.
#[derive(Debug)]
pub struct Workers {
    threads: Vec<JoinHandle<()>>,
    synced: Arc<watch::Sender<Vec<u64>>>,
}

impl Workers {
    /// Starts `count` workers serving the store's listeners until `shutdown`.
    pub fn start(
        count: usize,
        store: Arc<Store>,
        balancers: Arc<Balancers>,
        tls: Arc<HandshakeStats>,
        shutdown: Signal,
    ) -> std::io::Result<Self> {
        let count = count.max(1);
        let synced = Arc::new(watch::Sender::new(vec![0; count]));
        let mut threads = Vec::with_capacity(count);
        for id in 0..count {
            let (store, balancers, tls, shutdown, synced) =
                (store.clone(), balancers.clone(), tls.clone(), shutdown.clone(), synced.clone());
            let thread = std::thread::Builder::new().name(format!("outrider-worker-{id}")).spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        tracing::error!(worker = id, error = %e, "cannot start worker runtime");
                        return;
                    }
                };
                let local = tokio::task::LocalSet::new();
                local.block_on(&runtime, run(id, store, balancers, tls, shutdown, synced));
            })?;
            threads.push(thread);
        }
        Ok(Self { threads, synced })
    }

    /// The snapshot generation each worker last applied to its listeners: once every entry
    /// reaches a generation, its listeners accept connections on every worker.
    pub fn synced(&self) -> watch::Receiver<Vec<u64>> {
        self.synced.subscribe()
    }

    /// Waits for every worker to stop (after shutdown was triggered).
    pub fn join(self) {
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

/// One worker: follows the store's listeners until shutdown.
async fn run(
    id: usize,
    store: Arc<Store>,
    balancers: Arc<Balancers>,
    tls: Arc<HandshakeStats>,
    shutdown: Signal,
    synced: Arc<watch::Sender<Vec<u64>>>,
) {
    let seed = 0x5eed_0000_u64 + id as u64;
    let context = Rc::new(WorkerContext {
        id,
        store: store.clone(),
        balancers,
        pickers: RefCell::new(WorkerPickers::new(seed)),
        upstreams: Upstreams::with_tls_stats(tls.clone()),
        rng: RefCell::new(SmallRng::seed_from_u64(seed ^ 0xa5a5)),
        tls: WorkerTls::new(tls),
        listener_index: RefCell::default(),
    });
    let mut listeners = ListenerManager::default();
    let mut changes = store.subscribe();
    loop {
        let snapshot = store.load();
        listeners.sync(&snapshot, &context);
        let drained = context.upstreams.drain_removed(&snapshot);
        if drained > 0 {
            tracing::debug!(worker = id, drained, "drained pooled connections of removed endpoints");
        }
        synced.send_modify(|generations| generations[id] = snapshot.generation);
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { break },
            _ = shutdown.clone().triggered() => break,
        }
    }
    listeners.stop_all();
    tracing::debug!(worker = id, "worker stopped");
}
