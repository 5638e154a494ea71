//! Wire types of the corral RPC dialects and NDJSON framing.
//!
//! No I/O policy lives here: only what the bytes on the wire look like, how
//! lines are cut, and the typed errors for input that does not fit.

pub mod ndjson;
pub mod zut;
