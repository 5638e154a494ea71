//! ACP's remote transport at `/v1/projects/NAME/acp`, driven by the Rust
//! SDK's own client (`agent-client-protocol-http`) over WebSocket, over
//! Streamable HTTP on HTTP/1.1 and over HTTP/2 with prior knowledge:
//! initialize, session/list, session/new and session/load of the project's
//! session, a prompt whose tool call asks for permission, the updates. A
//! wrong token is 401; a project outside the credential's scope gets the
//! very answer a missing project gets; the status codes the transport RFD
//! lists; and two gateways behind the documented nginx serve two projects'
//! endpoints.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use agent_client_protocol::{Channel, Client, ConnectTo, ConnectionDriver, TransportFrame};
use agent_client_protocol_http::HttpClient;
use futures_util::StreamExt;
use serde_json::{json, Value};

use corral_e2e::gateway::{Gateway, GatewaySpawn, ADMIN_TOKEN, TOKEN};
use corral_e2e::harness::READ_TIMEOUT;
use corral_e2e::mock_llm::{MockLlm, Turn};

/// How a client reaches the endpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Transport {
    WebSocket,
    Http1,
    /// HTTP/2 without TLS, by prior knowledge (h2c).
    Http2,
}

/// The SDK's client transport, driven with raw JSON-RPC messages.
struct Peer {
    channel: Channel,
    driver: tokio::task::JoinHandle<agent_client_protocol::Result<()>>,
}

fn endpoint(addr: impl std::fmt::Display, project: &str, transport: Transport) -> String {
    let scheme = match transport {
        Transport::WebSocket => "ws",
        Transport::Http1 | Transport::Http2 => "http",
    };
    format!("{scheme}://{addr}/v1/projects/{project}/acp")
}

impl Peer {
    fn connect(url: &str, token: &str, transport: Transport) -> Peer {
        let mut headers = reqwest13::header::HeaderMap::new();
        headers.insert(
            reqwest13::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        let client = HttpClient::builder_with_endpoint(url)
            .configure_http(move |http| {
                let http = http.no_proxy().default_headers(headers);
                match transport {
                    Transport::Http2 => http.http2_prior_knowledge(),
                    _ => http,
                }
            })
            .build()
            .unwrap();
        let (channel, driver): (Channel, Option<ConnectionDriver>) =
            ConnectTo::<Client>::into_channel_and_future(client);
        Peer {
            channel,
            driver: tokio::spawn(driver.unwrap()),
        }
    }

    fn send(&self, message: Value) {
        self.channel
            .tx
            .unbounded_send(TransportFrame::parse_json(&message.to_string()))
            .unwrap();
    }

    fn request(&self, id: Value, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    }

    /// The next message; `None` once the transport ended.
    async fn next(&mut self) -> Option<Value> {
        let frame = tokio::time::timeout(READ_TIMEOUT, self.channel.rx.next())
            .await
            .expect("no message in time")?;
        Some(serde_json::from_str(&frame.to_json().unwrap()).unwrap())
    }

    /// Messages up to and including the first that `stop` accepts.
    async fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let Some(message) = self.next().await else {
                let ended = tokio::time::timeout(READ_TIMEOUT, &mut self.driver).await;
                panic!("the transport ended ({ended:?}); seen: {seen:?}");
            };
            let done = stop(&message);
            seen.push(message);
            if done {
                return seen;
            }
        }
    }

    /// A request's answer (result or error) and what came before it.
    async fn call(&mut self, id: Value, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.request(id.clone(), method, params);
        let mut seen = self
            .until(|m| m.get("method").is_none() && m["id"] == id)
            .await;
        let answer = seen.pop().unwrap();
        (answer, seen)
    }

    /// Ends the client; how its transport ended.
    async fn close(self) -> agent_client_protocol::Result<()> {
        drop(self.channel);
        tokio::time::timeout(READ_TIMEOUT, self.driver)
            .await
            .expect("the transport did not finish")
            .unwrap()
    }
}

fn is_permission(message: &Value) -> bool {
    message["method"] == "session/request_permission"
}

fn update_kind(message: &Value) -> Option<&str> {
    (message["method"] == "session/update")
        .then(|| message["params"]["update"]["sessionUpdate"].as_str())
        .flatten()
}

fn text_of(messages: &[Value]) -> String {
    messages
        .iter()
        .filter(|m| update_kind(m) == Some("agent_message_chunk"))
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect()
}

async fn acp_gateway(mock: &MockLlm) -> Gateway {
    GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .child_arg("--permission-mode")
        .child_arg("ask")
        .arg("--dialect")
        .arg("acp")
        .spawn()
        .await
}

