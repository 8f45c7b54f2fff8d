//! `envoy.config.route.v3.RateLimit`: how a virtual host or route turns a request into
//! the descriptors the global rate-limit filter sends to the rate-limit service.

use super::matcher::HeaderMatcher;

/// One `rate_limits` entry: its actions make one descriptor, in order. The descriptor is
/// dropped as a whole when any action cannot produce its entry (a missing header, a
/// header match that fails), as in Envoy.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitPolicy {
    /// `stage`: the entry applies only to rate-limit filters of the same stage.
    pub stage: u32,
    pub actions: Vec<RateLimitAction>,
}

/// `RateLimit.Action`: one descriptor entry.
#[derive(Debug, Clone, PartialEq)]
pub enum RateLimitAction {
    /// `("destination_cluster", <the route's cluster>)`.
    DestinationCluster,
    /// `(<descriptor_key>, <the header's first value>)`; without the header the descriptor
    /// is dropped, or with `skip_if_absent` only this entry.
    RequestHeaders { header_name: String, descriptor_key: String, skip_if_absent: bool },
    /// `("remote_address", <the client address>)` (the trusted address from
    /// `x-forwarded-for` when the connection manager says so).
    RemoteAddress,
    /// `(<descriptor_key or "generic_key">, <descriptor_value>)`.
    GenericKey { descriptor_key: String, descriptor_value: String },
    /// `(<descriptor_key or "header_match">, <descriptor_value>)` when the headers match
    /// (or, with `expect_match: false`, when they do not).
    HeaderValueMatch {
        descriptor_key: String,
        descriptor_value: String,
        expect_match: bool,
        headers: Vec<HeaderMatcher>,
    },
    /// `("masked_remote_address", "<client address masked>/<length>")`.
    MaskedRemoteAddress { v4_prefix_len: u8, v6_prefix_len: u8 },
}
