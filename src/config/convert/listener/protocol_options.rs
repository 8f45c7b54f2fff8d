//! The HTTP connection manager's downstream protocol options: `common_http_protocol_options`,
//! `http_protocol_options` (HTTP/1) and `http2_protocol_options`.

use super::super::common;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::listener::http_connection_manager::{
    CommonHttpOptions, HeadersWithUnderscoresAction, Http1Options, Http2Keepalive, Http2Options,
};
use crate::pb::envoy::config::core::v3 as core;

/// The largest HTTP/2 window and stream count (2^31 - 1).
const H2_MAX: u32 = 2_147_483_647;

/// Records each `(set, field, why)` whose `set` is true as ignored.
pub fn ignore_all(warnings: &mut Warnings, fields: &[(bool, &str, &str)]) {
    for (set, field, what) in fields {
        if *set {
            warnings.ignored(*field, *what);
        }
    }
}

pub fn common_options(proto: core::HttpProtocolOptions, warnings: &mut Warnings) -> Result<CommonHttpOptions> {
    use core::http_protocol_options::HeadersWithUnderscoresAction as A;
    let core::HttpProtocolOptions {
        idle_timeout,
        max_connection_duration,
        max_connection_duration_jitter,
        max_headers_count,
        max_response_headers_kb,
        max_stream_duration,
        headers_with_underscores_action,
        max_requests_per_connection,
    } = proto;
    ignore_all(
        warnings,
        &[
            (max_connection_duration_jitter.is_some(), "max_connection_duration_jitter", "no jitter is applied"),
            (max_response_headers_kb.is_some(), "max_response_headers_kb", "applies to upstream responses only"),
        ],
    );
    let defaults = CommonHttpOptions::default();
    let zero_disables = |d: Option<std::time::Duration>| d.filter(|d| !d.is_zero());
    let max_headers_count = common::u32_or(&max_headers_count, defaults.max_headers_count);
    if max_headers_count == 0 {
        return Err(ConfigError::new("max_headers_count", "must be at least 1"));
    }
    Ok(CommonHttpOptions {
        idle_timeout: match common::opt_duration(&idle_timeout, "idle_timeout")? {
            None => defaults.idle_timeout,
            some => zero_disables(some),
        },
        max_connection_duration: zero_disables(common::opt_duration(
            &max_connection_duration,
            "max_connection_duration",
        )?),
        max_headers_count,
        max_stream_duration: zero_disables(common::opt_duration(&max_stream_duration, "max_stream_duration")?),
        max_requests_per_connection: max_requests_per_connection.map(|v| v.value).filter(|v| *v > 0),
        headers_with_underscores_action: match A::try_from(headers_with_underscores_action) {
            Ok(A::Allow) => HeadersWithUnderscoresAction::Allow,
            Ok(A::RejectRequest) => HeadersWithUnderscoresAction::RejectRequest,
            Ok(A::DropHeader) => HeadersWithUnderscoresAction::DropHeader,
            Err(_) => return Err(ConfigError::new("headers_with_underscores_action", "unknown value")),
        },
    })
}

#[allow(deprecated)]
pub fn http1_options(proto: core::Http1ProtocolOptions, warnings: &mut Warnings) -> Result<Http1Options> {
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
    ignore_all(
        warnings,
        &[
            (header_key_format.is_some(), "header_key_format", "header names are sent lower-case"),
            (
                override_stream_error_on_invalid_http_message.is_some(),
                "override_stream_error_on_invalid_http_message",
                "invalid messages close the connection",
            ),
            (send_fully_qualified_url, "send_fully_qualified_url", "applies to upstream requests only"),
            (use_balsa_parser.is_some(), "use_balsa_parser", "Outrider has its own HTTP/1 parser"),
            (allow_custom_methods, "allow_custom_methods", "Outrider's parser accepts any token as a method"),
        ],
    );
    // Envoy's default takes absolute-form targets (a proxy's clients send them); refusing
    // them is a codec feature Outrider does not have, so a listener that asks is refused
    // rather than served with them accepted.
    if allow_absolute_url.is_some_and(|allow| !allow.value) {
        return Err(ConfigError::new("allow_absolute_url", "refusing absolute URLs is not supported"));
    }
    // Envoy serves an upgrade it matches as a plain request; Outrider would refuse it or
    // tunnel it instead.
    if !ignore_http_11_upgrade.is_empty() {
        return Err(ConfigError::new("ignore_http_11_upgrade", "is not supported"));
    }
    if !accept_http_10 && !default_host_for_http_10.is_empty() {
        return Err(ConfigError::new("default_host_for_http_10", "requires accept_http_10"));
    }
    if enable_trailers {
        return Err(ConfigError::new("enable_trailers", "proxying HTTP/1.1 trailers is not supported"));
    }
    // Given to requests as their `Host`: it must be one.
    if http::HeaderValue::from_str(&default_host_for_http_10).is_err()
        || default_host_for_http_10.parse::<http::uri::Authority>().is_err() && !default_host_for_http_10.is_empty()
    {
        return Err(ConfigError::new("default_host_for_http_10", "is not a valid host"));
    }
    Ok(Http1Options { accept_http_10, default_host_for_http_10, allow_chunked_length })
}

