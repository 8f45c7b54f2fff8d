//! `envoy.filters.http.jwt_authn` side by side with Envoy 1.40: one bootstrap (a provider
//! whose keys a loopback JWKS server serves through a static cluster, and one with inline
//! keys), tokens signed here (RSA from a committed test key, EC made in the test), the same
//! requests through both proxies; status, body and `www-authenticate` must agree, and no
//! rejected request may reach the backend.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::skip::{Tool, skipped};
use base64::Engine as _;
use bytes::Bytes;
use common::backends::{self, Backend};
use common::differential::{Pair, raw_http1};
use http::{Response, StatusCode};
use http_body_util::Full;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};
use rustls_pki_types::PrivatePkcs8KeyDer;
use rustls_pki_types::pem::PemObject;

const ISSUER: &str = "https://remote.example";
const LOCAL_ISSUER: &str = "https://local.example";

fn b64(bytes: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Signing keys: RSA (committed PEM: ring cannot generate RSA keys) and a fresh P-256 key.
struct Keys {
    rsa: RsaKeyPair,
    /// A second RSA key with the same `kid`, for forged signatures.
    ec: EcdsaKeyPair,
    rng: SystemRandom,
}

impl Keys {
    fn new() -> Keys {
        let pem = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/jwt-rsa-test-key.pem")).unwrap();
        let der = PrivatePkcs8KeyDer::from_pem_slice(&pem).unwrap();
        let rsa = RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).unwrap();
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let ec = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        Keys { rsa, ec, rng }
    }

    fn rsa_jwks(&self) -> String {
        let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(self.rsa.public());
        serde_json::json!({"keys": [{"kty": "RSA", "kid": "rsa1", "alg": "RS256", "n": b64(&public.n), "e": b64(&public.e)}]})
            .to_string()
    }

    fn ec_jwks(&self) -> String {
        let point = self.ec.public_key().as_ref();
        serde_json::json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "ec1", "x": b64(&point[1..33]), "y": b64(&point[33..65])}]})
            .to_string()
    }

    fn rs256(&self, claims: serde_json::Value) -> String {
        let signed = format!("{}.{}", b64(r#"{"alg":"RS256","kid":"rsa1","typ":"JWT"}"#), b64(claims.to_string()));
        let mut sig = vec![0; self.rsa.public().modulus_len()];
        self.rsa.sign(&signature::RSA_PKCS1_SHA256, &self.rng, signed.as_bytes(), &mut sig).unwrap();
        format!("{signed}.{}", b64(sig))
    }

    fn es256(&self, claims: serde_json::Value) -> String {
        let signed = format!("{}.{}", b64(r#"{"alg":"ES256","kid":"ec1"}"#), b64(claims.to_string()));
        let sig = self.ec.sign(&self.rng, signed.as_bytes()).unwrap();
        format!("{signed}.{}", b64(sig))
    }
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}

/// A JWKS server: answers with `jwks`, except that the requests whose (1-based) number
/// `fail` says get 503. Counts its requests.
async fn jwks_server(jwks: String, fail: fn(usize) -> bool) -> (Backend, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    let backend = backends::http(move |_request| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        let jwks = jwks.clone();
        async move {
            if fail(n) {
                let mut response = Response::new(Full::new(Bytes::from_static(b"unavailable")));
                *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                return response;
            }
            Response::new(Full::new(Bytes::from(jwks)))
        }
    })
    .await;
    (backend, count)
}

/// A backend that answers with what the filter left in the request.
async fn echo() -> Backend {
    backends::http(|request: http::Request<hyper::body::Incoming>| async move {
        let header = |name: &str| request.headers().get(name).map(|v| v.to_str().unwrap_or("?").to_owned());
        let body = format!(
            "path={} authorization={:?} payload={:?} sub={:?}",
            request.uri().path_and_query().map(|p| p.as_str()).unwrap_or(""),
            header("authorization"),
            header("x-jwt-payload"),
            header("x-sub"),
        );
        Response::new(Full::new(Bytes::from(body)))
    })
    .await
}

fn bootstrap(port: u16, backend: u16, jwks_port: u16, local_jwks: &str) -> String {
    let local_jwks = serde_json::to_string(local_jwks).unwrap();
    format!(
        r#"
static_resources:
  listeners:
  - name: http
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                route: {{ cluster: backend }}
          http_filters:
          - name: envoy.filters.http.jwt_authn
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
              providers:
                remote:
                  issuer: {ISSUER}
                  audiences: [api]
                  forward_payload_header: x-jwt-payload
                  claim_to_headers: [{{ header_name: x-sub, claim_name: sub }}]
                  remote_jwks:
                    http_uri: {{ uri: "http://jwks.local/keys", cluster: jwks, timeout: 5s }}
                    cache_duration: 600s
                local:
                  issuer: {LOCAL_ISSUER}
                  forward: true
                  payload_in_metadata: payload
                  local_jwks: {{ inline_string: {local_jwks} }}
              rules:
              - match: {{ prefix: /optional }}
                requires: {{ requires_any: {{ requirements: [{{ provider_name: remote }}, {{ allow_missing: {{}} }}] }} }}
              - match: {{ prefix: /any }}
                requires: {{ requires_any: {{ requirements: [{{ provider_name: remote }}, {{ provider_name: local }}] }} }}
              - match: {{ prefix: /local }}
                requires: {{ provider_name: local }}
              - match: {{ prefix: /public }}
              - match: {{ prefix: / }}
                requires: {{ provider_name: remote }}
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:
  - name: backend
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {backend} }} }} }}
  - name: jwks
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: jwks
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {jwks_port} }} }} }}
"#
    )
}

