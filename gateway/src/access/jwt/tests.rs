//! `Verifier::verify` with real keys: what is accepted and the identity it
//! proves, and every refusal (times, issuer, audience, `alg: none`,
//! algorithm confusion, roles, missing claims, unknown keys, garbage).

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use super::test_keys::{hand_built, hs256, jwks, KeyPairFor, SECRET};
use super::*;
use crate::access::ProjectScope;

const NOW: u64 = 2_000_000_000;

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(NOW)
}

fn claims() -> Value {
    json!({"sub": "alice", "exp": NOW + 600, "corral_projects": ["team-a-*"]})
}

/// Claims with `changes` merged in (a `null` removes the claim).
fn with(changes: Value) -> Value {
    let mut claims = claims();
    for (key, value) in changes.as_object().unwrap() {
        match value {
            Value::Null => claims.as_object_mut().unwrap().remove(key),
            _ => claims
                .as_object_mut()
                .unwrap()
                .insert(key.clone(), value.clone()),
        };
    }
    claims
}

fn secret_only() -> Verifier {
    Verifier::from_settings(&JwtSettings {
        secret: Some(HmacSecret::new(SECRET.to_vec()).unwrap()),
        ..JwtSettings::default()
    })
    .unwrap()
}

/// A verifier with a JWKS file holding `keys` (and the secret if asked).
fn with_jwks(dir: &Path, keys: &[Value], secret: bool) -> Verifier {
    let path = dir.join("jwks.json");
    std::fs::write(&path, jwks(keys)).unwrap();
    Verifier::from_settings(&JwtSettings {
        secret: secret.then(|| HmacSecret::new(SECRET.to_vec()).unwrap()),
        jwks: Some(JwksSource::File(path)),
        ..JwtSettings::default()
    })
    .unwrap()
}

/// Refused with `expected`, and the message quotes no part of the token.
fn assert_refused(verifier: &Verifier, token: &str, expected: JwtError) {
    let err = verifier.verify(token, now()).unwrap_err();
    assert_eq!(err, expected, "{token}");
    let message = err.to_string();
    for part in token.split('.').filter(|p| p.len() >= 8) {
        assert!(!message.contains(part), "{message}");
    }
}

#[test]
fn an_hs256_token_proves_its_claims() {
    let token = hs256(SECRET, &with(json!({"corral_role": "observer"})));
    let who = secret_only().verify(&token, now()).unwrap();
    assert_eq!(who.name, "alice");
    assert_eq!(who.role, Role::Observer);
    assert!(who.sees("team-a-web") && !who.sees("team-b-web"));
    let exp = SystemTime::UNIX_EPOCH + Duration::from_secs(NOW + 600);
    assert_eq!(who.expires, Some(exp + DEFAULT_LEEWAY));
}

#[test]
fn es256_and_eddsa_tokens_are_checked_with_the_jwks_file() {
    let dir = tempfile::tempdir().unwrap();
    let ec = KeyPairFor::p256();
    let ed = KeyPairFor::ed25519();
    let verifier = with_jwks(dir.path(), &[ec.jwk(Some("ec-1")), ed.jwk(None)], false);
    let who = verifier
        .verify(&ec.sign(Some("ec-1"), &claims()), now())
        .unwrap();
    assert_eq!((who.name.as_str(), who.role), ("alice", Role::Client));
    // Without a kid: the one key of the token's algorithm.
    assert!(verifier.verify(&ec.sign(None, &claims()), now()).is_ok());
    let all = ed.sign(None, &with(json!({"corral_projects": ["*"]})));
    assert_eq!(
        verifier.verify(&all, now()).unwrap().scope,
        ProjectScope::All
    );
    // A key of the right type that is not in the set.
    let stranger = KeyPairFor::p256();
    assert_refused(
        &verifier,
        &stranger.sign(Some("ec-1"), &claims()),
        JwtError::Signature,
    );
}

