//! `envoy.config.core.v3.HealthCheck` → [`HealthCheck`]: HTTP, TCP and gRPC checkers.

// Exhaustive destructuring names deprecated fields too; several are what Istio still sends.
#![allow(deprecated)]

use std::ops::Range;
use std::time::Duration;

use crate::config::cluster::{GrpcHealthCheck, HealthCheck, HealthChecker, HttpHealthCheck, TcpHealthCheck};
use crate::config::convert::common;
use crate::config::error::{AtField, ConfigError, Result, Warnings};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::r#type::v3 as types;
use crate::pb::google::protobuf as gpb;

use core::health_check::{self as hc, HealthChecker as Checker};

pub(super) fn health_check(proto: core::HealthCheck, warnings: &mut Warnings) -> Result<HealthCheck> {
    let core::HealthCheck {
        timeout,
        interval,
        initial_jitter,
        interval_jitter,
        interval_jitter_percent,
        unhealthy_threshold,
        healthy_threshold,
        alt_port,
        reuse_connection,
        no_traffic_interval,
        no_traffic_healthy_interval,
        unhealthy_interval,
        unhealthy_edge_interval,
        healthy_edge_interval,
        event_log_path,
        event_logger,
        event_service,
        always_log_health_check_failures,
        always_log_health_check_success,
        tls_options,
        transport_socket_match_criteria,
        health_checker,
    } = proto;
    if tls_options.is_some() {
        return Err(ConfigError::new("tls_options", "health check ALPN overrides are not supported"));
    }
    if transport_socket_match_criteria.is_some() {
        return Err(ConfigError::new("transport_socket_match_criteria", "not supported"));
    }
    let logging = !event_log_path.is_empty()
        || !event_logger.is_empty()
        || event_service.is_some()
        || always_log_health_check_failures
        || always_log_health_check_success;
    if logging {
        warnings.ignored("event_logger", "health check event logs are not written; results show in stats and logs");
    }
    let interval = required_positive(&interval, "interval")?;
    let unhealthy_interval = optional_positive(&unhealthy_interval, "unhealthy_interval")?.unwrap_or(interval);
    let no_traffic_interval =
        optional_positive(&no_traffic_interval, "no_traffic_interval")?.unwrap_or(Duration::from_secs(60));
    let checker = match health_checker {
        Some(Checker::HttpHealthCheck(http)) => HealthChecker::Http(
            warnings.within("http_health_check", |w| http_check(http, w)).at_field("http_health_check")?,
        ),
        Some(Checker::TcpHealthCheck(tcp)) => HealthChecker::Tcp(tcp_check(tcp).at_field("tcp_health_check")?),
        Some(Checker::GrpcHealthCheck(grpc)) => HealthChecker::Grpc(grpc_check(grpc).at_field("grpc_health_check")?),
        Some(Checker::CustomHealthCheck(custom)) => {
            return Err(ConfigError::new(
                "custom_health_check",
                format!("custom health checker {:?} is not supported", custom.name),
            ));
        }
        None => return Err(ConfigError::new("health_checker", "is required")),
    };
    Ok(HealthCheck {
        timeout: required_positive(&timeout, "timeout")?,
        interval,
        initial_jitter: common::opt_duration(&initial_jitter, "initial_jitter")?.unwrap_or_default(),
        interval_jitter: common::opt_duration(&interval_jitter, "interval_jitter")?.unwrap_or_default(),
        interval_jitter_percent,
        unhealthy_threshold: required_count(&unhealthy_threshold, "unhealthy_threshold")?,
        healthy_threshold: required_count(&healthy_threshold, "healthy_threshold")?,
        alt_port: alt_port
            .map(|p| {
                u16::try_from(p.value).map_err(|_| ConfigError::new("alt_port", format!("{} is not a port", p.value)))
            })
            .transpose()?,
        reuse_connection: common::bool_or(&reuse_connection, true),
        no_traffic_interval,
        no_traffic_healthy_interval: optional_positive(&no_traffic_healthy_interval, "no_traffic_healthy_interval")?
            .unwrap_or(no_traffic_interval),
        unhealthy_interval,
        unhealthy_edge_interval: optional_positive(&unhealthy_edge_interval, "unhealthy_edge_interval")?
            .unwrap_or(unhealthy_interval),
        healthy_edge_interval: optional_positive(&healthy_edge_interval, "healthy_edge_interval")?.unwrap_or(interval),
        checker,
    })
}

