//! `envoy.extensions.filters.http.set_filter_state.v3.Config` → [`SetFilterState`], and the
//! network filter's `envoy.extensions.filters.network.set_filter_state.v3.Config` →
//! [`NetworkSetFilterState`].
//!
//! Values are text formats of the commands a request's headers and connection answer
//! (`%REQ(…)%`, the downstream addresses and certificate SANs, constants), or for the
//! network filter what a new connection carries (its addresses, the filter state and
//! metadata an internal connection arrived with); a command that needs the response or the
//! upstream is refused, as is a factory Outrider does not know.

use super::super::common;
use super::super::log_format::log_format;
use crate::config::access_log::LogFormat;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::set_filter_state::{
    FilterStateValue, NetworkSetFilterState, SetFilterState, SharedWithUpstream,
};
use crate::config::format::{Command, FilterStateForm, Piece};
use crate::pb::envoy::extensions::filters::common::set_filter_state::v3 as common_proto;
use crate::pb::envoy::extensions::filters::http::set_filter_state::v3 as proto;
use crate::pb::envoy::extensions::filters::network::set_filter_state::v3 as network_proto;
use crate::pb::google::protobuf::Any;

pub const TYPE: &str = "envoy.extensions.filters.http.set_filter_state.v3.Config";
pub const NETWORK_TYPE: &str = "envoy.extensions.filters.network.set_filter_state.v3.Config";

/// The object factories whose objects Outrider keeps as their text: Envoy's string and
/// address objects and Istio's hashable string. Any other factory builds a typed object
/// that some extension reads in its own way; it is refused.
const KNOWN_FACTORIES: [&str; 3] = ["envoy.string", "istio.hashable_string", "envoy.hashable_string"];

/// Keys whose objects Envoy builds as addresses (their factory is the key itself).
const ADDRESS_KEYS: [&str; 4] = [
    "envoy.filters.listener.original_dst.local_ip",
    "envoy.filters.listener.original_dst.remote_ip",
    "envoy.network.transport_socket.original_dst_address",
    "envoy.upstream.dynamic_host",
];

pub fn set_filter_state(any: &Any, _warnings: &mut Warnings) -> Result<SetFilterState> {
    let proto::Config { on_request_headers, clear_route_cache } = common::unpack::<proto::Config>(any)?;
    if clear_route_cache {
        return Err(ConfigError::new("clear_route_cache", "the route is not chosen again after filters"));
    }
    let on_request_headers = values(on_request_headers, "on_request_headers", When::RequestHeaders)?;
    Ok(SetFilterState { on_request_headers })
}

/// The network filter: `on_new_connection`, then `on_downstream_tls_handshake`, both set
/// before the connection's first byte is read (Outrider runs network filters once the
/// handshake is done). `on_downstream_data` waits for bytes Outrider does not wait for:
/// refused.
pub fn network_set_filter_state(any: &Any, _warnings: &mut Warnings) -> Result<NetworkSetFilterState> {
    let network_proto::Config { on_new_connection, on_downstream_tls_handshake, on_downstream_data } =
        common::unpack::<network_proto::Config>(any)?;
    if !on_downstream_data.is_empty() {
        return Err(ConfigError::new("on_downstream_data", "values set on the first data are not supported"));
    }
    let mut values_set = values(on_new_connection, "on_new_connection", When::NewConnection)?;
    values_set.extend(values(on_downstream_tls_handshake, "on_downstream_tls_handshake", When::Handshake)?);
    Ok(NetworkSetFilterState { on_new_connection: values_set })
}

/// When a list's values are set, which decides the commands they may use.
#[derive(Clone, Copy)]
enum When {
    RequestHeaders,
    /// A network filter's new connection: before any TLS handshake, so no certificate.
    NewConnection,
    /// A network filter's completed handshake.
    Handshake,
}

fn values(list: Vec<common_proto::FilterStateValue>, at: &str, when: When) -> Result<Vec<FilterStateValue>> {
    list.into_iter()
        .enumerate()
        .map(|(i, value)| filter_state_value(value, when).map_err(|e| e.at(format_args!("{at}[{i}]"))))
        .collect()
}

