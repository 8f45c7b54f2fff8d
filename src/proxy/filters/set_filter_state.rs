//! `envoy.filters.http.set_filter_state`: sets the request's filter state objects from its
//! headers and connection (see `stream_info`); those shared with the upstream cross to an
//! internal listener when the request's upstream is one (a terminated `CONNECT`).

use std::net::SocketAddr;
use std::sync::Arc;

use super::context::RequestContext;
use super::http::{FilterHeadersStatus, HttpFilter};
use crate::config::filters::set_filter_state::{self as config, SetFilterState};
use crate::config::format::{Command, Piece};
use crate::proxy::router::request_header_value;
use crate::proxy::stream_info::{FilterStateValue, SharedWithUpstream, StreamState};

pub struct SetFilterStateFilter {
    config: Arc<SetFilterState>,
}

impl SetFilterStateFilter {
    pub fn new(config: Arc<SetFilterState>) -> Self {
        Self { config }
    }
}

impl HttpFilter for SetFilterStateFilter {
    async fn decode_headers(&self, request: &mut RequestContext<'_>) -> FilterHeadersStatus {
        for entry in &self.config.on_request_headers {
            let value = format(&entry.format, request);
            if value.is_empty() && entry.skip_if_empty {
                continue;
            }
            let state = request.parts.extensions.get_or_insert_default::<StreamState>();
            let object = FilterStateValue {
                value: value.into(),
                shared: shared(entry.shared_with_upstream),
                read_only: entry.read_only,
            };
            if !state.filter_state.insert(entry.key.clone(), object) {
                tracing::debug!(key = %entry.key, "filter state is read-only; not replaced");
            }
        }
        FilterHeadersStatus::Continue
    }
}

fn shared(shared: config::SharedWithUpstream) -> SharedWithUpstream {
    match shared {
        config::SharedWithUpstream::None => SharedWithUpstream::None,
        config::SharedWithUpstream::Once => SharedWithUpstream::Once,
        config::SharedWithUpstream::Transitive => SharedWithUpstream::Transitive,
    }
}

/// The value of a text format of request-time commands (conversion admits no other); a
/// missing value is empty, as Envoy's formatter leaves it for filter state.
fn format(pieces: &[Piece], request: &RequestContext<'_>) -> String {
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Literal(text) => out.push_str(text),
            Piece::Command { command, max_length } => {
                let mut value = command_value(command, request);
                if let Some(max) = max_length {
                    let end = value.char_indices().nth(*max).map_or(value.len(), |(i, _)| i);
                    value.truncate(end);
                }
                out.push_str(&value);
            }
        }
    }
    out
}

/// Envoy's names of the HTTP versions.
fn protocol(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

fn command_value(command: &Command, request: &RequestContext<'_>) -> String {
    let connection = request.connection;
    let header = |name: &str| request_header_value(request.parts, name).map(|v| v.into_owned());
    match command {
        Command::Request(lookup) => {
            header(&lookup.name).or_else(|| lookup.alternative.as_deref().and_then(header)).unwrap_or_default()
        }
        Command::Protocol => protocol(request.parts.version).to_owned(),
        Command::DownstreamLocalAddress => connection.local.to_string(),
        Command::DownstreamRemoteAddress => {
            // The client after `x-forwarded-for`: the peer itself, else an address that
            // header gave, which carries no port (Envoy prints port 0).
            if request.remote_ip == connection.peer.ip() {
                connection.peer.to_string()
            } else {
                SocketAddr::new(request.remote_ip, 0).to_string()
            }
        }
        Command::DownstreamPeerUriSan => {
            connection.peer_identity.as_ref().and_then(|p| p.uri_sans.first().cloned()).unwrap_or_default()
        }
        Command::DownstreamLocalUriSan => connection.local_uri_san.as_deref().unwrap_or_default().to_owned(),
        Command::RequestedServerName => connection.server_name.clone().unwrap_or_default(),
        Command::Constant(value) => value.clone().unwrap_or_default(),
        // Refused when the filter is converted.
        _ => String::new(),
    }
}
