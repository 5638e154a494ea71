//! Signed tokens (JWT): the backend of a web IDE, or an identity provider,
//! signs a short-lived token for one person, and [`Verifier::verify`]
//! turns it into an [`Identity`]. HS256 with the `--jwt-secret-file`
//! secret only; RS256, ES256 and EdDSA with a JWKS key of the matching
//! type only (`--jwks-file`, `--jwks-url`); `none` and every other
//! algorithm refused, so no key is ever used with an algorithm it was not
//! made for (algorithm confusion). `verify` does no I/O and waits on no
//! lock a load holds: it may run on the event loop for every hello.
//!
//! Task: the JWKS refresher ([`Verifier::spawn_refresh`]).

mod claims;
mod error;
mod keys;
mod refresh;
#[cfg(test)]
mod test_keys;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::crypto::CryptoProvider;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use tokio::task::JoinHandle;

pub use claims::{rank, ClaimError, ClaimPolicy, MAX_SUBJECT_BYTES};
pub use error::{JwtError, RefusedAlgorithm, SetupError};
pub use keys::{JwksError, MAX_JWKS_BYTES, MAX_JWKS_KEYS, MIN_RSA_BITS};
pub use refresh::{JwksLoadError, JwksSource, FETCH_TIMEOUT, MIN_FETCH_INTERVAL};

use super::Identity;
use crate::auth::Role;
use crate::shutdown::Shutdown;
use keys::Miss;
use refresh::Jwks;

/// Longest token looked at: more is refused before any decoding.
pub const MAX_JWT_BYTES: usize = 8 << 10;

/// Shortest HS256 secret: RFC 7518 asks for at least the hash's size.
pub const MIN_SECRET_BYTES: usize = 32;

/// `--jwt-leeway` by default.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);

/// `--jwks-refresh` by default.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(300);

/// The algorithms a verifier can accept, each with what it needs.
const ACCEPTED: [Algorithm; 4] = [
    Algorithm::HS256,
    Algorithm::RS256,
    Algorithm::ES256,
    Algorithm::EdDSA,
];

/// The HS256 secret (`Debug` prints no byte of it).
#[derive(Clone, PartialEq, Eq)]
pub struct HmacSecret(Vec<u8>);

/// A secret shorter than [`MIN_SECRET_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the secret is {0} bytes; at least {MIN_SECRET_BYTES} are required")]
pub struct ShortSecret(pub usize);

impl HmacSecret {
    pub fn new(bytes: Vec<u8>) -> Result<HmacSecret, ShortSecret> {
        match bytes.len() {
            n if n < MIN_SECRET_BYTES => Err(ShortSecret(n)),
            _ => Ok(HmacSecret(bytes)),
        }
    }
}

impl fmt::Debug for HmacSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HmacSecret(***)")
    }
}

/// What `corral serve` was told about JWTs (`config::load` builds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtSettings {
    /// `--jwt-secret-file`, read and checked: HS256 tokens.
    pub secret: Option<HmacSecret>,
    /// `--jwks-file` or `--jwks-url`: RS256, ES256 and EdDSA tokens.
    pub jwks: Option<JwksSource>,
    /// `--jwt-issuer`: when set, `iss` must be present and equal.
    pub issuer: Option<String>,
    /// `--jwt-audience`: when set, `aud` must be present and name it.
    pub audience: Option<String>,
    /// `--jwt-max-role`: a token claiming more is refused.
    pub max_role: Role,
    /// `--jwt-leeway`: tolerated clock difference for `exp` and `nbf`.
    pub leeway: Duration,
    /// `--jwks-refresh`: time between reloads of the JWKS.
    pub refresh: Duration,
}

impl Default for JwtSettings {
    /// JWTs off; the other settings at their defaults.
    fn default() -> Self {
        JwtSettings {
            secret: None,
            jwks: None,
            issuer: None,
            audience: None,
            max_role: Role::Client,
            leeway: DEFAULT_LEEWAY,
            refresh: DEFAULT_REFRESH,
        }
    }
}

