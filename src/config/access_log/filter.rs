//! `envoy.config.accesslog.v3.AccessLogFilter`: which requests a logger writes.

use crate::config::filters::fractional_percent::FractionalPercent;
use crate::config::filters::rbac::MetadataMatcher;
use crate::config::matcher::HeaderMatcher;

/// A filter; a logger with one writes only the requests it passes.
#[derive(Debug, Clone, PartialEq)]
pub enum AccessLogFilter {
    /// `status_code_filter`: the response code (0 when none) against a value.
    StatusCode(Comparison),
    /// `duration_filter`: the request's whole duration in milliseconds.
    Duration(Comparison),
    /// `not_health_check_filter`: requests the health check filter did not answer.
    NotHealthCheck,
    /// `traceable_filter`: requests that carry a sampled span.
    Traceable,
    /// `runtime_filter`: a share of requests (the default share: there is no runtime),
    /// drawn from the `x-request-id` unless `use_independent_randomness`.
    Runtime {
        percent: FractionalPercent,
        independent: bool,
    },
    And(Vec<AccessLogFilter>),
    Or(Vec<AccessLogFilter>),
    /// `header_filter`: a request header matcher.
    Header(HeaderMatcher),
    /// `response_flag_filter`: any of these flags (short names), or any flag when empty.
    ResponseFlag(Vec<String>),
    /// `grpc_status_filter`: the gRPC status (from `grpc-status`, else mapped from the
    /// HTTP status) is one of `statuses`, or is not with `exclude`.
    GrpcStatus {
        statuses: Vec<u32>,
        exclude: bool,
    },
    /// `metadata_filter`: the matcher on a dynamic metadata value that is set, else
    /// `match_if_key_not_found` (default true).
    Metadata {
        matcher: MetadataMatcher,
        match_if_key_not_found: bool,
    },
}

/// `ComparisonFilter`, with the runtime value's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comparison {
    pub op: ComparisonOp,
    pub value: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComparisonOp {
    Eq,
    Ge,
    Le,
    Ne,
}

impl Comparison {
    pub fn passes(&self, actual: u64) -> bool {
        match self.op {
            ComparisonOp::Eq => actual == self.value,
            ComparisonOp::Ge => actual >= self.value,
            ComparisonOp::Le => actual <= self.value,
            ComparisonOp::Ne => actual != self.value,
        }
    }
}

/// The short names `response_flag_filter` accepts (Envoy's list).
pub const RESPONSE_FLAG_NAMES: [&str; 28] = [
    "LH", "UH", "UT", "LR", "UR", "UF", "UC", "UO", "NR", "DI", "FI", "RL", "UAEX", "RLSE", "DC", "URX", "SI", "IH",
    "DPE", "UMSDR", "RFCF", "NFCF", "DT", "UPE", "NC", "OM", "DF", "DO",
];
