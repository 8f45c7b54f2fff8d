//! Every listener and route configuration of real Istio config dumps converts, and a few
//! facts about them hold.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::Value;

use super::chain_matcher::{IpMatcher, IpRangeMatcherProto};
use super::listener;
use crate::config::convert::route::route_configuration;
use crate::config::error::Warnings;
use crate::config::listener::chain_matcher::NetworkInput;
use crate::config::listener::{Listener, ListenerFilterKind, TerminalFilter, TrafficDirection};
use crate::config::route::RouteConfiguration;
use crate::pb::envoy::config::listener::v3 as proto;
use crate::pb::envoy::config::route::v3 as route_proto;
use crate::pb::google::protobuf as gpb;
use crate::pb::json::{Dropped, from_value};
use envoy_types::pb::xds;

fn dump(file: &str) -> Value {
    crate::config::testdata::istio_dump(file)
}

/// The configs of one `@type` in a `/config_dump`.
fn sections<'a>(dump: &'a Value, type_suffix: &str) -> impl Iterator<Item = &'a Value> {
    dump["configs"].as_array().unwrap().iter().filter(move |c| c["@type"].as_str().unwrap().ends_with(type_suffix))
}

fn listener_values(dump: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for section in sections(dump, "ListenersConfigDump") {
        for l in section["static_listeners"].as_array().into_iter().flatten() {
            out.push(l["listener"].clone());
        }
        for l in section["dynamic_listeners"].as_array().into_iter().flatten() {
            out.push(l["active_state"]["listener"].clone());
        }
    }
    out
}

/// Converts every listener of a dump; none may fail.
fn convert_listeners(file: &str) -> Vec<Listener> {
    listener_values(&dump(file))
        .into_iter()
        .map(|value| {
            let (mut proto, dropped) =
                from_value::<proto::Listener>("envoy.config.listener.v3.Listener", value.clone()).unwrap();
            restore_ip_matcher(&mut proto, &value, &dropped);
            let mut warnings = Warnings::new();
            match listener(proto, &mut warnings) {
                Ok(l) => l,
                Err(e) => panic!("{file}: listener {:?}: {e}", value["name"]),
            }
        })
        .collect()
}

/// The descriptor set has no `xds.type.matcher.v3.IPMatcher`, so the JSON reader drops
/// it; xDS would carry it in binary. Rebuild it from the JSON the way xDS would send it.
fn restore_ip_matcher(proto: &mut proto::Listener, json: &Value, dropped: &[Dropped]) {
    use xds::r#type::matcher::v3::matcher::{MatcherType, matcher_tree::TreeType};
    if !dropped.iter().any(|d| d.what.contains("IPMatcher")) {
        return;
    }
    let ip_json = &json["filter_chain_matcher"]["matcher_tree"]["custom_match"]["typed_config"];
    let range_matchers = ip_json["range_matchers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| IpRangeMatcherProto {
            ranges: m["ranges"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| xds::core::v3::CidrRange {
                    address_prefix: r["address_prefix"].as_str().unwrap().into(),
                    prefix_len: r["prefix_len"].as_u64().map(|v| gpb::UInt32Value { value: v as u32 }),
                })
                .collect(),
            on_match: Some(from_value("xds.type.matcher.v3.Matcher.OnMatch", m["on_match"].clone()).unwrap().0),
            exclusive: false,
        })
        .collect();
    let any = gpb::Any {
        type_url: "type.googleapis.com/xds.type.matcher.v3.IPMatcher".into(),
        value: prost::Message::encode_to_vec(&IpMatcher { range_matchers }),
    };
    let matcher = proto.filter_chain_matcher.as_mut().unwrap();
    let Some(MatcherType::MatcherTree(tree)) = matcher.matcher_type.as_mut() else { panic!() };
    let Some(TreeType::CustomMatch(custom)) = tree.tree_type.as_mut() else { panic!() };
    custom.typed_config = Some(any);
}

fn by_name<'a>(listeners: &'a [Listener], name: &str) -> &'a Listener {
    listeners.iter().find(|l| l.name == name).unwrap()
}

