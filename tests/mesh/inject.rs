//! `outrider bootstrap` and `outrider inject` from the outside: the generated bootstrap
//! loads as any bootstrap does, and the commands work on files.

use std::collections::BTreeMap;
use std::process::Command;

use outrider::config::Address;
use outrider::config::bootstrap::{ApiType, Bootstrap};
use outrider::inject::PodInfo;

fn pod_env() -> BTreeMap<String, String> {
    [
        ("POD_NAME", "reviews-v1-7f9c"),
        ("POD_NAMESPACE", "shop"),
        ("INSTANCE_IP", "10.1.2.3"),
        ("SERVICE_ACCOUNT", "reviews"),
        ("ISTIO_METAJSON_LABELS", r#"{"app":"reviews"}"#),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

#[test]
fn generated_bootstrap_loads_with_istios_shape() {
    let document = PodInfo::from_env(&pod_env()).unwrap().bootstrap();
    let bootstrap = Bootstrap::parse(&document.to_string()).unwrap();
    assert_eq!(bootstrap.node.id, "sidecar~10.1.2.3~reviews-v1-7f9c.shop~shop.svc.cluster.local");
    assert_eq!(bootstrap.node.metadata["NAMESPACE"], "shop");
    let ads = bootstrap.ads.as_ref().unwrap();
    assert_eq!(ads.api_type, ApiType::Delta);
    assert_eq!(ads.cluster_name, "xds-grpc");
    assert_eq!(ads.lds.unwrap().initial_fetch_timeout, None);
    assert_eq!(bootstrap.admin_address.to_string(), "127.0.0.1:15000");
    let xds = bootstrap.static_clusters.iter().find(|c| c.name == "xds-grpc").unwrap();
    let endpoint = xds.load_assignment.as_ref().unwrap().endpoints().next().unwrap();
    assert!(
        matches!(&endpoint.address, Address::Pipe(p) if p.ends_with("etc/istio/proxy/XDS")),
        "{:?}",
        endpoint.address
    );
    let listeners: Vec<_> = bootstrap.static_listeners.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(listeners, ["0.0.0.0_15090", "0.0.0.0_15021"]);
    // Slow clients of the Prometheus and health ports are cut off, and capped.
    for listener in &bootstrap.static_listeners {
        let chain = &listener.filter_chains[0];
        let limits: Vec<_> = chain.connection_limits.iter().map(|l| l.max_connections).collect();
        assert_eq!(limits, [64], "{}", listener.name);
        let outrider::config::listener::TerminalFilter::HttpConnectionManager(hcm) = &chain.terminal else {
            panic!("{}: not an HTTP connection manager", listener.name)
        };
        assert_eq!(hcm.request_headers_timeout, Some(std::time::Duration::from_secs(10)), "{}", listener.name);
    }
    assert!(bootstrap.ignored.is_empty(), "nothing in it is ignored: {:?}", bootstrap.ignored);
}

#[test]
fn bootstrap_command_writes_the_file_and_validate_accepts_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bootstrap.json");
    let status = Command::new(env!("CARGO_BIN_EXE_outrider"))
        .args(["bootstrap", "-o"])
        .arg(&path)
        .env_clear()
        .envs(pod_env())
        .status()
        .unwrap();
    assert!(status.success());
    let output = Command::new(env!("CARGO_BIN_EXE_outrider")).args(["validate", "-c"]).arg(&path).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

    let output = Command::new(env!("CARGO_BIN_EXE_outrider")).arg("bootstrap").env_clear().output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("POD_NAME"));
}

#[test]
fn inject_command_prints_the_manifest_with_the_sidecar() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/k8s/app.yaml");
    let output = Command::new(env!("CARGO_BIN_EXE_outrider"))
        .args(["inject", "--image", "outrider:test", "-f"])
        .arg(&fixture)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    assert_eq!(text.matches("name: outrider-init").count(), 4);
    assert!(text.contains("image: outrider:test"));

    let output =
        Command::new(env!("CARGO_BIN_EXE_outrider")).args(["inject", "-f", "/nonexistent.yaml"]).output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent.yaml"));
}
