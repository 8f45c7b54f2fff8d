//! Istio's own RBAC filters (the sidecar config dump) convert and are enforced.

use serde_json::Value;

use crate::config::error::Warnings;
use crate::pb::google::protobuf as gpb;
use crate::pb::json::from_value;

fn dump(file: &str) -> Value {
    crate::config::testdata::istio_dump(file)
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
        local_uri_san: None,
        stream: None,
        peer: "10.0.0.7:50000".parse().unwrap(),
        local: "10.0.0.1:8080".parse().unwrap(),
        server_name: None,
        tls: true,
        peer_identity: Some(crate::tls::PeerIdentity {
            uri_sans: vec![uri.to_owned()],
            dns_sans: Vec::new(),
            subject: String::new(),
            ..Default::default()
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
