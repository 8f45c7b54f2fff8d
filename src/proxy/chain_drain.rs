//! Draining what an LDS update changes, as Envoy does. A connection is served by the filter
//! chain it was accepted with; when an update changes or removes that chain (or its whole
//! listener), the connection is drained: HTTP connections close once their in-flight
//! requests are answered (`connection: close` on HTTP/1.1, GOAWAY on HTTP/2), and every
//! connection still open when the drain time is over is closed. Otherwise a pooled
//! connection would keep the old chain's filters for as long as it lives — an authorization
//! policy tightened by istiod would not apply to callers that keep their connections.
//!
//! Chains an update leaves equal keep their connections (Envoy's filter-chain-only update),
//! so a push that touches one chain of `virtualInbound` disturbs no other.
//!
//! One registry per worker, told of every listener change before that worker serves the new
//! configuration.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::Listener;
use crate::config::listener::FilterChain;
use crate::core::shutdown::{self, Signal, Trigger};
use crate::store::Versioned;

/// The drain signal of every filter chain of every listener's current configuration.
#[derive(Default)]
pub struct ChainDrains {
    listeners: HashMap<String, ListenerDrains>,
}

struct ListenerDrains {
    config: Arc<Versioned<Listener>>,
    /// One per chain of `config` in `Listener::all_filter_chains` order (the default chain last).
    chains: Vec<(Trigger, Signal)>,
}

impl ChainDrains {
    /// Follows listener `name` to `listener` (`None`: removed). The signals of chains equal
    /// to one of the previous configuration carry over; the previous chains left over are
    /// triggered, which drains their connections.
    pub fn update(&mut self, name: &str, listener: Option<&Arc<Versioned<Listener>>>) {
        let Some(listener) = listener else {
            // Dropping the triggers triggers them.
            self.listeners.remove(name);
            return;
        };
        let mut previous = match self.listeners.remove(name) {
            Some(old) if Arc::ptr_eq(&old.config, listener) => {
                self.listeners.insert(name.to_owned(), old);
                return;
            }
            Some(old) => old.config.resource.all_filter_chains().zip(old.chains).map(|(c, s)| (c.clone(), s)).collect(),
            None => Vec::new(),
        };
        let chains = listener
            .resource
            .all_filter_chains()
            .map(|chain| match previous.iter().position(|(old, _)| old == chain) {
                Some(at) => previous.swap_remove(at).1,
                None => shutdown::channel(),
            })
            .collect();
        self.listeners.insert(name.to_owned(), ListenerDrains { config: listener.clone(), chains });
        // `previous` drops here: the chains the update changed or removed drain.
    }

    /// Forgets (and so drains) the listeners `keep` says are gone.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.listeners.retain(|name, _| keep(name));
    }

    /// The signal that drains a connection `listener` accepted on `chain`: that of the equal
    /// chain of the listener's current configuration; triggered already when the current
    /// configuration has no such chain (the connection's configuration was replaced while
    /// it was being accepted). `current` gives the store's configuration of the listener,
    /// which a connection may see before this worker was told of it.
    pub fn signal(
        &mut self,
        listener: &Arc<Versioned<Listener>>,
        chain: &FilterChain,
        current: impl FnOnce() -> Option<Arc<Versioned<Listener>>>,
    ) -> Signal {
        let name = &listener.resource.name;
        if let Some(signal) = self.find(listener, chain) {
            return signal;
        }
        if current().is_some_and(|current| Arc::ptr_eq(&current, listener)) {
            self.update(name, Some(listener));
            if let Some(signal) = self.find(listener, chain) {
                return signal;
            }
        }
        let (trigger, signal) = shutdown::channel();
        trigger.trigger();
        signal
    }

    /// The signal of `chain` in the registered configuration of `listener`'s name: found
    /// by address when the connection has that configuration (every connection but those
    /// accepted across an update), else by value.
    fn find(&self, listener: &Arc<Versioned<Listener>>, chain: &FilterChain) -> Option<Signal> {
        let drains = self.listeners.get(&listener.resource.name)?;
        let mut chains = drains.config.resource.all_filter_chains();
        let at = if Arc::ptr_eq(&drains.config, listener) {
            chains.position(|c| std::ptr::eq(c, chain))?
        } else {
            chains.position(|c| c == chain)?
        };
        drains.chains.get(at).map(|(_, signal)| signal.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `virtualInbound` with one TCP proxy chain per (cluster, destination port).
    fn listener(chains: &[(&str, u32)]) -> Arc<Versioned<Listener>> {
        let chains: String = chains
            .iter()
            .map(|(cluster, port)| {
                format!(
                    "\n    - filter_chain_match: {{ destination_port: {port} }}\n      filters:\n      - name: tcp\n        typed_config:\n          \"@type\": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy\n          stat_prefix: t\n          cluster: {cluster}"
                )
            })
            .collect();
        let yaml = format!(
            "static_resources:\n  listeners:\n  - name: virtualInbound\n    address: {{ socket_address: {{ address: 0.0.0.0, port_value: 15006 }} }}\n    filter_chains:{chains}\n"
        );
        let mut bootstrap = crate::config::bootstrap::Bootstrap::parse(&yaml).unwrap();
        Arc::new(Versioned {
            resource: bootstrap.static_listeners.remove(0),
            version: String::new(),
            last_updated: std::time::SystemTime::now(),
            raw: Default::default(),
        })
    }

    #[test]
    fn an_update_drains_the_chains_it_changes_or_removes_and_keeps_the_others() {
        let mut drains = ChainDrains::default();
        let first = listener(&[("a", 80), ("b", 81), ("c", 82)]);
        drains.update("virtualInbound", Some(&first));
        let signals: Vec<Signal> =
            first.resource.filter_chains.iter().map(|c| drains.signal(&first, c, || Some(first.clone()))).collect();
        assert!(signals.iter().all(|s| !s.is_triggered()));

        // `a` unchanged (moved), `b` changed, `c` removed.
        let second = listener(&[("b", 91), ("a", 80)]);
        drains.update("virtualInbound", Some(&second));
        assert!(!signals[0].is_triggered(), "an unchanged chain keeps its connections");
        assert!(signals[1].is_triggered(), "a changed chain drains");
        assert!(signals[2].is_triggered(), "a removed chain drains");
        // A connection of the old configuration whose chain lives on gets the live signal;
        // one whose chain is gone is drained from the start.
        assert!(!drains.signal(&first, &first.resource.filter_chains[0], || Some(second.clone())).is_triggered());
        assert!(drains.signal(&first, &first.resource.filter_chains[1], || Some(second.clone())).is_triggered());

        drains.update("virtualInbound", None);
        let kept = drains.signal(&second, &second.resource.filter_chains[1], || None);
        assert!(signals[0].is_triggered(), "a removed listener drains every chain");
        assert!(kept.is_triggered());
    }

    #[test]
    fn a_connection_that_sees_the_stores_configuration_first_is_not_drained() {
        let mut drains = ChainDrains::default();
        let first = listener(&[("a", 80)]);
        drains.update("virtualInbound", Some(&first));
        let newer = listener(&[("a", 81)]);
        let signal = drains.signal(&newer, &newer.resource.filter_chains[0], || Some(newer.clone()));
        assert!(!signal.is_triggered());
        drains.update("virtualInbound", Some(&newer));
        assert!(!signal.is_triggered(), "the worker's own update of the same configuration changes nothing");
    }
}
