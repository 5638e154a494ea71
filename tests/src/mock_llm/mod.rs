//! A scripted mock LLM server speaking the real streaming wire formats.
//!
//! Endpoints, on `127.0.0.1`:
//! - `POST /v1/messages`: Anthropic Messages streaming SSE (module `anthropic`);
//! - `POST /v1/chat/completions`: OpenAI Chat Completions streaming (module `openai`).
//!
//! Both replay one shared queue of [`Turn`]s, one per model request, and
//! record every request so tests can inspect what the agent sent.

mod anthropic;
mod openai;
mod serve;
mod turn;
mod wire;

use std::collections::{BTreeMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use turn::{Turn, NO_TURN_LEFT};
pub use wire::ReportedUsage;

/// One request as the mock received it.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedRequest {
    /// `/v1/messages` or `/v1/chat/completions`.
    pub path: String,
    /// The raw credential header: `x-api-key` (Anthropic) or `authorization`
    /// (OpenAI, so `"Bearer …"`).
    pub auth: Option<String>,
    /// All request headers that are valid UTF-8, names lowercased.
    pub headers: BTreeMap<String, String>,
    /// The JSON body; a JSON string holding the raw text when it was not JSON.
    pub body: Value,
}

/// A running mock server; dropping it stops the server and ends open streams.
pub struct MockLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// The accept loop, aborted on drop.
    server: JoinHandle<()>,
    /// Never sent on: dropping it wakes every open stream (even `Hang`) to end.
    _shutdown: watch::Sender<()>,
}

/// State shared by the handle and the request handlers.
struct Shared {
    state: Mutex<ScriptState>,
    /// Resolves (with an error) once the [`MockLlm`] is dropped.
    shutdown: watch::Receiver<()>,
}

struct ScriptState {
    /// Turns not yet served, in order; shared by both wire formats.
    script: VecDeque<Turn>,
    /// Every request received, in arrival order, including rejected ones.
    requests: Vec<RecordedRequest>,
    /// The key clients must present; `None` accepts any key or none.
    api_key: Option<String>,
    /// Replies streamed so far per wire format; from the second one on the
    /// usage reports cache reads.
    served: Served,
    /// Counts every reply reports instead of the size-derived ones.
    usage: Option<ReportedUsage>,
}

/// Reply counters, one per wire format.
#[derive(Default)]
struct Served {
    anthropic: usize,
    openai: usize,
}

impl MockLlm {
    /// Starts a server on `127.0.0.1:0` with an empty script.
    ///
    /// # Panics
    /// When no local port can be bound (a broken test environment).
    pub async fn start() -> MockLlm {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        match MockLlm::bind(addr).await {
            Ok(mock) => mock,
            Err(e) => panic!("mock-llm: cannot bind {addr}: {e}"),
        }
    }

    /// Starts a server on `addr` with an empty script.
    pub async fn bind(addr: SocketAddr) -> std::io::Result<MockLlm> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = watch::channel(());
        let shared = Arc::new(Shared {
            state: Mutex::new(ScriptState {
                script: VecDeque::new(),
                requests: Vec::new(),
                api_key: None,
                served: Served::default(),
                usage: None,
            }),
            shutdown: rx,
        });
        let app = serve::router(shared.clone());
        // `serve` only returns if the listener fails; clients then see
        // connection errors, which is the clearest report we can give.
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(MockLlm {
            addr,
            shared,
            server,
            _shutdown: tx,
        })
    }

    /// Appends a turn to the script.
    pub fn push(&self, turn: Turn) {
        self.shared.lock().script.push_back(turn);
    }

    /// Appends several turns to the script.
    pub fn push_all(&self, turns: impl IntoIterator<Item = Turn>) {
        self.shared.lock().script.extend(turns);
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`: the Anthropic SDK convention (no `/v1`).
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1`: the OpenAI SDK convention.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Requires `key` (as `x-api-key` or `Authorization: Bearer`) from now
    /// on; `None` accepts anything. Rejected requests consume no turn.
    pub fn set_api_key(&self, key: Option<String>) {
        self.shared.lock().api_key = key;
    }

    /// Makes every following reply report `usage` (no cache tokens), so a
    /// test knows what a call costs with the catalogue's prices; `None`
    /// goes back to counts derived from the request and reply sizes.
    pub fn report_usage(&self, usage: Option<ReportedUsage>) {
        self.shared.lock().usage = usage;
    }

    /// How many scripted turns are still queued.
    pub fn remaining(&self) -> usize {
        self.shared.lock().script.len()
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ScriptState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
