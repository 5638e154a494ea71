//! A JSON Web Key Set (RFC 7517) as the verifier uses it: the public keys
//! it may verify with, each bound to the one algorithm its type allows
//! (RSA → RS256, EC P-256 → ES256, OKP Ed25519 → EdDSA), and how a
//! token's `alg` and `kid` pick one. Symmetric (`oct`) keys and keys for
//! other uses or algorithms are skipped, so an identity provider's set
//! that also lists encryption keys still loads. Pure: no I/O.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::crypto::CryptoProvider;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

/// Largest JWKS document read, from a file or a URL.
pub const MAX_JWKS_BYTES: usize = 1 << 20;

/// Most keys one set may hold (identity providers publish a handful).
pub const MAX_JWKS_KEYS: usize = 64;

/// Smallest RSA modulus accepted, in bits.
pub const MIN_RSA_BITS: usize = 2048;

/// One usable public key.
struct Key {
    kid: Option<String>,
    /// The only algorithm this key verifies.
    alg: Algorithm,
    decoding: DecodingKey,
}

/// The usable keys of one JWKS document.
#[derive(Default)]
pub struct KeySet {
    keys: Vec<Key>,
}

/// Why a JWKS document gives no key set. Messages name keys by position
/// and `kid`, never quote key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    #[error("the JWKS is larger than {MAX_JWKS_BYTES} bytes")]
    TooLarge,
    #[error("the JWKS is not a JSON object with a `keys` list")]
    NotAKeySet,
    #[error("the JWKS holds {0} keys; at most {MAX_JWKS_KEYS} are accepted")]
    TooManyKeys(usize),
    #[error("the JWKS holds no key corral can verify with ({})", .0.join("; "))]
    NoUsableKey(Vec<String>),
}

/// Why no key of the set verifies a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// No key has the token's `kid` (the set may be stale).
    UnknownKid,
    /// The key with the token's `kid` is for another algorithm.
    WrongAlgorithm,
    /// The token names no `kid` and several keys fit its algorithm.
    KidRequired,
    /// No key fits the token's algorithm.
    NoKey,
}

impl KeySet {
    /// Parses a JWKS document. Unusable keys are skipped; their reasons
    /// come back with the set (for a log line), and a set with no usable
    /// key at all is an error.
    pub fn parse(json: &[u8]) -> Result<(KeySet, Vec<String>), JwksError> {
        if json.len() > MAX_JWKS_BYTES {
            return Err(JwksError::TooLarge);
        }
        let document: Value = serde_json::from_slice(json).map_err(|_| JwksError::NotAKeySet)?;
        let entries = document
            .get("keys")
            .and_then(Value::as_array)
            .ok_or(JwksError::NotAKeySet)?;
        if entries.len() > MAX_JWKS_KEYS {
            return Err(JwksError::TooManyKeys(entries.len()));
        }
        let mut set = KeySet::default();
        let mut skipped = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let kid = entry.get("kid").and_then(Value::as_str);
            match usable(entry) {
                Ok(key) => set.keys.push(key),
                Err(reason) => skipped.push(match kid {
                    Some(kid) => format!("key {} (kid {kid:?}): {reason}", i + 1),
                    None => format!("key {}: {reason}", i + 1),
                }),
            }
        }
        if set.keys.is_empty() {
            return Err(JwksError::NoUsableKey(skipped));
        }
        Ok((set, skipped))
    }

    /// How many usable keys the set holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The key for a token signed with `alg` naming `kid`: with a `kid`,
    /// the key of that id, which must be for `alg`; without, the one key
    /// for `alg`.
    pub fn pick(&self, alg: Algorithm, kid: Option<&str>) -> Result<&DecodingKey, Miss> {
        let key = match kid {
            Some(kid) => {
                let mut named = self
                    .keys
                    .iter()
                    .filter(|k| k.kid.as_deref() == Some(kid))
                    .peekable();
                if named.peek().is_none() {
                    return Err(Miss::UnknownKid);
                }
                named.find(|k| k.alg == alg).ok_or(Miss::WrongAlgorithm)?
            }
            None => {
                let mut fitting = self.keys.iter().filter(|k| k.alg == alg);
                let one = fitting.next().ok_or(Miss::NoKey)?;
                if fitting.next().is_some() {
                    return Err(Miss::KidRequired);
                }
                one
            }
        };
        Ok(&key.decoding)
    }
}

