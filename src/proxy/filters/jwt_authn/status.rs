//! Why a token failed, with Envoy's messages: the message is the body of the 401/403
//! reply, so it must be Envoy's word for word.

/// A verification outcome (Envoy's `JwtVerify::Status`, the cases Outrider can meet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    JwtMissed,
    JwtNotYetValid,
    JwtExpired,
    JwtBadFormat,
    JwtHeaderParseErrorBadBase64,
    JwtHeaderParseErrorBadJson,
    JwtHeaderBadAlg,
    JwtHeaderNotImplementedAlg,
    JwtHeaderBadKid,
    JwtPayloadParseErrorBadBase64,
    JwtEd25519SignatureWrongLength,
    JwtPayloadParseErrorBadJson,
    JwtPayloadParseErrorIssNotString,
    JwtPayloadParseErrorSubNotString,
    JwtPayloadParseErrorIatNotInteger,
    JwtPayloadParseErrorIatOutOfRange,
    JwtPayloadParseErrorNbfNotInteger,
    JwtPayloadParseErrorNbfOutOfRange,
    JwtPayloadParseErrorExpNotInteger,
    JwtPayloadParseErrorExpOutOfRange,
    JwtPayloadParseErrorJtiNotString,
    JwtPayloadParseErrorAudNotString,
    JwtSignatureParseErrorBadBase64,
    JwtUnknownIssuer,
    JwtAudienceNotAllowed,
    JwtVerificationFail,
    JwksNoValidKeys,
    JwksKidAlgMismatch,
    JwksFetchFail,
}

impl Status {
    /// Envoy's `getStatusString`.
    pub fn message(self) -> &'static str {
        match self {
            Self::Ok => "OK",
            Self::JwtMissed => "Jwt is missing",
            Self::JwtNotYetValid => "Jwt not yet valid",
            Self::JwtExpired => "Jwt is expired",
            Self::JwtBadFormat => "Jwt is not in the form of Header.Payload.Signature with two dots and 3 sections",
            Self::JwtHeaderParseErrorBadBase64 => "Jwt header is an invalid Base64url encoded",
            Self::JwtHeaderParseErrorBadJson => "Jwt header is an invalid JSON",
            Self::JwtHeaderBadAlg => "Jwt header [alg] field is required and must be a string",
            Self::JwtHeaderNotImplementedAlg => "Jwt header [alg] is not supported",
            Self::JwtHeaderBadKid => "Jwt header [kid] field is not a string",
            Self::JwtPayloadParseErrorBadBase64 => "Jwt payload is an invalid Base64url encoded",
            Self::JwtEd25519SignatureWrongLength => "Jwt ED25519 signature is wrong length",
            Self::JwtPayloadParseErrorBadJson => "Jwt payload is an invalid JSON",
            Self::JwtPayloadParseErrorIssNotString => "Jwt payload [iss] field is not a string",
            Self::JwtPayloadParseErrorSubNotString => "Jwt payload [sub] field is not a string",
            Self::JwtPayloadParseErrorIatNotInteger => "Jwt payload [iat] field is not an integer",
            Self::JwtPayloadParseErrorIatOutOfRange => "Jwt payload [iat] field is not a positive 64 bit integer",
            Self::JwtPayloadParseErrorNbfNotInteger => "Jwt payload [nbf] field is not an integer",
            Self::JwtPayloadParseErrorNbfOutOfRange => "Jwt payload [nbf] field is not a positive 64 bit integer",
            Self::JwtPayloadParseErrorExpNotInteger => "Jwt payload [exp] field is not an integer",
            Self::JwtPayloadParseErrorExpOutOfRange => "Jwt payload [exp] field is not a positive 64 bit integer",
            Self::JwtPayloadParseErrorJtiNotString => "Jwt payload [jti] field is not a string",
            Self::JwtPayloadParseErrorAudNotString => "Jwt payload [aud] field is not a string or string list",
            Self::JwtSignatureParseErrorBadBase64 => "Jwt signature is an invalid Base64url encoded",
            Self::JwtUnknownIssuer => "Jwt issuer is not configured",
            Self::JwtAudienceNotAllowed => "Audiences in Jwt are not allowed",
            Self::JwtVerificationFail => "Jwt verification fails",
            Self::JwksNoValidKeys => "Jwks doesn't have any valid public key",
            Self::JwksKidAlgMismatch => "Jwks doesn't have key to match kid or alg from Jwt",
            Self::JwksFetchFail => "Jwks remote fetch is failed",
        }
    }
}

/// A requirement's result, and whether it came after waiting for a key fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub status: Status,
    pub waited: bool,
}
