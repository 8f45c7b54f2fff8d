//! The `Location` of a redirect, built as Envoy's `Http::Utility::newUri` does: scheme,
//! host, port and path each either replaced by the redirect or kept from the request.

use http::request::Parts;

use crate::config::route::{PathMatch, Redirect, RedirectPathRewrite, TlsRequirement};

/// The 301 target when the virtual host requires TLS and the request did not use it
/// (`x-forwarded-proto` is not `https`, as set by the connection manager).
pub(super) fn tls_required(requirement: TlsRequirement, parts: &Parts, host: &str) -> Option<String> {
    let applies = match requirement {
        TlsRequirement::None => false,
        TlsRequirement::ExternalOnly => parts.headers.get("x-envoy-internal").is_none_or(|v| v != "true"),
        TlsRequirement::All => true,
    };
    if !applies || request_scheme(parts) == "https" {
        return None;
    }
    let redirect = Redirect {
        scheme: Some("https".into()),
        host: None,
        port: None,
        path: None,
        strip_query: false,
        response_code: 301,
    };
    Some(location(&redirect, None, parts, host))
}

/// `x-forwarded-proto` (set by the connection manager), else the URI's scheme, else http.
fn request_scheme(parts: &Parts) -> &str {
    parts
        .headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .or_else(|| parts.uri.scheme_str())
        .unwrap_or("http")
}

/// The redirect target for a request with host `host` whose path matched `path_match`.
pub(super) fn location(redirect: &Redirect, path_match: Option<&PathMatch>, parts: &Parts, host: &str) -> String {
    let request_scheme = request_scheme(parts);
    let scheme = redirect.scheme.as_deref().unwrap_or(request_scheme);
    let host = match &redirect.host {
        Some(host) => host.as_str(),
        None => request_host_for(host, request_scheme, scheme, redirect.port.is_some()),
    };
    // A port that is the scheme's default is left out.
    let port = match (redirect.port, scheme) {
        (Some(80), "http") | (Some(443), "https") | (None, _) => String::new(),
        (Some(port), _) => format!(":{port}"),
    };
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let (path, query) = match path_and_query.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path_and_query, None),
    };
    let mut target = match &redirect.path {
        // A query in `path_redirect` replaces the request's and is never stripped.
        Some(RedirectPathRewrite::Path(new)) if new.contains('?') => {
            return format!("{scheme}://{host}{port}{new}");
        }
        Some(RedirectPathRewrite::Path(new)) => new.clone(),
        Some(RedirectPathRewrite::Prefix(new)) => {
            let matched = match path_match {
                Some(PathMatch::Prefix(prefix) | PathMatch::SeparatedPrefix(prefix)) => prefix.len(),
                Some(PathMatch::Exact(_) | PathMatch::Regex(_)) => path.len(),
                Some(PathMatch::Connect) | None => 0,
            };
            format!("{new}{}", path.get(matched..).unwrap_or(""))
        }
        None => path.to_owned(),
    };
    if let Some(query) = query.filter(|_| !redirect.strip_query) {
        target.push('?');
        target.push_str(query);
    }
    format!("{scheme}://{host}{port}{target}")
}

/// The request's host for the new URL: its port is dropped when the redirect sets a port,
/// or when the scheme changes and the port was the old scheme's default (`:80` for http,
/// `:443` for https).
fn request_host_for<'h>(host: &'h str, request_scheme: &str, new_scheme: &str, new_port: bool) -> &'h str {
    let port_at = if host.starts_with('[') { host.rfind("]:").map(|i| i + 1) } else { host.rfind(':') };
    let Some(at) = port_at else {
        return host;
    };
    let port = &host[at..];
    let default_port = (request_scheme == "https" && port == ":443") || (request_scheme == "http" && port == ":80");
    if new_port || (new_scheme != request_scheme && default_port) { &host[..at] } else { host }
}