/// One entry of the set as a usable key, or why it is skipped.
fn usable(entry: &Value) -> Result<Key, String> {
    let jwk: Jwk = serde_json::from_value(entry.clone())
        .map_err(|_| "not a key corral understands".to_string())?;
    match &jwk.common.public_key_use {
        None | Some(PublicKeyUse::Signature) => {}
        Some(_) => return Err("its `use` is not `sig`".into()),
    }
    let (alg, named) = match &jwk.algorithm {
        AlgorithmParameters::RSA(rsa) => {
            let bits = modulus_bits(&rsa.n).ok_or("its `n` is not base64url")?;
            if bits < MIN_RSA_BITS {
                return Err(format!(
                    "an RSA key of {bits} bits (at least {MIN_RSA_BITS})"
                ));
            }
            (Algorithm::RS256, KeyAlgorithm::RS256)
        }
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => {
            if decoded_len(&ec.x) != Some(32) || decoded_len(&ec.y) != Some(32) {
                return Err("a P-256 key whose `x` or `y` is not 32 bytes".into());
            }
            (Algorithm::ES256, KeyAlgorithm::ES256)
        }
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => {
            if decoded_len(&okp.x) != Some(32) {
                return Err("an Ed25519 key whose `x` is not 32 bytes".into());
            }
            (Algorithm::EdDSA, KeyAlgorithm::EdDSA)
        }
        AlgorithmParameters::OctetKey(_) => {
            return Err(
                "a symmetric (oct) key: HS256 is verified only with --jwt-secret-file".into(),
            )
        }
        _ => return Err("only RSA, EC P-256 and OKP Ed25519 keys are accepted".into()),
    };
    if jwk
        .common
        .key_algorithm
        .is_some_and(|declared| declared != named)
    {
        return Err(format!("its `alg` is not {alg:?}, the one its type allows"));
    }
    let decoding = DecodingKey::from_jwk(&jwk).map_err(|_| "unreadable key material")?;
    // Build the verifier once now, so that a key the crypto backend
    // refuses is reported here rather than on every token.
    let provider = CryptoProvider::try_get_default().ok_or("no JWT crypto backend is built in")?;
    (provider.verifier_factory)(&alg, &decoding).map_err(|_| "the crypto backend refuses it")?;
    Ok(Key {
        kid: jwk.common.key_id.clone(),
        alg,
        decoding,
    })
}

fn decoded_len(text: &str) -> Option<usize> {
    URL_SAFE_NO_PAD.decode(text).ok().map(|bytes| bytes.len())
}

