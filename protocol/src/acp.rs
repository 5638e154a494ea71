//! Agent Client Protocol (ACP) v1 shared by the agent and the gateway:
//! JSON-RPC 2.0 constants, method names, and the shapes of the messages the
//! agent reads and writes. Field names follow the ACP schema (camelCase);
//! unknown fields (`_meta`, `annotations`, later additions) are ignored on
//! input, and optional ones are left out on output.
//!
//! Hand-written rather than taken from the `agent-client-protocol-schema`
//! crate: that crate needs a newer Rust than this workspace's, changes its
//! builder API often, and brings schemars and serde_with for the two dozen
//! shapes used here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version this agent speaks (answered to any higher one).
pub const PROTOCOL_VERSION: u16 = 1;
/// The `jsonrpc` member of every message.
pub const JSONRPC: &str = "2.0";

/// Method names.
pub mod method {
    pub const INITIALIZE: &str = "initialize";
    pub const AUTHENTICATE: &str = "authenticate";
    pub const SESSION_NEW: &str = "session/new";
    pub const SESSION_LOAD: &str = "session/load";
    pub const SESSION_PROMPT: &str = "session/prompt";
    pub const SESSION_CANCEL: &str = "session/cancel";
    pub const SESSION_SET_MODE: &str = "session/set_mode";
    pub const SESSION_SET_CONFIG_OPTION: &str = "session/set_config_option";
    pub const SESSION_LIST: &str = "session/list";
    pub const SESSION_RESUME: &str = "session/resume";
    pub const SESSION_CLOSE: &str = "session/close";
    /// corral's extension: the `session/update`s a `session/load` would
    /// replay, returned in pages instead of sent (for a gateway that
    /// replays a shared session into one connection).
    pub const CORRAL_SESSION_HISTORY: &str = "_corral/session/history";
    /// Agent → client notification.
    pub const SESSION_UPDATE: &str = "session/update";
    /// Agent → client request.
    pub const SESSION_REQUEST_PERMISSION: &str = "session/request_permission";
    /// Agent → client request (client capability `fs.readTextFile`).
    pub const FS_READ_TEXT_FILE: &str = "fs/read_text_file";
    /// Agent → client request (client capability `fs.writeTextFile`).
    pub const FS_WRITE_TEXT_FILE: &str = "fs/write_text_file";
}

/// JSON-RPC error codes.
pub mod error_code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
}

/// Why a prompt turn ended (`session/prompt`'s `stopReason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
}

/// A piece of content in a prompt, a message chunk or a tool result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    #[serde(rename_all = "camelCase")]
    Image {
        data: String,
        mime_type: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uri: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Audio {
        data: String,
        mime_type: String,
    },
    #[serde(rename_all = "camelCase")]
    ResourceLink {
        uri: String,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<i64>,
    },
    Resource {
        resource: EmbeddedResource,
    },
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> ContentBlock {
        ContentBlock::Text { text: text.into() }
    }
}

/// The contents of an embedded resource: text or base64 bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EmbeddedResource {
    #[serde(rename_all = "camelCase")]
    Text {
        uri: String,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Blob {
        uri: String,
        blob: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
}

/// What a tool call does, for the client's icon and grouping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    Read,
    Edit,
    Delete,
    Move,
    Search,
    Execute,
    Think,
    Fetch,
    SwitchMode,
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
}

/// Content produced by a tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolCallContent {
    Content {
        content: ContentBlock,
    },
    /// A file change; `old_text` absent means a new file.
    #[serde(rename_all = "camelCase")]
    Diff {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        old_text: Option<String>,
        new_text: String,
    },
}

/// A file (and line) a tool call works on, for "follow the agent".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallLocation {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// A new tool call (`sessionUpdate: tool_call`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub tool_call_id: String,
    pub title: String,
    pub kind: ToolKind,
    pub status: ToolCallStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ToolCallContent>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<ToolCallLocation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    /// Extension data; corral-agent puts the tool's own name in
    /// `_meta.corral.tool` (the title is for people).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