fn filter_state_value(proto: common_proto::FilterStateValue, when: When) -> Result<FilterStateValue> {
    use common_proto::filter_state_value::{Key, SharedWithUpstream as Shared, Value};
    let common_proto::FilterStateValue { factory_key, read_only, shared_with_upstream, skip_if_empty, key, value } =
        proto;
    let Some(Key::ObjectKey(key)) = key.filter(|Key::ObjectKey(k)| !k.is_empty()) else {
        return Err(ConfigError::new("object_key", "is required"));
    };
    if !factory_key.is_empty() && !KNOWN_FACTORIES.contains(&factory_key.as_str()) {
        return Err(ConfigError::new("factory_key", format!("object factory {factory_key:?} is not supported")));
    }
    if factory_key.is_empty() && !ADDRESS_KEYS.contains(&key.as_str()) {
        return Err(ConfigError::new(
            "factory_key",
            format!("{key:?} names no object factory Outrider knows; name one with factory_key"),
        ));
    }
    let Some(Value::FormatString(format)) = value else {
        return Err(ConfigError::new("format_string", "is required"));
    };
    let format = match log_format(Some(format)).map_err(|e| e.at("format_string"))? {
        LogFormat::Text { pieces, .. } => pieces,
        LogFormat::Json { .. } => return Err(ConfigError::new("format_string.json_format", "must be a text format")),
    };
    let (known, moment): (fn(&Command) -> bool, _) = match when {
        When::RequestHeaders => (known_at_request_headers, "when a request's headers arrive"),
        When::NewConnection => (known_at_new_connection, "when a connection arrives"),
        When::Handshake => (known_after_handshake, "when a connection's handshake is done"),
    };
    if let Some(command) = format.iter().find_map(|p| match p {
        Piece::Command { command, .. } if !known(command) => Some(command),
        _ => None,
    }) {
        return Err(ConfigError::new("format_string", format!("{command:?} is not known {moment}")));
    }
    let shared_with_upstream = match Shared::try_from(shared_with_upstream) {
        Ok(Shared::None) => SharedWithUpstream::None,
        Ok(Shared::Once) => SharedWithUpstream::Once,
        Ok(Shared::Transitive) => SharedWithUpstream::Transitive,
        Err(_) => {
            return Err(ConfigError::new("shared_with_upstream", format!("unknown value {shared_with_upstream}")));
        }
    };
    Ok(FilterStateValue { key, format, read_only, shared_with_upstream, skip_if_empty })
}

/// What a new connection answers: its addresses and SNI, and the filter state (as text)
/// and metadata an internal connection carried across.
fn known_at_new_connection(command: &Command) -> bool {
    matches!(
        command,
        Command::DownstreamLocalAddress
            | Command::DownstreamRemoteAddress
            | Command::RequestedServerName
            | Command::Constant(_)
            | Command::DynamicMetadata { .. }
            | Command::FilterState { form: FilterStateForm::Plain, .. }
    )
}

/// What a connection answers once its handshake is done: also the certificates' SANs.
fn known_after_handshake(command: &Command) -> bool {
    known_at_new_connection(command)
        || matches!(command, Command::DownstreamPeerUriSan | Command::DownstreamLocalUriSan)
}

