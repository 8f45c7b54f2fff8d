//! Stats of one connection's life, with Envoy's names: `*_cx_total` and `*_cx_active` when
//! it opens, `*_cx_destroy` and `*_cx_length_ms` when it ends, and the TLS handshake
//! counters (`ssl.*`) of a listener or cluster.

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

/// `<scope>.ssl.*`: handshakes done and refused, by Envoy's reasons.
#[derive(Debug, Clone, Default)]
pub struct SslStats {
    pub handshake: Counter,
    /// Handshakes that completed without a peer certificate.
    pub no_certificate: Counter,
    pub connection_error: Counter,
    pub fail_verify_error: Counter,
    pub fail_verify_san: Counter,
    pub fail_verify_no_cert: Counter,
}

impl SslStats {
    pub fn register(stats: &Stats, scope: &Scope) -> Self {
        let ssl = scope.child("ssl");
        let counter = |name: &str| stats.counter(ssl.name(name));
        Self {
            handshake: counter("handshake"),
            no_certificate: counter("no_certificate"),
            connection_error: counter("connection_error"),
            fail_verify_error: counter("fail_verify_error"),
            fail_verify_san: counter("fail_verify_san"),
            fail_verify_no_cert: counter("fail_verify_no_cert"),
        }
    }

    /// Counts a refusal by its Envoy stat name (`ssl.fail_verify_san`); reasons Envoy has
    /// no counter for (a timeout, a missing configuration) are connection errors.
    pub fn refused(&self, stat_name: &str) {
        match stat_name.strip_prefix("ssl.").unwrap_or(stat_name) {
            "fail_verify_error" => self.fail_verify_error.inc(),
            "fail_verify_san" => self.fail_verify_san.inc(),
            "fail_verify_no_cert" => self.fail_verify_no_cert.inc(),
            _ => self.connection_error.inc(),
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
        let ssl = SslStats::default();
        ssl.refused("ssl.fail_verify_san");
        ssl.refused("ssl.handshake_timeout");
        assert_eq!((ssl.fail_verify_san.get(), ssl.connection_error.get()), (1, 1));
    }
}
