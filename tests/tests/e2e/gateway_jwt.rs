//! End-to-end: signed tokens (JWT). Tokens signed with HS256 and with an
//! ES256 key of a JWKS file open the projects their claims name, in the
//! hello and in `Authorization: Bearer` (WebSocket upgrade and admin
//! API); expired, not yet valid, foreign, unsigned and forged tokens are
//! refused like any wrong token; a socket closes when its token expires;
//! the audit log names a JWT's `sub` as the actor.

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use corral_e2e::gateway::{Gateway, GatewaySpawn, WsEvent, TOKEN};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const SECRET: &str = "0123456789abcdef0123456789abcdef-jwt-test-secret";
const ISSUER: &str = "https://ide.test";
const AUDIENCE: &str = "corral";
/// The close code of a socket whose credential was revoked or expired.
const REVOKED: u16 = 4001;

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims for `sub` on `projects`, valid for ten minutes, with `changes`
/// merged in (`null` removes a claim).
fn claims(sub: &str, projects: &[&str], changes: Value) -> Value {
    let mut claims = json!({
        "sub": sub, "iss": ISSUER, "aud": AUDIENCE,
        "exp": unix_now() + 600, "corral_projects": projects,
    });
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

fn hs256(secret: &[u8], claims: &Value) -> String {
    let key = EncodingKey::from_secret(secret).unwrap();
    encode(&Header::new(Algorithm::HS256), claims, &key).unwrap()
}

/// A P-256 key: its signing key and its point (`04 ‖ x ‖ y`).
struct EcKey {
    pkcs8: Vec<u8>,
    point: Vec<u8>,
}

impl EcKey {
    fn generate() -> EcKey {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        EcKey {
            point: pair.public_key().as_ref().to_vec(),
            pkcs8: pkcs8.as_ref().to_vec(),
        }
    }

    fn jwks(&self, kid: &str) -> String {
        json!({"keys": [{
            "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
            "x": b64(&self.point[1..33]), "y": b64(&self.point[33..65]),
        }]})
        .to_string()
    }

    fn sign(&self, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.into());
        encode(&header, claims, &EncodingKey::from_ec_der(&self.pkcs8)).unwrap()
    }
}

/// The secret and JWKS files, in a directory of their own (the sandbox
/// hides it whole), readable by the gateway's user only.
fn key_files(dir: &Path, ec: &EcKey) -> (PathBuf, PathBuf) {
    let keys = dir.join("keys");
    std::fs::create_dir(&keys).unwrap();
    let secret = keys.join("jwt-secret");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let jwks = keys.join("jwks.json");
    std::fs::write(&jwks, ec.jwks("ec-1")).unwrap();
    (secret, jwks)
}

/// A gateway accepting JWTs from both sources, the role capped at
/// `max_role`, with no clock leeway (so that expiry is prompt).
async fn jwt_gateway(dir: &TempDir, ec: &EcKey, max_role: &str) -> Gateway {
    let (secret, jwks) = key_files(dir.path(), ec);
    GatewaySpawn::default()
        .echo()
        .projects(&["a-web", "a-api", "b-web"])
        .arg("--jwt-secret-file")
        .arg(secret.display().to_string())
        .arg("--jwks-file")
        .arg(jwks.display().to_string())
        .arg("--jwt-issuer")
        .arg(ISSUER)
        .arg("--jwt-audience")
        .arg(AUDIENCE)
        .arg("--jwt-max-role")
        .arg(max_role)
        .arg("--jwt-leeway")
        .arg("0s")
        // The refusals below would otherwise spend the source's budget.
        .arg("--auth-failure-burst")
        .arg("1000")
        .spawn()
        .await
}

/// The status refusing a WebSocket upgrade with `Authorization: Bearer
/// token`, or `None` if the upgrade succeeded.
async fn bearer_upgrade_refusal(gateway: &Gateway, project: &str, token: &str) -> Option<u16> {
    let mut request = gateway.url(project).into_client_request().unwrap();
    let bearer = format!("Bearer {token}").parse().unwrap();
    request.headers_mut().insert("authorization", bearer);
    let upgrade = tokio_tungstenite::connect_async(request);
    match tokio::time::timeout(Duration::from_secs(10), upgrade).await {
        Ok(Ok(_)) => None,
        Ok(Err(tungstenite::Error::Http(response))) => Some(response.status().as_u16()),
        other => panic!("upgrade: {other:?}"),
    }
}