fn http_check(proto: hc::HttpHealthCheck, warnings: &mut Warnings) -> Result<HttpHealthCheck> {
    let hc::HttpHealthCheck {
        host,
        path,
        send,
        receive,
        response_buffer_size,
        request_headers_to_add,
        request_headers_to_remove,
        expected_statuses,
        retriable_statuses,
        codec_client_type,
        service_name_matcher,
        method,
    } = proto;
    if path.is_empty() {
        return Err(ConfigError::new("path", "must not be empty"));
    }
    if send.is_some() || !receive.is_empty() {
        return Err(ConfigError::new("send", "HTTP health check payloads are not supported"));
    }
    if service_name_matcher.is_some() {
        return Err(ConfigError::new("service_name_matcher", "not supported"));
    }
    if response_buffer_size.is_some() {
        warnings.ignored("response_buffer_size", "only used with receive payloads, which are refused");
    }
    let http2 = match types::CodecClientType::try_from(codec_client_type) {
        Ok(types::CodecClientType::Http1) => false,
        Ok(types::CodecClientType::Http2) => true,
        _ => return Err(ConfigError::new("codec_client_type", "only HTTP1 and HTTP2 are supported")),
    };
    let method = match core::RequestMethod::try_from(method) {
        Ok(core::RequestMethod::MethodUnspecified | core::RequestMethod::Get) => http::Method::GET,
        Ok(core::RequestMethod::Head) => http::Method::HEAD,
        Ok(core::RequestMethod::Post) => http::Method::POST,
        Ok(core::RequestMethod::Put) => http::Method::PUT,
        Ok(core::RequestMethod::Delete) => http::Method::DELETE,
        Ok(core::RequestMethod::Options) => http::Method::OPTIONS,
        Ok(core::RequestMethod::Trace) => http::Method::TRACE,
        Ok(core::RequestMethod::Patch) => http::Method::PATCH,
        _ => return Err(ConfigError::new("method", "CONNECT and unknown methods cannot health check")),
    };
    let expected_statuses = match status_ranges(expected_statuses).at_field("expected_statuses")? {
        ranges if ranges.is_empty() => std::iter::once(200..201).collect(),
        ranges => ranges,
    };
    Ok(HttpHealthCheck {
        host,
        path,
        method,
        http2,
        expected_statuses,
        retriable_statuses: status_ranges(retriable_statuses).at_field("retriable_statuses")?,
        request_headers_to_add: headers(request_headers_to_add).at_field("request_headers_to_add")?,
        request_headers_to_remove,
    })
}

fn tcp_check(proto: hc::TcpHealthCheck) -> Result<TcpHealthCheck> {
    let hc::TcpHealthCheck { send, receive, proxy_protocol_config } = proto;
    if proxy_protocol_config.is_some() {
        return Err(ConfigError::new("proxy_protocol_config", "PROXY protocol is not supported"));
    }
    let send = send.map(payload).transpose().at_field("send")?;
    let receive = receive
        .into_iter()
        .enumerate()
        .map(|(i, p)| payload(p).at_field(format_args!("receive[{i}]")))
        .collect::<Result<Vec<_>>>()?;
    Ok(TcpHealthCheck { send, receive })
}

fn grpc_check(proto: hc::GrpcHealthCheck) -> Result<GrpcHealthCheck> {
    let hc::GrpcHealthCheck { service_name, authority, initial_metadata } = proto;
    Ok(GrpcHealthCheck {
        service_name,
        authority,
        initial_metadata: headers(initial_metadata).at_field("initial_metadata")?,
    })
}

/// A payload; `text` is hex, as Envoy documents it (`"000000FF"`).
fn payload(proto: hc::Payload) -> Result<Vec<u8>> {
    use hc::payload::Payload as P;
    match proto.payload {
        Some(P::Binary(bytes)) => Ok(bytes),
        Some(P::Text(hex)) => decode_hex(&hex).ok_or_else(|| ConfigError::new("text", "is not hex")),
        None => Err(ConfigError::new("", "payload is empty")),
    }
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.is_empty() || !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| hex.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok())).collect()
}

fn status_ranges(ranges: Vec<types::Int64Range>) -> Result<Vec<Range<u16>>> {
    ranges
        .into_iter()
        .enumerate()
        .map(|(i, types::Int64Range { start, end })| {
            if !(100..600).contains(&start) || !(101..=600).contains(&end) || start >= end {
                return Err(ConfigError::new(format!("[{i}]"), format!("[{start}, {end}) is not a range of statuses")));
            }
            // In range by the check above.
            Ok(start as u16..end as u16)
        })
        .collect()
}

