//! Out-of-band ORCA streams: one `StreamCoreMetrics` stream per endpoint of every
//! client-side weighted round robin cluster that sets `enable_oob_load_report`, feeding
//! the endpoint's stats; started as endpoints appear, stopped as they leave.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::config::Address;
use crate::core::shutdown::{self, Signal, Trigger};
use crate::lb::Balancers;
use crate::lb::load::LoadSink;
use crate::orca::OobClient;

/// The running streams, by the address they report for.
#[derive(Default)]
pub struct OobStreams {
    running: HashMap<(SocketAddr, Duration), Trigger>,
}

impl OobStreams {
    /// Starts a stream for every endpoint that wants one and stops the rest.
    pub fn sync(&mut self, balancers: &Balancers, shutdown: &Signal) {
        let mut wanted: HashMap<(SocketAddr, Duration), Arc<dyn LoadSink>> = HashMap::new();
        for lb in balancers.all().values() {
            let Some(config) = lb.weight_updaters().first().map(|c| c.config().clone()) else { continue };
            if !config.enable_oob_load_report {
                continue;
            }
            for host in lb.hosts() {
                if let Address::Socket(address) = host.address() {
                    let mut target = *address;
                    if let Some(port) = config.oob_reporting.port {
                        target.set_port(port);
                    }
                    let sink: Arc<dyn LoadSink> = host.stats.clone();
                    wanted.insert((target, config.oob_reporting_period), sink);
                }
            }
        }
        self.running.retain(|key, _| wanted.contains_key(key));
        for (key, sink) in wanted {
            if self.running.contains_key(&key) {
                continue;
            }
            let (trigger, stop) = shutdown::channel();
            let (address, period) = key;
            let both = merged(shutdown.clone(), stop);
            OobClient::new(address, period, sink).spawn(both);
            self.running.insert(key, trigger);
        }
    }
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