/// Checks JWTs: built once at start, shared, called for every hello.
pub struct Verifier {
    /// The HS256 key, from `--jwt-secret-file`.
    hmac: Option<DecodingKey>,
    /// The JWKS in force and its refresher's state.
    jwks: Option<Jwks>,
    /// What the claims may say.
    policy: ClaimPolicy,
    /// Per algorithm: signature, `iss` and `aud` checks for the crate.
    validations: Vec<(Algorithm, Validation)>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("hs256", &self.hmac.is_some())
            .field("jwks", &self.jwks.as_ref().map(Jwks::source))
            .field("policy", &self.policy)
            .finish()
    }
}

/// The header fields looked at before the crate decodes the token.
#[derive(Deserialize)]
struct Peek {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    crit: Option<serde_json::Value>,
}

/// Whether `token` has a JWT's shape: at most [`MAX_JWT_BYTES`], three
/// non-empty base64url parts. Costs one pass over the bytes, so a bearer
/// string that is no JWT is told apart before any decoding.
pub fn looks_like_jwt(token: &str) -> bool {
    let base64url = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let mut parts = token.split('.');
    token.len() <= MAX_JWT_BYTES
        && parts
            .by_ref()
            .take(3)
            .filter(|part| base64url(part))
            .count()
            == 3
        && parts.next().is_none()
}

impl Verifier {
    /// Builds the verifier: the secret as given, a JWKS file read now (a
    /// bad one is an error), a JWKS URL fetched by [`spawn_refresh`].
    ///
    /// [`spawn_refresh`]: Verifier::spawn_refresh
    pub fn from_settings(settings: &JwtSettings) -> Result<Verifier, SetupError> {
        Verifier::build(settings, MIN_FETCH_INTERVAL)
    }

    /// [`Verifier::from_settings`] with the least time between two JWKS
    /// loads given (tests shorten it).
    fn build(settings: &JwtSettings, min_interval: Duration) -> Result<Verifier, SetupError> {
        let enabled = settings.secret.is_some() || settings.jwks.is_some();
        if enabled && CryptoProvider::try_get_default().is_none() {
            return Err(SetupError::NoCryptoBackend);
        }
        let hmac = settings
            .secret
            .as_ref()
            .and_then(|secret| DecodingKey::from_secret(&secret.0).ok());
        let jwks = match &settings.jwks {
            Some(source) => {
                let (jwks, skipped) = Jwks::new(source.clone(), settings.refresh, min_interval)?;
                if !skipped.is_empty() {
                    tracing::info!(source = %source, ?skipped, "JWKS keys skipped");
                }
                Some(jwks)
            }
            None => None,
        };
        let validations = ACCEPTED
            .iter()
            .map(|&alg| (alg, validation(alg, settings)))
            .collect();
        Ok(Verifier {
            hmac,
            jwks,
            policy: ClaimPolicy {
                max_role: settings.max_role,
                leeway: settings.leeway,
            },
            validations,
        })
    }

    /// Whether any JWT can be accepted (a secret or a JWKS is set).
    pub fn is_enabled(&self) -> bool {
        self.hmac.is_some() || self.jwks.is_some()
    }

