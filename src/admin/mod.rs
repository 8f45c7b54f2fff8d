//! The admin server: readiness, health, what configuration was received, stats, log
//! levels, certificates, memory, and the lifecycle endpoints (`/drain_listeners`,
//! `/healthcheck/fail`, `/quitquitquit`). `/help` and `/` list them all.
//!
//! It runs on the control runtime, reads the published snapshot like any other reader,
//! and never takes a lock the data path could wait on. Its connections are capped and a
//! request head must arrive in time ([`ServerLimits`]), so that slow clients cannot hold
//! descriptors the data plane needs; the bootstrap's `admin.allow_paths`, when set, is
//! the list of paths it answers (Envoy's 403 for any other).

mod balancing;
pub mod certs;
mod clusters;
mod config_dump;
pub mod endpoints;
mod help;
mod kept_document;
mod listeners;
mod memory;
mod query;
pub mod server_info;
mod stats;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::config::secret::StringMatcher;
use crate::core::control_server::{self, Admission, ServerLimits};
use crate::core::shutdown::{InboundDrain, Signal, Trigger};
use crate::lb::Balancers;
use crate::store::Store;
use crate::telemetry::logging::LogControl;
use crate::telemetry::{ServerState, ServerStats, Stats, exposition};
pub use kept_document::KeptDocument;
use query::query_param;
pub use server_info::ServerInfo;

/// What the admin handlers read.
#[derive(Debug, Clone)]
pub struct AdminState {
    pub store: Arc<Store>,
    /// The bootstrap as read (protobuf JSON), for `/config_dump`, compressed (see
    /// [`KeptDocument`]).
    pub bootstrap: Arc<KeptDocument>,
    /// Triggered by `POST /quitquitquit`.
    pub quit: Arc<tokio::sync::Notify>,
    pub balancers: Arc<Balancers>,
    pub stats: Arc<Stats>,
    pub server_stats: ServerStats,
    pub server: Arc<ServerInfo>,
    /// Stops the listeners and drains connections (`POST /drain_listeners`).
    pub drain_listeners: Arc<Trigger>,
    /// `POST /drain_listeners?inboundonly`: the workers drain their INBOUND listeners.
    pub drain_inbound: Arc<tokio::sync::watch::Sender<InboundDrain>>,
    /// Triggered once draining began (`/ready` answers 503 from then on).
    pub draining: Signal,
    /// The running log filter, when this process installed the logger.
    pub logging: Option<LogControl>,
    /// `POST /healthcheck/fail` and `/healthcheck/ok`.
    pub health_check_failed: crate::core::server_fail_flag::HealthCheckFailed,
    /// The bootstrap's `admin.allow_paths`: when not empty, a request whose path (with its
    /// query) matches none of them gets Envoy's 403.
    pub allow_paths: Arc<[StringMatcher]>,
    /// Connections at once and the wait for a request head.
    pub limits: ServerLimits,
}

impl AdminState {
    /// Envoy's server state: a failed health check reads as DRAINING, as in Envoy.
    fn server_state(&self, ready: bool) -> ServerState {
        if self.draining.is_triggered() || self.health_check_failed.is_failed() {
            ServerState::Draining
        } else if ready {
            ServerState::Live
        } else {
            ServerState::Initializing
        }
    }
}

/// Serves admin requests on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, state: AdminState, shutdown: Signal) {
    let admission = Admission::new(&state.limits);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.clone().triggered() => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                continue;
            }
        };
        let Some(place) = admission.admit() else {
            tracing::debug!(%peer, max = state.limits.max_connections, "admin server full; connection closed");
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let _place = place;
            let builder = control_server::http1(&state.limits);
            let service = service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(&state, request)) }
            });
            if let Err(e) = builder.serve_connection(TokioIo::new(stream), service).await {
                tracing::debug!(error = %e, "admin connection ended");
            }
        });
    }
}

