//! Signatures a key set already verified.

use std::sync::Arc;

use crate::core::cow_map::CowMap;

/// The signatures a key set verified, so that a client sending the same token again costs
/// a look-up instead of a signature check. A pure cache: whether a signature verifies
/// depends only on the key set (which this belongs to, and which a new fetch replaces
/// whole) and the signed bytes, compared in full (no hash stands in for a token). Time,
/// issuer and audiences are still checked on every request. Bounded: full, it starts over.
#[derive(Debug, Default)]
pub struct Verified {
    /// `header.payload` → its signature. Shared by the workers, read without a lock.
    entries: CowMap<String, Arc<[u8]>>,
}

/// A copy of a key set starts with nothing verified.
impl Clone for Verified {
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// How many verified tokens a key set remembers.
const VERIFIED_CAPACITY: usize = 1024;

impl Verified {
    pub fn contains(&self, signed: &str, signature: &[u8]) -> bool {
        self.entries.read(|entries| entries.get(signed).is_some_and(|known| **known == *signature))
    }

    pub fn insert(&self, signed: &str, signature: &[u8]) {
        let signature: Arc<[u8]> = signature.into();
        self.entries.update(|entries| {
            if entries.len() >= VERIFIED_CAPACITY {
                entries.clear();
            }
            entries.insert(signed.to_owned(), signature.clone());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_very_signature_that_verified_is_remembered() {
        let verified = Verified::default();
        assert!(!verified.contains("h.p", b"sig"));
        verified.insert("h.p", b"sig");
        assert!(verified.contains("h.p", b"sig"));
        assert!(!verified.contains("h.p", b"forged"));
        assert!(!verified.contains("h.q", b"sig"));
        for i in 0..VERIFIED_CAPACITY {
            verified.insert(&format!("t{i}"), b"s");
        }
        // Full: it started over, so the first entry is gone and memory stays bounded.
        assert!(!verified.contains("h.p", b"sig"));
    }
}
