//! Finding a request's virtual host in an Istio-sized route table: 5 000 virtual hosts on
//! one port, each with Istio's five domain spellings (`name.ns.svc.cluster.local`, with a
//! trailing dot, `name`, `name.ns.svc`, `name.ns`), plus the `*` default. A host of the
//! first, of the middle and of the last virtual host, one with uppercase letters, and
//! one that only the default matches must all cost the same.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use outrider::config::convert::decode_resource;
use outrider::config::{Resource, ResourceType, Warnings};
use prost::Message;
use serde_json::json;

const SERVICES: usize = 5_000;

fn route_table() -> outrider::config::RouteConfiguration {
    let mut virtual_hosts: Vec<_> = (0..SERVICES)
        .map(|i| {
            let name = format!("svc-{i}");
            let fqdn = format!("{name}.default.svc.cluster.local");
            json!({
                "name": format!("{fqdn}:80"),
                "domains": [fqdn, format!("{fqdn}."), name, format!("svc-{i}.default.svc"), format!("svc-{i}.default")],
                "routes": [{ "match": { "prefix": "/" }, "route": { "cluster": format!("outbound|80||{fqdn}") } }],
            })
        })
        .collect();
    virtual_hosts.push(json!({
        "name": "allow_any",
        "domains": ["*"],
        "routes": [{ "match": { "prefix": "/" }, "route": { "cluster": "PassthroughCluster" } }],
    }));
    let config = json!({ "name": "80", "ignore_port_in_host_matching": true, "virtual_hosts": virtual_hosts });
    let (message, _) = outrider::pb::json::from_value::<outrider::pb::envoy::config::route::v3::RouteConfiguration>(
        "envoy.config.route.v3.RouteConfiguration",
        config,
    )
    .unwrap();
    let mut warnings = Warnings::new();
    match decode_resource(ResourceType::RouteConfiguration, &message.encode_to_vec(), &mut warnings).unwrap() {
        Resource::RouteConfiguration(config) => config,
        other => panic!("not a route configuration: {other:?}"),
    }
}

/// What the lookup was before the index, for comparison in the same run: the host
/// lowercased into a new string, then every domain of every virtual host tried.
fn by_scan<'a>(table: &'a outrider::config::RouteConfiguration, host: &str) -> Option<&'a str> {
    use outrider::config::route::DomainMatcher;
    let mut host = host.to_ascii_lowercase();
    if let Some(colon) = host.rfind(':')
        && host[colon + 1..].bytes().all(|b| b.is_ascii_digit())
    {
        host.truncate(colon);
    }
    let mut best: Option<((u8, usize), &str)> = None;
    for vhost in &table.virtual_hosts {
        for domain in vhost.domains.iter().filter(|d| d.matches(&host)) {
            let score = match domain {
                DomainMatcher::Exact(_) => (3, usize::MAX),
                DomainMatcher::Suffix(s) => (2, s.len()),
                DomainMatcher::Prefix(p) => (1, p.len()),
                DomainMatcher::Any => (0, 0),
            };
            if best.is_none_or(|(b, _)| score > b) {
                best = Some((score, vhost.name.as_str()));
            }
        }
    }
    best.map(|(_, name)| name)
}

fn lookup(c: &mut Criterion) {
    let table = route_table();
    let mut group = c.benchmark_group("virtual_host_lookup_5000");
    for (label, host) in [
        ("first", "svc-0.default.svc.cluster.local".to_owned()),
        ("middle", format!("svc-{}.default", SERVICES / 2)),
        ("last", format!("svc-{}.default.svc.cluster.local:80", SERVICES - 1)),
        ("last_uppercase", format!("SVC-{}.Default.svc.cluster.local", SERVICES - 1)),
        ("default_only", "example.com".to_owned()),
    ] {
        let found = table.find_virtual_host(&host).map(|v| v.name.as_str());
        assert_eq!(found, by_scan(&table, &host), "{host}");
        group.bench_function(format!("index/{label}"), |b| {
            b.iter(|| black_box(table.find_virtual_host(black_box(&host))))
        });
        group.bench_function(format!("scan/{label}"), |b| b.iter(|| black_box(by_scan(&table, black_box(&host)))));
    }
    group.finish();
}

criterion_group!(benches, lookup);
criterion_main!(benches);
