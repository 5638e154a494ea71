//! The remote ACP endpoint under attack: what a client with a valid
//! credential may do with an `Acp-Connection-Id` that is not its own
//! credential's to use.

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use corral_e2e::gateway::{Gateway, GatewaySpawn};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

const SECRET: &str = "0123456789abcdef0123456789abcdef-jwt-test-secret";
const ISSUER: &str = "https://ide.test";
const AUDIENCE: &str = "corral";

/// An HS256 token for `sub` on `projects` with `role`, valid ten minutes.
fn jwt(sub: &str, projects: &[&str], role: &str) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let claims = json!({"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "exp": exp,
        "corral_projects": projects, "corral_role": role});
    let key = EncodingKey::from_secret(SECRET.as_bytes()).unwrap();
    encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap()
}

async fn jwt_acp_gateway(dir: &Path) -> Gateway {
    // In a directory of its own (the sandbox hides it whole), readable by
    // the gateway's user only.
    let keys = dir.join("keys");
    std::fs::create_dir(&keys).unwrap();
    let secret = keys.join("jwt-secret");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    GatewaySpawn::default()
        .echo()
        .projects(&["a-web", "b-web"])
        .arg("--dialect")
        .arg("acp")
        .arg("--jwt-secret-file")
        .arg(secret.display().to_string())
        .arg("--jwt-issuer")
        .arg(ISSUER)
        .arg("--jwt-audience")
        .arg(AUDIENCE)
        .spawn()
        .await
}

fn url(gw: &Gateway, project: &str) -> String {
    format!("http://{}/v1/projects/{project}/acp", gw.addr)
}

fn post(http: &reqwest::Client, url: &str, token: &str, body: &Value) -> reqwest::RequestBuilder {
    http.post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_string())
}

async fn status(request: reqwest::RequestBuilder) -> (u16, String) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// A connection opened with one credential is that credential's: another
/// JWT of the same `sub` that may only observe, or that does not cover
/// the project, cannot drive the session through it (the session runs
/// with the role it was opened with), read its stream or end it.
#[tokio::test]
async fn a_connection_serves_only_a_credential_that_may_open_it_with_its_role() {
    let dir = tempfile::tempdir().unwrap();
    let gw = jwt_acp_gateway(dir.path()).await;
    let http = reqwest::Client::new();
    let a_web = url(&gw, "a-web");
    let driver = jwt("carol", &["a-web"], "client");
    let observer = jwt("carol", &["a-web"], "observer");
    let elsewhere = jwt("carol", &["b-web"], "client");

    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}});
    let response = post(&http, &a_web, &driver, &initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let id = response.headers()["acp-connection-id"]
        .to_str()
        .unwrap()
        .to_string();

    let prompt = json!({"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
        "params": {"sessionId": "s", "prompt": [{"type": "text", "text": "hi"}]}});
    for (who, token) in [("observer", &observer), ("out of scope", &elsewhere)] {
        let (code, body) =
            status(post(&http, &a_web, token, &prompt).header("acp-connection-id", &id)).await;
        assert_eq!(code, 404, "{who} drove the session: {body}");
        let stream = http
            .get(&a_web)
            .bearer_auth(token)
            .header("accept", "text/event-stream")
            .header("acp-connection-id", &id);
        let (code, body) = status(stream).await;
        assert_eq!(code, 404, "{who} read the stream: {body}");
        let delete = http
            .delete(&a_web)
            .bearer_auth(token)
            .header("acp-connection-id", &id);
        let (code, body) = status(delete).await;
        assert_eq!(code, 404, "{who} ended the connection: {body}");
    }
    // The credential that opened it still uses it.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "session/list", "params": {}});
    let (code, body) =
        status(post(&http, &a_web, &driver, &list).header("acp-connection-id", &id)).await;
    assert_eq!(code, 202, "{body}");
}

/// Reads until the gateway closes the connection; `false` if it did not
/// within the harness's read timeout.
async fn closed_by_gateway(stream: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    let read_all = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(corral_e2e::harness::READ_TIMEOUT, read_all)
        .await
        .is_ok()
}

/// `--header-timeout` holds on both protocols the port speaks: a stranger
/// that opens HTTP/2 by prior knowledge (the preface and its settings)
/// and never sends a request is closed like one that never finishes an
/// HTTP/1.1 request head, instead of keeping its socket (and its place
/// under `--max-connections`) for as long as it answers pings.
#[tokio::test]
async fn a_connection_without_a_request_is_closed_at_the_header_timeout_on_http2_too() {
    use tokio::io::AsyncWriteExt;
    let gw = GatewaySpawn::default()
        .echo()
        .arg("--dialect")
        .arg("acp")
        .arg("--header-timeout")
        .arg("1s")
        .spawn()
        .await;
    let mut http1 = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    http1
        .write_all(b"POST /v1/projects/alpha/acp HTTP/1.1\r\n")
        .await
        .unwrap();
    assert!(closed_by_gateway(&mut http1).await, "HTTP/1.1");

    let mut http2 = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    http2
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    // An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
    http2.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap();
    assert!(closed_by_gateway(&mut http2).await, "HTTP/2");
}
