//! corral-agent: a coding agent (providers, tools, agent loop, compaction,
//! session journal) behind stdio RPC front-ends.

pub mod agent;
pub mod cli;
pub mod prompt;
pub mod provider;
pub mod rpc;
pub mod setup;
pub mod tools;
pub mod transcript;