/// The hello's answer for `token` on `project`.
async fn hello(gateway: &Gateway, project: &str, token: &str) -> Value {
    gateway.client_with(project, token, None).await.1
}

#[tokio::test]
async fn jwts_open_the_projects_their_claims_name_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let ec = EcKey::generate();
    let gateway = jwt_gateway(&dir, &ec, "client").await;

    // HS256 in the hello: its projects, and no other, existing or not.
    let alice = hs256(SECRET.as_bytes(), &claims("alice", &["a-*"], json!({})));
    let (mut ws, reply) = gateway.client_with("a-web", &alice, None).await;
    assert_eq!(reply["success"], true, "{reply}");
    let pong = ws.request(json!({"id":"p","type":"ping"})).await;
    assert_eq!(pong["success"], true, "{pong}");
    let outside = hello(&gateway, "b-web", &alice).await;
    let missing = hello(&gateway, "b-nothing", &alice).await;
    assert_eq!(outside["success"], false, "{outside}");
    assert_eq!(
        outside.to_string().replace("b-web", "P"),
        missing.to_string().replace("b-nothing", "P"),
        "the same refusal whether the project exists"
    );

    // ES256 from the JWKS, in the upgrade's bearer header; an observer.
    let bob = ec.sign(
        "ec-1",
        &claims("bob", &["b-web"], json!({"corral_role": "observer"})),
    );
    let mut ws = gateway.connect_with_bearer("b-web", &bob, None).await;
    let pong = ws.request(json!({"id":"p","type":"ping"})).await;
    assert_eq!(pong["success"], true, "{pong}");
    let prompt = ws
        .request(json!({"id":"q","type":"prompt","message":"hi"}))
        .await;
    assert_eq!(
        prompt["success"], false,
        "an observer may not prompt: {prompt}"
    );

    // No corral_projects: a valid token that opens nothing.
    let nobody = hs256(
        SECRET.as_bytes(),
        &claims("carol", &[], json!({"corral_projects": null})),
    );
    assert_eq!(hello(&gateway, "a-web", &nobody).await["success"], false);
}

#[tokio::test]
async fn expired_foreign_unsigned_and_forged_jwts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ec = EcKey::generate();
    let gateway = jwt_gateway(&dir, &ec, "client").await;
    let now = unix_now();
    let signed = |changes: Value| hs256(SECRET.as_bytes(), &claims("eve", &["*"], changes));
    let unsigned = format!(
        "{}.{}.{}",
        b64(json!({"alg": "none", "typ": "JWT"}).to_string().as_bytes()),
        b64(claims("eve", &["*"], json!({})).to_string().as_bytes()),
        b64(b"x"),
    );
    let refused = [
        ("expired", signed(json!({"exp": now - 1}))),
        ("not yet valid", signed(json!({"nbf": now + 600}))),
        ("wrong issuer", signed(json!({"iss": "https://other.test"}))),
        ("wrong audience", signed(json!({"aud": "someone-else"}))),
        ("no expiry", signed(json!({"exp": null}))),
        (
            "a role above --jwt-max-role",
            signed(json!({"corral_role": "admin"})),
        ),
        ("alg none", unsigned),
        (
            "HS256 signed with the ES256 public key",
            hs256(&ec.point, &claims("eve", &["*"], json!({}))),
        ),
        (
            "another EC key",
            EcKey::generate().sign("ec-1", &claims("eve", &["*"], json!({}))),
        ),
    ];
    // Refused exactly like a token that is no JWT at all.
    let wrong = hello(&gateway, "a-web", "not-a-token-0123456789abcdef").await;
    assert_eq!(wrong["success"], false, "{wrong}");
    let wrong_upgrade = bearer_upgrade_refusal(&gateway, "a-web", "not-a-token-0123456789").await;
    assert!(wrong_upgrade.is_some());
    for (what, token) in &refused {
        assert_eq!(hello(&gateway, "a-web", token).await, wrong, "{what}");
        assert_eq!(
            bearer_upgrade_refusal(&gateway, "a-web", token).await,
            wrong_upgrade,
            "{what}: upgrade"
        );
        let (status, _) = gateway.http_get("/v1/projects", Some(token)).await;
        assert_eq!(status, 401, "{what}: admin API");
    }
    let log = gateway.log_text();
    for (what, token) in &refused {
        assert!(
            !log.contains(token.as_str()),
            "{what}: the log shows the token"
        );
    }
}

