use std::collections::BTreeMap;

use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;

use super::*;
use crate::orca::report::from_proto;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
    }
    map
}

fn parse(name: &str, value: &str) -> Result<LoadReport, OrcaError> {
    from_headers(&headers(&[(name, value)])).unwrap()
}

fn text(value: &str) -> Result<LoadReport, OrcaError> {
    parse(ENDPOINT_LOAD_METRICS, &format!("TEXT {value}"))
}

/// The report in the `valid_text` corpus file and Envoy's own parser tests.
fn example() -> LoadReport {
    LoadReport {
        cpu_utilization: 0.7,
        mem_utilization: 0.9,
        application_utilization: 0.8,
        rps_fractional: 1000.0,
        eps: 2.0,
        named_metrics: BTreeMap::from([("foo".into(), 123.0), ("bar".into(), 0.2)]),
        utilization: BTreeMap::from([("total".into(), 0.5)]),
        request_cost: BTreeMap::new(),
    }
}

/// The report both BIN corpus files carry.
fn bin_example() -> LoadReport {
    LoadReport {
        cpu_utilization: 0.4,
        rps_fractional: 50.0,
        named_metrics: BTreeMap::from([("foo".into(), 0.5)]),
        ..Default::default()
    }
}

// === Envoy's fuzz corpus ===

/// Reads the one header of an Envoy `OrcaParserTestCase` textproto: the quoted string after
/// `key:` and the (possibly split, C-escaped) strings after `value:`.
fn corpus(file: &str) -> HeaderMap {
    let path = format!("{}/tests/data/envoy-orca/{file}", env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(path).unwrap();
    let source: String =
        source.lines().filter(|line| !line.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n");
    let key = quoted_strings(&source[source.find("key:").unwrap() + 4..]);
    let value = quoted_strings(&source[source.find("value:").unwrap() + 6..]);
    headers(&[(&key, &value)])
}

/// Concatenates the adjacent quoted strings at the start of `rest`, unescaping `\"` and `\\`.
fn quoted_strings(rest: &str) -> String {
    let mut out = String::new();
    let mut chars = rest.trim_start().chars().peekable();
    while chars.peek() == Some(&'"') {
        chars.next();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => out.push(chars.next().unwrap()),
                c => out.push(c),
            }
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
    }
    out
}

#[test]
fn envoy_corpus_valid_text() {
    assert_eq!(from_headers(&corpus("valid_text")), Some(Ok(example())));
}

#[test]
fn envoy_corpus_valid_bin_legacy_header() {
    assert_eq!(from_headers(&corpus("valid_bin")), Some(Ok(bin_example())));
}

#[test]
fn envoy_corpus_valid_bin_with_prefix() {
    assert_eq!(from_headers(&corpus("valid_bin2")), Some(Ok(bin_example())));
}

#[test]
fn envoy_corpus_json_without_prefix_is_refused() {
    let result = from_headers(&corpus("valid_json"));
    assert_eq!(result, Some(Err(OrcaError::UnsupportedFormat("{\"cpu".into()))));
}

// === Which header counts ===

#[test]
fn no_orca_header_is_no_report() {
    assert_eq!(from_headers(&HeaderMap::new()), None);
    assert_eq!(from_headers(&headers(&[("x-endpoint-load-metrics", "TEXT eps=1")])), None);
}

fn encoded(report: &OrcaLoadReport, engine: &impl Engine) -> String {
    engine.encode(report.encode_to_vec())
}

fn example_proto() -> OrcaLoadReport {
    OrcaLoadReport { cpu_utilization: 0.5, rps_fractional: 100.0, eps: 2.0, ..Default::default() }
}

#[test]
fn binary_is_read_padded_and_unpadded() {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
    let expected = from_proto(example_proto()).unwrap();
    for value in [encoded(&example_proto(), &STANDARD), encoded(&example_proto(), &STANDARD_NO_PAD)] {
        assert_eq!(parse(ENDPOINT_LOAD_METRICS_BIN, &value), Ok(expected.clone()), "{value}");
        assert_eq!(parse(ENDPOINT_LOAD_METRICS, &format!("BIN {value}")), Ok(expected.clone()), "{value}");
    }
}

#[test]
fn binary_header_wins_over_the_prefixed_one() {
    let bin = encoded(&example_proto(), &base64::engine::general_purpose::STANDARD);
    let map = headers(&[(ENDPOINT_LOAD_METRICS, "TEXT eps=9"), (ENDPOINT_LOAD_METRICS_BIN, &bin)]);
    assert_eq!(from_headers(&map).unwrap().map(|r| r.eps), Ok(2.0));
}

#[test]
fn only_the_first_instance_counts() {
    let map = headers(&[(ENDPOINT_LOAD_METRICS, "TEXT eps=1"), (ENDPOINT_LOAD_METRICS, "garbage")]);
    assert_eq!(from_headers(&map).unwrap().map(|r| r.eps), Ok(1.0));
}

// === TEXT and JSON ===

#[test]
fn text_accepts_colons_blanks_and_empty_items() {
    let report = text(" cpu_utilization : 0.7 ,, mem_utilization=0.9, utilization.total=0.5,").unwrap();
    assert_eq!((report.cpu_utilization, report.mem_utilization), (0.7, 0.9));
    assert_eq!(report.utilization, BTreeMap::from([("total".into(), 0.5)]));
    assert_eq!(text(""), Ok(LoadReport::default()));
}

#[test]
fn json_accepts_proto_and_json_names() {
    let body = r#"{"cpu_utilization": 0.7, "applicationUtilization": 0.8, "memUtilization": "0.9",
        "rpsFractional": 1000, "eps": 2, "namedMetrics": {"foo": 123, "bar": 0.2},
        "utilization": {"total": 0.5}, "rps": "7", "requestCost": null}"#;
    assert_eq!(parse(ENDPOINT_LOAD_METRICS, &format!("JSON {body}").replace('\n', " ")), Ok(example()));
}

