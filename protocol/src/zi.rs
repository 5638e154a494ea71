//! Zi RPC v1 constants shared by the agent and the gateway.

/// The only protocol version (every frame's `version`).
pub const VERSION: u64 = 1;
/// Longest request id, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// Ordinary operations one connection may have in flight at once (the
/// document's bound; an interruption is not counted).
pub const MAX_IN_FLIGHT: usize = 32;
