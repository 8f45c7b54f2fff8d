//! A header to add, with how it combines with the header already there: Envoy's
//! `HeaderValueOption`, which routes, the TCP proxy, health checks and filters (rate
//! limits, ext_authz) all use.

/// `envoy.config.core.v3.HeaderValueOption`.
#[derive(Debug, Clone, PartialEq)]
pub struct HeaderValueOption {
    pub name: http::HeaderName,
    pub value: String,
    pub append_action: HeaderAppendAction,
    /// Add the header even when the (substituted) value is empty.
    pub keep_empty_value: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderAppendAction {
    /// The default: add another value (or the header).
    AppendIfExistsOrAdd,
    AddIfAbsent,
    OverwriteIfExistsOrAdd,
    OverwriteIfExists,
}
