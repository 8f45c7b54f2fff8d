//! `access_log[].filter` → [`AccessLogFilter`]. The filters that need a runtime take
//! their default values (Outrider has no runtime); `extension_filter` (CEL and others)
//! and `log_type_filter` are refused with their path.

use super::super::filters::fractional_percent::fractional_percent;
use super::super::filters::rbac::policy::metadata_matcher;
use super::super::matchers::header_matcher;
use crate::config::access_log::filter::{AccessLogFilter, Comparison, ComparisonOp, RESPONSE_FLAG_NAMES};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::fractional_percent::FractionalPercent;
use crate::pb::envoy::config::accesslog::v3 as proto;
use proto::access_log_filter::FilterSpecifier as F;

pub fn access_log_filter(filter: proto::AccessLogFilter, warnings: &mut Warnings) -> Result<AccessLogFilter> {
    let Some(specifier) = filter.filter_specifier else {
        return Err(ConfigError::new("", "an access log filter needs a filter_specifier"));
    };
    match specifier {
        F::StatusCodeFilter(f) => {
            Ok(AccessLogFilter::StatusCode(comparison(f.comparison).map_err(|e| e.at("status_code_filter"))?))
        }
        F::DurationFilter(f) => {
            Ok(AccessLogFilter::Duration(comparison(f.comparison).map_err(|e| e.at("duration_filter"))?))
        }
        F::NotHealthCheckFilter(_) => Ok(AccessLogFilter::NotHealthCheck),
        F::TraceableFilter(_) => Ok(AccessLogFilter::Traceable),
        F::RuntimeFilter(f) => {
            // Envoy's default when percent_sampled is unset: 0%.
            let percent = match &f.percent_sampled {
                Some(p) => fractional_percent(p).map_err(|e| e.at("runtime_filter.percent_sampled"))?,
                None => FractionalPercent::NONE,
            };
            Ok(AccessLogFilter::Runtime { percent, independent: f.use_independent_randomness })
        }
        F::AndFilter(f) => Ok(AccessLogFilter::And(filters(f.filters, "and_filter", warnings)?)),
        F::OrFilter(f) => Ok(AccessLogFilter::Or(filters(f.filters, "or_filter", warnings)?)),
        F::HeaderFilter(f) => {
            let header =
                f.header.ok_or_else(|| ConfigError::new("header_filter.header", "a header filter needs a header"))?;
            let matcher = warnings
                .within("header_filter.header", |w| header_matcher(header, w))
                .map_err(|e| e.at("header_filter.header"))?;
            Ok(AccessLogFilter::Header(matcher))
        }
        F::ResponseFlagFilter(f) => {
            for (i, flag) in f.flags.iter().enumerate() {
                if !RESPONSE_FLAG_NAMES.contains(&flag.as_str()) {
                    let path = format!("response_flag_filter.flags[{i}]");
                    return Err(ConfigError::new(path, format!("{flag} is not a response flag")));
                }
            }
            Ok(AccessLogFilter::ResponseFlag(f.flags))
        }
        F::GrpcStatusFilter(f) => {
            let mut statuses = Vec::with_capacity(f.statuses.len());
            for (i, status) in f.statuses.iter().enumerate() {
                let status = u32::try_from(*status).ok().filter(|s| *s <= 16).ok_or_else(|| {
                    ConfigError::new(format!("grpc_status_filter.statuses[{i}]"), "not a gRPC status")
                })?;
                statuses.push(status);
            }
            Ok(AccessLogFilter::GrpcStatus { statuses, exclude: f.exclude })
        }
        F::MetadataFilter(f) => {
            let matcher = f.matcher.ok_or_else(|| {
                ConfigError::new("metadata_filter.matcher", "a metadata filter without a matcher is not supported")
            })?;
            let matcher = warnings
                .within("metadata_filter.matcher", |w| metadata_matcher(matcher, w))
                .map_err(|e| e.at("metadata_filter.matcher"))?;
            let match_if_key_not_found = f.match_if_key_not_found.is_none_or(|b| b.value);
            Ok(AccessLogFilter::Metadata { matcher, match_if_key_not_found })
        }
        F::ExtensionFilter(f) => Err(ConfigError::new(
            "extension_filter",
            format!("access log filter extension {} is not supported", f.name),
        )),
        F::LogTypeFilter(_) => Err(ConfigError::new("log_type_filter", "log type filters are not supported")),
    }
}

fn filters(list: Vec<proto::AccessLogFilter>, field: &str, warnings: &mut Warnings) -> Result<Vec<AccessLogFilter>> {
    list.into_iter()
        .enumerate()
        .map(|(i, f)| {
            let path = format!("{field}.filters[{i}]");
            warnings.within(&path, |w| access_log_filter(f, w)).map_err(|e| e.at(&path))
        })
        .collect()
}

fn comparison(proto: Option<proto::ComparisonFilter>) -> Result<Comparison> {
    let proto = proto.unwrap_or_default();
    let op = match proto::comparison_filter::Op::try_from(proto.op) {
        Ok(proto::comparison_filter::Op::Eq) => ComparisonOp::Eq,
        Ok(proto::comparison_filter::Op::Ge) => ComparisonOp::Ge,
        Ok(proto::comparison_filter::Op::Le) => ComparisonOp::Le,
        Ok(proto::comparison_filter::Op::Ne) => ComparisonOp::Ne,
        Err(_) => return Err(ConfigError::new("comparison.op", "unknown comparison")),
    };
    let value = proto.value.ok_or_else(|| ConfigError::new("comparison.value", "a comparison needs a value"))?;
    Ok(Comparison { op, value: u64::from(value.default_value) })
}
