//! Trust of control headers, side by side with Envoy 1.40: the same connection manager
//! (`use_remote_address`, `xff_num_trusted_hops`, `skip_xff_append`,
//! `internal_address_config`) on both proxies, the same hostile requests from a loopback
//! client, and the request head each upstream receives must be the same — which
//! `x-envoy-*` headers survive, `x-envoy-internal`, `x-envoy-external-address`,
//! `x-forwarded-for` (Envoy appends `,<address>`, its node's address for a loopback peer)
//! and the router's `x-envoy-expected-rq-timeout-ms`.

use crate::common;

use common::differential::{HttpListenerExtra, Pair, ROUTE_TO_BACKEND, http_listener, static_cluster};

use super::edge_echo::{h2, last_head, plain, recording, values};
use crate::common::skip::{Tool, skipped};

/// Every control header Envoy knows, forged, beside the forwarding headers a client may
/// write.
const FORGED: &str = "x-envoy-max-retries: 3\r\n\
    x-envoy-retry-on: 5xx\r\n\
    x-envoy-retry-grpc-on: cancelled\r\n\
    x-envoy-retriable-status-codes: 500\r\n\
    x-envoy-retriable-header-names: x-a\r\n\
    x-envoy-upstream-rq-timeout-ms: 9000\r\n\
    x-envoy-upstream-rq-per-try-timeout-ms: 8000\r\n\
    x-envoy-upstream-rq-timeout-alt-response: 204\r\n\
    x-envoy-expected-rq-timeout-ms: 7\r\n\
    x-envoy-upstream-alt-stat-name: forged\r\n\
    x-envoy-force-trace: true\r\n\
    x-envoy-ip-tags: internal\r\n\
    x-envoy-original-url: http://forged/\r\n\
    x-envoy-decorator-operation: forged\r\n\
    x-envoy-downstream-service-cluster: forged\r\n\
    x-envoy-downstream-service-node: forged\r\n\
    x-envoy-external-address: 6.6.6.6\r\n\
    x-envoy-internal: true\r\n\
    x-envoy-custom: kept\r\n\
    x-forwarded-proto: https\r\n";

/// Hedging on the per-try timeout, which an internal client may ask Envoy for; Outrider
/// does not hedge (a route's `hedge_policy` is refused), so only external requests carry it
/// here, where both proxies remove it.
const HEDGE: &str = "x-envoy-hedge-on-per-try-timeout: true\r\n";

fn bootstrap(port: u16, backend: u16, hcm: &str) -> String {
    format!(
        "static_resources:\n  listeners:{}\n  clusters:{}\n",
        http_listener("edge", port, "edge", HttpListenerExtra { hcm, ..Default::default() }, ROUTE_TO_BACKEND),
        static_cluster("backend", backend),
    )
}

/// Sends each request to both proxies and compares the heads their upstream received;
/// returns Outrider's, by request.
async fn compare(hcm: &str, requests: &[&str]) -> Vec<Vec<(String, String)>> {
    let (backend, heads) = recording().await;
    let pair = Pair::start(|port| bootstrap(port, backend.port, hcm)).await;
    let mut outrider = Vec::new();
    for request in requests {
        let mut seen = Vec::new();
        for (name, port) in pair.ports() {
            let status = plain(port, request).await;
            assert_eq!(status, 200, "{name}: {request}");
            let mut head = last_head(&heads);
            head.sort();
            seen.push((name, head));
        }
        if let [(_, envoy), (_, ours)] = seen.as_slice() {
            assert_eq!(ours, envoy, "the upstream heads differ for {hcm:?}\n{request}");
        } else {
            skipped(Tool::Envoy, "the Envoy half of the control-header comparison", "envoy not found");
        }
        outrider.push(seen.pop().map(|(_, head)| head).unwrap_or_default());
    }
    outrider
}

fn request(extra: &str) -> String {
    format!("GET /x HTTP/1.1\r\nHost: app\r\n{extra}Connection: close\r\n\r\n")
}

/// `use_remote_address` without `internal_address_config`: Envoy 1.40 trusts no address,
/// so a loopback client's control headers are all removed, the forged external address
/// replaced, and its own node address (not 127.0.0.1) appended to `x-forwarded-for`.
#[tokio::test(flavor = "multi_thread")]
async fn loopback_client_is_external_without_internal_address_config() {
    let with_xff = request(&format!("{FORGED}{HEDGE}x-forwarded-for: 1.2.3.4, 5.6.7.8\r\n"));
    let without_xff = request(&format!("{FORGED}{HEDGE}"));
    let heads = compare("\n          use_remote_address: true", &[&with_xff, &without_xff]).await;
    for head in &heads {
        assert!(values(head, "x-envoy-max-retries").is_empty(), "{head:?}");
        assert!(values(head, "x-envoy-internal").is_empty());
        assert_eq!(values(head, "x-envoy-external-address"), ["127.0.0.1"]);
        assert_eq!(values(head, "x-envoy-custom"), ["kept"]);
        assert_eq!(values(head, "x-envoy-expected-rq-timeout-ms"), ["15000"], "the route's default 15 s, to the ms");
    }
    let node = outrider::proxy::shadow::local_address().to_string();
    assert_eq!(values(&heads[0], "x-forwarded-for"), [format!("1.2.3.4, 5.6.7.8,{node}")]);
    assert_eq!(values(&heads[1], "x-forwarded-for"), [node]);
}

