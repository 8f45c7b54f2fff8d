use std::time::Duration;

use super::*;

fn x(s: &str) -> u64 {
    xxh64(s.as_bytes(), 0)
}

fn policy(source: HashSource) -> HashPolicy {
    HashPolicy { source, terminal: false }
}

fn header(name: &str) -> HashSource {
    HashSource::Header { name: name.into() }
}

fn request(uri: &str, headers: &[(&str, &str)]) -> Parts {
    let mut builder = Request::builder().uri(uri);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(()).unwrap().into_parts().0
}

fn hash(policies: &[HashPolicy], parts: &Parts) -> Option<u64> {
    request_hash(policies, parts, None)
}

#[test]
fn header_hash_is_xxhash64_of_the_value() {
    let parts = request("/", &[("x-user", "alice")]);
    assert_eq!(hash(&[policy(header("x-user"))], &parts), Some(x("alice")));
    assert_eq!(hash(&[policy(header("x-other"))], &parts), None);
}

#[test]
fn header_values_are_sorted_and_chained() {
    let chained = xxh64(b"foo", xxh64(b"bar", 0));
    for order in [[("x-k", "foo"), ("x-k", "bar")], [("x-k", "bar"), ("x-k", "foo")]] {
        assert_eq!(hash(&[policy(header("x-k"))], &request("/", &order)), Some(chained));
    }
}

#[test]
fn pseudo_headers_come_from_the_request_line() {
    let absolute = request("http://example.com:8080/a?b=1", &[]);
    assert_eq!(hash(&[policy(header(":authority"))], &absolute), Some(x("example.com:8080")));
    assert_eq!(hash(&[policy(header(":path"))], &absolute), Some(x("/a?b=1")));
    assert_eq!(hash(&[policy(header(":method"))], &absolute), Some(x("GET")));
    assert_eq!(hash(&[policy(header(":scheme"))], &absolute), Some(x("http")));
    assert_eq!(hash(&[policy(header("host"))], &absolute), Some(x("example.com:8080")));
    let origin = request("/a", &[("host", "svc.local")]);
    assert_eq!(hash(&[policy(header(":authority"))], &origin), Some(x("svc.local")));
    assert_eq!(hash(&[policy(header("host"))], &origin), Some(x("svc.local")));
}

fn cookie(name: &str, ttl: Option<Duration>) -> HashSource {
    HashSource::Cookie { name: name.into(), ttl, path: "/test/path".into(), attributes: Vec::new() }
}

#[test]
fn cookie_hash_is_xxhash64_of_the_value() {
    let policies = [policy(cookie("test-cookie-name", None))];
    for value in
        ["test-cookie-name=1234567890", "a=b; test-cookie-name=1234567890", "x=1;  test-cookie-name=\"1234567890\""]
    {
        assert_eq!(hash(&policies, &request("/", &[("cookie", value)])), Some(x("1234567890")), "{value}");
    }
    // A second `cookie` header is searched too; the first match wins.
    let two = request("/", &[("cookie", "a=1"), ("cookie", "test-cookie-name=v2; test-cookie-name=v3")]);
    assert_eq!(hash(&policies, &two), Some(x("v2")));
    assert_eq!(hash(&policies, &request("/", &[("cookie", "test-cookie-name=")])), None);
    assert_eq!(hash(&policies, &request("/", &[("cookie", "other=1; test-cookie-name")])), None);
}

#[test]
fn missing_cookie_with_ttl_is_generated_from_the_addresses() {
    let policies = [HashPolicy {
        source: HashSource::Cookie {
            name: "sticky".into(),
            ttl: Some(Duration::from_millis(1_000_500)),
            path: "/p".into(),
            attributes: vec![("SameSite".into(), "Strict".into()), ("Secure".into(), String::new())],
        },
        terminal: false,
    }];
    let parts = request("/", &[]);
    let downstream =
        Downstream { remote: Some("10.0.0.1:5555".parse().unwrap()), local: Some("[::1]:80".parse().unwrap()) };
    let outcome = evaluate(&policies, RequestView::from_parts(&parts), &downstream);
    let value = format!("{:016x}", x("10.0.0.1:5555[::1]:80"));
    assert_eq!(outcome.hash, Some(x(&value)));
    assert_eq!(
        outcome.set_cookies,
        [GeneratedCookie {
            name: "sticky".into(),
            value: value.clone(),
            set_cookie: format!("sticky=\"{value}\"; Max-Age=1000; Path=/p; SameSite=Strict; Secure; HttpOnly"),
        }]
    );
    // Without the addresses (or without a TTL) nothing is generated and there is no hash.
    assert_eq!(hash(&policies, &parts), None);
    assert_eq!(evaluate(&[policy(cookie("sticky", None))], RequestView::from_parts(&parts), &downstream).hash, None);
}

