//! `envoy.extensions.filters.http.compressor.v3.Compressor` → [`Compressor`], with its
//! `compressor_library` (gzip, brotli, zstd).

use super::super::common;
use super::super::matchers::string_matcher;
use crate::config::error::{ConfigError, Result, Warnings};
use crate::config::filters::compressor::{BrotliMode, Compressor, ContentTypes, Library, ResponseDirection};
use crate::pb::envoy::config::core::v3::{RuntimeFeatureFlag, TypedExtensionConfig};
use crate::pb::envoy::extensions::compression::brotli::compressor::v3 as brotli;
use crate::pb::envoy::extensions::compression::gzip::compressor::v3 as gzip;
use crate::pb::envoy::extensions::compression::zstd::compressor::v3 as zstd;
use crate::pb::envoy::extensions::filters::http::compressor::v3 as proto;
use crate::pb::google::protobuf::Any;

pub const TYPE: &str = "envoy.extensions.filters.http.compressor.v3.Compressor";
const GZIP: &str = "envoy.extensions.compression.gzip.compressor.v3.Gzip";
const BROTLI: &str = "envoy.extensions.compression.brotli.compressor.v3.Brotli";
const ZSTD: &str = "envoy.extensions.compression.zstd.compressor.v3.Zstd";

/// Envoy's minimum response length when none (or 0) is configured.
const DEFAULT_MIN_CONTENT_LENGTH: u64 = 30;

/// What only changes how well or how fast bytes are compressed, never what the client
/// decompresses: ignoring it cannot change what a request gets.
const RATIO_ONLY: &str = "tunes only the compression ratio or speed; the decompressed body is the same";

#[allow(deprecated)]
pub fn compressor(any: &Any, warnings: &mut Warnings) -> Result<Compressor> {
    let proto::Compressor {
        content_length,
        content_type,
        disable_on_etag_header,
        remove_accept_encoding_header,
        runtime_enabled,
        compressor_library,
        request_direction_config,
        response_direction_config,
        choose_first,
    } = common::unpack::<proto::Compressor>(any)?;
    let Some(TypedExtensionConfig { name: library_name, typed_config }) = compressor_library else {
        return Err(ConfigError::new("compressor_library", "is required"));
    };
    let library = library(typed_config.as_ref(), warnings).map_err(|e| e.at("compressor_library.typed_config"))?;
    if let Some(request) = request_direction_config {
        // Envoy compresses request bodies only when the request direction is enabled.
        let enabled = request.common_config.as_ref().map_or(Ok(true), |c| {
            warnings.within("request_direction_config.common_config", |w| enabled(c.enabled.as_ref(), w))
        });
        if enabled.map_err(|e| e.at("request_direction_config.common_config"))? {
            return Err(ConfigError::new("request_direction_config", "compressing request bodies is not supported"));
        }
    }
    let response_stats_scoped = response_direction_config.is_some();
    let response = match response_direction_config {
        // As Envoy documents: with `response_direction_config`, the deprecated top-level
        // fields are ignored.
        Some(config) => warnings
            .within("response_direction_config", |w| response_direction(config, w))
            .map_err(|e| e.at("response_direction_config"))?,
        None => ResponseDirection {
            enabled: enabled(runtime_enabled.as_ref(), warnings).map_err(|e| e.at("runtime_enabled"))?,
            min_content_length: min_content_length(content_length.map(|v| v.value)),
            content_types: content_type_list(content_type),
            disable_on_etag_header,
            weaken_etag_on_compress: false,
            remove_accept_encoding_header,
            uncompressible_response_codes: Vec::new(),
        },
    };
    Ok(Compressor { library_name, library, response, response_stats_scoped, choose_first })
}

