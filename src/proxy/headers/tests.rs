use std::time::Duration;

use http::{HeaderMap, StatusCode};

use super::*;
use crate::config::listener::http_connection_manager::{
    ClientCertDetails, CodecType, CommonHttpOptions, EscapedSlashesAction, ForwardClientCertDetails, Http1Options,
    Http2Options, InternalAddresses, RouteSource, StripPort,
};

/// Envoy's defaults.
pub(crate) fn hcm() -> HttpConnectionManager {
    HttpConnectionManager {
        access_log: Vec::new(),
        tracing: None,
        stat_prefix: "ingress".into(),
        codec_type: CodecType::Auto,
        route_source: RouteSource::Rds("r".into()),
        http_filters: Vec::new(),
        append_local_overload: false,
        upgrade_configs: Vec::new(),
        skipped_http_filters: Vec::new(),
        suppress_envoy_headers: false,
        use_remote_address: false,
        xff_num_trusted_hops: 0,
        skip_xff_append: false,
        internal_address: InternalAddresses::None,
        via: String::new(),
        generate_request_id: true,
        preserve_external_request_id: false,
        always_set_request_id_in_response: false,
        stream_idle_timeout: None,
        request_timeout: None,
        request_headers_timeout: None,
        common: CommonHttpOptions::default(),
        http1: Http1Options::default(),
        http2: Http2Options::default(),
        max_request_headers_kb: 60,
        server_name: "envoy".into(),
        server_header_transformation: ServerHeaderTransformation::Overwrite,
        normalize_path: false,
        merge_slashes: false,
        path_with_escaped_slashes_action: EscapedSlashesAction::KeepUnchanged,
        strip_port: StripPort::None,
        strip_trailing_host_dot: false,
        forward_client_cert_details: ForwardClientCertDetails::Sanitize,
        set_current_client_cert_details: ClientCertDetails::default(),
        proxy_100_continue: false,
        append_x_forwarded_port: false,
        add_user_agent: false,
    }
}

fn conn(peer: &str) -> RequestOrigin<'static> {
    RequestOrigin {
        downstream: Downstream { peer: peer.parse().unwrap(), local: "10.0.0.100:8080".parse().unwrap(), tls: false },
        node_address: "192.0.2.9".parse().unwrap(),
        peer_certificate: None,
        local_uri_san: None,
        local_node: LocalNodeNames {
            cluster: "reviews",
            id: "sidecar~10.0.0.1~reviews-v1.default~default.svc.cluster.local",
        },
    }
}

/// `internal_address_config` set without ranges: Envoy's private and loopback list.
fn private_internal(config: &mut HttpConnectionManager) {
    config.internal_address = InternalAddresses::Configured { cidr_ranges: Vec::new() };
}

fn headers(list: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in list {
        map.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
    }
    map
}

fn get<'h>(map: &'h HeaderMap, name: &str) -> Option<&'h str> {
    map.get(name).map(|v| v.to_str().unwrap())
}

#[test]
fn edge_appends_peer_to_xff_sets_proto_and_strips_envoy_headers() {
    let mut config = hcm();
    config.use_remote_address = true;
    let mut h = headers(&[
        ("x-forwarded-for", "1.1.1.1"),
        ("x-forwarded-proto", "https"),
        ("x-envoy-upstream-rq-timeout-ms", "1"),
        ("x-envoy-retry-on", "5xx"),
        ("x-envoy-internal", "true"),
        ("x-envoy-downstream-service-cluster", "spoofed"),
        ("x-envoy-original-path", "/forged"),
        ("x-secret", "s"),
        ("x-request-id", "client-id"),
    ]);
    let c = mutate_request_headers(&config, &[HeaderName::from_static("x-secret")], &conn("8.8.8.8:1234"), &mut h);
    assert_eq!(c, RequestClassification { client: "8.8.8.8".parse().unwrap(), internal: false, edge: true });
    assert_eq!(get(&h, "x-forwarded-for"), Some("1.1.1.1,8.8.8.8"));
    assert_eq!(get(&h, "x-forwarded-proto"), Some("http"), "an untrusted hop's proto is overwritten");
    for stripped in [
        "x-envoy-upstream-rq-timeout-ms",
        "x-envoy-retry-on",
        "x-envoy-internal",
        "x-envoy-downstream-service-cluster",
        "x-envoy-original-path",
        "x-secret",
    ] {
        assert!(!h.contains_key(stripped), "{stripped}");
    }
    assert_eq!(get(&h, "x-envoy-external-address"), Some("8.8.8.8"));
    // An edge request's id is replaced unless external ids are preserved.
    let id = get(&h, "x-request-id").unwrap();
    assert_ne!(id, "client-id");
    let parsed = uuid::Uuid::parse_str(id).unwrap();
    assert_eq!(parsed.get_version_num(), 4);
}

