//! A response body compressed as it streams: each data frame is compressed and flushed on
//! its own (so a streamed response reaches the client as it comes, as Envoy flushes per
//! data frame), the stream is finished at the end of the body or before its trailers,
//! which pass through unchanged.

use std::io::{self, Write};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use crate::config::filters::compressor::{BrotliMode, Library};
use crate::proxy::filters::ProxyBody;
use crate::proxy::upstream::BoxError;
use crate::telemetry::Counter;

/// A streaming compressor of one library.
pub trait Encoder: Send {
    /// Compresses `input` and flushes, so everything given so far can be decompressed.
    fn flush(&mut self, input: &[u8]) -> io::Result<Vec<u8>>;
    /// Ends the compressed stream.
    fn finish(&mut self) -> io::Result<Vec<u8>>;
}

/// A new encoder for `library`.
pub fn encoder(library: &Library) -> io::Result<Box<dyn Encoder>> {
    Ok(match library {
        Library::Gzip { level, window_bits } => {
            Box::new(Gzip(flate2::Compress::new_gzip(flate2::Compression::new(*level), *window_bits)))
        }
        Library::Brotli { quality, window_bits, input_block_bits, mode, disable_literal_context_modeling } => {
            let params = brotli::enc::BrotliEncoderParams {
                quality: i32::try_from(*quality).unwrap_or(11),
                lgwin: i32::try_from(*window_bits).unwrap_or(24),
                lgblock: i32::try_from(*input_block_bits).unwrap_or(24),
                mode: match mode {
                    BrotliMode::Default | BrotliMode::Generic => {
                        brotli::enc::backward_references::BrotliEncoderMode::BROTLI_MODE_GENERIC
                    }
                    BrotliMode::Text => brotli::enc::backward_references::BrotliEncoderMode::BROTLI_MODE_TEXT,
                    BrotliMode::Font => brotli::enc::backward_references::BrotliEncoderMode::BROTLI_MODE_FONT,
                },
                disable_literal_context_modeling: i32::from(*disable_literal_context_modeling),
                ..Default::default()
            };
            Box::new(Brotli(Some(brotli::CompressorWriter::with_params(Vec::new(), 4096, &params))))
        }
        Library::Zstd { level, checksum, strategy } => {
            let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), *level)?;
            encoder.include_checksum(*checksum)?;
            if let Some(strategy) = zstd_strategy(*strategy) {
                encoder.set_parameter(zstd::stream::raw::CParameter::Strategy(strategy))?;
            }
            Box::new(Zstd(Some(encoder)))
        }
    })
}

fn zstd_strategy(value: u32) -> Option<zstd::zstd_safe::Strategy> {
    use zstd::zstd_safe::Strategy as S;
    Some(match value {
        1 => S::ZSTD_fast,
        2 => S::ZSTD_dfast,
        3 => S::ZSTD_greedy,
        4 => S::ZSTD_lazy,
        5 => S::ZSTD_lazy2,
        6 => S::ZSTD_btlazy2,
        7 => S::ZSTD_btopt,
        8 => S::ZSTD_btultra,
        9 => S::ZSTD_btultra2,
        // 0: the level's own strategy.
        _ => return None,
    })
}

struct Gzip(flate2::Compress);

impl Gzip {
    fn run(&mut self, mut input: &[u8], flush: flate2::FlushCompress) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(input.len() / 2 + 64);
        loop {
            if out.len() == out.capacity() {
                out.reserve(4096);
            }
            let before = self.0.total_in();
            let status = self.0.compress_vec(input, &mut out, flush).map_err(io::Error::other)?;
            let consumed = usize::try_from(self.0.total_in().saturating_sub(before)).unwrap_or(input.len());
            input = input.get(consumed..).unwrap_or_default();
            // Done when the stream ended, or everything was taken and zlib left room in the
            // output (a flush that fills the buffer may have more to give).
            if status == flate2::Status::StreamEnd
                || (flush != flate2::FlushCompress::Finish && input.is_empty() && out.len() < out.capacity())
            {
                return Ok(out);
            }
        }
    }
}

impl Encoder for Gzip {
    fn flush(&mut self, input: &[u8]) -> io::Result<Vec<u8>> {
        self.run(input, flate2::FlushCompress::Sync)
    }

    fn finish(&mut self) -> io::Result<Vec<u8>> {
        self.run(&[], flate2::FlushCompress::Finish)
    }
}

