//! Keys and tokens for the JWT tests: P-256 and Ed25519 key pairs made
//! with `ring`, their public JWKs, tokens signed with them (or with an
//! HMAC secret) by `jsonwebtoken::encode`, and hand-built tokens.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};

pub const SECRET: &[u8] = b"a secret of at least thirty-two bytes, for HS256";

pub fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A token signed with `secret` (HS256).
pub fn hs256(secret: &[u8], claims: &Value) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret).unwrap(),
    )
    .unwrap()
}

/// A token from a header, claims and signature as given, unchecked.
pub fn hand_built(header: &Value, claims: &Value, signature: &[u8]) -> String {
    format!(
        "{}.{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes()),
        b64(signature)
    )
}

/// A JWKS document holding `keys`.
pub fn jwks(keys: &[Value]) -> String {
    json!({ "keys": keys }).to_string()
}

/// A key pair of one of the JWKS algorithms.
pub struct KeyPairFor {
    pub alg: Algorithm,
    pkcs8: Vec<u8>,
    /// SEC1 uncompressed point (P-256) or the raw key (Ed25519).
    pub public: Vec<u8>,
}

impl KeyPairFor {
    pub fn p256() -> KeyPairFor {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        KeyPairFor {
            alg: Algorithm::ES256,
            public: pair.public_key().as_ref().to_vec(),
            pkcs8: pkcs8.as_ref().to_vec(),
        }
    }

    pub fn ed25519() -> KeyPairFor {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        KeyPairFor {
            alg: Algorithm::EdDSA,
            public: pair.public_key().as_ref().to_vec(),
            pkcs8: pkcs8.as_ref().to_vec(),
        }
    }

    /// The public JWK, with `kid` if given.
    pub fn jwk(&self, kid: Option<&str>) -> Value {
        let mut jwk = match self.alg {
            Algorithm::ES256 => json!({
                "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256",
                "x": b64(&self.public[1..33]), "y": b64(&self.public[33..65]),
            }),
            _ => json!({
                "kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": "EdDSA",
                "x": b64(&self.public),
            }),
        };
        if let Some(kid) = kid {
            jwk["kid"] = kid.into();
        }
        jwk
    }

    /// A token signed with this key, its header naming `kid` if given.
    pub fn sign(&self, kid: Option<&str>, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = kid.map(str::to_string);
        let key = match self.alg {
            Algorithm::ES256 => EncodingKey::from_ec_der(&self.pkcs8),
            _ => EncodingKey::from_ed_der(&self.pkcs8),
        };
        encode(&header, claims, &key).unwrap()
    }
}