#[test]
fn internal_peer_without_xff_is_internal_and_keeps_envoy_headers() {
    let mut config = hcm();
    config.use_remote_address = true;
    private_internal(&mut config);
    let mut h = headers(&[("x-envoy-upstream-rq-timeout-ms", "100"), ("x-request-id", "keep-me")]);
    let c = mutate_request_headers(&config, &[], &conn("10.1.2.3:999"), &mut h);
    assert!(c.internal && !c.edge);
    assert_eq!(get(&h, "x-envoy-internal"), Some("true"));
    assert_eq!(get(&h, "x-envoy-upstream-rq-timeout-ms"), Some("100"));
    assert_eq!(get(&h, "x-request-id"), Some("keep-me"));
    assert_eq!(get(&h, "x-forwarded-for"), Some("10.1.2.3"));
    assert!(!h.contains_key("x-envoy-external-address"));

    // With a client-sent XFF the request is never internal.
    let mut h = headers(&[("x-forwarded-for", "10.9.9.9"), ("x-envoy-max-retries", "3")]);
    let c = mutate_request_headers(&config, &[], &conn("10.1.2.3:999"), &mut h);
    assert!(!c.internal);
    assert!(!h.contains_key("x-envoy-max-retries"));
}

#[test]
fn preserve_external_request_id_and_generation_switch() {
    let mut config = hcm();
    config.use_remote_address = true;
    config.preserve_external_request_id = true;
    let mut h = headers(&[("x-request-id", "client-id")]);
    mutate_request_headers(&config, &[], &conn("8.8.8.8:1"), &mut h);
    assert_eq!(get(&h, "x-request-id"), Some("client-id"));

    config.generate_request_id = false;
    let mut h = HeaderMap::new();
    mutate_request_headers(&config, &[], &conn("8.8.8.8:1"), &mut h);
    assert!(!h.contains_key("x-request-id"));

    // Not at the edge: a missing id is generated, a present one kept.
    let config = hcm();
    let mut h = HeaderMap::new();
    mutate_request_headers(&config, &[], &conn("8.8.8.8:1"), &mut h);
    assert!(h.contains_key("x-request-id"));
    let mut h = headers(&[("x-request-id", "upstream-id")]);
    mutate_request_headers(&config, &[], &conn("8.8.8.8:1"), &mut h);
    assert_eq!(get(&h, "x-request-id"), Some("upstream-id"));
}