/// The bit length of a base64url big-endian modulus.
fn modulus_bits(n: &str) -> Option<usize> {
    let bytes = URL_SAFE_NO_PAD.decode(n).ok()?;
    let significant = match bytes.iter().position(|&b| b != 0) {
        Some(first) => &bytes[first..],
        None => return Some(0),
    };
    Some(significant.len() * 8 - significant[0].leading_zeros() as usize)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_keys::{b64, jwks, KeyPairFor};
    use super::*;

    /// A well-formed RSA public JWK of `bits` bits (not a real key pair:
    /// loading checks sizes, not primes).
    fn rsa_jwk(bits: usize, kid: &str) -> Value {
        let mut n = vec![0xA5; bits / 8];
        n[0] = 0xC1;
        n[bits / 8 - 1] = 0x01;
        json!({"kty": "RSA", "kid": kid, "n": b64(&n), "e": "AQAB"})
    }

    #[test]
    fn usable_keys_load_and_the_others_are_skipped_with_a_reason() {
        let ec = KeyPairFor::p256();
        let ed = KeyPairFor::ed25519();
        let mut encryption = ec.jwk(Some("enc"));
        encryption["use"] = "enc".into();
        let mut mislabelled = ec.jwk(Some("ps"));
        mislabelled["alg"] = "PS256".into();
        let mut p384 = ec.jwk(Some("p384"));
        p384["crv"] = "P-384".into();
        let mut short = ed.jwk(Some("short"));
        short["x"] = b64(&[1; 31]).into();
        let document = jwks(&[
            ec.jwk(Some("ec")),
            ed.jwk(Some("ed")),
            rsa_jwk(2048, "rsa"),
            rsa_jwk(1024, "rsa-small"),
            json!({"kty": "oct", "kid": "hmac", "k": b64(b"a shared secret")}),
            encryption,
            mislabelled,
            p384,
            short,
            json!({"kty": "RSA-OAEP-9000"}),
        ]);
        let (set, skipped) = KeySet::parse(document.as_bytes()).unwrap();
        assert_eq!(set.len(), 3, "{skipped:?}");
        assert!(set.pick(Algorithm::RS256, Some("rsa")).is_ok());
        assert!(set.pick(Algorithm::ES256, Some("ec")).is_ok());
        assert!(set.pick(Algorithm::EdDSA, None).is_ok());
        let reasons = skipped.join("\n");
        for expected in [
            "key 4 (kid \"rsa-small\"): an RSA key of 1024 bits",
            "key 5 (kid \"hmac\"): a symmetric (oct) key",
            "key 6 (kid \"enc\"): its `use` is not `sig`",
            "key 7 (kid \"ps\")",
            "key 8 (kid \"p384\"): only RSA, EC P-256 and OKP Ed25519",
            "key 9 (kid \"short\"): an Ed25519 key whose `x` is not 32 bytes",
            "key 10:",
        ] {
            assert!(reasons.contains(expected), "{expected} in\n{reasons}");
        }
        assert!(!reasons.contains(&b64(b"a shared secret")), "{reasons}");
    }

    #[test]
    fn a_kid_picks_its_key_and_without_one_the_only_fitting_key() {
        let (a, b) = (KeyPairFor::p256(), KeyPairFor::p256());
        let ed = KeyPairFor::ed25519();
        let document = jwks(&[a.jwk(Some("a")), b.jwk(Some("b")), ed.jwk(Some("e"))]);
        let (set, _) = KeySet::parse(document.as_bytes()).unwrap();
        assert!(set.pick(Algorithm::ES256, Some("b")).is_ok());
        assert_eq!(
            set.pick(Algorithm::ES256, Some("z")).err(),
            Some(Miss::UnknownKid)
        );
        assert_eq!(
            set.pick(Algorithm::ES256, Some("e")).err(),
            Some(Miss::WrongAlgorithm)
        );
        assert_eq!(
            set.pick(Algorithm::ES256, None).err(),
            Some(Miss::KidRequired)
        );
        assert!(set.pick(Algorithm::EdDSA, None).is_ok());
        assert_eq!(set.pick(Algorithm::RS256, None).err(), Some(Miss::NoKey));
    }

    #[test]
    fn documents_that_are_no_key_set_are_refused() {
        let ec = KeyPairFor::p256();
        let too_many: Vec<Value> = (0..=MAX_JWKS_KEYS).map(|_| ec.jwk(None)).collect();
        for (document, expected) in [
            ("[]".to_string(), JwksError::NotAKeySet),
            ("{\"keys\": 1}".to_string(), JwksError::NotAKeySet),
            ("not json".to_string(), JwksError::NotAKeySet),
            (jwks(&[]), JwksError::NoUsableKey(Vec::new())),
            (jwks(&too_many), JwksError::TooManyKeys(MAX_JWKS_KEYS + 1)),
            (" ".repeat(MAX_JWKS_BYTES + 1), JwksError::TooLarge),
        ] {
            assert_eq!(
                KeySet::parse(document.as_bytes()).err(),
                Some(expected.clone()),
                "{expected}"
            );
        }
    }
}
