//! The system prompt: identity and tool guidance (replaceable with
//! `--system-prompt`), then the addenda that always apply when enabled: the
//! coding-guidance ("ponytail") addendum, project context files and
//! `--append-system-prompt`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Context files looked up in the cwd and its ancestors, first match per
/// directory wins.
pub const CONTEXT_FILES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];
/// Bytes of one context file that go into the prompt.
pub const MAX_CONTEXT_FILE: usize = 64 * 1024;
/// Ancestor directories searched above the cwd (the walk also stops at a
/// directory holding `.git`).
const MAX_ANCESTORS: usize = 8;

const IDENTITY: &str = "You are corral-agent, a coding agent. You work in the user's project \
directory using the tools you are given: read files before changing them, make focused edits, \
run commands to check your work, and report what you did. Paths are relative to the working \
directory unless absolute.";

const PONYTAIL: &str = "Coding guidance:\n\
- Understand the existing code and its conventions before changing it; match its style.\n\
- Make the smallest change that solves the problem; do not refactor unrelated code.\n\
- Prefer `edit` for changes to existing files and `write` for new files.\n\
- After changing code, build and run the relevant tests; fix what you broke.\n\
- Never invent results: if a command fails or you are unsure, say so.\n\
- End with a short summary of what changed and anything left to do.";

/// What goes into the system prompt.
#[derive(Debug, Clone, Default)]
pub struct PromptOptions {
    /// `--system-prompt`: replaces the identity and tool guidance.
    pub replace: Option<String>,
    /// `--append-system-prompt`.
    pub append: Option<String>,
    /// The coding-guidance addendum (`ponytail_enabled` in config.json).
    pub ponytail: bool,
    /// Load AGENTS.md / CLAUDE.md (off with `--no-context-files`).
    pub context_files: bool,
}

/// Assembles the system prompt for a session in `cwd`.
pub fn system_prompt(cwd: &Path, tool_names: &[&str], options: &PromptOptions) -> String {
    let mut parts: Vec<String> = Vec::new();
    match &options.replace {
        Some(custom) => parts.push(custom.clone()),
        None => {
            parts.push(IDENTITY.to_string());
            if !tool_names.is_empty() {
                parts.push(format!("Available tools: {}.", tool_names.join(", ")));
            }
        }
    }
    if options.ponytail {
        parts.push(PONYTAIL.to_string());
    }
    parts.push(format!("Working directory: {}", cwd.display()));
    if options.context_files {
        for (path, text) in context_files(cwd) {
            parts.push(format!("Project instructions from {}:\n\n{}", path, text));
        }
    }
    if let Some(append) = &options.append {
        parts.push(append.clone());
    }
    parts.join("\n\n")
}

/// A session's system prompt, assembled when the first model request
/// needs it: its context files and the home's `config.json` are read then,
/// not while the agent starts (which only answers its client's hello).
#[derive(Clone)]
pub struct SystemPrompt {
    text: Arc<OnceLock<String>>,
    make: Arc<dyn Fn() -> String + Send + Sync>,
}

impl SystemPrompt {
    /// The prompt for a session in `cwd` with `tool_names` and `options`,
    /// except the coding-guidance addendum: whether it goes in is read
    /// from `home`'s `config.json` ([`ponytail_enabled`]) on
    /// first use, whatever `options.ponytail` says.
    pub fn lazy(
        cwd: PathBuf,
        tool_names: Vec<&'static str>,
        options: PromptOptions,
        home: PathBuf,
    ) -> SystemPrompt {
        SystemPrompt::made_by(move || {
            let options = PromptOptions {
                ponytail: ponytail_enabled(&home),
                ..options.clone()
            };
            system_prompt(&cwd, &tool_names, &options)
        })
    }

    /// A prompt made by `make` on first use.
    pub fn made_by(make: impl Fn() -> String + Send + Sync + 'static) -> SystemPrompt {
        SystemPrompt {
            text: Arc::new(OnceLock::new()),
            make: Arc::new(make),
        }
    }

    /// The prompt's text, assembled on this thread if this is its first
    /// use (blocking: it reads files).
    pub fn text(&self) -> &str {
        self.text.get_or_init(|| (self.make)())
    }

