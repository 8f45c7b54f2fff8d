//! `envoy.filters.http.set_filter_state`: sets the request's filter state objects from its
//! headers and connection (see `stream_info`); those shared with the upstream cross to an
//! internal listener when the request's upstream is one (a terminated `CONNECT`).
//!
//! `envoy.filters.network.set_filter_state` ([`on_new_connection`]) sets a connection's, from
//! what the connection carries: Istio's waypoint re-shares the tunnel's destination that
//! way, so that the connection it opens to `connect_originate` carries it on.

use std::net::SocketAddr;
use std::sync::Arc;

use super::context::{DownstreamConnection, RequestContext};
use super::http::{FilterHeadersStatus, HttpFilter};
use crate::config::filters::set_filter_state::{self as config, NetworkSetFilterState, SetFilterState};
use crate::config::format::{Command, FilterStateForm, Piece};
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

/// The network filter: each value computed from the connection and set on it, in order (a
/// later value sees an earlier one).
pub fn on_new_connection(config: &NetworkSetFilterState, connection: &mut DownstreamConnection) {
    for entry in &config.on_new_connection {
        let value = format_with(&entry.format, |command| connection_command_value(command, connection));
        if value.is_empty() && entry.skip_if_empty {
            continue;
        }
        let object = FilterStateValue {
            value: value.into(),
            shared: shared(entry.shared_with_upstream),
            read_only: entry.read_only,
        };
        let state = Arc::make_mut(connection.stream.get_or_insert_default());
        if !state.filter_state.insert(entry.key.clone(), object) {
            tracing::debug!(key = %entry.key, "filter state is read-only; not replaced");
        }
    }
}

/// A connection-time command's value (conversion admits no other); missing is empty.
fn connection_command_value(command: &Command, connection: &DownstreamConnection) -> String {
    let carried = connection.stream.as_deref();
    match command {
        Command::DownstreamLocalAddress => connection.local.to_string(),
        Command::DownstreamRemoteAddress => connection.peer.to_string(),
        Command::DownstreamPeerUriSan => {
            connection.peer_identity.as_ref().and_then(|p| p.uri_sans.first().cloned()).unwrap_or_default()
        }
        Command::DownstreamLocalUriSan => connection.local_uri_san.as_deref().unwrap_or_default().to_owned(),
        Command::RequestedServerName => connection.server_name.clone().unwrap_or_default(),
        Command::Constant(value) => value.clone().unwrap_or_default(),
        Command::FilterState { key, form: FilterStateForm::Plain } => {
            carried.and_then(|s| s.filter_state.get(key)).unwrap_or_default().to_owned()
        }
        Command::DynamicMetadata { namespace, path } => match carried.and_then(|s| s.metadata.get(namespace, path)) {
            Some(serde_json::Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        },
        _ => String::new(),
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
    format_with(pieces, |command| command_value(command, request))
}

/// A text format filled in by `value`, each command's value cut at its max length.
fn format_with(pieces: &[Piece], value: impl Fn(&Command) -> String) -> String {
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Literal(text) => out.push_str(text),
            Piece::Command { command, max_length } => {
                let mut value = value(command);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::filters::set_filter_state::FilterStateValue as Entry;

    fn entry(key: &str, format: Vec<Piece>, shared: config::SharedWithUpstream) -> Entry {
        Entry { key: key.into(), format, read_only: false, shared_with_upstream: shared, skip_if_empty: true }
    }

    #[test]
    fn the_network_filter_sets_what_the_connection_carries_on() {
        use crate::proxy::stream_info::{ORIGINAL_DST_LOCAL_IP, StreamState};
        // As on a waypoint's main_internal: the tunnel's destination arrived shared no
        // further, and is set again to be shared once more; the endpoint's metadata names
        // the double-HBONE target.
        let mut carried = StreamState::default();
        carried.filter_state.set(ORIGINAL_DST_LOCAL_IP.into(), "10.96.0.5:80".into(), SharedWithUpstream::None);
        carried.metadata.set(
            "istio",
            "double_hbone".into(),
            serde_json::json!({"hbone_target_address": "10.1.1.1:15008"}),
        );
        let mut connection = DownstreamConnection {
            peer: "10.0.0.1:4000".parse().unwrap_or(std::net::SocketAddr::from(([0, 0, 0, 0], 0))),
            local: "10.96.0.5:80".parse().unwrap_or(std::net::SocketAddr::from(([0, 0, 0, 0], 0))),
            server_name: None,
            tls: false,
            peer_identity: None,
            local_uri_san: None,
            stream: Some(Arc::new(carried)),
        };
        let command = |command| vec![Piece::Command { command, max_length: None }];
        let config = NetworkSetFilterState {
            on_new_connection: vec![
                entry(
                    ORIGINAL_DST_LOCAL_IP,
                    command(Command::FilterState { key: ORIGINAL_DST_LOCAL_IP.into(), form: FilterStateForm::Plain }),
                    config::SharedWithUpstream::Once,
                ),
                entry(
                    "target",
                    command(Command::DynamicMetadata {
                        namespace: "istio".into(),
                        path: vec!["double_hbone".into(), "hbone_target_address".into()],
                    }),
                    config::SharedWithUpstream::Transitive,
                ),
                entry(
                    "absent",
                    command(Command::FilterState { key: "nothing".into(), form: FilterStateForm::Plain }),
                    config::SharedWithUpstream::Once,
                ),
            ],
        };
        on_new_connection(&config, &mut connection);
        let state = connection.stream.as_deref().map(|s| s.filter_state.shared_with_upstream()).unwrap_or_default();
        assert_eq!(state.get(ORIGINAL_DST_LOCAL_IP), Some("10.96.0.5:80"), "shared once more");
        assert_eq!(state.get("target"), Some("10.1.1.1:15008"));
        assert_eq!(state.get("absent"), None, "skip_if_empty");
    }
}
