//! Command-line interface: `corral-agent rpc` and `corral-agent run`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use corral_protocol::ndjson::DEFAULT_MAX_LINE;
use corral_protocol::zut::ReasoningLevel;

#[derive(Debug, Parser)]
#[command(
    name = "corral-agent",
    version,
    about = "A coding agent that speaks zut RPC v1 on stdio"
)]
pub struct Cli {
    #[command(subcommand)]
    pub mode: Mode,
}

#[derive(Debug, Subcommand)]
pub enum Mode {
    /// Serve zut RPC v1: NDJSON commands on stdin, responses and events on stdout.
    Rpc {
        #[command(flatten)]
        agent: AgentArgs,
        /// Wire dialect on stdio: zut (zut RPC v1), letscode (letscode-rpc/1) or zi (Zi RPC v1).
        #[arg(long, value_enum, default_value_t = Dialect::Zut)]
        dialect: Dialect,
        /// Longest accepted input line, in bytes.
        #[arg(long, default_value_t = DEFAULT_MAX_LINE, value_name = "BYTES")]
        max_line_bytes: usize,
        /// After stdin closes, seconds queued prompts may run before they are aborted.
        #[arg(long, default_value_t = 120, value_name = "SECS")]
        eof_grace: u64,
        /// Zi: ordinary operations that may be in flight at once (a gateway
        /// that bounds each of its clients raises it).
        #[arg(long, default_value_t = crate::rpc::zi::MAX_IN_FLIGHT, value_name = "N",
            value_parser = clap::value_parser!(usize))]
        max_in_flight: usize,
    },
    /// Run one prompt and print the reply text to stdout.
    Run {
        #[command(flatten)]
        agent: AgentArgs,
        /// The prompt.
        prompt: String,
    },
}

/// The RPC dialects the child speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dialect {
    Zut,
    Letscode,
    Zi,
}

/// Flags shared by every mode.
#[derive(Debug, Clone, Args)]
pub struct AgentArgs {
    /// LLM backend: anthropic, openai, or echo (offline: replies with the prompt's text).
    #[arg(long, default_value = "anthropic")]
    pub provider: String,
    /// Model id (defaults to the provider's default model).
    #[arg(long)]
    pub model: Option<String>,
    /// Working directory for tools and context files (default: the current directory).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// API key (default: ANTHROPIC_API_KEY or OPENAI_API_KEY).
    #[arg(long)]
    pub api_key: Option<String>,
    /// API base URL (default: ANTHROPIC_BASE_URL or OPENAI_BASE_URL, then the official endpoint).
    /// Anthropic's has no /v1; OpenAI's includes it (e.g. http://127.0.0.1:11434/v1).
    #[arg(long)]
    pub base_url: Option<String>,
    /// Replace the built-in system prompt (addenda are still appended).
    #[arg(long)]
    pub system_prompt: Option<String>,
    /// Text appended to the system prompt.
    #[arg(long)]
    pub append_system_prompt: Option<String>,
    /// Reasoning level: off, minimum, low, medium, high, xhigh, max.
    #[arg(long, default_value = "off")]
    pub reasoning: ReasoningLevel,
    /// Model calls one prompt may make before it stops.
    #[arg(long, default_value_t = 50)]
    pub max_steps: u32,
    /// Offer no tools to the model.
    #[arg(long, conflicts_with = "tools")]
    pub no_tools: bool,
    /// Comma-separated tools to offer (default: all).
    #[arg(long, value_delimiter = ',')]
    pub tools: Option<Vec<String>>,
    /// Do not load AGENTS.md / CLAUDE.md context files.
    #[arg(long)]
    pub no_context_files: bool,
    /// Session journal (JSONL): loaded at start, appended on every change.
    #[arg(long, value_name = "FILE")]
    pub session: Option<PathBuf>,
}
