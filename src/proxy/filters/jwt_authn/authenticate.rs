//! Envoy's `Authenticator`: the tokens one requirement finds, verified one by one (the last
//! found first, as Envoy pops them) — parse, issuer, time, audiences, keys (fetched when
//! needed), signature — and what a good token does to the request.

use std::sync::Arc;

use base64::Engine as _;
use http::HeaderValue;
use serde_json::{Map, Value};

use super::extract::{Extractor, Token};
use super::jwt::Jwt;
use super::keys::Providers;
use super::keys::{Audiences, FetchError, ProviderKeys};
use super::status::Outcome;
use super::status::Status;
use crate::proxy::filters::RequestContext;
use crate::telemetry::Counter;

/// One request's verification: the request, what good tokens extracted, the clock.
pub struct Session<'r, 'a> {
    pub request: &'r mut RequestContext<'a>,
    pub providers: &'r Providers,
    pub counters: &'r FetchCounters,
    /// Filled by good tokens; published when the whole requirement passes.
    pub extracted: Map<String, Value>,
    /// Unix seconds.
    pub now: u64,
}

/// `jwks_fetch_success` / `jwks_fetch_failed`.
pub struct FetchCounters {
    pub success: Counter,
    pub failed: Counter,
}

pub struct Authenticator {
    pub extractor: Extractor,
    /// `None` for allow_missing / allow_missing_or_failed: the provider is found by the
    /// token's issuer.
    pub provider: Option<Arc<ProviderKeys>>,
    /// `provider_and_audiences`: checked instead of the provider's audiences.
    pub audiences: Option<Audiences>,
    pub allow_failed: bool,
    pub allow_missing: bool,
}

impl Authenticator {
    /// A requirement whose provider is not configured (conversion refuses it; kept
    /// fail-closed): finds no token, so the request is refused as missing one.
    pub fn unknown_provider() -> Self {
        Self {
            extractor: Extractor::default(),
            provider: None,
            audiences: None,
            allow_failed: false,
            allow_missing: false,
        }
    }

    pub async fn run(&self, session: &mut Session<'_, '_>) -> Outcome {
        self.extractor.sanitize(session.request.parts);
        let mut tokens = self.extractor.extract(session.request.parts);
        let mut waited = false;
        let mut status = Status::JwtMissed;
        while let Some(token) = tokens.pop() {
            status = self.verify_token(&token, session, &mut waited).await;
            // Unless failures or missing tokens are allowed, every token must be good.
            if status != Status::Ok && !self.allow_failed && !self.allow_missing {
                break;
            }
        }
        let status =
            if self.allow_failed || (self.allow_missing && status == Status::JwtMissed) { Status::Ok } else { status };
        Outcome { status, waited }
    }

    async fn verify_token(&self, token: &Token<'_>, session: &mut Session<'_, '_>, waited: &mut bool) -> Status {
        let jwt = match Jwt::parse(&token.value) {
            Ok(jwt) => jwt,
            Err(status) => return status,
        };
        if !token.issuers.allows(&jwt.iss) {
            return Status::JwtUnknownIssuer;
        }
        let Some(keys) = self.provider.clone().or_else(|| find_by_issuer(session.providers, &jwt.iss)) else {
            return Status::JwtUnknownIssuer;
        };
        let status = jwt.verify_time(session.now, keys.provider.clock_skew_seconds);
        if status != Status::Ok {
            return status;
        }
        if !self.audiences.as_ref().unwrap_or(&keys.audiences).allows(&jwt.audiences) {
            return Status::JwtAudienceNotAllowed;
        }
        let jwks = match keys.current() {
            Some(jwks) => jwks,
            None => {
                let callouts = session.request.callouts;
                match keys.fetch(callouts).await {
                    // A local provider whose JWKS was invalid.
                    None => return Status::JwksNoValidKeys,
                    Some(Ok(jwks)) => {
                        *waited = true;
                        session.counters.success.inc();
                        jwks
                    }
                    Some(Err(error)) => {
                        *waited |= !matches!(error, FetchError::NoCluster);
                        tracing::debug!(issuer = %keys.provider.issuer, %error, "JWKS fetch failed");
                        session.counters.failed.inc();
                        return Status::JwksFetchFail;
                    }
                }
            }
        };
        let status = jwks.verify(&jwt);
        if status == Status::Ok {
            good_token(&keys, &jwt, token, session);
        }
        status
    }
}

/// The first provider with this issuer, else the first without one.
fn find_by_issuer(providers: &Providers, issuer: &str) -> Option<Arc<ProviderKeys>> {
    let with = |iss: &str| providers.values().find(|k| k.provider.issuer == iss).cloned();
    with(issuer).or_else(|| if issuer.is_empty() { None } else { with("") })
}

