//! Resource-by-resource acceptance of secrets, against the real Envoy 1.40: three clusters
//! whose TLS contexts name a secret each, fetched over ADS (`sds_config: { ads: {} }`), and
//! one SDS response updating all three, the middle one invalid (a certificate chain that
//! does not parse). What each proxy applies and NACKs is compared, SotW and Delta.

use crate::common;
use crate::tls_support;

use std::collections::BTreeMap;

use crate::common::skip::{Tool, skipped};
use common::acceptance::*;
use common::differential::{Envoy, envoy_binary};
use common::{ControlPlane, bootstrap, wait_snapshot};
use outrider::app;
use outrider::config::ResourceType;
use serde_json::{Value, json};
use tls_support::pki::{Ca, Leaf, spiffe};

const SECRETS: [&str; 3] = ["cert_a", "cert_b", "cert_c"];

fn tls_cluster(name: &str, secret: &str, ca: &Ca) -> String {
    let tls = json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "sni": "server.test",
            "common_tls_context": {
                "tls_certificate_sds_secret_configs": [
                    { "name": secret, "sds_config": { "ads": {}, "resource_api_version": "V3" } }
                ],
                "validation_context": { "trusted_ca": { "inline_string": ca.pem() } },
            },
        },
    });
    json!({
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": { "cluster_name": name, "endpoints": [{ "lb_endpoints": [{ "endpoint": { "address": {
            "socket_address": { "address": "127.0.0.1", "port_value": 9000 } } } }] }] },
        "transport_socket": tls,
    })
    .to_string()
}

fn secret(name: &str, chain: &str, key: &str) -> String {
    json!({
        "name": name,
        "tls_certificate": { "certificate_chain": { "inline_string": chain }, "private_key": { "inline_string": key } },
    })
    .to_string()
}

fn leaf_secret(name: &str, leaf: &Leaf) -> String {
    secret(name, &leaf.cert_pem, &leaf.key_pem)
}

/// Secret name → version, as Envoy's `/config_dump` shows the active ones.
fn envoy_secrets(dump: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for config in dump["configs"].as_array().unwrap() {
        if config["@type"].as_str().unwrap().ends_with("SecretsConfigDump") {
            for s in config["dynamic_active_secrets"].as_array().into_iter().flatten() {
                out.insert(s["name"].as_str().unwrap().to_owned(), s["version_info"].as_str().unwrap().to_owned());
            }
        }
    }
    out
}

async fn sds_partial_acceptance(api_type: &str) {
    let control_plane = ControlPlane::start().await;
    let ca = Ca::new("partial-ca");
    let first: Vec<Leaf> = SECRETS.iter().map(|s| ca.leaf(&spiffe(s))).collect();
    let clusters: Vec<String> = SECRETS.iter().map(|s| tls_cluster(&format!("tls_{}", &s[5..]), s, &ca)).collect();
    set(&control_plane, ResourceType::Cluster, &clusters);
    let secrets: Vec<String> = SECRETS.iter().zip(&first).map(|(s, l)| leaf_secret(s, l)).collect();
    set(&control_plane, ResourceType::Secret, &secrets);
    set(&control_plane, ResourceType::Listener, &[]);
    let envoy = match envoy_binary() {
        Some(binary) => Some(Envoy::start(&binary, &envoy_bootstrap(api_type, control_plane.port)).await),
        None => {
            skipped(Tool::Envoy, "the Envoy half (Outrider's alone)", "envoy not found");
            None
        }
    };
    let outrider = app::start(bootstrap(control_plane.port, api_type)).await.unwrap();
    wait_snapshot(&outrider.store, |s| s.secrets.len() == 3).await;
    let mut nodes = vec![OUTRIDER_NODE];
    if envoy.is_some() {
        nodes.push(ENVOY_NODE);
    }
    wait_answered(&control_plane, &nodes, ResourceType::Secret).await;
    let v1 = type_version(&control_plane, ResourceType::Secret);

    // One response: a valid update, an invalid one, another valid one.
    let second: Vec<Leaf> = SECRETS.iter().map(|s| ca.leaf(&spiffe(s))).collect();
    let garbage = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
    set(
        &control_plane,
        ResourceType::Secret,
        &[
            leaf_secret("cert_a", &second[0]),
            secret("cert_b", garbage, &second[1].key_pem),
            leaf_secret("cert_c", &second[2]),
        ],
    );
    wait_answered(&control_plane, &nodes, ResourceType::Secret).await;
    let v2 = type_version(&control_plane, ResourceType::Secret);

    let journal = control_plane.server.journal();
    let outrider_secrets: BTreeMap<String, String> =
        outrider.store.load().secrets.iter().map(|(n, s)| (n.clone(), s.version.clone())).collect();
    let mut sides = vec![("outrider", OUTRIDER_NODE, outrider_secrets)];
    if let Some(envoy) = &envoy {
        sides.push(("envoy", ENVOY_NODE, envoy_secrets(&envoy_dump(envoy).await)));
    }
    for (side, node, applied) in &sides {
        let context = format!("{side} ({api_type}): {applied:?} (before {v1}, pushed {v2})");
        // One NACK, carrying the invalid secret's failure only.
        let all = nacks(&journal, node, ResourceType::Secret);
        assert_eq!(all.len(), 1, "{context}: {all:#?}");
        let detail = all[0].error_detail.clone().unwrap();
        assert_eq!(detail.code, tonic::Code::Internal as i32, "{context}");
        assert!(detail.message.contains("Failed to load certificate chain from <inline>"), "{context}: {detail:?}");
        assert!(!detail.message.contains("cert_a") && !detail.message.contains("cert_c"), "{context}: {detail:?}");
        if api_type == "GRPC" {
            assert_eq!(all[0].version_info, v1, "{context}: the NACK carries the last ACKed version");
        }
        // Each subscription is updated in turn until the invalid one: those before it (in
        // Envoy's order of subscriptions, which nothing specifies) are at the new version,
        // those after it at the previous one.
        for name in ["cert_a", "cert_c"] {
            assert!([&v1, &v2].contains(&&applied[name]), "{context}");
        }
        if *side == "outrider" {
            // The response's order; the invalid secret keeps its last good version.
            let expected: BTreeMap<String, String> =
                [("cert_a", &v2), ("cert_b", &v1), ("cert_c", &v1)].map(|(n, v)| (n.to_owned(), v.clone())).into();
            assert_eq!(applied, &expected, "{context}");
            assert!(detail.message.starts_with("cert_b: tls_certificate.certificate_chain: "), "{detail:?}");
        } else {
            // Envoy records the invalid secret at its new version before its TLS contexts
            // fail to take it (they keep the previous certificate): its dump shows `v2`.
            assert_eq!(applied["cert_b"], v2, "{context}");
        }
    }
    outrider.stop();
}

#[tokio::test]
async fn secrets_are_applied_one_by_one_sotw() {
    sds_partial_acceptance("GRPC").await;
}

#[tokio::test]
async fn secrets_are_applied_one_by_one_delta() {
    sds_partial_acceptance("DELTA_GRPC").await;
}
