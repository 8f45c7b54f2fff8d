//! A JSON Web Key Set, parsed as Envoy's `Jwks::createFrom` does (keys it cannot use are
//! skipped; a set with no usable key is refused), and a token's signature checked against
//! it as `verifyJwtWithoutTimeChecking` does. The cryptography is `ring`'s, the crypto
//! library the rest of Outrider (TLS) already uses.

use base64::Engine as _;
use ring::{hmac, signature};
use serde_json::{Map, Value};

use super::jwt::{BASE64URL, Jwt};
use super::status::Status;
use super::verified::Verified;

#[derive(Debug, Clone)]
pub struct Jwks {
    keys: Vec<Jwk>,
    /// Tokens this key set already verified.
    verified: Verified,
}

#[derive(Debug, Clone)]
struct Jwk {
    /// Empty: matches any token `kid`.
    kid: String,
    /// Empty: matches any token `alg`.
    alg: String,
    key: Key,
}

#[derive(Debug, Clone)]
enum Key {
    /// Modulus and exponent, big-endian without leading zeros.
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed point (`04 || x || y`) on the curve.
    Ec {
        curve: Curve,
        point: Vec<u8>,
    },
    Hmac(Vec<u8>),
    Ed25519(Vec<u8>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Curve {
    P256,
    P384,
    P521,
}

impl Curve {
    fn coordinate_len(self) -> usize {
        match self {
            Self::P256 => 32,
            Self::P384 => 48,
            Self::P521 => 66,
        }
    }
}

/// Why a JWKS is unusable (for logs; requests then get "Jwks doesn't have any valid public
/// key", or a failed fetch).
pub type JwksError = &'static str;

const X509_PREFIX: &str = "-----BEGIN CERTIFICATE-----\n";
const X509_SUFFIX: &str = "\n-----END CERTIFICATE-----\n";

impl Jwks {
    pub fn parse(text: &str) -> Result<Jwks, JwksError> {
        let Ok(Value::Object(set)) = serde_json::from_str::<Value>(text) else {
            return Err("Jwks is an invalid JSON");
        };
        let Some(keys) = set.get("keys") else {
            // Google's format: `{"kid": "<PEM certificate>", ...}`, without `keys`.
            if is_x509_map(&set) {
                return x509_keys(&set);
            }
            return Err("Jwks does not have [keys] field");
        };
        let Value::Array(keys) = keys else {
            return Err("[keys] in Jwks is not an array");
        };
        let keys: Vec<Jwk> = keys.iter().filter_map(Value::as_object).filter_map(|k| jwk(k).ok()).collect();
        if keys.is_empty() {
            return Err("Jwks doesn't have any valid public key");
        }
        Ok(Jwks { keys, verified: Verified::default() })
    }

    /// Checks `jwt`'s signature: keys whose `kid` and `alg` (when both sides have one)
    /// match the token's are tried in order.
    pub fn verify(&self, jwt: &Jwt) -> Status {
        if self.verified.contains(&jwt.signed, &jwt.signature) {
            return Status::Ok;
        }
        let status = self.verify_signature(jwt);
        if status == Status::Ok {
            self.verified.insert(&jwt.signed, &jwt.signature);
        }
        status
    }

    fn verify_signature(&self, jwt: &Jwt) -> Status {
        let message = jwt.signed.as_bytes();
        let signature = jwt.signature.as_slice();
        let mut kid_alg_matched = false;
        for jwk in &self.keys {
            if !jwt.kid.is_empty() && !jwk.kid.is_empty() && jwk.kid != jwt.kid {
                continue;
            }
            if !jwk.alg.is_empty() && jwk.alg != jwt.alg {
                continue;
            }
            kid_alg_matched = true;
            let verified = match &jwk.key {
                Key::Ec { curve, point } => {
                    let algorithm: Option<&'static signature::EcdsaVerificationAlgorithm> =
                        match (curve, jwt.alg.as_str()) {
                            (Curve::P256, "ES256") => Some(&signature::ECDSA_P256_SHA256_FIXED),
                            (Curve::P384, "ES384") => Some(&signature::ECDSA_P384_SHA384_FIXED),
                            // ring has no P-521 and no cross-curve fixed-size pairs: such a
                            // signature does not verify (fails closed).
                            _ => None,
                        };
                    algorithm
                        .is_some_and(|a| signature::UnparsedPublicKey::new(a, point).verify(message, signature).is_ok())
                }
                Key::Rsa { n, e } => {
                    let components = signature::RsaPublicKeyComponents { n: n.as_slice(), e: e.as_slice() };
                    let algorithm: Option<&'static signature::RsaParameters> = match jwt.alg.as_str() {
                        "RS256" => Some(&signature::RSA_PKCS1_2048_8192_SHA256),
                        "RS384" => Some(&signature::RSA_PKCS1_2048_8192_SHA384),
                        "RS512" => Some(&signature::RSA_PKCS1_2048_8192_SHA512),
                        "PS256" => Some(&signature::RSA_PSS_2048_8192_SHA256),
                        "PS384" => Some(&signature::RSA_PSS_2048_8192_SHA384),
                        "PS512" => Some(&signature::RSA_PSS_2048_8192_SHA512),
                        _ => None,
                    };
                    algorithm.is_some_and(|a| components.verify(a, message, signature).is_ok())
                }
                Key::Hmac(secret) => {
                    let algorithm = match jwt.alg.as_str() {
                        "HS384" => hmac::HMAC_SHA384,
                        "HS512" => hmac::HMAC_SHA512,
                        _ => hmac::HMAC_SHA256,
                    };
                    hmac::verify(&hmac::Key::new(algorithm, secret), message, signature).is_ok()
                }
                Key::Ed25519(public) => {
                    if signature.len() != 64 {
                        return Status::JwtEd25519SignatureWrongLength;
                    }
                    signature::UnparsedPublicKey::new(&signature::ED25519, public).verify(message, signature).is_ok()
                }
            };
            if verified {
                return Status::Ok;
            }
        }
        if kid_alg_matched { Status::JwtVerificationFail } else { Status::JwksKidAlgMismatch }
    }
}

fn string_field<'a>(key: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, JwksError> {
    match key.get(name) {
        None => Ok(None),
        Some(Value::String(value)) => Ok(Some(value)),
        Some(_) => Err("a key field is not a string"),
    }
}

