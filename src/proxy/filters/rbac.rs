//! `envoy.filters.http.rbac`: evaluates the shadow rules (counted, recorded in dynamic
//! metadata, never enforced), then the enforced rules; a denied request gets Envoy's
//! `403 RBAC: access denied` and goes no further. A route's `RBACPerRoute` replaces both
//! rule sets for that route (without `rbac`: no RBAC at all on it).

pub mod engine;
pub mod network;
mod stats;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use http::StatusCode;
use serde_json::Value;

use super::context::{LocalResponse, RequestContext};
use super::http::{FactoryContext, FilterHeadersStatus, HttpFilter};
use crate::config::filters::FilterOverride;
use crate::config::filters::rbac::{Action, HttpRbac, Policies};
use engine::{Attributes, Decision};
use stats::RbacStats;

/// The namespace of the shadow verdict in dynamic metadata.
const METADATA_NAMESPACE: &str = "envoy.filters.http.rbac";
/// Where a LOG action's verdict goes, for access loggers (`access_log_hint`).
const COMMON_NAMESPACE: &str = "envoy.common";

pub struct RbacFilter {
    /// The filter's configured name: a route's `RBACPerRoute` is found under it.
    name: String,
    config: Arc<HttpRbac>,
    stats: RbacStats,
}

impl RbacFilter {
    pub fn new(name: &str, config: Arc<HttpRbac>, factory: FactoryContext<'_>) -> Self {
        let stats = RbacStats::http(
            factory.stats,
            factory.stat_prefix,
            &config.rules_stat_prefix,
            &config.shadow_rules_stat_prefix,
        );
        Self { name: name.to_owned(), config, stats }
    }

    /// The route's rules when it has its own, else the filter's: (enforced, shadow).
    fn rules<'a>(&'a self, request: &'a RequestContext<'_>) -> (Option<&'a Policies>, Option<&'a Policies>) {
        match request.per_filter(&self.name) {
            Some(FilterOverride::Rbac(route)) => (route.rules.as_ref(), route.shadow_rules.as_ref()),
            _ => (self.config.rules.as_ref(), self.config.shadow_rules.as_ref()),
        }
    }
}

/// What the engines said, detached from the request so the metadata can be written.
struct Verdicts {
    shadow: Option<(bool, Option<String>)>,
    enforced: Option<(Action, bool, Option<String>, String)>,
}

impl RbacFilter {
    fn evaluate(&self, request: &RequestContext<'_>) -> Verdicts {
        let (rules, shadow_rules) = self.rules(request);
        let attributes = Attributes {
            parts: Some(&*request.parts),
            connection: request.connection,
            remote_ip: request.remote_ip,
            metadata: Some(&*request.metadata),
        };
        let owned = |d: &Decision<'_>| d.matched_policy.map(str::to_owned);
        let shadow = shadow_rules.map(|p| {
            let d = engine::evaluate(p, &attributes);
            (d.allowed, owned(&d))
        });
        let enforced = rules.map(|p| {
            let d = engine::evaluate(p, &attributes);
            (p.action, d.allowed, owned(&d), d.response_detail())
        });
        Verdicts { shadow, enforced }
    }
}

impl HttpFilter for RbacFilter {
    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        let Verdicts { shadow, enforced } = self.evaluate(request);
        if let Some((allowed, policy)) = shadow {
            let counter = if allowed { &self.stats.shadow_allowed } else { &self.stats.shadow_denied };
            counter.inc();
            let prefix = &self.config.shadow_rules_stat_prefix;
            if let Some(policy) = policy {
                request.metadata.set(METADATA_NAMESPACE, format!("{prefix}shadow_effective_policy_id"), policy.into());
            }
            let result = if allowed { "allowed" } else { "denied" };
            request.metadata.set(METADATA_NAMESPACE, format!("{prefix}shadow_engine_result"), result.into());
        }
        let Some((action, allowed, policy, detail)) = enforced else {
            return FilterHeadersStatus::Continue;
        };
        if action == Action::Log {
            request.metadata.set(COMMON_NAMESPACE, "access_log_hint".to_owned(), Value::Bool(policy.is_some()));
        }
        if allowed {
            self.stats.allowed.inc();
            return FilterHeadersStatus::Continue;
        }
        self.stats.denied.inc();
        FilterHeadersStatus::LocalReply(LocalResponse::new(StatusCode::FORBIDDEN, "RBAC: access denied", detail))
    }
}
