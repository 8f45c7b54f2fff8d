//! Envoy's route match: the request's host, path (without query, fragment and, when
//! configured, `;parameters`), headers (pseudo-headers included), query parameters, gRPC.

use std::borrow::Cow;

use http::request::Parts;

use crate::config::route::{PathMatch, RegexRewrite, Route, RouteConfiguration};

/// The host a virtual host is chosen by: `vhost_header` when configured, else the URI's
/// authority (HTTP/2 `:authority`, HTTP/1 absolute form), else `Host`.
pub fn request_host<'p>(config: &RouteConfiguration, parts: &'p Parts) -> Cow<'p, str> {
    if let Some(name) = &config.vhost_header {
        return request_header_value(parts, name).unwrap_or_default();
    }
    if let Some(authority) = parts.uri.authority() {
        return Cow::Borrowed(authority.as_str());
    }
    parts.headers.get(http::header::HOST).and_then(|v| v.to_str().ok()).map(Cow::Borrowed).unwrap_or_default()
}

/// `content-type` is exactly `application/grpc` or starts with `application/grpc+`
/// (`application/grpc-web` is not gRPC), as Envoy's `Grpc::Common::hasGrpcContentType`.
pub fn is_grpc(parts: &Parts) -> bool {
    let Some(content_type) = parts.headers.get(http::header::CONTENT_TYPE) else {
        return false;
    };
    content_type
        .as_bytes()
        .strip_prefix(b"application/grpc")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(b"+"))
}

/// Whether every part of `route`'s match holds, in Envoy's order: headers, query
/// parameters, gRPC, then the path.
pub(super) fn route_matches(config: &RouteConfiguration, route: &Route, parts: &Parts) -> bool {
    let m = &route.route_match;
    m.headers.iter().all(|h| h.matches(request_header_value(parts, &h.name).as_deref()))
        && m.query_parameters.iter().all(|q| q.matches(query_parameter(parts, &q.name).as_deref()))
        && (!m.grpc || is_grpc(parts))
        && m.path.matches(match_path(config, parts), m.case_sensitive, parts.method == http::Method::CONNECT)
}

/// The path routes match against: no query or fragment, and no `;parameters` when the
/// configuration ignores them (RFC 1808 put them after the path).
fn match_path<'p>(config: &RouteConfiguration, parts: &'p Parts) -> &'p str {
    let path = parts.uri.path();
    let path = path.split_once('#').map_or(path, |(p, _)| p);
    if config.ignore_path_parameters_in_path_matching { path.split_once(';').map_or(path, |(p, _)| p) } else { path }
}

/// A request header's value for matching: pseudo-headers from the request line, several values
/// joined with `,` as Envoy does.
pub fn request_header_value<'p>(parts: &'p Parts, name: &str) -> Option<Cow<'p, str>> {
    match name {
        ":method" => return Some(Cow::Borrowed(parts.method.as_str())),
        ":path" => return parts.uri.path_and_query().map(|p| Cow::Borrowed(p.as_str())),
        ":scheme" => {
            return parts
                .uri
                .scheme_str()
                .map(Cow::Borrowed)
                .or_else(|| parts.headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()).map(Cow::Borrowed));
        }
        ":authority" => {
            return parts
                .uri
                .authority()
                .map(|a| Cow::Borrowed(a.as_str()))
                .or_else(|| request_header_value(parts, "host"));
        }
        _ => {}
    }
    let mut values = parts.headers.get_all(name).iter();
    let first = values.next()?;
    let mut joined = String::from_utf8_lossy(first.as_bytes());
    for value in values {
        let joined = joined.to_mut();
        joined.push(',');
        joined.push_str(&String::from_utf8_lossy(value.as_bytes()));
    }
    Some(joined)
}

/// The first value of a query parameter, percent-decoded; a parameter without `=` has an
/// empty value.
fn query_parameter(parts: &Parts, name: &str) -> Option<String> {
    let query = parts.uri.query()?;
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(key) == name).then(|| percent_decode(value))
    })
}

/// Decodes `%XX` escapes; malformed escapes are kept as they are.
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) =
                (bytes.get(i + 1).and_then(|b| hex(*b)), bytes.get(i + 2).and_then(|b| hex(*b)))
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `prefix_rewrite`: the matched prefix (or, for exact and regex matches, the whole path
/// before the query) is replaced by `new_prefix`; the rest, query included, is kept.
/// `None` when the route's match has no path to replace (CONNECT).
pub(super) fn rewrite_prefix(route: &Route, parts: &Parts, new_prefix: &str) -> Option<String> {
    let full = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let matched_len = match &route.route_match.path {
        PathMatch::Prefix(prefix) | PathMatch::SeparatedPrefix(prefix) => prefix.len(),
        PathMatch::Exact(_) | PathMatch::Regex(_) => parts.uri.path().len(),
        PathMatch::Connect => return None,
    };
    let rest = full.get(matched_len..).unwrap_or("");
    Some(format!("{new_prefix}{rest}"))
}

/// `regex_rewrite`: every match in the path before the query (and fragment) is
/// substituted; the query is kept as it was. `None` for a request without a path
/// (CONNECT's authority form).
pub(super) fn rewrite_regex(parts: &Parts, rewrite: &RegexRewrite) -> Option<String> {
    let full = parts.uri.path_and_query()?.as_str();
    let (path, rest) = full.split_at(full.find(['?', '#']).unwrap_or(full.len()));
    Some(format!("{}{rest}", rewrite.replace_all(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_keeps_malformed_escapes() {
        assert_eq!(percent_decode("a%20b"), "a b");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(percent_decode("a+b"), "a+b");
    }

    #[test]
    fn grpc_content_types() {
        let grpc = |ct: &str| {
            let (parts, ()) =
                http::Request::builder().header("content-type", ct).body(()).unwrap_or_default().into_parts();
            is_grpc(&parts)
        };
        assert!(grpc("application/grpc"));
        assert!(grpc("application/grpc+proto"));
        assert!(!grpc("application/grpc-web"));
        assert!(!grpc("application/json"));
    }
}