    /// For the start-up log: what is accepted, from where.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if self.hmac.is_some() {
            parts.push("HS256 with the secret file".to_string());
        }
        if let Some(jwks) = &self.jwks {
            parts.push(format!(
                "RS256/ES256/EdDSA with the JWKS of {} ({} keys now)",
                jwks.source(),
                jwks.current().len()
            ));
        }
        match parts.is_empty() {
            true => "off".into(),
            false => parts.join(", "),
        }
    }

    /// The identity `token` proves at `now`, or why it proves none. A
    /// token naming a key the JWKS lacks asks the refresher for a reload
    /// (the token itself is refused; its holder may retry).
    pub fn verify(&self, token: &str, now: SystemTime) -> Result<Identity, JwtError> {
        if !looks_like_jwt(token) {
            return Err(JwtError::NotAJwt);
        }
        if !self.is_enabled() {
            return Err(JwtError::NotEnabled);
        }
        let header = peek(token)?;
        if header.crit.is_some() {
            return Err(JwtError::Critical);
        }
        let alg = self.algorithm(&header.alg)?;
        let keys;
        let key = match (alg, &self.hmac, &self.jwks) {
            (Algorithm::HS256, Some(hmac), _) => hmac,
            (_, _, Some(jwks)) => {
                keys = jwks.current();
                keys.pick(alg, header.kid.as_deref()).map_err(|miss| {
                    if matches!(miss, Miss::UnknownKid | Miss::NoKey) {
                        jwks.want_refresh();
                    }
                    JwtError::from(miss)
                })?
            }
            _ => return Err(JwtError::Algorithm(RefusedAlgorithm::Unsupported)),
        };
        let validation = self
            .validations
            .iter()
            .find_map(|(a, v)| (*a == alg).then_some(v))
            .ok_or(JwtError::Algorithm(RefusedAlgorithm::Unsupported))?;
        let data = jsonwebtoken::decode::<serde_json::Value>(token, key, validation)
            .map_err(|e| JwtError::from_crate(e.kind()))?;
        Ok(self.policy.identity(&data.claims, now)?)
    }

    /// The algorithm `alg` names, if the configured keys allow it.
    fn algorithm(&self, alg: &str) -> Result<Algorithm, JwtError> {
        let refused = |why| Err(JwtError::Algorithm(why));
        match alg {
            "HS256" if self.hmac.is_some() => Ok(Algorithm::HS256),
            "HS256" => refused(RefusedAlgorithm::NeedsSecret),
            "RS256" | "ES256" | "EdDSA" => {
                let alg = match alg {
                    "RS256" => Algorithm::RS256,
                    "ES256" => Algorithm::ES256,
                    _ => Algorithm::EdDSA,
                };
                match self.jwks.is_some() {
                    true => Ok(alg),
                    false => refused(RefusedAlgorithm::NeedsJwks(alg)),
                }
            }
            none if none.eq_ignore_ascii_case("none") => refused(RefusedAlgorithm::None),
            _ => refused(RefusedAlgorithm::Unsupported),
        }
    }

    /// Starts the JWKS refresher on the shutdown's tracker (it ends when
    /// the shutdown starts); `None` without a JWKS.
    pub fn spawn_refresh(self: &Arc<Self>, shutdown: &Shutdown) -> Option<JoinHandle<()>> {
        self.jwks.as_ref()?;
        let verifier = Arc::clone(self);
        let cancel = shutdown.child_token();
        Some(shutdown.spawn(async move {
            if let Some(jwks) = &verifier.jwks {
                jwks.run(cancel).await;
            }
        }))
    }
}

/// The crate's checks for tokens signed with `alg`: the signature, and
/// `iss` and `aud` as configured. The times are checked against the time
/// `verify` is given (the crate would read the clock), in `claims`.
fn validation(alg: Algorithm, settings: &JwtSettings) -> Validation {
    let mut validation = Validation::new(alg);
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.required_spec_claims = HashSet::new();
    if let Some(issuer) = &settings.issuer {
        validation.set_issuer(&[issuer]);
        validation.required_spec_claims.insert("iss".into());
    }
    if let Some(audience) = &settings.audience {
        validation.set_audience(&[audience]);
        validation.required_spec_claims.insert("aud".into());
    }
    validation
}

/// The header's `alg`, `kid` and `crit`, decoded without trusting them.
fn peek(token: &str) -> Result<Peek, JwtError> {
    let encoded = token.split('.').next().unwrap_or_default();
    let json = URL_SAFE_NO_PAD
        .decode(encoded)
        .map_err(|_| JwtError::BadHeader)?;
    serde_json::from_slice(&json).map_err(|_| JwtError::BadHeader)
}
