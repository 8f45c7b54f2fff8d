//! `envoy.tcp.metadataexchange.config.MetadataExchange` (istiod's TCP
//! `istio.metadata_exchange`, a `TypedStruct` or the typed message) →
//! [`TcpMetadataExchange`]. Used by listeners' network filters and clusters' filters.

use super::istio_json::{boolean, config_object, field, list, string};
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::metadata_exchange::TcpMetadataExchange;
use crate::pb::google::protobuf::Any;

pub const TYPE: &str = "envoy.tcp.metadataexchange.config.MetadataExchange";

pub fn metadata_exchange(any: &Any, warnings: &mut Warnings) -> Result<TcpMetadataExchange> {
    let mut out = TcpMetadataExchange { protocol: String::new(), enable_discovery: false };
    for (key, value) in &config_object(any, TYPE)? {
        let name = field(key);
        match name.as_str() {
            "protocol" => out.protocol = string(value, &name)?.to_owned(),
            "enable_discovery" => out.enable_discovery = boolean(value, &name)?,
            "additional_labels" => {
                if !list(value, &name)?.is_empty() {
                    warnings.ignored(name, "only Istio's standard node metadata is exchanged");
                }
            }
            _ => return Err(ConfigError::new(name, format!("unknown field of {TYPE}"))),
        }
    }
    if out.protocol.is_empty() {
        // Istio's filter never matches an empty ALPN either; say so rather than run idle.
        warnings.ignored("protocol", "no ALPN protocol: the exchange never happens");
    }
    Ok(out)
}
