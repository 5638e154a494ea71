//! Inbound commands: `{"cmd": name, "id"?: token, ...}` parsed into
//! [`Command`], and the `hello` protocol check. Pure, no I/O.

use corral_protocol::permission::{PermissionMode, PermissionOption, UnknownPermissionMode};
use serde_json::{Map, Value};

use super::wire::PROTOCOL;

/// One parsed command line.
#[derive(Debug, PartialEq)]
pub struct Command {
    /// Echoed on the command's `ack` / `done` / `error`; `null` when absent.
    pub id: Value,
    pub kind: Kind,
}

#[derive(Debug, PartialEq)]
pub enum Kind {
    Hello {
        protocol: String,
    },
    Prompt {
        text: String,
    },
    Steer {
        text: String,
    },
    FollowUp {
        text: String,
    },
    Abort,
    Reset,
    Bye,
    /// Extension: answers a `permission_request` event.
    PermissionReply {
        request_id: String,
        option: PermissionOption,
    },
    /// Extension: changes the permission mode.
    SetPermissionMode {
        mode: PermissionMode,
    },
    /// Extension: starts MCP servers defined with `"default": false`.
    McpSelect {
        servers: Option<Value>,
    },
}

/// A line that is an object but not a valid command (always recoverable).
#[derive(Debug, PartialEq)]
pub struct BadCommand {
    pub id: Value,
    pub message: String,
}

/// Why a `hello` is refused (fatal).
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("protocol mismatch: the host speaks {given:?}, this child speaks {PROTOCOL}")]
pub struct ProtocolMismatch {
    pub given: String,
}

pub fn parse(mut object: Map<String, Value>) -> Result<Command, BadCommand> {
    let id = object.remove("id").unwrap_or(Value::Null);
    let bad = |message: String| BadCommand {
        id: id.clone(),
        message,
    };
    let name = match object.get("cmd") {
        Some(Value::String(name)) => name.clone(),
        Some(_) => return Err(bad("`cmd` must be a string".into())),
        None => return Err(bad("missing `cmd`".into())),
    };
    let text = |object: &Map<String, Value>| match object.get("text") {
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(text.clone()),
        Some(Value::String(_)) => Err(bad(format!("`{name}`: `text` is empty"))),
        _ => Err(bad(format!("`{name}` needs a string `text`"))),
    };
    let kind = match name.as_str() {
        "hello" => match object.get("protocol") {
            Some(Value::String(protocol)) => Kind::Hello {
                protocol: protocol.clone(),
            },
            _ => return Err(bad("`hello` needs a string `protocol`".into())),
        },
        "prompt" => Kind::Prompt {
            text: text(&object)?,
        },
        "steer" => Kind::Steer {
            text: text(&object)?,
        },
        "follow_up" => Kind::FollowUp {
            text: text(&object)?,
        },
        "abort" => Kind::Abort,
        "mcp_select" => Kind::McpSelect {
            servers: object.remove("servers"),
        },
        "reset" => Kind::Reset,
        "bye" => Kind::Bye,
        "permission_reply" => {
            let field = |key: &str| match object.get(key) {
                Some(Value::String(value)) => Ok(value.clone()),
                _ => Err(bad(format!("`permission_reply` needs a string `{key}`"))),
            };
            let request_id = field("request_id")?;
            let option = field("option")?.parse().map_err(bad)?;
            Kind::PermissionReply { request_id, option }
        }
        "set_permission_mode" => match object.get("mode") {
            Some(Value::String(mode)) => Kind::SetPermissionMode {
                mode: mode
                    .parse()
                    .map_err(|e: UnknownPermissionMode| bad(e.to_string()))?,
            },
            _ => return Err(bad("`set_permission_mode` needs a string `mode`".into())),
        },
        other => return Err(bad(format!("unknown command {other:?}"))),
    };
    Ok(Command { id, kind })
}

/// Accepts `letscode-rpc/1` and any `letscode-rpc/1.x` (same major).
pub fn check_protocol(given: &str) -> Result<(), ProtocolMismatch> {
    if corral_protocol::letscode::speaks(given) {
        return Ok(());
    }
    Err(ProtocolMismatch {
        given: given.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn permission_commands_parse_and_bad_ones_keep_their_id() {
        let reply = parse_json(
            json!({"cmd":"permission_reply","id":"c1","request_id":"perm-2","option":"reject_once"}),
        )
        .unwrap();
        assert_eq!(
            reply.kind,
            Kind::PermissionReply {
                request_id: "perm-2".into(),
                option: PermissionOption::RejectOnce
            }
        );
        let mode = parse_json(json!({"cmd":"set_permission_mode","mode":"ask"})).unwrap();
        assert_eq!(
            mode.kind,
            Kind::SetPermissionMode {
                mode: PermissionMode::Ask
            }
        );
        let bad =
            parse_json(json!({"cmd":"set_permission_mode","id":7,"mode":"never"})).unwrap_err();
        assert_eq!(bad.id, json!(7));
        assert!(bad.message.contains("read-only"), "{}", bad.message);
        assert!(parse_json(json!({"cmd":"permission_reply","request_id":"p"})).is_err());
    }

    fn parse_json(v: Value) -> Result<Command, BadCommand> {
        match v {
            Value::Object(o) => parse(o),
            _ => unreachable!(),
        }
    }

    #[test]
    fn parses_every_command() {
        let p = parse_json(json!({"cmd":"prompt","id":"r1","text":"hi"})).unwrap();
        assert_eq!(p.id, json!("r1"));
        assert_eq!(p.kind, Kind::Prompt { text: "hi".into() });
        let s = parse_json(json!({"cmd":"steer","text":"x"})).unwrap();
        assert_eq!(
            (s.id, s.kind),
            (Value::Null, Kind::Steer { text: "x".into() })
        );
        for (name, kind) in [
            ("abort", Kind::Abort),
            ("reset", Kind::Reset),
            ("bye", Kind::Bye),
        ] {
            assert_eq!(
                parse_json(json!({"cmd": name, "id": 7})).unwrap().kind,
                kind
            );
        }
        assert!(matches!(
            parse_json(json!({"cmd":"follow_up","text":"y"}))
                .unwrap()
                .kind,
            Kind::FollowUp { .. }
        ));
    }

    #[test]
    fn rejects_unknown_and_malformed_commands_keeping_the_id() {
        let e = parse_json(json!({"cmd":"dance","id":"d"})).unwrap_err();
        assert_eq!(e.id, json!("d"));
        assert!(e.message.contains("unknown command"), "{}", e.message);
        assert!(parse_json(json!({"id":1})).is_err());
        assert!(parse_json(json!({"cmd":"prompt","text":"  "})).is_err());
        assert!(parse_json(json!({"cmd":"prompt"})).is_err());
        assert!(parse_json(json!({"cmd":"hello"})).is_err());
    }

    #[test]
    fn protocol_check_is_by_major() {
        assert!(check_protocol("letscode-rpc/1").is_ok());
        assert!(check_protocol("letscode-rpc/1.3").is_ok());
        assert!(check_protocol("letscode-rpc/2").is_err());
        assert!(check_protocol("letscode-rpc/10").is_err());
        assert!(check_protocol("zut/1").is_err());
    }
}
