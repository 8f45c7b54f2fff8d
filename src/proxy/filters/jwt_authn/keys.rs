//! Each provider's keys: a local JWKS parsed once, or a remote one fetched through the
//! provider's cluster by the first request that needs it and kept for `cache_duration`.
//! One cache per provider, shared by every worker: an `ArcSwap`, so a request reads the
//! keys without a lock, and a fetch replaces them whole. Requests that find no fresh keys each fetch (as each
//! Envoy request does), so a failed fetch is retried by the next request that needs it.

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use bytes::Bytes;
use tokio::time::Instant;

use super::jwks::Jwks;
use crate::config::filters::jwt_authn::{JwksRetry, JwksSource, JwtProvider, RemoteJwks};
use crate::proxy::filters::{CalloutError, Callouts};

/// Every provider's keys, by provider name.
pub type Providers = std::collections::BTreeMap<String, Arc<ProviderKeys>>;

pub struct ProviderKeys {
    pub provider: Arc<JwtProvider>,
    /// Lower-cased audiences without scheme or trailing `/`.
    pub audiences: Audiences,
    cached: ArcSwapOption<Cached>,
}

struct Cached {
    jwks: Arc<Jwks>,
    /// `None`: never (local keys).
    expires: Option<Instant>,
}

/// Why a fetch brought no keys.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The cluster does not exist: Envoy fails at once, without waiting.
    #[error("the cluster does not exist")]
    NoCluster,
    #[error("{0}")]
    Failed(String),
}

impl ProviderKeys {
    pub fn new(provider: Arc<JwtProvider>) -> Self {
        let cached = match &provider.jwks {
            JwksSource::Local(text) => match Jwks::parse(text) {
                Ok(jwks) => Some(Cached { jwks: Arc::new(jwks), expires: None }),
                Err(reason) => {
                    tracing::warn!(issuer = %provider.issuer, reason, "invalid local JWKS: the provider verifies no token");
                    None
                }
            },
            JwksSource::Remote(_) => None,
        };
        Self { audiences: Audiences::new(&provider.audiences), provider, cached: ArcSwapOption::from_pointee(cached) }
    }

    /// The keys, when present and not expired.
    pub fn current(&self) -> Option<Arc<Jwks>> {
        let cached = self.cached.load();
        let cached = cached.as_ref()?;
        cached.expires.is_none_or(|at| Instant::now() < at).then(|| cached.jwks.clone())
    }

    fn store(&self, jwks: Arc<Jwks>, remote: &RemoteJwks) {
        // A duration too long to add to the clock never expires.
        let cached = Cached { jwks, expires: Instant::now().checked_add(remote.cache_duration) };
        self.cached.store(Some(Arc::new(cached)));
    }

    /// Fetches the remote keys and caches them. `None` for a local provider.
    pub async fn fetch(&self, callouts: &Callouts<'_>) -> Option<Result<Arc<Jwks>, FetchError>> {
        let JwksSource::Remote(remote) = &self.provider.jwks else { return None };
        let result = match tokio::time::timeout(remote.timeout, fetch_with_retries(remote, callouts)).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Failed(format!("no answer within {:?}", remote.timeout))),
        };
        Some(result.map(|jwks| {
            let jwks = Arc::new(jwks);
            self.store(jwks.clone(), remote);
            jwks
        }))
    }
}

async fn fetch_with_retries(remote: &RemoteJwks, callouts: &Callouts<'_>) -> Result<Jwks, FetchError> {
    let mut attempt = 0u32;
    loop {
        match fetch_once(remote, callouts).await {
            Ok(jwks) => return Ok(jwks),
            Err(Attempt::Final(error)) => return Err(error),
            Err(Attempt::Retriable(reason)) => {
                let Some(JwksRetry { num_retries, base_interval, max_interval }) = remote.retry else {
                    return Err(FetchError::Failed(reason));
                };
                if attempt >= num_retries {
                    return Err(FetchError::Failed(reason));
                }
                attempt += 1;
                // Fully jittered exponential back-off, as Envoy's retries.
                let ceiling = base_interval.saturating_mul(1u32 << attempt.min(16)).min(max_interval);
                let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX).max(1);
                tokio::time::sleep(std::time::Duration::from_millis(rand::random_range(0..millis))).await;
            }
        }
    }
}

enum Attempt {
    /// 5xx, connect failure, reset: what Envoy's JWKS fetch retries on.
    Retriable(String),
    Final(FetchError),
}

async fn fetch_once(remote: &RemoteJwks, callouts: &Callouts<'_>) -> Result<Jwks, Attempt> {
    let request = http::Request::get(remote.uri.clone())
        .body(Bytes::new())
        .map_err(|e| Attempt::Final(FetchError::Failed(format!("building the request: {e}"))))?;
    // The caller bounds the whole fetch; this bound is for one attempt.
    let response = match callouts.send(&remote.cluster, request, false, remote.timeout).await {
        Ok(response) => response,
        Err(CalloutError::NoCluster(_)) => return Err(Attempt::Final(FetchError::NoCluster)),
        Err(CalloutError::Upstream(reason)) => return Err(Attempt::Retriable(reason)),
        Err(other) => return Err(Attempt::Final(FetchError::Failed(other.to_string()))),
    };
    let status = response.status();
    if status.is_server_error() {
        return Err(Attempt::Retriable(format!("HTTP status {status}")));
    }
    if status != http::StatusCode::OK || response.body().is_empty() {
        return Err(Attempt::Final(FetchError::Failed(format!(
            "HTTP status {status}, {} bytes",
            response.body().len()
        ))));
    }
    let text = std::str::from_utf8(response.body())
        .map_err(|_| Attempt::Final(FetchError::Failed("the JWKS is not UTF-8".to_owned())))?;
    Jwks::parse(text).map_err(|reason| Attempt::Final(FetchError::Failed(reason.to_owned())))
}

/// Envoy's `CheckAudience`: audiences compared without an `http://` or `https://` prefix
/// and a trailing `/`; none configured allows any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audiences(Vec<String>);

impl Audiences {
    pub fn new(configured: &[String]) -> Self {
        Self(configured.iter().map(|a| sanitize_audience(a).to_owned()).collect())
    }

    pub fn allows(&self, token_audiences: &[String]) -> bool {
        self.0.is_empty() || token_audiences.iter().any(|a| self.0.iter().any(|c| c == sanitize_audience(a)))
    }
}

fn sanitize_audience(audience: &str) -> &str {
    let rest = audience.strip_prefix("http://").or_else(|| audience.strip_prefix("https://")).unwrap_or(audience);
    rest.strip_suffix('/').unwrap_or(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audiences_ignore_scheme_and_trailing_slash() {
        let audiences = Audiences::new(&["https://api.example.com/".to_owned()]);
        assert!(audiences.allows(&["api.example.com".to_owned()]));
        assert!(audiences.allows(&["x".to_owned(), "http://api.example.com".to_owned()]));
        assert!(!audiences.allows(&["other".to_owned()]));
        assert!(!audiences.allows(&[]));
        assert!(Audiences::new(&[]).allows(&[]));
    }
}
