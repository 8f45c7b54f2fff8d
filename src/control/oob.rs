//! Out-of-band ORCA streams: one `StreamCoreMetrics` stream per endpoint of every
//! client-side weighted round robin cluster that sets `enable_oob_load_report`, feeding
//! the endpoint's stats; started as endpoints appear, stopped as they leave.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::config::Address;
use crate::core::shutdown::{self, Signal, Trigger};
use crate::lb::load::LoadSink;
use crate::lb::{BalancerMap, Balancers, ClusterLb};
use crate::orca::OobClient;

/// What one stream reports for: an endpoint's address (or its reporting port), period and
/// `:authority`.
type Key = (SocketAddr, Duration, String);

/// The running streams, by the address they report for, and which clusters want each.
#[derive(Default)]
pub struct OobStreams {
    running: HashMap<Key, Running>,
    /// The streams each cluster wants.
    wanted: HashMap<String, BTreeSet<Key>>,
}

struct Running {
    _stop: Trigger,
    wanted_by: BTreeSet<String>,
}

impl OobStreams {
    /// Starts a stream for every endpoint that wants one and stops the rest. Visits every
    /// cluster: for when what changed is not known.
    pub fn sync(&mut self, balancers: &Balancers, shutdown: &Signal) {
        let all = balancers.all();
        let mut names: BTreeSet<String> = self.wanted.keys().cloned().collect();
        names.extend(all.keys().cloned());
        self.sync_clusters(&all, names.iter(), shutdown);
    }

    /// As [`sync`](Self::sync), for the named clusters only (those whose balancer changed).
    pub fn sync_clusters<'a>(
        &mut self,
        all: &BalancerMap,
        names: impl IntoIterator<Item = &'a String>,
        shutdown: &Signal,
    ) {
        for name in names {
            let wanted = all.get(name).map(|lb| wanted(lb)).unwrap_or_default();
            let previous = self.wanted.remove(name).unwrap_or_default();
            for key in previous.iter().filter(|k| !wanted.contains_key(*k)) {
                if let Some(running) = self.running.get_mut(key) {
                    running.wanted_by.remove(name);
                    if running.wanted_by.is_empty() {
                        self.running.remove(key); // dropping the trigger stops the stream
                    }
                }
            }
            for (key, sink) in &wanted {
                let running = self.running.entry(key.clone()).or_insert_with(|| {
                    let (trigger, stop) = shutdown::channel();
                    let (address, period, authority) = key.clone();
                    OobClient::new(address, period, sink.clone())
                        .with_authority(authority)
                        .spawn(merged(shutdown.clone(), stop));
                    Running { _stop: trigger, wanted_by: BTreeSet::new() }
                });
                running.wanted_by.insert(name.clone());
            }
            if !wanted.is_empty() {
                self.wanted.insert(name.clone(), wanted.into_keys().collect());
            }
        }
    }
}

/// The streams the endpoints of `lb` want, with the stats each feeds.
fn wanted(lb: &ClusterLb) -> HashMap<Key, Arc<dyn LoadSink>> {
    let mut wanted = HashMap::new();
    let Some(config) = lb.weight_updaters().first().map(|c| c.config().clone()) else { return wanted };
    if !config.enable_oob_load_report {
        return wanted;
    }
    for host in lb.hosts() {
        if let Address::Socket(address) = host.address() {
            let mut target = *address;
            if let Some(port) = config.oob_reporting.port {
                target.set_port(port);
            }
            // Envoy's `:authority`: the configured one, else the endpoint's hostname, else
            // the address dialled.
            let authority = [&config.oob_reporting.authority, &host.endpoint.hostname]
                .into_iter()
                .find(|a| !a.is_empty())
                .cloned()
                .unwrap_or_else(|| target.to_string());
            let sink: Arc<dyn LoadSink> = host.stats.clone();
            wanted.insert((target, config.oob_reporting_period, authority), sink);
        }
    }
    wanted
}

/// A signal triggered when either `a` or `b` is.
fn merged(a: Signal, b: Signal) -> Signal {
    let (trigger, signal) = shutdown::channel();
    tokio::spawn(async move {
        tokio::select! {
            _ = a.triggered() => {}
            _ = b.triggered() => {}
        }
        trigger.trigger();
    });
    signal
}
