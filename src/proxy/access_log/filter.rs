//! Whether a logger's filter ([`AccessLogFilter`]) passes a request, as Envoy decides it.

use super::PendingLog;
use crate::config::access_log::AccessLogFilter;
use crate::proxy::filters::rbac::engine::metadata_value;

pub fn passes(filter: &AccessLogFilter, record: &PendingLog) -> bool {
    match filter {
        AccessLogFilter::StatusCode(comparison) => comparison.passes(u64::from(record.response_code)),
        AccessLogFilter::Duration(comparison) => {
            comparison.passes(u64::try_from(record.duration.as_millis()).unwrap_or(u64::MAX))
        }
        AccessLogFilter::NotHealthCheck => !record.details.as_deref().is_some_and(|d| d.starts_with("health_check")),
        AccessLogFilter::Traceable => record.traced,
        AccessLogFilter::Runtime { percent, independent } => {
            let denominator = u64::from(percent.denominator);
            let from_id = (!independent).then(|| request_id_draw(record, denominator)).flatten();
            percent.includes(from_id.unwrap_or_else(rand::random::<u64>))
        }
        AccessLogFilter::And(filters) => filters.iter().all(|f| passes(f, record)),
        AccessLogFilter::Or(filters) => filters.iter().any(|f| passes(f, record)),
        AccessLogFilter::Header(matcher) => matcher.matches(record.request_header(&matcher.name).as_deref()),
        AccessLogFilter::ResponseFlag(flags) => {
            if flags.is_empty() {
                return !record.flags.is_empty();
            }
            let set = record.flags.to_string();
            set.split(',').any(|name| flags.iter().any(|f| f == name))
        }
        AccessLogFilter::GrpcStatus { statuses, exclude } => {
            let found = statuses.contains(&grpc_status(record));
            found != *exclude
        }
        AccessLogFilter::Metadata { matcher, match_if_key_not_found } => {
            match metadata_value(matcher, record.metadata.as_ref()) {
                Some(_) => {
                    crate::proxy::filters::rbac::engine::metadata_matcher_matches(matcher, record.metadata.as_ref())
                }
                None => *match_if_key_not_found,
            }
        }
    }
}

/// Envoy's stable draw: the first 8 hex digits of a UUID `x-request-id`, modulo the
/// denominator, so every proxy on the path samples the same requests.
fn request_id_draw(record: &PendingLog, denominator: u64) -> Option<u64> {
    let id = record.request_header("x-request-id")?;
    let prefix = id.get(..8)?;
    let value = u64::from_str_radix(prefix, 16).ok()?;
    value.checked_rem(denominator)
}

/// `grpc-status` from the trailers, then the headers, else mapped from the HTTP status
/// as Envoy maps it (`UNKNOWN` for anything else).
fn grpc_status(record: &PendingLog) -> u32 {
    let explicit = record.trailer("grpc-status").or_else(|| record.response_header("grpc-status"));
    if let Some(status) = explicit.and_then(|s| s.trim().parse().ok()) {
        return status;
    }
    match record.response_code {
        400 => 13,
        401 => 16,
        403 => 7,
        404 => 12,
        429 | 502 | 503 | 504 => 14,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::access_log::filter::{Comparison, ComparisonOp};
    use crate::proxy::access_log::DownstreamLogInfo;
    use crate::proxy::response_flags::ResponseFlags;
    use std::time::{Duration, Instant, SystemTime};

    fn record(status: u16, flags: ResponseFlags, request_id: &str) -> PendingLog {
        let request = http::Request::get("/a").header("x-request-id", request_id).header("x-debug", "1");
        let (parts, ()) = request.body(()).unwrap_or_default().into_parts();
        let downstream = DownstreamLogInfo {
            local: ([127, 0, 0, 1], 80).into(),
            remote: ([127, 0, 0, 1], 1).into(),
            server_name: None,
            peer_uri_san: None,
            local_uri_san: None,
        };
        let mut log = PendingLog::new(Vec::new().into(), SystemTime::now(), Instant::now(), &parts, downstream);
        log.respond(status, &http::HeaderMap::new(), flags);
        log.duration = Duration::from_millis(30);
        log
    }

    #[test]
    fn comparisons_flags_and_combinations() {
        let errors = AccessLogFilter::StatusCode(Comparison { op: ComparisonOp::Ge, value: 500 });
        let ok = record(200, ResponseFlags::NONE, "x");
        let failed = record(503, ResponseFlags::NO_HEALTHY_UPSTREAM, "x");
        assert!(!passes(&errors, &ok) && passes(&errors, &failed));
        let slow = AccessLogFilter::Duration(Comparison { op: ComparisonOp::Ge, value: 31 });
        assert!(!passes(&slow, &ok));
        let uh = AccessLogFilter::ResponseFlag(vec!["UH".into()]);
        let any = AccessLogFilter::ResponseFlag(Vec::new());
        assert!(passes(&uh, &failed) && passes(&any, &failed) && !passes(&any, &ok));
        let either = AccessLogFilter::Or(vec![errors.clone(), slow.clone()]);
        let both = AccessLogFilter::And(vec![errors, uh]);
        assert!(passes(&either, &failed) && !passes(&either, &ok) && passes(&both, &failed));
        assert!(passes(&AccessLogFilter::NotHealthCheck, &ok) && !passes(&AccessLogFilter::Traceable, &ok));
    }

    #[test]
    fn grpc_status_maps_http_statuses() {
        let unavailable = AccessLogFilter::GrpcStatus { statuses: vec![14], exclude: false };
        assert!(passes(&unavailable, &record(503, ResponseFlags::NONE, "x")));
        assert!(!passes(&unavailable, &record(200, ResponseFlags::NONE, "x")));
        let not_unknown = AccessLogFilter::GrpcStatus { statuses: vec![2], exclude: true };
        assert!(!passes(&not_unknown, &record(200, ResponseFlags::NONE, "x")));
    }

    #[test]
    fn runtime_filter_draws_from_the_request_id() {
        use crate::config::filters::fractional_percent::FractionalPercent;
        let half = AccessLogFilter::Runtime {
            percent: FractionalPercent { numerator: 50, denominator: 100 },
            independent: false,
        };
        // 0x00000031 = 49 (in), 0x00000032 = 50 (out).
        assert!(passes(&half, &record(200, ResponseFlags::NONE, "00000031-0000-4000-8000-000000000000")));
        assert!(!passes(&half, &record(200, ResponseFlags::NONE, "00000032-0000-4000-8000-000000000000")));
    }
}