// === Refusals ===

#[test]
fn refusals() {
    use OrcaError::*;
    let metrics = ENDPOINT_LOAD_METRICS;
    let cases: &[(&str, &str, OrcaError)] = &[
        (metrics, "", UnsupportedFormat("".into())),
        (metrics, "BAD random-value", UnsupportedFormat("BAD".into())),
        (metrics, "BADBAD random-value", UnsupportedFormat("BADBA".into())),
        (metrics, "text eps=1", UnsupportedFormat("text".into())),
        (metrics, "TEXT cpu_utilization=0.7,cpu_utilization=0.8", DuplicateMetric("cpu_utilization".into())),
        (metrics, "TEXT named_metrics.a=1, named_metrics.a:2", DuplicateMetric("named_metrics.a".into())),
        (metrics, "TEXT =0.5", EmptyName),
        (metrics, "TEXT eps=", EmptyValue("eps".into())),
        (metrics, "TEXT not-a-list-of-key-value-pairs", EmptyValue("not-a-list-of-key-value-pairs".into())),
        (metrics, "TEXT named_metrics.=123", EmptyKey("named_metrics.".into())),
        (metrics, "TEXT utilization.=0.9", EmptyKey("utilization.".into())),
        (metrics, "TEXT unsupported_metric=0.8", UnsupportedMetric("unsupported_metric".into())),
        (metrics, "TEXT request_cost.db=1", UnsupportedMetric("request_cost.db".into())),
        (metrics, "TEXT rps=3", UnsupportedMetric("rps".into())),
        (
            metrics,
            "TEXT cpu_utilization=\"0.7\"",
            NotANumber { name: "cpu_utilization".into(), value: "\"0.7\"".into() },
        ),
        (metrics, "TEXT cpu_utilization=nan", NotFinite("cpu_utilization".into())),
        (metrics, "TEXT cpu_utilization=inf", NotFinite("cpu_utilization".into())),
        (metrics, "TEXT eps=-inf", NotFinite("eps".into())),
        (metrics, "TEXT cpu_utilization=-1", Negative("cpu_utilization".into())),
        (metrics, "TEXT utilization.gpu=-0.5", Negative("utilization.gpu".into())),
        (metrics, "JSON not-json", Json(String::new())),
        (metrics, r#"JSON {"cpu_utilization": 0.7, "unknown_field": 2}"#, UnknownField("unknown_field".into())),
        (metrics, r#"JSON {"eps": 1, "eps_x": 1}"#, UnknownField("eps_x".into())),
        (metrics, r#"JSON {"eps": "NaN"}"#, NotFinite("eps".into())),
        (metrics, r#"JSON {"namedMetrics": {"q": -1}}"#, Negative("named_metrics.q".into())),
        (metrics, r#"JSON {"eps": "inf"}"#, Json("eps: expected a number, got \"inf\"".into())),
        (metrics, r#"JSON {"eps": true}"#, Json("eps: expected a number, got true".into())),
        (metrics, r#"JSON {"rps": -1}"#, Json("rps: expected an unsigned integer, got -1".into())),
        (metrics, r#"JSON {"utilization": [1]}"#, Json("utilization: expected an object".into())),
        (
            metrics,
            r#"JSON {"cpuUtilization": 1, "cpu_utilization": 1}"#,
            Json("field cpu_utilization given twice".into()),
        ),
        (metrics, "JSON [1]", Json("not an object".into())),
        (metrics, "BIN ", EmptyBinary),
        (ENDPOINT_LOAD_METRICS_BIN, "", EmptyBinary),
        (ENDPOINT_LOAD_METRICS_BIN, "not-a-valid-binary-proto", Base64(String::new())),
        (ENDPOINT_LOAD_METRICS_BIN, "CZqZmZmZ", Protobuf(String::new())),
    ];
    for (name, value, expected) in cases {
        let got = parse(name, value);
        // An empty message stands for whatever the JSON, base64 or protobuf crate says.
        let any_message = matches!(expected, Json(m) | Base64(m) | Protobuf(m) if m.is_empty());
        match &got {
            Err(error) if any_message => {
                assert_eq!(std::mem::discriminant(error), std::mem::discriminant(expected), "{name}: {value}")
            }
            _ => assert_eq!(got.as_ref(), Err(expected), "{name}: {value}"),
        }
    }
}

#[test]
fn binary_values_are_validated_too() {
    let proto = OrcaLoadReport { rps_fractional: -3.0, ..Default::default() };
    let value = encoded(&proto, &base64::engine::general_purpose::STANDARD);
    assert_eq!(parse(ENDPOINT_LOAD_METRICS_BIN, &value), Err(OrcaError::Negative("rps_fractional".into())));
}

#[test]
fn non_utf8_text_is_refused() {
    let mut map = HeaderMap::new();
    map.insert(ENDPOINT_LOAD_METRICS, HeaderValue::from_bytes(b"TEXT eps=\xff").unwrap());
    assert_eq!(from_headers(&map), Some(Err(OrcaError::NotUtf8)));
}

proptest! {
    /// Whatever a backend sends, decoding ends in a report or an error, never a panic.
    #[test]
    fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), prefix in 0usize..5) {
        let prefix: &[u8] = [&b""[..], b"BIN ", b"TEXT ", b"JSON ", b"TEXT named_metrics."][prefix];
        let value = [prefix, &bytes].concat();
        if let Ok(value) = HeaderValue::from_bytes(&value) {
            for name in [ENDPOINT_LOAD_METRICS, ENDPOINT_LOAD_METRICS_BIN] {
                let mut map = HeaderMap::new();
                map.insert(name, value.clone());
                prop_assert!(from_headers(&map).is_some());
            }
        }
    }

    /// Structured TEXT input reaches deeper than random bytes.
    #[test]
    fn text_never_panics(value in "[a-z_.]{0,20}[=:]?[-+0-9.eEinfa]{0,10}(,[a-z_.]{0,20}[=:][0-9.]{0,5}){0,4}") {
        let _ = text(&value);
    }
}
