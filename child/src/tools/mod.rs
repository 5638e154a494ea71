//! The tools the model may call. One file per tool; this module owns the
//! shared contract ([`Tool`], [`ToolContext`], [`ToolOutput`]), the set of
//! enabled tools ([`ToolSet`]) and path resolution. Argument parsing lives in
//! `args`, output truncation in `truncate`.

mod args;
mod bash;
mod client_files;
mod edit;
mod find;
mod grep;
pub mod group;
mod ls;
mod plan;
mod read;
mod truncate;
mod write;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::permission::Class;
use crate::provider::ToolSpec;
use crate::sandbox::ToolConfinement;
use crate::transcript::Block;

pub use args::{ArgError, Args};
pub use bash::BashTool;
pub use client_files::ClientFiles;
pub use edit::EditTool;
pub use find::FindTool;
pub use grep::GrepTool;
pub use ls::LsTool;
pub use plan::PlanTool;
pub use read::ReadTool;
pub use truncate::{cut_line, truncate_text, HeadTail};
pub use write::WriteTool;

/// Every tool name, in the order their specs are offered to the model.
pub const ALL_TOOL_NAMES: [&str; 8] = [
    "read", "write", "edit", "bash", "ls", "find", "grep", "plan",
];

/// What a tool run may use.
#[derive(Clone)]
pub struct ToolContext {
    /// The agent's working directory; relative paths resolve against it.
    pub cwd: PathBuf,
    /// What commands started by the tool give up (network, capabilities).
    pub confinement: ToolConfinement,
    /// Cancelled on abort: the tool must stop promptly (and kill any
    /// process group it started).
    pub cancel: CancellationToken,
    /// Progress lines, shown to clients as `tool_progress`.
    pub progress: mpsc::UnboundedSender<String>,
    /// The client's files, when it offers them (text goes through it).
    pub files: Option<Arc<dyn ClientFiles>>,
}

impl ToolContext {
    /// The client, when it can read files.
    pub fn client_reader(&self) -> Option<Arc<dyn ClientFiles>> {
        self.files.clone().filter(|files| files.can_read())
    }

    /// The client, when it can write files.
    pub fn client_writer(&self) -> Option<Arc<dyn ClientFiles>> {
        self.files.clone().filter(|files| files.can_write())
    }
}

/// One plan item of the `plan` tool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanItem {
    pub step: String,
    pub status: String,
}

/// A new session checklist produced by the `plan` tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanUpdate {
    pub explanation: Option<String>,
    pub plan: Vec<PlanItem>,
}

/// The result the model sees.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput {
    pub content: Vec<Block>,
    pub is_error: bool,
    /// Set only by the `plan` tool.
    pub plan: Option<PlanUpdate>,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: vec![Block::text(text)],
            is_error: false,
            plan: None,
        }
    }

    pub fn error(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: vec![Block::text(text)],
            is_error: true,
            plan: None,
        }
    }
}

/// A tool the model may call. Failures are `is_error` outputs, never panics.
pub trait Tool: Send + Sync {
    fn name(&self) -> &'static str;
    fn spec(&self) -> ToolSpec;
    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput>;
}

/// The tool called `name`, if there is one.
fn tool_by_name(name: &str) -> Option<Arc<dyn Tool>> {
    let tool: Arc<dyn Tool> = match name {
        "read" => Arc::new(ReadTool),
        "write" => Arc::new(WriteTool),
        "edit" => Arc::new(EditTool),
        "bash" => Arc::new(BashTool),
        "ls" => Arc::new(LsTool),
        "find" => Arc::new(FindTool),
        "grep" => Arc::new(GrepTool),
        "plan" => Arc::new(PlanTool),
        _ => return None,
    };
    Some(tool)
}

/// A tool name that is not one of [`ALL_TOOL_NAMES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool `{name}`; valid tools are: {}", ALL_TOOL_NAMES.join(", "))]
pub struct UnknownTool {
    pub name: String,
}

/// The tools enabled for a session: the built-in ones in [`ALL_TOOL_NAMES`]
/// order, then those of the session's MCP servers.
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: Vec<Arc<dyn Tool>>,
    /// The MCP servers whose tools the session offers.
    mcp: Option<Arc<dyn ExternalTools>>,
}

