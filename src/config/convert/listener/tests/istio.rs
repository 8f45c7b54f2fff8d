//! Every listener and route configuration of real Istio config dumps converts, and a few
//! facts about them hold.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::Value;

use super::super::listener;
use crate::config::convert::route::route_configuration;
use crate::config::error::Warnings;
use crate::config::listener::chain_matcher::NetworkInput;
use crate::config::listener::{Listener, ListenerFilterKind, TerminalFilter, TrafficDirection};
use crate::config::route::RouteConfiguration;
use crate::pb::envoy::config::listener::v3 as proto;
use crate::pb::envoy::config::route::v3 as route_proto;
use crate::pb::json::from_value;

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

/// Converts every listener of a dump. Those named in `refused` must be refused with an
/// error containing the given text (a feature Outrider does not run, so the listener is
/// NACKed instead of served without it); every other one must convert.
fn convert_listeners_refusing(file: &str, refused: &[(&str, &str)]) -> Vec<Listener> {
    let mut out = Vec::new();
    for value in listener_values(&dump(file)) {
        let (proto, dropped) =
            from_value::<proto::Listener>("envoy.config.listener.v3.Listener", value.clone()).unwrap();
        assert!(dropped.iter().all(|d| !d.what.contains("typed config")), "{file}: {dropped:?}");
        let name = value["name"].as_str().unwrap_or_default().to_owned();
        let expected = refused.iter().find(|(n, _)| *n == name).map(|(_, why)| *why);
        match (listener(proto, &mut Warnings::new()), expected) {
            (Ok(l), None) => out.push(l),
            (Err(e), Some(why)) => assert!(e.to_string().contains(why), "{file}: listener {name:?}: {e}"),
            (Ok(_), Some(why)) => panic!("{file}: listener {name:?} converted; expected a refusal ({why})"),
            (Err(e), None) => panic!("{file}: listener {name:?}: {e}"),
        }
    }
    out
}

fn by_name<'a>(listeners: &'a [Listener], name: &str) -> &'a Listener {
    listeners.iter().find(|l| l.name == name).unwrap()
}

#[test]
fn sidecar_listeners_convert() {
    // HBONE's `connect_terminate` (its CONNECT termination is served, Istio's own
    // `connect_authority` filter is not), and the internal listeners `connect_originate`
    // (a TCP proxy tunnelling over CONNECT) and `main_internal`, whose listener filter
    // (Istio's `set_internal_dst_address`) is not run, are refused; every other listener,
    // RBAC, ext_authz, JWT and fault filters included, converts.
    let listeners = convert_listeners_refusing(
        "sidecar-listeners.config_dump.json",
        &[
            ("connect_terminate", "io.istio.http.connect_authority.Config are not supported"),
            ("connect_originate", "istio.set_internal_dst_address.v1.Config) is not supported"),
            ("main_internal", "istio.set_internal_dst_address.v1.Config) is not supported"),
        ],
    );
    assert_eq!(listeners.len(), 2 + 27 - 3);

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
    // Istio's telemetry filters run: the metadata exchange (here in its older Wasm form,
    // which propagates by the listener's direction), then the standard metrics.
    use crate::config::filters::HttpFilterConfig;
    let run = |name: &str| hcm.http_filters.iter().find(|f| f.name == name).map(|f| &f.config);
    let mx = run("istio.metadata_exchange");
    assert!(matches!(mx, Some(HttpFilterConfig::PeerMetadata(mx)) if mx.for_direction(false).upstream_propagation));
    assert!(matches!(run("istio.stats"), Some(HttpFilterConfig::IstioStats(_))));
    assert!(!hcm.skipped_http_filters.iter().any(|f| f.name == "istio.stats"));
}

#[test]
fn waypoint_listeners_and_routes_convert() {
    // Istio 1.21's waypoint: every listener converts, `main_internal` with its
    // `set_filter_state` network filters and Istio's largest filter chain matcher, which
    // selects as Envoy's does.
    let file = "waypoint-full.config_dump.json";
    let listeners = convert_listeners_refusing(file, &[]);
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

#[test]
fn istiods_waypoint_rendering_converts_whole() {
    // What a current istiod in Kubernetes mode sent an Outrider waypoint (tests/mesh/waypoint.rs
    // captured it: a Service bound to the waypoint, an HTTPRoute, an AuthorizationPolicy),
    // as istiod's debug endpoint writes it (camelCase JSON): every listener converts with
    // nothing dropped, and `main_internal` picks the Service's chain by its address.
    let dump = dump("waypoint-istiod.config_dump.json");
    let mut listeners = Vec::new();
    for section in sections(&dump, "ListenersConfigDump") {
        for entry in section["dynamicListeners"].as_array().into_iter().flatten() {
            let value = entry["activeState"]["listener"].clone();
            let (proto, dropped) = from_value::<proto::Listener>("envoy.config.listener.v3.Listener", value).unwrap();
            assert!(dropped.is_empty(), "{dropped:?}");
            listeners.push(listener(proto, &mut Warnings::new()).unwrap());
        }
    }
    let names: Vec<&str> = listeners.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "connect_terminate",
            "main_internal",
            "connect_originate",
            "inner_connect_originate",
            "outer_connect_originate"
        ]
    );
    let main = by_name(&listeners, "main_internal");
    let select = |ip: &str, port: u16| {
        main.filter_chain_matcher.as_ref().and_then(|m| {
            m.select(&|input| match input {
                NetworkInput::DestinationIp => Some(ip.to_owned()),
                NetworkInput::DestinationPort => Some(port.to_string()),
                _ => None,
            })
            .map(str::to_owned)
        })
    };
    assert_eq!(select("10.96.40.177", 80).as_deref(), Some("inbound-vip|80|http|echo.default.svc.cluster.local"));
    assert_eq!(select("10.96.40.177", 81), None);
}
