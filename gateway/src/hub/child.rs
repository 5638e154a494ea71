//! The hub's view of its child: what it does with a running child
//! ([`ChildControl`]) and how a child comes to exist ([`Launcher`]). The
//! real ones are a [`ChildProcess`] and the agent launcher (`launch`);
//! the hub's unit tests give it a fake.
//!
//! Nothing here blocks the hub: a line for the child is queued without
//! waiting ([`ChildControl::try_send`]), and starting and stopping are
//! futures the hub's loop polls next to its commands.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nix::sys::signal::Signal;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::gateway_id::GatewayId;
use crate::process::{ChildOutput, ChildProcess, ExitInfo, LimitHit, LineRefused, StderrTail};

/// A future the hub owns and polls in its loop.
pub(super) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Why a line could not be queued for the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SendError {
    /// The child's stdin queue is full: it is not reading.
    Full,
    /// Its stdin is closed (it is stopping or gone).
    Gone,
}

/// What the hub does with a running child.
pub(super) trait ChildControl: Send + Sync + 'static {
    fn pid(&self) -> u32;
    /// Queues one line (ending in LF) for the child's stdin, without
    /// waiting.
    fn try_send(&self, line: Bytes) -> Result<(), SendError>;
    /// Kills the child at once (it stopped answering pings); its exit
    /// arrives on its output.
    fn kill(&self);
    /// Stops the child gracefully (stdin EOF, then signals) and returns how
    /// it ended.
    fn stop(self: Arc<Self>, grace: Duration) -> BoxFuture<ExitInfo>;
    /// The last lines of its stderr, shared.
    fn stderr_tail(&self) -> StderrTail;
    /// The resource limit it hit, if it was killed for one.
    fn limit_hit(&self) -> Option<LimitHit>;
}

impl ChildControl for ChildProcess {
    fn pid(&self) -> u32 {
        ChildProcess::pid(self)
    }

    fn try_send(&self, line: Bytes) -> Result<(), SendError> {
        ChildProcess::try_send(self, line).map_err(|refused| match refused {
            LineRefused::Full => SendError::Full,
            LineRefused::Gone => SendError::Gone,
        })
    }

    fn kill(&self) {
        self.signal_group(Signal::SIGKILL);
    }

    fn stop(self: Arc<Self>, grace: Duration) -> BoxFuture<ExitInfo> {
        Box::pin(async move { ChildProcess::stop(&self, grace).await })
    }

    fn stderr_tail(&self) -> StderrTail {
        ChildProcess::stderr_tail(self)
    }

    fn limit_hit(&self) -> Option<LimitHit> {
        ChildProcess::limit_hit(self)
    }
}

/// Why a child did not become ready.
#[derive(Debug)]
pub(super) struct StartError {
    pub message: String,
    pub kind: StartFailure,
}

/// What a failed start means for the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StartFailure {
    /// Counts as a crash: retried with backoff.
    Crash,
    /// The session runs in another agent process: not a crash, no retry.
    Elsewhere,
    /// The gateway cannot start it now (it is at its open-file limit):
    /// not the agent's fault, so not a crash; clients are told to try
    /// again later and the hub ends, leaving the descriptors to others.
    Unavailable,
    /// The project may not run (its directory is no longer a real
    /// directory under the root): clients are told and the hub ends.
    Refused,
}

impl StartError {
    pub fn crash(message: impl Into<String>) -> StartError {
        StartError {
            message: message.into(),
            kind: StartFailure::Crash,
        }
    }
}

/// A child that answered its greeting.
pub(super) struct Launched {
    pub control: Arc<dyn ChildControl>,
    pub output: mpsc::Receiver<ChildOutput>,
    /// Its hello data (or `ready` frame).
    pub hello: Map<String, Value>,
}

/// How a hub gets a child.
pub(super) trait Launcher: Send + 'static {
    /// Starts a child and waits for its greeting. Dropping the future
    /// abandons the start and kills whatever it started.
    fn launch(&mut self) -> BoxFuture<Result<Launched, StartError>>;
}

/// A ready child, as the hub keeps it.
pub(super) struct Running {
    pub control: Arc<dyn ChildControl>,
    pub output: mpsc::Receiver<ChildOutput>,
    /// Id of the health ping in flight.
    pub ping_id: Option<GatewayId>,
    /// When that ping counts as unanswered.
    pub ping_deadline: Option<Instant>,
    /// Killed because it stopped answering pings.
    pub hung: bool,
}

impl Running {
    pub fn new(launched: Launched) -> Running {
        Running {
            control: launched.control,
            output: launched.output,
            ping_id: None,
            ping_deadline: None,
            hung: false,
        }
    }
}