/// A verified token: forward its payload and claims, take it out unless forwarded, and
/// keep its header and payload for the metadata.
fn good_token(keys: &ProviderKeys, jwt: &Jwt, token: &Token<'_>, session: &mut Session<'_, '_>) {
    let provider = &keys.provider;
    let headers = &mut session.request.parts.headers;
    if let Some(name) = &provider.forward_payload_header {
        let mut payload = jwt.payload_base64url.clone();
        if provider.pad_forward_payload_header {
            payload.extend(std::iter::repeat_n('=', (4 - payload.len() % 4) % 4));
        }
        if let Ok(value) = HeaderValue::from_str(&payload) {
            headers.append(name.clone(), value);
        }
    }
    for claim in &provider.claim_to_headers {
        if let Some(value) = claim_header_value(&jwt.payload, &claim.claim_name)
            && let Ok(value) = HeaderValue::from_str(&value)
        {
            headers.append(claim.header_name.clone(), value);
        }
    }
    if !provider.forward {
        token.remove(session.request.parts);
    }
    if !provider.header_in_metadata.is_empty() {
        session.extracted.insert(provider.header_in_metadata.clone(), Value::Object(jwt.header.clone()));
    }
    if !provider.payload_in_metadata.is_empty() {
        let payload = normalize(&jwt.payload, &provider.space_delimited_claims);
        session.extracted.insert(provider.payload_in_metadata.clone(), Value::Object(payload));
    }
}

/// `normalize_payload_in_metadata`: a listed claim whose value is a string becomes the
/// list of its space-separated words (Istio's `scope`).
fn normalize(payload: &Map<String, Value>, space_delimited: &[String]) -> Map<String, Value> {
    let mut out = payload.clone();
    for claim in space_delimited {
        if let Some(Value::String(words)) = payload.get(claim) {
            let list: Vec<Value> =
                words.split(' ').filter(|w| !w.is_empty()).map(|w| Value::String(w.to_owned())).collect();
            if !list.is_empty() {
                out.insert(claim.clone(), Value::Array(list));
            }
        }
    }
    out
}

/// A claim's header value, as Envoy writes it: strings as they are, integers without a
/// fraction, other numbers with six decimals, booleans as `true`/`false`, objects and lists
/// as base64 of their JSON. A dotted name descends into objects.
fn claim_header_value(payload: &Map<String, Value>, name: &str) -> Option<String> {
    let mut segments = name.split('.');
    let mut value = payload.get(segments.next()?)?;
    for segment in segments {
        value = value.as_object()?.get(segment)?;
    }
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_u64(), n.as_f64()) {
            (Some(u), _) => u.to_string(),
            (None, Some(f)) if f >= 0.0 && f.fract() == 0.0 && f < 18_446_744_073_709_551_615.0 => {
                format!("{f:.0}")
            }
            (None, Some(f)) => format!("{f:.6}"),
            (None, None) => return None,
        },
        Value::Object(_) | Value::Array(_) => {
            base64::engine::general_purpose::STANDARD.encode(serde_json::to_string(value).ok()?)
        }
        Value::Null => return None,
    };
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_render_as_envoy_writes_them() {
        let payload: Map<String, Value> = serde_json::from_str(
            r#"{"sub":"u","n":42,"f":1.5,"neg":-3,"b":true,"o":{"k":"v"},"l":["a"],"e":"","nested":{"x":{"y":7}}}"#,
        )
        .unwrap();
        let get = |name| claim_header_value(&payload, name);
        assert_eq!(get("sub").as_deref(), Some("u"));
        assert_eq!(get("n").as_deref(), Some("42"));
        assert_eq!(get("f").as_deref(), Some("1.500000"));
        assert_eq!(get("neg").as_deref(), Some("-3.000000"));
        assert_eq!(get("b").as_deref(), Some("true"));
        assert_eq!(get("o").as_deref(), Some("eyJrIjoidiJ9"));
        assert_eq!(get("l").as_deref(), Some("WyJhIl0="));
        assert_eq!(get("e"), None);
        assert_eq!(get("nested.x.y").as_deref(), Some("7"));
        assert_eq!(get("missing"), None);
    }

    #[test]
    fn space_delimited_claims_become_lists() {
        let payload: Map<String, Value> = serde_json::from_str(r#"{"scope":"read  write","other":"a b"}"#).unwrap();
        let out = normalize(&payload, &["scope".to_owned(), "absent".to_owned()]);
        assert_eq!(out["scope"], serde_json::json!(["read", "write"]));
        assert_eq!(out["other"], "a b");
    }
}