    /// The prompt's text, assembled on a blocking thread if this is its
    /// first use: a slow file system holds up the run that waits for it,
    /// not the agent's runtime (aborts, other requests, signals).
    pub async fn assembled(&self) -> String {
        if let Some(text) = self.text.get() {
            return text.clone();
        }
        let prompt = self.clone();
        match tokio::task::spawn_blocking(move || prompt.text().to_string()).await {
            Ok(text) => text,
            // No blocking thread to be had: here, then.
            Err(_) => self.text().to_string(),
        }
    }
}

impl fmt::Debug for SystemPrompt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SystemPrompt")
            .field("assembled", &self.text.get().is_some())
            .finish()
    }
}

/// `ponytail_enabled` from `HOME/config.json`: on unless it is `false`. A
/// missing or unreadable file means the default.
pub fn ponytail_enabled(home: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(home.join("config.json")) else {
        return true;
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(config) => config.get("ponytail_enabled") != Some(&serde_json::Value::Bool(false)),
        Err(e) => {
            tracing::warn!(error = %e, "ignoring unreadable config.json");
            true
        }
    }
}

/// Context files from the outermost ancestor down to the cwd.
fn context_files(cwd: &Path) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for dir in cwd.ancestors().take(MAX_ANCESTORS + 1) {
        if let Some(file) = CONTEXT_FILES
            .iter()
            .map(|name| dir.join(name))
            .find(|p| p.is_file())
        {
            if let Ok(bytes) = std::fs::read(&file) {
                let cut = &bytes[..bytes.len().min(MAX_CONTEXT_FILE)];
                found.push((
                    file.display().to_string(),
                    String::from_utf8_lossy(cut).into_owned(),
                ));
            }
        }
        if dir.join(".git").exists() {
            break;
        }
    }
    found.reverse();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_keeps_addenda_and_context_files_load_outermost_first() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("AGENTS.md"), "outer rules").unwrap();
        std::fs::write(root.join("sub/CLAUDE.md"), "inner rules").unwrap();
        let options = PromptOptions {
            replace: Some("CUSTOM".into()),
            append: Some("APPENDED".into()),
            ponytail: true,
            context_files: true,
        };
        let prompt = system_prompt(&root.join("sub"), &["read"], &options);
        assert!(prompt.starts_with("CUSTOM"));
        assert!(!prompt.contains("You are corral-agent"));
        assert!(prompt.contains("Coding guidance"));
        let outer = prompt.find("outer rules").unwrap();
        let inner = prompt.find("inner rules").unwrap();
        assert!(outer < inner);
        assert!(prompt.ends_with("APPENDED"));

        let plain = system_prompt(root, &[], &PromptOptions::default());
        assert!(plain.contains("You are corral-agent"));
        assert!(!plain.contains("Coding guidance"));
        assert!(!plain.contains("outer rules"));
    }

    #[test]
    fn ponytail_is_on_unless_explicitly_false() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ponytail_enabled(dir.path()));
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"ponytail_enabled": true}"#,
        )
        .unwrap();
        assert!(ponytail_enabled(dir.path()));
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"ponytail_enabled": false}"#,
        )
        .unwrap();
        assert!(!ponytail_enabled(dir.path()));
        std::fs::write(dir.path().join("config.json"), "{broken").unwrap();
        assert!(ponytail_enabled(dir.path()));
    }

    #[test]
    fn a_lazy_prompt_reads_its_files_on_first_use_and_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let (root, home) = (dir.path().join("p"), dir.path().join("home"));
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let options = PromptOptions {
            context_files: true,
            ..PromptOptions::default()
        };
        let prompt = SystemPrompt::lazy(root.clone(), vec!["read"], options, home.clone());
        // Written after the session started, before its first request.
        std::fs::write(root.join("AGENTS.md"), "late rules").unwrap();
        std::fs::write(home.join("config.json"), r#"{"ponytail_enabled": false}"#).unwrap();
        let copy = prompt.clone();
        let text = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(copy.assembled());
        assert!(text.contains("late rules"), "{text}");
        assert!(text.contains("Available tools: read."));
        assert!(!text.contains("Coding guidance"));
        std::fs::write(root.join("AGENTS.md"), "changed again").unwrap();
        assert_eq!(prompt.text(), text);
    }
}
