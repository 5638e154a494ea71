//! The tokens panel and a scoped admin, checked on the gateway and browser
//! of a test in the parent module (one Chromium, one gateway): a managed
//! token listed with its session and revoked from the page (its socket
//! closed with 4001, its row gone, its secret never shown); a client token
//! refused at sign-in as "not an admin token"; and a config-file admin
//! scoped to `a-*` that stays signed in without gateway-wide stats and sees
//! only its own projects and tokens.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use corral_e2e::cdp::{Browser, Page};
use corral_e2e::gateway::{Gateway, Ws, ADMIN_TOKEN, TOKEN};

use super::{sign_in_with, text_of};

/// The managed token made through the API.
const BOT: &str = "ci-bot";
/// The config file's admin for the projects `a-*`.
const SCOPED: &str = "ops-a";
const SCOPED_SECRET: &str = "ops-a-dashboard-secret-0123456789";

fn token_row(name: &str) -> String {
    format!("#tokens tr[data-token=\"{name}\"]")
}

/// Writes a config file to `dir` with one `[[token]]`: an admin for the
/// projects `a-*`, given by the SHA-256 of its secret.
pub fn scoped_admin_config(dir: &Path) -> PathBuf {
    let digest = ring::digest::digest(&ring::digest::SHA256, SCOPED_SECRET.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join("corral.toml");
    let text = format!(
        "[[token]]\nname = \"{SCOPED}\"\nhash = \"sha256:{hex}\"\nrole = \"admin\"\nprojects = [\"a-*\"]\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A managed client token for every project, made through the admin API,
/// and a client attached with it to `project`: (socket, secret).
pub async fn attach_bot(gw: &Gateway, project: &str) -> (Ws, String) {
    let body = json!({"name": BOT, "role": "client", "projects": ["*"]});
    let (status, answer) = gw
        .http_body("POST", "/v1/tokens", Some(ADMIN_TOKEN), &body.to_string())
        .await;
    assert_eq!(status, 201, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    let secret = answer["token"].as_str().unwrap().to_string();
    let (ws, reply) = gw.client_with(project, &secret, None).await;
    assert_eq!(reply["success"], true, "{reply}");
    (ws, secret)
}

/// The tokens card lists the bot with its one session and no secret;
/// Revoke asks first, then the bot's socket is closed with 4001, the
/// result line says so and the row is gone.
pub async fn revoke_from_the_page(page: &Page<'_>, bot: &mut Ws, secret: &str) {
    let row = token_row(BOT);
    page.wait_for(
        &format!(
            "{}.includes('managed') && {} === '1' && {}.includes('*')",
            text_of(&row),
            text_of(&format!("{row} td.num")),
            text_of(&format!("{row} td.projects"))
        ),
        "ci-bot listed as managed, for every project, with one session",
    )
    .await
    .unwrap();
    let last_used = page
        .eval(&text_of(&format!("{row} td.last-used")))
        .await
        .unwrap();
    assert!(
        last_used.as_str().unwrap().contains("from 127.0.0.1"),
        "{last_used}"
    );
    let shown = page
        .eval(&format!(
            "document.body.textContent.includes({})",
            json!(secret)
        ))
        .await
        .unwrap();
    assert_eq!(shown, json!(false), "the page must never show a secret");

    page.click(&format!("{row} button[data-action=\"revoke\"]"))
        .await
        .unwrap();
    page.wait_for(
        &format!(
            "document.getElementById('confirm').open && {} === 'Revoke ci-bot?' && \
             {}.includes('Its 1 open session is closed at once')",
            text_of("#confirm-title"),
            text_of("#confirm-text")
        ),
        "the confirmation naming the token and its session",
    )
    .await
    .unwrap();
    page.click("#confirm-ok").await.unwrap();
    let closed = bot.closed().await;
    assert_eq!(closed.map(|(code, _)| code), Some(4001));
    page.wait_for(
        &format!(
            "{} === 'revoked ci-bot: 1 session closed' && document.querySelector({}) === null",
            text_of("#tokens-result"),
            json!(row)
        ),
        "the revocation's result and the row gone",
    )
    .await
    .unwrap();
}

/// In a new tab: a client token is told it is not an admin token; the
/// scoped admin signs in and stays signed in over several refreshes,
/// seeing `visible` as the only project, a quiet "not available" instead
/// of gateway-wide stats (asked once, not every second), and only its own
/// token, which has no Revoke. The tab is closed at the end.
pub async fn scoped_admin_stays_signed_in(browser: &Browser, gw: &Gateway, visible: &str) {
    let page = browser.new_page(1280, 800).await.unwrap();
    sign_in_with(&page, gw, TOKEN).await;
    page.wait_for(
        &format!(
            "!document.getElementById('signin').hidden && {}.includes('not an admin token')",
            text_of("#token-message")
        ),
        "the sign-in form to say a client token is not an admin token",
    )
    .await
    .unwrap();

    sign_in_with(&page, gw, SCOPED_SECRET).await;
    let projects = "[...document.querySelectorAll('#projects tr[data-project]')]\
                    .map(r => r.dataset.project).join(' ')";
    page.wait_for(
        &format!(
            "{projects} === {} && {}.includes('not available to a scoped admin')",
            json!(visible),
            text_of("#summary")
        ),
        "the scoped admin's one project and no gateway-wide stats",
    )
    .await
    .unwrap();
    let renders = page.eval("window.__corralRenderStats.count").await.unwrap();
    page.wait_for(
        &format!("window.__corralRenderStats.count >= {renders} + 3"),
        "three more refreshes",
    )
    .await
    .unwrap();
    let state = page
        .eval(&format!(
            "({{ signin: document.getElementById('signin').hidden, \
                charts: document.getElementById('charts').hidden, \
                metrics: document.getElementById('metrics-link').hidden, \
                status: {}, projects: {projects}, \
                tokens: [...document.querySelectorAll('#tokens tr')].map(r => r.textContent), \
                buttons: document.querySelectorAll('#tokens button').length }})",
            text_of("#poll-status")
        ))
        .await
        .unwrap();
    assert_eq!(state["signin"], true, "still signed in: {state}");
    assert_eq!(state["projects"], json!(visible), "{state}");
    assert_eq!(state["status"], "live", "{state}");
    assert_eq!(state["charts"], true, "no gateway-wide charts: {state}");
    assert_eq!(state["metrics"], true, "no /metrics link: {state}");
    let tokens = state["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 1, "only its own token: {state}");
    let own = tokens[0].as_str().unwrap();
    assert!(
        own.starts_with(SCOPED) && own.contains("configured") && own.contains("config file"),
        "{state}"
    );
    assert_eq!(state["buttons"], 0, "a configured token has no Revoke");
    // Refused once, not on every refresh.
    let refusals = gw
        .log_text()
        .lines()
        .filter(|line| line.contains("actor=ops-a") && line.contains("AdministerGateway"))
        .count();
    assert_eq!(refusals, 1, "the stats asked once:\n{}", gw.log_text());
    assert_eq!(page.errors(), Vec::<String>::new(), "errors in the page");
    page.call("Page.close", json!({})).await.unwrap();
}
