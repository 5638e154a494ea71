//! The dashboard: a static page, served by the gateway itself, that reads the
//! admin API and opens project WebSockets for its console.
//!
//! Endpoints (no auth: the assets hold no data and no secrets; the page asks
//! for the admin token and keeps it in the browser's `sessionStorage`):
//! - `GET /` — the page (`index.html`).
//! - `GET /assets/app.js` — its script (polling, table, charts, console).
//! - `GET /assets/style.css` — its styles.
//!
//! The assets are embedded at build time with `include_str!`, so running the
//! gateway needs no build step and no files beside the binary.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

const INDEX_HTML: &str = include_str!("index.html");
const APP_JS: &str = include_str!("app.js");
const STYLE_CSS: &str = include_str!("style.css");

/// Same-origin only: the script, styles, API calls and the console's
/// WebSocket all go to the gateway that served the page; no inline code, no
/// framing by other sites.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The dashboard's routes, to be merged into the gateway's router.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/assets/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
}

/// One embedded asset with headers that make the browser revalidate it (so
/// an upgraded gateway serves its own page) and keep it same-origin.
fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        ],
        body,
    )
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

    #[tokio::test]
    async fn serves_each_asset_with_its_type_and_no_cache() {
        for (path, content_type, body) in [
            ("/", "text/html; charset=utf-8", INDEX_HTML),
            ("/assets/app.js", "text/javascript; charset=utf-8", APP_JS),
            ("/assets/style.css", "text/css; charset=utf-8", STYLE_CSS),
        ] {
            let (status, headers, got) = get(path).await;
            assert_eq!(status, "HTTP/1.1 200 OK", "{path}");
            assert!(
                headers.contains(&format!("content-type: {content_type}")),
                "{path}: {headers}"
            );
            assert!(headers.contains("cache-control: no-cache"), "{path}");
            assert!(headers.contains("content-security-policy:"), "{path}");
            assert_eq!(got, body, "{path}");
        }
    }

    #[tokio::test]
    async fn unknown_asset_is_not_found() {
        let (status, _, _) = get("/assets/nope.js").await;
        assert_eq!(status, "HTTP/1.1 404 Not Found");
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
    fn script_never_parses_markup() {
        // Every piece of data reaches the page as text nodes; markup parsing
        // is how an agent's reply or a project name would inject script.
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!APP_JS.contains(sink), "app.js uses {sink}");
        }
        // The admin token lives in sessionStorage only, never in a URL.
        assert!(!APP_JS.contains("localStorage"));
    }
}
