//! corral-agent: a coding agent (providers, tools, agent loop, compaction,
//! session journal) behind stdio RPC front-ends, optionally inside its own
//! sandbox.

pub mod agent;
pub mod agent_args;
pub mod cli;
pub mod egress;
pub mod mcp;
pub mod prompt;
pub mod provider;
pub mod rpc;
pub mod runtime;
pub mod sandbox;
pub mod setup;
pub mod spare;
pub mod stdin_prompt;
pub mod template;
pub mod tools;
pub mod transcript;
