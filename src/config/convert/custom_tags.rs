//! Tracing's custom tags (`envoy.type.tracing.v3.CustomTag`), as a connection manager's
//! tracing and a route's set them.

use http::HeaderName;

use super::log_format::log_format;
use crate::config::access_log::LogFormat;
use crate::config::error::{ConfigError, Result};
use crate::config::format::{Command, FilterStateForm, Piece};
use crate::config::tracing::{CustomTag, CustomTagValue, PEER_FIELDS, PEER_OBJECTS};
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
        Some(custom_tag::Type::Value(format)) => CustomTagValue::Format(tag_format(format).map_err(|e| e.at("value"))?),
        None => return Err(ConfigError::new("type", "a custom tag needs a type")),
    };
    Ok(CustomTag { tag, value })
}

/// A `value` tag's format: its commands must be filter state objects as text, fields of
/// the peer objects, or constants; any other is refused (the tag would be left off or
/// wrong).
fn tag_format(format: String) -> Result<Vec<Piece>> {
    let source = crate::pb::envoy::config::core::v3::SubstitutionFormatString {
        format: Some(crate::pb::envoy::config::core::v3::substitution_format_string::Format::TextFormatSource(
            crate::pb::envoy::config::core::v3::DataSource {
                specifier: Some(crate::pb::envoy::config::core::v3::data_source::Specifier::InlineString(format)),
                ..Default::default()
            },
        )),
        ..Default::default()
    };
    let LogFormat::Text { pieces, .. } = log_format(Some(source))? else {
        return Err(ConfigError::new("", "must be a text format"));
    };
    for piece in &pieces {
        let Piece::Command { command, .. } = piece else { continue };
        match command {
            Command::Constant(_) | Command::FilterState { form: FilterStateForm::Plain, .. } => {}
            Command::FilterState { key, form: FilterStateForm::Field(field) } => {
                if !PEER_OBJECTS.contains(&key.as_str()) {
                    return Err(ConfigError::new("", format!("{key:?} is not an object with fields")));
                }
                if !PEER_FIELDS.contains(&field.as_str()) {
                    return Err(ConfigError::new("", format!("{key:?} has no field {field:?} Outrider knows")));
                }
            }
            other => {
                return Err(ConfigError::new("", format!("{other:?} is not available to a span's custom tag")));
            }
        }
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value_tag(format: &str) -> Result<CustomTag> {
        custom_tag(ProtoTag { tag: "t".into(), r#type: Some(custom_tag::Type::Value(format.into())) })
    }

    #[test]
    fn istios_waypoint_tags_convert_and_other_commands_are_refused_with_their_path() {
        let tag = value_tag("%FILTER_STATE(upstream_peer_obj:FIELD:app)%").unwrap();
        let CustomTagValue::Format(pieces) = tag.value else { panic!("{tag:?}") };
        assert_eq!(pieces.len(), 1);
        assert!(value_tag("a=%FILTER_STATE(io.istio.peer_principal:PLAIN)%").is_ok());
        for (format, why) in [
            ("%FILTER_STATE(upstream_peer_obj:FIELD:identity)%", "no field"),
            ("%FILTER_STATE(other:FIELD:app)%", "not an object with fields"),
            ("%FILTER_STATE(io.istio.peer_principal)%", "not available"),
            ("%REQ(x-user)%", "not available"),
        ] {
            let error =
                custom_tags(vec![ProtoTag { tag: "t".into(), r#type: Some(custom_tag::Type::Value(format.into())) }])
                    .unwrap_err()
                    .to_string();
            assert!(error.contains("custom_tags[0].value") && error.contains(why), "{format}: {error}");
        }
    }
}
