//! Envoy's response flags: why a request ended the way it did, as `%RESPONSE_FLAGS%`
//! prints them in access logs and spans (`UH`, `UF`, `UT`, `URX`, …; `-` for none).

use std::fmt;

use super::headers::{LocalReply, ResetReason};

/// A set of response flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponseFlags(u32);

/// Each flag and its short name, in the order Envoy prints them.
const NAMES: [(ResponseFlags, &str); 11] = [
    (ResponseFlags::FAILED_LOCAL_HEALTH_CHECK, "LH"),
    (ResponseFlags::NO_HEALTHY_UPSTREAM, "UH"),
    (ResponseFlags::UPSTREAM_REQUEST_TIMEOUT, "UT"),
    (ResponseFlags::LOCAL_RESET, "LR"),
    (ResponseFlags::UPSTREAM_REMOTE_RESET, "UR"),
    (ResponseFlags::UPSTREAM_CONNECTION_FAILURE, "UF"),
    (ResponseFlags::UPSTREAM_CONNECTION_TERMINATION, "UC"),
    (ResponseFlags::UPSTREAM_OVERFLOW, "UO"),
    (ResponseFlags::NO_ROUTE_FOUND, "NR"),
    (ResponseFlags::UPSTREAM_RETRY_LIMIT_EXCEEDED, "URX"),
    (ResponseFlags::DOWNSTREAM_CONNECTION_TERMINATION, "DC"),
];

impl ResponseFlags {
    pub const NONE: Self = Self(0);
    pub const FAILED_LOCAL_HEALTH_CHECK: Self = Self(1);
    pub const NO_HEALTHY_UPSTREAM: Self = Self(1 << 1);
    pub const UPSTREAM_REQUEST_TIMEOUT: Self = Self(1 << 2);
    pub const LOCAL_RESET: Self = Self(1 << 3);
    pub const UPSTREAM_REMOTE_RESET: Self = Self(1 << 4);
    pub const UPSTREAM_CONNECTION_FAILURE: Self = Self(1 << 5);
    pub const UPSTREAM_CONNECTION_TERMINATION: Self = Self(1 << 6);
    pub const UPSTREAM_OVERFLOW: Self = Self(1 << 7);
    pub const NO_ROUTE_FOUND: Self = Self(1 << 8);
    pub const UPSTREAM_RETRY_LIMIT_EXCEEDED: Self = Self(1 << 9);
    pub const DOWNSTREAM_CONNECTION_TERMINATION: Self = Self(1 << 10);
    /// `NC`: the route's cluster does not exist.
    pub const NO_CLUSTER_FOUND: Self = Self(1 << 11);
    /// `UPE`: the upstream broke the protocol.
    pub const UPSTREAM_PROTOCOL_ERROR: Self = Self(1 << 12);
    /// `DI`: the fault filter delayed the request.
    pub const DELAY_INJECTED: Self = Self(1 << 13);
    /// `FI`: the fault filter aborted the request.
    pub const FAULT_INJECTED: Self = Self(1 << 14);
    /// `RL`: a rate limit filter refused the request.
    pub const RATE_LIMITED: Self = Self(1 << 15);
    /// `UAEX`: the external authorization service denied the request.
    pub const UNAUTHORIZED_EXTERNAL_SERVICE: Self = Self(1 << 16);
    /// `RLSE`: the rate limit service failed and the filter denies on failure.
    pub const RATE_LIMIT_SERVICE_ERROR: Self = Self(1 << 17);
    /// `DPE`: the downstream request broke the protocol (a path that cannot be
    /// normalized, an upgrade that is not allowed).
    pub const DOWNSTREAM_PROTOCOL_ERROR: Self = Self(1 << 18);
    /// `OM`: the overload manager refused the request.
    pub const OVERLOAD_MANAGER: Self = Self(1 << 19);

