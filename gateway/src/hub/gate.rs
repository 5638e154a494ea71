//! What the gateway checks before a client's prompt (a request that starts
//! a run) reaches the child, beyond the dialect's own rules: per-identity
//! rate limits and budgets. The hub asks its [`Gate`]; a refusal is
//! answered as the dialect answers a failed request, and the child never
//! sees the prompt.

use std::fmt;

use crate::access::Identity;

/// A prompt that may not start.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The `reason` label of `corral_prompts_refused_total`.
    pub reason: &'static str,
    /// What the client is told.
    pub message: String,
}

/// Decides whether `who` may start a run on `project` now.
pub trait Gate: Send + Sync + fmt::Debug {
    fn prompt(&self, project: &str, who: &Identity) -> Result<(), Refusal>;
}

/// A gate that lets every prompt through.
#[derive(Debug, Default)]
pub struct Open;

impl Gate for Open {
    fn prompt(&self, _: &str, _: &Identity) -> Result<(), Refusal> {
        Ok(())
    }
}
