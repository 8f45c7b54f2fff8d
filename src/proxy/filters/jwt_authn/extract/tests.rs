use super::*;
use crate::config::filters::jwt_authn::{JwksSource, JwtHeader};

fn provider(issuer: &str) -> JwtProvider {
    JwtProvider {
        issuer: issuer.to_owned(),
        audiences: vec![],
        forward: false,
        from_headers: vec![],
        from_params: vec![],
        from_cookies: vec![],
        forward_payload_header: None,
        pad_forward_payload_header: false,
        payload_in_metadata: String::new(),
        space_delimited_claims: vec![],
        header_in_metadata: String::new(),
        clock_skew_seconds: 60,
        claim_to_headers: vec![],
        jwks: JwksSource::Local(String::new()),
    }
}

fn parts(uri: &str, headers: &[(&str, &str)]) -> Parts {
    let mut builder = http::Request::get(uri);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(()).unwrap().into_parts().0
}

fn values(tokens: &[Token<'_>]) -> Vec<String> {
    tokens.iter().map(|t| t.value.clone()).collect()
}

#[test]
fn defaults_are_bearer_authorization_and_access_token() {
    let p = provider("iss");
    let extractor = Extractor::new([&p]);
    let request = parts("/x?a=1&access_token=q.r.s", &[("authorization", "Bearer a.b.c")]);
    let tokens = extractor.extract(&request);
    assert_eq!(values(&tokens), ["a.b.c", "q.r.s"]);
    assert!(tokens[0].issuers.allows("iss"));
    assert!(!tokens[0].issuers.allows("other"));
    // Another scheme is not a bearer token.
    assert!(extractor.extract(&parts("/", &[("authorization", "Basic abc")])).is_empty());
}

#[test]
fn configured_locations_replace_the_defaults() {
    let mut p = provider("");
    p.from_headers = vec![JwtHeader { name: HeaderName::from_static("x-jwt"), value_prefix: String::new() }];
    p.from_params = vec!["token".into()];
    p.from_cookies = vec!["session".into()];
    let extractor = Extractor::new([&p]);
    let request = parts(
        "/x?token=p%2Eq.r",
        &[("authorization", "Bearer a.b.c"), ("x-jwt", "h.i.j"), ("cookie", "a=1; session=\"c.d.e\"")],
    );
    let tokens = extractor.extract(&request);
    assert_eq!(values(&tokens), ["h.i.j", "p.q.r", "c.d.e"]);
    assert!(tokens[0].issuers.allows("anyone"));
}

#[test]
fn removing_a_token_takes_its_header_or_parameter_out() {
    let p = provider("iss");
    let extractor = Extractor::new([&p]);
    let mut request = parts("/x?a=1&access_token=q.r.s&b=2", &[("authorization", "Bearer a.b.c")]);
    let tokens: Vec<_> = extractor.extract(&request).into_iter().map(|t| (t.value.clone(), t.location)).collect();
    for (value, location) in tokens {
        Token { value, location, issuers: &IssuerChecker::default() }.remove(&mut request);
    }
    assert!(request.headers.get("authorization").is_none());
    assert_eq!(request.uri.path_and_query().unwrap().as_str(), "/x?a=1&b=2");
}
