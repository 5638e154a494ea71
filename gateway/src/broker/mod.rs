//! The model-key broker (`--model-broker on`): agents' model calls come to
//! the gateway on one Unix socket, `STATE/egress/broker-ID.sock`, carrying a
//! per-spawn placeholder where the provider key would be; the broker
//! checks it, puts the real key (held only here) in its place and
//! forwards to the configured provider, streaming the answer back as it
//! comes. The agent's environment, command line and memory never hold a
//! provider key, and the agent runs without the host's network.
//!
//! Endpoints (everything else: 404 or 405, in the provider's error shape):
//! - `POST /anthropic/v1/messages`, `POST /anthropic/v1/messages/count_tokens`,
//!   `GET /anthropic/v1/models` → `ANTHROPIC_BASE_URL` + the path after
//!   `/anthropic`, key in `x-api-key`;
//! - `POST /openai/v1/chat/completions`, `POST /openai/v1/responses`,
//!   `GET /openai/v1/models` → `OPENAI_BASE_URL` (which includes `/v1`) +
//!   the path after `/openai/v1`, key in `Authorization: Bearer`.
//!
//! Model calls (`/v1/messages`, `/chat/completions`, `/responses`) are
//! metered: the usage in the provider's answer is read as it passes
//! (`tap`), priced with the catalogue and charged to the project's and
//! the running identity's budgets (`meter`, [`crate::spend`]); a call of
//! a project or identity whose budget is spent is answered 402.
//!
//! Tasks: one accept loop on a thread of its own ([`spawn`]), one task
//! per connection.

mod answer;
mod forward;
mod headers;
mod meter;
mod route;
mod serve;
mod tap;
mod upstream;

use std::ffi::OsString;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use corral_protocol::egress::{BROKER_RELAY_URL, BROKER_SOCKET_URL};
use tokio_util::sync::CancellationToken;

pub use crate::child_socket::bind;
/// The live placeholder keys (in each child's environment where a
/// provider key would be).
pub use crate::spawn_secrets::SpawnSecrets as Registry;
pub use forward::{BODY_TIMEOUT, MAX_BUFFERED_BYTES, MAX_IN_FLIGHT_PER_PROJECT, MAX_REQUEST_BYTES};
pub use route::{ANTHROPIC_PREFIX, OPENAI_PREFIX};
pub use serve::{HEADER_TIMEOUT, MAX_CONNECTIONS};
pub use tap::MAX_LINE_BYTES;
pub use upstream::{Provider, UpstreamError, Upstreams, ENV_VARS};

use crate::metrics::Metrics;

/// Time to connect to a provider.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Time between two reads of a provider's answer (reasoning models can be
/// silent a while), as the agent allows.
const READ_TIMEOUT: Duration = Duration::from_secs(600);

/// What became of a request (`outcome` of `corral_broker_requests_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Sent to the provider, whose answer (any status) was passed back.
    Forwarded,
    /// No key, or one that is not a live child's.
    Unauthorized,
    /// Not a provider path, or not its method.
    Refused,
    /// The gateway holds no key for that provider.
    NoKey,
    /// Over [`MAX_REQUEST_BYTES`].
    TooLarge,
    /// The body did not arrive within [`BODY_TIMEOUT`], or the bytes
    /// buffered for all requests were at [`MAX_BUFFERED_BYTES`] that long.
    Slow,
    /// The project had [`MAX_IN_FLIGHT_PER_PROJECT`] requests open.
    Busy,
    /// The project's budget, or that of the identity whose run it is, is
    /// spent.
    OverBudget,
    /// The provider could not be reached.
    UpstreamError,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::Unauthorized => "unauthorized",
            Outcome::Refused => "refused",
            Outcome::NoKey => "no_key",
            Outcome::TooLarge => "too_large",
            Outcome::Slow => "slow",
            Outcome::Busy => "busy",
            Outcome::OverBudget => "over_budget",
            Outcome::UpstreamError => "upstream_error",
        }
    }
}

/// Everything a request needs.
pub struct Broker {
    /// The live placeholder keys, registered by the hub at each spawn.
    registry: Arc<Registry>,
    /// The providers' endpoints and real keys.
    upstreams: Upstreams,
    /// One client (and connection pool) for every provider.
    client: reqwest::Client,
    metrics: Arc<Metrics>,
    /// The bytes of request bodies being read or sent, in KiB permits.
    buffered: Arc<tokio::sync::Semaphore>,
    /// Time a request's body has to arrive ([`BODY_TIMEOUT`]).
    body_timeout: Duration,
    /// The accounts that may connect (the children's).
    peers: crate::child_socket::Peers,
    /// Requests open per project (until their answer is streamed).
    in_flight: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    /// The budgets model calls are checked against and charged to.
    ledger: Arc<crate::spend::Ledger>,
}

