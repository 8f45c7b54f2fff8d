//! Stats of one connection's life, with Envoy's names: `*_cx_total` and `*_cx_active` when
//! it opens, `*_cx_destroy` and `*_cx_length_ms` when it ends, and the TLS handshake
//! counters (`ssl.*`) of a listener or cluster.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::metrics::{Counter, Gauge, GaugeGuard, Histogram};
use super::stats::{Scope, Stats};

/// An open connection; dropping it counts the connection's end.
#[derive(Debug)]
pub struct ConnectionLife {
    _active: GaugeGuard,
    destroy: Counter,
    length_ms: Histogram,
    opened: Instant,
}

impl ConnectionLife {
    /// Counts a connection in `total` and `active` until the value drops.
    pub fn open(total: &Counter, active: &Gauge, destroy: &Counter, length_ms: &Histogram) -> Self {
        total.inc();
        Self { _active: active.track(), destroy: destroy.clone(), length_ms: length_ms.clone(), opened: Instant::now() }
    }
}

impl Drop for ConnectionLife {
    fn drop(&mut self) {
        self.destroy.inc();
        self.length_ms.record(self.opened.elapsed());
    }
}

/// `<scope>.ssl.*`: handshakes done and refused, by Envoy's reasons. Registered on the
/// first handshake, so a listener or cluster without TLS has none (as in Envoy, where only
/// a TLS transport socket creates them).
#[derive(Clone, Default)]
pub struct SslStats(Option<Arc<LazySsl>>);

struct LazySsl {
    stats: Arc<Stats>,
    scope: Scope,
    cells: OnceLock<SslCells>,
}

/// The counters, once registered.
#[derive(Debug, Clone, Default)]
pub struct SslCells {
    pub handshake: Counter,
    /// Handshakes that completed without a peer certificate.
    pub no_certificate: Counter,
    pub connection_error: Counter,
    pub fail_verify_error: Counter,
    pub fail_verify_san: Counter,
    pub fail_verify_no_cert: Counter,
}

impl std::fmt::Debug for SslStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SslStats").field(&self.0.as_ref().and_then(|l| l.cells.get())).finish()
    }
}

impl SslStats {
    pub fn register(stats: &Arc<Stats>, scope: &Scope) -> Self {
        Self(Some(Arc::new(LazySsl { stats: stats.clone(), scope: scope.child("ssl"), cells: OnceLock::new() })))
    }

    /// The counters, registered on first use; `None` for stats registered nowhere.
    pub fn cells(&self) -> Option<&SslCells> {
        let lazy = self.0.as_ref()?;
        Some(lazy.cells.get_or_init(|| {
            let counter = |name: &str| lazy.stats.counter(lazy.scope.name(name));
            SslCells {
                handshake: counter("handshake"),
                no_certificate: counter("no_certificate"),
                connection_error: counter("connection_error"),
                fail_verify_error: counter("fail_verify_error"),
                fail_verify_san: counter("fail_verify_san"),
                fail_verify_no_cert: counter("fail_verify_no_cert"),
            }
        }))
    }

    /// Counts a completed handshake; `peer_certificate` is whether the peer presented one.
    pub fn handshake(&self, peer_certificate: bool) {
        if let Some(cells) = self.cells() {
            cells.handshake.inc();
            if !peer_certificate {
                cells.no_certificate.inc();
            }
        }
    }

    /// Counts a refusal by its Envoy stat name (`ssl.fail_verify_san`); reasons Envoy has
    /// no counter for (a timeout, a missing configuration) are connection errors.
    pub fn refused(&self, stat_name: &str) {
        let Some(cells) = self.cells() else { return };
        match stat_name.strip_prefix("ssl.").unwrap_or(stat_name) {
            "fail_verify_error" => cells.fail_verify_error.inc(),
            "fail_verify_san" => cells.fail_verify_san.inc(),
            "fail_verify_no_cert" => cells.fail_verify_no_cert.inc(),
            _ => cells.connection_error.inc(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_counts_its_end_and_refusals_their_reason() {
        let (total, active, destroy, length) =
            (Counter::default(), Gauge::default(), Counter::default(), Histogram::default());
        let life = ConnectionLife::open(&total, &active, &destroy, &length);
        assert_eq!((total.get(), active.get(), destroy.get()), (1, 1, 0));
        drop(life);
        assert_eq!((active.get(), destroy.get(), length.snapshot().count), (0, 1, 1));
        let stats = Arc::new(Stats::default());
        let ssl = SslStats::register(&stats, &Scope::envoy().child("listener").tagged("envoy_listener_address", "a"));
        assert!(stats.samples().is_empty(), "nothing before the first handshake");
        ssl.refused("ssl.fail_verify_san");
        ssl.refused("ssl.handshake_timeout");
        ssl.handshake(false);
        let cells = ssl.cells().unwrap();
        assert_eq!((cells.fail_verify_san.get(), cells.connection_error.get(), cells.no_certificate.get()), (1, 1, 1));
        assert!(stats.samples().iter().any(|(n, _)| n.flat == "listener.a.ssl.handshake"));
    }
}