#[test]
fn times_issuer_and_audience_are_checked() {
    let verifier = Verifier::from_settings(&JwtSettings {
        secret: Some(HmacSecret::new(SECRET.to_vec()).unwrap()),
        issuer: Some("https://ide.example".into()),
        audience: Some("corral".into()),
        leeway: Duration::from_secs(5),
        ..JwtSettings::default()
    })
    .unwrap();
    let good = json!({"iss": "https://ide.example", "aud": ["other", "corral"]});
    assert!(verifier.verify(&hs256(SECRET, &with(good)), now()).is_ok());
    let cases = [
        (
            json!({"iss": "https://ide.example", "aud": "corral", "exp": NOW - 5}),
            JwtError::Claims(ClaimError::Expired),
        ),
        (
            json!({"iss": "https://ide.example", "aud": "corral", "nbf": NOW + 6}),
            JwtError::Claims(ClaimError::NotYetValid),
        ),
        (
            json!({"iss": "https://evil.example", "aud": "corral"}),
            JwtError::Issuer,
        ),
        (json!({"aud": "corral"}), JwtError::Issuer),
        (
            json!({"iss": "https://ide.example", "aud": "other"}),
            JwtError::Audience,
        ),
        (json!({"iss": "https://ide.example"}), JwtError::Audience),
    ];
    for (changes, expected) in cases {
        assert_refused(&verifier, &hs256(SECRET, &with(changes)), expected);
    }
    // Without --jwt-audience, a token meant for an audience is refused.
    assert_refused(
        &secret_only(),
        &hs256(SECRET, &with(json!({"aud": "someone-else"}))),
        JwtError::Audience,
    );
}

#[test]
fn unsigned_tokens_are_refused() {
    let verifier = secret_only();
    for alg in ["none", "None", "NONE"] {
        let token = hand_built(&json!({"alg": alg, "typ": "JWT"}), &claims(), b"anything");
        assert_refused(
            &verifier,
            &token,
            JwtError::Algorithm(RefusedAlgorithm::None),
        );
    }
    // The usual form, with an empty signature, is not even a JWT's shape.
    let bare = hand_built(&json!({"alg": "none"}), &claims(), b"");
    assert_refused(&verifier, &bare, JwtError::NotAJwt);
}

#[test]
fn a_public_key_used_as_an_hmac_secret_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ec = KeyPairFor::p256();
    // The attacker signs HS256 with what is public: the key's point, and
    // the JWK as published.
    let forged = [
        hs256(&ec.public, &claims()),
        hs256(jwks(&[ec.jwk(Some("k"))]).as_bytes(), &claims()),
    ];
    let jwks_only = with_jwks(dir.path(), &[ec.jwk(Some("k"))], false);
    let both = with_jwks(dir.path(), &[ec.jwk(Some("k"))], true);
    for token in &forged {
        assert_refused(
            &jwks_only,
            token,
            JwtError::Algorithm(RefusedAlgorithm::NeedsSecret),
        );
        assert_refused(&both, token, JwtError::Signature);
    }
    // An HMAC signature under an ES256 header: the EC key rejects it.
    let header = json!({"alg": "ES256", "kid": "k"});
    let mac = hs256(&ec.public, &claims());
    let signature = mac.rsplit('.').next().unwrap();
    let relabelled = format!(
        "{}.{}.{signature}",
        super::test_keys::b64(header.to_string().as_bytes()),
        mac.split('.').nth(1).unwrap()
    );
    assert_refused(&both, &relabelled, JwtError::Signature);
    // A kid naming the EC key under another JWKS algorithm.
    let ed = KeyPairFor::ed25519();
    assert_refused(
        &both,
        &ed.sign(Some("k"), &claims()),
        JwtError::KeyAlgorithmMismatch,
    );
    // The secret does not open JWKS algorithms, nor the JWKS HS256.
    let no_jwks = secret_only();
    assert_refused(
        &no_jwks,
        &ec.sign(Some("k"), &claims()),
        JwtError::Algorithm(RefusedAlgorithm::NeedsJwks(Algorithm::ES256)),
    );
}

#[test]
fn claims_beyond_the_policy_are_refused() {
    let verifier = secret_only();
    let cases = [
        (
            json!({"corral_role": "admin"}),
            JwtError::Claims(ClaimError::RoleAboveMax {
                role: Role::Admin,
                max: Role::Client,
            }),
        ),
        (
            json!({"exp": null}),
            JwtError::Claims(ClaimError::Missing("exp")),
        ),
        (
            json!({"sub": null}),
            JwtError::Claims(ClaimError::Missing("sub")),
        ),
    ];
    for (changes, expected) in cases {
        assert_refused(&verifier, &hs256(SECRET, &with(changes)), expected);
    }
    let admins = Verifier::from_settings(&JwtSettings {
        secret: Some(HmacSecret::new(SECRET.to_vec()).unwrap()),
        max_role: Role::Admin,
        ..JwtSettings::default()
    })
    .unwrap();
    let token = hs256(SECRET, &with(json!({"corral_role": "admin"})));
    assert_eq!(admins.verify(&token, now()).unwrap().role, Role::Admin);
}

