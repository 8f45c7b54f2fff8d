//! A cluster's `transport_socket` and `transport_socket_matches` → [`UpstreamTransport`].

use std::collections::BTreeMap;

use prost::Name;

use crate::config::cluster::{InternalUpstream, TransportSocketMatch, UpstreamTransport};
use crate::config::convert::{common, tls};
use crate::config::error::{AtField, ConfigError, Result, Warnings};
use crate::pb::envoy::config::cluster::v3::cluster;
use crate::pb::envoy::config::core::v3 as core;
use crate::pb::envoy::extensions::transport_sockets as sockets;
use crate::pb::envoy::extensions::transport_sockets::internal_upstream::v3::internal_upstream_transport::MetadataValueSource as MetadataKindNamespace;
use crate::pb::envoy::r#type::metadata::v3::metadata_kind;
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
        let inner = match inner {
            None => UpstreamTransport::Plain,
            Some(inner) => warnings
                .within("typed_config.transport_socket", |w| transport_socket(inner, w))
                .at_field("typed_config.transport_socket")?,
        };
        let mut internal = InternalUpstream { host_metadata: Vec::new(), cluster_metadata: BTreeMap::new(), inner };
        for (i, passthrough) in passthrough_metadata.into_iter().enumerate() {
            passthrough_entry(passthrough, &mut internal)
                .map_err(|e| e.at(format_args!("typed_config.passthrough_metadata[{i}]")))?;
        }
        Ok(UpstreamTransport::Internal(Box::new(internal)))
    } else {
        Err(ConfigError::new("typed_config", format!("transport socket {type_name} is not supported")))
    }
}

/// One `passthrough_metadata` entry: a namespace of the endpoint's (`host`) or the cluster's
/// metadata. The cluster's are filled in with the cluster's own metadata by
/// [`resolve_cluster_metadata`].
fn passthrough_entry(proto: MetadataKindNamespace, internal: &mut InternalUpstream) -> Result<()> {
    use metadata_kind::Kind;
    let MetadataKindNamespace { kind, name } = proto;
    if name.is_empty() {
        return Err(ConfigError::new("name", "must not be empty"));
    }
    match kind.and_then(|k| k.kind) {
        Some(Kind::Host(_)) => internal.host_metadata.push(name),
        Some(Kind::Cluster(_)) => {
            internal.cluster_metadata.insert(name, serde_json::Map::new());
        }
        Some(Kind::Request(_) | Kind::Route(_)) => {
            return Err(ConfigError::new("kind", "only host and cluster metadata pass through to a connection"));
        }
        None => return Err(ConfigError::new("kind", "is required")),
    }
    Ok(())
}

/// Gives the internal upstream transports of a cluster the namespaces of the cluster's
/// `metadata` they pass through (a namespace the cluster lacks passes nothing, as in Envoy).
pub(super) fn resolve_cluster_metadata(
    transport: &mut UpstreamTransport,
    metadata: Option<&core::Metadata>,
) -> Result<()> {
    let UpstreamTransport::Internal(internal) = transport else { return Ok(()) };
    let names: Vec<String> = internal.cluster_metadata.keys().cloned().collect();
    for name in names {
        let fields = metadata.and_then(|m| m.filter_metadata.get(&name));
        let fields = match fields.map(super::super::common::struct_to_json) {
            Some(Ok(serde_json::Value::Object(fields))) => fields,
            Some(Ok(_)) | None => {
                internal.cluster_metadata.remove(&name);
                continue;
            }
            Some(Err(e)) => return Err(ConfigError::new(format!("metadata.filter_metadata.{name}"), e.to_string())),
        };
        internal.cluster_metadata.insert(name, fields);
    }
    Ok(())
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
            "passthrough_metadata": [
                {"kind": {"host": {}}, "name": "envoy.filters.listener.original_dst"},
                {"kind": {"cluster": {}}, "name": "istio"}],
            "transport_socket": {"name": "raw_buffer"}}});
        let (transport, warnings) = convert(internal);
        let UpstreamTransport::Internal(internal) = transport.unwrap() else { panic!("not internal") };
        assert_eq!(internal.host_metadata, ["envoy.filters.listener.original_dst"]);
        assert!(internal.cluster_metadata.contains_key("istio"));
        assert_eq!(internal.inner, UpstreamTransport::Plain);
        assert!(warnings.items().is_empty());
    }

    #[test]
    fn cluster_metadata_passes_through_only_what_the_cluster_has() {
        let internal = json!({"name": "internal_upstream", "typed_config": {
            "@type": format!("{SOCKETS}.internal_upstream.v3.InternalUpstreamTransport"),
            "passthrough_metadata": [{"kind": {"cluster": {}}, "name": "istio"}, {"kind": {"cluster": {}}, "name": "absent"}],
            "transport_socket": {"name": "raw_buffer"}}});
        let (transport, _) = convert(internal);
        let mut transport = transport.unwrap();
        let (metadata, _) = json::from_value::<core::Metadata>(
            "envoy.config.core.v3.Metadata",
            json!({"filter_metadata": {"istio": {"services": [{"host": "a.default.svc.cluster.local"}]}}}),
        )
        .unwrap();
        resolve_cluster_metadata(&mut transport, Some(&metadata)).unwrap();
        let UpstreamTransport::Internal(internal) = transport else { panic!("not internal") };
        assert_eq!(internal.cluster_metadata.keys().collect::<Vec<_>>(), ["istio"]);
        assert_eq!(internal.cluster_metadata["istio"]["services"][0]["host"], "a.default.svc.cluster.local");
        let request = json!({"name": "internal_upstream", "typed_config": {
            "@type": format!("{SOCKETS}.internal_upstream.v3.InternalUpstreamTransport"),
            "passthrough_metadata": [{"kind": {"request": {}}, "name": "x"}], "transport_socket": {"name": "raw_buffer"}}});
        let (refused, _) = convert(request);
        assert_eq!(refused.unwrap_err().path(), "typed_config.passthrough_metadata[0].kind");
    }

    #[test]
    fn unknown_socket_is_refused() {
        let (transport, _) = convert(json!({"name": "envoy.transport_sockets.alts"}));
        assert_eq!(transport.unwrap_err().path(), "name");
    }
}
