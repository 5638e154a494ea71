//! The dashboard: a static page, served by the gateway itself, that reads the
//! admin API and opens project WebSockets for its console.
//!
//! Endpoints (no auth: the assets hold no data and no secrets; the page asks
//! for the admin token and keeps it in the browser's `sessionStorage`):
//! - `GET /` — the page (`index.html`).
//! - `GET /assets/{file}` — its ES modules (`app.js` and the modules it
//!   imports) and `style.css`; 404 for any other name.
//!
//! The assets are embedded at build time with `include_str!`, so running the
//! gateway needs no build step and no files beside the binary.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tower_http::set_header::SetResponseHeaderLayer;

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

const INDEX_HTML: &str = include_str!("index.html");

/// Everything under `/assets/`: (file name, content type, body).
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", JS, include_str!("app.js")),
    ("actions.js", JS, include_str!("actions.js")),
    ("api.js", JS, include_str!("api.js")),
    ("chart.js", JS, include_str!("chart.js")),
    ("console.js", JS, include_str!("console.js")),
    ("detail.js", JS, include_str!("detail.js")),
    ("events.js", JS, include_str!("events.js")),
    ("history.js", JS, include_str!("history.js")),
    ("refusal.js", JS, include_str!("refusal.js")),
    ("stats.js", JS, include_str!("stats.js")),
    ("table.js", JS, include_str!("table.js")),
    ("tokens.js", JS, include_str!("tokens.js")),
    ("transcript.js", JS, include_str!("transcript.js")),
    ("util.js", JS, include_str!("util.js")),
    ("wire.js", JS, include_str!("wire.js")),
    ("style.css", CSS, include_str!("style.css")),
];

/// Same-origin only: the scripts, styles, API calls and the console's
/// WebSocket all go to the gateway that served the page; no inline code, no
/// forms submitted anywhere, no framing by other sites.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The dashboard's routes, to be merged into the gateway's router. Every
/// answer makes the browser revalidate (so an upgraded gateway serves its
/// own page), keeps the page same-origin and sends no referrer.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let fixed =
        |name, value| SetResponseHeaderLayer::overriding(name, HeaderValue::from_static(value));
    Router::new()
        .route("/", get(|| async { asset(HTML, INDEX_HTML) }))
        .route("/assets/{file}", get(named_asset))
        .layer(fixed(header::CACHE_CONTROL, "no-cache"))
        .layer(fixed(header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .layer(fixed(header::REFERRER_POLICY, "no-referrer"))
        .layer(fixed(
            header::CONTENT_SECURITY_POLICY,
            CONTENT_SECURITY_POLICY,
        ))
}

async fn named_asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, body)) => asset(content_type, body),
        None => (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    }
}

/// One embedded asset with its content type.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// `GET path` against the dashboard router on a real socket:
    /// (status line, lowercased headers, body).
    async fn get(path: &str) -> (String, String, String) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, router::<()>()).await.unwrap();
        });
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        server.abort();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let (status, headers) = head.split_once("\r\n").unwrap();
        (
            status.to_string(),
            headers.to_ascii_lowercase(),
            body.to_string(),
        )
    }

    fn scripts() -> impl Iterator<Item = (&'static str, &'static str)> {
        ASSETS
            .iter()
            .filter(|(_, content_type, _)| *content_type == JS)
            .map(|(name, _, body)| (*name, *body))
    }

    #[tokio::test]
    async fn serves_each_asset_with_its_type_and_no_cache() {
        let index = [("", HTML, INDEX_HTML)];
        for (file, content_type, body) in index.iter().chain(ASSETS) {
            let path = if file.is_empty() {
                "/".to_string()
            } else {
                format!("/assets/{file}")
            };
            let (status, headers, got) = get(&path).await;
            assert_eq!(status, "HTTP/1.1 200 OK", "{path}");
            assert!(
                headers.contains(&format!("content-type: {content_type}")),
                "{path}: {headers}"
            );
            for fixed in [
                "cache-control: no-cache",
                "x-content-type-options: nosniff",
                "referrer-policy: no-referrer",
                "content-security-policy: default-src 'none';",
            ] {
                assert!(headers.contains(fixed), "{path}: {headers}");
            }
            assert_eq!(got, *body, "{path}");
        }
    }

    #[tokio::test]
    async fn unknown_asset_is_not_found() {
        for path in ["/assets/nope.js", "/assets/..%2Fmod.rs", "/assets/"] {
            let (status, _, _) = get(path).await;
            assert_eq!(status, "HTTP/1.1 404 Not Found", "{path}");
        }
    }

    #[test]
    fn page_has_the_ids_tests_and_the_script_rely_on() {
        for id in [
            "token-form",
            "token-input",
            "token-submit",
            "projects",
            "detail",
            "console-project",
            "console-token",
            "console-connect",
            "console-status",
            "console-prompt",
            "console-send",
            "console-abort",
            "console-output",
            "table-scroll",
            "stale-banner",
            "events",
            "confirm",
            "metrics-link",
            "project-charts",
            "charts",
            "tokens",
            "tokens-count",
            "tokens-result",
            "tokens-note",
        ] {
            assert!(
                INDEX_HTML.contains(&format!("id=\"{id}\"")),
                "index.html lacks #{id}"
            );
        }
        assert!(INDEX_HTML.contains("src=\"/assets/app.js\""));
        assert!(INDEX_HTML.contains("href=\"/assets/style.css\""));
    }

    #[test]
    fn every_imported_module_is_served() {
        for (name, body) in scripts() {
            for import in body.split("from \"./").skip(1) {
                let module = import.split('"').next().unwrap();
                assert!(
                    ASSETS.iter().any(|(file, _, _)| *file == module),
                    "{name} imports {module}, which is not embedded"
                );
            }
        }
    }

    #[test]
    fn scripts_never_parse_markup() {
        // Every piece of data reaches the page as text; markup parsing is
        // how an agent's reply or a project name would inject script.
        for (name, body) in scripts() {
            for sink in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(!body.contains(sink), "{name} uses {sink}");
            }
            // The tokens live in sessionStorage only.
            assert!(!body.contains("localStorage"), "{name} uses localStorage");
        }
    }
}
