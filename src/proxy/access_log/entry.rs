//! A request's record as the access log service's `HTTPAccessLogEntry`.

use std::collections::HashMap;
use std::net::SocketAddr;

use super::PendingLog;
use crate::config::access_log::GrpcAccessLog;
use crate::pb::envoy::config::core::v3::{Address, RequestMethod, SocketAddress, address, socket_address};
use crate::pb::envoy::data::accesslog::v3::{
    AccessLogCommon, HttpAccessLogEntry, HttpRequestProperties, HttpResponseProperties, ResponseFlags,
    http_access_log_entry::HttpVersion,
};
use crate::pb::google::protobuf::{Duration as ProtoDuration, Timestamp, UInt32Value};
use crate::proxy::response_flags::ResponseFlags as Flags;

pub fn http_entry(record: &PendingLog, config: &GrpcAccessLog) -> HttpAccessLogEntry {
    let text = |value: Option<std::borrow::Cow<'_, str>>| value.map(|v| v.into_owned()).unwrap_or_default();
    let since = record.start.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let common = AccessLogCommon {
        sample_rate: 1.0,
        downstream_remote_address: Some(socket(record.downstream.remote)),
        downstream_local_address: Some(socket(record.downstream.local)),
        start_time: Some(Timestamp {
            seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(since.subsec_nanos()).unwrap_or(0),
        }),
        duration: Some(duration(record.duration)),
        time_to_last_rx_byte: record.request_duration.map(duration),
        time_to_first_upstream_rx_byte: record.response_duration.map(duration),
        upstream_remote_address: record.upstream_host.as_deref().and_then(|h| h.parse().ok()).map(socket),
        upstream_cluster: record.upstream_cluster.clone().unwrap_or_default(),
        route_name: record.route_name.clone().unwrap_or_default(),
        response_flags: Some(flags(record.flags)),
        ..AccessLogCommon::default()
    };
    let pick = |names: &[String], get: &dyn Fn(&str) -> Option<String>| -> HashMap<String, String> {
        names.iter().filter_map(|n| Some((n.clone(), get(n)?))).collect()
    };
    let request = HttpRequestProperties {
        request_method: RequestMethod::from_str_name(record.method.as_str()).map_or(0, |m| m as i32),
        scheme: record.uri.scheme_str().unwrap_or("http").to_owned(),
        authority: text(record.request_header(":authority")),
        path: text(record.request_header(":path")),
        user_agent: text(record.request_header("user-agent")),
        referer: text(record.request_header("referer")),
        forwarded_for: text(record.request_header("x-forwarded-for")),
        request_id: text(record.request_header("x-request-id")),
        original_path: text(record.request_header("x-envoy-original-path")),
        request_body_bytes: record.bytes_received,
        request_headers: pick(&config.request_headers, &|n| record.request_header(n).map(|v| v.into_owned())),
        ..HttpRequestProperties::default()
    };
    let response = HttpResponseProperties {
        response_code: Some(UInt32Value { value: u32::from(record.response_code) }),
        response_body_bytes: record.bytes_sent,
        response_headers: pick(&config.response_headers, &|n| record.response_header(n).map(|v| v.into_owned())),
        response_trailers: pick(&config.response_trailers, &|n| record.trailer(n).map(|v| v.into_owned())),
        response_code_details: record.details.as_deref().unwrap_or_default().to_owned(),
        ..HttpResponseProperties::default()
    };
    let protocol_version = match record.version {
        http::Version::HTTP_10 => HttpVersion::Http10,
        http::Version::HTTP_2 => HttpVersion::Http2,
        http::Version::HTTP_3 => HttpVersion::Http3,
        _ => HttpVersion::Http11,
    };
    HttpAccessLogEntry {
        common_properties: Some(common),
        protocol_version: protocol_version as i32,
        request: Some(request),
        response: Some(response),
    }
}

fn socket(address: SocketAddr) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: address.ip().to_string(),
            port_specifier: Some(socket_address::PortSpecifier::PortValue(u32::from(address.port()))),
            ..SocketAddress::default()
        })),
    }
}

fn duration(d: std::time::Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

fn flags(f: Flags) -> ResponseFlags {
    ResponseFlags {
        failed_local_healthcheck: f.contains(Flags::FAILED_LOCAL_HEALTH_CHECK),
        no_healthy_upstream: f.contains(Flags::NO_HEALTHY_UPSTREAM),
        upstream_request_timeout: f.contains(Flags::UPSTREAM_REQUEST_TIMEOUT),
        local_reset: f.contains(Flags::LOCAL_RESET),
        upstream_remote_reset: f.contains(Flags::UPSTREAM_REMOTE_RESET),
        upstream_connection_failure: f.contains(Flags::UPSTREAM_CONNECTION_FAILURE),
        upstream_connection_termination: f.contains(Flags::UPSTREAM_CONNECTION_TERMINATION),
        upstream_overflow: f.contains(Flags::UPSTREAM_OVERFLOW),
        no_route_found: f.contains(Flags::NO_ROUTE_FOUND),
        delay_injected: f.contains(Flags::DELAY_INJECTED),
        fault_injected: f.contains(Flags::FAULT_INJECTED),
        rate_limited: f.contains(Flags::RATE_LIMITED),
        rate_limit_service_error: f.contains(Flags::RATE_LIMIT_SERVICE_ERROR),
        downstream_connection_termination: f.contains(Flags::DOWNSTREAM_CONNECTION_TERMINATION),
        upstream_retry_limit_exceeded: f.contains(Flags::UPSTREAM_RETRY_LIMIT_EXCEEDED),
        downstream_protocol_error: f.contains(Flags::DOWNSTREAM_PROTOCOL_ERROR),
        upstream_protocol_error: f.contains(Flags::UPSTREAM_PROTOCOL_ERROR),
        no_cluster_found: f.contains(Flags::NO_CLUSTER_FOUND),
        ..ResponseFlags::default()
    }
}