#[allow(deprecated)]
pub fn http2_options(proto: core::Http2ProtocolOptions, warnings: &mut Warnings) -> Result<Http2Options> {
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
    let flood = "flood protection uses the HTTP/2 library's own limits";
    ignore_all(
        warnings,
        &[
            (allow_metadata, "allow_metadata", "METADATA frames are not supported and are dropped"),
            // Plain CONNECT needs no setting; what this enables is RFC 8441's extended
            // CONNECT (WebSocket over HTTP/2), which is not offered: clients then use HTTP/1.1.
            (allow_connect, "allow_connect", "extended CONNECT (RFC 8441) is not offered; plain CONNECT is served"),
            (max_outbound_frames.is_some(), "max_outbound_frames", flood),
            (max_outbound_control_frames.is_some(), "max_outbound_control_frames", flood),
            (
                max_consecutive_inbound_frames_with_empty_payload.is_some(),
                "max_consecutive_inbound_frames_with_empty_payload",
                flood,
            ),
            (max_inbound_priority_frames_per_stream.is_some(), "max_inbound_priority_frames_per_stream", flood),
            (
                max_inbound_window_update_frames_per_data_frame_sent.is_some(),
                "max_inbound_window_update_frames_per_data_frame_sent",
                flood,
            ),
            (stream_reset_burst.is_some() || stream_reset_rate.is_some(), "stream_reset_burst", flood),
            (
                stream_error_on_invalid_http_messaging,
                "stream_error_on_invalid_http_messaging",
                "invalid messages reset the connection",
            ),
            (
                override_stream_error_on_invalid_http_message.is_some(),
                "override_stream_error_on_invalid_http_message",
                "invalid messages reset the connection",
            ),
            (!custom_settings_parameters.is_empty(), "custom_settings_parameters", "custom SETTINGS are not sent"),
            (use_oghttp2_codec.is_some(), "use_oghttp2_codec", "Outrider has its own HTTP/2 codec"),
            (max_metadata_size.is_some(), "max_metadata_size", "METADATA frames are not supported"),
            (enable_huffman_encoding.is_some(), "enable_huffman_encoding", "the codec chooses header encoding"),
            (max_header_field_size_kb.is_some(), "max_header_field_size_kb", "max_request_headers_kb bounds headers"),
            (disallow_obs_text.is_some(), "disallow_obs_text", "the codec's header validation applies"),
        ],
    );
    let defaults = Http2Options::default();
    let ranged = |value: Option<u32>, default: u32, field: &str, min: u32| match value {
        None => Ok(default),
        Some(v) if (min..=H2_MAX).contains(&v) => Ok(v),
        Some(v) => Err(ConfigError::new(field, format!("{v} is outside [{min}, {H2_MAX}]"))),
    };
    let keepalive = match connection_keepalive {
        None => None,
        Some(core::KeepaliveSettings { interval, timeout, interval_jitter, connection_idle_interval }) => {
            ignore_all(
                warnings,
                &[
                    (interval_jitter.is_some(), "connection_keepalive.interval_jitter", "no jitter is applied"),
                    (
                        connection_idle_interval.is_some(),
                        "connection_keepalive.connection_idle_interval",
                        "only the interval is used",
                    ),
                ],
            );
            let timeout = common::opt_duration(&timeout, "connection_keepalive.timeout")?
                .ok_or_else(|| ConfigError::new("connection_keepalive.timeout", "is required"))?;
            let interval = common::opt_duration(&interval, "connection_keepalive.interval")?.filter(|d| !d.is_zero());
            Some(Http2Keepalive { interval, timeout })
        }
    };
    Ok(Http2Options {
        hpack_table_size: common::u32_or(&hpack_table_size, defaults.hpack_table_size),
        max_concurrent_streams: ranged(
            max_concurrent_streams.map(|v| v.value),
            defaults.max_concurrent_streams,
            "max_concurrent_streams",
            1,
        )?,
        initial_stream_window_size: ranged(
            initial_stream_window_size.map(|v| v.value),
            defaults.initial_stream_window_size,
            "initial_stream_window_size",
            65_535,
        )?,
        initial_connection_window_size: ranged(
            initial_connection_window_size.map(|v| v.value),
            defaults.initial_connection_window_size,
            "initial_connection_window_size",
            65_535,
        )?,
        keepalive,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http1(proto: core::Http1ProtocolOptions) -> Result<Http1Options> {
        http1_options(proto, &mut Warnings::new())
    }

    #[test]
    fn http10_options_are_kept_and_checked() {
        let options = http1(core::Http1ProtocolOptions {
            accept_http_10: true,
            default_host_for_http_10: "default.example".into(),
            allow_chunked_length: true,
            ..Default::default()
        })
        .unwrap();
        assert!(options.accept_http_10 && options.allow_chunked_length);
        assert_eq!(options.default_host_for_http_10, "default.example");
        let refused = |proto| http1(proto).unwrap_err().path().to_owned();
        let without_http10 =
            core::Http1ProtocolOptions { default_host_for_http_10: "default.example".into(), ..Default::default() };
        assert_eq!(refused(without_http10), "default_host_for_http_10");
        let not_a_host = core::Http1ProtocolOptions {
            accept_http_10: true,
            default_host_for_http_10: "a b/c".into(),
            ..Default::default()
        };
        assert_eq!(refused(not_a_host), "default_host_for_http_10");
    }

    /// CONNECT is allowed on the connection manager and terminated on a route whose entry
    /// has a `connect_config`; what such a config asks for that Outrider cannot do is
    /// refused with its path.
    #[test]
    fn connect_upgrades_and_their_termination() {
        use super::super::super::upgrade::{hcm_upgrades, route_upgrades};
        use crate::pb::envoy::config::route::v3::route_action::UpgradeConfig as Route;
        use crate::pb::envoy::config::route::v3::route_action::upgrade_config::ConnectConfig;
        use crate::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::UpgradeConfig as Hcm;
        let websocket = Hcm { upgrade_type: "websocket".into(), ..Default::default() };
        let connect = Hcm { upgrade_type: "CONNECT".into(), ..Default::default() };
        let manager = hcm_upgrades(vec![websocket, connect]).unwrap();
        assert!(manager.iter().all(|u| !u.terminates_connect) && manager[1].upgrade_type == "connect");
        let route = Route { upgrade_type: "connect".into(), ..Default::default() };
        assert!(!route_upgrades(vec![route]).unwrap()[0].terminates_connect, "no connect_config: not terminated");
        let terminated =
            Route { upgrade_type: "CONNECT".into(), connect_config: Some(Default::default()), ..Default::default() };
        assert!(route_upgrades(vec![terminated]).unwrap()[0].terminates_connect);
        let post = Route {
            upgrade_type: "CONNECT".into(),
            connect_config: Some(ConnectConfig { allow_post: true, ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(route_upgrades(vec![post]).unwrap_err().path(), "upgrade_configs[0].connect_config.allow_post");
        let websocket_terminated =
            Route { upgrade_type: "websocket".into(), connect_config: Some(Default::default()), ..Default::default() };
        assert_eq!(route_upgrades(vec![websocket_terminated]).unwrap_err().path(), "upgrade_configs[0].connect_config");
    }

    /// Envoy would serve a matching upgrade as a plain request; Outrider cannot, so it
    /// refuses the field rather than refuse or tunnel those upgrades.
    #[test]
    fn ignore_http_11_upgrade_is_refused() {
        let proto =
            core::Http1ProtocolOptions { ignore_http_11_upgrade: vec![Default::default()], ..Default::default() };
        assert_eq!(http1(proto).unwrap_err().path(), "ignore_http_11_upgrade");
    }

    /// `allow_absolute_url: false` would have absolute-form targets refused; Outrider
    /// accepts them, so it refuses the setting instead of serving them. `true` is Envoy's
    /// default and accepted.
    #[test]
    fn refusing_absolute_urls_is_refused() {
        let with = |value| core::Http1ProtocolOptions {
            allow_absolute_url: Some(crate::pb::google::protobuf::BoolValue { value }),
            ..Default::default()
        };
        assert_eq!(http1(with(false)).unwrap_err().path(), "allow_absolute_url");
        assert!(http1(with(true)).is_ok());
    }
}