#[tokio::test]
async fn an_admin_jwt_sees_only_its_projects_through_the_admin_api() {
    let dir = tempfile::tempdir().unwrap();
    let ec = EcKey::generate();
    let gateway = jwt_gateway(&dir, &ec, "admin").await;
    for project in ["a-web", "b-web"] {
        gateway.client(project).await;
    }
    let admin = ec.sign(
        "ec-1",
        &claims("ops-a", &["a-*"], json!({"corral_role": "admin"})),
    );
    let (status, body) = gateway.http_get("/v1/projects", Some(&admin)).await;
    assert_eq!(status, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = list["projects"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["project"].as_str())
        .collect();
    assert_eq!(names, ["a-web"], "{body}");
    let (status, _) = gateway.http_get("/v1/projects/b-web", Some(&admin)).await;
    let (missing, _) = gateway.http_get("/v1/projects/b-none", Some(&admin)).await;
    assert_eq!(
        status, missing,
        "the same answer whether the project exists"
    );
    assert_ne!(status, 200);
    // A client JWT is no admin.
    let client = hs256(SECRET.as_bytes(), &claims("dev", &["*"], json!({})));
    let (status, _) = gateway.http_get("/v1/projects", Some(&client)).await;
    assert_eq!(status, 403);
    // The static tokens keep working beside JWTs.
    assert_eq!(hello(&gateway, "b-web", TOKEN).await["success"], true);
}

#[tokio::test]
async fn a_socket_is_closed_when_its_jwt_expires() {
    let dir = tempfile::tempdir().unwrap();
    let ec = EcKey::generate();
    let gateway = jwt_gateway(&dir, &ec, "client").await;
    let short = hs256(
        SECRET.as_bytes(),
        &claims("alice", &["a-*"], json!({"exp": unix_now() + 3})),
    );
    let (mut by_hello, reply) = gateway.client_with("a-web", &short, None).await;
    assert_eq!(reply["success"], true, "{reply}");
    let mut by_header = gateway.connect_with_bearer("a-api", &short, None).await;
    let pong = by_header.request(json!({"id":"p","type":"ping"})).await;
    assert_eq!(pong["success"], true, "{pong}");
    // A longer-lived token on the same project stays open.
    let long = hs256(SECRET.as_bytes(), &claims("alice", &["a-*"], json!({})));
    let (mut lasting, _) = gateway.client_with("a-web", &long, None).await;

    for ws in [&mut by_hello, &mut by_header] {
        let close = loop {
            match ws.next_event_within(Duration::from_secs(60)).await {
                Some(WsEvent::Closed(close)) => break close,
                Some(WsEvent::Frame(_)) => continue,
                None => panic!("the socket outlived its token by a minute"),
            }
        };
        let (code, reason) = close.expect("a close frame");
        assert_eq!(code, REVOKED, "{reason}");
    }
    let pong = lasting.request(json!({"id":"q","type":"ping"})).await;
    assert_eq!(pong["success"], true, "{pong}");
    // And the expired token opens nothing new.
    assert_eq!(hello(&gateway, "a-web", &short).await["success"], false);
}

#[tokio::test]
async fn the_audit_log_names_a_jwts_subject_and_never_holds_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let ec = EcKey::generate();
    let (secret, _) = key_files(dir.path(), &ec);
    let audit = dir.path().join("audit");
    std::fs::create_dir(&audit).unwrap();
    let log = audit.join("audit.jsonl");
    let gateway = GatewaySpawn::default()
        .echo()
        .projects(&["a-web"])
        .arg("--jwt-secret-file")
        .arg(secret.display().to_string())
        .arg("--jwt-issuer")
        .arg(ISSUER)
        .arg("--jwt-audience")
        .arg(AUDIENCE)
        .arg("--audit-log")
        .arg(log.display().to_string())
        .spawn()
        .await;
    let token = hs256(SECRET.as_bytes(), &claims("user-42", &["a-*"], json!({})));
    let (ws, reply) = gateway.client_with("a-web", &token, None).await;
    assert_eq!(reply["success"], true, "{reply}");
    drop(ws);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let opened = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let found = text
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .find(|line| line["action"] == "session_opened");
        if let Some(line) = found {
            assert!(!text.contains(&token), "the audit log holds the JWT");
            break line;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no session_opened line: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(opened["actor"], "user-42", "{opened}");
    assert_eq!(opened["actor_kind"], "jwt", "{opened}");
    assert_eq!(opened["source"], "127.0.0.1", "{opened}");
    assert_eq!(opened["project"], "a-web", "{opened}");
}