/// Internal clients keep their control headers: `internal_address_config` with loopback
/// in its ranges, or with no ranges (Envoy's private list, which has 127.0.0.1).
#[tokio::test(flavor = "multi_thread")]
async fn internal_address_config_trusts_its_ranges() {
    for hcm in [
        "\n          use_remote_address: true\n          internal_address_config: { cidr_ranges: [{ address_prefix: 127.0.0.0, prefix_len: 8 }] }",
        "\n          use_remote_address: true\n          internal_address_config: {}",
    ] {
        let heads =
            compare(hcm, &[&request(FORGED), &request(&format!("{FORGED}x-forwarded-for: 10.0.0.1\r\n"))]).await;
        assert_eq!(values(&heads[0], "x-envoy-internal"), ["true"], "{hcm}");
        assert_eq!(values(&heads[0], "x-envoy-force-trace"), ["true"]);
        assert_eq!(values(&heads[0], "x-envoy-expected-rq-timeout-ms"), ["8000"], "its per-try timeout obeyed");
        assert_eq!(values(&heads[0], "x-envoy-external-address"), ["6.6.6.6"], "an internal request's is kept");
        // A client-written XFF makes the request external whatever its address.
        assert!(values(&heads[1], "x-envoy-internal").is_empty());
        assert!(values(&heads[1], "x-envoy-force-trace").is_empty());
        assert_eq!(values(&heads[1], "x-envoy-expected-rq-timeout-ms"), ["15000"]);
    }
    // Ranges that do not hold loopback: external.
    let hcm = "\n          use_remote_address: true\n          internal_address_config: { cidr_ranges: [{ address_prefix: 10.0.0.0, prefix_len: 8 }] }";
    let heads = compare(hcm, &[&request(FORGED)]).await;
    assert!(values(&heads[0], "x-envoy-force-trace").is_empty());
}

/// Behind trusted proxies (`xff_num_trusted_hops`), without appending (`skip_xff_append`),
/// and without `use_remote_address` (the client is read from XFF, nothing appended).
#[tokio::test(flavor = "multi_thread")]
async fn trusted_hops_and_skip_xff_append() {
    let requests = [
        request(&format!("{FORGED}x-forwarded-for: 1.2.3.4,10.0.0.9\r\n")),
        request(&format!("{FORGED}x-forwarded-for: 10.0.0.9\r\n")),
        request(FORGED),
        request("x-forwarded-for: 1.2.3.4\r\nx-forwarded-for: 10.0.0.9\r\n"),
    ];
    let requests: Vec<&str> = requests.iter().map(String::as_str).collect();
    let internal = "\n          internal_address_config: {}";
    compare(&format!("\n          use_remote_address: true\n          xff_num_trusted_hops: 1{internal}"), &requests)
        .await;
    compare(&format!("\n          use_remote_address: true\n          skip_xff_append: true{internal}"), &requests)
        .await;
    let heads = compare(&format!("\n          xff_num_trusted_hops: 1{internal}"), &requests).await;
    assert_eq!(values(&heads[1], "x-forwarded-for"), ["10.0.0.9"], "not appended without use_remote_address");
    compare("\n          xff_num_trusted_hops: 0", &requests).await;
}

/// The same over HTTP/2 (prior knowledge): the rules do not depend on the codec.
#[tokio::test(flavor = "multi_thread")]
async fn http2_requests_get_the_same_treatment() {
    let (backend, heads) = recording().await;
    let hcm = "\n          use_remote_address: true\n          xff_num_trusted_hops: 1";
    let pair = Pair::start(|port| bootstrap(port, backend.port, hcm)).await;
    let text = format!("{FORGED}{HEDGE}x-forwarded-for: 1.2.3.4\r\nx-forwarded-for: 10.0.0.9\r\n");
    let forged: Vec<(&str, &str)> = text.split("\r\n").filter_map(|line| line.split_once(": ")).collect();
    let mut seen = Vec::new();
    for (name, port) in pair.ports() {
        assert_eq!(h2(port, "http://app/x", &forged).await, 200, "{name}");
        let mut head = last_head(&heads);
        head.sort();
        seen.push(head);
    }
    match seen.as_slice() {
        [envoy, ours] => assert_eq!(ours, envoy),
        _ => skipped(Tool::Envoy, "the Envoy half of the HTTP/2 control-header comparison", "envoy not found"),
    }
    let ours = seen.last().unwrap();
    assert!(values(ours, "x-envoy-max-retries").is_empty() && values(ours, "x-envoy-internal").is_empty());
}
