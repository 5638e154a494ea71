//! `corral attach URL`: bridges this process's stdin/stdout to one project
//! on a gateway, so a tool that expects to spawn a local stdio agent
//! (`zut rpc`-style NDJSON) can drive a remote one.
//!
//! Start: the token comes from `--token-file` (first non-comment line),
//! else `--token` / `CORRAL_TOKEN`; none is exit 2. It goes out twice: as
//! `Authorization: Bearer` on the upgrade request (ws:// or wss://) and in
//! the first frame, `{"id":..,"type":"hello","token":..}`. The hello answer
//! is awaited for a bounded time; a failed connect, an HTTP refusal, a
//! refused hello or a close before the answer is one line on stderr and
//! exit 1. A URL that is not ws/wss is exit 2.
//!
//! Then frames pass both ways. Each stdin line (LF-terminated, CR
//! stripped, blank lines skipped, at most [`MAX_LINE`] bytes) becomes one
//! text frame, byte for byte; each text frame becomes one stdout line with
//! U+2028/U+2029 escaped, flushed per line. stdout carries only protocol
//! lines; diagnostics go to stderr. Answered locally, never forwarded:
//! - a line that is not a JSON object (or is too long): an error response
//!   `{"type":"response","success":false,"error":..}`, as the agent sends;
//! - a `hello` (a tool that sets `ZUTCORE_RPC_TOKEN` for a local child sends
//!   one): success with the gateway's hello data and the tool's `id`. The
//!   session is already authenticated, so its token is not checked.
//!
//! End:
//! - stdin closes: requests still awaiting a response and runs in progress
//!   (`inflight`) are let finish, for at most [`DRAIN_GRACE`]; then a
//!   normal close (1000) and exit 0.
//! - the gateway closes: 1000/1001 is exit 0; any other code is printed
//!   with its reason on stderr, exit 1. A socket error is exit 1 too.
//! - stdout is closed by the reader: normal close, exit 0 (a broken pipe is
//!   not an error).
//! - SIGINT/SIGTERM: normal close (1000), then exit 130/143 (128 + signal,
//!   what a shell reports for a process killed by it). A run in progress is
//!   not aborted: it belongs to the project, which other clients may share;
//!   send `abort` first to stop it.
//!
//! There is no reconnect: a lost connection ends the process, and the tool
//! restarts it as it would restart a crashed local child.
//!
//! `--dialect letscode|zi` (the gateway's dialect) bridges a letscode-rpc/1
//! or Zi RPC v1 tool the same way. The token goes in the header only; the
//! gateway's `ready` (sent at once) is the first stdout line, as from a
//! local child. The `local` module says what is answered here. When stdin closes,
//! a letscode session sends `bye` and ends when the gateway closes it,
//! after the active run (its `agent_end`, then `bye` on stdout); a Zi
//! session closes at once (the client left).
//!
//! `--own-runs` asks the gateway for this session's own runs only (the
//! `own_runs=true` query parameter): another client's reply and its
//! `done` never reach the tool.

mod bridge;
mod connect;
mod local;

use std::future::pending;
use std::time::Duration;

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::config::AttachArgs;

pub use connect::AttachError;

/// Longest stdin line, in bytes (without the LF).
pub const MAX_LINE: usize = corral_protocol::ndjson::DEFAULT_MAX_LINE;
/// After stdin closes, how long work in flight may take to finish.
pub const DRAIN_GRACE: Duration = Duration::from_secs(120);
/// How long a close handshake may take.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The session ended normally.
pub const EXIT_OK: i32 = 0;
/// The gateway could not be reached, refused us, or closed abnormally.
pub const EXIT_FAILURE: i32 = 1;
/// The invocation is wrong: no token, unreadable token file, bad URL.
pub const EXIT_USAGE: i32 = 2;
/// Ended by SIGINT (128 + 2).
pub const EXIT_SIGINT: i32 = 130;
/// Ended by SIGTERM (128 + 15).
pub const EXIT_SIGTERM: i32 = 143;

/// Runs the bridge; returns the exit code. Failures are reported on stderr
/// here, so the caller only exits with the code.
pub async fn run(args: AttachArgs) -> anyhow::Result<i32> {
    let mut signals = Signals::install();
    let token = match connect::token(&args) {
        Ok(token) => token,
        Err(e) => return Ok(fail(&e)),
    };
    let session = tokio::select! {
        session = connect::open(&args.url, &token, args.dialect, args.own_runs) => session,
        exit = signals.next() => return Ok(exit),
    };
    let mut session = match session {
        Ok(session) => session,
        Err(e) => return Ok(fail(&e)),
    };
    let gateway = &session.hello["gateway"];
    tracing::debug!(
        url = %args.url,
        client_id = %gateway["client_id"],
        last_seq = %gateway["last_seq"],
        "attached"
    );
    let early = std::mem::take(&mut session.early);
    let bridge = bridge::Bridge::new(session, args.dialect);
    Ok(bridge.run(early, bridge::read_stdin(), &mut signals).await)
}

fn fail(error: &AttachError) -> i32 {
    eprintln!("corral attach: {error}");
    error.exit_code()
}

/// SIGINT and SIGTERM, once installed; a signal that cannot be watched
/// keeps its default action.
pub struct Signals {
    int: Option<Signal>,
    term: Option<Signal>,
}

impl Signals {
    fn install() -> Signals {
        let watch = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(signal) => Some(signal),
            Err(e) => {
                tracing::warn!("cannot watch {name}: {e}");
                None
            }
        };
        Signals {
            int: watch(SignalKind::interrupt(), "SIGINT"),
            term: watch(SignalKind::terminate(), "SIGTERM"),
        }
    }

    /// Waits for the next signal; returns the exit code it calls for.
    pub async fn next(&mut self) -> i32 {
        tokio::select! {
            () = wait(&mut self.int) => {
                tracing::info!("SIGINT: closing the session");
                EXIT_SIGINT
            }
            () = wait(&mut self.term) => {
                tracing::info!("SIGTERM: closing the session");
                EXIT_SIGTERM
            }
        }
    }
}

async fn wait(signal: &mut Option<Signal>) {
    // `None` from `recv` means the signal driver is gone: wait forever.
    if let Some(signal) = signal {
        if signal.recv().await.is_some() {
            return;
        }
    }
    pending().await
}