/// A change to a tool call (`sessionUpdate: tool_call_update`, and the
/// `toolCall` of a permission request): only the fields given change;
/// `content` and `locations` replace the previous ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallUpdate {
    pub tool_call_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ToolKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ToolCallStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ToolCallContent>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locations: Option<Vec<ToolCallLocation>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanEntryStatus {
    Pending,
    InProgress,
    Completed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanEntryPriority {
    High,
    Medium,
    Low,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanEntry {
    pub content: String,
    pub priority: PlanEntryPriority,
    pub status: PlanEntryStatus,
}

/// One `session/update` notification's `update`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "sessionUpdate", rename_all = "snake_case")]
pub enum SessionUpdate {
    UserMessageChunk {
        content: ContentBlock,
    },
    AgentMessageChunk {
        content: ContentBlock,
    },
    AgentThoughtChunk {
        content: ContentBlock,
    },
    ToolCall(ToolCall),
    ToolCallUpdate(ToolCallUpdate),
    /// The whole plan, replacing the previous one.
    Plan {
        entries: Vec<PlanEntry>,
    },
    #[serde(rename_all = "camelCase")]
    CurrentModeUpdate {
        current_mode_id: String,
    },
    /// The slash commands the agent runs (the whole list).
    #[serde(rename_all = "camelCase")]
    AvailableCommandsUpdate {
        available_commands: Vec<AvailableCommand>,
    },
    /// Every config option with its current value.
    #[serde(rename_all = "camelCase")]
    ConfigOptionUpdate {
        config_options: Vec<ConfigOption>,
    },
    /// Tokens in the context now, the model's context window, and what
    /// the session cost so far.
    UsageUpdate {
        used: u64,
        size: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<Cost>,
    },
}

/// A slash command (`/name`, typed as the prompt's text).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AvailableCommand {
    pub name: String,
    pub description: String,
    /// What may follow the name; `None` for a command that takes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<CommandInput>,
}

/// Free text after a command's name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandInput {
    pub hint: String,
}

/// A session setting the client may change (`session/set_config_option`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOption {
    pub id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `mode`, `model`, `thought_level`, … (for the client's layout only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(flatten)]
    pub kind: ConfigKind,
}

/// The kind of a config option, with its value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ConfigKind {
    /// One value out of a list.
    #[serde(rename_all = "camelCase")]
    Select {
        current_value: String,
        options: Vec<ConfigValue>,
    },
}

/// A value a select option may take.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigValue {
    pub value: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// An amount of money (`usage_update.cost`: the session's total so far).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub amount: f64,
    /// ISO 4217, e.g. `USD`.
    pub currency: String,
}