#[test]
fn trusted_hops_pick_the_client_from_xff() {
    let mut config = hcm();
    config.use_remote_address = true;
    config.xff_num_trusted_hops = 1;
    let mut h = headers(&[("x-forwarded-for", "3.3.3.3, 4.4.4.4"), ("x-forwarded-proto", "https")]);
    let c = mutate_request_headers(&config, &[], &conn("9.9.9.9:1"), &mut h);
    assert_eq!(c.client, "4.4.4.4".parse::<IpAddr>().unwrap());
    assert_eq!(get(&h, "x-forwarded-for"), Some("3.3.3.3, 4.4.4.4,9.9.9.9"));
    assert_eq!(get(&h, "x-forwarded-proto"), Some("https"), "a trusted hop's proto is kept");

    // Without use_remote_address, XFF is read (trusted hops from the right), not appended.
    let mut config = hcm();
    config.xff_num_trusted_hops = 1;
    let mut h = headers(&[("x-forwarded-for", "3.3.3.3,4.4.4.4")]);
    let c = mutate_request_headers(&config, &[], &conn("9.9.9.9:1"), &mut h);
    assert_eq!(c.client, "3.3.3.3".parse::<IpAddr>().unwrap());
    assert_eq!(get(&h, "x-forwarded-for"), Some("3.3.3.3,4.4.4.4"));
    assert_eq!(get(&h, "x-forwarded-proto"), Some("http"));

    // A single internal XFF address makes an internal request.
    let mut config = hcm();
    private_internal(&mut config);
    let mut h = headers(&[("x-forwarded-for", "10.0.0.7")]);
    let c = mutate_request_headers(&config, &[], &conn("9.9.9.9:1"), &mut h);
    assert!(c.internal && !c.edge);
}

#[test]
fn skip_xff_append_and_loopback_peer() {
    let mut config = hcm();
    config.use_remote_address = true;
    config.skip_xff_append = true;
    let mut h = HeaderMap::new();
    mutate_request_headers(&config, &[], &conn("8.8.8.8:1"), &mut h);
    assert!(!h.contains_key("x-forwarded-for"));

    config.skip_xff_append = false;
    let mut h = HeaderMap::new();
    mutate_request_headers(&config, &[], &conn("127.0.0.1:1"), &mut h);
    assert_eq!(get(&h, "x-forwarded-for"), Some("192.0.2.9"), "a loopback peer is replaced by the node's address");
}

