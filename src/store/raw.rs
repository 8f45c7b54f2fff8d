//! The protobuf bytes a resource arrived as, kept compressed.
//!
//! They are what `/config_dump` shows and how an unchanged resource is recognised when the
//! control plane sends it again. Kept as received they were the largest single part of a
//! 5 000-service mesh's configuration memory (and a slice of the whole response, which
//! stays allocated while any one resource from it is held). A mesh's resources are
//! repetitive — a cluster spells its name three times, an endpoint list repeats its
//! metadata per endpoint — and zstd's fastest level compresses each one on its own in a few
//! microseconds, so the xDS thread pays little and the memory is a fraction.

use std::cell::RefCell;

use bytes::Bytes;

/// zstd's fastest regular level.
const LEVEL: i32 = 1;

thread_local! {
    /// One compression context per thread: creating one per resource would cost more than
    /// compressing it.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
}

/// A resource's bytes (or any other rarely read bytes: the admin server keeps the bootstrap's
/// text this way), compressed; empty for a resource that did not arrive as bytes (from the
/// bootstrap). Equal bytes compress to equal `Raw`s.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Raw(Bytes);

impl std::fmt::Debug for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Raw").field(&self.0.len()).finish()
    }
}

impl Raw {
    /// Compresses `bytes`. If compression fails (only when memory does) the bytes are kept
    /// as they are, marked as such.
    pub fn new(bytes: &[u8]) -> Self {
        if bytes.is_empty() {
            return Self::default();
        }
        let compressed = COMPRESSOR.with_borrow_mut(|compressor| {
            if compressor.is_none() {
                *compressor = zstd::bulk::Compressor::new(LEVEL).ok();
            }
            compressor.as_mut().and_then(|c| c.compress(bytes).ok())
        });
        let mut kept = Vec::with_capacity(1 + compressed.as_ref().map_or(bytes.len(), Vec::len));
        match compressed {
            Some(compressed) => {
                kept.push(Tag::Zstd as u8);
                kept.extend_from_slice(&compressed);
            }
            None => {
                kept.push(Tag::Plain as u8);
                kept.extend_from_slice(bytes);
            }
        }
        Self(Bytes::from(kept))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Bytes held (compressed).
    pub fn held(&self) -> usize {
        self.0.len()
    }

    /// The bytes as they arrived; empty if there are none (or, impossibly, they no longer
    /// decompress).
    pub fn bytes(&self) -> Vec<u8> {
        match self.0.split_first() {
            Some((tag, rest)) if *tag == Tag::Zstd as u8 => zstd::stream::decode_all(rest).unwrap_or_default(),
            Some((_, rest)) => rest.to_vec(),
            None => Vec::new(),
        }
    }
}

/// How the bytes after the first are kept.
#[repr(u8)]
enum Tag {
    Zstd = 1,
    Plain = 2,
}

impl From<&[u8]> for Raw {
    fn from(bytes: &[u8]) -> Self {
        Self::new(bytes)
    }
}

impl From<Bytes> for Raw {
    fn from(bytes: Bytes) -> Self {
        Self::new(&bytes)
    }
}

impl From<Vec<u8>> for Raw {
    fn from(bytes: Vec<u8>) -> Self {
        Self::new(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_back_as_they_came_and_equal_bytes_compare_equal() {
        let name = b"outbound|80||svc-1234.ns-34.svc.cluster.local";
        let mut cluster = Vec::new();
        for _ in 0..3 {
            cluster.extend_from_slice(&[0x0a, name.len() as u8]);
            cluster.extend_from_slice(name);
        }
        let raw = Raw::new(&cluster);
        assert_eq!(raw.bytes(), cluster);
        assert!(raw.held() < cluster.len(), "{} of {} bytes held", raw.held(), cluster.len());
        assert_eq!(Raw::new(&cluster), raw);
        assert_ne!(Raw::new(&cluster[1..]), raw);
    }

    #[test]
    fn nothing_stays_nothing() {
        assert!(Raw::new(&[]).is_empty());
        assert!(Raw::default().bytes().is_empty());
    }
}