impl Broker {
    pub fn new(
        registry: Arc<Registry>,
        upstreams: Upstreams,
        metrics: Arc<Metrics>,
        ledger: Arc<crate::spend::Ledger>,
    ) -> Result<Broker, reqwest::Error> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("corral-broker/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            // A redirect is passed back, never followed: reqwest keeps
            // custom headers such as `x-api-key` across hosts, so following
            // one would send the real key wherever `Location` points.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Broker {
            registry,
            upstreams,
            client,
            metrics,
            buffered: Arc::new(tokio::sync::Semaphore::new(MAX_BUFFERED_BYTES / 1024)),
            body_timeout: BODY_TIMEOUT,
            peers: crate::child_socket::Peers::default(),
            in_flight: Arc::default(),
            ledger,
        })
    }

    /// The same broker serving only `peers` (the accounts children run
    /// as).
    pub fn with_peers(mut self, peers: crate::child_socket::Peers) -> Broker {
        self.peers = peers;
        self
    }

    /// The same broker giving request bodies `limit` instead of
    /// [`BODY_TIMEOUT`] (tests).
    pub fn with_body_timeout(mut self, limit: Duration) -> Broker {
        self.body_timeout = limit;
        self
    }

    fn count(&self, provider: Option<Provider>, outcome: Outcome) {
        let provider = provider.map_or("none", Provider::label);
        self.metrics
            .broker_requests
            .with_label_values(&[provider, outcome.label()])
            .inc();
    }
}

/// Makes `STATE/egress` (mode 0755, following no link) and binds the
/// broker's socket there (`STATE/egress/broker-INSTANCE.sock`, a name of
/// this gateway's own), before the sandbox probe opens it.
pub fn open_socket(
    state_dir: &std::path::Path,
    socket: &std::path::Path,
) -> io::Result<std::os::unix::net::UnixListener> {
    crate::statefs::Dir::open_root(state_dir)
        .and_then(|state| state.subdir("egress", 0o755))
        .map_err(|e| io::Error::other(e.to_string()))?;
    bind(socket)
}

/// Serves `listener` on a thread of its own, with a runtime of its own,
/// until `shutdown` is cancelled.
pub fn spawn(
    listener: std::os::unix::net::UnixListener,
    broker: Broker,
    shutdown: CancellationToken,
) -> io::Result<std::thread::JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("model-broker".into())
        .spawn(move || {
            runtime.block_on(async move {
                match tokio::net::UnixListener::from_std(listener) {
                    Ok(listener) => serve::serve(listener, Arc::new(broker), shutdown).await,
                    Err(e) => tracing::error!(error = %e, "model broker: cannot serve its socket"),
                }
            });
        })
}

/// Where a child's model calls reach the broker from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seat {
    /// `corral-agent rpc --model-socket`: its HTTP client connects through
    /// the socket, whatever the URL's host.
    Agent,
    /// A third-party agent under `sandbox-exec --model-socket`: through
    /// the relay on `127.0.0.1:3129` in its network namespace.
    ThirdParty,
}

/// `env` with the provider variables pointing at the broker: both base
/// URLs, and both keys set to `secret` (the spawn's placeholder). Any
/// value of those names already in `env` is replaced.
pub fn child_env(
    mut env: Vec<(OsString, OsString)>,
    secret: &str,
    seat: Seat,
) -> Vec<(OsString, OsString)> {
    let base = match seat {
        Seat::Agent => BROKER_SOCKET_URL,
        Seat::ThirdParty => BROKER_RELAY_URL,
    };
    let set = [
        (Provider::Anthropic.key_env(), secret.to_string()),
        (
            Provider::Anthropic.base_env(),
            format!("{base}{ANTHROPIC_PREFIX}"),
        ),
        (Provider::OpenAi.key_env(), secret.to_string()),
        (
            Provider::OpenAi.base_env(),
            format!("{base}{OPENAI_PREFIX}"),
        ),
    ];
    env.retain(|(name, _)| !set.iter().any(|(n, _)| name == n));
    env.extend(set.into_iter().map(|(n, v)| (n.into(), v.into())));
    env
}

#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod tests;