/// One client's whole flow on project `alpha`: initialize, list, new,
/// load, then a prompt whose tool call is allowed.
async fn drive(gw: &Gateway, transport: Transport, round: u32) {
    let url = endpoint(gw.addr, "alpha", transport);
    let mut peer = Peer::connect(&url, TOKEN, transport);
    let init = json!({"protocolVersion": 1, "clientCapabilities": {}});
    let (answer, _) = peer.call(json!(0), "initialize", init).await;
    let result = &answer["result"];
    assert_eq!(result["protocolVersion"], 1, "{transport:?}: {answer}");
    assert_eq!(result["_meta"]["corral"]["project"], "alpha", "{answer}");

    // Whatever the gateway answers to session/list, it answers this client.
    let (listed, _) = peer.call(json!(1), "session/list", json!({})).await;
    assert!(
        listed.get("result").is_some() || listed.get("error").is_some(),
        "{listed}"
    );

    let (new, _) = peer
        .call(
            json!(2),
            "session/new",
            json!({"cwd": "/", "mcpServers": []}),
        )
        .await;
    let sid = new["result"]["sessionId"].clone();
    assert!(sid.as_str().is_some_and(|s| !s.is_empty()), "{new}");
    let load = json!({"sessionId": sid, "cwd": "/", "mcpServers": []});
    let (loaded, _) = peer.call(json!(3), "session/load", load).await;
    assert!(loaded.get("result").is_some(), "{transport:?}: {loaded}");

    let prompt = json!({"sessionId": sid,
        "prompt": [{"type": "text", "text": format!("run it, round {round}")}]});
    peer.request(json!(4), "session/prompt", prompt);
    let asked = peer.until(is_permission).await;
    let ask = asked.last().unwrap();
    assert_eq!(ask["params"]["sessionId"], sid, "{ask}");
    assert_eq!(ask["params"]["toolCall"]["kind"], "execute", "{ask}");
    let outcome = json!({"outcome": "selected", "optionId": "allow_once"});
    peer.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": outcome}}));
    let rest = peer
        .until(|m| m["id"] == 4 && m.get("method").is_none())
        .await;
    let done = rest.last().unwrap();
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let all: Vec<Value> = asked.into_iter().chain(rest).collect();
    assert!(
        all.iter()
            .any(|m| update_kind(m) == Some("tool_call_update")
                && m["params"]["update"]["status"] == "completed"),
        "{transport:?}: the allowed command ran: {all:?}"
    );
    assert!(
        text_of(&all).contains(&format!("done {round}")),
        "{transport:?}: {all:?}"
    );
    // Every update carries the project's sequence number, in order.
    let seqs: Vec<u64> = all
        .iter()
        .filter_map(|m| m["params"]["_meta"]["corral"]["seq"].as_u64())
        .collect();
    assert!(
        !seqs.is_empty() && seqs.windows(2).all(|w| w[0] < w[1]),
        "{seqs:?}"
    );
    peer.close().await.unwrap();
}

#[tokio::test]
async fn the_sdk_client_drives_a_project_over_websocket_http1_and_http2() {
    let mock = MockLlm::start().await;
    let gw = acp_gateway(&mock).await;
    for (round, transport) in [Transport::WebSocket, Transport::Http1, Transport::Http2]
        .into_iter()
        .enumerate()
    {
        mock.push(Turn::tool_call(
            "bash",
            json!({"command": format!("echo round-{round}")}),
        ));
        mock.push(Turn::text(format!("done {round}")));
        drive(&gw, transport, round as u32).await;
    }
    // Every Streamable HTTP connection was ended by its client's DELETE.
    let metrics = gw.http_get("/metrics", Some(ADMIN_TOKEN)).await.1;
    assert!(
        metrics.contains("corral_acp_http_connections 0"),
        "{metrics}"
    );
}

/// What a raw `request` to the endpoint is answered.
async fn status_of(request: reqwest::RequestBuilder) -> (u16, String, reqwest::header::HeaderMap) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, response.text().await.unwrap(), headers)
}

fn initialize_body() -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}})
    .to_string()
}