#[test]
#[ignore = "Istio's fault, CORS and ext_authz filters are refused until Outrider runs them"]
fn sidecar_listeners_convert() {
    let listeners = convert_listeners("sidecar-listeners.config_dump.json");
    assert_eq!(listeners.len(), 2 + 27);

    let inbound = by_name(&listeners, "virtualInbound");
    // The original_dst listener filter restores the destination for chain matching; only
    // `use_original_dst` (virtualOutbound) hands connections to other listeners.
    assert!(!inbound.use_original_dst && inbound.restores_original_dst() && inbound.bind_to_port);
    assert!(inbound.has_listener_filter(ListenerFilterKind::OriginalDst));
    assert!(inbound.has_listener_filter(ListenerFilterKind::TlsInspector));
    assert_eq!(inbound.traffic_direction, TrafficDirection::Inbound);
    assert_eq!(inbound.listener_filters_timeout, None);
    assert!(inbound.continue_on_listener_filters_timeout);
    assert_eq!(inbound.filter_chains[0].filter_chain_match.destination_port, Some(15006));
    let tls_chain = &inbound.filter_chains[1];
    assert_eq!(tls_chain.filter_chain_match.transport_protocol.as_deref(), Some("tls"));
    assert!(tls_chain.filter_chain_match.prefix_ranges[0].contains(Ipv4Addr::new(10, 0, 0, 1).into()));
    assert!(tls_chain.tls.is_some());

    let outbound = by_name(&listeners, "virtualOutbound");
    assert!(outbound.use_original_dst && outbound.restores_original_dst() && outbound.bind_to_port);
    let passthrough = outbound.all_filter_chains().any(|c| matches!(&c.terminal, TerminalFilter::TcpProxy(_)));
    assert!(passthrough);

    let http80 = by_name(&listeners, "0.0.0.0_80");
    assert!(!http80.bind_to_port);
    assert_eq!(http80.route_config_names(), ["80"]);
    let TerminalFilter::HttpConnectionManager(hcm) = &http80.filter_chains.last().unwrap().terminal else { panic!() };
    assert!(hcm.skipped_http_filters.iter().any(|f| f.name == "istio.stats"));

    let internal = by_name(&listeners, "main_internal");
    assert!(internal.internal && !internal.bind_to_port);
}

#[test]
#[ignore = "the waypoint's fault and RBAC filters are refused until Outrider runs them"]
fn waypoint_listeners_and_routes_convert() {
    let listeners = convert_listeners("waypoint-full.config_dump.json");
    assert_eq!(listeners.len(), 2);
    let main = by_name(&listeners, "main_internal");
    let matcher = main.filter_chain_matcher.as_ref().unwrap();
    let select = |ip: &str, port: u16, alpn: Option<&str>| {
        matcher
            .select(&|input| match input {
                NetworkInput::DestinationIp => Some(ip.to_owned()),
                NetworkInput::DestinationPort => Some(port.to_string()),
                NetworkInput::ApplicationProtocol => alpn.map(|p| format!("'{p}'")),
                _ => None,
            })
            .map(str::to_owned)
    };
    assert_eq!(
        select("10.104.171.68", 8000, None).as_deref(),
        Some("inbound-vip|8000||httpbin.default.svc.cluster.local-http")
    );
    assert_eq!(select("10.104.171.68", 9999, None), None);
    assert_eq!(select("192.168.195.248", 1, Some("h2c")).as_deref(), Some("direct-http"));
    assert_eq!(select("192.168.195.248", 1, None).as_deref(), Some("direct-tcp"));
    for name in matcher.root.chain_names() {
        assert!(main.filter_chains.iter().any(|c| c.name == name), "{name}");
    }

    let dump = dump("waypoint-full.config_dump.json");
    let mut routes: Vec<RouteConfiguration> = Vec::new();
    for section in sections(&dump, "RoutesConfigDump") {
        for key in ["static_route_configs", "dynamic_route_configs"] {
            for r in section[key].as_array().into_iter().flatten() {
                let (proto, _) = from_value::<route_proto::RouteConfiguration>(
                    "envoy.config.route.v3.RouteConfiguration",
                    r["route_config"].clone(),
                )
                .unwrap();
                routes.push(route_configuration(proto, &mut Warnings::new()).unwrap());
            }
        }
    }
    assert!(!routes.is_empty());
    let vhost = routes[0].find_virtual_host("anything").unwrap();
    let crate::config::route::Action::Route(action) = &vhost.routes[0].action else { panic!() };
    assert_eq!(action.timeout, None, "Istio disables the route timeout with 0s");
    assert_eq!(action.max_stream_duration.grpc_timeout_header_max, Some(Duration::ZERO));
}

