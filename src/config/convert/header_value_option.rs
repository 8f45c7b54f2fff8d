//! `envoy.config.core.v3.HeaderValueOption` and the header names it may touch: what route
//! configurations, the TCP proxy's tunnel and the rate limit filters add to headers.

use crate::config::error::{ConfigError, Result};
use crate::config::route::{HeaderAppendAction, HeaderValueOption};
use crate::pb::envoy::config::core::v3 as core;

/// `envoy.config.core.v3.HeaderValueOption`; `request` applies Envoy's rule that the
/// `host` header may not be modified this way.
#[allow(deprecated)]
pub(crate) fn header_value_option(proto: core::HeaderValueOption, request: bool) -> Result<HeaderValueOption> {
    use core::header_value_option::HeaderAppendAction as A;
    let core::HeaderValueOption { header, append, append_action, keep_empty_value } = proto;
    let core::HeaderValue { key, value, raw_value } =
        header.ok_or_else(|| ConfigError::new("header", "is required"))?;
    let name = header_name(&key, request).map_err(|e| e.at("header.key"))?;
    let value = match (value.is_empty(), raw_value.is_empty()) {
        (_, true) => value,
        (true, false) => String::from_utf8(raw_value)
            .map_err(|_| ConfigError::new("header.raw_value", "only UTF-8 header values are supported"))?,
        (false, false) => {
            return Err(ConfigError::new("header.raw_value", "only one of value and raw_value may be set"));
        }
    };
    let append_action = match (append, A::try_from(append_action)) {
        (Some(_), Ok(a)) if a != A::AppendIfExistsOrAdd => {
            return Err(ConfigError::new("append", "append and append_action may not both be set"));
        }
        (Some(append), _) if !append.value => HeaderAppendAction::OverwriteIfExistsOrAdd,
        (_, Ok(A::AppendIfExistsOrAdd)) => HeaderAppendAction::AppendIfExistsOrAdd,
        (_, Ok(A::AddIfAbsent)) => HeaderAppendAction::AddIfAbsent,
        (_, Ok(A::OverwriteIfExistsOrAdd)) => HeaderAppendAction::OverwriteIfExistsOrAdd,
        (_, Ok(A::OverwriteIfExists)) => HeaderAppendAction::OverwriteIfExists,
        (_, Err(_)) => return Err(ConfigError::new("append_action", format!("unknown value {append_action}"))),
    };
    Ok(HeaderValueOption { name, value, append_action, keep_empty_value })
}

/// A header name that may be added or removed: not a pseudo-header, and (for requests)
/// not `host`, which Envoy reserves to `host_rewrite`.
pub(super) fn header_name(name: &str, request: bool) -> Result<http::HeaderName> {
    if name.starts_with(':') || (request && name.eq_ignore_ascii_case("host")) {
        return Err(ConfigError::new("", format!("{name:?} may not be modified")));
    }
    http::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| ConfigError::new("", format!("{name:?} is not a valid header name")))
}
