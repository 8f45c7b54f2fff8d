//! Istio's filters in their older form: `envoy.extensions.filters.http.wasm.v3.Wasm` on
//! the null VM (compiled into Istio's proxy) with the code `envoy.wasm.metadata_exchange`
//! or `envoy.wasm.stats`, as istiod rendered `istio.metadata_exchange` and `istio.stats`
//! before their native filters. Any other Wasm module is not Istio's and is left to the
//! caller (skipped when it only observes, refused otherwise).

use super::istio_json::{config_object, field};
use super::istio_stats;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::HttpFilterConfig;
use crate::config::filters::peer_metadata::PeerMetadata;
use crate::pb::envoy::config::core::v3::async_data_source::Specifier as AsyncSpecifier;
use crate::pb::envoy::config::core::v3::data_source::Specifier;
use crate::pb::envoy::extensions::filters::http::wasm::v3::Wasm;
use crate::pb::envoy::extensions::wasm::v3::plugin_config::Vm;
use crate::pb::google::protobuf::{Any, StringValue};

pub const TYPE: &str = "envoy.extensions.filters.http.wasm.v3.Wasm";

const NULL_VM: &str = "envoy.wasm.runtime.null";

pub fn http_filter(any: &Any, warnings: &mut Warnings) -> Result<Option<HttpFilterConfig>> {
    let wasm: Wasm = if super::super::common::type_name(&any.type_url) == TYPE {
        super::super::common::unpack(any)?
    } else {
        let json = serde_json::Value::Object(config_object(any, TYPE)?);
        crate::pb::json::from_value::<Wasm>(TYPE, json).map_err(|e| ConfigError::new(e.path, e.reason))?.0
    };
    let Some(config) = wasm.config else { return Ok(None) };
    let Some(Vm::VmConfig(vm)) = &config.vm else { return Ok(None) };
    let code = vm.code.as_ref().and_then(|c| match &c.specifier {
        Some(AsyncSpecifier::Local(local)) => match &local.specifier {
            Some(Specifier::InlineString(code)) => Some(code.as_str()),
            _ => None,
        },
        _ => None,
    });
    if vm.runtime != NULL_VM {
        return Ok(None);
    }
    match code {
        Some("envoy.wasm.metadata_exchange") => {
            // Its only setting, `max_peer_cache_size`, sizes a cache.
            if config.configuration.is_some() {
                warnings.ignored("config.configuration", "the metadata exchange plugin's settings size its cache only");
            }
            Ok(Some(HttpFilterConfig::PeerMetadata(std::sync::Arc::new(PeerMetadata {
                by_direction: true,
                ..PeerMetadata::default()
            }))))
        }
        Some("envoy.wasm.stats") => {
            let json = match &config.configuration {
                None => serde_json::Map::new(),
                Some(configuration) => plugin_json(configuration).map_err(|e| e.at("config.configuration"))?,
            };
            let stats = warnings
                .within("config.configuration", |w| istio_stats::from_json(&json, w))
                .map_err(|e| e.at("config.configuration"))?;
            Ok(Some(HttpFilterConfig::IstioStats(std::sync::Arc::new(stats))))
        }
        _ => Ok(None),
    }
}

/// A plugin's configuration: a JSON document in a `google.protobuf.StringValue`.
fn plugin_json(any: &Any) -> Result<serde_json::Map<String, serde_json::Value>> {
    let text = super::super::common::unpack::<StringValue>(any)?.value;
    if text.trim().is_empty() {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_str(&text) {
        Ok(serde_json::Value::Object(map)) => Ok(map.into_iter().map(|(k, v)| (field(&k), v)).collect()),
        Ok(_) => Err(ConfigError::new("value", "the plugin configuration is not a JSON object")),
        Err(e) => Err(ConfigError::new("value", format!("the plugin configuration is not JSON: {e}"))),
    }
}
