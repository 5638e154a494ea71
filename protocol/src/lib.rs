//! Wire types of the corral RPC dialects and NDJSON framing, and the line
//! format of the session journal (which the agent writes and `corral
//! journal` checks), and the model catalogue both the agent and the
//! gateway price model calls with.
//!
//! No I/O policy lives here: only what the bytes on the wire look like, how
//! lines are cut, and the typed errors for input that does not fit.

pub mod acp;
pub mod catalogue;
pub mod egress;
pub mod journal;
pub mod letscode;
pub mod ndjson;
pub mod permission;
pub mod template;
pub mod transcript;
pub mod zi;
pub mod zut;