#[test]
fn hop_by_hop_headers_are_removed() {
    let mut h = headers(&[
        ("connection", "keep-alive"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("transfer-encoding", "chunked"),
        ("upgrade", "h2c"),
        ("te", "gzip, trailers"),
        ("x-kept", "1"),
    ]);
    strip_hop_by_hop(&mut h);
    assert_eq!(h.len(), 2, "{h:?}");
    assert_eq!(get(&h, "te"), Some("trailers"));
    assert_eq!(get(&h, "x-kept"), Some("1"));

    let mut h = headers(&[("te", "gzip")]);
    strip_hop_by_hop(&mut h);
    assert!(!h.contains_key("te"));

    // A WebSocket upgrade keeps connection and upgrade.
    let mut h = headers(&[("connection", "Upgrade"), ("upgrade", "websocket")]);
    strip_hop_by_hop(&mut h);
    assert_eq!(get(&h, "upgrade"), Some("websocket"));
    assert_eq!(get(&h, "connection"), Some("Upgrade"));
}

#[test]
fn via_and_forwarded_port_when_configured() {
    let mut config = hcm();
    config.via = "outrider".into();
    config.append_x_forwarded_port = true;
    let mut h = headers(&[("via", "1.1 proxy")]);
    mutate_request_headers(&config, &[], &conn("8.8.8.8:1"), &mut h);
    assert_eq!(get(&h, "via"), Some("1.1 proxy, outrider"));
    assert_eq!(get(&h, "x-forwarded-port"), Some("8080"));
    let mut h = HeaderMap::new();
    mutate_request_headers(&hcm(), &[], &conn("8.8.8.8:1"), &mut h);
    assert!(!h.contains_key("via"));
}

#[test]
fn add_user_agent_names_this_node_in_place_of_what_the_client_sent() {
    let mut config = hcm();
    config.add_user_agent = true;
    let node = "sidecar~10.0.0.1~reviews-v1.default~default.svc.cluster.local";
    // The client's own names are replaced; its user-agent is kept.
    let mut h = headers(&[
        ("user-agent", "curl/8"),
        ("x-envoy-downstream-service-cluster", "admin"),
        ("x-envoy-downstream-service-node", "forged"),
    ]);
    mutate_request_headers(&config, &[], &conn("8.8.8.8:1"), &mut h);
    assert_eq!(get(&h, "user-agent"), Some("curl/8"));
    assert_eq!(get(&h, "x-envoy-downstream-service-cluster"), Some("reviews"));
    assert_eq!(get(&h, "x-envoy-downstream-service-node"), Some(node));
    // No user-agent, or an empty one: the cluster's name.
    for list in [&[][..], &[("user-agent", "")][..]] {
        let mut h = headers(list);
        mutate_request_headers(&config, &[], &conn("8.8.8.8:1"), &mut h);
        assert_eq!(get(&h, "user-agent"), Some("reviews"));
    }
    // Off (the default): nothing added, and what a client sends is Envoy's business only
    // on an edge (use_remote_address) request.
    let mut h = headers(&[("x-envoy-downstream-service-cluster", "admin")]);
    mutate_request_headers(&hcm(), &[], &conn("8.8.8.8:1"), &mut h);
    assert_eq!(get(&h, "user-agent"), None);
    assert_eq!(get(&h, "x-envoy-downstream-service-cluster"), Some("admin"));
}

#[test]
fn two_request_ids_are_replaced_by_one_generated() {
    let mut h = headers(&[("x-request-id", "7d2c4b8e-1111-4222-8333-944445555666"), ("x-request-id", "abc")]);
    mutate_request_headers(&hcm(), &[], &conn("10.0.0.1:1"), &mut h);
    let ids: Vec<_> = h.get_all("x-request-id").iter().collect();
    assert_eq!(ids.len(), 1);
    assert!(
        uuid::Uuid::parse_str(ids[0].to_str().unwrap()).is_ok() && ids[0] != "7d2c4b8e-1111-4222-8333-944445555666"
    );
}

#[test]
fn response_headers() {
    let mut config = hcm();
    let request = headers(&[("x-request-id", "rid")]);
    let mut r = headers(&[
        ("server", "backend"),
        ("connection", "close"),
        ("keep-alive", "1"),
        ("transfer-encoding", "chunked"),
    ]);
    mutate_response_headers(&config, Some(&request), &mut r);
    assert_eq!(get(&r, "server"), Some("envoy"));
    assert!(!r.contains_key("connection") && !r.contains_key("keep-alive") && !r.contains_key("transfer-encoding"));
    assert_eq!(request_id_for_response(&config, &request), None);

    config.always_set_request_id_in_response = true;
    config.server_header_transformation = ServerHeaderTransformation::AppendIfAbsent;
    let mut r = headers(&[("server", "backend")]);
    mutate_response_headers(&config, Some(&request), &mut r);
    assert_eq!(get(&r, "server"), Some("backend"));
    assert_eq!(request_id_for_response(&config, &request), Some(HeaderValue::from_static("rid")));
    let mut r = HeaderMap::new();
    mutate_response_headers(&config, Some(&request), &mut r);
    assert_eq!(get(&r, "server"), Some("envoy"));

    config.server_header_transformation = ServerHeaderTransformation::PassThrough;
    let mut r = HeaderMap::new();
    mutate_response_headers(&config, None, &mut r);
    assert!(!r.contains_key("server"));

    let mut r = HeaderMap::new();
    set_upstream_service_time(&mut r, Duration::from_millis(37), false);
    assert_eq!(get(&r, "x-envoy-upstream-service-time"), Some("37"));
    let mut r = HeaderMap::new();
    set_upstream_service_time(&mut r, Duration::from_millis(37), true);
    assert!(r.is_empty());
}

#[test]
fn local_replies_have_envoys_bodies() {
    let (status, h, body) = LocalReply::NoHealthyUpstream.build();
    assert_eq!((status, &body[..]), (StatusCode::SERVICE_UNAVAILABLE, &b"no healthy upstream"[..]));
    assert_eq!(get(&h, "content-type"), Some("text/plain"));
    let (status, _, body) = LocalReply::UpstreamTimeout.build();
    assert_eq!((status, &body[..]), (StatusCode::GATEWAY_TIMEOUT, &b"upstream request timeout"[..]));
    let (status, _, body) =
        LocalReply::UpstreamReset { reason: ResetReason::RemoteConnectionFailure, retried: false }.build();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        &body[..],
        b"upstream connect error or disconnect/reset before headers. reset reason: remote connection failure"
    );
    let (_, _, body) = LocalReply::UpstreamReset { reason: ResetReason::ConnectionTermination, retried: true }.build();
    assert_eq!(
        &body[..],
        b"upstream connect error or disconnect/reset before headers. retried and the latest reset reason: connection termination"
    );
    let (status, _, _) = LocalReply::UpstreamReset { reason: ResetReason::ProtocolError, retried: false }.build();
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    let (status, h, body) = LocalReply::NoRoute.build();
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.is_empty() && h.is_empty());
    let (status, _, body) = LocalReply::ClusterNotFound(StatusCode::INTERNAL_SERVER_ERROR).build();
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(body.is_empty());
}

