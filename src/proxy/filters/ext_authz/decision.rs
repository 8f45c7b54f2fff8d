//! What the authorization service decided, whichever way it was asked: the gRPC
//! `CheckResponse` (or an HTTP service's response, see `http_service`) as one type.

use bytes::Bytes;
use http::{HeaderName, HeaderValue};

use crate::pb::envoy::config::core::v3::HeaderValueOption;
use crate::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction as A;
use crate::pb::envoy::service::auth::v3::CheckResponse;
use crate::pb::envoy::service::auth::v3::check_response::HttpResponse;

/// The decision.
#[derive(Debug, Default)]
pub enum Decision {
    Ok(Allowed),
    Denied(Denied),
    /// The service failed (unreachable, an error status, a 5xx from the HTTP service).
    #[default]
    Error,
    /// The service asked for something that is not valid HTTP (a header name or value):
    /// Envoy answers 500 (`ext_authz.invalid`).
    Invalid,
}

/// What an OK decision changes.
#[derive(Debug, Default)]
pub struct Allowed {
    /// Edits of the request's headers, in order.
    pub request_headers: Vec<Mutation>,
    /// `headers_to_remove` (never pseudo-headers or `host`).
    pub headers_to_remove: Vec<HeaderName>,
    /// Edits of the response's headers.
    pub response_headers: Vec<Mutation>,
    pub query_parameters_to_set: Vec<(String, String)>,
    pub query_parameters_to_remove: Vec<String>,
    pub dynamic_metadata: Option<crate::pb::google::protobuf::Struct>,
}

/// A denial: the reply the client gets.
#[derive(Debug)]
pub struct Denied {
    pub status: u16,
    /// Set on the reply: each name's existing values are replaced by these.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
    pub dynamic_metadata: Option<crate::pb::google::protobuf::Struct>,
}

/// One header edit the service asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutation {
    pub name: HeaderName,
    pub value: HeaderValue,
    pub action: MutationAction,
}

/// How a [`Mutation`] applies, as Envoy's ext_authz maps `HeaderValueOption`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MutationAction {
    /// Replace every value (or add).
    Set,
    /// Another entry with this name.
    Add,
    /// Join to the existing value with a comma; nothing when the header is absent.
    Append,
    AddIfAbsent,
    OverwriteIfExists,
}

/// Maps a gRPC `CheckResponse`: status OK allows, `error_response` is an error, anything
/// else denies (403 unless the denied response says otherwise).
#[allow(deprecated)]
pub fn from_check_response(response: CheckResponse) -> Decision {
    let CheckResponse { status, dynamic_metadata, http_response } = response;
    let code = status.map_or(0, |s| s.code);
    match (code, http_response) {
        (0, ok) => {
            let mut allowed = Allowed { dynamic_metadata, ..Allowed::default() };
            if let Some(HttpResponse::OkResponse(ok)) = ok {
                let Ok(request_headers) = mutations(ok.headers, false) else { return Decision::Invalid };
                let Ok(response_headers) = mutations(ok.response_headers_to_add, true) else {
                    return Decision::Invalid;
                };
                allowed.request_headers = request_headers;
                allowed.response_headers = response_headers;
                let Ok(remove) = ok.headers_to_remove.iter().map(|h| HeaderName::from_bytes(h.as_bytes())).collect()
                else {
                    return Decision::Invalid;
                };
                allowed.headers_to_remove = remove;
                allowed.query_parameters_to_set =
                    ok.query_parameters_to_set.into_iter().map(|q| (q.key, q.value)).collect();
                allowed.query_parameters_to_remove = ok.query_parameters_to_remove;
                // The deprecated field, when set, wins over the response's own.
                if ok.dynamic_metadata.is_some() {
                    allowed.dynamic_metadata = ok.dynamic_metadata;
                }
            }
            Decision::Ok(allowed)
        }
        (_, Some(HttpResponse::ErrorResponse(_))) => Decision::Error,
        (_, denied) => {
            let mut reply = Denied { status: 403, headers: Vec::new(), body: Bytes::new(), dynamic_metadata };
            if let Some(HttpResponse::DeniedResponse(denied)) = denied {
                let Ok(headers) = mutations(denied.headers, true) else { return Decision::Invalid };
                reply.headers = headers.into_iter().map(|m| (m.name, m.value)).collect();
                if let Some(status) = denied.status.and_then(|s| u16::try_from(s.code).ok()).filter(|s| *s > 0) {
                    reply.status = status;
                }
                reply.body = Bytes::from(denied.body);
            }
            Decision::Denied(reply)
        }
    }
}

/// `HeaderValueOption`s as Envoy's ext_authz reads them: the deprecated `append`, when
/// set, means append (to a request header's value) or add (a response header), and not
/// set means replace; otherwise `append_action` says. An invalid name or value makes the
/// whole answer invalid.
#[allow(deprecated)]
fn mutations(options: Vec<HeaderValueOption>, response: bool) -> Result<Vec<Mutation>, ()> {
    options
        .into_iter()
        .map(|option| {
            let header = option.header.unwrap_or_default();
            let name = HeaderName::from_bytes(header.key.as_bytes()).map_err(|_| ())?;
            let value = if header.raw_value.is_empty() {
                HeaderValue::from_str(&header.value)
            } else {
                HeaderValue::from_bytes(&header.raw_value)
            }
            .map_err(|_| ())?;
            let action = match option.append {
                Some(append) if append.value && response => MutationAction::Add,
                Some(append) if append.value => MutationAction::Append,
                Some(_) => MutationAction::Set,
                None => match A::try_from(option.append_action) {
                    Ok(A::AppendIfExistsOrAdd) => MutationAction::Add,
                    Ok(A::AddIfAbsent) => MutationAction::AddIfAbsent,
                    Ok(A::OverwriteIfExists) => MutationAction::OverwriteIfExists,
                    Ok(A::OverwriteIfExistsOrAdd) | Err(_) => MutationAction::Set,
                },
            };
            Ok(Mutation { name, value, action })
        })
        .collect()
}
