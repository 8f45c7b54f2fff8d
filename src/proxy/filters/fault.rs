//! `envoy.filters.http.fault`: delays and aborts a share of requests, as configured on the
//! filter or by a route's own settings (which replace the filter's wholesale, the way
//! Istio's VirtualService faults arrive), or as the request's `x-envoy-fault-*` headers
//! ask when the configuration allows header faults.
//!
//! Envoy's order: the fault applies only when the route's cluster is `upstream_cluster`
//! (if set), the downstream node is one of `downstream_nodes` (if set) and `headers` all
//! match. Then a delay (if drawn) holds the request, after which an abort is drawn; with
//! no delay, an abort is drawn at once. No new fault starts while `max_active_faults` are
//! active. An abort answers with its status and `fault filter abort` (response flag
//! `FI`), and never reaches the upstream.
//!
//! A delayed request is flagged `DI`. Difference from Envoy: with weighted clusters, whose
//! pick comes later, `upstream_cluster` matches when it is any of the route's clusters.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use super::chance::happens;
use super::context::{LocalResponse, RequestContext};
use super::http::{FactoryContext, FilterHeadersStatus, HttpFilter};
use crate::config::filters::FilterOverride;
use crate::config::filters::fault::{AbortKind, DelayKind, FaultAbort, FaultDelay, HttpFault};
use crate::config::filters::fractional_percent::FractionalPercent;
use crate::config::route::{Action, ClusterSpecifier, WeightedTarget};
use crate::proxy::response_flags::ResponseFlags;
use crate::proxy::router::request_header_value;
use crate::telemetry::{Counter, Gauge, GaugeGuard, Scope, Stats};

const DELAY_REQUEST: &str = "x-envoy-fault-delay-request";
const DELAY_REQUEST_PERCENTAGE: &str = "x-envoy-fault-delay-request-percentage";
const ABORT_REQUEST: &str = "x-envoy-fault-abort-request";
const ABORT_GRPC_REQUEST: &str = "x-envoy-fault-abort-grpc-request";
const ABORT_REQUEST_PERCENTAGE: &str = "x-envoy-fault-abort-request-percentage";
const DOWNSTREAM_SERVICE_CLUSTER: &str = "x-envoy-downstream-service-cluster";
const DOWNSTREAM_SERVICE_NODE: &str = "x-envoy-downstream-service-node";
/// Envoy's abort body when `response_body` is empty.
const ABORT_BODY: &str = "fault filter abort";

pub struct FaultFilter {
    name: String,
    config: Arc<HttpFault>,
    stats: Arc<Stats>,
    /// `http.<stat_prefix>.fault.`
    scope: Scope,
    aborts_injected: Counter,
    delays_injected: Counter,
    faults_overflow: Counter,
    active_faults: Gauge,
    /// Envoy's counter of response rate limits, which Outrider refuses: listed as Envoy
    /// lists it (held, so the store keeps it), never incremented.
    _response_rl_injected: Counter,
}

impl FaultFilter {
    pub fn new(name: &str, config: Arc<HttpFault>, factory: FactoryContext<'_>) -> Self {
        let scope =
            Scope::envoy().child("http").tagged("envoy_http_conn_manager_prefix", factory.stat_prefix).child("fault");
        let stats = factory.stats;
        Self {
            name: name.to_owned(),
            config,
            aborts_injected: stats.counter(scope.name("aborts_injected")),
            delays_injected: stats.counter(scope.name("delays_injected")),
            faults_overflow: stats.counter(scope.name("faults_overflow")),
            active_faults: stats.gauge(scope.name("active_faults")),
            _response_rl_injected: stats.counter(scope.name("response_rl_injected")),
            stats: stats.clone(),
            scope,
        }
    }

    /// Counts one fault active for the request's lifetime, unless `max_active_faults` are
    /// active already (Envoy's `tryIncActiveFaults`: a fuzzy limit, like its breakers).
    fn try_activate(&self, settings: &HttpFault, active: &mut Option<GaugeGuard>) -> bool {
        if active.is_some() {
            return true;
        }
        if let Some(max) = settings.max_active_faults
            && u64::try_from(self.active_faults.get()).unwrap_or(0) >= max
        {
            self.faults_overflow.inc();
            return false;
        }
        *active = Some(self.active_faults.track());
        true
    }

    /// `fault.<downstream cluster>.<stat>`, when the request names its cluster.
    fn count_for_downstream(&self, settings: &HttpFault, downstream: Option<&str>, stat: &str) {
        if let Some(cluster) = downstream.filter(|c| !c.is_empty())
            && !settings.disable_downstream_cluster_stats
        {
            self.stats.counter(self.scope.child(cluster).name(stat)).inc();
        }
    }

    fn abort(
        &self,
        settings: &HttpFault,
        downstream: Option<&str>,
        abort: &FaultAbort,
        status: AbortStatus,
    ) -> FilterHeadersStatus {
        self.aborts_injected.inc();
        self.count_for_downstream(settings, downstream, "aborts_injected");
        let body = if abort.body.is_empty() { ABORT_BODY.to_owned() } else { abort.body.clone() };
        let mut reply = LocalResponse::new(status.http, body, "fault_filter_abort");
        reply.grpc_status = status.grpc;
        reply.flags = ResponseFlags::FAULT_INJECTED;
        FilterHeadersStatus::LocalReply(reply)
    }
}