fn required<'a>(key: &'a Map<String, Value>, name: &str) -> Result<&'a str, JwksError> {
    string_field(key, name)?.ok_or("a required key field is missing")
}

fn decode(value: &str) -> Result<Vec<u8>, JwksError> {
    BASE64URL.decode(value).map_err(|_| "a key field is an invalid Base64url")
}

fn strip_leading_zeros(bytes: Vec<u8>) -> Vec<u8> {
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    bytes[first..].to_vec()
}

/// One entry of `keys`, by `kty`.
fn jwk(key: &Map<String, Value>) -> Result<Jwk, JwksError> {
    let kty = string_field(key, "kty")?.ok_or("[kty] is missing in [keys]")?;
    // `kid` and `alg` of another type are ignored, as Envoy ignores them.
    let kid = key.get("kid").and_then(Value::as_str).unwrap_or_default().to_owned();
    let alg = key.get("alg").and_then(Value::as_str).unwrap_or_default().to_owned();
    let key = match kty {
        "RSA" => {
            if !(alg.is_empty() || alg.starts_with("RS") || alg.starts_with("PS")) {
                return Err("[alg] is not started with [RS] or [PS] for an RSA key");
            }
            let n = strip_leading_zeros(decode(required(key, "n")?)?);
            let e = strip_leading_zeros(decode(required(key, "e")?)?);
            // Envoy rejects exponents other than 3 and 65537 early.
            if e != [3] && e != [1, 0, 1] {
                return Err("Jwks RSA [n] or [e] field is missing or has a parse error");
            }
            Key::Rsa { n, e }
        }
        "EC" => ec_key(key, &alg)?,
        "oct" => {
            if !alg.is_empty() && !["HS256", "HS384", "HS512"].contains(&alg.as_str()) {
                return Err("[alg] does not start with [HS] for an HMAC key");
            }
            let secret = decode(required(key, "k")?)?;
            if secret.is_empty() {
                return Err("Jwks Oct key is an invalid Base64");
            }
            Key::Hmac(secret)
        }
        "OKP" => {
            if !alg.is_empty() && alg != "EdDSA" {
                return Err("[alg] is not [EdDSA] for an OKP key");
            }
            if required(key, "crv")? != "Ed25519" {
                return Err("[crv] field is not supported for an OKP key");
            }
            let x = decode(required(key, "x")?)?;
            if x.len() != 32 {
                return Err("Jwks OKP [x] field is wrong length.");
            }
            Key::Ed25519(x)
        }
        _ => return Err("[kty] is not supported in [keys]"),
    };
    Ok(Jwk { kid, alg, key })
}

