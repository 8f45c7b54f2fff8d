//! A token's three parts, parsed and checked as Envoy's `Jwt::parseFromString` does, in
//! its order (the first problem found is the one reported).

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::{Map, Value};

use super::status::Status;

/// base64url with or without padding, as absl's `WebSafeBase64Unescape` accepts.
pub const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// Algorithms Envoy accepts in a token's header.
const IMPLEMENTED_ALGS: [&str; 13] = [
    "ES256", "ES384", "ES512", "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA",
];

#[derive(Debug, Clone)]
pub struct Jwt {
    pub alg: String,
    /// Empty when the header has none.
    pub kid: String,
    pub header: Map<String, Value>,
    pub payload: Map<String, Value>,
    /// The payload part as sent (base64url), for `forward_payload_header`.
    pub payload_base64url: String,
    /// `header.payload`, what the signature covers.
    pub signed: String,
    pub signature: Vec<u8>,
    pub iss: String,
    pub nbf: u64,
    /// 0 when absent (no expiry).
    pub exp: u64,
    pub audiences: Vec<String>,
}

impl Jwt {
    pub fn parse(token: &str) -> Result<Jwt, Status> {
        // Empty sections are skipped, as absl::SkipEmpty does: three remain or it is bad.
        let parts: Vec<&str> = token.split('.').filter(|p| !p.is_empty()).collect();
        let [header_b64, payload_b64, signature_b64] = parts[..] else {
            return Err(Status::JwtBadFormat);
        };
        let header_bytes = BASE64URL.decode(header_b64).map_err(|_| Status::JwtHeaderParseErrorBadBase64)?;
        let header = json_object(&header_bytes).ok_or(Status::JwtHeaderParseErrorBadJson)?;
        let alg = match header.get("alg") {
            Some(Value::String(alg)) => alg.clone(),
            _ => return Err(Status::JwtHeaderBadAlg),
        };
        if !IMPLEMENTED_ALGS.contains(&alg.as_str()) {
            return Err(Status::JwtHeaderNotImplementedAlg);
        }
        let kid = match header.get("kid") {
            None => String::new(),
            Some(Value::String(kid)) => kid.clone(),
            Some(_) => return Err(Status::JwtHeaderBadKid),
        };
        let payload_bytes = BASE64URL.decode(payload_b64).map_err(|_| Status::JwtPayloadParseErrorBadBase64)?;
        let payload = json_object(&payload_bytes).ok_or(Status::JwtPayloadParseErrorBadJson)?;
        let iss = string_claim(&payload, "iss", Status::JwtPayloadParseErrorIssNotString)?;
        string_claim(&payload, "sub", Status::JwtPayloadParseErrorSubNotString)?;
        time_claim(
            &payload,
            "iat",
            Status::JwtPayloadParseErrorIatNotInteger,
            Status::JwtPayloadParseErrorIatOutOfRange,
        )?;
        let nbf = time_claim(
            &payload,
            "nbf",
            Status::JwtPayloadParseErrorNbfNotInteger,
            Status::JwtPayloadParseErrorNbfOutOfRange,
        )?;
        let exp = time_claim(
            &payload,
            "exp",
            Status::JwtPayloadParseErrorExpNotInteger,
            Status::JwtPayloadParseErrorExpOutOfRange,
        )?;
        string_claim(&payload, "jti", Status::JwtPayloadParseErrorJtiNotString)?;
        let audiences = match payload.get("aud") {
            None => Vec::new(),
            Some(Value::String(aud)) => vec![aud.clone()],
            Some(Value::Array(list)) => list
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or(Status::JwtPayloadParseErrorAudNotString)?,
            Some(_) => return Err(Status::JwtPayloadParseErrorAudNotString),
        };
        let signature = BASE64URL.decode(signature_b64).map_err(|_| Status::JwtSignatureParseErrorBadBase64)?;
        Ok(Jwt {
            alg,
            kid,
            header,
            payload,
            payload_base64url: payload_b64.to_owned(),
            signed: format!("{header_b64}.{payload_b64}"),
            signature,
            iss,
            nbf,
            exp,
            audiences,
        })
    }

