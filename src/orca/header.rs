//! Per-request load reports in response headers or trailers, read the way Envoy 1.40 reads
//! them (`source/common/orca/orca_parser.cc`):
//!
//! 1. `endpoint-load-metrics-bin`, the legacy gRPC form: base64 of a serialized
//!    `OrcaLoadReport`. It wins over the other header when both are present.
//! 2. `endpoint-load-metrics`, whose value starts with its format: `BIN <base64>`,
//!    `TEXT <k=v, ...>` or `JSON <object>`. Anything else is an error.
//!
//! Only the first instance of a header counts. Base64 is accepted with or without
//! padding, because grpc-go sends it unpadded.

use base64::Engine;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use http::HeaderMap;
use prost::Message;

use crate::lb::load::LoadReport;
use crate::pb::orca::OrcaLoadReport;

use super::error::OrcaError;
use super::{json, report, text};

/// The legacy gRPC header: base64 of the binary proto, no prefix.
pub const ENDPOINT_LOAD_METRICS_BIN: &str = "endpoint-load-metrics-bin";
/// The header whose value names its format with a prefix.
pub const ENDPOINT_LOAD_METRICS: &str = "endpoint-load-metrics";

/// Standard base64 alphabet, padding optional.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The load report in `headers` (response headers or trailers): `None` when neither ORCA
/// header is present, else the validated report or why it was refused.
pub fn from_headers(headers: &HeaderMap) -> Option<Result<LoadReport, OrcaError>> {
    if let Some(value) = headers.get(ENDPOINT_LOAD_METRICS_BIN) {
        return Some(binary(value.as_bytes()).and_then(report::from_proto));
    }
    let value = headers.get(ENDPOINT_LOAD_METRICS)?;
    Some(prefixed(value.as_bytes()).and_then(report::from_proto))
}

/// Decodes `endpoint-load-metrics` by its format prefix.
fn prefixed(value: &[u8]) -> Result<OrcaLoadReport, OrcaError> {
    if let Some(rest) = value.strip_prefix(b"BIN ") {
        binary(rest)
    } else if let Some(rest) = value.strip_prefix(b"TEXT ") {
        text::parse(std::str::from_utf8(rest).map_err(|_| OrcaError::NotUtf8)?)
    } else if let Some(rest) = value.strip_prefix(b"JSON ") {
        json::parse(std::str::from_utf8(rest).map_err(|_| OrcaError::NotUtf8)?)
    } else {
        // Name the format as Envoy does: up to five bytes, cut at the first space.
        let head = &value[..value.len().min(5)];
        let head = head.split(|b| *b == b' ').next().unwrap_or_default();
        Err(OrcaError::UnsupportedFormat(String::from_utf8_lossy(head).into_owned()))
    }
}

/// Base64, then the binary proto.
fn binary(value: &[u8]) -> Result<OrcaLoadReport, OrcaError> {
    if value.is_empty() {
        return Err(OrcaError::EmptyBinary);
    }
    let bytes = BASE64.decode(value).map_err(|e| OrcaError::Base64(e.to_string()))?;
    OrcaLoadReport::decode(bytes.as_slice()).map_err(|e| OrcaError::Protobuf(e.to_string()))
}

#[cfg(test)]
mod tests;