#[test]
fn unknown_keys_garbage_and_overlong_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ec = KeyPairFor::p256();
    let other = KeyPairFor::p256();
    let verifier = with_jwks(dir.path(), &[ec.jwk(Some("a")), other.jwk(Some("b"))], true);
    assert_refused(
        &verifier,
        &ec.sign(Some("c"), &claims()),
        JwtError::UnknownKid,
    );
    assert_refused(&verifier, &ec.sign(None, &claims()), JwtError::KidRequired);
    let ed = KeyPairFor::ed25519();
    assert_refused(&verifier, &ed.sign(None, &claims()), JwtError::NoKey);

    let good = hs256(SECRET, &claims());
    let (head, rest) = good.split_once('.').unwrap();
    let (_, signature) = rest.split_once('.').unwrap();
    let tampered = format!(
        "{head}.{}.{signature}",
        super::test_keys::b64(with(json!({"sub": "mallory"})).to_string().as_bytes())
    );
    assert_refused(&verifier, &tampered, JwtError::Signature);
    for garbage in [
        "",
        "a-static-token-0123456789",
        "a.b",
        "a.b.c.d",
        "a..c",
        "a b.c.d",
        "eyJ=.e30.c2ln",
    ] {
        assert_refused(&verifier, garbage, JwtError::NotAJwt);
    }
    assert_refused(&verifier, "bm90IGpzb24.e30.c2ln", JwtError::BadHeader);
    let long = hs256(SECRET, &with(json!({"pad": "x".repeat(MAX_JWT_BYTES)})));
    assert_refused(&verifier, &long, JwtError::NotAJwt);
    let crit = hand_built(&json!({"alg": "HS256", "crit": ["exp"]}), &claims(), b"sig");
    assert_refused(&verifier, &crit, JwtError::Critical);
    let hs512 = hand_built(&json!({"alg": "HS512"}), &claims(), b"sig");
    assert_refused(
        &verifier,
        &hs512,
        JwtError::Algorithm(RefusedAlgorithm::Unsupported),
    );
}

#[test]
fn without_a_secret_or_jwks_no_token_is_accepted() {
    let verifier = Verifier::from_settings(&JwtSettings::default()).unwrap();
    assert!(!verifier.is_enabled());
    assert_eq!(verifier.summary(), "off");
    assert_refused(&verifier, &hs256(SECRET, &claims()), JwtError::NotEnabled);
}

#[test]
fn the_shape_check_tells_jwts_from_other_bearer_strings() {
    assert!(looks_like_jwt(&hs256(SECRET, &claims())));
    assert!(!looks_like_jwt("0123456789abcdef0123456789abcdef"));
    assert!(!looks_like_jwt(&format!(
        "a.b.{}",
        "c".repeat(MAX_JWT_BYTES)
    )));
}

#[test]
fn a_bad_jwks_file_stops_the_start_and_secrets_are_not_shown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#).unwrap();
    let settings = JwtSettings {
        jwks: Some(JwksSource::File(path.clone())),
        ..JwtSettings::default()
    };
    let err = Verifier::from_settings(&settings).unwrap_err().to_string();
    assert!(err.contains("no key corral can verify with"), "{err}");
    assert!(err.contains("--jwt-secret-file"), "{err}");
    assert!(!err.contains("c2VjcmV0"), "{err}");
    std::fs::remove_file(&path).unwrap();
    let err = Verifier::from_settings(&settings).unwrap_err().to_string();
    assert!(
        err.contains("cannot read") && err.contains("jwks.json"),
        "{err}"
    );

    let shown = format!("{:?}", secret_only());
    assert!(!shown.contains("thirty-two"), "{shown}");
    let settings = format!("{:?}", HmacSecret::new(SECRET.to_vec()).unwrap());
    assert_eq!(settings, "HmacSecret(***)");
    assert_eq!(HmacSecret::new(vec![7; 31]), Err(ShortSecret(31)));
}