/// A choice offered by `session/request_permission`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOption {
    pub option_id: String,
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once` or `reject_always`.
    pub kind: crate::permission::PermissionOption,
}

/// The client's answer to `session/request_permission` (its `outcome`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum PermissionOutcome {
    Cancelled,
    #[serde(rename_all = "camelCase")]
    Selected {
        option_id: String,
    },
}

/// A session mode the agent offers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMode {
    pub id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// The `modes` of `session/new` and `session/load` answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionModeState {
    pub current_mode_id: String,
    pub available_modes: Vec<SessionMode>,
}

impl SessionModeState {
    /// The permission modes as session modes, `current` selected.
    pub fn permission_modes(current: crate::permission::PermissionMode) -> SessionModeState {
        SessionModeState {
            current_mode_id: current.as_str().to_string(),
            available_modes: crate::permission::PERMISSION_MODES
                .into_iter()
                .map(|mode| SessionMode {
                    id: mode.as_str().to_string(),
                    name: mode.title().to_string(),
                    description: Some(mode.description().to_string()),
                })
                .collect(),
        }
    }
}

/// The file-system methods a client offers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileSystemCapabilities {
    #[serde(default)]
    pub read_text_file: bool,
    #[serde(default)]
    pub write_text_file: bool,
}

/// What the client offers the agent (the parts this agent uses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientCapabilities {
    #[serde(default)]
    pub fs: FileSystemCapabilities,
    #[serde(default)]
    pub terminal: bool,
}

/// `initialize` params.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// Any number: a version above [`PROTOCOL_VERSION`] is answered with it.
    pub protocol_version: u64,
    #[serde(default, deserialize_with = "default_on_error")]
    pub client_capabilities: ClientCapabilities,
}

/// `session/new` params (`mcpServers` is read but not used).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionParams {
    pub cwd: String,
    #[serde(default)]
    pub mcp_servers: Vec<Value>,
}

/// `session/load` params.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadSessionParams {
    pub session_id: String,
    pub cwd: String,
    #[serde(default)]
    pub mcp_servers: Vec<Value>,
}

/// `session/prompt` params.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptParams {
    pub session_id: String,
    pub prompt: Vec<ContentBlock>,
}

/// `session/cancel` params.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelParams {
    pub session_id: String,
}

/// `session/set_mode` params.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetModeParams {
    pub session_id: String,
    pub mode_id: String,
}

/// `session/resume` params: like `session/load`, without the replay.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeSessionParams {
    pub session_id: String,
    pub cwd: String,
    #[serde(default)]
    pub mcp_servers: Vec<Value>,
}

/// `session/close` params.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloseSessionParams {
    pub session_id: String,
}

/// `session/list` params (all optional; `null` params read as none).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListSessionsParams {
    /// Only sessions in this directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Where the previous page ended (its `nextCursor`).
    #[serde(default)]
    pub cursor: Option<String>,
}

/// One session in a `session/list` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub session_id: String,
    pub cwd: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// `session/set_config_option` params. `value` is a value id (a string)
/// for select options, a boolean for boolean ones (`type: "boolean"`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetConfigOptionParams {
    pub session_id: String,
    pub config_id: String,
    pub value: Value,
}

/// `_corral/session/history` params.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionHistoryParams {
    pub session_id: String,
    /// Where the previous page ended (its `nextCursor`); none for the first.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// A capability object the schema says to read leniently: a malformed one
/// counts as absent.
fn default_on_error<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::de::DeserializeOwned,
{
    let value = Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn session_updates_have_the_schema_field_names() {
        let update = SessionUpdate::ToolCall(ToolCall {
            tool_call_id: "t1".into(),
            title: "Edit a.rs".into(),
            kind: ToolKind::Edit,
            status: ToolCallStatus::Pending,
            content: vec![ToolCallContent::Diff {
                path: "/p/a.rs".into(),
                old_text: Some("a".into()),
                new_text: "b".into(),
            }],
            locations: vec![ToolCallLocation {
                path: "/p/a.rs".into(),
                line: None,
            }],
            raw_input: Some(json!({"path": "a.rs"})),
            meta: Some(json!({"corral": {"tool": "edit"}})),
        });
        assert_eq!(
            serde_json::to_value(update).unwrap(),
            json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Edit a.rs",
                   "kind": "edit", "status": "pending",
                   "content": [{"type": "diff", "path": "/p/a.rs", "oldText": "a", "newText": "b"}],
                   "locations": [{"path": "/p/a.rs"}], "rawInput": {"path": "a.rs"},
                   "_meta": {"corral": {"tool": "edit"}}})
        );
        let chunk = SessionUpdate::AgentThoughtChunk {
            content: ContentBlock::text("hm"),
        };
        assert_eq!(
            serde_json::to_value(chunk).unwrap(),
            json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}})
        );
        let mode = SessionUpdate::CurrentModeUpdate {
            current_mode_id: "ask".into(),
        };
        assert_eq!(
            serde_json::to_value(mode).unwrap(),
            json!({"sessionUpdate": "current_mode_update", "currentModeId": "ask"})
        );
    }

    #[test]
    fn prompt_blocks_parse_ignoring_unknown_fields() {
        let params: PromptParams = serde_json::from_value(json!({
            "sessionId": "s", "_meta": {},
            "prompt": [
                {"type": "text", "text": "hi", "annotations": {"priority": 1}},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "file:///a", "name": "a"},
                {"type": "resource", "resource": {"uri": "file:///b", "text": "B", "mimeType": "text/plain"}},
                {"type": "resource", "resource": {"uri": "file:///c", "blob": "AAAA"}}
            ]
        }))
        .unwrap();
        assert_eq!(params.prompt.len(), 5);
        assert!(matches!(
            &params.prompt[3],
            ContentBlock::Resource { resource: EmbeddedResource::Text { text, .. } } if text == "B"
        ));
        assert!(matches!(
            &params.prompt[4],
            ContentBlock::Resource {
                resource: EmbeddedResource::Blob { .. }
            }
        ));
    }

    #[test]
    fn outcomes_and_capabilities_read_as_the_sdk_writes_them() {
        let selected: PermissionOutcome =
            serde_json::from_value(json!({"outcome": "selected", "optionId": "allow_once"}))
                .unwrap();
        assert_eq!(
            selected,
            PermissionOutcome::Selected {
                option_id: "allow_once".into()
            }
        );
        let init: InitializeParams = serde_json::from_value(json!({
            "protocolVersion": 7,
            "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": false}, "terminal": true}
        }))
        .unwrap();
        assert!(init.client_capabilities.fs.read_text_file);
        assert!(!init.client_capabilities.fs.write_text_file);
        let lenient: InitializeParams =
            serde_json::from_value(json!({"protocolVersion": 1, "clientCapabilities": {"fs": 3}}))
                .unwrap();
        assert_eq!(lenient.client_capabilities, ClientCapabilities::default());
    }

    #[test]
    fn v1_session_updates_and_options_have_the_schema_shapes() {
        let commands = SessionUpdate::AvailableCommandsUpdate {
            available_commands: vec![AvailableCommand {
                name: "compact".into(),
                description: "Summarise".into(),
                input: None,
            }],
        };
        assert_eq!(
            serde_json::to_value(commands).unwrap(),
            json!({"sessionUpdate": "available_commands_update",
                   "availableCommands": [{"name": "compact", "description": "Summarise"}]})
        );
        let option = ConfigOption {
            id: "model".into(),
            name: "Model".into(),
            description: None,
            category: Some("model".into()),
            kind: ConfigKind::Select {
                current_value: "a".into(),
                options: vec![ConfigValue {
                    value: "a".into(),
                    name: "A".into(),
                    description: None,
                }],
            },
        };
        assert_eq!(
            serde_json::to_value(SessionUpdate::ConfigOptionUpdate {
                config_options: vec![option]
            })
            .unwrap(),
            json!({"sessionUpdate": "config_option_update", "configOptions": [
                {"id": "model", "name": "Model", "category": "model", "type": "select",
                 "currentValue": "a", "options": [{"value": "a", "name": "A"}]}]})
        );
        let usage = SessionUpdate::UsageUpdate {
            used: 10,
            size: 100,
            cost: Some(Cost {
                amount: 0.5,
                currency: "USD".into(),
            }),
        };
        assert_eq!(
            serde_json::to_value(usage).unwrap(),
            json!({"sessionUpdate": "usage_update", "used": 10, "size": 100,
                   "cost": {"amount": 0.5, "currency": "USD"}})
        );
        let set: SetConfigOptionParams = serde_json::from_value(
            json!({"sessionId": "s", "configId": "model", "value": "a", "_meta": {}}),
        )
        .unwrap();
        assert_eq!(set.value, json!("a"));
        let list: ListSessionsParams = serde_json::from_value(json!({})).unwrap();
        assert_eq!(list, ListSessionsParams::default());
    }
}
