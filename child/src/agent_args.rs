//! The flags every mode of `corral-agent` shares ([`AgentArgs`]): provider,
//! model, session, sandbox, tools. Apart from the command line ([`crate::cli`])
//! because what builds the agent from them ([`crate::setup`]) sits below the
//! front-ends that the command line chooses between.

use std::path::PathBuf;

use clap::Args;
use corral_protocol::zut::ReasoningLevel;

/// Whether and how tool commands may use the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolNetwork {
    /// The agent's own network.
    On,
    /// None: each command runs in an empty network namespace.
    Off,
    /// Only through the gateway's HTTP(S) proxy (--egress-socket).
    Proxy,
}

/// Whether a project's own `.mcp.json` is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ProjectMcpConfig {
    /// Used: its servers join those of --mcp-config.
    On,
    /// Ignored (repository content may not start programs).
    #[default]
    Off,
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
    /// Comma-separated tools to offer (default: all). MCP tools: `mcp`
    /// (all), `mcp__SERVER` (one server's), `mcp__SERVER__TOOL` (one); a
    /// list without them offers none.
    #[arg(long, value_delimiter = ',')]
    pub tools: Option<Vec<String>>,
    /// Do not load AGENTS.md / CLAUDE.md context files.
    #[arg(long)]
    pub no_context_files: bool,
    /// Session journal (JSONL): loaded at start, appended on every change.
    #[arg(long, value_name = "FILE", overrides_with = "no_session")]
    pub session: Option<PathBuf>,
    /// Keep no journal (the default; Zi's spelling). The later of
    /// --session and --no-session wins.
    #[arg(long, overrides_with = "session")]
    pub no_session: bool,
    /// Confine the agent and its tools to the project (Landlock + user,
    /// mount, pid and ipc namespaces): writes only in the project and a
    /// private /tmp, no view of other processes. Off unless given: a
    /// standalone agent acts for its own user, who chose the project; the
    /// gateway turns it on for every child.
    #[arg(long)]
    pub sandbox: bool,
    /// With --sandbox: a path made empty and unreadable inside (repeatable).
    /// The directory of --session is hidden too. A directory stays hidden
    /// whatever happens to the files in it; a file is covered where it is,
    /// which a host rename over it (mv, sed -i, an editor) undoes for a
    /// running agent, so name the directory holding it instead.
    #[arg(long = "sandbox-hide", value_name = "PATH", requires = "sandbox")]
    pub sandbox_hide: Vec<PathBuf>,
    /// Network for tool commands. off (needs --sandbox) runs each command
    /// in an empty network namespace; proxy (needs --sandbox and
    /// --egress-socket) does too, with the gateway's HTTP(S) proxy as the
    /// only way out, at HTTP_PROXY/HTTPS_PROXY (127.0.0.1:3128 inside). The
    /// agent's model calls keep the network.
    #[arg(long, value_enum, default_value_t = ToolNetwork::On,
        requires_ifs = [("off", "sandbox"), ("proxy", "sandbox")])]
    pub tool_network: ToolNetwork,
    /// With --tool-network proxy: the gateway's egress socket (a Unix
    /// socket, opened before the sandbox hides it). The secret that opens
    /// it comes in CORRAL_EGRESS_SECRET, which no tool inherits.
    #[arg(long, value_name = "PATH", required_if_eq("tool_network", "proxy"))]
    pub egress_socket: Option<PathBuf>,
    /// The gateway's model-key broker (a Unix socket, opened before the
    /// sandbox hides it): model calls go through it, with the placeholder
    /// key and the base URL the gateway set in the environment. With
    /// --sandbox the agent then runs without the host's network (tool
    /// commands need --tool-network off or proxy), and exports no traces.
    #[arg(long, value_name = "PATH")]
    pub model_socket: Option<PathBuf>,
    /// MCP servers whose tools the model may call, as
    /// {"mcpServers": {NAME: {"command", "args", "env"} | {"type": "http",
    /// "url", "headers"}}}. Stdio servers run like tool commands (in the
    /// sandbox with --sandbox); their tools are `mcp__NAME__TOOL`.
    #[arg(long, value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
    /// Also use the project's own .mcp.json (on), or not (off: a
    /// repository's content would otherwise choose programs to run).
    #[arg(long, value_enum, value_name = "on|off", default_value_t = ProjectMcpConfig::Off)]
    pub mcp_project_config: ProjectMcpConfig,
    /// Seconds an MCP tool call may take before it is cancelled (a
    /// server's "timeout" overrides it).
    #[arg(long, value_name = "SECS", default_value_t = crate::mcp::DEFAULT_CALL_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub mcp_timeout: u64,
    /// Export OpenTelemetry traces (one per prompt: model calls, tool calls,
    /// waits) over OTLP/HTTP to this base URL, e.g. http://127.0.0.1:4318.
    /// Off unless given, here or in OTEL_EXPORTER_OTLP_ENDPOINT.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

/// The variable `--otlp-endpoint` falls back to.
pub const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

impl AgentArgs {
    /// `--otlp-endpoint`, else [`OTLP_ENDPOINT_ENV`] when set and not
    /// empty. The variable is read when asked, not by the parser: a spare
    /// agent makes its parser before its assignment brings the
    /// environment.
    pub fn otlp_endpoint(&self) -> Option<String> {
        self.otlp_endpoint.clone().or_else(|| {
            std::env::var(OTLP_ENDPOINT_ENV)
                .ok()
                .filter(|url| !url.is_empty())
        })
    }
}
