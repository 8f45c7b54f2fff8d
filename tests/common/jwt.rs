//! JWTs signed in the test: RS256 with the committed test key (ring cannot generate RSA
//! keys), and the JWKS that verifies them.
#![allow(dead_code)]

use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, RsaKeyPair};
use rustls::pki_types::PrivatePkcs8KeyDer;
use rustls::pki_types::pem::PemObject;

fn b64(bytes: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The RSA key of `tests/data/jwt-rsa-test-key.pem` under the key id `kid`.
pub struct RsaSigner {
    rsa: RsaKeyPair,
    kid: String,
    rng: SystemRandom,
}

impl RsaSigner {
    pub fn new(kid: &str) -> RsaSigner {
        let pem = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/jwt-rsa-test-key.pem")).unwrap();
        let der = PrivatePkcs8KeyDer::from_pem_slice(&pem).unwrap();
        let rsa = RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).unwrap();
        RsaSigner { rsa, kid: kid.to_owned(), rng: SystemRandom::new() }
    }

    /// `{"keys": [the public key]}`.
    pub fn jwks(&self) -> String {
        let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(self.rsa.public());
        serde_json::json!({"keys": [{"kty": "RSA", "use": "sig", "kid": self.kid, "alg": "RS256", "n": b64(&public.n), "e": b64(&public.e)}]})
            .to_string()
    }

    /// A compact JWS of `claims`.
    pub fn rs256(&self, claims: &serde_json::Value) -> String {
        let header = serde_json::json!({"alg": "RS256", "kid": self.kid, "typ": "JWT"});
        let signed = format!("{}.{}", b64(header.to_string()), b64(claims.to_string()));
        let mut sig = vec![0; self.rsa.public().modulus_len()];
        self.rsa.sign(&signature::RSA_PKCS1_SHA256, &self.rng, signed.as_bytes(), &mut sig).unwrap();
        format!("{signed}.{}", b64(sig))
    }
}

/// Seconds since the epoch, for `iat` and `exp`.
pub fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()
}
