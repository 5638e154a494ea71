//! Why a JWT proves no identity ([`JwtError`]) and why a verifier could
//! not be built ([`SetupError`]). No message quotes a token.

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::Algorithm;

use super::claims::ClaimError;
use super::keys::Miss;
use super::refresh::JwksLoadError;
use super::MAX_JWT_BYTES;

/// Why a JWT proves no identity. The gateway logs this at debug and tells
/// the client only "invalid token"; no message quotes the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("not a JWT: three non-empty base64url parts, at most {MAX_JWT_BYTES} bytes")]
    NotAJwt,
    #[error("JWTs are not accepted: none of --jwt-secret-file, --jwks-file, --jwks-url is set")]
    NotEnabled,
    #[error("the JWT header is not a JSON object with an `alg`")]
    BadHeader,
    #[error("the JWT header lists critical extensions (`crit`), which corral does not implement")]
    Critical,
    #[error("{0}")]
    Algorithm(RefusedAlgorithm),
    #[error("no key of the JWKS has the token's `kid` (a reload was asked for)")]
    UnknownKid,
    #[error("the JWKS key the token's `kid` names is not for the token's `alg`")]
    KeyAlgorithmMismatch,
    #[error("the token names no `kid`, and several keys of the JWKS fit its `alg`")]
    KidRequired,
    #[error("no key of the JWKS fits the token's `alg`")]
    NoKey,
    #[error("the signature does not verify")]
    Signature,
    #[error("the token's `iss` is missing or not --jwt-issuer")]
    Issuer,
    #[error(
        "the token's `aud` is missing or does not name --jwt-audience (a token with an `aud` \
         is accepted only when --jwt-audience is set)"
    )]
    Audience,
    #[error("the token's header or claims are malformed")]
    Malformed,
    #[error(transparent)]
    Claims(#[from] ClaimError),
}

/// Why a token's `alg` is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RefusedAlgorithm {
    #[error("algorithm `none` (an unsigned token) is refused")]
    None,
    #[error("HS256 is accepted only with --jwt-secret-file")]
    NeedsSecret,
    #[error("{0:?} is accepted only with --jwks-file or --jwks-url")]
    NeedsJwks(Algorithm),
    #[error("the token's algorithm is not one of HS256, RS256, ES256, EdDSA")]
    Unsupported,
}

/// Why the verifier could not be built at start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("no crypto backend for JWTs is built in (jsonwebtoken needs exactly one)")]
    NoCryptoBackend,
    #[error("JWKS: {0}")]
    Jwks(#[from] JwksLoadError),
}

impl From<Miss> for JwtError {
    fn from(miss: Miss) -> JwtError {
        match miss {
            Miss::UnknownKid => JwtError::UnknownKid,
            Miss::WrongAlgorithm => JwtError::KeyAlgorithmMismatch,
            Miss::KidRequired => JwtError::KidRequired,
            Miss::NoKey => JwtError::NoKey,
        }
    }
}

impl JwtError {
    /// The crate's refusal as ours.
    pub(super) fn from_crate(kind: &ErrorKind) -> JwtError {
        match kind {
            ErrorKind::InvalidSignature => JwtError::Signature,
            ErrorKind::InvalidIssuer => JwtError::Issuer,
            ErrorKind::InvalidAudience => JwtError::Audience,
            ErrorKind::MissingRequiredClaim(claim) | ErrorKind::InvalidClaimFormat(claim) => {
                match claim.as_str() {
                    "iss" => JwtError::Issuer,
                    "aud" => JwtError::Audience,
                    _ => JwtError::Malformed,
                }
            }
            ErrorKind::InvalidAlgorithm => JwtError::Algorithm(RefusedAlgorithm::Unsupported),
            _ => JwtError::Malformed,
        }
    }
}
