//! The refresher's schedule on a paused clock with a fake loader (reload
//! period, early reload when asked, the rate limit, retries, failures
//! keeping the keys), and real loads from a file and from an HTTP server.

use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

use axum::extract::State;
use axum::http::StatusCode;
use jsonwebtoken::Algorithm;

use super::super::test_keys::{jwks, KeyPairFor};
use super::*;

const REFRESH: Duration = Duration::from_secs(300);
const MIN: Duration = Duration::from_secs(10);

/// What the fake loader returns next, and how often it was called.
#[derive(Default)]
struct Fake {
    document: Mutex<Option<String>>,
    loads: AtomicUsize,
}

impl Fake {
    fn serve(&self, document: Option<String>) {
        *self.document.lock().unwrap() = document;
    }

    fn loads(&self) -> usize {
        self.loads.load(Ordering::SeqCst)
    }

    fn load(&self) -> impl Future<Output = Result<(KeySet, Vec<String>), JwksLoadError>> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        let result = match &*self.document.lock().unwrap() {
            Some(document) => KeySet::parse(document.as_bytes()).map_err(Into::into),
            None => Err(JwksLoadError::Status(503)),
        };
        async move { result }
    }
}

/// Runs the schedule of `jwks` with `fake` as its loader until dropped.
fn start(jwks: Arc<Jwks>, fake: Arc<Fake>) -> tokio_util::sync::DropGuard {
    let cancel = CancellationToken::new();
    let guard = cancel.clone().drop_guard();
    tokio::spawn(async move { jwks.keep_current(cancel, || fake.load()).await });
    guard
}

async fn at(seconds: u64, started: Instant) {
    sleep_until(started + Duration::from_secs(seconds)).await;
}

fn knows(jwks: &Jwks, kid: &str) -> bool {
    jwks.current().pick(Algorithm::ES256, Some(kid)).is_ok()
}

#[tokio::test(start_paused = true)]
async fn a_file_is_reloaded_on_its_period_and_early_when_asked_at_most_once_per_interval() {
    let (a, b) = (KeyPairFor::p256(), KeyPairFor::p256());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks(&[a.jwk(Some("a"))])).unwrap();
    let (jwks_now, _) = Jwks::new(JwksSource::File(path), REFRESH, MIN).unwrap();
    let jwks_now = Arc::new(jwks_now);
    assert!(knows(&jwks_now, "a"), "read at start");
    let fake = Arc::new(Fake::default());
    fake.serve(Some(jwks(&[a.jwk(Some("a")), b.jwk(Some("b"))])));
    let t0 = Instant::now();
    let _running = start(jwks_now.clone(), fake.clone());

    at(1, t0).await;
    assert_eq!(fake.loads(), 0);
    // Asked at 1 s: loaded once the interval since the start has passed.
    jwks_now.want_refresh();
    at(9, t0).await;
    assert_eq!(fake.loads(), 0);
    at(11, t0).await;
    assert_eq!(fake.loads(), 1);
    assert!(knows(&jwks_now, "b"));
    // Asked three times at once: one load, an interval after the last.
    for _ in 0..3 {
        jwks_now.want_refresh();
    }
    at(19, t0).await;
    assert_eq!(fake.loads(), 1);
    at(21, t0).await;
    assert_eq!(fake.loads(), 2);
    at(40, t0).await;
    assert_eq!(fake.loads(), 2, "one load for the three requests");
    // Not asked: the period after the last load (at 21 s).
    at(319, t0).await;
    assert_eq!(fake.loads(), 2);
    at(323, t0).await;
    assert_eq!(fake.loads(), 3);
    // A failed load keeps the keys.
    fake.serve(None);
    jwks_now.want_refresh();
    at(334, t0).await;
    assert_eq!(fake.loads(), 4);
    assert!(knows(&jwks_now, "a") && knows(&jwks_now, "b"));
}