/// Every RBAC filter of the sidecar dump (HTTP and network) converts, and Istio's policy
/// is enforced: `GET /info` from `sa/sleep` with a Google-issued token is allowed, the
/// same without the token's claims, or from another identity, is not.
#[test]
fn sidecar_rbac_filters_convert_and_enforce() {
    use crate::config::filters::{HttpFilterConfig, NetworkFilterConfig};
    use crate::proxy::filters::rbac::engine::{Attributes, evaluate};
    use crate::proxy::filters::{DownstreamConnection, DynamicMetadata};

    fn walk<'a>(value: &'a Value, found: &mut Vec<&'a Value>) {
        match value {
            Value::Object(map) => {
                let kind = map.get("@type").and_then(Value::as_str).unwrap_or_default();
                if kind.ends_with(".rbac.v3.RBAC") {
                    found.push(value);
                }
                map.values().for_each(|v| walk(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
            _ => {}
        }
    }
    let dump = dump("sidecar-listeners.config_dump.json");
    let mut found = Vec::new();
    walk(&dump, &mut found);
    let (mut http, mut network) = (Vec::new(), 0);
    for config in found {
        let kind = config["@type"].as_str().unwrap().trim_start_matches("type.googleapis.com/").to_owned();
        let mut json = config.clone();
        json.as_object_mut().unwrap().remove("@type");
        let any = if kind.contains(".http.") {
            let (m, _) =
                from_value::<crate::pb::envoy::extensions::filters::http::rbac::v3::Rbac>(&kind, json).unwrap();
            gpb::Any { type_url: format!("type.googleapis.com/{kind}"), value: prost::Message::encode_to_vec(&m) }
        } else {
            let (m, _) =
                from_value::<crate::pb::envoy::extensions::filters::network::rbac::v3::Rbac>(&kind, json).unwrap();
            gpb::Any { type_url: format!("type.googleapis.com/{kind}"), value: prost::Message::encode_to_vec(&m) }
        };
        let mut warnings = Warnings::new();
        if kind.contains(".http.") {
            match crate::config::convert::filters::http_filter(&any, &mut warnings).unwrap() {
                Some(HttpFilterConfig::Rbac(rbac)) => http.push(rbac),
                other => panic!("{other:?}"),
            }
        } else {
            match crate::config::convert::filters::network_filter(&any, &mut warnings).unwrap() {
                Some(NetworkFilterConfig::Rbac(rbac)) => {
                    assert_eq!(rbac.stat_prefix, "tcp");
                    network += 1;
                }
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!((http.len(), network), (10, 3));

    let enforced = http.iter().find_map(|r| r.rules.as_ref()).unwrap();
    let connection = |uri: &str| DownstreamConnection {
        peer: "10.0.0.7:50000".parse().unwrap(),
        local: "10.0.0.1:8080".parse().unwrap(),
        server_name: None,
        tls: true,
        peer_identity: Some(crate::tls::PeerIdentity {
            uri_sans: vec![uri.to_owned()],
            dns_sans: Vec::new(),
            subject: String::new(),
        }),
    };
    let request =
        |method: &str, path: &str| http::Request::builder().method(method).uri(path).body(()).unwrap().into_parts().0;
    let mut claims = DynamicMetadata::default();
    claims.set(
        "istio_authn",
        "request.auth.claims".into(),
        serde_json::json!({ "iss": ["https://accounts.google.com"] }),
    );
    let allowed = |parts: &http::request::Parts, connection: &DownstreamConnection, metadata: &DynamicMetadata| {
        let attributes =
            Attributes { parts: Some(parts), connection, remote_ip: connection.peer.ip(), metadata: Some(metadata) };
        evaluate(enforced, &attributes).allowed
    };
    let sleep = connection("spiffe://cluster.local/ns/default/sa/sleep");
    assert!(allowed(&request("GET", "/info/x"), &sleep, &claims));
    assert!(allowed(&request("POST", "/data"), &sleep, &claims));
    assert!(!allowed(&request("POST", "/data/x"), &sleep, &claims));
    assert!(!allowed(&request("GET", "/info"), &sleep, &DynamicMetadata::default()));
    assert!(!allowed(&request("GET", "/info"), &connection("spiffe://cluster.local/ns/default/sa/other"), &claims));
    assert!(allowed(&request("GET", "/info"), &connection("spiffe://cluster.local/ns/test/sa/any"), &claims));
}