/// Tools that come from elsewhere and change at run time (the session's
/// MCP servers, `crate::mcp::McpHub`), known by name.
pub trait ExternalTools: Send + Sync {
    fn is_empty(&self) -> bool;
    /// Waits until the tools are listed (or `cancel` fires).
    fn ready<'a>(&'a self, cancel: &'a CancellationToken) -> BoxFuture<'a, ()>;
    fn specs(&self) -> Vec<ToolSpec>;
    fn names(&self) -> Vec<String>;
    fn has(&self, name: &str) -> bool;
    /// Whether the tool's owner marks it read-only.
    fn read_only(&self, name: &str) -> bool;
    fn call(
        self: Arc<Self>,
        name: String,
        args: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ToolOutput>;
}

/// Whether a `--tools` entry names MCP tools (`mcp`, `mcp__…`) rather than
/// a built-in tool.
pub fn is_mcp_entry(name: &str) -> bool {
    name == "mcp" || name.starts_with("mcp__")
}

impl ToolSet {
    /// Every tool.
    pub fn all() -> ToolSet {
        ToolSet {
            tools: ALL_TOOL_NAMES
                .iter()
                .filter_map(|n| tool_by_name(n))
                .collect(),
            mcp: None,
        }
    }

    /// No tools at all (a chat-only session).
    pub fn none() -> ToolSet {
        ToolSet::default()
    }

    /// The named tools; duplicates are ignored, order follows
    /// [`ALL_TOOL_NAMES`]. Fails on the first unknown name. MCP entries
    /// (`mcp`, `mcp__…`) are left to the MCP selection.
    pub fn select(names: &[String]) -> Result<ToolSet, UnknownTool> {
        let names: Vec<String> = names.iter().filter(|n| !is_mcp_entry(n)).cloned().collect();
        if let Some(bad) = names.iter().find(|n| tool_by_name(n).is_none()) {
            return Err(UnknownTool { name: bad.clone() });
        }
        let tools = ALL_TOOL_NAMES
            .iter()
            .filter(|n| names.iter().any(|m| m == *n))
            .filter_map(|n| tool_by_name(n))
            .collect();
        Ok(ToolSet { tools, mcp: None })
    }

    /// These tools and those of the `hub`'s servers.
    pub fn with_mcp(mut self, hub: Arc<dyn ExternalTools>) -> ToolSet {
        // Kept even when empty: an ACP editor's servers may join later.
        self.mcp = Some(hub);
        self
    }

    /// Waits until the MCP servers were tried once (their tools listed).
    pub async fn ready(&self, cancel: &CancellationToken) {
        if let Some(hub) = &self.mcp {
            hub.ready(cancel).await;
        }
    }

    /// The specs to offer the model.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self.tools.iter().map(|t| t.spec()).collect();
        if let Some(hub) = &self.mcp {
            specs.extend(hub.specs());
        }
        specs
    }

    /// Whether the model may call `name`.
    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some() || self.mcp.as_ref().is_some_and(|hub| hub.has(name))
    }

    /// How the permission gate treats a call of `name`.
    pub fn class(&self, name: &str) -> Class {
        match &self.mcp {
            Some(hub) if hub.has(name) => Class::External {
                read_only: hub.read_only(name),
            },
            _ => Class::of(name),
        }
    }

    /// Every name the model may call: built-in, then MCP.
    pub fn all_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.names().into_iter().map(String::from).collect();
        if let Some(hub) = &self.mcp {
            names.extend(hub.names());
        }
        names
    }

    /// The enabled tool called `name`.
    pub fn get(&self, name: &str) -> Option<&dyn Tool> {
        self.tools
            .iter()
            .find(|t| t.name() == name)
            .map(|t| t.as_ref())
    }

    /// The names of the enabled tools.
    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|t| t.name()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.mcp.as_ref().is_none_or(|hub| hub.is_empty())
    }

    /// Runs the tool the model called; a tool that is not enabled becomes an
    /// error output the model can read, so the turn can go on.
    pub fn call(
        &self,
        name: &str,
        args: Value,
        ctx: ToolContext,
    ) -> BoxFuture<'static, ToolOutput> {
        match (self.get(name), &self.mcp) {
            (Some(tool), _) => tool.run(args, ctx),
            (None, Some(hub)) if hub.has(name) => {
                Arc::clone(hub).call(name.to_string(), args, ctx.cancel)
            }
            (None, _) => {
                let msg = format!(
                    "unknown tool `{name}`; available tools: {}",
                    self.all_names().join(", ")
                );
                Box::pin(async move { ToolOutput::error(msg) })
            }
        }
    }
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.all_names()).finish()
    }
}

