//! Downstream stats with Envoy's names: per listener (`listener.<address>.…`, label
//! `envoy_listener_address`) and per HTTP connection manager (`http.<stat_prefix>.…`,
//! label `envoy_http_conn_manager_prefix`).

use std::sync::Arc;

use super::connection::{ConnectionLife, SslStats};
use super::metrics::{Counter, Gauge, GaugeGuard, Histogram};
use super::stats::{Scope, Stats};

/// `listener.<address>.*`; the address as Envoy spells it (`127.0.0.1_10000`).
#[derive(Debug, Clone, Default)]
pub struct ListenerStats {
    pub downstream_cx_total: Counter,
    pub downstream_cx_active: Gauge,
    pub downstream_cx_destroy: Counter,
    /// Milliseconds from accept to close.
    pub downstream_cx_length_ms: Histogram,
    /// `listener.<address>.ssl.*`, for TLS filter chains.
    pub ssl: SslStats,
    /// Connections closed on accept because the global connection limit was reached.
    pub downstream_global_cx_overflow: Counter,
    /// Connections closed on accept by the overload manager (`reject_incoming_connections`,
    /// the `tcp_listener_accept` load-shed point).
    pub downstream_cx_overload_reject: Counter,
    /// `server.total_connections`: one cell shared by every listener (same name, same cell).
    server_total_connections: Gauge,
}

/// An accepted connection, counted until it drops.
#[derive(Debug)]
pub struct Accepted {
    _life: ConnectionLife,
    _server: GaugeGuard,
}

impl ListenerStats {
    pub fn register(stats: &Arc<Stats>, address: &str) -> Self {
        let address = address.replace(':', "_");
        let scope = Scope::envoy().child("listener").tagged("envoy_listener_address", &address);
        Self {
            downstream_cx_total: stats.counter(scope.name("downstream_cx_total")),
            downstream_cx_active: stats.gauge(scope.name("downstream_cx_active")),
            downstream_cx_destroy: stats.counter(scope.name("downstream_cx_destroy")),
            downstream_cx_length_ms: stats.histogram(scope.name("downstream_cx_length_ms")),
            ssl: SslStats::register(stats, &scope),
            downstream_global_cx_overflow: stats.counter(scope.name("downstream_global_cx_overflow")),
            downstream_cx_overload_reject: stats.counter(scope.name("downstream_cx_overload_reject")),
            server_total_connections: stats.gauge(Scope::envoy().child("server").name("total_connections")),
        }
    }

    /// Counts an accepted connection, active until the value drops.
    pub fn accepted(&self) -> Accepted {
        Accepted {
            _life: ConnectionLife::open(
                &self.downstream_cx_total,
                &self.downstream_cx_active,
                &self.downstream_cx_destroy,
                &self.downstream_cx_length_ms,
            ),
            _server: self.server_total_connections.track(),
        }
    }
}

/// `http.<stat_prefix>.*`.
#[derive(Debug, Clone, Default)]
pub struct HttpStats {
    pub downstream_cx_total: Counter,
    pub downstream_cx_active: Gauge,
    pub downstream_cx_destroy: Counter,
    /// Milliseconds from the connection's start to its end.
    pub downstream_cx_length_ms: Histogram,
    /// Bytes read from and written to downstream connections (after TLS).
    pub downstream_cx_rx_bytes_total: Counter,
    pub downstream_cx_tx_bytes_total: Counter,
    pub downstream_rq_total: Counter,
    pub downstream_rq_active: Gauge,
    pub downstream_rq_http1_total: Counter,
    pub downstream_rq_http2_total: Counter,
    downstream_rq_class: [Counter; 5],
    /// Milliseconds from the request's arrival to the end of the response.
    pub downstream_rq_time: Histogram,
    /// Requests no route matched.
    pub no_route: Counter,
    /// Requests whose route named a cluster that does not exist.
    pub no_cluster: Counter,
    pub rq_direct_response: Counter,
    pub rq_redirect: Counter,
    /// Connections closed for a malformed request (an HTTP/1 parse error, HTTP/2 misuse).
    pub downstream_cx_protocol_error: Counter,
    pub downstream_cx_idle_timeout: Counter,
    pub downstream_cx_max_duration_reached: Counter,
    pub downstream_cx_max_requests_reached: Counter,
    /// Requests whose headers did not arrive within `request_headers_timeout`.
    pub downstream_rq_header_timeout: Counter,
    pub downstream_rq_idle_timeout: Counter,
    /// Requests not received whole within `request_timeout`.
    pub downstream_rq_timeout: Counter,
    pub downstream_rq_max_duration_reached: Counter,
    /// Connections closed because too many of their streams were reset early (HTTP/2
    /// rapid reset).
    pub downstream_rq_too_many_premature_resets: Counter,
    /// Requests answered 503 by the overload manager (`stop_accepting_requests`, the
    /// `http_connection_manager_decode_headers` load-shed point).
    pub downstream_rq_overload_close: Counter,
    /// Connections drained because `disable_http_keepalive` was in force.
    pub downstream_cx_overload_disable_keepalive: Counter,
}