fn headers(options: Vec<core::HeaderValueOption>) -> Result<Vec<(String, String)>> {
    options
        .into_iter()
        .enumerate()
        .map(|(i, core::HeaderValueOption { header, append: _, append_action: _, keep_empty_value: _ })| {
            // A probe starts with no headers, so appending and overwriting are the same.
            let core::HeaderValue { key, value, raw_value } =
                header.ok_or_else(|| ConfigError::new(format!("[{i}].header"), "is required"))?;
            let value = if raw_value.is_empty() {
                value
            } else {
                String::from_utf8(raw_value)
                    .map_err(|_| ConfigError::new(format!("[{i}].header.raw_value"), "is not UTF-8"))?
            };
            Ok((key, value))
        })
        .collect()
}

fn required_positive(value: &Option<gpb::Duration>, field: &str) -> Result<Duration> {
    optional_positive(value, field)?.ok_or_else(|| ConfigError::new(field, "is required"))
}

fn optional_positive(value: &Option<gpb::Duration>, field: &str) -> Result<Option<Duration>> {
    match common::opt_duration(value, field)? {
        Some(d) if d.is_zero() => Err(ConfigError::new(field, "must be greater than 0")),
        other => Ok(other),
    }
}

fn required_count(value: &Option<gpb::UInt32Value>, field: &str) -> Result<u32> {
    value.as_ref().map(|v| v.value).ok_or_else(|| ConfigError::new(field, "is required"))
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::pb::json;
    use serde_json::json;

    fn convert(value: serde_json::Value) -> Result<HealthCheck> {
        let (proto, dropped) = json::from_value("envoy.config.core.v3.HealthCheck", value).unwrap();
        assert!(dropped.is_empty(), "{dropped:?}");
        health_check(proto, &mut Warnings::new())
    }

    fn base(checker: serde_json::Value) -> serde_json::Value {
        let mut value = json!({"timeout": "1s", "interval": "5s", "unhealthy_threshold": 3, "healthy_threshold": 2});
        if let (Some(map), Some(extra)) = (value.as_object_mut(), checker.as_object()) {
            map.extend(extra.clone());
        }
        value
    }

    #[test]
    fn http_check_gets_defaults() {
        let check = convert(base(json!({"http_health_check": {"path": "/healthz", "host": "svc"}}))).unwrap();
        assert_eq!(check.interval, Duration::from_secs(5));
        assert_eq!(check.unhealthy_interval, Duration::from_secs(5));
        assert_eq!(check.no_traffic_interval, Duration::from_secs(60));
        assert!(check.reuse_connection);
        let HealthChecker::Http(http) = check.checker else { panic!("not http") };
        assert_eq!(http.path, "/healthz");
        assert_eq!(http.expected_statuses, vec![200..201]);
        assert_eq!(http.method, http::Method::GET);
    }

    #[test]
    fn tcp_and_grpc_checks_convert() {
        let check =
            convert(base(json!({"tcp_health_check": {"send": {"text": "0001ff"}, "receive": [{"text": "AB"}]}})));
        let HealthChecker::Tcp(tcp) = check.unwrap().checker else { panic!("not tcp") };
        assert_eq!(tcp.send, Some(vec![0, 1, 255]));
        assert_eq!(tcp.receive, vec![vec![0xab]]);
        let check = convert(base(json!({"grpc_health_check": {"service_name": "echo"}}))).unwrap();
        assert!(matches!(check.checker, HealthChecker::Grpc(ref g) if g.service_name == "echo"));
    }

    #[test]
    fn bad_and_unsupported_checks_are_refused_with_their_path() {
        let err = convert(base(
            json!({"http_health_check": {"path": "/", "expected_statuses": [{"start": 200, "end": 700}]}}),
        ));
        assert_eq!(err.unwrap_err().path(), "http_health_check.expected_statuses[0]");
        let err = convert(base(json!({"custom_health_check": {"name": "envoy.health_checkers.redis"}})));
        assert_eq!(err.unwrap_err().path(), "custom_health_check");
        let err = convert(
            json!({"interval": "5s", "unhealthy_threshold": 1, "healthy_threshold": 1, "tcp_health_check": {}}),
        );
        assert_eq!(err.unwrap_err().path(), "timeout");
    }
}