#[test]
fn grpc_local_replies_are_trailers_only() {
    let (status, h, body) = grpc_local_reply(StatusCode::SERVICE_UNAVAILABLE, "no healthy upstream");
    assert_eq!(status, StatusCode::OK);
    assert!(body.is_empty());
    assert_eq!(get(&h, "grpc-status"), Some("14"));
    assert_eq!(get(&h, "grpc-message"), Some("no healthy upstream"));
    assert_eq!(get(&h, "content-type"), Some("application/grpc"));
    let (_, h, _) = grpc_local_reply(StatusCode::NOT_FOUND, "100% é");
    assert_eq!(get(&h, "grpc-status"), Some("12"));
    assert_eq!(get(&h, "grpc-message"), Some("100%25 %C3%A9"));
}

#[test]
fn internal_addresses_as_envoy_1_40() {
    let configured = InternalAddresses::Configured { cidr_ranges: Vec::new() };
    for ip in ["10.0.0.1", "172.16.0.1", "192.168.1.1", "127.0.0.1", "::1", "fd00::1"] {
        assert!(configured.contains(ip.parse().unwrap()), "{ip}");
        assert!(!InternalAddresses::None.contains(ip.parse().unwrap()), "unset: {ip} is external");
    }
    for ip in ["8.8.8.8", "172.32.0.1", "2001:db8::1", "127.0.0.2", "fc00::1"] {
        assert!(!configured.contains(ip.parse().unwrap()), "{ip}");
    }
    let ranges = InternalAddresses::Configured {
        cidr_ranges: vec![crate::config::address::CidrRange::new("192.0.2.0".parse().unwrap(), 24).unwrap()],
    };
    assert!(ranges.contains("192.0.2.7".parse().unwrap()));
    assert!(!ranges.contains("10.0.0.1".parse().unwrap()), "ranges replace the private list");
}

#[test]
fn loopback_client_without_internal_config_is_external() {
    let mut config = hcm();
    config.use_remote_address = true;
    let mut h = headers(&[
        ("x-envoy-max-retries", "3"),
        ("x-envoy-upstream-rq-timeout-ms", "1"),
        ("x-envoy-retry-on", "5xx"),
        ("x-envoy-external-address", "1.2.3.4"),
    ]);
    let c = mutate_request_headers(&config, &[], &conn("127.0.0.1:5"), &mut h);
    assert!(!c.internal && c.edge);
    assert!(!h.contains_key("x-envoy-max-retries") && !h.contains_key("x-envoy-retry-on"));
    assert!(!h.contains_key("x-envoy-upstream-rq-timeout-ms"));
    assert_eq!(get(&h, "x-envoy-external-address"), Some("127.0.0.1"), "the forged one is replaced");
}