fn response_direction(
    config: proto::compressor::ResponseDirectionConfig,
    warnings: &mut Warnings,
) -> Result<ResponseDirection> {
    let proto::compressor::ResponseDirectionConfig {
        common_config,
        disable_on_etag_header,
        weaken_etag_on_compress,
        remove_accept_encoding_header,
        uncompressible_response_codes,
        status_header_enabled,
    } = config;
    if status_header_enabled {
        return Err(ConfigError::new(
            "status_header_enabled",
            "the x-envoy-compression-status response header is not supported",
        ));
    }
    let mut codes = Vec::with_capacity(uncompressible_response_codes.len());
    for (i, code) in uncompressible_response_codes.into_iter().enumerate() {
        let at = format!("uncompressible_response_codes[{i}]");
        let code = u16::try_from(code)
            .ok()
            .filter(|c| (200..600).contains(c))
            .ok_or_else(|| ConfigError::new(&at, format!("{code} is not in [200, 600)")))?;
        if codes.contains(&code) {
            return Err(ConfigError::new(at, format!("{code} is listed twice")));
        }
        codes.push(code);
    }
    let common = common_config.unwrap_or_default();
    let proto::compressor::CommonDirectionConfig {
        enabled: flag,
        min_content_length: min,
        content_type,
        content_type_matcher,
    } = common;
    let enabled = warnings
        .within("common_config.enabled", |w| enabled(flag.as_ref(), w))
        .map_err(|e| e.at("common_config.enabled"))?;
    let content_types = if content_type_matcher.is_empty() {
        content_type_list(content_type)
    } else {
        if !content_type.is_empty() {
            warnings.ignored("common_config.content_type", "content_type_matcher takes precedence, as in Envoy");
        }
        let matchers = content_type_matcher
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                let at = format!("common_config.content_type_matcher[{i}]");
                warnings.within(&at, |w| string_matcher(m, w)).map_err(|e| e.at(&at))
            })
            .collect::<Result<_>>()?;
        ContentTypes::Matchers(matchers)
    };
    Ok(ResponseDirection {
        enabled,
        min_content_length: min_content_length(min.map(|v| v.value)),
        content_types,
        disable_on_etag_header,
        weaken_etag_on_compress,
        remove_accept_encoding_header,
        uncompressible_response_codes: codes,
    })
}

/// A `RuntimeFeatureFlag`: its default value (true when the flag is absent). Outrider has
/// no runtime, so the key never overrides it.
fn enabled(flag: Option<&RuntimeFeatureFlag>, warnings: &mut Warnings) -> Result<bool> {
    let Some(RuntimeFeatureFlag { default_value, runtime_key }) = flag else {
        return Ok(true);
    };
    let Some(default_value) = default_value else {
        return Err(ConfigError::new("default_value", "is required"));
    };
    if !runtime_key.is_empty() {
        warnings.ignored("runtime_key", "Outrider has no runtime: the default value applies");
    }
    Ok(default_value.value)
}

fn min_content_length(value: Option<u32>) -> u64 {
    match value {
        Some(length) if length > 0 => u64::from(length),
        _ => DEFAULT_MIN_CONTENT_LENGTH,
    }
}

fn content_type_list(types: Vec<String>) -> ContentTypes {
    if types.is_empty() {
        ContentTypes::default_list()
    } else {
        ContentTypes::List(types.into_iter().map(|t| t.trim().to_ascii_lowercase()).collect())
    }
}

fn library(any: Option<&Any>, warnings: &mut Warnings) -> Result<Library> {
    let Some(any) = any else {
        return Err(ConfigError::new("", "is required"));
    };
    match common::type_name(&any.type_url) {
        GZIP => gzip_library(common::unpack(any)?, warnings),
        BROTLI => brotli_library(common::unpack(any)?, warnings),
        ZSTD => zstd_library(common::unpack(any)?, warnings),
        other => Err(ConfigError::new("", format!("compressor library {other} is not supported"))),
    }
}

/// A wrapped `uint32` within `[low, high]`, or `default` when absent.
fn bounded(value: Option<u32>, default: u32, low: u32, high: u32, field: &str) -> Result<u32> {
    let value = value.unwrap_or(default);
    if (low..=high).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::new(field, format!("{value} is not in [{low}, {high}]")))
    }
}

fn chunk_size(value: Option<u32>, warnings: &mut Warnings) -> Result<()> {
    if let Some(size) = value {
        bounded(Some(size), size, 4096, 65536, "chunk_size")?;
        warnings.ignored("chunk_size", RATIO_ONLY);
    }
    Ok(())
}