struct Brotli(Option<brotli::CompressorWriter<Vec<u8>>>);

impl Encoder for Brotli {
    fn flush(&mut self, input: &[u8]) -> io::Result<Vec<u8>> {
        let writer = self.0.as_mut().ok_or_else(finished)?;
        writer.write_all(input)?;
        writer.flush()?;
        Ok(std::mem::take(writer.get_mut()))
    }

    fn finish(&mut self) -> io::Result<Vec<u8>> {
        Ok(self.0.take().ok_or_else(finished)?.into_inner())
    }
}

struct Zstd(Option<zstd::stream::write::Encoder<'static, Vec<u8>>>);

impl Encoder for Zstd {
    fn flush(&mut self, input: &[u8]) -> io::Result<Vec<u8>> {
        let writer = self.0.as_mut().ok_or_else(finished)?;
        writer.write_all(input)?;
        writer.flush()?;
        Ok(std::mem::take(writer.get_mut()))
    }

    fn finish(&mut self) -> io::Result<Vec<u8>> {
        self.0.take().ok_or_else(finished)?.finish()
    }
}

fn finished() -> io::Error {
    io::Error::other("the compressed stream has already ended")
}

/// The byte counters of one compressor filter.
#[derive(Clone)]
pub struct ByteCounters {
    pub uncompressed: Counter,
    pub compressed: Counter,
}

/// `inner`, compressed by `encoder`.
pub struct CompressedBody {
    inner: ProxyBody,
    encoder: Box<dyn Encoder>,
    counters: ByteCounters,
    /// Trailers held back while the end of the compressed stream goes out first.
    trailers: Option<http::HeaderMap>,
    done: bool,
}

impl CompressedBody {
    pub fn new(inner: ProxyBody, encoder: Box<dyn Encoder>, counters: ByteCounters) -> Self {
        Self { inner, encoder, counters, trailers: None, done: false }
    }

    fn emit(&self, bytes: Vec<u8>) -> Frame<Bytes> {
        self.counters.compressed.add(u64::try_from(bytes.len()).unwrap_or(u64::MAX));
        Frame::data(Bytes::from(bytes))
    }
}

impl Body for CompressedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        if data.is_empty() {
                            continue;
                        }
                        this.counters.uncompressed.add(u64::try_from(data.len()).unwrap_or(u64::MAX));
                        let out = this.encoder.flush(&data)?;
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(this.emit(out))));
                        }
                    }
                    Err(frame) => {
                        // Trailers: the compressed stream ends before them.
                        this.trailers = frame.into_trailers().ok();
                        this.done = true;
                        let out = this.encoder.finish()?;
                        return Poll::Ready(Some(Ok(this.emit(out))));
                    }
                },
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => {
                    this.done = true;
                    let out = this.encoder.finish()?;
                    return Poll::Ready(Some(Ok(this.emit(out))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn roundtrip(library: &Library, decode: impl Fn(&[u8]) -> Vec<u8>) {
        let text: Vec<u8> = (0..2000).flat_map(|i: u32| format!("line {i} of the body\n").into_bytes()).collect();
        let mut encoder = encoder(library).unwrap();
        let mut out = Vec::new();
        for chunk in text.chunks(3000) {
            let flushed = encoder.flush(chunk).unwrap();
            out.extend_from_slice(&flushed);
            // Each flush makes everything so far decodable.
            assert!(!flushed.is_empty());
        }
        out.extend(encoder.finish().unwrap());
        assert!(out.len() < text.len() / 4, "{}", out.len());
        assert_eq!(decode(&out), text);
    }

    #[test]
    fn every_library_roundtrips() {
        roundtrip(&Library::Gzip { level: 6, window_bits: 12 }, |b| {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(b).read_to_end(&mut out).unwrap();
            out
        });
        roundtrip(
            &Library::Brotli {
                quality: 3,
                window_bits: 18,
                input_block_bits: 24,
                mode: BrotliMode::Default,
                disable_literal_context_modeling: false,
            },
            |b| {
                let mut out = Vec::new();
                brotli::Decompressor::new(b, 4096).read_to_end(&mut out).unwrap();
                out
            },
        );
        roundtrip(&Library::Zstd { level: 3, checksum: true, strategy: 2 }, |b| zstd::decode_all(b).unwrap());
    }
}