#[tokio::test(start_paused = true)]
async fn a_url_is_fetched_at_once_and_retried_each_interval_until_it_answers() {
    let a = KeyPairFor::p256();
    let url = reqwest::Url::parse("https://idp.invalid/jwks.json").unwrap();
    let (jwks_now, _) = Jwks::new(JwksSource::Url(url), REFRESH, MIN).unwrap();
    let jwks_now = Arc::new(jwks_now);
    assert_eq!(jwks_now.current().len(), 0);
    let fake = Arc::new(Fake::default());
    let t0 = Instant::now();
    let _running = start(jwks_now.clone(), fake.clone());
    at(1, t0).await;
    assert_eq!(fake.loads(), 1, "fetched at start");
    at(11, t0).await;
    assert_eq!(fake.loads(), 2, "retried after the interval");
    fake.serve(Some(jwks(&[a.jwk(Some("a"))])));
    at(21, t0).await;
    assert_eq!(fake.loads(), 3);
    assert!(knows(&jwks_now, "a"));
    at(300, t0).await;
    assert_eq!(fake.loads(), 3, "loaded: the period applies");
}

/// A JWKS endpoint on loopback: its answer, and how often it was asked.
struct Endpoint {
    answer: Mutex<(StatusCode, String)>,
    hits: AtomicUsize,
}

async fn endpoint(status: StatusCode, body: String) -> (Arc<Endpoint>, reqwest::Url) {
    let state = Arc::new(Endpoint {
        answer: Mutex::new((status, body)),
        hits: AtomicUsize::new(0),
    });
    let app = axum::Router::new()
        .route(
            "/jwks",
            axum::routing::get(|State(s): State<Arc<Endpoint>>| async move {
                s.hits.fetch_add(1, Ordering::SeqCst);
                let (status, body) = s.answer.lock().unwrap().clone();
                (status, [("location", "http://127.0.0.1:1/elsewhere")], body)
            }),
        )
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (state, reqwest::Url::parse(&url).unwrap())
}

/// Waits (generously) until `done`.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never: {what}");
}

#[tokio::test]
async fn keys_fetched_over_http_are_used_and_kept_when_a_refresh_fails() {
    let (a, b) = (KeyPairFor::p256(), KeyPairFor::p256());
    let (server, url) = endpoint(StatusCode::OK, jwks(&[a.jwk(Some("a"))])).await;
    let (jwks_now, _) =
        Jwks::new(JwksSource::Url(url), REFRESH, Duration::from_millis(50)).unwrap();
    let jwks_now = Arc::new(jwks_now);
    let cancel = CancellationToken::new();
    let _stop = cancel.clone().drop_guard();
    tokio::spawn({
        let jwks_now = jwks_now.clone();
        async move { jwks_now.run(cancel).await }
    });
    eventually("the first fetch", || knows(&jwks_now, "a")).await;

    server.answer.lock().unwrap().1 = jwks(&[a.jwk(Some("a")), b.jwk(Some("b"))]);
    jwks_now.want_refresh();
    eventually("the new key", || knows(&jwks_now, "b")).await;

    *server.answer.lock().unwrap() = (StatusCode::INTERNAL_SERVER_ERROR, String::new());
    let hits = server.hits.load(Ordering::SeqCst);
    jwks_now.want_refresh();
    eventually("a failed fetch", || {
        server.hits.load(Ordering::SeqCst) > hits
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(knows(&jwks_now, "a") && knows(&jwks_now, "b"));
}

#[tokio::test]
async fn fetches_are_bounded_and_redirects_not_followed() {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let (_server, url) = endpoint(StatusCode::OK, " ".repeat(MAX_JWKS_BYTES + 1)).await;
    let err = fetch(&client, &url).await.unwrap_err();
    assert!(
        matches!(err, JwksLoadError::Keys(JwksError::TooLarge)),
        "{err}"
    );
    let (_server, url) = endpoint(StatusCode::FOUND, String::new()).await;
    let err = fetch(&client, &url).await.unwrap_err();
    assert!(matches!(err, JwksLoadError::Status(302)), "{err}");
}
