//! `x-forwarded-client-cert` side by side with Envoy 1.40, with real TLS (rcgen
//! certificates): one listener with a mutual-TLS chain and a plaintext one (the TLS
//! inspector picks), each `forward_client_cert_details` mode with every
//! `set_current_client_cert_details` field, and a client that writes its own XFCC. What
//! the upstream receives must be the same: removed, kept, replaced or appended to with
//! `By=…;Hash=…;Cert="…";Chain="…";Subject="…";URI=…;DNS=…`.

use crate::common;
use crate::tls_support;

use common::differential::{Pair, ROUTER, static_cluster};
use rcgen::{CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, KeyPair, SanType};
use serde_json::json;
use tls_support::pki::{self, Ca, Leaf};

use super::edge_echo::{last_head, plain, recording, tls, values};
use crate::common::skip::{Tool, skipped};

const FORGED: &str = "By=spiffe://cluster.local/ns/x/sa/x;URI=spiffe://cluster.local/ns/kube-system/sa/admin";

/// Two lines of the header (Envoy joins them with `,` before anything else).
const TWO_LINES: &str =
    "By=spiffe://a/b;URI=spiffe://a/c\r\nx-forwarded-client-cert: URI=spiffe://cluster.local/ns/kube-system/sa/admin";

fn bootstrap(port: u16, backend: u16, ca: &Ca, server: &Leaf, mode: &str) -> String {
    let tls = json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
            "require_client_certificate": true,
            "common_tls_context": {
                "tls_certificates": [{
                    "certificate_chain": { "inline_string": server.cert_pem },
                    "private_key": { "inline_string": server.key_pem },
                }],
                "validation_context": { "trusted_ca": { "inline_string": ca.pem() } },
            },
        },
    });
    let hcm = |tls: bool| {
        json!([{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": if tls { "mtls" } else { "plain" },
                "forward_client_cert_details": mode,
                "set_current_client_cert_details": { "subject": true, "cert": true, "chain": true, "dns": true, "uri": true },
                "route_config": { "virtual_hosts": [{
                    "name": "all", "domains": ["*"],
                    "routes": [{ "match": { "prefix": "/" }, "route": { "cluster": "backend" } }],
                }] },
                "http_filters": [{ "name": "envoy.filters.http.router", "typed_config": { "@type": ROUTER } }],
            },
        }])
    };
    let listener = json!({
        "name": "edge",
        "address": { "socket_address": { "address": "127.0.0.1", "port_value": port } },
        "listener_filters": [{
            "name": "envoy.filters.listener.tls_inspector",
            "typed_config": { "@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector" },
        }],
        "filter_chains": [
            { "name": "mtls", "filter_chain_match": { "transport_protocol": "tls" }, "transport_socket": tls, "filters": hcm(true) },
            { "name": "plain", "filter_chain_match": { "transport_protocol": "raw_buffer" }, "filters": hcm(false) },
        ],
    });
    format!("static_resources:\n  listeners: [{listener}]\n  clusters:{}\n", static_cluster("backend", backend))
}

/// A client certificate with a subject of several attributes (RFC 2253 order and
/// escaping show), two URI SANs and two DNS SANs.
fn client_leaf(ca: &Ca) -> Leaf {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CountryName, "US");
    dn.push(DnType::OrganizationName, "Example, Inc.");
    dn.push(DnType::OrganizationalUnitName, "mesh");
    dn.push(DnType::CommonName, "client");
    params.distinguished_name = dn;
    params.subject_alt_names = vec![
        SanType::URI(pki::spiffe("client").try_into().unwrap()),
        SanType::URI("spiffe://other.domain/ns/a/sa/b".try_into().unwrap()),
        SanType::DnsName("client.test".try_into().unwrap()),
        SanType::DnsName("alt.client.test".try_into().unwrap()),
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    ca.sign(params, KeyPair::generate().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn xfcc_modes_match_envoy_over_mtls_and_plaintext() {
    let ca = Ca::new("mesh root");
    let server = ca.leaf(&pki::spiffe("server"));
    let client = client_leaf(&ca);
    let request = |xfcc: Option<&str>| {
        let header = xfcc.map(|v| format!("x-forwarded-client-cert: {v}\r\n")).unwrap_or_default();
        format!("GET /x HTTP/1.1\r\nHost: app\r\n{header}Connection: close\r\n\r\n")
    };
    for mode in ["SANITIZE", "FORWARD_ONLY", "APPEND_FORWARD", "SANITIZE_SET", "ALWAYS_FORWARD_ONLY"] {
        let (backend, heads) = recording().await;
        let pair = Pair::start(|port| bootstrap(port, backend.port, &ca, &server, mode)).await;
        let cases = [
            ("mtls", Some(FORGED)),
            ("mtls", None),
            ("mtls", Some(TWO_LINES)),
            ("plain", Some(FORGED)),
            ("plain", None),
            ("plain", Some(TWO_LINES)),
        ];
        for (transport, xfcc) in cases {
            let mut seen = Vec::new();
            for (name, port) in pair.ports() {
                let status = if transport == "mtls" {
                    let config = tls_support::client_config(&ca, Some(&client), &["http/1.1"]);
                    tls(port, config, &request(xfcc)).await
                } else {
                    plain(port, &request(xfcc)).await
                };
                assert_eq!(status, 200, "{name} {mode} {transport}");
                let head = last_head(&heads);
                seen.push(values(&head, "x-forwarded-client-cert").into_iter().map(str::to_owned).collect::<Vec<_>>());
            }
            let ours = seen.last().unwrap();
            match seen.as_slice() {
                [envoy, _] => assert_eq!(ours, envoy, "{mode} over {transport}, client sent {xfcc:?}"),
                _ => skipped(Tool::Envoy, "the Envoy half of the XFCC comparison", "envoy not found"),
            }
            // What holds whatever Envoy says: no forged identity unless the mode trusts the client.
            let forged_kept = ours.iter().any(|v| v.contains("kube-system"));
            let trusts = mode == "ALWAYS_FORWARD_ONLY"
                || (transport == "mtls" && (mode == "FORWARD_ONLY" || mode == "APPEND_FORWARD"));
            assert_eq!(forged_kept, trusts && xfcc.is_some(), "{mode} over {transport}: {ours:?}");
            if transport == "mtls" && (mode == "APPEND_FORWARD" || mode == "SANITIZE_SET") {
                let added = ours.join(",");
                assert!(added.contains(&format!("URI={}", pki::spiffe("client"))), "{added}");
                assert!(added.contains(&format!("By={}", pki::spiffe("server"))), "{added}");
            }
        }
    }
}
