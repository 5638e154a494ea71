//! The project's MCP servers as the hub keeps them: what the agent
//! reports (states for the admin API, MCP calls for the metrics), what
//! clients selected for the project's session (sent to the agent as the
//! dialect's select request, and again to every new child, since a
//! selection lasts as long as the agent process), and what `initialize`
//! advertises. Only the operator's servers are ever selected or counted.

use std::time::Instant;

use serde_json::{json, Value};

use super::actor::Hub;
use super::client_id::ClientId;
use crate::mcp::status::Tracked;
use crate::mcp::{EditorServer, McpNews, Selection};

impl Hub {
    /// A line of the agent's events: MCP news, if any.
    pub(super) fn mcp_reported(&mut self, line: &[u8]) {
        if self.settings.mcp.servers.is_empty() {
            return;
        }
        let calls_open = self.mcp.calls_open();
        let Some(news) = self.settings.dialect.rules().mcp_news(line, calls_open) else {
            return;
        };
        self.mcp_news(news);
    }

    fn mcp_news(&mut self, news: McpNews) {
        let policy = self.settings.mcp.clone();
        match self.mcp.take(news, &policy.servers, Instant::now()) {
            Tracked::Nothing => {}
            Tracked::Servers => self.publish(),
            Tracked::CallEnded {
                server,
                ok,
                seconds,
            } => self.settings.metrics.mcp_call(&server, ok, seconds),
        }
    }

    /// A new child is ready: its servers are not known yet, the gateway's
    /// MCP capabilities go into its hello, and the project's selection is
    /// sent to it again.
    pub(super) fn mcp_child_started(&mut self) {
        self.mcp.clear();
        let Some(sessions) = self.settings.dialect.rules().one_session() else {
            return;
        };
        if self.settings.child_command.is_some() {
            // A third-party agent gets no operator servers, so a client
            // may select none.
            sessions.honour_mcp(&mut self.hello, false);
            return;
        }
        sessions.honour_mcp(&mut self.hello, self.settings.mcp.selectable_http());
        if !self.mcp_selected.is_empty() {
            let servers = self.mcp_selected.clone();
            self.send_mcp_select(&servers);
        }
    }

    /// The child is gone, its servers with it.
    pub(super) fn mcp_child_gone(&mut self) {
        self.mcp.clear();
        self.publish();
    }

    /// A client opening the session named `asked`: matched against the
    /// operator's servers, the matched ones selected for the project's
    /// session. Returns what the answer says (`None` when the client
    /// named nothing and nothing can be selected) and the notice of what
    /// was refused, which goes out after the answer.
    pub(super) fn mcp_open(
        &mut self,
        client: ClientId,
        asked: &[EditorServer],
    ) -> (Option<Value>, Option<String>) {
        if asked.is_empty() {
            return (None, None);
        }
        let selection = match self.settings.child_command {
            Some(_) => Selection {
                selected: Vec::new(),
                refused: crate::mcp::selection::select(
                    &Default::default(),
                    crate::mcp::ClientMcp::Off,
                    asked,
                )
                .refused,
            },
            None => self.settings.mcp.select(asked),
        };
        let new: Vec<String> = selection
            .selected
            .iter()
            .filter(|name| !self.mcp_selected.contains(name))
            .cloned()
            .collect();
        if !new.is_empty() {
            self.mcp_selected.extend(new.iter().cloned());
            tracing::info!(project = %self.project, servers = ?new, "MCP servers selected for the session");
            self.send_mcp_select(&new);
        }
        if !selection.refused.is_empty() {
            let who = self.clients.get(client).map(|c| c.who.name.clone());
            let refused: Vec<&str> = selection.refused.iter().map(|r| r.name.as_str()).collect();
            tracing::info!(project = %self.project, actor = ?who, ?refused, "MCP servers a client named were refused");
        }
        (Some(selection.to_json()), selection.notice())
    }

    /// Tells everyone in the session what a client's servers came to.
    pub(super) fn mcp_notice(&mut self, notice: Option<String>, outcome: Option<Value>) {
        if let (Some(message), Some(outcome)) = (notice, outcome) {
            self.emit(
                "mcp_refused",
                json!({"message": message, "refused": outcome["refused"]}),
            );
        }
    }

    /// Sends the dialect's select request for `servers` (a child that is
    /// not ready gets the whole selection when it is).
    fn send_mcp_select(&mut self, servers: &[String]) {
        let Some(sessions) = self.settings.dialect.rules().one_session() else {
            return;
        };
        if self.supervision.ready_mut().is_none() {
            return;
        }
        let gid = self.mint.mcp();
        let line = sessions.mcp_select(&gid.to_string(), servers);
        if let Err(refused) = self.send_line(line) {
            tracing::warn!(project = %self.project, ?refused, "cannot send the MCP selection to the agent");
        }
    }

    /// The agent's answer to a selection: the servers' states, or why it
    /// could not.
    pub(super) fn mcp_select_answered(&mut self, line: &[u8]) {
        let Some(sessions) = self.settings.dialect.rules().one_session() else {
            return;
        };
        match sessions.mcp_selected(line) {
            Ok(servers) => self.mcp_news(McpNews::Status(servers)),
            Err(why) => {
                tracing::warn!(project = %self.project, "the agent did not select the MCP servers: {why}");
                self.emit(
                    "error",
                    json!({"message": format!("the agent could not start the selected MCP servers: {why}")}),
                );
            }
        }
    }
}
