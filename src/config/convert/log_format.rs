//! Access log formats (`SubstitutionFormatString` and the older spellings' text and JSON),
//! as access loggers and filters that format strings (`set_filter_state`) read them.

use crate::config::access_log::LogFormat;
use crate::config::error::{ConfigError, Result};
use crate::config::format::{self, JsonField};
use crate::pb::envoy::config::core::v3::{SubstitutionFormatString, data_source, substitution_format_string};
use crate::pb::google::protobuf::{Struct, value::Kind};

/// A `SubstitutionFormatString`, or Envoy's default format when there is none.
#[allow(deprecated)]
pub fn log_format(format: Option<SubstitutionFormatString>) -> Result<LogFormat> {
    let Some(format) = format else {
        return Ok(LogFormat::envoy_default());
    };
    let SubstitutionFormatString { omit_empty_values, content_type: _, formatters, json_format_options: _, format } =
        format;
    if !formatters.is_empty() {
        return Err(ConfigError::new("formatters", "formatter extensions are not supported"));
    }
    match format {
        None => Err(ConfigError::new("format", "a log format needs text_format_source or json_format")),
        Some(substitution_format_string::Format::TextFormat(text)) => {
            text_format(&text, omit_empty_values).map_err(|e| e.at("text_format"))
        }
        Some(substitution_format_string::Format::TextFormatSource(source)) => match source.specifier {
            Some(data_source::Specifier::InlineString(text)) => {
                text_format(&text, omit_empty_values).map_err(|e| e.at("text_format_source.inline_string"))
            }
            Some(data_source::Specifier::InlineBytes(bytes)) => {
                let text = String::from_utf8(bytes)
                    .map_err(|_| ConfigError::new("text_format_source.inline_bytes", "the format is not UTF-8"))?;
                text_format(&text, omit_empty_values).map_err(|e| e.at("text_format_source.inline_bytes"))
            }
            _ => {
                Err(ConfigError::new("text_format_source", "only inline_string and inline_bytes formats are supported"))
            }
        },
        Some(substitution_format_string::Format::JsonFormat(json)) => {
            json_format(&json, omit_empty_values).map_err(|e| e.at("json_format"))
        }
    }
}

pub(super) fn text_format(text: &str, omit_empty: bool) -> Result<LogFormat> {
    let pieces = format::parse(text).map_err(|e| ConfigError::new("", e.to_string()))?;
    Ok(LogFormat::Text { pieces, omit_empty })
}

pub(super) fn json_format(json: &Struct, omit_empty: bool) -> Result<LogFormat> {
    Ok(LogFormat::Json { fields: json_fields(json)?, omit_empty })
}

/// The object's keys in sorted order: a protobuf `Struct` keeps none, so sorting makes
/// the line the same on every run.
fn json_fields(json: &Struct) -> Result<Vec<(String, JsonField)>> {
    let mut keys: Vec<&String> = json.fields.keys().collect();
    keys.sort();
    keys.into_iter()
        .map(|key| {
            let field = match json.fields.get(key).and_then(|v| v.kind.as_ref()) {
                Some(Kind::StringValue(template)) => JsonField::Template(
                    format::parse(template).map_err(|e| ConfigError::new(key.as_str(), e.to_string()))?,
                ),
                Some(Kind::StructValue(nested)) => JsonField::Object(json_fields(nested).map_err(|e| e.at(key))?),
                _ => {
                    return Err(ConfigError::new(
                        key.as_str(),
                        "only strings and nested objects are supported in json_format",
                    ));
                }
            };
            Ok((key.clone(), field))
        })
        .collect()
}
