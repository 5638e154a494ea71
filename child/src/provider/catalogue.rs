//! The model catalogue (context window, output limit, reasoning support,
//! prices) and cost computation. They live in `corral_protocol::catalogue`,
//! shared with the gateway, whose model broker prices the usage providers
//! report with the same table; this module is the agent's name for them.

pub use corral_protocol::catalogue::{cost_usd, default_model, find, models, ModelInfo};
