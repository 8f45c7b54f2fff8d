//! HTTP/2 and HTTP/1.1 codec options of upstream connections → [`Http2Settings`].
//! Flood limits and parser switches have no counterpart in Outrider's HTTP stack (hyper/h2
//! apply their own) and are recorded as ignored.

// Exhaustive destructuring names deprecated fields too; several are what Istio still sends.
#![allow(deprecated)]

use crate::config::cluster::{Http2Keepalive, Http2Settings};
use crate::config::convert::common;
use crate::config::error::{AtField, ConfigError, Result, Warnings};
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::google::protobuf as gpb;

const WINDOW_RANGE: std::ops::RangeInclusive<u32> = 65_535..=2_147_483_647;

pub(super) fn http2_settings(proto: core::Http2ProtocolOptions, warnings: &mut Warnings) -> Result<Http2Settings> {
    let core::Http2ProtocolOptions {
        hpack_table_size,
        max_concurrent_streams,
        initial_stream_window_size,
        initial_connection_window_size,
        allow_connect,
        allow_metadata,
        max_outbound_frames,
        max_outbound_control_frames,
        max_consecutive_inbound_frames_with_empty_payload,
        max_inbound_priority_frames_per_stream,
        max_inbound_window_update_frames_per_data_frame_sent,
        stream_error_on_invalid_http_messaging,
        override_stream_error_on_invalid_http_message,
        custom_settings_parameters,
        connection_keepalive,
        use_oghttp2_codec,
        max_metadata_size,
        enable_huffman_encoding,
        max_header_field_size_kb,
        disallow_obs_text,
        stream_reset_burst,
        stream_reset_rate,
    } = proto;
    if !custom_settings_parameters.is_empty() {
        return Err(ConfigError::new("custom_settings_parameters", "custom SETTINGS are not supported"));
    }
    let ignored = [
        ("allow_connect", allow_connect, "extended CONNECT is not offered to upstreams"),
        ("allow_metadata", allow_metadata, "METADATA frames are never sent"),
        ("max_outbound_frames", max_outbound_frames.is_some(), FLOOD),
        ("max_outbound_control_frames", max_outbound_control_frames.is_some(), FLOOD),
        (
            "max_consecutive_inbound_frames_with_empty_payload",
            max_consecutive_inbound_frames_with_empty_payload.is_some(),
            FLOOD,
        ),
        ("max_inbound_priority_frames_per_stream", max_inbound_priority_frames_per_stream.is_some(), FLOOD),
        (
            "max_inbound_window_update_frames_per_data_frame_sent",
            max_inbound_window_update_frames_per_data_frame_sent.is_some(),
            FLOOD,
        ),
        ("stream_reset_burst", stream_reset_burst.is_some(), FLOOD),
        ("stream_reset_rate", stream_reset_rate.is_some(), FLOOD),
        ("stream_error_on_invalid_http_messaging", stream_error_on_invalid_http_messaging, PARSER),
        (
            "override_stream_error_on_invalid_http_message",
            override_stream_error_on_invalid_http_message.is_some(),
            PARSER,
        ),
        ("use_oghttp2_codec", use_oghttp2_codec.is_some(), PARSER),
        ("max_metadata_size", max_metadata_size.is_some(), "METADATA frames are not read"),
        ("enable_huffman_encoding", enable_huffman_encoding.is_some(), PARSER),
        ("max_header_field_size_kb", max_header_field_size_kb.is_some(), PARSER),
        ("disallow_obs_text", disallow_obs_text.is_some(), PARSER),
    ];
    for (field, set, why) in ignored {
        if set {
            warnings.ignored(field, why);
        }
    }
    let d = Http2Settings::default();
    let max_concurrent_streams = common::u32_or(&max_concurrent_streams, d.max_concurrent_streams);
    if !(1..=2_147_483_647).contains(&max_concurrent_streams) {
        return Err(ConfigError::new("max_concurrent_streams", format!("{max_concurrent_streams} is out of range")));
    }
    Ok(Http2Settings {
        max_concurrent_streams,
        initial_stream_window_size: window(&initial_stream_window_size, "initial_stream_window_size")?,
        initial_connection_window_size: window(&initial_connection_window_size, "initial_connection_window_size")?,
        hpack_table_size: common::u32_or(&hpack_table_size, d.hpack_table_size),
        keepalive: connection_keepalive.map(keepalive).transpose().at_field("connection_keepalive")?,
    })
}