fn gzip_library(proto: gzip::Gzip, warnings: &mut Warnings) -> Result<Library> {
    let gzip::Gzip { memory_level, compression_level, compression_strategy, window_bits, chunk_size: chunk } = proto;
    if let Some(level) = memory_level {
        bounded(Some(level.value), 5, 1, 9, "memory_level")?;
        warnings.ignored("memory_level", RATIO_ONLY);
    }
    // Levels 1–9 are zlib's; DEFAULT_COMPRESSION (0) is zlib's default, level 6.
    let level = match compression_level {
        0 => 6,
        1..=9 => compression_level.unsigned_abs(),
        other => return Err(ConfigError::new("compression_level", format!("{other} is not a defined value"))),
    };
    match gzip::gzip::CompressionStrategy::try_from(compression_strategy) {
        Ok(gzip::gzip::CompressionStrategy::DefaultStrategy) => {}
        Ok(_) => warnings.ignored("compression_strategy", RATIO_ONLY),
        Err(_) => {
            return Err(ConfigError::new(
                "compression_strategy",
                format!("{compression_strategy} is not a defined value"),
            ));
        }
    }
    // Envoy's default window is 12 bits (4 KiB).
    let window_bits = bounded(window_bits.map(|v| v.value), 12, 9, 15, "window_bits")?;
    chunk_size(chunk.map(|v| v.value), warnings)?;
    Ok(Library::Gzip { level, window_bits: u8::try_from(window_bits).unwrap_or(15) })
}

fn brotli_library(proto: brotli::Brotli, warnings: &mut Warnings) -> Result<Library> {
    let brotli::Brotli {
        quality,
        encoder_mode,
        window_bits,
        input_block_bits,
        chunk_size: chunk,
        disable_literal_context_modeling,
    } = proto;
    use brotli::brotli::EncoderMode as M;
    let mode = match M::try_from(encoder_mode) {
        Ok(M::Default) => BrotliMode::Default,
        Ok(M::Generic) => BrotliMode::Generic,
        Ok(M::Text) => BrotliMode::Text,
        Ok(M::Font) => BrotliMode::Font,
        Err(_) => return Err(ConfigError::new("encoder_mode", format!("{encoder_mode} is not a defined value"))),
    };
    chunk_size(chunk.map(|v| v.value), warnings)?;
    Ok(Library::Brotli {
        quality: bounded(quality.map(|v| v.value), 3, 0, 11, "quality")?,
        window_bits: bounded(window_bits.map(|v| v.value), 18, 10, 24, "window_bits")?,
        input_block_bits: bounded(input_block_bits.map(|v| v.value), 24, 16, 24, "input_block_bits")?,
        mode,
        disable_literal_context_modeling,
    })
}

