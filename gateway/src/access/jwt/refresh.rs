//! Where the JWKS comes from (`--jwks-file` or `--jwks-url`) and how it
//! stays current: the keys in force sit behind a lock that `verify` only
//! reads; one background task reloads them every `--jwks-refresh`, and at
//! once (at most one load per [`MIN_FETCH_INTERVAL`]) when a token names
//! a key the set lacks. A failed load keeps the previous keys and logs.

use std::fmt;
use std::future::Future;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use super::keys::{JwksError, KeySet, MAX_JWKS_BYTES};

/// Loads at most this often, however many tokens name unknown keys (and,
/// while no load has succeeded yet, retries this often).
pub const MIN_FETCH_INTERVAL: Duration = Duration::from_secs(10);

/// The time a `--jwks-url` request has, from connecting to the last byte.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the public keys are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// A JWKS file, re-read on every refresh.
    File(PathBuf),
    /// An identity provider's JWKS endpoint (`https://`, or `http://` on
    /// a loopback address), fetched without following redirects.
    Url(reqwest::Url),
}

impl fmt::Display for JwksSource {
    /// The file, or the URL without its query (which could carry a key).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JwksSource::File(path) => write!(f, "{}", path.display()),
            JwksSource::Url(url) => {
                write!(f, "{}{}", url.origin().ascii_serialization(), url.path())
            }
        }
    }
}

/// Why the JWKS could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum JwksLoadError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot fetch the JWKS: {0}")]
    Fetch(String),
    #[error("the JWKS endpoint answered HTTP {0}")]
    Status(u16),
    #[error("{0}")]
    Keys(#[from] JwksError),
}

/// The keys in force and what keeps them current.
pub struct Jwks {
    source: JwksSource,
    /// Swapped whole by the refresher; `verify` clones the `Arc`.
    keys: RwLock<Arc<KeySet>>,
    /// Whether any load succeeded (a URL is first fetched by the task).
    loaded: AtomicBool,
    /// Asks the refresher for an early load (a token named an unknown key).
    wanted: Notify,
    /// The HTTP client of a `--jwks-url` (no redirects, bounded time).
    client: Option<reqwest::Client>,
    /// Time between regular reloads.
    refresh: Duration,
    /// Least time between two loads.
    min_interval: Duration,
}

impl Jwks {
    /// A file is read now (an error stops the start); a URL is fetched
    /// by [`Jwks::run`], so an identity provider that is down does not
    /// keep the gateway from starting. Returns the reasons keys were
    /// skipped, for the start-up log.
    pub fn new(
        source: JwksSource,
        refresh: Duration,
        min_interval: Duration,
    ) -> Result<(Jwks, Vec<String>), JwksLoadError> {
        let (keys, skipped, client) = match &source {
            JwksSource::File(path) => {
                let (keys, skipped) = KeySet::parse(&read_file(path)?)?;
                (keys, skipped, None)
            }
            JwksSource::Url(_) => {
                let client = reqwest::Client::builder()
                    .user_agent(concat!("corral-jwks/", env!("CARGO_PKG_VERSION")))
                    .timeout(FETCH_TIMEOUT)
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|e| JwksLoadError::Fetch(e.to_string()))?;
                (KeySet::default(), Vec::new(), Some(client))
            }
        };
        let jwks = Jwks {
            loaded: AtomicBool::new(client.is_none()),
            source,
            keys: RwLock::new(Arc::new(keys)),
            wanted: Notify::new(),
            client,
            refresh,
            min_interval,
        };
        Ok((jwks, skipped))
    }

    pub fn source(&self) -> &JwksSource {
        &self.source
    }

    /// The keys in force (a cheap clone; never waits on a load).
    pub fn current(&self) -> Arc<KeySet> {
        self.keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Asks for a load as soon as the rate limit allows.
    pub fn want_refresh(&self) {
        self.wanted.notify_one();
    }

    /// Keeps the keys current until `cancel`: a URL is fetched at once,
    /// then every source is reloaded every `refresh` (every
    /// `min_interval` while none succeeded) or when asked, never twice
    /// within `min_interval`.
    pub async fn run(&self, cancel: CancellationToken) {
        self.keep_current(cancel, || self.load()).await;
    }

    /// [`Jwks::run`] with the loader given (tests give a fake one).
    async fn keep_current<F, L>(&self, cancel: CancellationToken, mut load: F)
    where
        F: FnMut() -> L,
        L: Future<Output = Result<(KeySet, Vec<String>), JwksLoadError>>,
    {
        let mut last = self.loaded.load(Ordering::Relaxed).then(Instant::now);
        loop {
            if let Some(last) = last {
                let period = match self.loaded.load(Ordering::Relaxed) {
                    true => self.refresh,
                    false => self.min_interval,
                };
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = sleep_until(last + period) => {}
                    () = self.wanted.notified() => {
                        tokio::select! {
                            () = cancel.cancelled() => return,
                            () = sleep_until(last + self.min_interval) => {}
                        }
                    }
                }
            }
            // This load answers every request made so far.
            let _ = self.wanted.notified().now_or_never();
            let result = tokio::select! {
                () = cancel.cancelled() => return,
                result = load() => result,
            };
            last = Some(Instant::now());
            match result {
                Ok((keys, skipped)) => {
                    tracing::debug!(source = %self.source, keys = keys.len(), ?skipped, "JWKS loaded");
                    *self.keys.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(keys);
                    self.loaded.store(true, Ordering::Relaxed);
                }
                Err(error) => tracing::warn!(
                    source = %self.source,
                    %error,
                    "JWKS refresh failed; the previous keys stay in force"
                ),
            }
        }
    }

    /// One load of the source.
    async fn load(&self) -> Result<(KeySet, Vec<String>), JwksLoadError> {
        match (&self.source, &self.client) {
            (JwksSource::Url(url), Some(client)) => Ok(KeySet::parse(&fetch(client, url).await?)?),
            (JwksSource::File(path), _) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || Ok(KeySet::parse(&read_file(&path)?)?))
                    .await
                    .map_err(|e| JwksLoadError::Fetch(e.to_string()))?
            }
            (JwksSource::Url(_), None) => Err(JwksLoadError::Fetch("no HTTP client".into())),
        }
    }
}

/// Reads a JWKS file, at most [`MAX_JWKS_BYTES`].
fn read_file(path: &Path) -> Result<Vec<u8>, JwksLoadError> {
    let read_error = |source| JwksLoadError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut bytes = Vec::new();
    file.take(MAX_JWKS_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() > MAX_JWKS_BYTES {
        return Err(JwksError::TooLarge.into());
    }
    Ok(bytes)
}

/// GETs the JWKS, refusing an answer over [`MAX_JWKS_BYTES`] before
/// reading past it.
async fn fetch(client: &reqwest::Client, url: &reqwest::Url) -> Result<Vec<u8>, JwksLoadError> {
    let failed = |e: reqwest::Error| JwksLoadError::Fetch(error_chain(&e.without_url()));
    let mut response = client
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(failed)?;
    if !response.status().is_success() {
        return Err(JwksLoadError::Status(response.status().as_u16()));
    }
    if response
        .content_length()
        .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
    {
        return Err(JwksError::TooLarge.into());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(failed)? {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(JwksError::TooLarge.into());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error with its sources, `: `-separated (reqwest's own message is
/// often only "error sending request").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
#[path = "refresh_tests.rs"]
mod tests;
