//! Envoy's bootstrap format: Istio's generated sidecar bootstrap loads, with the list of
//! what is ignored; invalid files are refused with the field path; `outrider validate`.

use std::process::Command;

use outrider::config::Address;
use outrider::config::bootstrap::{ApiType, Bootstrap, BootstrapError};

/// Istio's generated sidecar bootstrap (istio/istio `pkg/bootstrap/testdata/default_golden.json`).
fn istio_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio/sidecar-bootstrap.default_golden.json")
}

#[test]
fn istio_sidecar_bootstrap_loads_with_a_list_of_what_is_ignored() {
    let bootstrap = Bootstrap::load(&istio_path()).unwrap();
    assert_eq!(bootstrap.node.id, "sidecar~1.2.3.4~foo~bar");
    assert_eq!(bootstrap.node.cluster, "istio-proxy");
    assert_eq!(bootstrap.node.metadata["ISTIO_VERSION"], "binary-1.0");
    let ads = bootstrap.ads.as_ref().unwrap();
    assert_eq!(ads.api_type, ApiType::Delta);
    assert_eq!(ads.cluster_name, "xds-grpc");
    assert!(ads.set_node_on_first_message_only);
    assert_eq!(ads.lds.unwrap().initial_fetch_timeout, None, "0s waits forever");
    let names: Vec<_> = bootstrap.static_clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["prometheus_stats", "agent", "sds-grpc", "xds-grpc"]);
    let xds = bootstrap.static_clusters.iter().find(|c| c.name == "xds-grpc").unwrap();
    let endpoint = xds.load_assignment.as_ref().unwrap().endpoints().next().unwrap();
    assert!(matches!(&endpoint.address, Address::Pipe(p) if p.ends_with("XDS")), "{:?}", endpoint.address);
    assert_eq!(bootstrap.static_listeners.len(), 2);

    let ignored: Vec<_> = bootstrap.ignored.iter().map(|i| i.path.as_str()).collect();
    assert!(ignored.contains(&"stats_config.stats_tags"), "stats_tags is reported as ignored: {ignored:?}");
    // The internal listener extension's buffer size is taken; the workloads' metadata is
    // not asked for (no ambient here).
    assert!(!ignored.iter().any(|p| p.starts_with("bootstrap_extensions")), "{ignored:?}");
    assert_eq!(bootstrap.internal_listener_buffer_kb, Some(64));
    assert!(!bootstrap.workload_discovery);
    assert!(!ignored.iter().any(|p| p.starts_with("layered_runtime")), "layered_runtime is ignored silently");
    // Istio's global connection limit is i32::MAX: understood as no limit, not ignored.
    assert!(!ignored.iter().any(|p| p.starts_with("overload_manager")), "{ignored:?}");
    assert_eq!(bootstrap.overload.max_downstream_connections, None);
    // Istio's inclusion list is enforced, not ignored.
    assert!(!ignored.iter().any(|p| p.starts_with("stats_config.stats_matcher")), "{ignored:?}");
    assert!(!bootstrap.stats.matcher.rejects("cluster.xds-grpc.upstream_rq_total"));
    assert!(bootstrap.stats.matcher.rejects("cluster.outbound|80||a.default.svc.cluster.local.upstream_rq_total"));
}

fn invalid(yaml: &str) -> String {
    match Bootstrap::parse(yaml) {
        Err(BootstrapError::Invalid(e)) => e.to_string(),
        other => panic!("expected an invalid bootstrap, got {other:?}"),
    }
}

#[test]
fn problems_are_reported_with_their_field_path() {
    let rest = invalid(
        "dynamic_resources: { ads_config: { api_type: REST, grpc_services: [{ envoy_grpc: { cluster_name: x } }] } }",
    );
    assert!(rest.starts_with("dynamic_resources.ads_config.api_type:"), "{rest}");

    let missing = invalid(
        "dynamic_resources: { cds_config: { ads: {} }, ads_config: { api_type: GRPC, grpc_services: [{ envoy_grpc: { cluster_name: nowhere } }] } }",
    );
    assert!(missing.starts_with("dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name:"), "{missing}");

    let port = invalid(
        "static_resources: { clusters: [{ name: a, type: STATIC, load_assignment: { cluster_name: a, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 99999 } } } }] }] } }] }",
    );
    assert!(
        port.starts_with("static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value:"),
        "{port}"
    );

    let path = invalid("dynamic_resources: { lds_config: { path: /etc/lds.yaml } }");
    assert!(path.starts_with("dynamic_resources.lds_config"), "{path}");
}

#[test]
fn unknown_fields_are_ignored_with_a_warning_each() {
    let bootstrap = Bootstrap::parse("node: { id: a, favourite_colour: blue }\nnot_a_field: 1\n").unwrap();
    let ignored: Vec<_> = bootstrap.ignored.iter().map(|i| i.path.as_str()).collect();
    assert_eq!(ignored, ["node.favourite_colour", "not_a_field"]);
}

#[test]
fn static_clusters_read_one_by_one_keep_their_paths_and_order() {
    let yaml = "static_resources:\n  clusters:\n  - { name: a, type: STATIC, colour: red }\n  - { name: b, type: STATIC, \
                typed_extension_protocol_options: { x: { '@type': type.googleapis.com/not.a.Type } } }\n  \
                - { name: c, type: STATIC, connect_timeout: 2s }\n";
    let bootstrap = Bootstrap::parse(yaml).unwrap();
    let ignored: Vec<_> = bootstrap.ignored.iter().map(|i| i.path.as_str()).collect();
    assert_eq!(
        ignored,
        ["static_resources.clusters[0].colour", "static_resources.clusters[1].typed_extension_protocol_options[x]"]
    );
    let names: Vec<_> = bootstrap.static_clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let malformed = invalid("static_resources: { clusters: [{ name: a }, { name: b, connect_timeout: soon }] }");
    assert!(malformed.starts_with("static_resources.clusters[1]"), "{malformed}");
}

#[test]
fn yaml_and_json_give_the_same_bootstrap() {
    let yaml = Bootstrap::parse("node: { id: a, cluster: b }\nadmin: { address: { socket_address: { address: 127.0.0.1, port_value: 9901 } } }\n").unwrap();
    let json = Bootstrap::parse(r#"{"node": {"id": "a", "cluster": "b"}, "admin": {"address": {"socketAddress": {"address": "127.0.0.1", "portValue": 9901}}}}"#).unwrap();
    assert_eq!(yaml.node, json.node);
    assert_eq!(yaml.admin_address, json.admin_address);
    assert_eq!(yaml.admin_address.to_string(), "127.0.0.1:9901");
}

#[test]
fn validate_command_lists_ignored_fields_and_fails_on_errors() {
    let outrider = env!("CARGO_BIN_EXE_outrider");
    let ok = Command::new(outrider).args(["validate", "--config"]).arg(istio_path()).output().unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(stdout.contains("ignored: stats_config.stats_tags:"), "{stdout}");
    assert!(stdout.contains("valid (2 static listeners, 4 static clusters"), "{stdout}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "dynamic_resources: { ads_config: { api_type: REST } }\n").unwrap();
    let failed = Command::new(outrider).args(["validate", "--config"]).arg(&bad).output().unwrap();
    assert!(!failed.status.success());
    assert!(String::from_utf8_lossy(&failed.stderr).contains("dynamic_resources.ads_config.api_type"));
}