/// `path` as given by the model, resolved against `cwd`; absolute paths are
/// used as they are. `.` and `..` components are kept (the OS resolves them).
pub fn resolve_path(cwd: &Path, path: &str) -> PathBuf {
    let path = Path::new(path);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    }
}

/// How a path is shown to the model: relative to `cwd` when it lies under
/// it (`.` for `cwd` itself), absolute otherwise.
pub fn display_path(cwd: &Path, path: &Path) -> String {
    match path.strip_prefix(cwd) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    //! A [`ToolContext`] over a temp dir, and output accessors.

    use super::*;

    pub fn context(cwd: &Path) -> (ToolContext, mpsc::UnboundedReceiver<String>) {
        let (progress, rx) = mpsc::unbounded_channel();
        let ctx = ToolContext {
            cwd: cwd.to_path_buf(),
            confinement: ToolConfinement::none(),
            cancel: CancellationToken::new(),
            progress,
            files: None,
        };
        (ctx, rx)
    }

    /// The concatenated text blocks of an output.
    pub fn text(out: &ToolOutput) -> String {
        out.content
            .iter()
            .filter_map(|b| match b {
                Block::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_has_every_tool_with_a_matching_object_schema() {
        let set = ToolSet::all();
        assert_eq!(set.names(), ALL_TOOL_NAMES.to_vec());
        for spec in set.specs() {
            assert!(set.get(&spec.name).is_some(), "{}", spec.name);
            assert_eq!(spec.input_schema["type"], "object", "{}", spec.name);
            assert!(spec.input_schema["properties"].is_object(), "{}", spec.name);
            assert!(!spec.description.is_empty());
        }
    }

    #[test]
    fn select_keeps_canonical_order_and_drops_duplicates() {
        let names: Vec<String> = ["grep", "read", "grep"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let set = ToolSet::select(&names).unwrap();
        assert_eq!(set.names(), vec!["read", "grep"]);
        assert!(set.get("bash").is_none());
    }

    #[test]
    fn select_rejects_unknown_names_listing_valid_ones() {
        let err = ToolSet::select(&["read".into(), "rm".into()]).unwrap_err();
        assert_eq!(err.name, "rm");
        let msg = err.to_string();
        assert!(
            msg.contains("`rm`") && msg.contains("read, write, edit, bash"),
            "{msg}"
        );
    }

    #[test]
    fn none_is_empty() {
        assert!(ToolSet::none().is_empty());
        assert!(ToolSet::none().specs().is_empty());
    }

    #[tokio::test]
    async fn calling_a_disabled_tool_is_an_error_output() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, _rx) = test_support::context(dir.path());
        let set = ToolSet::select(&["ls".into()]).unwrap();
        let out = set
            .call("bash", serde_json::json!({"command": "true"}), ctx)
            .await;
        assert!(out.is_error);
        assert!(test_support::text(&out).contains("available tools: ls"));
    }

    #[test]
    fn paths_resolve_against_cwd_unless_absolute() {
        let cwd = Path::new("/srv/proj");
        assert_eq!(
            resolve_path(cwd, "src/a.rs"),
            PathBuf::from("/srv/proj/src/a.rs")
        );
        assert_eq!(resolve_path(cwd, "/etc/hosts"), PathBuf::from("/etc/hosts"));
        assert_eq!(
            display_path(cwd, Path::new("/srv/proj/src/a.rs")),
            "src/a.rs"
        );
        assert_eq!(display_path(cwd, Path::new("/srv/proj")), ".");
        assert_eq!(display_path(cwd, Path::new("/etc/hosts")), "/etc/hosts");
    }
}