fn zstd_library(proto: zstd::Zstd, warnings: &mut Warnings) -> Result<Library> {
    let zstd::Zstd { compression_level, enable_checksum, strategy, dictionary, chunk_size: chunk } = proto;
    if dictionary.is_some() {
        // A client needs the same dictionary to decompress: never skipped.
        return Err(ConfigError::new("dictionary", "zstd dictionaries are not supported"));
    }
    if zstd::zstd::Strategy::try_from(strategy).is_err() {
        return Err(ConfigError::new("strategy", format!("{strategy} is not a defined value")));
    }
    chunk_size(chunk.map(|v| v.value), warnings)?;
    // 0 (or absent) is zstd's default level, 3. Levels above zstd's maximum are clamped by
    // the library, as in Envoy.
    let level = match compression_level.map(|v| v.value) {
        None | Some(0) => 3,
        Some(level) => i32::try_from(level.min(22)).unwrap_or(22),
    };
    Ok(Library::Zstd { level, checksum: enable_checksum, strategy: strategy.unsigned_abs() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::google::protobuf::{BoolValue, UInt32Value};

    fn any_of<M: prost::Message>(type_name: &str, message: &M) -> Any {
        Any { type_url: format!("type.googleapis.com/{type_name}"), value: message.encode_to_vec() }
    }

    fn with_library(library: Any) -> proto::Compressor {
        proto::Compressor {
            compressor_library: Some(TypedExtensionConfig { name: "lib".into(), typed_config: Some(library) }),
            ..Default::default()
        }
    }

    fn convert(message: &proto::Compressor) -> Result<Compressor> {
        compressor(&any_of(TYPE, message), &mut Warnings::new())
    }

    #[test]
    fn defaults_are_envoys() {
        let c = convert(&with_library(any_of(GZIP, &gzip::Gzip::default()))).unwrap();
        assert_eq!(c.library, Library::Gzip { level: 6, window_bits: 12 });
        assert_eq!(c.response.min_content_length, 30);
        assert!(c.response.enabled);
        assert!(!c.response_stats_scoped);
        assert!(c.response.content_types.allows("application/json"));
        assert!(!c.response.content_types.allows("image/png"));
        let c = convert(&with_library(any_of(BROTLI, &brotli::Brotli::default()))).unwrap();
        assert!(matches!(c.library, Library::Brotli { quality: 3, window_bits: 18, input_block_bits: 24, .. }));
        let c = convert(&with_library(any_of(ZSTD, &zstd::Zstd::default()))).unwrap();
        assert_eq!(c.library, Library::Zstd { level: 3, checksum: false, strategy: 0 });
    }

    #[test]
    #[allow(deprecated)]
    fn response_direction_config_replaces_the_deprecated_fields() {
        let mut message = with_library(any_of(GZIP, &gzip::Gzip::default()));
        message.content_length = Some(UInt32Value { value: 500 });
        message.disable_on_etag_header = true;
        message.response_direction_config = Some(proto::compressor::ResponseDirectionConfig {
            common_config: Some(proto::compressor::CommonDirectionConfig {
                content_type: vec!["Text/Plain".into()],
                enabled: Some(RuntimeFeatureFlag {
                    default_value: Some(BoolValue { value: false }),
                    runtime_key: "k".into(),
                }),
                ..Default::default()
            }),
            uncompressible_response_codes: vec![206],
            ..Default::default()
        });
        let mut warnings = Warnings::new();
        let c = compressor(&any_of(TYPE, &message), &mut warnings).unwrap();
        assert!(c.response_stats_scoped);
        assert_eq!(c.response.min_content_length, 30);
        assert!(!c.response.disable_on_etag_header);
        assert!(!c.response.enabled);
        assert!(c.response.content_types.allows("text/plain"));
        assert_eq!(c.response.uncompressible_response_codes, vec![206]);
        assert_eq!(warnings.items()[0].path, "response_direction_config.common_config.enabled.runtime_key");
    }

    #[test]
    fn refusals_name_their_field() {
        let zstd_dictionary = zstd::Zstd { dictionary: Some(Default::default()), ..Default::default() };
        let mut request = with_library(any_of(GZIP, &gzip::Gzip::default()));
        request.request_direction_config = Some(Default::default());
        let mut status = with_library(any_of(GZIP, &gzip::Gzip::default()));
        status.response_direction_config =
            Some(proto::compressor::ResponseDirectionConfig { status_header_enabled: true, ..Default::default() });
        let mut codes = with_library(any_of(GZIP, &gzip::Gzip::default()));
        codes.response_direction_config = Some(proto::compressor::ResponseDirectionConfig {
            uncompressible_response_codes: vec![206, 99],
            ..Default::default()
        });
        let cases = [
            (with_library(any_of(ZSTD, &zstd_dictionary)), "compressor_library.typed_config.dictionary.specifier"),
            (
                with_library(any_of(
                    GZIP,
                    &gzip::Gzip { window_bits: Some(UInt32Value { value: 8 }), ..Default::default() },
                )),
                "compressor_library.typed_config.window_bits",
            ),
            (
                with_library(any_of(
                    BROTLI,
                    &brotli::Brotli { quality: Some(UInt32Value { value: 12 }), ..Default::default() },
                )),
                "compressor_library.typed_config.quality",
            ),
            (with_library(any_of("acme.Lz4", &gzip::Gzip::default())), "compressor_library.typed_config"),
            (proto::Compressor::default(), "compressor_library"),
            (request, "request_direction_config"),
            (status, "response_direction_config.status_header_enabled"),
            (codes, "response_direction_config.uncompressible_response_codes[1]"),
        ];
        for (message, path) in cases {
            let error = convert(&message).unwrap_err();
            assert_eq!(error.path(), path, "{error}");
        }
    }

    #[test]
    fn a_disabled_request_direction_is_accepted() {
        let mut message = with_library(any_of(GZIP, &gzip::Gzip::default()));
        message.request_direction_config = Some(proto::compressor::RequestDirectionConfig {
            common_config: Some(proto::compressor::CommonDirectionConfig {
                enabled: Some(RuntimeFeatureFlag {
                    default_value: Some(BoolValue { value: false }),
                    runtime_key: String::new(),
                }),
                ..Default::default()
            }),
        });
        convert(&message).unwrap();
    }
}
