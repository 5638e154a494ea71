//! Child-process plumbing: spawning `corral-agent rpc` in its own process
//! group with a scrubbed environment, its stdio pumps, the `hello`
//! handshake, graceful stop, and the pure restart policy. Supervision
//! (when to restart, idle reaping, state) belongs to the hub
//! ([`crate::hub`]), which drives these pieces.
//!
//! - [`child`] – [`ChildProcess`]: spawn, send lines, signal, stop, wait.
//! - `stdio` – the child's stdin and stdout: one socket pair and its pumps.
//! - [`stderr_log`] – the child's stderr: a file it writes itself, followed
//!   into the gateway's log and cut when it grows too big.
//! - [`mod@env`] – the allowlisted environment a child gets.
//! - [`backoff`] – [`RestartPolicy`] and [`CrashHistory`]: jittered
//!   exponential backoff with a crash-loop cutoff (no I/O).
//! - [`handshake`] – the gateway's `hello` and its random token.
//! - [`limits`] – per-child memory and pids limits (cgroup v2, cgroup v1
//!   or rlimits) and the task that kills a child that hit one.
//! - [`leftovers`] – finds and kills every process an ended child started
//!   (its session, and orphans reparented to the gateway as subreaper).
//! - `start` – one child started (blocking, on the spawner thread): its
//!   limits, stdio and stderr prepared, forked or executed, registered.
//! - [`spares`] – spare agents started ahead of any project, which cold
//!   starts take instead of starting a process (`--spare-agents`).
//! - [`spawner`] – the thread every child is started on, and the bound on
//!   children starting at once.
//! - `launched` – what a child executes, prepared before it starts, and
//!   the handle it is waited on and killed by.
//! - [`probe`] – the start-up check that the agent sandbox works here.
//! - `template` – the agent's template, which forks each `corral-agent`
//!   child instead of the gateway executing it.
//! - `sys` – starting a child (a clone sharing the gateway's memory until
//!   `exec`) and what it does before `exec`: directory, cgroups, rlimits,
//!   user, no-new-privileges, parent-death signal.

pub mod backoff;
pub mod child;
pub mod env;
pub mod handshake;
mod launched;
pub mod leftovers;
pub mod limits;
pub mod probe;
pub mod spares;
pub mod spawner;
mod spec;
mod start;
pub mod stderr_log;
mod stdio;
mod sys;
mod template;

pub use backoff::{CrashHistory, Decision, InvalidPolicy, RestartPolicy};
pub use child::{
    ChildGone, ChildOutput, ChildProcess, Confine, ExitInfo, LineRefused, SpawnError, SpawnSpec,
    Start,
};
pub use env::{child_env, DEFAULT_ALLOWED, TOKEN_VAR};
pub use handshake::{hello, random_token, HandshakeError, HELLO_ID};
pub use limits::{LimitHit, Limits};
pub use stderr_log::{StderrLog, StderrTail, STDERR_TAIL_LINES};
pub use sys::Credentials;

#[cfg(test)]
mod test_support;