fn ec_key(key: &Map<String, Value>, alg: &str) -> Result<Key, JwksError> {
    if !alg.is_empty() && !alg.starts_with("ES") {
        return Err("[alg] is not started with [ES] for an EC key");
    }
    let crv = string_field(key, "crv")?.unwrap_or_default();
    if !alg.is_empty()
        && !crv.is_empty()
        && !matches!((alg, crv), ("ES256", "P-256") | ("ES384", "P-384") | ("ES512", "P-521"))
    {
        return Err("[crv] field specified is not compatible with [alg] for an EC key");
    }
    let curve = match (alg, crv) {
        ("", "") => Curve::P256,
        ("ES256", _) | (_, "P-256") => Curve::P256,
        ("ES384", _) | (_, "P-384") => Curve::P384,
        ("ES512", _) | (_, "P-521") => Curve::P521,
        _ => return Err("[crv] or [alg] field is not supported for an EC key"),
    };
    let x = strip_leading_zeros(decode(required(key, "x")?)?);
    let y = strip_leading_zeros(decode(required(key, "y")?)?);
    let len = curve.coordinate_len();
    if x.len() > len || y.len() > len {
        return Err("Jwks EC [x] and [y] fields have a parse error.");
    }
    let mut point = Vec::with_capacity(1 + 2 * len);
    point.push(4);
    for coordinate in [&x, &y] {
        point.resize(point.len() + len - coordinate.len(), 0);
        point.extend_from_slice(coordinate);
    }
    Ok(Key::Ec { curve, point })
}

fn is_x509_map(set: &Map<String, Value>) -> bool {
    !set.is_empty()
        && set.iter().all(|(kid, cert)| {
            !kid.is_empty() && cert.as_str().is_some_and(|c| c.starts_with(X509_PREFIX) && c.ends_with(X509_SUFFIX))
        })
}

/// Certificates by `kid`: their RSA public keys (Envoy reads only RSA ones from this format).
fn x509_keys(set: &Map<String, Value>) -> Result<Jwks, JwksError> {
    use x509_parser::public_key::PublicKey;
    let mut keys = Vec::with_capacity(set.len());
    for (kid, cert) in set {
        let pem = cert.as_str().unwrap_or_default();
        let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|_| "X509 parse pubkey fails")?;
        let cert = pem.parse_x509().map_err(|_| "X509 parse pubkey fails")?;
        let Ok(PublicKey::RSA(rsa)) = cert.public_key().parsed() else {
            return Err("X509 parse pubkey internal fails: get pubkey");
        };
        let key =
            Key::Rsa { n: strip_leading_zeros(rsa.modulus.to_vec()), e: strip_leading_zeros(rsa.exponent.to_vec()) };
        keys.push(Jwk { kid: kid.clone(), alg: String::new(), key });
    }
    Ok(Jwks { keys, verified: Verified::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_keys_are_skipped_and_an_empty_set_refused() {
        assert!(Jwks::parse("not json").is_err());
        assert!(Jwks::parse(r#"{"keys": {}}"#).is_err());
        assert!(Jwks::parse(r#"{"other": 1}"#).is_err());
        assert!(Jwks::parse(r#"{"keys": [{"kty": "RSA", "n": "AQAB", "e": "Aw", "alg": "ES256"}]}"#).is_err());
        let jwks = Jwks::parse(
            r#"{"keys": [{"kty": "XYZ"}, 3, {"kty": "oct", "k": "c2VjcmV0", "kid": "h"}, {"kty": "RSA", "n": "AQAB", "e": "AQ"}]}"#,
        )
        .unwrap();
        assert_eq!(jwks.keys.len(), 1);
        assert_eq!(jwks.keys[0].kid, "h");
    }

    #[test]
    fn hmac_tokens_verify_and_kid_selects_keys() {
        let jwks = Jwks::parse(r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "a", "alg": "HS256"}]}"#).unwrap();
        let header = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","kid":"a"}"#);
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"iss":"x"}"#);
        let signed = format!("{header}.{payload}");
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, b"secret"), signed.as_bytes());
        let token = format!("{signed}.{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag.as_ref()));
        assert_eq!(jwks.verify(&Jwt::parse(&token).unwrap()), Status::Ok);
        let forged = format!("{signed}.c2ln");
        assert_eq!(jwks.verify(&Jwt::parse(&forged).unwrap()), Status::JwtVerificationFail);
        let other_kid = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","kid":"b"}"#);
        let token = format!("{other_kid}.{payload}.c2ln");
        assert_eq!(jwks.verify(&Jwt::parse(&token).unwrap()), Status::JwksKidAlgMismatch);
    }
}
