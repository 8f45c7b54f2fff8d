//! `envoy.filters.http.compressor`: compresses response bodies with the encoding the client
//! prefers among the compressors of the filter chain (gzip, brotli, zstd).

use crate::config::matcher::StringMatcher;

/// One compressor filter: its library and when it compresses responses.
#[derive(Debug, Clone, PartialEq)]
pub struct Compressor {
    /// `compressor_library.name`: a segment of the filter's stat names.
    pub library_name: String,
    pub library: Library,
    pub response: ResponseDirection,
    /// Whether `response_direction_config` was given: Envoy then roots the response stats
    /// at `….<library>.response.` instead of `….<library>.`.
    pub response_stats_scoped: bool,
    /// `choose_first`: preferred when the client's q-values tie.
    pub choose_first: bool,
}

/// `response_direction_config`, or the deprecated top-level fields it replaces.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseDirection {
    /// `common_config.enabled.default_value` (true when absent).
    pub enabled: bool,
    /// `common_config.min_content_length` (30 when absent or 0, as Envoy reads it).
    pub min_content_length: u64,
    pub content_types: ContentTypes,
    pub disable_on_etag_header: bool,
    /// `weaken_etag_on_compress`: a strong `etag` gets `W/` instead of being removed.
    pub weaken_etag_on_compress: bool,
    pub remove_accept_encoding_header: bool,
    /// `uncompressible_response_codes`.
    pub uncompressible_response_codes: Vec<u16>,
}

/// Which response content types (the mime type, without parameters) may be compressed.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentTypes {
    /// `content_type`, lower-cased (compared without regard to case), or Envoy's default
    /// list when empty.
    List(Vec<String>),
    /// `content_type_matcher` (takes precedence over `content_type`).
    Matchers(Vec<StringMatcher>),
}

impl ContentTypes {
    /// Envoy's list when `content_type` is empty.
    pub const DEFAULT: &[&str] = &[
        "text/html",
        "text/plain",
        "text/css",
        "application/javascript",
        "application/x-javascript",
        "text/javascript",
        "text/x-javascript",
        "text/ecmascript",
        "text/js",
        "text/jscript",
        "text/x-js",
        "application/ecmascript",
        "application/x-json",
        "application/xml",
        "application/json",
        "image/svg+xml",
        "text/xml",
        "application/xhtml+xml",
    ];

    pub fn default_list() -> Self {
        Self::List(Self::DEFAULT.iter().map(|s| (*s).to_owned()).collect())
    }

    /// Whether `mime` (already without its parameters) is one to compress.
    pub fn allows(&self, mime: &str) -> bool {
        match self {
            Self::List(types) => types.iter().any(|t| t.eq_ignore_ascii_case(mime)),
            Self::Matchers(matchers) => matchers.iter().any(|m| m.matches(mime)),
        }
    }
}

/// `compressor_library.typed_config`, with Envoy's defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Library {
    /// `envoy.extensions.compression.gzip.compressor.v3.Gzip`.
    Gzip { level: u32, window_bits: u8 },
    /// `envoy.extensions.compression.brotli.compressor.v3.Brotli`.
    Brotli {
        quality: u32,
        window_bits: u32,
        input_block_bits: u32,
        mode: BrotliMode,
        disable_literal_context_modeling: bool,
    },
    /// `envoy.extensions.compression.zstd.compressor.v3.Zstd`.
    Zstd { level: i32, checksum: bool, strategy: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrotliMode {
    Default,
    Generic,
    Text,
    Font,
}

impl Library {
    /// The `content-encoding` (and `accept-encoding` token) this library produces.
    pub fn content_encoding(&self) -> &'static str {
        match self {
            Self::Gzip { .. } => "gzip",
            Self::Brotli { .. } => "br",
            Self::Zstd { .. } => "zstd",
        }
    }

    /// The library's segment of stat names (Envoy's `statsPrefix()`).
    pub fn stat_prefix(&self) -> &'static str {
        match self {
            Self::Gzip { .. } => "gzip",
            Self::Brotli { .. } => "brotli",
            Self::Zstd { .. } => "zstd",
        }
    }
}