impl HttpFilter for FaultFilter {
    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        let settings = match request.per_filter(&self.name) {
            Some(FilterOverride::Fault(config)) => config.clone(),
            _ => self.config.clone(),
        };
        if !applies(&settings, request) {
            return FilterHeadersStatus::Continue;
        }
        let downstream = request_header_value(request.parts, DOWNSTREAM_SERVICE_CLUSTER).map(|c| c.into_owned());
        let mut active = None;
        if let Some(delay) = &settings.delay
            && let Some(duration) = delay_duration(delay, request)
            && self.try_activate(&settings, &mut active)
        {
            self.delays_injected.inc();
            request.flags.insert(ResponseFlags::DELAY_INJECTED);
            self.count_for_downstream(&settings, downstream.as_deref(), "delays_injected");
            tokio::time::sleep(duration).await;
            // A delay may be followed by an abort, drawn now.
            if let Some(abort) = &settings.abort
                && let Some(status) = abort_status(abort, request)
            {
                return self.abort(&settings, downstream.as_deref(), abort, status);
            }
            return FilterHeadersStatus::Continue;
        }
        if let Some(abort) = &settings.abort
            && let Some(status) = abort_status(abort, request)
            && self.try_activate(&settings, &mut active)
        {
            return self.abort(&settings, downstream.as_deref(), abort, status);
        }
        FilterHeadersStatus::Continue
    }
}

/// `upstream_cluster`, `downstream_nodes` and `headers`.
fn applies(settings: &HttpFault, request: &RequestContext<'_>) -> bool {
    if !settings.upstream_cluster.is_empty() && !routes_to(request, &settings.upstream_cluster) {
        return false;
    }
    if !settings.downstream_nodes.is_empty() {
        let node = request_header_value(request.parts, DOWNSTREAM_SERVICE_NODE);
        if !node.is_some_and(|n| settings.downstream_nodes.iter().any(|d| d.as_str() == n.as_ref())) {
            return false;
        }
    }
    settings.headers.iter().all(|m| m.matches(request_header_value(request.parts, &m.name).as_deref()))
}

/// Whether the matched route forwards to `cluster`.
fn routes_to(request: &RequestContext<'_>, cluster: &str) -> bool {
    let Some(Action::Route(action)) = request.route.and_then(|r| r.route).map(|r| &r.action) else {
        return false;
    };
    match &action.cluster {
        ClusterSpecifier::Cluster(name) => name == cluster,
        ClusterSpecifier::ClusterHeader(header) => {
            request_header_value(request.parts, header).is_some_and(|name| name == cluster)
        }
        ClusterSpecifier::WeightedClusters(weighted) => weighted.clusters.iter().any(|c| match &c.target {
            WeightedTarget::Cluster(name) => name == cluster,
            WeightedTarget::ClusterHeader(header) => {
                request_header_value(request.parts, header).is_some_and(|name| name == cluster)
            }
        }),
    }
}

/// The delay to inject, if drawn: the fixed one, or the request's header (none when the
/// header is missing, not a number, or 0).
fn delay_duration(delay: &FaultDelay, request: &RequestContext<'_>) -> Option<Duration> {
    let percentage = match delay.kind {
        DelayKind::Fixed(_) => delay.percentage,
        DelayKind::Header => header_percentage(delay.percentage, request, DELAY_REQUEST_PERCENTAGE),
    };
    if !happens(&percentage) {
        return None;
    }
    let duration = match delay.kind {
        DelayKind::Fixed(d) => d,
        DelayKind::Header => Duration::from_millis(header_number(request, DELAY_REQUEST)?),
    };
    (!duration.is_zero()).then_some(duration)
}

/// What an abort answers: an HTTP status, and for gRPC aborts status 200 with a
/// `grpc-status`.
#[derive(Debug, Clone, Copy)]
struct AbortStatus {
    http: StatusCode,
    grpc: Option<u32>,
}

/// The abort to inject, if drawn. A header abort with neither a valid
/// `x-envoy-fault-abort-request` (200–599) nor a numeric
/// `x-envoy-fault-abort-grpc-request` injects nothing.
fn abort_status(abort: &FaultAbort, request: &RequestContext<'_>) -> Option<AbortStatus> {
    let percentage = match abort.kind {
        AbortKind::Http(_) | AbortKind::Grpc(_) => abort.percentage,
        AbortKind::Header => header_percentage(abort.percentage, request, ABORT_REQUEST_PERCENTAGE),
    };
    if !happens(&percentage) {
        return None;
    }
    match abort.kind {
        AbortKind::Http(status) => Some(AbortStatus { http: status, grpc: None }),
        AbortKind::Grpc(code) => Some(AbortStatus { http: StatusCode::OK, grpc: Some(code) }),
        AbortKind::Header => {
            let http = header_number(request, ABORT_REQUEST)
                .filter(|code| (200..600).contains(code))
                .and_then(|code| u16::try_from(code).ok())
                .and_then(|code| StatusCode::from_u16(code).ok());
            if let Some(http) = http {
                return Some(AbortStatus { http, grpc: None });
            }
            let grpc = header_number(request, ABORT_GRPC_REQUEST).and_then(|code| u32::try_from(code).ok())?;
            Some(AbortStatus { http: StatusCode::OK, grpc: Some(grpc) })
        }
    }
}

/// The configured percentage, lowered by the request's header (which can never raise it).
fn header_percentage(configured: FractionalPercent, request: &RequestContext<'_>, header: &str) -> FractionalPercent {
    match header_number(request, header).and_then(|n| u32::try_from(n).ok()) {
        Some(numerator) => configured.at_most(numerator),
        None => configured,
    }
}

/// The first value of `header` as an unsigned number (Envoy reads only the first value of
/// these untrusted headers).
fn header_number(request: &RequestContext<'_>, header: &str) -> Option<u64> {
    request.parts.headers.get(header)?.to_str().ok()?.trim().parse().ok()
}