/// The commands the filter can answer from a request's headers and its connection.
fn known_at_request_headers(command: &Command) -> bool {
    matches!(
        command,
        Command::Request(_)
            | Command::Protocol
            | Command::DownstreamLocalAddress
            | Command::DownstreamRemoteAddress
            | Command::DownstreamPeerUriSan
            | Command::DownstreamLocalUriSan
            | Command::RequestedServerName
            | Command::Constant(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::json;
    use serde_json::json;

    fn convert(value: serde_json::Value) -> Result<SetFilterState> {
        let (config, dropped) = json::from_value::<proto::Config>(TYPE, value).unwrap();
        assert!(dropped.is_empty(), "{dropped:?}");
        let any =
            Any { type_url: format!("type.googleapis.com/{TYPE}"), value: prost::Message::encode_to_vec(&config) };
        set_filter_state(&any, &mut Warnings::new())
    }

    fn entry(key: &str, factory: &str, format: &str) -> serde_json::Value {
        json!({"object_key": key, "factory_key": factory, "shared_with_upstream": "ONCE",
               "format_string": {"text_format_source": {"inline_string": format}}})
    }

    #[test]
    fn istios_connect_authority_converts() {
        let config = convert(json!({"on_request_headers": [
            entry("envoy.filters.listener.original_dst.local_ip", "", "%REQ(:AUTHORITY)%"),
            entry("io.istio.connect_authority", "istio.hashable_string", "%REQ(:AUTHORITY)%"),
            entry("envoy.filters.listener.original_dst.remote_ip", "", "%DOWNSTREAM_REMOTE_ADDRESS%"),
            entry("io.istio.peer_principal", "istio.hashable_string", "%DOWNSTREAM_PEER_URI_SAN%"),
            entry("io.istio.local_principal", "istio.hashable_string", "%DOWNSTREAM_LOCAL_URI_SAN%"),
        ]}))
        .unwrap();
        assert_eq!(config.on_request_headers.len(), 5);
        assert_eq!(config.on_request_headers[3].shared_with_upstream, SharedWithUpstream::Once);
    }

    fn convert_network(value: serde_json::Value) -> Result<NetworkSetFilterState> {
        let (config, dropped) = json::from_value::<network_proto::Config>(NETWORK_TYPE, value).unwrap();
        assert!(dropped.is_empty(), "{dropped:?}");
        let any = Any {
            type_url: format!("type.googleapis.com/{NETWORK_TYPE}"),
            value: prost::Message::encode_to_vec(&config),
        };
        network_set_filter_state(&any, &mut Warnings::new())
    }

    #[test]
    fn istios_waypoint_network_filters_convert() {
        // `connect_authority` on main_internal's direct chains, and the double-HBONE
        // `propagate_endpoint_metadata`.
        let config = convert_network(json!({"on_new_connection": [
            entry("envoy.filters.listener.original_dst.local_ip", "",
                  "%FILTER_STATE(envoy.filters.listener.original_dst.local_ip:PLAIN)%"),
            entry("istio.double_hbone.hbone_target_address", "envoy.string",
                  "%DYNAMIC_METADATA(istio:double_hbone:hbone_target_address)%"),
        ]}))
        .unwrap();
        assert_eq!(config.on_new_connection.len(), 2);
        let refused = |field: &str, value| convert_network(json!({field: [value]})).unwrap_err().to_string();
        // No certificate before the handshake; no request at all.
        let sans = entry("k", "envoy.string", "%DOWNSTREAM_PEER_URI_SAN%");
        assert!(refused("on_new_connection", sans.clone()).contains("on_new_connection[0].format_string"));
        assert!(convert_network(json!({"on_downstream_tls_handshake": [sans]})).is_ok());
        assert!(refused("on_new_connection", entry("k", "envoy.string", "%REQ(x)%")).contains("format_string"));
        let typed = entry("k", "envoy.string", "%FILTER_STATE(a)%");
        assert!(refused("on_new_connection", typed).contains("format_string"));
        let data = entry("k", "envoy.string", "%DOWNSTREAM_LOCAL_ADDRESS%");
        assert!(refused("on_downstream_data", data).contains("on_downstream_data"));
    }

    #[test]
    fn what_cannot_be_set_faithfully_is_refused_with_its_path() {
        let refused = |value| convert(json!({"on_request_headers": [value]})).unwrap_err().to_string();
        assert!(refused(entry("k", "envoy.ip", "%REQ(x)%")).contains("on_request_headers[0].factory_key"));
        assert!(refused(entry("k", "", "%REQ(x)%")).contains("on_request_headers[0].factory_key"));
        assert!(refused(entry("k", "envoy.string", "%RESPONSE_CODE%")).contains("on_request_headers[0].format_string"));
        let error = convert(json!({"clear_route_cache": true})).unwrap_err().to_string();
        assert!(error.contains("clear_route_cache"), "{error}");
    }
}