#[tokio::test]
async fn the_transport_answers_as_the_rfd_lists() {
    let mock = MockLlm::start().await;
    let gw = acp_gateway(&mock).await;
    let url = endpoint(gw.addr, "alpha", Transport::Http1);
    let http = reqwest::Client::new();
    let post = |body: String| {
        http.post(&url)
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body)
    };

    // initialize opens a connection: 200, its answer, and the id.
    let (status, body, headers) = status_of(post(initialize_body())).await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["id"], 0);
    assert_eq!(answer["result"]["protocolVersion"], 1);
    let id = headers["acp-connection-id"].to_str().unwrap().to_string();
    assert_eq!(id.len(), 32, "128 random bits: {id}");

    let with_id = |request: reqwest::RequestBuilder| request.header("acp-connection-id", &id);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}});
    let (status, _, _) = status_of(with_id(post(list.to_string()))).await;
    assert_eq!(status, 202, "requests are answered on the stream");

    // The stream carries the answer.
    let stream = http
        .get(&url)
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .header("acp-connection-id", &id)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert!(stream.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut body = stream.bytes_stream();
    let mut text = String::new();
    while !text.contains("\"id\":1") {
        let chunk = tokio::time::timeout(READ_TIMEOUT, body.next())
            .await
            .expect("the answer on the stream")
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.starts_with("data: "), "{text}");
    // A second stream of the same connection is refused.
    let second = http
        .get(&url)
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .header("acp-connection-id", &id);
    assert_eq!(status_of(second).await.0, 409);

    let cases: Vec<(&str, reqwest::RequestBuilder, u16)> = vec![
        (
            "not JSON",
            with_id(
                http.post(&url)
                    .bearer_auth(TOKEN)
                    .header("content-type", "text/plain"),
            )
            .body("{}"),
            415,
        ),
        ("a batch", with_id(post(format!("[{}]", list))), 501),
        ("no connection id", post(list.to_string()), 400),
        (
            "an unknown connection id",
            post(list.to_string()).header("acp-connection-id", "0".repeat(32)),
            404,
        ),
        (
            "a prompt naming no session",
            with_id(post(
                json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                    "params": {"prompt": []}})
                .to_string(),
            )),
            400,
        ),
        (
            "a stream that does not accept SSE",
            with_id(http.get(&url).bearer_auth(TOKEN)),
            406,
        ),
        (
            "a stream without a connection id",
            http.get(&url)
                .bearer_auth(TOKEN)
                .header("accept", "text/event-stream"),
            400,
        ),
        (
            "no token",
            with_id(http.post(&url).header("content-type", "application/json"))
                .body(list.to_string()),
            401,
        ),
        (
            "a wrong token",
            with_id(
                http.post(&url)
                    .bearer_auth("not-the-token-at-all-0123456789")
                    .header("content-type", "application/json"),
            )
            .body(list.to_string()),
            401,
        ),
        (
            "the connection from another project's endpoint",
            http.post(endpoint(gw.addr, "beta", Transport::Http1))
                .bearer_auth(TOKEN)
                .header("content-type", "application/json")
                .header("acp-connection-id", &id)
                .body(list.to_string()),
            404,
        ),
    ];
    for (what, request, expected) in cases {
        let (status, body, _) = status_of(request).await;
        assert_eq!(status, expected, "{what}: {body}");
    }

    // DELETE ends it: the stream closes, the id is unknown after.
    let (status, _, _) = status_of(with_id(http.delete(&url).bearer_auth(TOKEN))).await;
    assert_eq!(status, 202);
    let ended = tokio::time::timeout(READ_TIMEOUT, async {
        while let Some(chunk) = body.next().await {
            if chunk.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream ends with the connection");
    let (status, _, _) = status_of(with_id(post(list.to_string()))).await;
    assert_eq!(status, 404);
    let (status, _, _) = status_of(with_id(http.delete(&url).bearer_auth(TOKEN))).await;
    assert_eq!(status, 404);
}

const ALICE: &str = "alice-secret-token-0123456789";

fn sha256(secret: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A config file with a token for the projects `a-*` only.
fn scoped_config(dir: &Path) -> std::path::PathBuf {
    let text = format!(
        "[[token]]\nname = \"alice\"\nhash = \"sha256:{}\"\nrole = \"client\"\nprojects = [\"a-*\"]\n",
        sha256(ALICE)
    );
    let path = dir.join("corral.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn a_wrong_token_is_401_and_a_project_out_of_scope_is_refused_like_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let gw = GatewaySpawn::default()
        .echo()
        .projects(&["a-1", "b-1"])
        .arg("--dialect")
        .arg("acp")
        .arg("--config")
        .arg(scoped_config(dir.path()).display().to_string())
        .spawn()
        .await;
    let http = reqwest::Client::new();
    let initialize = |project: &str, token: &str| {
        http.post(endpoint(gw.addr, project, Transport::Http1))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(initialize_body())
    };
    let upgrade = |project: &str| {
        http.get(endpoint(gw.addr, project, Transport::Http1))
            .bearer_auth(ALICE)
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
    };

    // The SDK client with a wrong token: refused with 401, on either
    // transport, before anything is opened.
    for transport in [Transport::WebSocket, Transport::Http1] {
        let url = endpoint(gw.addr, "a-1", transport);
        let mut peer = Peer::connect(&url, "wrong-token-0123456789abcdef", transport);
        peer.request(json!(0), "initialize", json!({"protocolVersion": 1}));
        assert!(peer.next().await.is_none(), "{transport:?}: no answer");
        let error = peer.close().await.unwrap_err();
        assert!(
            format!("{error:?}").contains("401"),
            "{transport:?}: {error:?}"
        );
    }
    let (status, body, _) = status_of(initialize("a-1", "wrong-token-0123456789abcdef")).await;
    assert_eq!(status, 401, "{body}");

    // Its own project opens.
    let (status, body, _) = status_of(initialize("a-1", ALICE)).await;
    assert_eq!(status, 200, "{body}");

    // Another's project that exists, and one that does not: one answer,
    // the name aside, on both transports.
    let shown = |body: String, project: &str| body.replace(project, "P");
    let existing = status_of(initialize("b-1", ALICE)).await;
    let missing = status_of(initialize("b-9", ALICE)).await;
    assert_eq!(existing.0, 404, "{}", existing.1);
    assert_eq!(
        (existing.0, shown(existing.1, "b-1")),
        (missing.0, shown(missing.1, "b-9"))
    );
    let existing = status_of(upgrade("b-1")).await;
    let missing = status_of(upgrade("b-9")).await;
    assert_eq!(existing.0, 404, "{}", existing.1);
    assert_eq!(
        (existing.0, shown(existing.1, "b-1")),
        (missing.0, shown(missing.1, "b-9"))
    );
    // The SDK client sees the same refusal for both.
    for project in ["b-1", "b-9"] {
        let url = endpoint(gw.addr, project, Transport::WebSocket);
        let mut peer = Peer::connect(&url, ALICE, Transport::WebSocket);
        peer.request(json!(0), "initialize", json!({"protocolVersion": 1}));
        assert!(peer.next().await.is_none());
        let error = format!("{:?}", peer.close().await.unwrap_err());
        assert!(error.contains("404"), "{project}: {error}");
    }
}

/// Waits until `project` is hosted by exactly one of `gateways`; returns
/// which.
async fn host_of(gateways: &[&Gateway], project: &str) -> usize {
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    loop {
        let mut hosts = Vec::new();
        for (i, gw) in gateways.iter().enumerate() {
            let (status, body) = gw.http_get("/v1/projects", Some(ADMIN_TOKEN)).await;
            assert_eq!(status, 200, "{body}");
            let list: Value = serde_json::from_str(&body).unwrap();
            if list["projects"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["project"] == project)
            {
                hosts.push(i);
            }
        }
        if hosts.len() == 1 {
            return hosts[0];
        }
        assert!(
            hosts.len() < 2 && tokio::time::Instant::now() < deadline,
            "{project} hosted by {hosts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn two_gateways_behind_nginx_serve_two_projects_endpoints() {
    // Which gateway a name hashes to depends on the gateways' ports, so
    // the test tries names until each gateway holds one: five names all
    // went to one gateway in about one run of twenty; with 32, a fair hash
    // sends all to one in 2^31.
    let names: Vec<String> = (0..32).map(|k| format!("p{k:02}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    let spawn = || {
        GatewaySpawn::default()
            .echo()
            .projects(&names)
            .projects_root(dir.path().join("projects"))
            .state_dir(dir.path().join("state"))
            .behind_local_proxy()
            .arg("--dialect")
            .arg("acp")
            .spawn()
    };
    let gateways = [spawn().await, spawn().await];
    let upstreams = [
        gateways[0].proxy_addr.unwrap(),
        gateways[1].proxy_addr.unwrap(),
    ];
    let nginx = crate::deploy_nginx::Nginx::start(&upstreams).await;

    // One project on each gateway, found by opening them through nginx.
    let mut chosen: [Option<&str>; 2] = [None, None];
    for (k, project) in names.iter().enumerate() {
        let transport = if k % 2 == 0 {
            Transport::Http1
        } else {
            Transport::WebSocket
        };
        let url = endpoint(nginx.addr, project, transport);
        let mut peer = Peer::connect(&url, TOKEN, transport);
        let (answer, _) = peer
            .call(json!(0), "initialize", json!({"protocolVersion": 1}))
            .await;
        assert_eq!(answer["result"]["_meta"]["corral"]["project"], *project);
        let (new, _) = peer
            .call(
                json!(1),
                "session/new",
                json!({"cwd": "/", "mcpServers": []}),
            )
            .await;
        let sid = new["result"]["sessionId"].clone();
        let prompt = json!({"sessionId": sid,
            "prompt": [{"type": "text", "text": format!("hello {project}")}]});
        let (done, before) = peer.call(json!(2), "session/prompt", prompt).await;
        assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
        assert!(
            text_of(&before).contains(&format!("hello {project}")),
            "{project} through nginx ({transport:?}): {before:?}\n{}",
            nginx.log()
        );
        peer.close().await.unwrap();
        let host = host_of(&[&gateways[0], &gateways[1]], project).await;
        chosen[host].get_or_insert(project);
        if chosen.iter().all(Option::is_some) && k >= 1 {
            break;
        }
    }
    assert!(
        chosen.iter().all(Option::is_some),
        "the hash put every project on one gateway: {chosen:?}"
    );

    // Again, over the other transport: each lands where its agent runs.
    for project in chosen.into_iter().flatten() {
        let host = host_of(&[&gateways[0], &gateways[1]], project).await;
        for transport in [Transport::WebSocket, Transport::Http1] {
            let url = endpoint(nginx.addr, project, transport);
            let mut peer = Peer::connect(&url, TOKEN, transport);
            let (answer, _) = peer
                .call(json!(0), "initialize", json!({"protocolVersion": 1}))
                .await;
            assert!(answer.get("result").is_some(), "{answer}");
            let (new, _) = peer
                .call(
                    json!(1),
                    "session/new",
                    json!({"cwd": "/", "mcpServers": []}),
                )
                .await;
            let sid = new["result"]["sessionId"].clone();
            let load = json!({"sessionId": sid, "cwd": "/", "mcpServers": []});
            let (loaded, replay) = peer.call(json!(2), "session/load", load).await;
            assert!(loaded.get("result").is_some(), "{loaded}");
            assert!(
                text_of(&replay).contains(&format!("hello {project}")),
                "{project} ({transport:?}): the conversation is on its gateway: {replay:?}"
            );
            peer.close().await.unwrap();
            assert_eq!(host_of(&[&gateways[0], &gateways[1]], project).await, host);
        }
    }
}

#[tokio::test]
async fn a_gateway_whose_agents_speak_another_dialect_has_no_acp_endpoint() {
    let gw = GatewaySpawn::default().echo().spawn().await;
    let response = reqwest::Client::new()
        .post(endpoint(gw.addr, "alpha", Transport::Http1))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(initialize_body());
    let (status, body, _) = status_of(response).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("--dialect acp"), "{body}");
}

/// A Streamable HTTP connection takes a place under `--max-connections`
/// of its own for its whole life, however many a TCP connection opens:
/// at the cap an `initialize` is `503` with `Retry-After`, and a `DELETE`
/// gives the place back.
#[tokio::test]
async fn streamable_http_connections_count_under_max_connections() {
    let gw = GatewaySpawn::default()
        .echo()
        .arg("--dialect")
        .arg("acp")
        .arg("--max-connections")
        .arg("4")
        .spawn()
        .await;
    let url = endpoint(gw.addr, "alpha", Transport::Http1);
    // One TCP connection, kept alive, carries every request.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .http1_only()
        .build()
        .unwrap();
    let initialize = || {
        http.post(&url)
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(initialize_body())
    };
    let mut opened = Vec::new();
    let refused = loop {
        let (status, body, headers) = status_of(initialize()).await;
        match status {
            200 => opened.push(headers["acp-connection-id"].to_str().unwrap().to_string()),
            503 => break (body, headers),
            other => panic!("{other}: {body}"),
        }
        assert!(opened.len() < 4, "no more than the cap: {opened:?}");
    };
    assert!(!opened.is_empty());
    assert!(refused.0.contains("--max-connections"), "{}", refused.0);
    assert_eq!(refused.1["retry-after"], "1");
    // Counted as a refusal at the cap (the scrape itself, over the cap
    // too, is answered from the reserved places and counted as well).
    let (_, metrics) = gw.http_get("/metrics", Some(ADMIN_TOKEN)).await;
    let refusals: f64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("corral_connections_refused_total{reason=\"max_connections\"} ")
        })
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(refusals >= 1.0, "{metrics}");

    // Ended, its place is free again.
    let (status, _, _) = status_of(
        http.delete(&url)
            .bearer_auth(TOKEN)
            .header("acp-connection-id", &opened[0]),
    )
    .await;
    assert_eq!(status, 202);
    let mut reopened = false;
    for _ in 0..100 {
        if status_of(initialize()).await.0 == 200 {
            reopened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reopened, "a place came free");
}
