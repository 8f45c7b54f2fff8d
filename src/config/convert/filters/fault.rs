//! `envoy.extensions.filters.http.fault.v3.HTTPFault` → [`HttpFault`].

use http::StatusCode;

use super::super::common;
use super::super::matchers::header_matcher;
use super::fractional_percent::{ignore_runtime_key, opt_fractional_percent};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::fault::{AbortKind, DelayKind, FaultAbort, FaultDelay, HttpFault};
use crate::pb::envoy::extensions::filters::common::fault::v3 as common_fault;
use crate::pb::envoy::extensions::filters::http::fault::v3 as proto;
use crate::pb::google::protobuf::Any;

pub const TYPE: &str = "envoy.extensions.filters.http.fault.v3.HTTPFault";

pub fn http_fault(any: &Any, warnings: &mut Warnings) -> Result<HttpFault> {
    let proto::HttpFault {
        delay,
        abort,
        upstream_cluster,
        headers,
        downstream_nodes,
        max_active_faults,
        response_rate_limit,
        delay_percent_runtime,
        abort_percent_runtime,
        delay_duration_runtime,
        abort_http_status_runtime,
        max_active_faults_runtime,
        response_rate_limit_percent_runtime,
        abort_grpc_status_runtime,
        disable_downstream_cluster_stats,
        filter_metadata,
    } = common::unpack::<proto::HttpFault>(any)?;
    if response_rate_limit.is_some() {
        return Err(ConfigError::new("response_rate_limit", "throttling response bodies is not supported"));
    }
    for (key, field) in [
        (&delay_percent_runtime, "delay_percent_runtime"),
        (&abort_percent_runtime, "abort_percent_runtime"),
        (&delay_duration_runtime, "delay_duration_runtime"),
        (&abort_http_status_runtime, "abort_http_status_runtime"),
        (&abort_grpc_status_runtime, "abort_grpc_status_runtime"),
        (&max_active_faults_runtime, "max_active_faults_runtime"),
        (&response_rate_limit_percent_runtime, "response_rate_limit_percent_runtime"),
    ] {
        ignore_runtime_key(key, field, warnings);
    }
    if filter_metadata.is_some() {
        warnings.ignored("filter_metadata", "only emitted as dynamic metadata for access logs");
    }
    let headers = headers
        .into_iter()
        .enumerate()
        .map(|(i, h)| header_matcher(h, warnings).map_err(|e| e.at(format!("headers[{i}]"))))
        .collect::<Result<_>>()?;
    Ok(HttpFault {
        delay: delay.map(|d| fault_delay(&d)).transpose().map_err(|e| e.at("delay"))?,
        abort: abort.map(fault_abort).transpose().map_err(|e| e.at("abort"))?,
        upstream_cluster,
        headers,
        downstream_nodes,
        max_active_faults: max_active_faults.map(|m| u64::from(m.value)),
        disable_downstream_cluster_stats,
    })
}

fn fault_delay(proto: &common_fault::FaultDelay) -> Result<FaultDelay> {
    use common_fault::fault_delay::FaultDelaySecifier as S;
    let common_fault::FaultDelay { percentage, fault_delay_secifier } = proto;
    let kind = match fault_delay_secifier {
        Some(S::FixedDelay(d)) => DelayKind::Fixed(common::duration(d).map_err(|e| e.at("fixed_delay"))?),
        Some(S::HeaderDelay(_)) => DelayKind::Header,
        None => return Err(ConfigError::new("fixed_delay", "one of fixed_delay and header_delay is required")),
    };
    Ok(FaultDelay { kind, percentage: opt_fractional_percent(percentage, "percentage")? })
}

fn fault_abort(proto: proto::FaultAbort) -> Result<FaultAbort> {
    use proto::fault_abort::ErrorType as E;
    let proto::FaultAbort { percentage, response_body, error_type } = proto;
    let kind = match error_type {
        // Envoy's validation: [200, 600).
        Some(E::HttpStatus(code)) => AbortKind::Http(
            u16::try_from(code)
                .ok()
                .filter(|c| (200..600).contains(c))
                .and_then(|c| StatusCode::from_u16(c).ok())
                .ok_or_else(|| ConfigError::new("http_status", format!("{code} is not in [200, 600)")))?,
        ),
        Some(E::GrpcStatus(code)) => AbortKind::Grpc(code),
        Some(E::HeaderAbort(_)) => AbortKind::Header,
        None => {
            return Err(ConfigError::new(
                "http_status",
                "one of http_status, grpc_status and header_abort is required",
            ));
        }
    };
    Ok(FaultAbort { kind, percentage: opt_fractional_percent(&percentage, "percentage")?, body: response_body })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::filters::fractional_percent::FractionalPercent;
    use crate::pb::envoy::r#type::v3 as types;

    fn any(message: &proto::HttpFault) -> Any {
        Any { type_url: format!("type.googleapis.com/{TYPE}"), value: prost::Message::encode_to_vec(message) }
    }

    fn abort(error_type: proto::fault_abort::ErrorType) -> Option<proto::FaultAbort> {
        Some(proto::FaultAbort {
            percentage: Some(types::FractionalPercent { numerator: 100, denominator: 0 }),
            response_body: String::new(),
            error_type: Some(error_type),
        })
    }

    #[test]
    fn converts_abort_and_delay() {
        let message = proto::HttpFault {
            abort: abort(proto::fault_abort::ErrorType::HttpStatus(503)),
            delay: Some(common_fault::FaultDelay {
                percentage: None,
                fault_delay_secifier: Some(common_fault::fault_delay::FaultDelaySecifier::HeaderDelay(
                    Default::default(),
                )),
            }),
            abort_percent_runtime: "fault.abort".into(),
            ..Default::default()
        };
        let mut warnings = Warnings::new();
        let fault = http_fault(&any(&message), &mut warnings).unwrap();
        let abort = fault.abort.unwrap();
        assert_eq!(abort.kind, AbortKind::Http(StatusCode::SERVICE_UNAVAILABLE));
        assert_eq!(abort.percentage, FractionalPercent::ALL);
        let delay = fault.delay.unwrap();
        assert_eq!(delay.kind, DelayKind::Header);
        // An absent percentage is 0%.
        assert_eq!(delay.percentage, FractionalPercent::NONE);
        assert_eq!(warnings.items()[0].path, "abort_percent_runtime");
    }

    #[test]
    fn refusals_name_their_field() {
        let cases = [
            (
                proto::HttpFault { response_rate_limit: Some(Default::default()), ..Default::default() },
                "response_rate_limit.limit_type",
            ),
            (
                proto::HttpFault { abort: abort(proto::fault_abort::ErrorType::HttpStatus(100)), ..Default::default() },
                "abort.http_status",
            ),
            (
                proto::HttpFault {
                    abort: Some(proto::FaultAbort { error_type: None, ..Default::default() }),
                    ..Default::default()
                },
                "abort.error_type", // a required oneof
            ),
            (proto::HttpFault { delay: Some(Default::default()), ..Default::default() }, "delay.fault_delay_secifier"),
        ];
        for (message, path) in cases {
            let error = http_fault(&any(&message), &mut Warnings::new()).unwrap_err();
            assert_eq!(error.path(), path, "{error}");
        }
    }
}