impl HttpStats {
    /// Counts a connection the manager serves, until the value drops.
    pub fn connection(&self) -> ConnectionLife {
        ConnectionLife::open(
            &self.downstream_cx_total,
            &self.downstream_cx_active,
            &self.downstream_cx_destroy,
            &self.downstream_cx_length_ms,
        )
    }

    pub fn register(stats: &Stats, stat_prefix: &str) -> Self {
        let scope = Scope::envoy().child("http").tagged("envoy_http_conn_manager_prefix", stat_prefix);
        let counter = |name: &str| stats.counter(scope.name(name));
        let class = |n: usize| {
            let class = (n + 1).to_string();
            let flat = format!("downstream_rq_{class}xx");
            stats.counter(scope.name_tagged(&flat, "downstream_rq_xx", "envoy_response_code_class", &class))
        };
        Self {
            downstream_cx_total: counter("downstream_cx_total"),
            downstream_cx_active: stats.gauge(scope.name("downstream_cx_active")),
            downstream_cx_destroy: counter("downstream_cx_destroy"),
            downstream_cx_length_ms: stats.histogram(scope.name("downstream_cx_length_ms")),
            downstream_cx_rx_bytes_total: counter("downstream_cx_rx_bytes_total"),
            downstream_cx_tx_bytes_total: counter("downstream_cx_tx_bytes_total"),
            downstream_rq_total: counter("downstream_rq_total"),
            downstream_rq_active: stats.gauge(scope.name("downstream_rq_active")),
            downstream_rq_http1_total: counter("downstream_rq_http1_total"),
            downstream_rq_http2_total: counter("downstream_rq_http2_total"),
            downstream_rq_class: std::array::from_fn(class),
            downstream_rq_time: stats.histogram(scope.name("downstream_rq_time")),
            no_route: counter("no_route"),
            no_cluster: counter("no_cluster"),
            rq_direct_response: counter("rq_direct_response"),
            rq_redirect: counter("rq_redirect"),
            downstream_cx_protocol_error: counter("downstream_cx_protocol_error"),
            downstream_cx_idle_timeout: counter("downstream_cx_idle_timeout"),
            downstream_cx_max_duration_reached: counter("downstream_cx_max_duration_reached"),
            downstream_cx_max_requests_reached: counter("downstream_cx_max_requests_reached"),
            downstream_rq_header_timeout: counter("downstream_rq_header_timeout"),
            downstream_rq_idle_timeout: counter("downstream_rq_idle_timeout"),
            downstream_rq_timeout: counter("downstream_rq_timeout"),
            downstream_rq_max_duration_reached: counter("downstream_rq_max_duration_reached"),
            downstream_rq_too_many_premature_resets: counter("downstream_rq_too_many_premature_resets"),
            downstream_rq_overload_close: counter("downstream_rq_overload_close"),
            downstream_cx_overload_disable_keepalive: counter("downstream_cx_overload_disable_keepalive"),
        }
    }

    /// Counts a response sent downstream by its class.
    pub fn charge(&self, status: u16) {
        if let Some(counter) = (status / 100).checked_sub(1).and_then(|i| self.downstream_rq_class.get(usize::from(i)))
        {
            counter.inc();
        }
    }

    pub fn downstream_rq_class(&self, class: u16) -> u64 {
        class.checked_sub(1).and_then(|i| self.downstream_rq_class.get(usize::from(i))).map_or(0, Counter::get)
    }
}
