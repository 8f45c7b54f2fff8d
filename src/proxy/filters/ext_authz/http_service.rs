//! The HTTP authorization service: the check is a bodiless request with the original
//! method, `path_prefix` + path, host and the allowed headers; a 200 allows, a 5xx is an
//! error, any other status denies with that status, body and the allowed headers.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response};

use super::decision::{Allowed, Decision, Denied, Mutation, MutationAction};
use crate::config::filters::ext_authz::HttpAuthzService;
use crate::config::route::StringMatcher;
use crate::pb::envoy::service::auth::v3::CheckRequest;

/// The header in which the service lists the request headers to remove.
const HEADERS_TO_REMOVE: &str = "x-envoy-auth-headers-to-remove";

/// The check request for `check` (whose headers are already filtered by
/// `allowed_headers`).
pub fn request(service: &HttpAuthzService, check: &CheckRequest) -> Option<Request<Bytes>> {
    let http = check.attributes.as_ref()?.request.as_ref()?.http.as_ref()?;
    let path = format!("{}{}", service.path_prefix, http.path);
    let mut builder = Request::builder().method(http.method.as_str()).uri(path.as_str());
    for (name, value) in &http.headers {
        if name.starts_with(':') || name == "content-length" {
            continue;
        }
        builder = builder.header(name.as_str(), value.as_str());
    }
    if let Some(host) = http.headers.get(":authority") {
        builder = builder.header(http::header::HOST, host.as_str());
    }
    // The buffered request body (`with_request_body`), if any; else none.
    let body =
        if http.raw_body.is_empty() { Bytes::from(http.body.clone()) } else { Bytes::from(http.raw_body.clone()) };
    let mut request = builder.header(http::header::CONTENT_LENGTH, body.len()).body(body).ok()?;
    for (name, value) in &service.headers_to_add {
        if let Ok(value) = HeaderValue::from_str(value) {
            request.headers_mut().insert(name.clone(), value);
        }
    }
    Some(request)
}

pub fn decision(service: &HttpAuthzService, response: Response<Bytes>) -> Decision {
    let (parts, body) = response.into_parts();
    let status = parts.status.as_u16();
    if (500..600).contains(&status) {
        return Decision::Error;
    }
    let mut headers = parts.headers;
    let to_remove: Vec<_> = headers.get_all(HEADERS_TO_REMOVE).iter().filter_map(|v| v.to_str().ok()).collect();
    let headers_to_remove = to_remove
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .filter_map(|h| HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes()).ok())
        .collect();
    headers.remove(HEADERS_TO_REMOVE);
    let matches = |list: &[StringMatcher], name: &HeaderName| list.iter().any(|m| m.matches(name.as_str()));
    if status == 200 {
        let mut allowed = Allowed { headers_to_remove, ..Allowed::default() };
        for (name, value) in &headers {
            let mutation = |action| Mutation { name: name.clone(), value: value.clone(), action };
            if matches(&service.allowed_upstream_headers, name) {
                allowed.request_headers.push(mutation(MutationAction::Set));
            }
            if matches(&service.allowed_upstream_headers_to_append, name) {
                allowed.request_headers.push(mutation(MutationAction::Add));
            }
            if matches(&service.allowed_client_headers_on_success, name) {
                allowed.response_headers.push(mutation(MutationAction::Add));
            }
        }
        return Decision::Ok(allowed);
    }
    // Denied: with no `allowed_client_headers` every header of the answer goes to the
    // client; otherwise the listed ones and the four Envoy always passes.
    const ALWAYS: [&str; 3] = ["content-length", "www-authenticate", "location"];
    let client = |name: &HeaderName| {
        service.allowed_client_headers.is_empty()
            || matches(&service.allowed_client_headers, name)
            || ALWAYS.contains(&name.as_str())
    };
    let headers = headers
        .iter()
        .filter(|(name, _)| client(name) && !hop_by_hop(name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    Decision::Denied(Denied { status, headers, body, dynamic_metadata: None })
}

/// Headers that describe the service's own connection or body framing, not the reply.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(name.as_str(), "connection" | "keep-alive" | "transfer-encoding" | "content-length" | "upgrade")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(allowed_client_headers: Vec<StringMatcher>) -> HttpAuthzService {
        let exact = |h: &str| StringMatcher::Exact { value: h.into(), ignore_case: false };
        HttpAuthzService {
            cluster: "authz".into(),
            timeout: std::time::Duration::from_secs(1),
            path_prefix: "/check".into(),
            headers_to_add: vec![(HeaderName::from_static("x-from-proxy"), "1".into())],
            allowed_upstream_headers: vec![exact("x-user")],
            allowed_upstream_headers_to_append: vec![exact("x-extra")],
            allowed_client_headers,
            allowed_client_headers_on_success: vec![exact("x-trace")],
        }
    }

    #[test]
    fn ok_and_denied_answers_map_as_envoy_maps_them() {
        let service = service(vec![StringMatcher::Exact { value: "x-reason".into(), ignore_case: false }]);
        let ok = Response::builder()
            .status(200)
            .header("x-user", "alice")
            .header("x-extra", "e")
            .header("x-trace", "t")
            .header("x-envoy-auth-headers-to-remove", "authorization, x-secret")
            .body(Bytes::new())
            .unwrap();
        let Decision::Ok(allowed) = decision(&service, ok) else { panic!("not OK") };
        let actions: Vec<_> = allowed.request_headers.iter().map(|m| (m.name.as_str(), m.action)).collect();
        assert_eq!(actions, [("x-user", MutationAction::Set), ("x-extra", MutationAction::Add)]);
        assert_eq!(allowed.response_headers[0].name, "x-trace");
        assert_eq!(allowed.headers_to_remove, ["authorization", "x-secret"]);

        let denied = Response::builder()
            .status(401)
            .header("x-reason", "no")
            .header("www-authenticate", "Bearer")
            .header("x-other", "hidden")
            .body(Bytes::from_static(b"go away"))
            .unwrap();
        let Decision::Denied(denied) = decision(&service, denied) else { panic!("not denied") };
        assert_eq!(denied.status, 401);
        let names: Vec<_> = denied.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["x-reason", "www-authenticate"]);
        assert_eq!(&denied.body[..], b"go away");
        let failed = Response::builder().status(503).body(Bytes::new()).unwrap();
        assert!(matches!(decision(&service, failed), Decision::Error));
    }

    #[test]
    fn the_check_request_carries_method_prefixed_path_and_host() {
        use crate::pb::envoy::service::auth::v3::AttributeContext;
        use crate::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Request as AttrRequest};
        let http = HttpRequest {
            method: "POST".into(),
            path: "/api?x=1".into(),
            headers: [
                (":authority".to_owned(), "example.com".to_owned()),
                ("authorization".to_owned(), "t".to_owned()),
            ]
            .into_iter()
            .collect(),
            ..HttpRequest::default()
        };
        let check = CheckRequest {
            attributes: Some(AttributeContext {
                request: Some(AttrRequest { time: None, http: Some(http) }),
                ..AttributeContext::default()
            }),
        };
        let request = request(&service(Vec::new()), &check).unwrap();
        assert_eq!(request.method(), "POST");
        assert_eq!(request.uri(), "/check/api?x=1");
        assert_eq!(request.headers()["host"], "example.com");
        assert_eq!(request.headers()["authorization"], "t");
        assert_eq!(request.headers()["content-length"], "0");
        assert_eq!(request.headers()["x-from-proxy"], "1");
    }
}
