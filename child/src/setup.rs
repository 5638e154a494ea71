//! Turns command-line flags and the environment into a ready agent:
//! provider credentials, tools, system prompt, session journal.
//!
//! Environment: `ANTHROPIC_API_KEY` / `OPENAI_API_KEY` and
//! `ANTHROPIC_BASE_URL` / `OPENAI_BASE_URL` when the flags are absent. The
//! child's home holds `config.json`: `$ZUT_HOME` when set (drop-in
//! compatibility), else `$CORRAL_HOME`, else `~/.corral`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::agent::journal::Journal;
use crate::agent::{Session, Settings};
use crate::agent_args::{AgentArgs, ProjectMcpConfig};
use crate::mcp::{self, McpHub, Selection, ServerConfig};
use crate::prompt::{PromptOptions, SystemPrompt};
use crate::provider::{self, catalogue, Provider};
use crate::sandbox::ToolConfinement;
use crate::tools::ToolSet;
use crate::transcript::Message;

/// Everything needed to start an agent.
pub struct Setup {
    pub provider: Arc<dyn Provider>,
    pub tools: ToolSet,
    pub settings: Settings,
    pub session: Session,
    /// A custom base URL serves models the catalogue does not know.
    pub allow_unknown_models: bool,
    /// The session's MCP servers (also inside `tools`): front-ends select
    /// servers, add an editor's and report their status.
    pub mcp: Arc<McpHub>,
}

/// What `main` opens before the sandbox closes, handed to [`build`].
#[derive(Debug, Default)]
pub struct Prepared {
    /// The session journal, opened and locked, with the transcript it holds.
    pub journal: Option<(Journal, Vec<Message>)>,
    /// What tool commands give up (nothing when the sandbox is off).
    pub tool_confinement: ToolConfinement,
    /// The gateway's model-key broker (`--model-socket`), opened `O_PATH`:
    /// model calls go through it.
    pub model_socket: Option<std::os::fd::OwnedFd>,
    /// The MCP servers configured (read before the sandbox may hide the
    /// config file).
    pub mcp_servers: Vec<ServerConfig>,
}

/// The project's MCP config file, used with `--mcp-project-config on`.
pub const PROJECT_MCP_CONFIG: &str = ".mcp.json";

/// Reads the MCP servers of `--mcp-config` and, when allowed, the
/// project's `.mcp.json` (a missing one is no error); `--mcp-config`'s win
/// a name both define.
pub fn load_mcp(args: &AgentArgs) -> Result<Vec<ServerConfig>, SetupError> {
    let mut servers = match &args.mcp_config {
        Some(path) => mcp::config::load(path)?,
        None => Vec::new(),
    };
    if args.mcp_project_config == ProjectMcpConfig::On {
        let path = resolve_cwd(args.cwd.as_deref())?.join(PROJECT_MCP_CONFIG);
        if path.is_file() {
            servers = mcp::config::merge(servers, mcp::config::load(&path)?);
        }
    }
    Ok(servers)
}

/// Opens (and locks) the `--session` journal, if any. Runs before the
/// sandbox, which hides the journal's directory.
pub fn open_journal(args: &AgentArgs) -> Result<Option<(Journal, Vec<Message>)>, SetupError> {
    match &args.session {
        Some(path) => Ok(Some(Journal::open(path)?)),
        None => Ok(None),
    }
}