/// (status, www-authenticate, body) of `GET path` with `authorization`.
async fn get(port: u16, path: &str, authorization: Option<&str>) -> (u16, String, String) {
    let auth = authorization.map(|a| format!("authorization: {a}\r\n")).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nhost: example.com\r\n{auth}connection: close\r\n\r\n");
    let (status, headers, body) = raw_http1(port, &request).await;
    let challenge = headers.iter().find(|(n, _)| n == "www-authenticate").map(|(_, v)| v.clone()).unwrap_or_default();
    (status, challenge, body)
}

/// Runs each case through each proxy; returns, per proxy, its answers and how many
/// requests reached the backend.
async fn run(
    pair: &Pair,
    backend: &Backend,
    cases: &[(&str, &str, Option<String>)],
) -> Vec<(&'static str, Vec<(u16, String, String)>, usize)> {
    let mut results = Vec::new();
    for (proxy, port) in pair.ports() {
        let before = backend.seen.requests();
        let mut answers = Vec::new();
        for (_, path, authorization) in cases {
            answers.push(get(port, path, authorization.as_deref()).await);
        }
        results.push((proxy, answers, backend.seen.requests() - before));
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_judged_as_envoy_judges_them() {
    let keys = Keys::new();
    let (jwks, fetches) = jwks_server(keys.rsa_jwks(), |_| false).await;
    let backend = echo().await;
    let local_jwks = keys.ec_jwks();
    let pair = Pair::start(|port| bootstrap(port, backend.port, jwks.port, &local_jwks)).await;

    let t = now();
    let claims =
        |iss: &str, aud: &str| serde_json::json!({"iss": iss, "sub": "alice", "aud": aud, "iat": t, "exp": t + 3600});
    let valid = keys.rs256(claims(ISSUER, "api"));
    let bearer = |token: &str| Some(format!("Bearer {token}"));
    let expired = keys.rs256(serde_json::json!({"iss": ISSUER, "aud": "api", "exp": t - 3600}));
    let not_yet = keys.rs256(serde_json::json!({"iss": ISSUER, "aud": "api", "nbf": t + 3600, "exp": t + 7200}));
    let wrong_audience = keys.rs256(claims(ISSUER, "other"));
    let wrong_issuer = keys.rs256(claims("https://stranger.example", "api"));
    let (signed, _) = valid.rsplit_once('.').unwrap();
    let forged = format!("{signed}.{}", b64([7u8; 256]));
    let local =
        keys.es256(serde_json::json!({"iss": LOCAL_ISSUER, "sub": "bob", "scope": "read write", "exp": t + 3600}));
    let query_path = format!("/q?x=1&access_token={valid}");
    let cases: Vec<(&str, &str, Option<String>)> = vec![
        ("valid", "/", bearer(&valid)),
        ("expired", "/", bearer(&expired)),
        ("not yet valid", "/", bearer(&not_yet)),
        ("wrong audience", "/", bearer(&wrong_audience)),
        ("wrong issuer", "/", bearer(&wrong_issuer)),
        ("bad signature", "/", bearer(&forged)),
        ("missing", "/", None),
        ("not a bearer token", "/", Some("Basic dXNlcjpwYXNz".into())),
        ("malformed", "/", Some("Bearer not-a-jwt".into())),
        ("two dots, bad base64", "/", Some("Bearer a!.b.c".into())),
        ("token in the query", &query_path, None),
        ("bad token in the query", "/q?access_token=abc", None),
        ("allow_missing without a token", "/optional", None),
        ("allow_missing with a bad token", "/optional", bearer(&expired)),
        ("allow_missing with a good token", "/optional", bearer(&valid)),
        ("requires_any, first provider", "/any", bearer(&valid)),
        ("requires_any, second provider", "/any", bearer(&local)),
        ("requires_any, none", "/any", None),
        ("requires_any, both bad", "/any", bearer(&wrong_issuer)),
        ("local keys", "/local", bearer(&local)),
        ("local keys, remote token", "/local", bearer(&valid)),
        ("no requirement", "/public", None),
    ];
    let results = run(&pair, &backend, &cases).await;
    let (_, outrider, outrider_reached) = results.last().unwrap();

    // Outrider on its own: the answers Envoy's documentation gives.
    let expected: &[(u16, &str)] = &[
        (200, ""),
        (401, "Jwt is expired"),
        (401, "Jwt not yet valid"),
        (403, "Audiences in Jwt are not allowed"),
        (401, "Jwt issuer is not configured"),
        (401, "Jwt verification fails"),
        (401, "Jwt is missing"),
        (401, "Jwt is missing"),
        (401, "Jwt is not in the form of Header.Payload.Signature with two dots and 3 sections"),
        (401, "Jwt header is an invalid Base64url encoded"),
        (200, ""),
        (401, "Jwt is not in the form of Header.Payload.Signature with two dots and 3 sections"),
        (200, ""),
        (401, "Jwt is expired"),
        (200, ""),
        (200, ""),
        (200, ""),
        (401, "Jwt is missing"),
        (401, "Jwt issuer is not configured"),
        (200, ""),
        (401, "Jwt issuer is not configured"),
        (200, ""),
    ];
    for ((name, _, _), ((status, challenge, body), (want_status, want_body))) in
        cases.iter().zip(outrider.iter().zip(expected))
    {
        assert_eq!(*status, *want_status, "{name}: {body}");
        if *want_status != 200 {
            assert_eq!(body, want_body, "{name}");
            assert!(challenge.starts_with("Bearer realm=\"http://example.com/"), "{name}: {challenge}");
            assert_eq!(challenge.ends_with(", error=\"invalid_token\""), *want_body != "Jwt is missing", "{name}");
        }
    }
    let admitted = expected.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!(*outrider_reached, admitted, "only admitted requests reach the backend");
    // The good remote token's request: token removed, payload and claim forwarded.
    let body = &outrider[0].2;
    assert!(body.contains("authorization=None"), "{body}");
    assert!(body.contains(&format!("payload=Some({:?})", valid.split('.').nth(1).unwrap())), "{body}");
    assert!(body.contains("sub=Some(\"alice\")"), "{body}");
    assert!(outrider[10].2.starts_with("path=/q?x=1 "), "the token parameter is removed: {}", outrider[10].2);

    let Some(envoy) = &pair.envoy else {
        skipped(
            Tool::Envoy,
            "comparison with Envoy (Outrider checked against the expected answers only)",
            "envoy not found",
        );
        return;
    };
    let (_, envoy_answers, envoy_reached) = &results[0];
    let mut disagreements = Vec::new();
    for ((name, path, _), (e, o)) in cases.iter().zip(envoy_answers.iter().zip(outrider)) {
        if e != o {
            disagreements.push(format!("{name} ({path}): envoy {e:?}\n    outrider {o:?}"));
        }
    }
    assert!(disagreements.is_empty(), "disagreements:\n{}", disagreements.join("\n"));
    assert_eq!(envoy_reached, outrider_reached);
    for stat in ["allowed", "denied", "jwks_fetch_success", "jwks_fetch_failed"] {
        let name = format!("http.ingress.jwt_authn.{stat}");
        assert_eq!(envoy.stat(&name).await, pair.outrider_stat(&name).await, "{name}");
    }
    // One fetch each: the keys are cached.
    assert_eq!(fetches.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_key_fetch_refuses_then_a_later_fetch_recovers() {
    let keys = Keys::new();
    // Each proxy's first fetch fails, its second succeeds: Envoy makes fetches 1 and 2,
    // then Outrider 3 and 4.
    let (jwks, fetches) = jwks_server(keys.rsa_jwks(), |n| n % 2 == 1).await;
    let backend = echo().await;
    let local_jwks = keys.ec_jwks();
    let pair = Pair::start(|port| bootstrap(port, backend.port, jwks.port, &local_jwks)).await;
    let t = now();
    let token = keys.rs256(serde_json::json!({"iss": ISSUER, "aud": "api", "exp": t + 3600}));
    let authorization = format!("Bearer {token}");
    for (proxy, port) in pair.ports() {
        let before = backend.seen.requests();
        let (status, challenge, body) = get(port, "/", Some(&authorization)).await;
        assert_eq!((status, body.as_str()), (401, "Jwks remote fetch is failed"), "{proxy}");
        assert_eq!(challenge, "Bearer realm=\"http://example.com/\", error=\"invalid_token\"", "{proxy}");
        let (status, _, body) = get(port, "/", Some(&authorization)).await;
        assert_eq!(status, 200, "{proxy}: {body}");
        // Cached now: no third fetch.
        let (status, _, _) = get(port, "/", Some(&authorization)).await;
        assert_eq!(status, 200, "{proxy}");
        assert_eq!(backend.seen.requests() - before, 2, "{proxy}: the refused request did not reach the backend");
    }
    assert_eq!(fetches.load(Ordering::SeqCst), 2 * pair.ports().len());
    let failed = "http.ingress.jwt_authn.jwks_fetch_failed";
    assert_eq!(pair.outrider_stat(failed).await, 1);
    if let Some(envoy) = &pair.envoy {
        assert_eq!(envoy.stat(failed).await, 1);
        assert_eq!(envoy.stat("http.ingress.jwt_authn.jwks_fetch_success").await, 1);
    }
    assert_eq!(pair.outrider_stat("http.ingress.jwt_authn.jwks_fetch_success").await, 1);
}
