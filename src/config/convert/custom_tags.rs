//! Tracing's custom tags (`envoy.type.tracing.v3.CustomTag`), as a connection manager's
//! tracing and a route's set them.

use http::HeaderName;

use crate::config::error::{ConfigError, Result};
use crate::config::tracing::{CustomTag, CustomTagValue};
use crate::pb::envoy::r#type::metadata::v3::{metadata_key, metadata_kind};
use crate::pb::envoy::r#type::tracing::v3::{CustomTag as ProtoTag, custom_tag};

/// The custom tags of a connection manager or a route, each refused with its index.
pub(super) fn custom_tags(tags: Vec<ProtoTag>) -> Result<Vec<CustomTag>> {
    tags.into_iter()
        .enumerate()
        .map(|(i, tag)| custom_tag(tag).map_err(|e| e.at(format!("custom_tags[{i}]"))))
        .collect()
}

fn custom_tag(tag: ProtoTag) -> Result<CustomTag> {
    let ProtoTag { tag, r#type } = tag;
    if tag.is_empty() {
        return Err(ConfigError::new("tag", "must not be empty"));
    }
    let value = match r#type {
        Some(custom_tag::Type::Literal(custom_tag::Literal { value })) => CustomTagValue::Literal(value),
        Some(custom_tag::Type::Environment(custom_tag::Environment { name, default_value })) => {
            CustomTagValue::Literal(std::env::var(&name).unwrap_or(default_value))
        }
        Some(custom_tag::Type::RequestHeader(custom_tag::Header { name, default_value })) => {
            let name = HeaderName::try_from(name.to_ascii_lowercase())
                .map_err(|_| ConfigError::new("request_header.name", format!("{name:?} is not a header name")))?;
            CustomTagValue::RequestHeader { name, default_value }
        }
        Some(custom_tag::Type::Metadata(custom_tag::Metadata { kind, metadata_key, default_value })) => {
            match kind.and_then(|k| k.kind) {
                Some(metadata_kind::Kind::Request(_)) => {}
                _ => {
                    return Err(ConfigError::new(
                        "metadata.kind",
                        "only request (dynamic) metadata is available to custom tags",
                    ));
                }
            }
            let key = metadata_key.ok_or_else(|| ConfigError::new("metadata.metadata_key", "is required"))?;
            let path = key
                .path
                .into_iter()
                .map(|segment| match segment.segment {
                    Some(metadata_key::path_segment::Segment::Key(key)) => Ok(key),
                    _ => Err(ConfigError::new("metadata.metadata_key.path", "only key segments are supported")),
                })
                .collect::<Result<Vec<_>>>()?;
            CustomTagValue::RequestMetadata { namespace: key.key, path, default_value }
        }
        Some(custom_tag::Type::Value(_)) => {
            return Err(ConfigError::new("value", "custom tags from format strings are not supported"));
        }
        None => return Err(ConfigError::new("type", "a custom tag needs a type")),
    };
    Ok(CustomTag { tag, value })
}