const FLOOD: &str = "the HTTP/2 library applies its own flood limits";
const PARSER: &str = "codec detail with no counterpart in Outrider's HTTP/2 stack";

fn window(value: &Option<gpb::UInt32Value>, field: &str) -> Result<u32> {
    match common::u32_or(value, 268_435_456) {
        w if WINDOW_RANGE.contains(&w) => Ok(w),
        w => Err(ConfigError::new(field, format!("{w} is not in [65535, 2147483647]"))),
    }
}

fn keepalive(proto: core::KeepaliveSettings) -> Result<Http2Keepalive> {
    let core::KeepaliveSettings { interval, timeout, interval_jitter, connection_idle_interval } = proto;
    let positive = |value: &Option<gpb::Duration>, field: &str| match common::opt_duration(value, field)? {
        Some(d) if d.is_zero() => Err(ConfigError::new(field, "must be greater than 0")),
        other => Ok(other),
    };
    Ok(Http2Keepalive {
        interval: positive(&interval, "interval")?,
        timeout: positive(&timeout, "timeout")?.ok_or_else(|| ConfigError::new("timeout", "is required"))?,
        interval_jitter_percent: common::percent_or(&interval_jitter, 15.0, "interval_jitter")?,
        connection_idle_interval: positive(&connection_idle_interval, "connection_idle_interval")?,
    })
}

/// HTTP/1.1 options: every one is a parser or formatting detail, except sending absolute
/// URLs, which changes the request line.
pub(super) fn http1_options(proto: core::Http1ProtocolOptions, warnings: &mut Warnings) -> Result<()> {
    let core::Http1ProtocolOptions {
        allow_absolute_url,
        accept_http_10,
        default_host_for_http_10,
        header_key_format,
        enable_trailers,
        allow_chunked_length,
        override_stream_error_on_invalid_http_message,
        send_fully_qualified_url,
        use_balsa_parser,
        allow_custom_methods,
        ignore_http_11_upgrade,
    } = proto;
    if send_fully_qualified_url {
        return Err(ConfigError::new("send_fully_qualified_url", "absolute request URLs are not supported"));
    }
    let ignored = [
        ("allow_absolute_url", allow_absolute_url.is_some()),
        ("accept_http_10", accept_http_10),
        ("default_host_for_http_10", !default_host_for_http_10.is_empty()),
        ("header_key_format", header_key_format.is_some()),
        ("enable_trailers", enable_trailers),
        ("allow_chunked_length", allow_chunked_length),
        ("override_stream_error_on_invalid_http_message", override_stream_error_on_invalid_http_message.is_some()),
        ("use_balsa_parser", use_balsa_parser.is_some()),
        ("allow_custom_methods", allow_custom_methods),
        ("ignore_http_11_upgrade", !ignore_http_11_upgrade.is_empty()),
    ];
    for (field, set) in ignored {
        if set {
            warnings.ignored(field, "HTTP/1.1 codec detail with no counterpart in Outrider's HTTP/1.1 stack");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::pb::json;
    use serde_json::json;

    fn convert(value: serde_json::Value) -> (Result<Http2Settings>, Warnings) {
        let (proto, dropped) = json::from_value("envoy.config.core.v3.Http2ProtocolOptions", value).unwrap();
        assert!(dropped.is_empty(), "{dropped:?}");
        let mut warnings = Warnings::new();
        (http2_settings(proto, &mut warnings), warnings)
    }

    #[test]
    fn defaults_values_and_keepalive() {
        assert_eq!(convert(json!({})).0.unwrap(), Http2Settings::default());
        let (settings, warnings) = convert(json!({
            "max_concurrent_streams": 100, "max_outbound_frames": 5,
            "connection_keepalive": {"interval": "30s", "timeout": "5s"}}));
        let settings = settings.unwrap();
        assert_eq!(settings.max_concurrent_streams, 100);
        let keepalive = settings.keepalive.unwrap();
        assert_eq!(keepalive.interval, Some(std::time::Duration::from_secs(30)));
        assert_eq!(keepalive.interval_jitter_percent, 15.0);
        assert_eq!(warnings.items()[0].path, "max_outbound_frames");
    }

    #[test]
    fn out_of_range_window_is_refused() {
        let (settings, _) = convert(json!({"initial_stream_window_size": 100}));
        assert_eq!(settings.unwrap_err().path(), "initial_stream_window_size");
        let (settings, _) = convert(json!({"connection_keepalive": {"interval": "1s"}}));
        assert_eq!(settings.unwrap_err().path(), "connection_keepalive.timeout");
    }
}