/// Why the agent cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("--cwd {path}: {source}")]
    Cwd {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--cwd {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error(transparent)]
    Provider(#[from] provider::ProviderError),
    #[error("{0}")]
    Tools(String),
    #[error(transparent)]
    Journal(#[from] crate::agent::journal::JournalError),
    #[error("--mcp-config: {0}")]
    McpConfig(#[from] mcp::config::ConfigError),
    #[error(transparent)]
    McpServer(#[from] mcp::UnknownServer),
    #[error("unknown model {model:?} for provider {provider}; known models: {known}")]
    UnknownModel {
        model: String,
        provider: String,
        known: String,
    },
}

/// Exit code when the session journal is held by another agent process
/// (`EX_TEMPFAIL`): the session runs elsewhere, which a supervisor should
/// not mistake for a crash.
pub const EXIT_SESSION_IN_USE: u8 = 75;

impl SetupError {
    /// The process exit code for this error: [`EXIT_SESSION_IN_USE`] when
    /// the session is in use elsewhere, else 2.
    pub fn exit_code(&self) -> u8 {
        match self {
            SetupError::Journal(crate::agent::journal::JournalError::InUse { .. }) => {
                EXIT_SESSION_IN_USE
            }
            _ => 2,
        }
    }
}

pub fn build(args: &AgentArgs, prepared: Prepared) -> Result<Setup, SetupError> {
    let cwd = resolve_cwd(args.cwd.as_deref())?;
    if let Some(socket) = prepared.model_socket {
        provider::route_through_socket(socket);
    }
    let env_prefix = match args.provider.as_str() {
        "openai" => Some("OPENAI"),
        "anthropic" => Some("ANTHROPIC"),
        _ => None,
    };
    let from_env = |suffix: &str| {
        env_prefix
            .and_then(|prefix| std::env::var(format!("{prefix}_{suffix}")).ok())
            .filter(|v| !v.is_empty())
    };
    let api_key = args.api_key.clone().or_else(|| from_env("API_KEY"));
    let base_url = args.base_url.clone().or_else(|| from_env("BASE_URL"));
    let allow_unknown_models = base_url.is_some();
    let provider = provider::build(&args.provider, api_key, base_url)?;

    let model = args
        .model
        .clone()
        .unwrap_or_else(|| catalogue::default_model(provider.name()).to_string());
    if !allow_unknown_models && catalogue::find(provider.name(), &model).is_none() {
        return Err(SetupError::UnknownModel {
            known: catalogue::models(provider.name())
                .map(|m| m.id)
                .collect::<Vec<_>>()
                .join(", "),
            model,
            provider: provider.name().to_string(),
        });
    }

    let (tools, selection) = if args.no_tools {
        (ToolSet::none(), Selection::Only(Vec::new()))
    } else {
        match &args.tools {
            Some(names) => (
                ToolSet::select(names).map_err(|e| SetupError::Tools(e.to_string()))?,
                Selection::from_tools_flag(names),
            ),
            None => (ToolSet::all(), Selection::All),
        }
    };
    let hub = McpHub::new(
        prepared.mcp_servers,
        selection,
        cwd.clone(),
        prepared.tool_confinement.clone(),
        std::time::Duration::from_secs(args.mcp_timeout),
    )?;
    hub.start();
    let tools = tools.with_mcp(hub.clone());
    let prompt_options = PromptOptions {
        replace: args.system_prompt.clone(),
        append: args.append_system_prompt.clone(),
        // Read from config.json with the rest, on first use.
        ponytail: false,
        context_files: !args.no_context_files,
    };
    let system_prompt = SystemPrompt::lazy(cwd.clone(), tools.names(), prompt_options, home_dir());

    let mut session = Session::new(model, args.reasoning);
    if let Some((journal, messages)) = prepared.journal {
        session = session.with_journal(journal, messages);
    }
    Ok(Setup {
        provider,
        tools,
        settings: Settings {
            cwd,
            system_prompt,
            max_steps: args.max_steps.max(1),
            tool_confinement: prepared.tool_confinement,
            permission_mode: crate::agent::PermissionMode::Auto,
        },
        session,
        allow_unknown_models,
        mcp: hub,
    })
}

/// The working directory: `--cwd` or the current directory, canonical.
pub fn resolve_cwd(flag: Option<&Path>) -> Result<PathBuf, SetupError> {
    let path = match flag {
        Some(path) => path.to_path_buf(),
        None => std::env::current_dir().map_err(|source| SetupError::Cwd {
            path: PathBuf::from("."),
            source,
        })?,
    };
    let path = path.canonicalize().map_err(|source| SetupError::Cwd {
        path: path.clone(),
        source,
    })?;
    if !path.is_dir() {
        return Err(SetupError::NotADirectory(path));
    }
    Ok(path)
}

/// The child's home directory: `$ZUT_HOME`, `$CORRAL_HOME`, or `~/.corral`.
pub fn home_dir() -> PathBuf {
    for var in ["ZUT_HOME", "CORRAL_HOME"] {
        if let Some(dir) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            return PathBuf::from(dir);
        }
    }
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".corral")
}