    pub fn insert(&mut self, other: Self) {
        self.0 |= other.0;
    }

    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The flag a local reply stands for.
    pub fn for_local_reply(reply: &LocalReply) -> Self {
        match reply {
            LocalReply::NoRoute => Self::NO_ROUTE_FOUND,
            LocalReply::ClusterNotFound(_) => Self::NO_CLUSTER_FOUND,
            LocalReply::NoHealthyUpstream => Self::NO_HEALTHY_UPSTREAM,
            LocalReply::UpstreamTimeout => Self::UPSTREAM_REQUEST_TIMEOUT,
            LocalReply::Overflow => Self::UPSTREAM_OVERFLOW,
            LocalReply::Overloaded => Self::OVERLOAD_MANAGER,
            LocalReply::UpstreamReset { reason, .. } => match reason {
                ResetReason::RemoteConnectionFailure | ResetReason::ConnectionTimeout => {
                    Self::UPSTREAM_CONNECTION_FAILURE
                }
                ResetReason::ConnectionTermination => Self::UPSTREAM_CONNECTION_TERMINATION,
                ResetReason::ProtocolError => Self::UPSTREAM_PROTOCOL_ERROR,
                ResetReason::LocalReset => Self::LOCAL_RESET,
                ResetReason::LocalConnectionFailure => Self::UPSTREAM_CONNECTION_FAILURE,
                ResetReason::Overflow => Self::UPSTREAM_OVERFLOW,
                ResetReason::LocalRefusedStreamReset
                | ResetReason::RemoteReset
                | ResetReason::RemoteRefusedStreamReset => Self::UPSTREAM_REMOTE_RESET,
            },
        }
    }
}

/// `%RESPONSE_FLAGS_LONG%`: each short name's long one.
const LONG_NAMES: [(&str, &str); 20] = [
    ("LH", "FailedLocalHealthCheck"),
    ("UH", "NoHealthyUpstream"),
    ("UT", "UpstreamRequestTimeout"),
    ("LR", "LocalReset"),
    ("UR", "UpstreamRemoteReset"),
    ("UF", "UpstreamConnectionFailure"),
    ("UC", "UpstreamConnectionTermination"),
    ("UO", "UpstreamOverflow"),
    ("NR", "NoRouteFound"),
    ("URX", "UpstreamRetryLimitExceeded"),
    ("DC", "DownstreamConnectionTermination"),
    ("DI", "DelayInjected"),
    ("FI", "FaultInjected"),
    ("RL", "RateLimited"),
    ("UAEX", "UnauthorizedExternalService"),
    ("RLSE", "RateLimitServiceError"),
    ("NC", "NoClusterFound"),
    ("UPE", "UpstreamProtocolError"),
    ("DPE", "DownstreamProtocolError"),
    ("OM", "OverloadManagerTerminated"),
];

impl ResponseFlags {
    /// The flags by their long names (`NoHealthyUpstream,UpstreamRetryLimitExceeded`),
    /// `-` for none.
    pub fn long_names(self) -> String {
        let short = self.to_string();
        if self.is_empty() {
            return short;
        }
        let long: Vec<&str> = short
            .split(',')
            .map(|name| LONG_NAMES.iter().find(|(s, _)| *s == name).map_or(name, |(_, long)| *long))
            .collect();
        long.join(",")
    }
}

impl fmt::Display for ResponseFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("-");
        }
        let extra = [
            (Self::DELAY_INJECTED, "DI"),
            (Self::FAULT_INJECTED, "FI"),
            (Self::RATE_LIMITED, "RL"),
            (Self::UNAUTHORIZED_EXTERNAL_SERVICE, "UAEX"),
            (Self::RATE_LIMIT_SERVICE_ERROR, "RLSE"),
            (Self::NO_CLUSTER_FOUND, "NC"),
            (Self::UPSTREAM_PROTOCOL_ERROR, "UPE"),
            (Self::DOWNSTREAM_PROTOCOL_ERROR, "DPE"),
            (Self::OVERLOAD_MANAGER, "OM"),
        ];
        let mut first = true;
        for (flag, name) in NAMES.iter().chain(extra.iter()) {
            if self.contains(*flag) {
                if !first {
                    f.write_str(",")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_like_envoy() {
        assert_eq!(ResponseFlags::NONE.to_string(), "-");
        let mut flags = ResponseFlags::UPSTREAM_CONNECTION_FAILURE;
        flags.insert(ResponseFlags::UPSTREAM_RETRY_LIMIT_EXCEEDED);
        assert_eq!(flags.to_string(), "UF,URX");
        let timeout = ResponseFlags::for_local_reply(&LocalReply::UpstreamTimeout);
        assert_eq!(timeout.to_string(), "UT");
        assert_eq!(ResponseFlags::for_local_reply(&LocalReply::NoHealthyUpstream).to_string(), "UH");
    }
}
