//! `JwtProvider` → [`JwtProvider`]: token locations, keys (local or remote) and what is
//! done with a verified token.

use std::time::Duration;

use http::HeaderName;

use super::super::super::common;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::jwt_authn::{ClaimToHeader, JwksRetry, JwksSource, JwtHeader, JwtProvider, RemoteJwks};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::extensions::filters::http::jwt_authn::v3 as proto;

/// Envoy's default `clock_skew_seconds`.
const DEFAULT_CLOCK_SKEW_SECONDS: u64 = 60;
/// Envoy's default `RemoteJwks.cache_duration`.
const DEFAULT_CACHE_DURATION: Duration = Duration::from_secs(600);
/// Without `retry_back_off`, Envoy's router defaults apply to the fetch's retries.
const DEFAULT_RETRY_BASE: Duration = Duration::from_millis(25);

pub fn provider(proto: proto::JwtProvider, warnings: &mut Warnings) -> Result<JwtProvider> {
    use proto::jwt_provider::JwksSourceSpecifier;
    let proto::JwtProvider {
        issuer,
        audiences,
        subjects,
        require_expiration,
        max_lifetime,
        forward,
        from_headers,
        from_params,
        from_cookies,
        forward_payload_header,
        pad_forward_payload_header,
        payload_in_metadata,
        normalize_payload_in_metadata,
        header_in_metadata,
        failed_status_in_metadata,
        clock_skew_seconds,
        jwt_cache_config,
        claim_to_headers,
        clear_route_cache,
        jwks_source_specifier,
    } = proto;
    if subjects.is_some() {
        return Err(ConfigError::new("subjects", "matching the token's subject is not supported"));
    }
    if require_expiration {
        return Err(ConfigError::new("require_expiration", "requiring an expiration is not supported"));
    }
    if max_lifetime.is_some() {
        return Err(ConfigError::new("max_lifetime", "limiting a token's lifetime is not supported"));
    }
    if !failed_status_in_metadata.is_empty() {
        return Err(ConfigError::new("failed_status_in_metadata", "failure status in metadata is not supported"));
    }
    if clear_route_cache {
        return Err(ConfigError::new("clear_route_cache", "re-routing after adding claim headers is not supported"));
    }
    if jwt_cache_config.is_some() {
        // A cache of verified tokens: time and audiences are checked again on a hit, so
        // its size changes no answer. Outrider always remembers the signatures each key set
        // verified (up to 1024 tokens), whatever this says.
        warnings.ignored("jwt_cache_config", "verified signatures are always remembered, up to 1024 per key set");
    }
    let from_headers = from_headers
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            let proto::JwtHeader { name, value_prefix } = h;
            let name = header_name(&name).map_err(|e| e.at(format!("from_headers[{i}].name")))?;
            Ok(JwtHeader { name, value_prefix })
        })
        .collect::<Result<_>>()?;
    let forward_payload_header = match forward_payload_header.as_str() {
        "" => None,
        name => Some(header_name(name).map_err(|e| e.at("forward_payload_header"))?),
    };
    let claim_to_headers = claim_to_headers
        .into_iter()
        .enumerate()
        .map(|(i, c)| claim_to_header(c).map_err(|e| e.at(format!("claim_to_headers[{i}]"))))
        .collect::<Result<_>>()?;
    let space_delimited_claims = normalize_payload_in_metadata.map(|n| n.space_delimited_claims).unwrap_or_default();
    let jwks = match jwks_source_specifier {
        Some(JwksSourceSpecifier::LocalJwks(source)) => {
            JwksSource::Local(local_jwks(source).map_err(|e| e.at("local_jwks"))?)
        }
        Some(JwksSourceSpecifier::RemoteJwks(remote)) => JwksSource::Remote(
            warnings.within("remote_jwks", |w| remote_jwks(remote, w)).map_err(|e| e.at("remote_jwks"))?,
        ),
        None => return Err(ConfigError::new("jwks_source_specifier", "one of remote_jwks or local_jwks is required")),
    };
    Ok(JwtProvider {
        issuer,
        audiences,
        forward,
        from_headers,
        from_params,
        from_cookies,
        forward_payload_header,
        pad_forward_payload_header,
        payload_in_metadata,
        space_delimited_claims,
        header_in_metadata,
        clock_skew_seconds: if clock_skew_seconds == 0 {
            DEFAULT_CLOCK_SKEW_SECONDS
        } else {
            u64::from(clock_skew_seconds)
        },
        claim_to_headers,
        jwks,
    })
}

fn header_name(name: &str) -> Result<HeaderName> {
    if name.is_empty() {
        return Err(ConfigError::new("", "must not be empty"));
    }
    HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
        .map_err(|_| ConfigError::new("", format!("{name:?} is not a valid header name")))
}