fn handle(state: &AdminState, request: Request<Incoming>) -> Response<Full<Bytes>> {
    if let Some(refused) = not_allowed(state, &request) {
        return refused;
    }
    let snapshot = state.store.load();
    let query = request.uri().query().unwrap_or("");
    let json_format = query.split('&').any(|p| p == "format=json");
    let server_state = state.server_state(snapshot.ready);
    match (request.method(), request.uri().path()) {
        (&Method::GET, "/ready") => match server_state {
            ServerState::Live => text(StatusCode::OK, "LIVE\n"),
            other => text(StatusCode::SERVICE_UNAVAILABLE, format!("{}\n", other.name())),
        },
        (&Method::GET, "/healthz") => text(StatusCode::OK, "OK\n"),
        (&Method::GET, "/config_dump") => json(&config_dump::dump(&snapshot, &state.bootstrap.document())),
        (&Method::GET, "/balancing") => html(balancing::PAGE.to_owned()),
        (&Method::GET, "/balancing.json") => {
            let wanted = query::query_param(query, "cluster").filter(|c| !c.is_empty());
            json(&balancing::json(&snapshot, &state.balancers, wanted.as_deref(), std::time::Instant::now()))
        }
        (&Method::GET, "/clusters") if json_format => json(&clusters::json(&snapshot, &state.balancers)),
        (&Method::GET, "/clusters") => text(StatusCode::OK, clusters::text(&snapshot, &state.balancers)),
        (&Method::GET, "/stats") => match stats::StatsQuery::parse(query) {
            Ok(selection) => {
                let samples = selection.select(scrape(state, server_state, selection.used_only));
                match selection.format {
                    stats::Format::Text => text(StatusCode::OK, exposition::text(&samples)),
                    stats::Format::Json => json(&stats::json(&samples)),
                    stats::Format::Prometheus => prometheus(&samples),
                }
            }
            Err(e) => text(StatusCode::BAD_REQUEST, format!("{e}\n")),
        },
        (&Method::GET, "/stats/prometheus") => match stats::StatsQuery::parse(query) {
            Ok(selection) => prometheus(&selection.select(scrape(state, server_state, selection.used_only))),
            Err(e) => text(StatusCode::BAD_REQUEST, format!("{e}\n")),
        },
        (&Method::GET, "/") => html(help::html()),
        (&Method::GET, "/help") => text(StatusCode::OK, help::text()),
        (&Method::GET, "/listeners") if json_format => json(&listeners::json(&snapshot)),
        (&Method::GET, "/listeners") => text(StatusCode::OK, listeners::text(&snapshot)),
        (&Method::GET, "/certs") => json(&certs::json(&snapshot, std::time::SystemTime::now())),
        (&Method::GET, "/memory") => json(&memory::json(crate::core::allocator::usage())),
        // Outrider has no runtime layers: `layered_runtime` is not read, so there is
        // nothing to list and nothing to override.
        (&Method::GET, "/runtime") => json(&serde_json::json!({ "layers": [], "entries": {} })),
        (&Method::POST, "/reset_counters") => {
            state.stats.reset_counters();
            text(StatusCode::OK, "OK\n")
        }
        (&Method::POST, "/healthcheck/fail") => {
            state.health_check_failed.set(true);
            text(StatusCode::OK, "OK\n")
        }
        (&Method::POST, "/healthcheck/ok") => {
            state.health_check_failed.set(false);
            text(StatusCode::OK, "OK\n")
        }
        (&Method::GET, "/server_info") => json(&server_info::json(&state.server, server_state.name())),
        (&Method::GET, "/logging") => match &state.logging {
            Some(logging) => text(StatusCode::OK, format!("active filter: {}\n", logging.current())),
            None => text(StatusCode::NOT_FOUND, "this process does not own its logger\n"),
        },
        (&Method::POST, "/logging") => set_logging(state, query),
        (&Method::POST, "/drain_listeners") => drain_listeners(state, query),
        (&Method::POST, "/quitquitquit") => {
            state.quit.notify_one();
            text(StatusCode::OK, "OK\n")
        }
        (_, path) if help::ENDPOINTS.iter().any(|(p, _)| *p == path) => {
            text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n")
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// Envoy's answer to a path `admin.allow_paths` does not list: 403, naming the path as
/// requested (query included: Envoy matches the whole of it, so `/ready?x` is not `/ready`).
fn not_allowed(state: &AdminState, request: &Request<Incoming>) -> Option<Response<Full<Bytes>>> {
    if state.allow_paths.is_empty() {
        return None;
    }
    let path = request.uri().path_and_query().map_or_else(|| request.uri().path(), |p| p.as_str());
    if state.allow_paths.iter().any(|allowed| allowed.matches(path)) {
        return None;
    }
    Some(text(StatusCode::FORBIDDEN, format!("request to path {path} not allowed")))
}

/// `POST /drain_listeners[?inboundonly][&graceful][&skip_exit]`, Envoy's parameters.
/// `inboundonly` drains only the listeners whose `traffic_direction` is INBOUND, as Istio
/// asks when its pod terminates; `graceful` keeps those listeners accepting (new and open
/// connections are asked to close) until the drain time is over. Without `inboundonly`
/// every listener stops accepting at once and open connections drain. `skip_exit` is
/// accepted: a drain never ends the process here.
fn drain_listeners(state: &AdminState, query: &str) -> Response<Full<Bytes>> {
    let mut inbound_only = false;
    let mut graceful = false;
    for parameter in query.split('&').filter(|p| !p.is_empty()) {
        match parameter {
            "inboundonly" => inbound_only = true,
            "graceful" => graceful = true,
            "skip_exit" => {}
            other => return text(StatusCode::BAD_REQUEST, format!("unknown parameter {other:?}\n")),
        }
    }
    tracing::info!(inbound_only, graceful, "draining listeners (admin request)");
    if inbound_only {
        InboundDrain::start(&state.drain_inbound, graceful);
    } else {
        state.drain_listeners.trigger();
    }
    text(StatusCode::OK, "OK\n")
}

/// Every registered stat, the stats computed at scrape time (`server.*` figures, the
/// per-endpoint gauges of clusters that export them, all set now and so all used), the
/// matcher applied to all.
fn scrape(state: &AdminState, server_state: ServerState, used_only: bool) -> Vec<crate::telemetry::Sample> {
    use crate::telemetry::{Scope, Value};
    state.server_stats.set_state(server_state);
    let mut samples = if used_only { state.stats.used_samples() } else { state.stats.samples() };
    let snapshot = state.store.load();
    let server = Scope::envoy().child("server");
    let memory = crate::core::allocator::usage();
    let now = std::time::SystemTime::now();
    let computed = [
        ("uptime", state.server.started.elapsed().as_secs() as f64),
        ("memory_allocated", memory.committed as f64),
        ("memory_heap_size", memory.committed as f64),
        ("memory_physical_size", memory.resident as f64),
        ("days_until_first_cert_expiring", certs::days_until_first_expiring(&snapshot, now) as f64),
        ("version", server_info::version_number() as f64),
    ];
    samples.extend(computed.into_iter().map(|(stat, value)| (server.name(stat), Value::Gauge(value))));
    let exported = |cluster: &str| snapshot.clusters.get(cluster).is_some_and(|c| c.resource.per_endpoint_stats);
    samples.extend(endpoints::samples(&state.balancers, exported, std::time::Instant::now()));
    samples.retain(|(name, _)| state.stats.accepts(&name.flat));
    samples
}

/// `POST /logging?level=debug` sets every logger; `POST /logging?outrider::xds=debug`
/// (Envoy: one logger) adds a directive for that module.
fn set_logging(state: &AdminState, query: &str) -> Response<Full<Bytes>> {
    let Some(logging) = &state.logging else {
        return text(StatusCode::NOT_FOUND, "this process does not own its logger\n");
    };
    let directives = match query_param(query, "level") {
        Some(level) => level,
        None if !query.is_empty() => {
            let extra = query.split('&').filter(|p| p.contains('=')).collect::<Vec<_>>().join(",");
            format!("{},{extra}", logging.current())
        }
        None => return text(StatusCode::BAD_REQUEST, "usage: POST /logging?level=<level>\n"),
    };
    match logging.set(&directives) {
        Ok(()) => text(StatusCode::OK, format!("active filter: {}\n", logging.current())),
        Err(e) => text(StatusCode::BAD_REQUEST, format!("{e}\n")),
    }
}

fn text(status: StatusCode, body: impl Into<String>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.into())));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain"));
    response
}

fn prometheus(samples: &[crate::telemetry::Sample]) -> Response<Full<Bytes>> {
    let mut response = text(StatusCode::OK, exposition::prometheus(samples));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    response
}

fn html(body: String) -> Response<Full<Bytes>> {
    let mut response = text(StatusCode::OK, body);
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/html; charset=UTF-8"));
    response
}

fn json(value: &serde_json::Value) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    response
}