#[test]
fn session_cookie_has_no_max_age() {
    let policies = [HashPolicy {
        source: HashSource::Cookie {
            name: "s".into(),
            ttl: Some(Duration::ZERO),
            path: String::new(),
            attributes: vec![],
        },
        terminal: false,
    }];
    let parts = request("/", &[]);
    let downstream =
        Downstream { remote: Some("10.0.0.1:1".parse().unwrap()), local: Some("10.0.0.2:2".parse().unwrap()) };
    let outcome = evaluate(&policies, RequestView::from_parts(&parts), &downstream);
    let value = format!("{:016x}", x("10.0.0.1:110.0.0.2:2"));
    assert_eq!(outcome.set_cookies[0].set_cookie, format!("s=\"{value}\"; HttpOnly"));
}

#[test]
fn source_ip_hash_is_xxhash64_of_the_ip_text() {
    let parts = request("/", &[]);
    let policies = [policy(HashSource::SourceIp)];
    assert_eq!(request_hash(&policies, &parts, Some("10.1.2.3".parse().unwrap())), Some(x("10.1.2.3")));
    assert_eq!(request_hash(&policies, &parts, Some("2001:db8::1".parse().unwrap())), Some(x("2001:db8::1")));
    assert_eq!(request_hash(&policies, &parts, None), None);
}

#[test]
fn query_parameter_hash_is_the_first_raw_value() {
    let policies = [policy(HashSource::QueryParameter { name: "user".into() })];
    assert_eq!(hash(&policies, &request("/p?a=1&user=bob&user=eve", &[])), Some(x("bob")));
    assert_eq!(hash(&policies, &request("/p?user=a%20b", &[])), Some(x("a%20b")));
    assert_eq!(hash(&policies, &request("/p?user&x=1", &[])), Some(x("")));
    assert_eq!(hash(&policies, &request("/p?users=1", &[])), None);
    assert_eq!(hash(&policies, &request("/p", &[])), None);
}

#[test]
fn filter_state_never_hashes() {
    let policies = [policy(HashSource::FilterState { key: "io.grpc.channel_id".into() })];
    assert_eq!(hash(&policies, &request("/", &[])), None);
}

#[test]
fn hashes_combine_by_rotate_and_xor() {
    let parts = request("/", &[("a", "1"), ("b", "2"), ("c", "3")]);
    let (a, b, c) = (x("1"), x("2"), x("3"));
    let all = [policy(header("a")), policy(header("b")), policy(header("c"))];
    assert_eq!(hash(&all, &parts), Some((a.rotate_left(1) ^ b).rotate_left(1) ^ c));
    // The same rule twice does not cancel out.
    assert_eq!(hash(&[policy(header("a")), policy(header("a"))], &parts), Some(a.rotate_left(1) ^ a));
    // A policy without a value is skipped.
    assert_eq!(hash(&[policy(header("zz")), policy(header("b"))], &parts), Some(b));
}

#[test]
fn terminal_stops_once_a_hash_exists() {
    let parts = request("/", &[("a", "1"), ("b", "2")]);
    let terminal = |name: &str| HashPolicy { source: header(name), terminal: true };
    assert_eq!(hash(&[terminal("a"), policy(header("b"))], &parts), Some(x("1")));
    // A terminal policy without a value does not stop the evaluation...
    assert_eq!(hash(&[terminal("zz"), policy(header("b"))], &parts), Some(x("2")));
    // ...unless an earlier policy produced a hash (Envoy checks the accumulated hash).
    assert_eq!(hash(&[policy(header("a")), terminal("zz"), policy(header("b"))], &parts), Some(x("1")));
    assert_eq!(hash(&[], &parts), None);
}
