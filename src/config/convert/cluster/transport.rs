//! A cluster's `transport_socket` and `transport_socket_matches` → [`UpstreamTransport`].

use std::collections::BTreeMap;

use prost::Name;

use crate::config::cluster::{TransportSocketMatch, UpstreamTransport};
use crate::config::convert::{common, tls};
use crate::config::error::{AtField, ConfigError, Result, Warnings};
use crate::pb::envoy::config::cluster::v3::cluster;
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::extensions::transport_sockets as sockets;
use crate::pb::google::protobuf as gpb;

use sockets::internal_upstream::v3::InternalUpstreamTransport;
use sockets::raw_buffer::v3::RawBuffer;
use sockets::tls::v3::UpstreamTlsContext;

/// One transport socket. Envoy picks the implementation by the type of `typed_config`, and
/// by `name` only when there is none.
pub(super) fn transport_socket(proto: core::TransportSocket, warnings: &mut Warnings) -> Result<UpstreamTransport> {
    use core::transport_socket::ConfigType;
    let core::TransportSocket { name, config_type } = proto;
    let any = match config_type {
        Some(ConfigType::TypedConfig(any)) => any,
        None => return by_name(&name, warnings),
    };
    let type_name = common::type_name(&any.type_url);
    if type_name == UpstreamTlsContext::full_name() {
        let context = common::unpack::<UpstreamTlsContext>(&any).at_field("typed_config")?;
        let context =
            warnings.within("typed_config", |w| tls::upstream_tls_context(context, w)).at_field("typed_config")?;
        Ok(UpstreamTransport::Tls(Box::new(context)))
    } else if type_name == RawBuffer::full_name() {
        Ok(UpstreamTransport::Plain)
    } else if type_name == InternalUpstreamTransport::full_name() {
        let InternalUpstreamTransport { passthrough_metadata, transport_socket: inner } =
            common::unpack(&any).at_field("typed_config")?;
        if !passthrough_metadata.is_empty() {
            // Copied onto the internal listener's connection for its filters to read; what
            // reads it in Istio's configuration (an ORIGINAL_DST cluster's
            // `original_dst_lb_config.metadata_key`) is refused where it is converted, so
            // nothing served depends on it.
            warnings.ignored(
                "typed_config.passthrough_metadata",
                "nothing Outrider serves reads it (ORIGINAL_DST's metadata_key is refused)",
            );
        }
        match inner {
            None => Ok(UpstreamTransport::Plain),
            Some(inner) => warnings
                .within("typed_config.transport_socket", |w| transport_socket(inner, w))
                .at_field("typed_config.transport_socket"),
        }
    } else {
        Err(ConfigError::new("typed_config", format!("transport socket {type_name} is not supported")))
    }
}

fn by_name(name: &str, warnings: &mut Warnings) -> Result<UpstreamTransport> {
    match name {
        "envoy.transport_sockets.raw_buffer" | "raw_buffer" => Ok(UpstreamTransport::Plain),
        "envoy.transport_sockets.tls" | "tls" => {
            let context = tls::upstream_tls_context(UpstreamTlsContext::default(), warnings)?;
            Ok(UpstreamTransport::Tls(Box::new(context)))
        }
        other => Err(ConfigError::new("name", format!("transport socket {other:?} is not supported"))),
    }
}

/// `transport_socket_matches`, in order (the first match wins).
pub(super) fn transport_socket_matches(
    matches: Vec<cluster::TransportSocketMatch>,
    warnings: &mut Warnings,
) -> Result<Vec<TransportSocketMatch>> {
    matches
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let at = format!("[{i}]");
            warnings.within(&at, |w| transport_socket_match(m, w)).at_field(&at)
        })
        .collect()
}

fn transport_socket_match(
    proto: cluster::TransportSocketMatch,
    warnings: &mut Warnings,
) -> Result<TransportSocketMatch> {
    use gpb::value::Kind;
    let cluster::TransportSocketMatch { name, r#match, transport_socket: socket } = proto;
    let mut criteria = BTreeMap::new();
    for (key, value) in r#match.map(|s| s.fields).unwrap_or_default() {
        match value.kind {
            Some(Kind::StringValue(s)) => {
                criteria.insert(key, s);
            }
            _ => {
                return Err(ConfigError::new(format!("match.{key}"), "only string values are supported"));
            }
        }
    }
    let transport = match socket {
        None => UpstreamTransport::Plain,
        Some(socket) => {
            warnings.within("transport_socket", |w| transport_socket(socket, w)).at_field("transport_socket")?
        }
    };
    Ok(TransportSocketMatch { name, criteria, transport })
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::pb::json;
    use serde_json::json;

    const SOCKETS: &str = "type.googleapis.com/envoy.extensions.transport_sockets";

    fn convert(value: serde_json::Value) -> (Result<UpstreamTransport>, Warnings) {
        let (proto, dropped) = json::from_value("envoy.config.core.v3.TransportSocket", value).unwrap();
        assert!(dropped.is_empty(), "{dropped:?}");
        let mut warnings = Warnings::new();
        (transport_socket(proto, &mut warnings), warnings)
    }

    #[test]
    fn tls_raw_buffer_and_internal_upstream() {
        let tls = json!({"name": "envoy.transport_sockets.tls", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "sni": "outbound_.80_._.svc"}});
        let (transport, _) = convert(tls);
        assert!(matches!(transport.unwrap(), UpstreamTransport::Tls(ref t) if t.sni == "outbound_.80_._.svc"));
        let (transport, _) = convert(json!({"name": "envoy.transport_sockets.raw_buffer"}));
        assert_eq!(transport.unwrap(), UpstreamTransport::Plain);
        let internal = json!({"name": "internal_upstream", "typed_config": {
            "@type": format!("{SOCKETS}.internal_upstream.v3.InternalUpstreamTransport"),
            "passthrough_metadata": [{"kind": {"host": {}}, "name": "envoy.filters.listener.original_dst"}],
            "transport_socket": {"name": "raw_buffer"}}});
        let (transport, warnings) = convert(internal);
        assert_eq!(transport.unwrap(), UpstreamTransport::Plain);
        assert_eq!(warnings.items()[0].path, "typed_config.passthrough_metadata");
    }

    #[test]
    fn unknown_socket_is_refused() {
        let (transport, _) = convert(json!({"name": "envoy.transport_sockets.alts"}));
        assert_eq!(transport.unwrap_err().path(), "name");
    }
}
