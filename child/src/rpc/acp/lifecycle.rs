//! The session's lifecycle: `session/new`, `session/load` (the history
//! replayed), `session/resume` (no replay), `session/close`,
//! `session/list` (this process's one session, once it has a
//! conversation) and `_corral/session/history` (the replay in pages,
//! sent as answers, the live session untouched).

use std::path::Path;

use corral_protocol::acp::{
    CloseSessionParams, ListSessionsParams, LoadSessionParams, NewSessionParams,
    ResumeSessionParams, SessionHistoryParams, SessionInfo, SessionModeState, SessionUpdate,
};
use serde_json::{json, Value};

use super::rpc::{self, RpcError};
use super::{commands, history, AcpServer};
use crate::transcript::{Block, Role};

/// Characters of the first prompt a session's title keeps.
const TITLE_CHARS: usize = 80;

impl AcpServer {
    pub(super) async fn new_session(
        &mut self,
        name: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        let params: NewSessionParams = rpc::params(name, params)?;
        self.check_cwd(&params.cwd);
        self.idle_for(name)?;
        self.use_editor_servers(&params.mcp_servers).await;
        if !self.agent.session().messages().is_empty() {
            self.agent
                .session()
                .clear()
                .map_err(|e| RpcError::internal(e.to_string()))?;
        }
        self.open();
        let mut answer = self.session_state();
        answer["sessionId"] = json!(self.session_id);
        Ok(answer)
    }

    pub(super) async fn load_session(
        &mut self,
        name: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        let params: LoadSessionParams = rpc::params(name, params)?;
        self.check_session(&params.session_id)?;
        self.check_cwd(&params.cwd);
        self.idle_for(name)?;
        self.use_editor_servers(&params.mcp_servers).await;
        for update in self.replay() {
            self.notify(&update).await;
        }
        self.open();
        Ok(self.session_state())
    }

    pub(super) async fn resume_session(
        &mut self,
        name: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        let params: ResumeSessionParams = rpc::params(name, params)?;
        self.check_session(&params.session_id)?;
        self.check_cwd(&params.cwd);
        self.use_editor_servers(&params.mcp_servers).await;
        self.open();
        Ok(self.session_state())
    }

    /// Cancels the work as `session/cancel` does and closes the session;
    /// closing a closed session is no error.
    pub(super) async fn close_session(
        &mut self,
        name: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        let params: CloseSessionParams = rpc::params(name, params)?;
        self.check_session(&params.session_id)?;
        if !self.closed {
            self.cancel().await;
            self.closed = true;
        }
        Ok(json!({}))
    }

    /// The one session, when it has a conversation (and lies in `cwd`,
    /// when the client asks for one directory). There is never a second
    /// page, so any cursor is one this agent did not give.
    pub(super) fn list_sessions(&self, name: &str, params: Value) -> Result<Value, RpcError> {
        let params: ListSessionsParams = if params.is_null() {
            ListSessionsParams::default()
        } else {
            rpc::params(name, params)?
        };
        if params.cursor.is_some() {
            return Err(RpcError::invalid_params(
                "invalid cursor: this agent gave none; list again without one",
            ));
        }
        let own = &self.agent.settings().cwd;
        let elsewhere = params
            .cwd
            .is_some_and(|cwd| Path::new(&cwd).canonicalize().ok().as_ref() != Some(own));
        let sessions = match self.session_info() {
            Some(info) if !elsewhere => vec![info],
            _ => Vec::new(),
        };
        Ok(json!({ "sessions": sessions }))
    }

    pub(super) fn history(&self, name: &str, params: Value) -> Result<Value, RpcError> {
        let params: SessionHistoryParams = rpc::params(name, params)?;
        self.check_session(&params.session_id)?;
        let updates = self.replay();
        let page = history::page(
            &self.session_id,
            &updates,
            params.cursor.as_deref(),
            history::PAGE_BYTES,
        )?;
        let mut answer = json!({ "updates": page.updates });
        if let Some(cursor) = page.next_cursor {
            answer["nextCursor"] = json!(cursor);
        }
        Ok(answer)
    }

    /// The conversation as `session/load` replays it.
    fn replay(&self) -> Vec<SessionUpdate> {
        let session = self.agent.session();
        history::replay(session.messages().iter(), &self.agent.settings().cwd)
    }

    /// Opens the session, and tells the client its commands after the
    /// answer (which names the session to a `session/new` client).
    fn open(&mut self) {
        self.closed = false;
        let commands = SessionUpdate::AvailableCommandsUpdate {
            available_commands: commands::available(),
        };
        self.after.push(self.update(&commands));
    }

    /// `modes` and `configOptions`, as `session/new`, `session/load` and
    /// `session/resume` answer them.
    fn session_state(&self) -> Value {
        let modes = SessionModeState::permission_modes(self.agent.permissions().mode());
        json!({"modes": modes, "configOptions": self.config_options()})
    }

    /// The session as `session/list` shows it: titled by its first
    /// prompt, updated when its last message was added.
    fn session_info(&self) -> Option<SessionInfo> {
        let session = self.agent.session();
        let messages = session.messages();
        let last = messages.iter().last()?;
        let title = messages
            .iter()
            .filter(|m| m.role == Role::User)
            .flat_map(|m| &m.content)
            .find_map(|block| match block {
                Block::Text { text } => text.lines().map(str::trim).find(|l| !l.is_empty()),
                _ => None,
            })
            .map(|line| line.chars().take(TITLE_CHARS).collect());
        Some(SessionInfo {
            session_id: self.session_id.clone(),
            cwd: self.agent.settings().cwd.to_string_lossy().into_owned(),
            title,
            updated_at: Some(last.time.clone()),
        })
    }
}