    /// `nbf` and `exp` against `now` (Unix seconds), each with `clock_skew` of leeway.
    pub fn verify_time(&self, now: u64, clock_skew: u64) -> Status {
        if now.saturating_add(clock_skew) < self.nbf {
            return Status::JwtNotYetValid;
        }
        if self.exp != 0 && now > self.exp.saturating_add(clock_skew) {
            return Status::JwtExpired;
        }
        Status::Ok
    }
}

fn json_object(bytes: &[u8]) -> Option<Map<String, Value>> {
    match serde_json::from_slice(bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

fn string_claim(payload: &Map<String, Value>, name: &str, wrong: Status) -> Result<String, Status> {
    match payload.get(name) {
        None => Ok(String::new()),
        Some(Value::String(value)) => Ok(value.clone()),
        Some(_) => Err(wrong),
    }
}

/// A numeric date: a JSON number in `[0, 2^64)`, fractions dropped (as Envoy reads it
/// from a protobuf double). Absent: 0.
fn time_claim(payload: &Map<String, Value>, name: &str, wrong: Status, range: Status) -> Result<u64, Status> {
    match payload.get(name) {
        None => Ok(0),
        Some(Value::Number(n)) => {
            if let Some(v) = n.as_u64() {
                return Ok(v);
            }
            match n.as_f64() {
                Some(v) if (0.0..18_446_744_073_709_551_615.0).contains(&v) => Ok(v as u64),
                _ => Err(range),
            }
        }
        Some(_) => Err(wrong),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(value: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value)
    }

    #[test]
    fn format_errors_come_in_envoys_order() {
        assert_eq!(Jwt::parse("abc").unwrap_err(), Status::JwtBadFormat);
        assert_eq!(Jwt::parse("a.b.c.d").unwrap_err(), Status::JwtBadFormat);
        assert_eq!(Jwt::parse("!!.b.c").unwrap_err(), Status::JwtHeaderParseErrorBadBase64);
        let bad_json = format!("{}.e30.c2ln", encode("{"));
        assert_eq!(Jwt::parse(&bad_json).unwrap_err(), Status::JwtHeaderParseErrorBadJson);
        let no_alg = format!("{}.e30.c2ln", encode("{}"));
        assert_eq!(Jwt::parse(&no_alg).unwrap_err(), Status::JwtHeaderBadAlg);
        let none_alg = format!("{}.e30.c2ln", encode(r#"{"alg":"none"}"#));
        assert_eq!(Jwt::parse(&none_alg).unwrap_err(), Status::JwtHeaderNotImplementedAlg);
        let header = encode(r#"{"alg":"RS256"}"#);
        let exp = format!("{header}.{}.c2ln", encode(r#"{"exp":"soon"}"#));
        assert_eq!(Jwt::parse(&exp).unwrap_err(), Status::JwtPayloadParseErrorExpNotInteger);
        let aud = format!("{header}.{}.c2ln", encode(r#"{"aud":[1]}"#));
        assert_eq!(Jwt::parse(&aud).unwrap_err(), Status::JwtPayloadParseErrorAudNotString);
        let negative = format!("{header}.{}.c2ln", encode(r#"{"nbf":-1}"#));
        assert_eq!(Jwt::parse(&negative).unwrap_err(), Status::JwtPayloadParseErrorNbfOutOfRange);
    }

    #[test]
    fn claims_and_time_window() {
        let header = encode(r#"{"alg":"ES256","kid":"k1"}"#);
        let token = format!("{header}.{}.c2ln", encode(r#"{"iss":"me","aud":"you","nbf":100,"exp":200}"#));
        let jwt = Jwt::parse(&token).unwrap();
        assert_eq!((jwt.alg.as_str(), jwt.kid.as_str(), jwt.iss.as_str()), ("ES256", "k1", "me"));
        assert_eq!(jwt.audiences, ["you"]);
        assert_eq!(jwt.signature, b"sig");
        assert_eq!(jwt.verify_time(39, 60), Status::JwtNotYetValid);
        assert_eq!(jwt.verify_time(40, 60), Status::Ok);
        assert_eq!(jwt.verify_time(260, 60), Status::Ok);
        assert_eq!(jwt.verify_time(261, 60), Status::JwtExpired);
    }
}
