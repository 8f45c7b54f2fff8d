use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn pod_env() -> BTreeMap<String, String> {
    env(&[
        ("POD_NAME", "reviews-v1-7f9c"),
        ("POD_NAMESPACE", "shop"),
        ("INSTANCE_IP", "10.1.2.3"),
        ("SERVICE_ACCOUNT", "reviews"),
        ("ISTIO_META_CLUSTER_ID", "east"),
        ("ISTIO_METAJSON_LABELS", r#"{"app":"reviews","version":"v1"}"#),
        ("PATH", "/usr/bin"),
    ])
}

fn settings() -> Settings {
    Settings {
        image: "outrider:test".into(),
        init_image: "outrider-init:test".into(),
        xds_address: None,
        discovery_address: "istiod.istio-system.svc:15012".into(),
        cluster_id: "Kubernetes".into(),
        mesh_id: "cluster.local".into(),
        agent: false,
        proxy_metadata: BTreeMap::new(),
    }
}

#[test]
fn node_id_is_istios_sidecar_format() {
    let pod = PodInfo::from_env(&pod_env()).unwrap();
    assert_eq!(pod.node_id(), "sidecar~10.1.2.3~reviews-v1-7f9c.shop~shop.svc.cluster.local");
}

#[test]
fn a_waypoint_is_named_as_pilot_agent_names_one() {
    let mut env = pod_env();
    env.insert(bootstrap::PROXY_TYPE_VARIABLE.into(), "waypoint".into());
    let pod = PodInfo::from_env(&env).unwrap();
    assert_eq!(pod.node_id(), "waypoint~10.1.2.3~reviews-v1-7f9c.shop~shop.svc.cluster.local");
    env.insert(bootstrap::PROXY_TYPE_VARIABLE.into(), "router".into());
    let e = PodInfo::from_env(&env).unwrap_err().to_string();
    assert!(e.contains("OUTRIDER_PROXY_TYPE"), "{e}");
}

#[test]
fn node_metadata_comes_from_the_downward_api_and_istio_meta() {
    let document = PodInfo::from_env(&pod_env()).unwrap().bootstrap();
    let node = &document["node"];
    assert_eq!(node["cluster"], "reviews.shop");
    let metadata = &node["metadata"];
    assert_eq!(metadata["NAME"], "reviews-v1-7f9c");
    assert_eq!(metadata["NAMESPACE"], "shop");
    assert_eq!(metadata["INSTANCE_IPS"], "10.1.2.3");
    assert_eq!(metadata["SERVICE_ACCOUNT"], "reviews");
    assert_eq!(metadata["CLUSTER_ID"], "east", "ISTIO_META_* wins over the default");
    assert_eq!(metadata["MESH_ID"], "cluster.local");
    assert_eq!(metadata["LABELS"], json!({"app": "reviews", "version": "v1"}), "ISTIO_METAJSON_* is JSON");
    assert_eq!(metadata["ISTIO_VERSION"], bootstrap::DEFAULT_ISTIO_VERSION);
    assert!(metadata.get("PATH").is_none());
}

#[test]
fn xds_goes_to_the_agent_socket_with_delta_ads_unless_an_address_is_given() {
    let document = PodInfo::from_env(&pod_env()).unwrap().bootstrap();
    assert_eq!(document["dynamic_resources"]["ads_config"]["api_type"], "DELTA_GRPC");
    let clusters = document["static_resources"]["clusters"].as_array().unwrap();
    let endpoint = |name: &str| {
        let cluster = clusters.iter().find(|c| c["name"] == name).unwrap();
        cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"].clone()
    };
    assert_eq!(endpoint("xds-grpc")["pipe"]["path"], "./etc/istio/proxy/XDS");
    assert_eq!(endpoint("sds-grpc")["pipe"]["path"], "./var/run/secrets/workload-spiffe-uds/socket");

    let mut direct = pod_env();
    direct.insert("OUTRIDER_XDS_ADDRESS".into(), "istiod.istio-system.svc:15010".into());
    let document = PodInfo::from_env(&direct).unwrap().bootstrap();
    let xds = &document["static_resources"]["clusters"][2];
    assert_eq!(xds["type"], "STRICT_DNS");
    let address = &xds["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"];
    assert_eq!(address["address"], "istiod.istio-system.svc");
    assert_eq!(address["port_value"], 15010);
}

#[test]
fn missing_or_malformed_environment_is_an_error_naming_the_variable() {
    let mut pod = pod_env();
    pod.remove("INSTANCE_IP");
    let e = PodInfo::from_env(&pod).unwrap_err().to_string();
    assert!(e.contains("INSTANCE_IP"), "{e}");
    let mut pod = pod_env();
    pod.insert("ISTIO_METAJSON_LABELS".into(), "{not json".into());
    let e = PodInfo::from_env(&pod).unwrap_err().to_string();
    assert!(e.contains("ISTIO_METAJSON_LABELS"), "{e}");
}

#[test]
fn documents_split_at_markers_and_keep_their_text() {
    assert_eq!(documents("a: 1\n"), ["a: 1\n"]);
    assert_eq!(documents("---\na: 1\n---\nb: 2\n"), ["a: 1\n", "b: 2\n"]);
    assert_eq!(documents("a: 1\n--- # two\nb: |\n  ---x\n"), ["a: 1\n", "b: |\n  ---x\n"]);
    assert_eq!(documents("--- {a: 1}\n"), [" {a: 1}\n"]);
}

const FIXTURE: &str = include_str!("../../tests/data/k8s/app.yaml");

fn parsed(text: &str) -> Vec<Value> {
    documents(text).into_iter().map(|d| serde_saphyr::from_str(d).unwrap()).collect()
}

#[test]
fn workloads_get_the_init_container_and_the_native_sidecar() {
    let (out, outcomes) = inject_text(FIXTURE, &settings()).unwrap();
    let injected = outcomes.iter().filter(|o| **o == Outcome::Injected).count();
    assert_eq!(injected, 4, "Deployment, Pod, StatefulSet, Job: {outcomes:?}");
    let docs = parsed(&out);
    let deployment = &docs[1]["spec"]["template"];
    let init = deployment["spec"]["initContainers"].as_array().unwrap();
    let names: Vec<_> = init.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["outrider-init", "outrider", "migrate"], "the proxy starts before the app's init containers");

    let capture = &init[0];
    assert_eq!(capture["args"][0], "capture");
    assert_eq!(capture["image"], "outrider-init:test");
    assert_eq!(capture["securityContext"]["runAsUser"], 0);
    assert_eq!(capture["securityContext"]["capabilities"]["add"], json!(["NET_ADMIN", "NET_RAW"]));

    let proxy = &init[1];
    assert_eq!(proxy["restartPolicy"], "Always");
    assert_eq!(proxy["securityContext"]["runAsUser"], 1337);
    assert_eq!(proxy["securityContext"]["runAsGroup"], 1337);
    assert_eq!(proxy["readinessProbe"]["httpGet"], json!({"path": "/healthz/ready", "port": 15021}));
    let env: Vec<_> = proxy["env"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    for name in ["POD_NAME", "POD_NAMESPACE", "INSTANCE_IP", "SERVICE_ACCOUNT", "ISTIO_METAJSON_LABELS"] {
        assert!(env.contains(&name), "{name} in {env:?}");
    }
    let owner = proxy["env"].as_array().unwrap().iter().find(|e| e["name"] == "ISTIO_META_OWNER").unwrap();
    assert_eq!(owner["value"], "kubernetes://apis/apps/v1/namespaces/$(POD_NAMESPACE)/deployments/reviews-v1");

    // The sidecar does istio-agent's job: istiod over TLS, the merged metrics on 15020.
    assert_eq!(proxy["args"], json!(["sidecar", "--bootstrap", sidecar::BOOTSTRAP_PATH, "--istio-agent"]));
    let proxy_config = proxy["env"].as_array().unwrap().iter().find(|e| e["name"] == "PROXY_CONFIG").unwrap();
    assert_eq!(proxy_config["value"], r#"{"discoveryAddress":"istiod.istio-system.svc:15012"}"#);
    let metadata = &deployment["metadata"];
    assert_eq!(metadata["annotations"]["prometheus.io/port"], "15020");
    assert_eq!(metadata["labels"]["security.istio.io/tlsMode"], "istio");
    assert_eq!(metadata["labels"]["service.istio.io/canonical-revision"], "v1");
    let volumes: Vec<_> =
        deployment["spec"]["volumes"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    for name in ["workload-socket", "istio-envoy", "istio-token", "istiod-ca-cert", "istio-podinfo"] {
        assert!(volumes.contains(&name), "{name} in {volumes:?}");
    }
    // Strings that look like other scalars stay strings through the YAML writer.
    let app_env = &deployment["spec"]["containers"][0]["env"][1];
    assert_eq!(app_env["value"], "true");
}

#[test]
fn other_kinds_opted_out_and_host_network_pods_pass_through_byte_for_byte() {
    let (out, outcomes) = inject_text(FIXTURE, &settings()).unwrap();
    let before = documents(FIXTURE);
    let after = documents(&out);
    assert_eq!(before.len(), after.len());
    for index in [0, 4, 6, 7] {
        assert_eq!(before[index], after[index], "document {index}");
    }
    assert!(outcomes.iter().any(|o| matches!(o, Outcome::Skipped(why) if why.contains("hostNetwork"))));
    assert!(outcomes.iter().any(|o| matches!(o, Outcome::Skipped(why) if why.contains("sidecar.istio.io/inject"))));
}

#[test]
fn injecting_twice_changes_nothing() {
    let (once, _) = inject_text(FIXTURE, &settings()).unwrap();
    let (twice, outcomes) = inject_text(&once, &settings()).unwrap();
    assert_eq!(once, twice);
    assert!(!outcomes.contains(&Outcome::Injected));
}

#[test]
fn broken_manifests_are_errors_naming_the_document() {
    let e = inject_text("kind: Pod\n---\nkind: Deployment\nspec: {}\n", &settings()).unwrap_err().to_string();
    assert!(e.starts_with("document 0"), "{e}");
    let e = inject_text("kind: ConfigMap\n---\nkind: Deployment\nmetadata: {name: x}\n", &settings()).unwrap_err();
    assert!(e.to_string().contains("document 1"), "{e}");
    assert!(inject_text("kind: [\n", &settings()).is_err());
}

/// Under istio-agent the pod keeps Istio's injection; only the proxy image is chosen.
#[test]
fn agent_mode_asks_istios_injection_for_the_outrider_image() {
    let agent = Settings { agent: true, image: "outrider-istio-proxy:test".into(), ..settings() };
    let (out, outcomes) = inject_text(FIXTURE, &agent).unwrap();
    assert!(outcomes.contains(&Outcome::Injected), "{outcomes:?}");
    assert!(out.contains("sidecar.istio.io/proxyImage: outrider-istio-proxy:test"), "{out}");
    assert!(!out.contains("outrider-init"), "no containers are added: {out}");
}

/// Doing istio-agent's job, the sidecar answers the application's probes on 15020 and
/// merges its metrics, as pilot-agent does under Istio's injection.
#[test]
fn probes_and_scrape_annotations_move_to_the_sidecars_status_port() {
    let (out, _) = inject_text(PROBED_POD, &settings()).unwrap();
    let pod = &parsed(&out)[0];
    let web = &pod["spec"]["containers"][0];
    assert_eq!(
        web["readinessProbe"]["httpGet"],
        json!({"path": "/app-health/web/readyz", "port": 15020, "scheme": "HTTP"})
    );
    assert_eq!(web["readinessProbe"]["periodSeconds"], 5);
    assert_eq!(web["livenessProbe"], json!({"exec": {"command": ["true"]}}));
    let proxy = &pod["spec"]["initContainers"][1];
    let env = |name: &str| -> Value {
        let found = proxy["env"].as_array().unwrap().iter().find(|e| e["name"] == name).unwrap();
        serde_json::from_str(found["value"].as_str().unwrap()).unwrap()
    };
    assert_eq!(
        env("ISTIO_KUBE_APP_PROBERS"),
        json!({"/app-health/web/readyz": {"httpGet": {"path": "/ready", "port": 8080}}})
    );
    assert_eq!(env("ISTIO_PROMETHEUS_ANNOTATIONS"), json!({"scrape": "true", "port": "9100", "path": "/m"}));
    assert_eq!(pod["metadata"]["annotations"]["prometheus.io/port"], "15020");

    // With a control plane address the sidecar is not the agent: nothing is rewritten.
    let direct = Settings { xds_address: Some("istiod.istio-system.svc:15010".into()), ..settings() };
    let (out, _) = inject_text(PROBED_POD, &direct).unwrap();
    let pod = &parsed(&out)[0];
    assert_eq!(pod["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"], "/ready");
    assert!(!out.contains("ISTIO_KUBE_APP_PROBERS"), "{out}");
}

const PROBED_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  annotations: { prometheus.io/scrape: "true", prometheus.io/port: "9100", prometheus.io/path: /m }
spec:
  containers:
  - name: web
    image: web
    ports: [{ name: http, containerPort: 8080 }]
    readinessProbe: { httpGet: { path: /ready, port: http }, periodSeconds: 5 }
    livenessProbe: { exec: { command: ["true"] } }
"#;

/// A pod named `ratings` whose `proxy.istio.io/config` annotation has `entries` as its
/// `proxyMetadata`, with one container `app` (and `container_fields` added to it).
fn annotated_pod(entries: &[&str], container_fields: &str) -> String {
    let entries: String = entries.iter().map(|e| format!("        {e}\n")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ratings\n  annotations:\n    proxy.istio.io/config: |\n      \
         proxyMetadata:\n{entries}spec:\n  containers: [{{ name: app, image: app{container_fields} }}]\n"
    )
}

/// ProxyConfig's `proxyMetadata`, mesh-wide (`--proxy-metadata`) and the pod's own
/// (`proxy.istio.io/config`), reaches the sidecar's environment, the pod's winning; from
/// there `ISTIO_META_OUTRIDER_LB` becomes the node metadata that chooses the proxy-wide
/// balancing policy.
#[test]
fn proxy_metadata_reaches_the_sidecar_and_its_node_metadata() {
    let manifest = annotated_pod(&["ISTIO_META_OUTRIDER_LB: adaptive", "ISTIO_META_CLUSTER_ID: west"], "");
    let mesh_wide = Settings {
        proxy_metadata: env(&[("ISTIO_META_OUTRIDER_LB", "none"), ("ISTIO_META_DNS_CAPTURE", "true")]),
        ..settings()
    };
    let (out, _) = inject_text(&manifest, &mesh_wide).unwrap();
    let pod = &parsed(&out)[0];
    let proxy = &pod["spec"]["initContainers"][1];
    let env_of = |name: &str| -> Vec<String> {
        proxy["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == name)
            .map(|e| e["value"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(env_of("ISTIO_META_OUTRIDER_LB"), ["adaptive"], "the pod's entry wins");
    assert_eq!(env_of("ISTIO_META_DNS_CAPTURE"), ["true"], "mesh-wide entries stay");
    assert_eq!(env_of("ISTIO_META_CLUSTER_ID"), ["west"], "one variable of a name");
    // The capture init container gets them too, as Istio's template gives them: DNS
    // capture follows ISTIO_META_DNS_CAPTURE there.
    let init = &pod["spec"]["initContainers"][0];
    assert_eq!(init["args"][0], "capture");
    assert!(
        init["env"].as_array().unwrap().iter().any(|e| e["name"] == "ISTIO_META_DNS_CAPTURE" && e["value"] == "true")
    );

    let mut downward = pod_env();
    downward.insert("ISTIO_META_OUTRIDER_LB".into(), "adaptive".into());
    let document = PodInfo::from_env(&downward).unwrap().bootstrap();
    assert_eq!(document["node"]["metadata"]["OUTRIDER_LB"], "adaptive");

    let broken = manifest.replace("ISTIO_META_CLUSTER_ID: west", "ISTIO_META_CLUSTER_ID: [west]");
    let error = inject_text(&broken, &settings()).unwrap_err().to_string();
    assert!(error.contains("proxyMetadata.ISTIO_META_CLUSTER_ID"), "{error}");
}

/// A pod whose proxy metadata asks its sidecar to read the application's CPU from its
/// processes gets a shared process namespace and its containers' CPU limit, and the
/// sidecar's node metadata says both.
#[test]
fn the_application_cpu_source_shares_the_process_namespace_and_carries_the_limit() {
    let manifest = annotated_pod(&["ISTIO_META_OUTRIDER_APP_CPU: processes"], ", resources: { limits: { cpu: 750m } }");
    let (out, _) = inject_text(&manifest, &settings()).unwrap();
    let pod = &parsed(&out)[0];
    assert_eq!(pod["spec"]["shareProcessNamespace"], true);
    let env = pod["spec"]["initContainers"][1]["env"].as_array().unwrap();
    let limit = env.iter().find(|e| e["name"] == "ISTIO_META_OUTRIDER_APP_CPU_LIMIT").unwrap();
    assert_eq!(limit["value"], "750");

    let mut downward = pod_env();
    downward.insert("ISTIO_META_OUTRIDER_APP_CPU".into(), "processes".into());
    downward.insert("ISTIO_META_OUTRIDER_APP_CPU_LIMIT".into(), "750".into());
    let document = PodInfo::from_env(&downward).unwrap().bootstrap();
    assert_eq!(document["node"]["metadata"]["OUTRIDER_APP_CPU_LIMIT"], "750");

    // Without the ask the pod is left as it was.
    let plain = manifest.replace("ISTIO_META_OUTRIDER_APP_CPU: processes", "ISTIO_META_OUTRIDER_LB: adaptive");
    let (out, _) = inject_text(&plain, &settings()).unwrap();
    assert!(parsed(&out)[0]["spec"].get("shareProcessNamespace").is_none());
}

#[test]
fn labels_from_the_downward_api_file_replace_the_labels_variable_as_pilot_agents_do() {
    // As the kubelet writes the `istio-podinfo` volume's `labels` under Istio's injection.
    let file = "app=\"reviews\"\npod-template-hash=\"7f9c\"\nservice.istio.io/canonical-revision=\"v2\"\n";
    let document = PodInfo::from_env(&pod_env()).unwrap().with_downward_labels(file).unwrap().bootstrap();
    let labels = &document["node"]["metadata"]["LABELS"];
    assert_eq!(labels["app"], "reviews");
    assert_eq!(labels["service.istio.io/canonical-revision"], "v2");
    assert!(labels.get("pod-template-hash").is_none(), "{labels}");
    assert_eq!(document["node"]["cluster"], "reviews.shop");
    let e = PodInfo::from_env(&pod_env()).unwrap().with_downward_labels("app=reviews\n").unwrap_err();
    assert!(e.to_string().contains("etc/istio/pod/labels"), "{e}");
}
