//! An OK decision's edits: the request's headers and query string before it goes on, and
//! the response's headers (kept for whichever response goes downstream).

use http::{HeaderMap, HeaderValue};

use super::decision::{Allowed, Mutation, MutationAction};
use crate::proxy::filters::context::{HeaderEdit, RequestContext};

/// The edits would make the request invalid (a header value that cannot be joined, a
/// path that does not parse).
#[derive(Debug)]
pub struct Invalid;

pub fn apply(request: &mut RequestContext<'_>, allowed: Allowed) -> Result<(), Invalid> {
    let Allowed {
        request_headers,
        headers_to_remove,
        response_headers,
        query_parameters_to_set,
        query_parameters_to_remove,
        dynamic_metadata: _,
    } = allowed;
    let headers = &mut request.parts.headers;
    for mutation in request_headers {
        apply_request(headers, mutation)?;
    }
    for name in headers_to_remove {
        // Envoy never removes `host` (`:authority`): the request would be malformed.
        if name != http::header::HOST {
            headers.remove(name);
        }
    }
    if !query_parameters_to_set.is_empty() || !query_parameters_to_remove.is_empty() {
        edit_query(request, &query_parameters_to_set, &query_parameters_to_remove)?;
    }
    // Envoy applies the response edits by kind: additions, then replacements, then the
    // conditional ones.
    let mut edits: Vec<(u8, HeaderEdit)> = response_headers
        .into_iter()
        .map(|Mutation { name, value, action }| match action {
            MutationAction::Add | MutationAction::Append => (0, HeaderEdit::Append(name, value)),
            MutationAction::Set => (1, HeaderEdit::Set(name, value)),
            MutationAction::AddIfAbsent => (2, HeaderEdit::AddIfAbsent(name, value)),
            MutationAction::OverwriteIfExists => (3, HeaderEdit::OverwriteIfExists(name, value)),
        })
        .collect();
    edits.sort_by_key(|(kind, _)| *kind);
    request.response_headers.extend(edits.into_iter().map(|(_, edit)| edit));
    Ok(())
}

fn apply_request(headers: &mut HeaderMap, Mutation { name, value, action }: Mutation) -> Result<(), Invalid> {
    match action {
        MutationAction::Set => {
            headers.insert(name, value);
        }
        MutationAction::Add => {
            headers.append(name, value);
        }
        MutationAction::Append => {
            // Joined into the first entry with a comma, as Envoy's `appendCopy`; an absent
            // header is left absent.
            if let Some(existing) = headers.get_mut(&name) {
                let mut joined = existing.as_bytes().to_vec();
                joined.push(b',');
                joined.extend_from_slice(value.as_bytes());
                *existing = HeaderValue::from_bytes(&joined).map_err(|_| Invalid)?;
            }
        }
        MutationAction::AddIfAbsent => {
            if !headers.contains_key(&name) {
                headers.insert(name, value);
            }
        }
        MutationAction::OverwriteIfExists => {
            if headers.contains_key(&name) {
                headers.insert(name, value);
            }
        }
    }
    Ok(())
}

/// Sets and removes query parameters, keeping the others in order.
fn edit_query(request: &mut RequestContext<'_>, set: &[(String, String)], remove: &[String]) -> Result<(), Invalid> {
    let uri = &request.parts.uri;
    let path = uri.path().to_owned();
    let mut params: Vec<(String, String)> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (p.to_owned(), String::new()),
        })
        .collect();
    for (key, value) in set {
        match params.iter_mut().find(|(k, _)| k == key) {
            Some(existing) => existing.1.clone_from(value),
            None => params.push((key.clone(), value.clone())),
        }
        let mut seen = false;
        params.retain(|(k, _)| k != key || !std::mem::replace(&mut seen, true));
    }
    params.retain(|(k, _)| !remove.contains(k));
    let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let path_and_query = if query.is_empty() { path } else { format!("{path}?{}", query.join("&")) };
    let mut parts = request.parts.uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().map_err(|_| Invalid)?);
    request.parts.uri = http::Uri::from_parts(parts).map_err(|_| Invalid)?;
    Ok(())
}