fn claim_to_header(proto: proto::JwtClaimToHeader) -> Result<ClaimToHeader> {
    let proto::JwtClaimToHeader { header_name: header, claim_name, claim_path } = proto;
    if !claim_path.is_empty() {
        return Err(ConfigError::new("claim_path", "claim paths are not supported; use a dotted claim_name"));
    }
    if claim_name.is_empty() {
        return Err(ConfigError::new("claim_name", "must not be empty"));
    }
    Ok(ClaimToHeader { header_name: header_name(&header).map_err(|e| e.at("header_name"))?, claim_name })
}

/// The JWKS text of `local_jwks`, read now (a file or environment variable is read when
/// the configuration is loaded, as Envoy reads it).
fn local_jwks(proto: core::DataSource) -> Result<String> {
    use core::data_source::Specifier;
    let core::DataSource { watched_directory, specifier } = proto;
    if watched_directory.is_some() {
        return Err(ConfigError::new("watched_directory", "re-reading a JWKS file when it changes is not supported"));
    }
    match specifier {
        Some(Specifier::InlineString(text)) => Ok(text),
        Some(Specifier::InlineBytes(bytes)) => {
            String::from_utf8(bytes).map_err(|_| ConfigError::new("inline_bytes", "is not UTF-8 JSON"))
        }
        Some(Specifier::Filename(path)) => std::fs::read_to_string(&path)
            .map_err(|e| ConfigError::new("filename", format!("cannot read {path:?}: {e}"))),
        Some(Specifier::EnvironmentVariable(name)) => {
            std::env::var(&name).map_err(|_| ConfigError::new("environment_variable", format!("{name:?} is not set")))
        }
        None => Err(ConfigError::new("specifier", "a filename, inline value or environment variable is required")),
    }
}

fn remote_jwks(proto: proto::RemoteJwks, warnings: &mut Warnings) -> Result<RemoteJwks> {
    use core::http_uri::HttpUpstreamType;
    let proto::RemoteJwks { http_uri, cache_duration, async_fetch, retry_policy } = proto;
    let Some(core::HttpUri { uri, timeout, http_upstream_type }) = http_uri else {
        return Err(ConfigError::new("http_uri", "is required"));
    };
    let cluster = match http_upstream_type {
        Some(HttpUpstreamType::Cluster(cluster)) if !cluster.is_empty() => cluster,
        _ => return Err(ConfigError::new("http_uri.cluster", "is required")),
    };
    let parsed: http::Uri =
        uri.parse().map_err(|_| ConfigError::new("http_uri.uri", format!("{uri:?} is not a valid URI")))?;
    if parsed.scheme().is_none() || parsed.authority().is_none() {
        return Err(ConfigError::new("http_uri.uri", format!("{uri:?} is not an absolute http(s) URI")));
    }
    let Some(timeout) = common::opt_duration(&timeout, "http_uri.timeout")? else {
        return Err(ConfigError::new("http_uri.timeout", "is required"));
    };
    let cache_duration = common::opt_duration(&cache_duration, "cache_duration")?.unwrap_or(DEFAULT_CACHE_DURATION);
    if async_fetch.is_some() {
        // Fetching at start only changes when the first fetch happens: until the keys
        // arrive Envoy fetches for the request that needs them, as Outrider always does.
        warnings.ignored("async_fetch", "keys are fetched by the first request that needs them");
    }
    let retry = retry_policy.map(retry).transpose().map_err(|e| e.at("retry_policy"))?;
    Ok(RemoteJwks { cluster, uri: parsed, timeout, cache_duration, retry })
}

fn retry(proto: core::RetryPolicy) -> Result<JwksRetry> {
    let core::RetryPolicy {
        retry_back_off,
        num_retries,
        retry_on,
        retry_priority,
        retry_host_predicate,
        host_selection_retry_max_attempts,
    } = proto;
    if !retry_on.is_empty() {
        return Err(ConfigError::new("retry_on", "only the default retry conditions are supported"));
    }
    if retry_priority.is_some() || !retry_host_predicate.is_empty() || host_selection_retry_max_attempts != 0 {
        return Err(ConfigError::new("retry_priority", "retry priorities and host predicates are not supported"));
    }
    let (base_interval, max_interval) = match retry_back_off {
        None => (DEFAULT_RETRY_BASE, DEFAULT_RETRY_BASE * 10),
        Some(core::BackoffStrategy { base_interval, max_interval }) => {
            let Some(base) = common::opt_duration(&base_interval, "retry_back_off.base_interval")? else {
                return Err(ConfigError::new("retry_back_off.base_interval", "is required"));
            };
            let max = common::opt_duration(&max_interval, "retry_back_off.max_interval")?.unwrap_or(base * 10);
            if max < base {
                return Err(ConfigError::new("retry_back_off.max_interval", "must not be less than base_interval"));
            }
            (base, max)
        }
    };
    Ok(JwksRetry { num_retries: common::u32_or(&num_retries, 1), base_interval, max_interval })
}
